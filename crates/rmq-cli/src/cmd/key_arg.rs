//! A merge key named on the command line by any of its forms: a
//! positional argument, `--key K` (text, also one that starts with `-`),
//! `--key-hex HEX` or `--key-base64 B64` (any bytes, NUL included: keys
//! are bytes in rmq, and a batch line can make one no argument can carry).

use base64::Engine;
use clap::Args;

use crate::{CliError, CliResult};

/// `--key`, `--key-hex`, `--key-base64` for a command that names one key
/// (besides its positional argument): flattened into its arguments, whose
/// group makes sure one form at most is given.
#[derive(Debug, Args)]
pub struct KeyFlags {
    /// The merge key as text, also one that starts with '-'
    #[arg(
        long = "key",
        id = "key_text",
        value_name = "K",
        allow_hyphen_values = true
    )]
    pub text: Option<String>,
    #[arg(long = "key-hex", id = "key_hex", value_name = "HEX", help = HEX_HELP)]
    pub hex: Option<String>,
    #[arg(long = "key-base64", id = "key_base64", value_name = "B64", help = BASE64_HELP)]
    pub base64: Option<String>,
}

impl KeyFlags {
    /// The key from `positional` or whichever flag was given.
    pub fn bytes(&self, positional: Option<&str>) -> CliResult<Vec<u8>> {
        key_bytes(
            positional.or(self.text.as_deref()),
            self.hex.as_deref(),
            self.base64.as_deref(),
        )?
        .ok_or_else(|| CliError::usage("name the key"))
    }
}

/// The help line every command's `--key-hex` shares.
pub const HEX_HELP: &str = "The merge key as hex digits: any bytes, NUL included";
/// The help line every command's `--key-base64` shares.
pub const BASE64_HELP: &str = "The merge key as standard base64: any bytes, NUL included";

/// The key as bytes from whichever one form was given (clap makes sure it
/// is at most one); None when none was.
pub fn key_bytes(
    text: Option<&str>,
    hex: Option<&str>,
    base64: Option<&str>,
) -> CliResult<Option<Vec<u8>>> {
    if let Some(t) = text {
        return Ok(Some(t.as_bytes().to_vec()));
    }
    if let Some(h) = hex {
        return from_hex(h).map(Some);
    }
    if let Some(b) = base64 {
        return base64::engine::general_purpose::STANDARD
            .decode(b.trim())
            .map(Some)
            .map_err(|e| {
                CliError::usage(format!(
                    "--key-base64 is not base64 ({e}); nothing was done"
                ))
            });
    }
    Ok(None)
}

fn from_hex(h: &str) -> CliResult<Vec<u8>> {
    let h = h.trim();
    let bad = || {
        CliError::usage(format!(
            "--key-hex {h:?} is not hex digits (two per byte); nothing was done"
        ))
    };
    if !h.len().is_multiple_of(2) || !h.is_ascii() {
        return Err(bad());
    }
    (0..h.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&h[i..i + 2], 16).map_err(|_| bad()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_form_gives_the_same_bytes() {
        let want = Some(b"a\0-b".to_vec());
        assert_eq!(
            key_bytes(Some("a\0-b"), None, None).ok(),
            Some(want.clone())
        );
        assert_eq!(
            key_bytes(None, Some("61002d62"), None).ok(),
            Some(want.clone())
        );
        assert_eq!(key_bytes(None, None, Some("YQAtYg==")).ok(), Some(want));
        assert_eq!(key_bytes(None, None, None).ok(), Some(None));
        for (hex, b64) in [(Some("6"), None), (Some("zz"), None), (None, Some("!"))] {
            assert!(key_bytes(None, hex, b64).is_err());
        }
    }
}
