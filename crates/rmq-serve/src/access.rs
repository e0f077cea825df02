//! Who may act (change state) through the server, and which requests it
//! answers at all. Reading is open; an action passes the check of the
//! configured access *before* its body is read. Two browser attacks are
//! refused whatever the access:
//!
//! - a page of another site posting to the API (an action whose `Origin`
//!   is not this server's own);
//! - DNS rebinding (a page of another site whose name now resolves to this
//!   server): the dashboard and the API answer only requests whose `Host`
//!   is an IP address, `localhost`, or a name given with `--allowed-host`.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;
use crate::AppState;

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

/// A bearer token read from a file, and what the file's permissions
/// warrant saying.
#[derive(Debug)]
pub struct TokenFile {
    /// The file's first line, trimmed.
    pub token: String,
    /// Set when others may read the file (mode `o+r`): anyone on the
    /// machine could act through the server.
    pub world_readable: bool,
}

/// Why a token file is refused.
#[derive(Debug)]
pub enum TokenFileError {
    /// It cannot be read.
    Unreadable(std::io::Error),
    /// Its token is shorter than 16 characters.
    TooShort,
    /// Its token has a character outside printable ASCII: an HTTP header
    /// cannot carry it, so no request could ever match it.
    NotPrintableAscii,
}

impl std::fmt::Display for TokenFileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TokenFileError::Unreadable(e) => write!(f, "it cannot be read: {e}"),
            TokenFileError::TooShort => {
                f.write_str("its token is shorter than 16 characters: use a long random one")
            }
            TokenFileError::NotPrintableAscii => f.write_str(
                "its token has a character outside printable ASCII (letters, digits, \
                 punctuation): a header cannot carry it, so no request could match it",
            ),
        }
    }
}

impl std::error::Error for TokenFileError {}

/// Reads the token on the first line of `path` and checks it can be used.
pub fn read_token_file(path: &std::path::Path) -> Result<TokenFile, TokenFileError> {
    let text = std::fs::read_to_string(path).map_err(TokenFileError::Unreadable)?;
    let token = text.lines().next().unwrap_or_default().trim().to_string();
    if !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(TokenFileError::NotPrintableAscii);
    }
    if token.len() < 16 {
        return Err(TokenFileError::TooShort);
    }
    let world_readable = {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(path)
            .map(|m| m.permissions().mode() & 0o004 != 0)
            .unwrap_or(false)
    };
    Ok(TokenFile {
        token,
        world_readable,
    })
}

/// Runs before every dashboard and API handler (and before any body is
/// read): the host check for all, the origin and access checks for actions.
pub(crate) async fn guard(State(st): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let h = req.headers();
    let checked = host_allowed(h, &st.options.allowed_hosts).and_then(|()| {
        match matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS) {
            true => Ok(()),
            false => same_origin(h).and_then(|()| st.options.access.check(h)),
        }
    });
    match checked {
        Ok(()) => next.run(req).await,
        Err(e) => e.into_response(),
    }
}

/// The host part of a `Host` header or an origin's authority: the name or
/// address without its port (IPv6 addresses keep their brackets off).
fn host_of(authority: &str) -> &str {
    if let Some(rest) = authority.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    authority.rsplit_once(':').map_or(authority, |(h, _)| h)
}

fn host_allowed(h: &HeaderMap, allowed: &[String]) -> Result<(), ApiError> {
    let Some(host) = h.get(header::HOST).and_then(|v| v.to_str().ok()) else {
        return Ok(());
    };
    let name = host_of(host);
    let ok = name.parse::<std::net::IpAddr>().is_ok()
        || name.eq_ignore_ascii_case("localhost")
        || allowed.iter().any(|a| a.eq_ignore_ascii_case(name));
    match ok {
        true => Ok(()),
        false => Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "HostNotAllowed",
            format!(
                "this server does not answer for the host {host:?}: reach it by address, or start it \
                 with --allowed-host {name}"
            ),
        )),
    }
}

/// An action from a browser must come from this server's own page.
fn same_origin(h: &HeaderMap) -> Result<(), ApiError> {
    let Some(origin) = h.get(header::ORIGIN).and_then(|v| v.to_str().ok()) else {
        return Ok(()); // not a browser, or a same-origin GET
    };
    let host = h.get(header::HOST).and_then(|v| v.to_str().ok());
    let authority = origin.split_once("://").map(|(_, a)| a);
    match (authority, host) {
        (Some(a), Some(host)) if a.eq_ignore_ascii_case(host) => Ok(()),
        _ => Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "CrossOrigin",
            format!("an action from the page {origin:?} is refused: only this server's own dashboard may act"),
        )),
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

    fn host(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, v.parse().unwrap());
        h
    }

    #[test]
    fn only_addresses_localhost_and_allowed_names_are_answered() {
        let allowed = vec!["queue.internal".to_string()];
        for ok in [
            "127.0.0.1:8080",
            "[::1]:8080",
            "10.1.2.3",
            "localhost:8080",
            "LOCALHOST",
            "queue.internal:8080",
        ] {
            assert!(host_allowed(&host(ok), &allowed).is_ok(), "{ok}");
        }
        for bad in ["evil.example", "evil.example:8080", "127.0.0.1.nip.io:80"] {
            assert!(host_allowed(&host(bad), &allowed).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_token_file_is_checked_and_its_permissions_reported() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("rmq-serve-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = |name: &str, text: &str, mode: u32| {
            let p = dir.join(name);
            std::fs::write(&p, text).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
            p
        };
        let ok = read_token_file(&file("ok", "0123456789abcdef-xyz\n", 0o600)).unwrap();
        assert_eq!(
            (ok.token.as_str(), ok.world_readable),
            ("0123456789abcdef-xyz", false)
        );
        let open = read_token_file(&file("open", "0123456789abcdef-xyz", 0o644)).unwrap();
        assert!(open.world_readable);
        for (name, text) in [
            ("accents", "0123456789abcdéfgh"),
            ("space", "01234567 89abcdefgh"),
        ] {
            let e = read_token_file(&file(name, text, 0o600)).unwrap_err();
            assert!(
                matches!(e, TokenFileError::NotPrintableAscii),
                "{name}: {e}"
            );
        }
        let e = read_token_file(&file("short", "short", 0o600)).unwrap_err();
        assert!(matches!(e, TokenFileError::TooShort), "{e}");
        let e = read_token_file(&dir.join("absent")).unwrap_err();
        assert!(matches!(e, TokenFileError::Unreadable(_)), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn actions_from_another_origin_are_refused() {
        let mut h = host("127.0.0.1:8080");
        assert!(same_origin(&h).is_ok(), "no Origin: not a browser");
        h.insert(header::ORIGIN, "http://127.0.0.1:8080".parse().unwrap());
        assert!(same_origin(&h).is_ok());
        h.insert(header::ORIGIN, "http://evil.example".parse().unwrap());
        assert!(same_origin(&h).is_err());
        h.insert(header::ORIGIN, "null".parse().unwrap());
        assert!(same_origin(&h).is_err());
    }
}
