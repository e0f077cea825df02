//! Every script reply code, decoded in one place: callers match on
//! [`ErrorKind`]s and typed outcomes, never on numbers. The codes are the
//! contract headers' (`lua/*.lua`); a unit test holds each table against
//! its script's header. (The `RMQ_*` error names are decoded with every
//! other Redis error, in `crate::error`; a test here checks that each name a
//! script replies with has a kind.)

use crate::error::{Error, ErrorKind, Result};
use crate::outcome::{Moved, Sent, Settled};

/// One message's code in a send reply (send.lua): 1 new, 2 merged into a
/// pending message, 3 new behind the same key in flight, 4 merged into the
/// message waiting behind it; -1 due in the past, -2 payload too large,
/// -3 invalid spec, -4 the topic is full. `at` says where the message
/// stands (see [`SentAt`]).
pub(crate) fn sent(code: i64, at: SentAt, max_payload: u64, tolerance_ms: u64) -> Result<Sent> {
    let (merged, behind_in_flight) = match code {
        1 => (false, false),
        2 => (true, false),
        3 => (false, true),
        4 => (true, true),
        _ => {
            return Err(Error::from_send_code(
                code,
                usize::try_from(max_payload).unwrap_or(usize::MAX),
                tolerance_ms,
            ))
        }
    };
    Ok(Sent {
        slot: at.slot,
        merged,
        behind_in_flight,
        replicas: None,
        priority: at.priority,
        due_ms: at.due_ms,
        server_ms: at.server_ms,
    })
}

/// Where a sent message stands, as a send reply tells it (its score read
/// by `Received::score_fields`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct SentAt {
    pub(crate) slot: u32,
    pub(crate) priority: Option<u32>,
    pub(crate) due_ms: Option<i64>,
    pub(crate) server_ms: i64,
}

/// One operation's code in a settle reply (settle.lua): 1 done, 2 dead,
/// 3 superseded by a duplicate, 4 cancelled; -1 stale, -2 fenced (nothing changed).
pub(crate) fn settled(code: Option<i64>) -> Result<Settled> {
    match code {
        Some(1) => Ok(Settled::Done),
        Some(2) => Ok(Settled::Dead),
        Some(3) => Ok(Settled::Superseded),
        Some(4) => Ok(Settled::Cancelled),
        Some(-2) => Err(Error::new(
            ErrorKind::Fenced,
            "refused by fencing: this consumer no longer holds the slot's lease \
             (another consumer owns it now): nothing was changed",
        )),
        _ => Err(Error::new(
            ErrorKind::StaleDelivery,
            "this delivery is no longer current (its lease expired and the message \
             was rolled back or delivered again): nothing was changed",
        )),
    }
}

/// A reschedule reply's code (reschedule.lua): 1 pending, 2 retry-waiting,
/// 3 the parked duplicate; -1 absent, -2 in flight with nothing parked,
/// -3 due in the past, -4 invalid spec (nothing changed).
pub(crate) fn rescheduled(code: Option<i64>, tolerance_ms: u64) -> Result<Moved> {
    match code {
        Some(1) => Ok(Moved::Pending),
        Some(2) => Ok(Moved::RetryWaiting),
        Some(3) => Ok(Moved::Parked),
        Some(-1) => Err(Error::new(
            ErrorKind::NotWaiting,
            "no message of this key is waiting (absent or only dead): nothing was changed",
        )),
        Some(-2) => Err(Error::new(
            ErrorKind::NotWaiting,
            "the message of this key is in flight and nothing waits behind it; a delivery \
             in progress cannot be rescheduled: nothing was changed",
        )),
        Some(-3) => Err(Error::from_send_code(-1, 0, tolerance_ms)),
        Some(-4) => Err(Error::new(
            ErrorKind::InvalidArgument,
            "the new due time or priority is out of range: nothing was changed",
        )),
        _ => Err(Error::new(
            ErrorKind::Redis,
            "unexpected reply from reschedule: is this server running another rmq version?",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scripts::ScriptId;

    /// The codes a script's header lists after "Returns:" (e.g. "1 new").
    fn header_codes(id: ScriptId) -> Vec<i64> {
        let (_, body) = id.source();
        let header: String = body
            .lines()
            .take_while(|l| l.starts_with("--"))
            .collect::<Vec<_>>()
            .join("\n");
        let returns = header.split("Returns:").nth(1).unwrap_or_default();
        let mut codes = Vec::new();
        for w in returns.split_whitespace().collect::<Vec<_>>().windows(2) {
            if let Ok(n) = w[0].parse::<i64>() {
                if w[1].chars().next().is_some_and(char::is_alphabetic) {
                    codes.push(n);
                }
            }
        }
        codes.sort_unstable();
        codes
    }

    #[test]
    fn a_sent_message_tells_its_priority_or_due_time_from_its_score() {
        let at = |priority_topic: bool, score| {
            let kind = match priority_topic {
                true => crate::TopicKind::Priority,
                false => crate::TopicKind::FixedTime,
            };
            let (priority, due_ms) = crate::message::Received::score_fields(kind, score);
            SentAt {
                slot: 3,
                priority,
                due_ms,
                server_ms: 1_000,
            }
        };
        // records.lua: priority * 2^32 + (2^32 - 1 - seq % 2^32).
        let p = sent(1, at(true, 9 * (1 << 32) + (1 << 32) - 8), 10, 10).unwrap();
        assert_eq!(
            (p.priority, p.due_ms, p.slot, p.server_ms),
            (Some(9), None, 3, 1_000)
        );
        let top = sent(2, at(true, 2_097_151 * (1 << 32)), 10, 10).unwrap();
        assert_eq!(top.priority, Some(2_097_151));
        let t = sent(3, at(false, 1_700_000_000_000), 10, 10).unwrap();
        assert_eq!((t.priority, t.due_ms), (None, Some(1_700_000_000_000)));
    }

    #[test]
    fn the_decoded_codes_are_the_ones_the_script_headers_list() {
        assert_eq!(
            header_codes(ScriptId::Send),
            vec![-4, -3, -2, -1, 1, 2, 3, 4]
        );
        let at = SentAt {
            slot: 0,
            priority: Some(0),
            due_ms: None,
            server_ms: 0,
        };
        for code in [1, 2, 3, 4] {
            assert!(sent(code, at, 10, 10).is_ok(), "{code}");
        }
        let kinds: Vec<ErrorKind> = [-1, -2, -3, -4]
            .iter()
            .map(|&c| sent(c, at, 10, 10).unwrap_err().kind())
            .collect();
        assert_eq!(
            kinds,
            [
                ErrorKind::PastDue,
                ErrorKind::PayloadTooLarge,
                ErrorKind::InvalidArgument,
                ErrorKind::Full
            ]
        );
        assert_eq!(header_codes(ScriptId::Settle), vec![-2, -1, 1, 2, 3, 4]);
        assert_eq!(settled(Some(4)).unwrap(), Settled::Cancelled);
        assert_eq!(
            header_codes(ScriptId::Reschedule),
            vec![-4, -3, -2, -1, 1, 2, 3]
        );
        assert_eq!(rescheduled(Some(3), 0).unwrap(), Moved::Parked);
        for (code, kind) in [
            (-1, ErrorKind::NotWaiting),
            (-2, ErrorKind::NotWaiting),
            (-3, ErrorKind::PastDue),
            (-4, ErrorKind::InvalidArgument),
        ] {
            assert_eq!(rescheduled(Some(code), 0).unwrap_err().kind(), kind);
        }
        assert_eq!(header_codes(ScriptId::Cancel), vec![0, 1, 2, 3, 4, 5]);
        assert_eq!(settled(Some(1)).unwrap(), Settled::Done);
        assert_eq!(settled(Some(2)).unwrap(), Settled::Dead);
        assert_eq!(settled(Some(3)).unwrap(), Settled::Superseded);
        assert_eq!(
            settled(Some(-1)).unwrap_err().kind(),
            ErrorKind::StaleDelivery
        );
        assert_eq!(settled(Some(-2)).unwrap_err().kind(), ErrorKind::Fenced);
    }

    #[test]
    fn every_error_name_a_script_replies_with_has_a_kind() {
        for id in ScriptId::ALL {
            let code = crate::scripts::text(id);
            for (i, _) in code.match_indices("error_reply('RMQ_") {
                let name: String = code[i + "error_reply('".len()..]
                    .chars()
                    .take_while(|c| c.is_ascii_uppercase() || *c == '_')
                    .collect();
                assert!(
                    crate::error::script_error_kind(Some(&name), "").is_some(),
                    "{id:?} replies {name}, which no ErrorKind maps"
                );
            }
        }
        assert_eq!(
            crate::error::script_error_kind(None, "RMQ_BADARG unknown lease op x"),
            Some(ErrorKind::InvalidArgument)
        );
    }
}
