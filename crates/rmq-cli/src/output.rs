//! Printing: text for people (aligned tables, short lines) or, with
//! `--json`, exactly one JSON object per line on stdout so that programs can
//! read it line by line (`jq -c`, `while read`).
//!
//! Every write to stdout goes through here and returns a `CliResult`: a
//! closed pipe (`rmq peek | head -1`) ends the command quietly instead of
//! panicking as `println!` would. Errors and warnings go to stderr, one line
//! each, so stdout stays parseable.

use std::io::Write;

use serde::Serialize;

use crate::{CliError, CliResult};

/// Text or JSON lines.
#[derive(Debug, Clone, Copy)]
pub struct Out {
    /// `--json` was given.
    pub json: bool,
}

impl Out {
    /// Prints one JSON object on one line.
    pub fn json<T: Serialize + ?Sized>(&self, value: &T) -> CliResult {
        let s = serde_json::to_string(value)
            .map_err(|e| CliError::runtime(format!("cannot encode JSON: {e}")))?;
        line(&s)
    }

    /// Prints `value` as JSON with `--json`, else the text `text()` makes.
    pub fn either<T: Serialize + ?Sized>(
        &self,
        value: &T,
        text: impl FnOnce() -> String,
    ) -> CliResult {
        if self.json {
            self.json(value)
        } else {
            line(&text())
        }
    }
}

/// Writes one line to stdout.
pub fn line(s: &str) -> CliResult {
    let mut out = std::io::stdout().lock();
    let r = out
        .write_all(s.as_bytes())
        .and_then(|()| out.write_all(b"\n"))
        .and_then(|()| out.flush());
    r.map_err(|e| {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            CliError::quiet()
        } else {
            CliError::runtime(format!("cannot write to stdout: {e}"))
        }
    })
}

/// Writes raw text (no newline added) to stdout.
pub fn raw(s: &str) -> CliResult {
    raw_bytes(s.as_bytes())
}

/// Writes raw bytes (no newline added) to stdout, with one flush.
pub fn raw_bytes(b: &[u8]) -> CliResult {
    let mut out = std::io::stdout().lock();
    out.write_all(b).and_then(|()| out.flush()).map_err(|e| {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            CliError::quiet()
        } else {
            CliError::runtime(format!("cannot write to stdout: {e}"))
        }
    })
}

fn one_line(msg: &str) -> String {
    msg.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `error: <message>` on stderr, always on one line.
pub fn error_line(msg: &str) {
    let _ = writeln!(std::io::stderr().lock(), "error: {}", one_line(msg));
}

/// `warning: <message>` on stderr, on one line.
pub fn warn_line(msg: &str) {
    let _ = writeln!(std::io::stderr().lock(), "warning: {}", one_line(msg));
}

/// A line of information on stderr (summaries, notices).
pub fn note(msg: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{msg}");
}

/// Bytes as a (lossy) UTF-8 string, for JSON.
pub fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Bytes for a table cell: control characters escaped, at most `max` chars.
pub fn cell(b: &[u8], max: usize) -> String {
    let s = String::from_utf8_lossy(b);
    let mut out = String::new();
    for (n, c) in s.chars().enumerate() {
        if n >= max {
            out.push('…');
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// Prints an aligned table (numbers right-aligned, text left-aligned).
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> CliResult {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(c.chars().count());
            }
        }
    }
    let numeric: Vec<bool> = (0..headers.len())
        .map(|i| {
            !rows.is_empty()
                && rows.iter().all(|r| {
                    r.get(i)
                        .is_none_or(|c| c.is_empty() || c == "-" || c.parse::<f64>().is_ok())
                })
        })
        .collect();
    let fmt_row = |cells: Vec<&str>| {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            let w = widths.get(i).copied().unwrap_or(0);
            let pad = w.saturating_sub(c.chars().count());
            if i > 0 {
                s.push_str("  ");
            }
            if numeric.get(i).copied().unwrap_or(false) {
                s.push_str(&" ".repeat(pad));
                s.push_str(c);
            } else {
                s.push_str(c);
                if i + 1 < cells.len() {
                    s.push_str(&" ".repeat(pad));
                }
            }
        }
        s
    };
    let mut text = fmt_row(headers.to_vec());
    for r in rows {
        text.push('\n');
        text.push_str(&fmt_row(r.iter().map(String::as_str).collect()));
    }
    line(&text)
}

/// A Unix time in ms as `HH:MM:SS.mmm` UTC.
pub fn clock(unix_ms: i64) -> String {
    let ms = unix_ms.rem_euclid(86_400_000);
    format!(
        "{:02}:{:02}:{:02}.{:03} UTC",
        ms / 3_600_000,
        ms / 60_000 % 60,
        ms / 1000 % 60,
        ms % 1000
    )
}

/// The local clock as Unix ms.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_escape_and_truncate() {
        assert_eq!(cell(b"a\nb", 10), "a\\nb");
        assert_eq!(cell(b"abcdef", 3), "abc…");
    }

    #[test]
    fn clock_formats_utc() {
        assert_eq!(clock(3_723_004), "01:02:03.004 UTC");
    }

    #[test]
    fn errors_fit_one_line() {
        assert_eq!(one_line("a\n  b\tc"), "a b c");
    }
}
