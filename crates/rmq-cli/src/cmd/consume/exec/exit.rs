//! What a handler's exit means (`--exec`'s protocol, as `rmq consume
//! --help` says it): 0 acks; 65 (EX_DATAERR: the message itself is bad)
//! sends it straight to the dead letters; 75 (EX_TEMPFAIL) and any other
//! status, or a signal, retries it. A retry waits the topic's backoff, or
//! what the handler asked for in its last line on stdout,
//! `{"retry_after_ms": N}`. The error kept with the message is the status
//! and the end of what the handler wrote on stderr (the useful end of a
//! traceback).

use std::process::ExitStatus;

use crate::cmd::consume::verdict::{retry_after, Verdict};

/// The exit status that sends a message to the dead letters at once.
pub(super) const EX_DATAERR: i32 = 65;
/// The exit status that asks for a retry (as any other failure does).
pub(super) const EX_TEMPFAIL: i32 = 75;

/// The verdict on a handler that exited with `status`, whose last
/// non-empty stdout line was `last_line` and whose stderr ended with
/// `stderr_tail`.
pub(super) fn verdict(status: ExitStatus, last_line: Option<&str>, stderr_tail: &str) -> Verdict {
    use std::os::unix::process::ExitStatusExt;
    let what = match status.code() {
        Some(0) => return Verdict::Ack,
        Some(EX_DATAERR) => format!("exit status {EX_DATAERR} (EX_DATAERR)"),
        Some(EX_TEMPFAIL) => format!("exit status {EX_TEMPFAIL} (EX_TEMPFAIL)"),
        Some(c) => format!("exit status {c}"),
        None => format!("killed by signal {}", status.signal().unwrap_or(0)),
    };
    let error = match stderr_tail.trim() {
        "" => what,
        tail => format!("{what}: {tail}"),
    };
    if status.code() == Some(EX_DATAERR) {
        return Verdict::Dead { error };
    }
    Verdict::Retry {
        after: last_line.and_then(retry_after),
        error,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;
    use std::time::Duration;

    fn exit(code: i32) -> ExitStatus {
        ExitStatus::from_raw(code << 8)
    }

    #[test]
    fn zero_acks_65_dead_letters_and_the_rest_retry() {
        assert_eq!(verdict(exit(0), None, "noise"), Verdict::Ack);
        assert_eq!(
            verdict(exit(65), None, "bad json\n"),
            Verdict::Dead {
                error: "exit status 65 (EX_DATAERR): bad json".into()
            }
        );
        assert_eq!(
            verdict(exit(75), None, ""),
            Verdict::Retry {
                after: None,
                error: "exit status 75 (EX_TEMPFAIL)".into()
            }
        );
        assert_eq!(
            verdict(
                exit(1),
                Some(r#"{"retry_after_ms": 2500}"#),
                "Traceback\n  boom"
            ),
            Verdict::Retry {
                after: Some(Duration::from_millis(2500)),
                error: "exit status 1: Traceback\n  boom".into()
            }
        );
        assert_eq!(
            verdict(ExitStatus::from_raw(9), None, ""),
            Verdict::Retry {
                after: None,
                error: "killed by signal 9".into()
            }
        );
    }
}
