//! The OpenAPI document against the server it describes: schemathesis
//! (PyPI, installed by `scripts/ensure-deps.sh` into `target/schemathesis`)
//! generates requests from the document, valid and invalid, for every
//! operation, with the token, and checks that no answer is a server error
//! and that every status code, content type and body is one the document
//! declares.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::time::Duration;

use rmq::{Client, Message, TopicKind, TopicSpec};
use rmq_serve::{Access, Options};
use rmq_test_support::RedisServer;

const TOKEN: &str = "openapi-test-token";

fn schemathesis() -> PathBuf {
    if let Some(p) = std::env::var_os("SCHEMATHESIS") {
        return p.into();
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/schemathesis/bin/schemathesis")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_keeps_every_promise_of_its_openapi_document() {
    let redis = RedisServer::start();
    let client = Client::connect(&redis.url()).await.unwrap();
    for (name, kind) in [("p", TopicKind::Priority), ("f", TopicKind::FixedTime)] {
        let t = client
            .define_topic(TopicSpec::new(name, kind).slots(4))
            .await
            .unwrap();
        let m = Message::new("v").key("k");
        t.send(match kind {
            TopicKind::Priority => m.priority(3),
            _ => m.delay(Duration::from_secs(3600)),
        })
        .await
        .unwrap();
    }
    let options = Options {
        access: Access::Token(TOKEN.into()),
        scrape_cache: Duration::from_millis(0),
        sample_every: Duration::from_secs(1),
        allowed_hosts: Vec::new(),
        // Takes that find nothing answer soon: the fuzzer asks many.
        max_take_wait: Duration::from_millis(100),
        ..Options::default()
    };
    let router = rmq_serve::router(client.clone(), options);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(rmq_serve::serve(listener, router, std::future::pending()));

    // The document itself: every route, the bearer scheme, the error shape.
    let doc: serde_json::Value = reqwest::get(format!("{base}/api/v1/openapi.json"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    let paths: Vec<&String> = doc["paths"].as_object().unwrap().keys().collect();
    assert_eq!(paths.len(), 25, "{paths:?}");
    assert!(doc["components"]["securitySchemes"]["bearer"].is_object());
    assert!(doc["components"]["schemas"]["ErrorBody"].is_object());

    let bin = schemathesis();
    assert!(
        bin.exists(),
        "schemathesis is not installed at {}: run scripts/ensure-deps.sh",
        bin.display()
    );
    let args: Vec<String> = [
        "run",
        &format!("{base}/api/v1/openapi.json"),
        "--header",
        &format!("Authorization: Bearer {TOKEN}"),
        "--checks",
        "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance",
        "--max-examples",
        "25",
        "--generation-deterministic",
        "--max-response-time",
        "30",
    ]
    .map(String::from)
    .to_vec();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(bin)
            .args(&args)
            .env("SCHEMATHESIS_HOOKS", "")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "schemathesis found problems:\n{said}");
    eprintln!(
        "{}",
        said.lines().rev().take(12).collect::<Vec<_>>().join("\n")
    );
}

/// Every type the document describes has a name of its own: utoipa names a
/// schema after its Rust type, so two request bodies of the same name
/// would show one shape for both (the dead letters' `{"key"|"all"}` once
/// read as receipts).
#[test]
fn every_schema_in_the_document_names_one_type() {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = vec![src];
    let mut seen: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    while let Some(p) = files.pop() {
        if p.is_dir() {
            files.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
            continue;
        }
        if p.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let text = std::fs::read_to_string(&p).unwrap();
        let mut derives_schema = false;
        for line in text.lines().map(str::trim) {
            if line.starts_with("#[derive(") && line.contains("ToSchema") {
                derives_schema = true;
            } else if derives_schema && !line.starts_with('#') && !line.starts_with("///") {
                let name = line
                    .split_whitespace()
                    .skip_while(|w| !matches!(*w, "struct" | "enum"))
                    .nth(1)
                    .map(|n| {
                        n.trim_end_matches(['{', '(', ';'])
                            .split('<')
                            .next()
                            .unwrap_or(n)
                    });
                if let Some(n) = name {
                    seen.entry(n.to_string())
                        .or_default()
                        .push(p.display().to_string());
                }
                derives_schema = false;
            }
        }
    }
    assert!(seen.contains_key("TakeBody"), "schemas are read: {seen:?}");
    let twice: Vec<_> = seen.iter().filter(|(_, at)| at.len() > 1).collect();
    assert!(
        twice.is_empty(),
        "schema names used by two types: {twice:?}"
    );
}
