//! TLS (rustls): the server's certificate and host name are verified
//! against the given CA (or the system roots), mTLS works, and TLS settings
//! with a plaintext URL are refused: never a silent fall-back. Certificates
//! come from a throwaway CA made here with `openssl`.
#![allow(clippy::unwrap_used)]
mod common;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;
use rmq::{Client, ClientOptions, ErrorKind, Message, TlsOptions, TopicKind, TopicSpec};

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA, and a certificate signed by it for `san` (e.g. "DNS:localhost,IP:127.0.0.1").
fn ca_and_cert(dir: &Path, name: &str, san: &str, client: bool) {
    if !dir.join("ca.crt").exists() {
        openssl(
            dir,
            &[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-keyout",
                "ca.key",
                "-out",
                "ca.crt",
                "-days",
                "2",
                "-subj",
                "/CN=rmq test CA",
            ],
        );
    }
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.csr"),
            "-subj",
            &format!("/CN={name}"),
        ],
    );
    let usage = if client { "clientAuth" } else { "serverAuth" };
    std::fs::write(
        dir.join(format!("{name}.ext")),
        format!("subjectAltName={san}\nextendedKeyUsage={usage}\n"),
    )
    .unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            &format!("{name}.crt"),
            "-days",
            "2",
            "-extfile",
            &format!("{name}.ext"),
        ],
    );
}

struct TlsServer {
    server: RedisServer,
    tls_port: u16,
    dir: tempfile::TempDir,
}

fn tls_server(san: &str, auth_clients: bool) -> TlsServer {
    let dir = tempfile::tempdir().unwrap();
    ca_and_cert(dir.path(), "server", san, false);
    ca_and_cert(dir.path(), "client", "DNS:client", true);
    let p = |f: &str| dir.path().join(f).display().to_string();
    let tls_port = rmq_test_support::free_port();
    let server = RedisServer::builder()
        .arg("tls-port", &tls_port.to_string())
        .arg("tls-cert-file", &p("server.crt"))
        .arg("tls-key-file", &p("server.key"))
        .arg("tls-ca-cert-file", &p("ca.crt"))
        .arg("tls-auth-clients", if auth_clients { "yes" } else { "no" })
        .start();
    TlsServer {
        server,
        tls_port,
        dir,
    }
}

impl TlsServer {
    fn file(&self, f: &str) -> Vec<u8> {
        std::fs::read(self.dir.path().join(f)).unwrap()
    }
    fn url(&self, host: &str) -> String {
        format!("rediss://{host}:{}", self.tls_port)
    }
    fn ca(&self) -> TlsOptions {
        TlsOptions {
            ca_pem: Some(self.file("ca.crt")),
            ..Default::default()
        }
    }
}

async fn round_trip(client: &Client) {
    let topic = client
        .define_topic(TopicSpec::new("t", TopicKind::Priority).slots(2))
        .await
        .unwrap();
    // A consumer first: its wake-up subscription goes over TLS too.
    let (mut s, stop) = stream(&topic, 2);
    tokio::time::sleep(Duration::from_millis(200)).await;
    topic.send(Message::new("over tls")).await.unwrap();
    let d = next(&mut s, 3).await.expect("delivered");
    assert_eq!(d.payload, b"over tls");
    d.ack().await.unwrap();
    stop.cancel();
}

#[tokio::test]
async fn a_verified_tls_connection_works_end_to_end() {
    let t = tls_server("DNS:localhost,IP:127.0.0.1", false);
    for host in ["127.0.0.1", "localhost"] {
        let client = Client::connect_with(&t.url(host), ClientOptions::default().tls(t.ca()))
            .await
            .unwrap();
        round_trip(&client).await;
    }
    let _ = &t.server;
}

#[tokio::test]
async fn an_unknown_ca_or_a_wrong_host_name_is_refused() {
    let t = tls_server("DNS:other.example", false);
    // The right CA, but the certificate is for another host.
    let e = Client::connect_with(&t.url("127.0.0.1"), ClientOptions::default().tls(t.ca()))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Connection, "{e}");
    let text = format!("{e:?}").to_lowercase();
    assert!(
        text.contains("certificate") || text.contains("name"),
        "{e:?}"
    );
    // The system roots do not know this CA.
    let e = Client::connect(&t.url("127.0.0.1")).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Connection, "{e}");
    assert!(
        format!("{e:?}").to_lowercase().contains("certificate"),
        "{e:?}"
    );
    // Another CA.
    let other = tls_server("DNS:localhost,IP:127.0.0.1", false);
    let e = Client::connect_with(
        &t.url("127.0.0.1"),
        ClientOptions::default().tls(other.ca()),
    )
    .await
    .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Connection, "{e}");
}

#[tokio::test]
async fn mutual_tls_needs_the_client_certificate() {
    let t = tls_server("DNS:localhost,IP:127.0.0.1", true);
    let e = Client::connect_with(&t.url("127.0.0.1"), ClientOptions::default().tls(t.ca()))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Connection, "{e}");
    let mtls = TlsOptions {
        client_cert_pem: Some(t.file("client.crt")),
        client_key_pem: Some(t.file("client.key")),
        ..t.ca()
    };
    let client = Client::connect_with(
        &t.url("127.0.0.1"),
        ClientOptions::default().tls(mtls.clone()),
    )
    .await
    .unwrap();
    round_trip(&client).await;
    // A certificate without its key is refused before connecting.
    let half = TlsOptions {
        client_key_pem: None,
        ..mtls
    };
    let e = Client::connect_with(&t.url("127.0.0.1"), ClientOptions::default().tls(half))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
}

#[tokio::test]
async fn tls_settings_with_a_plaintext_url_are_refused() {
    let t = tls_server("DNS:localhost,IP:127.0.0.1", false);
    let e = Client::connect_with(&t.server.url(), ClientOptions::default().tls(t.ca()))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert!(
        e.to_string().contains("never falls back to plaintext"),
        "{e}"
    );
    let _: PathBuf = t.dir.path().to_path_buf();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_cluster_works_with_the_same_settings() {
    let dir = tempfile::tempdir().unwrap();
    // One certificate for every node (all on 127.0.0.1), usable on the cluster bus too.
    ca_and_cert(dir.path(), "node", "DNS:localhost,IP:127.0.0.1", false);
    let ext = dir.path().join("node.ext");
    std::fs::write(
        &ext,
        "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n",
    )
    .unwrap();
    openssl(
        dir.path(),
        &[
            "x509",
            "-req",
            "-in",
            "node.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "node.crt",
            "-days",
            "2",
            "-extfile",
            "node.ext",
        ],
    );
    let p = |f: &str| dir.path().join(f).display().to_string();
    let cluster = rmq_test_support::RedisCluster::builder()
        .replicas(0)
        .tls(&p("node.crt"), &p("node.key"), &p("ca.crt"))
        .start();
    let urls = cluster.tls_urls();
    let ca = TlsOptions {
        ca_pem: Some(std::fs::read(dir.path().join("ca.crt")).unwrap()),
        ..Default::default()
    };
    let client = Client::connect_cluster(&[urls[0].as_str()], ClientOptions::default().tls(ca))
        .await
        .unwrap();
    assert!(client.is_cluster());
    round_trip(&client).await;
    // Without the CA the cluster is not trusted.
    let e = Client::connect_cluster(&[urls[0].as_str()], ClientOptions::default())
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Connection, "{e}");
    // TLS settings with plaintext seeds are refused.
    let plain = cluster.urls();
    let e = Client::connect_cluster(
        &[plain[0].as_str()],
        ClientOptions::default().tls(TlsOptions::default()),
    )
    .await
    .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
}
