//! The prefix's receipt key: seals receipts into text for clients and
//! opens the text they give back.
//!
//! The key is 32 random bytes kept in Redis under the prefix
//! (`secret.lua`: the first caller makes it, every later one reads it), so
//! every process of one prefix seals and opens alike: a receipt one `rmq
//! serve` gave out settles through another, or after a restart. Anyone who
//! can read the prefix's keys can read the key too; they can settle any
//! delivery anyway.
//!
//! A sealed receipt is `base64url(receipt bytes ‖ tag)`, the tag being the
//! first 16 bytes of HMAC-SHA256(key, topic ‖ 0 ‖ receipt bytes): bound to
//! its topic, and a change of any byte is refused.

use base64::Engine;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use super::{invalid, Receipt};
use crate::client::Client;
use crate::error::{Error, ErrorKind, Result};

/// Bytes of the tag kept (128 bits).
const TAG_BYTES: usize = 16;
/// The longest sealed receipt read: a delivery id holds the merge key
/// (64 KiB at most), base64 makes 4 characters of 3 bytes.
const MAX_SEALED: usize = (crate::message::MAX_KEY_BYTES + 1_024) * 4 / 3;

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::URL_SAFE_NO_PAD;

/// Seals and opens the receipts of one prefix.
#[derive(Clone)]
pub struct ReceiptKey {
    key: [u8; 32],
}

impl std::fmt::Debug for ReceiptKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ReceiptKey(..)")
    }
}

impl Client {
    /// The prefix's receipt key, made on first use and kept in Redis, so
    /// that every process of the prefix seals and opens receipts alike.
    pub async fn receipt_key(&self) -> Result<ReceiptKey> {
        let fresh: [u8; 32] = rand::random();
        let (id, cmd) =
            crate::scripts::secret::secret(&crate::keys::receipt_key(self.prefix()), &hex(&fresh));
        let stored = self.inner.ctx.redis.run_one(id, cmd).await?;
        let text = crate::scripts::secret::parse(stored).unwrap_or_default();
        let key = unhex(&text).ok_or_else(|| {
            Error::new(
                ErrorKind::WrongType,
                format!(
                    "{} does not hold a receipt key (64 hex digits)",
                    crate::keys::receipt_key(self.prefix())
                ),
            )
        })?;
        Ok(ReceiptKey { key })
    }
}

impl ReceiptKey {
    /// The text a client is given for `receipt`, a delivery of `topic`.
    pub fn seal(&self, topic: &str, receipt: &Receipt) -> String {
        let mut bytes = receipt.to_bytes();
        let tag = self.mac(topic, &bytes).finalize().into_bytes();
        bytes.extend_from_slice(&tag[..TAG_BYTES]);
        B64.encode(bytes)
    }

    /// The receipt a client gave back for `topic`:
    /// [`ErrorKind::InvalidReceipt`] when the text was not sealed by this
    /// key for this topic, or was changed.
    pub fn open(&self, topic: &str, sealed: &str) -> Result<Receipt> {
        if sealed.len() > MAX_SEALED {
            return Err(invalid("too long"));
        }
        let bytes = B64
            .decode(sealed.as_bytes())
            .map_err(|_| invalid("not base64url"))?;
        if bytes.len() <= TAG_BYTES {
            return Err(invalid("too short"));
        }
        let (body, tag) = bytes.split_at(bytes.len() - TAG_BYTES);
        self.mac(topic, body)
            .verify_truncated_left(tag)
            .map_err(|_| invalid("its seal does not match"))?;
        Receipt::from_bytes(body)
    }

    fn mac(&self, topic: &str, body: &[u8]) -> Hmac<Sha256> {
        // Any key length is valid for HMAC: this cannot fail.
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.key)
            .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
        mac.update(topic.as_bytes());
        mac.update(&[0]);
        mac.update(body);
        mac
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<[u8; 32]> {
    if s.len() != 64 || !s.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::group::Fence;

    fn key(b: u8) -> ReceiptKey {
        ReceiptKey { key: [b; 32] }
    }

    fn receipt() -> Receipt {
        Receipt {
            slot: 3,
            id: b"5,1,100|k".to_vec(),
            fence: Some(Fence {
                owner: "m".into(),
                epoch: 2,
            }),
            permit: None,
        }
    }

    #[test]
    fn a_sealed_receipt_opens_with_its_key_and_topic_only() {
        let sealed = key(1).seal("orders", &receipt());
        assert_eq!(key(1).open("orders", &sealed).ok(), Some(receipt()));
        for (k, topic) in [(key(2), "orders"), (key(1), "orders2")] {
            let e = k.open(topic, &sealed).err().map(|e| e.kind());
            assert_eq!(e, Some(ErrorKind::InvalidReceipt));
        }
    }

    #[test]
    fn any_changed_character_is_refused() {
        let sealed = key(1).seal("orders", &receipt());
        for i in 0..sealed.len() {
            let mut b = sealed.clone().into_bytes();
            b[i] = if b[i] == b'A' { b'B' } else { b'A' };
            let changed = String::from_utf8(b).unwrap_or_default();
            assert!(key(1).open("orders", &changed).is_err(), "at {i}");
        }
        for bad in ["", "!!", "AAAA", &"A".repeat(MAX_SEALED + 1)] {
            assert!(key(1).open("orders", bad).is_err(), "{bad:.10}");
        }
    }

    #[test]
    fn the_key_reads_back_from_hex() {
        let k = [7u8, 0, 255, 16].repeat(8);
        assert_eq!(unhex(&hex(&k)).map(Vec::from), Some(k));
        assert_eq!(unhex("zz"), None);
    }
}
