//! How a slot keeps its pending messages once it holds many: one sorted
//! set (flat, the default) or small key-hashed ones under an index of their
//! heads (compact). It is a topic setting because the two trade Redis
//! memory against Redis work while a backlog lasts, and no layout keyed by
//! merge key gives both (`scripts/lua/pending.lua` holds both shapes).

use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind, Result};

/// How a slot keeps its pending messages once it holds many (more than
/// 120): the trade between Redis memory and Redis work while a backlog
/// lasts. Either way a slot of 120 or fewer is one compact sorted set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PendingLayout {
    /// One sorted set per slot, however deep (~280 B of Redis memory a
    /// pending message with a 16 B key and a 64 B payload): a take
    /// touches one key however deep the slot. The default.
    #[default]
    Flat,
    /// Past 120 pending, small sorted sets chosen by a hash of the merge
    /// key under an index of their heads (~190 B a pending message at 1M),
    /// at the price of 20–50% more Redis work a message while a slot holds
    /// more than 120 (every take touches many small sets). For topics
    /// whose backlog is large and whose rate is not.
    Compact,
}

impl PendingLayout {
    /// The layout's name as the CLI and the stored definition spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            PendingLayout::Flat => "flat",
            PendingLayout::Compact => "compact",
        }
    }

    pub(crate) fn is_flat(&self) -> bool {
        *self == PendingLayout::Flat
    }
}

impl std::str::FromStr for PendingLayout {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "flat" => Ok(PendingLayout::Flat),
            "compact" => Ok(PendingLayout::Compact),
            other => Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("unknown pending layout {other:?}: use flat or compact"),
            )),
        }
    }
}

impl std::fmt::Display for PendingLayout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
