//! What HTTP take and settle share across requests: one on-demand taker
//! per topic (the library's engine: it takes only while clients wait, and
//! many waiting clients cost one look at Redis, not one each), and the
//! prefix's receipt key, read from Redis once (every server of the prefix
//! reads the same one, so a receipt one server gave out settles through
//! another).

use std::collections::HashMap;
use std::sync::Mutex;

use rmq::{OnDemand, ReceiptKey, Topic, TopicKind};
use tokio::sync::OnceCell;

#[derive(Default)]
pub(crate) struct Takers {
    by_topic: Mutex<HashMap<String, Taker>>,
    key: OnceCell<ReceiptKey>,
}

struct Taker {
    /// The definition it was made for: a topic deleted and defined anew
    /// with other slots or another kind gets a new engine.
    shape: (TopicKind, u32),
    engine: OnDemand,
}

impl Takers {
    /// The topic's taker, made on first use.
    pub(crate) fn of(&self, topic: &Topic) -> OnDemand {
        let spec = topic.spec();
        let shape = (spec.kind, spec.slots);
        let mut map = self.by_topic.lock().unwrap_or_else(|p| p.into_inner());
        match map.get(topic.name()) {
            Some(t) if t.shape == shape => t.engine.clone(),
            _ => {
                let engine = topic.on_demand();
                map.insert(
                    topic.name().to_string(),
                    Taker {
                        shape,
                        engine: engine.clone(),
                    },
                );
                engine
            }
        }
    }

    /// The prefix's receipt key (read once; a failed read is tried again
    /// by the next request).
    pub(crate) async fn key(&self, client: &rmq::Client) -> rmq::Result<&ReceiptKey> {
        self.key.get_or_try_init(|| client.receipt_key()).await
    }
}
