//! `--to` addresses: which broker, where, and what to publish to.
//!
//! - `amqp://[user:pass@]host[:port]/[vhost]?exchange=X&routing_key=Y`
//!   (`amqps://` too); `exchange` may be empty (the default exchange, then
//!   `routing_key` is a queue's name); other query fields (`heartbeat`,
//!   `frame_max`, …) go to the AMQP client.
//! - `nats://[user:pass@]host[:port]?subject=S`.

use url::Url;

use crate::amqp::{AmqpSink, AmqpTarget};
use crate::nats::{NatsSink, NatsTarget};
use crate::sink::{Confirmed, Sink, SinkError, TargetError};

/// A parsed `--to` address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// RabbitMQ.
    Amqp(AmqpTarget),
    /// NATS JetStream.
    Nats(NatsTarget),
}

impl Target {
    /// Parses a `--to` address (nothing is contacted).
    ///
    /// # Errors
    ///
    /// [`TargetError::Invalid`], saying what is wrong.
    pub fn parse(address: &str) -> Result<Target, TargetError> {
        let shown = rmq::redact(address);
        let invalid = |why: &str| TargetError::Invalid(format!("{why} (in {shown:?})"));
        let url = Url::parse(address).map_err(|e| invalid(&e.to_string()))?;
        if url.host_str().is_none_or(str::is_empty) {
            return Err(invalid("no host"));
        }
        let mut exchange = None;
        let mut routing_key = None;
        let mut subject = None;
        let mut rest = Vec::new();
        for (k, v) in url.query_pairs() {
            match k.as_ref() {
                "exchange" => exchange = Some(v.into_owned()),
                "routing_key" => routing_key = Some(v.into_owned()),
                "subject" => subject = Some(v.into_owned()),
                _ => rest.push((k.into_owned(), v.into_owned())),
            }
        }
        match url.scheme() {
            "amqp" | "amqps" => {
                if subject.is_some() {
                    return Err(invalid(
                        "an AMQP address takes exchange and routing_key, not subject",
                    ));
                }
                let Some(exchange) = exchange else {
                    return Err(invalid(
                        "exchange= is missing (empty for the default exchange)",
                    ));
                };
                let routing_key = routing_key.unwrap_or_default();
                if exchange.is_empty() && routing_key.is_empty() {
                    return Err(invalid("the default exchange needs routing_key=<queue>"));
                }
                // AMQP short strings: at most 255 bytes.
                if exchange.len() > 255 || routing_key.len() > 255 {
                    return Err(invalid("exchange and routing_key take at most 255 bytes"));
                }
                let mut uri = url.clone();
                uri.set_query(None);
                if !rest.is_empty() {
                    uri.query_pairs_mut().extend_pairs(&rest);
                }
                Ok(Target::Amqp(AmqpTarget {
                    uri: uri.to_string(),
                    exchange,
                    routing_key,
                }))
            }
            "nats" | "tls" => {
                if exchange.is_some() || routing_key.is_some() || !rest.is_empty() {
                    return Err(invalid("a NATS address takes only subject="));
                }
                let Some(subject) = subject.filter(|s| valid_subject(s) && s.len() <= 255) else {
                    return Err(invalid(
                        "subject= is missing or not a subject to publish to",
                    ));
                };
                let mut server = url.clone();
                server.set_query(None);
                Ok(Target::Nats(NatsTarget {
                    server: server.to_string(),
                    subject,
                }))
            }
            other => Err(invalid(&format!(
                "unknown scheme {other:?}: use amqp:// or nats://"
            ))),
        }
    }

    /// Connects to the broker and checks that what it names exists.
    ///
    /// # Errors
    ///
    /// [`TargetError::Unreachable`] or [`TargetError::Missing`].
    pub async fn connect(&self) -> Result<AnySink, TargetError> {
        Ok(match self {
            Target::Amqp(t) => AnySink::Amqp(AmqpSink::connect(t.clone()).await?),
            Target::Nats(t) => AnySink::Nats(NatsSink::connect(t.clone()).await?),
        })
    }
}

impl std::fmt::Display for Target {
    /// The address without its password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Amqp(t) => write!(
                f,
                "{} exchange {:?} routing key {:?}",
                rmq::redact(&t.uri),
                t.exchange,
                t.routing_key
            ),
            Target::Nats(t) => write!(f, "{} subject {}", rmq::redact(&t.server), t.subject),
        }
    }
}

/// A subject a message can be published to: dot-separated tokens, no
/// wildcards, no spaces.
fn valid_subject(s: &str) -> bool {
    !s.is_empty()
        && s.split('.')
            .all(|t| !t.is_empty() && t != "*" && t != ">" && !t.chars().any(|c| c.is_whitespace()))
}

/// The sink a [`Target`] connects to.
#[allow(clippy::large_enum_variant)] // one per forwarder, never moved on a hot path
pub enum AnySink {
    /// RabbitMQ.
    Amqp(AmqpSink),
    /// NATS JetStream.
    Nats(NatsSink),
}

impl Sink for AnySink {
    async fn publish(&self, msg: &rmq::Received) -> Result<Confirmed, SinkError> {
        match self {
            AnySink::Amqp(s) => s.publish(msg).await,
            AnySink::Nats(s) => s.publish(msg).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Target, TargetError> {
        Target::parse(s)
    }

    #[test]
    fn an_amqp_address_names_exchange_and_routing_key_and_keeps_the_rest_for_the_client() {
        let t = parse("amqp://u:p@127.0.0.1:5673/%2f?exchange=due&routing_key=jobs&heartbeat=10")
            .expect("valid");
        assert_eq!(
            t,
            Target::Amqp(AmqpTarget {
                uri: "amqp://u:p@127.0.0.1:5673/%2f?heartbeat=10".into(),
                exchange: "due".into(),
                routing_key: "jobs".into(),
            })
        );
        let q = parse("amqp://127.0.0.1/%2f?exchange=&routing_key=q1").expect("valid");
        assert!(matches!(q, Target::Amqp(a) if a.exchange.is_empty() && a.routing_key == "q1"));
    }

    #[test]
    fn a_nats_address_names_one_subject() {
        assert_eq!(
            parse("nats://127.0.0.1:4223?subject=orders.due").expect("valid"),
            Target::Nats(NatsTarget {
                server: "nats://127.0.0.1:4223".into(),
                subject: "orders.due".into(),
            })
        );
    }

    #[test]
    fn bad_addresses_are_refused_with_the_reason() {
        let long_key = format!(
            "amqp://127.0.0.1/%2f?exchange=x&routing_key={}",
            "k".repeat(256)
        );
        for (address, why) in [
            ("127.0.0.1:5672", "relative URL"),
            ("http://127.0.0.1/?subject=a", "unknown scheme"),
            ("amqp://127.0.0.1/%2f?routing_key=q", "exchange= is missing"),
            ("amqp://127.0.0.1/%2f?exchange=", "default exchange needs"),
            ("amqp://127.0.0.1/%2f?exchange=x&subject=s", "not subject"),
            ("nats://127.0.0.1:4222", "subject= is missing"),
            ("nats://127.0.0.1:4222?subject=a.*", "subject= is missing"),
            ("nats://127.0.0.1:4222?subject=a..b", "subject= is missing"),
            ("nats://127.0.0.1:4222?subject=a&exchange=x", "only subject"),
            ("nats://?subject=a", "no host"),
            ("amqp://u:secret@127.0.0.1/%2f", "exchange= is missing"),
            (&long_key, "at most 255 bytes"),
        ] {
            match parse(address) {
                Err(TargetError::Invalid(e)) => {
                    assert!(e.contains(why), "{address}: {e}");
                    assert!(!e.contains("secret"), "the password is shown: {e}");
                }
                other => panic!("{address}: {other:?}"),
            }
        }
    }
}
