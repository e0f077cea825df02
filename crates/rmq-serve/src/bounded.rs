//! What bounds the memory one request can cost the server.
//!
//! Lists in request bodies (a batch of messages, keys to cancel) are
//! counted *while* they are parsed: the entry past the limit stops the
//! parse. Counting after the parse let a 16 MiB body of 1.1 million tiny
//! entries take 535 MB before it was refused.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{Deserialize, Deserializer, Error, SeqAccess, Visitor};

/// Messages (or keys) one request may carry.
pub(crate) const MAX_BATCH: usize = 10_000;

/// A JSON array of at most [`MAX_BATCH`] entries, refused at the first
/// entry beyond it.
pub(crate) struct Capped<T>(pub(crate) Vec<T>);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Capped<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Entries<T>(PhantomData<T>);

        impl<'de, T: Deserialize<'de>> Visitor<'de> for Entries<T> {
            type Value = Capped<T>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "an array of at most {MAX_BATCH} entries")
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1_024));
                while let Some(x) = seq.next_element()? {
                    if out.len() == MAX_BATCH {
                        return Err(A::Error::custom(format!(
                            "more than {MAX_BATCH} entries: send at most {MAX_BATCH} per \
                             request; nothing was done"
                        )));
                    }
                    out.push(x);
                }
                Ok(Capped(out))
            }
        }

        d.deserialize_seq(Entries(PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_array_past_the_cap_is_refused_while_it_is_read() {
        let ok = format!("[{}0]", "0,".repeat(MAX_BATCH - 1));
        let v: Capped<u8> = serde_json::from_str(&ok).unwrap();
        assert_eq!(v.0.len(), MAX_BATCH);
        // The parse stops at the entry past the cap: what follows it is
        // never read (here, not even valid JSON).
        let over = format!("[{}0, not json", "0,".repeat(MAX_BATCH));
        let e = serde_json::from_str::<Capped<u8>>(&over).err().unwrap();
        assert!(e.to_string().contains("more than 10000 entries"), "{e}");
    }
}
