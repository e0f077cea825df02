//! Who may act (change state) through the server. Reading is open; an
//! action passes only the check of the configured access.

use axum::http::{HeaderMap, StatusCode};

use crate::error::ApiError;

/// Who may take actions.
#[derive(Clone, PartialEq, Eq)]
pub enum Access {
    /// No action at all (403): the API and the metrics only read.
    ReadOnly,
    /// Actions with `Authorization: Bearer <this token>`.
    Token(String),
    /// Actions by anyone who reaches the listener (asked for explicitly).
    Unauthenticated,
}

impl std::fmt::Debug for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Access::ReadOnly => f.write_str("ReadOnly"),
            Access::Token(_) => f.write_str("Token(<redacted>)"),
            Access::Unauthenticated => f.write_str("Unauthenticated"),
        }
    }
}

impl Access {
    /// Whether actions exist at all (the dashboard hides them otherwise).
    pub fn allows_actions(&self) -> bool {
        !matches!(self, Access::ReadOnly)
    }

    /// Checks one action's request.
    pub(crate) fn check(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        match self {
            Access::ReadOnly => Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "ReadOnly",
                "this server is read-only: actions are refused",
            )),
            Access::Unauthenticated => Ok(()),
            Access::Token(want) => {
                let given = headers
                    .get(axum::http::header::AUTHORIZATION)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.strip_prefix("Bearer "));
                match given {
                    Some(t) if constant_time_eq(t.as_bytes(), want.as_bytes()) => Ok(()),
                    _ => Err(ApiError::new(
                        StatusCode::UNAUTHORIZED,
                        "Unauthorized",
                        "actions need the header Authorization: Bearer <token>",
                    )),
                }
            }
        }
    }
}

/// Compares without stopping at the first difference (a token's bytes
/// cannot be guessed one by one from response times).
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(auth: Option<&str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Some(a) = auth {
            h.insert(axum::http::header::AUTHORIZATION, a.parse().unwrap());
        }
        h
    }

    #[test]
    fn only_the_configured_bearer_token_may_act() {
        let a = Access::Token("s3cret".into());
        assert!(a.check(&with(Some("Bearer s3cret"))).is_ok());
        for bad in [
            None,
            Some("Bearer s3cre"),
            Some("s3cret"),
            Some("Bearer s3cret2"),
        ] {
            assert!(a.check(&with(bad)).is_err(), "{bad:?}");
        }
        assert!(Access::ReadOnly
            .check(&with(Some("Bearer s3cret")))
            .is_err());
        assert!(Access::Unauthenticated.check(&with(None)).is_ok());
        assert_eq!(format!("{a:?}"), "Token(<redacted>)");
    }
}
