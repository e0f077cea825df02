//! No tool prints a credential: `--help` shows which variables it reads,
//! never their values, and logs and connection errors redact every form of
//! password and token in the URLs they show.
#![allow(clippy::unwrap_used)]
mod support;

use support::*;

const SECRET: &str = "s3cr3t-value";

#[test]
fn help_names_the_environment_variables_but_never_shows_their_values() {
    for sub in [
        &["--help"][..],
        &["consume", "--help"],
        &["store", "relay", "--help"],
    ] {
        let mut c = bin();
        c.env("REDIS_URL", format!("redis://:{SECRET}@127.0.0.1:1"))
            .env(
                "RMQ_PG_URL",
                format!("postgres://app:{SECRET}@127.0.0.1/app"),
            )
            .args(sub);
        let r = run(c, b"").success();
        assert!(!r.stdout.contains(SECRET), "{sub:?}: {}", r.stdout);
        assert!(r.stdout.contains("REDIS_URL"), "{sub:?}: {}", r.stdout);
    }
}

#[test]
fn logs_and_connection_errors_redact_every_form_of_redis_credential() {
    let port = rmq_test_support::free_port();
    for url in [
        format!("redis+unix:///nonexistent/r.sock?db=0&pass={SECRET}"),
        format!("redis://app:{SECRET}@127.0.0.1:{port}"),
        format!("redis://:{SECRET}@127.0.0.1:{port}/0?password={SECRET}"),
    ] {
        let mut c = bin();
        c.env("REDIS_URL", &url).args(["-vv", "stats", "t"]);
        let r = run(c, b"");
        assert_ne!(r.code, 0, "{url}: nothing listens there");
        assert!(r.stderr.contains("***"), "{url}: {}", r.stderr);
        assert!(!r.stderr.contains(SECRET), "{url}: {}", r.stderr);
        assert!(!r.stdout.contains(SECRET), "{url}: {}", r.stdout);
    }
}
