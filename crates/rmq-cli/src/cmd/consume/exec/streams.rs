//! A handler's stdout and stderr, copied to rmq's own line by line as they
//! come, keeping what the verdict needs: the last non-empty line on stdout
//! (where a handler may ask for a retry delay) and the end of stderr (the
//! error kept with the message: a traceback's useful end is its last
//! lines).

use std::io::Write;

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};

/// How much of the end of stderr becomes the error.
pub(super) const STDERR_TAIL: usize = 4096;
/// A longer last stdout line is not a retry request.
const LAST_LINE_MAX: usize = 4096;

/// Where a handler's stdout goes: rmq's stdout, or its stderr when
/// stdout carries rmq's own JSON lines.
#[derive(Clone, Copy)]
pub(super) enum Sink {
    Stdout,
    Stderr,
}

impl Sink {
    fn write(self, bytes: &[u8]) {
        // Short, line-sized writes: blocking here is harmless; a closed
        // stream loses the copy, not the verdict.
        let _ = match self {
            Sink::Stdout => std::io::stdout().lock().write_all(bytes),
            Sink::Stderr => std::io::stderr().lock().write_all(bytes),
        };
    }
}

/// Copies `stream` to `sink`; returns its last non-empty line (trimmed;
/// None if it was longer than 4 KiB).
pub(super) async fn copy_keeping_last_line(
    stream: impl AsyncRead + Unpin,
    sink: Sink,
) -> Option<String> {
    let mut reader = BufReader::new(stream);
    let mut last = None;
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match reader.read_until(b'\n', &mut buf).await {
            Ok(0) | Err(_) => return last,
            Ok(_) => {
                sink.write(&buf);
                let line = String::from_utf8_lossy(&buf);
                let line = line.trim();
                if !line.is_empty() {
                    last = (line.len() <= LAST_LINE_MAX).then(|| line.to_string());
                }
            }
        }
    }
}

/// Copies `stream` to rmq's stderr; returns its last [`STDERR_TAIL`]
/// bytes, from a line's start ("…" first when the rest was cut).
pub(super) async fn copy_keeping_tail(stream: impl AsyncRead + Unpin) -> String {
    let mut reader = BufReader::new(stream);
    let mut tail: Vec<u8> = Vec::new();
    let mut cut = false;
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match reader.read_until(b'\n', &mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {
                Sink::Stderr.write(&buf);
                tail.extend_from_slice(&buf);
                if tail.len() > 2 * STDERR_TAIL {
                    tail.drain(..tail.len() - STDERR_TAIL);
                    cut = true;
                }
            }
        }
    }
    tail_text(&tail, cut)
}

/// The last [`STDERR_TAIL`] bytes of `bytes` as text, from a line's start.
fn tail_text(bytes: &[u8], cut_before: bool) -> String {
    let mut from = bytes.len().saturating_sub(STDERR_TAIL);
    let cut = cut_before || from > 0;
    if cut {
        // Start at the next line (unless that would leave nothing).
        if let Some(nl) = bytes[from..].iter().position(|&b| b == b'\n') {
            if from + nl + 1 < bytes.len() {
                from += nl + 1;
            }
        }
    }
    let text = String::from_utf8_lossy(&bytes[from..]);
    let text = text.trim_start_matches(['\n', '\r']).trim_end();
    match cut {
        true => format!("…\n{text}"),
        false => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_tail_of_a_long_stderr_starts_at_a_line_and_ends_with_the_last() {
        let mut text = String::new();
        for i in 0..2_000 {
            text.push_str(&format!("  frame {i}\n"));
        }
        text.push_str("ValueError: bad input\n");
        let tail = copy_keeping_tail(text.as_bytes()).await;
        assert!(tail.starts_with("…\n  frame "), "{tail:.40}");
        assert!(tail.ends_with("ValueError: bad input"), "{tail}");
        assert!(tail.len() <= STDERR_TAIL + 4, "{}", tail.len());
        let short = copy_keeping_tail(&b"one\ntwo\n"[..]).await;
        assert_eq!(short, "one\ntwo");
    }

    #[tokio::test]
    async fn the_last_non_empty_stdout_line_is_kept() {
        let out = b"working\n{\"retry_after_ms\": 10}\n\n";
        let last = copy_keeping_last_line(&out[..], Sink::Stderr).await;
        assert_eq!(last.as_deref(), Some("{\"retry_after_ms\": 10}"));
        let long = format!("{}\n", "x".repeat(LAST_LINE_MAX + 1));
        assert_eq!(
            copy_keeping_last_line(long.as_bytes(), Sink::Stderr).await,
            None
        );
    }
}
