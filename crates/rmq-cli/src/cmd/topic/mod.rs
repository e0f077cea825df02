//! `rmq topic create|list|show|update|delete|pause|resume`: topic
//! definitions, their settings and end, and stopping and starting
//! deliveries of a whole topic.
//!
//! `create` is idempotent: defining a topic exactly as it already is succeeds
//! (so deploy scripts can run it every time), while a different definition
//! under the same name is refused by the library and changes nothing.
//! Options not given keep the library's defaults ([`TopicSpec::new`]).

use clap::Subcommand;
use rmq::{ErrorKind, TopicSpec};
use serde::Serialize;

use crate::output::Out;
use crate::{connect, CliError, CliResult, Global};

mod settings;
mod show;
pub use settings::{CreateArgs, UpdateArgs};
pub use show::describe;
use show::{list, show};

#[derive(Debug, Subcommand)]
pub enum TopicCmd {
    /// Define a topic (succeeds when it already exists exactly so)
    Create(CreateArgs),
    /// Every topic under the prefix, with its counts
    List,
    /// One topic's definition and counts
    Show {
        /// Topic name
        topic: String,
    },
    /// Stop every consumer (any process) from starting new deliveries;
    /// in-flight ones finish, sends go on
    Pause {
        /// Topic name
        topic: String,
    },
    /// Let consumers take again (idle ones wake at once)
    Resume {
        /// Topic name
        topic: String,
    },
    /// Change settings (running consumers follow within seconds); the kind
    /// and slot count never change
    Update(UpdateArgs),
    /// Count a bounded topic's messages again and make that its bound's
    /// count (when processes died between reserving room and sending, the
    /// count stays too high and the topic refuses early)
    Recount {
        /// Topic name
        topic: String,
    },
    /// Delete a topic and every message it holds (refused while it holds
    /// messages or has consumers, unless --force)
    Delete {
        /// Topic name
        topic: String,
        /// Delete even with messages or live consumers (they stop)
        #[arg(long)]
        force: bool,
    },
}

pub async fn run(g: &Global, cmd: TopicCmd) -> CliResult {
    let out = Out { json: g.json };
    match cmd {
        TopicCmd::Create(a) => create(g, out, a).await,
        TopicCmd::List => list(g, out).await,
        TopicCmd::Show { topic } => show(g, out, &topic).await,
        TopicCmd::Update(a) => update(g, out, a).await,
        TopicCmd::Delete { topic, force } => delete(g, out, &topic, force).await,
        TopicCmd::Pause { topic } => pause(g, out, &topic, true).await,
        TopicCmd::Resume { topic } => pause(g, out, &topic, false).await,
        TopicCmd::Recount { topic } => recount(g, out, &topic).await,
    }
}

async fn recount(g: &Global, out: Out, name: &str) -> CliResult {
    let (_client, topic) = connect::topic(g, name).await?;
    let before = topic.bound_usage().await?;
    let Some((after, bound)) = topic.recount_bound().await? else {
        return Err(CliError::usage(format!(
            "topic {name:?} is not bounded (set one with `rmq topic update {name} --max-pending N`); nothing was changed"
        )));
    };
    #[derive(Serialize)]
    struct RecountJson {
        before: Option<u64>,
        after: u64,
        bound: u64,
    }
    let before = before.map(|(held, _)| held);
    out.either(
        &RecountJson {
            before,
            after,
            bound,
        },
        || {
            format!(
                "topic {name:?}: {after} messages counted against its bound of {bound} (was {})",
                before.map_or_else(|| "none".to_string(), |b| b.to_string())
            )
        },
    )
}

async fn update(g: &Global, out: Out, a: UpdateArgs) -> CliResult {
    if a.kind.is_some() || a.slots.is_some() {
        return Err(CliError::usage(format!(
            "the kind and slot count of topic {:?} never change (they decide where every \
             message lives): create a new topic instead; nothing was changed",
            a.topic
        )));
    }
    if !a.settings.any() {
        return Err(CliError::usage(
            "give at least one setting to change (see `rmq topic update --help`)",
        ));
    }
    let client = connect::client(g).await?;
    let topic = client
        .update_topic(&a.topic, |s| a.settings.apply(s))
        .await?;
    let s = topic.spec();
    out.either(&*s, || {
        format!(
            "updated topic {:?}: {} (running consumers follow within seconds)",
            s.name,
            describe(&s)
        )
    })
}

async fn delete(g: &Global, out: Out, name: &str, force: bool) -> CliResult {
    let client = connect::client(g).await?;
    let d = client.delete_topic(name, force).await?;
    #[derive(Serialize)]
    struct DeletedJson<'a> {
        topic: &'a str,
        deleted: bool,
        messages: u64,
        slots: u32,
    }
    out.either(
        &DeletedJson {
            topic: name,
            deleted: true,
            messages: d.messages,
            slots: d.slots,
        },
        || {
            format!(
                "deleted topic {name:?} ({} slots, {} messages removed)",
                d.slots, d.messages
            )
        },
    )
}

async fn pause(g: &Global, out: Out, name: &str, pause: bool) -> CliResult {
    let (_client, topic) = connect::topic(g, name).await?;
    let r = if pause {
        topic.pause().await?
    } else {
        topic.resume().await?
    };
    #[derive(Serialize)]
    struct Paused<'a> {
        topic: &'a str,
        paused: bool,
        slots: u32,
        were_paused: u32,
        server_ms: i64,
    }
    out.either(
        &Paused {
            topic: name,
            paused: pause,
            slots: r.slots,
            were_paused: r.were_paused,
            server_ms: r.server_ms,
        },
        || match (pause, r.were_paused == r.slots, r.were_paused) {
            (true, true, _) => format!("topic {name:?} was already paused (all {} slots)", r.slots),
            (true, false, _) => format!(
                "paused topic {name:?} ({} slots): no consumer starts a new delivery until \
                 `rmq topic resume {name}`; deliveries in flight finish, sends go on",
                r.slots
            ),
            (false, _, 0) => format!("topic {name:?} was not paused"),
            (false, _, _) => format!(
                "resumed topic {name:?} ({} of {} slots were paused): consumers take again",
                r.were_paused, r.slots
            ),
        },
    )
}

async fn create(g: &Global, out: Out, a: CreateArgs) -> CliResult {
    let spec = a.spec();
    // Check locally first: a bad definition is refused before connecting.
    spec.validate()?;
    let client = connect::client(g).await?;
    // Only to say "created" or "already defined": define_topic does not tell.
    let existed = match client.topic(&spec.name).await {
        Ok(_) => true,
        Err(e) if e.kind() == ErrorKind::UnknownTopic => false,
        Err(e) => return Err(e.into()),
    };
    let topic = client.define_topic(spec).await?;
    let s = topic.spec();
    #[derive(Serialize)]
    struct Created<'a> {
        created: bool,
        #[serde(flatten)]
        spec: &'a TopicSpec,
    }
    out.either(
        &Created {
            created: !existed,
            spec: &s,
        },
        || {
            if existed {
                format!(
                    "topic {:?} already exists exactly so (unchanged): {}",
                    s.name,
                    describe(&s)
                )
            } else {
                format!("created topic {:?}: {}", s.name, describe(&s))
            }
        },
    )
}
