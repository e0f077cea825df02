//! A real server for the tests: `rmq_serve`'s router over a redis-server
//! the test starts, on a free loopback port, and requests to it.
#![allow(clippy::unwrap_used, dead_code)]

use std::time::Duration;

use reqwest::StatusCode;
use rmq::Client;
use rmq_serve::{Access, Options};
use rmq_test_support::RedisServer;
use serde_json::Value;

pub const TOKEN: &str = "test-token-1";

pub struct Server {
    _redis: Option<RedisServer>,
    pub redis_url: String,
    pub base: String,
    pub client: Client,
    pub http: reqwest::Client,
}

impl Server {
    pub async fn start(access: Access) -> Server {
        let redis = RedisServer::start();
        let mut s = Server::on(&redis.url(), access).await;
        s._redis = Some(redis);
        s
    }

    /// Stops `redis` when the server is dropped.
    pub fn keeping(mut self, redis: RedisServer) -> Server {
        self.redis_url = redis.url();
        self._redis = Some(redis);
        self
    }

    /// Another server on the same Redis (another instance of `rmq serve`).
    pub async fn beside(&self, access: Access) -> Server {
        Server::on(&self.redis_url, access).await
    }

    async fn on(redis_url: &str, access: Access) -> Server {
        let client = Client::connect(redis_url).await.unwrap();
        let mut s = Server::serving(client, access).await;
        s.redis_url = redis_url.to_string();
        s
    }

    /// A server over this client (its Redis kept by the caller, or given
    /// with [`Server::keeping`]).
    pub async fn serving(client: Client, access: Access) -> Server {
        let options = Options {
            access,
            scrape_cache: Duration::from_millis(0),
            sample_every: Duration::from_millis(200),
            allowed_hosts: Vec::new(),
            ..Options::default()
        };
        let router = rmq_serve::router(client.clone(), options);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}/", listener.local_addr().unwrap());
        tokio::spawn(rmq_serve::serve(listener, router, std::future::pending()));
        Server {
            _redis: None,
            redis_url: String::new(),
            base,
            client,
            http: reqwest::Client::new(),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path.trim_start_matches('/'))
    }

    pub async fn get(&self, path: &str) -> (StatusCode, Value) {
        let r = self.http.get(self.url(path)).send().await.unwrap();
        let status = r.status();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    /// An action with the token.
    pub async fn act(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let mut req = self.http.request(method, self.url(path)).bearer_auth(TOKEN);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let r = req.send().await.unwrap();
        let status = r.status();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    pub async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        self.act(reqwest::Method::POST, path, Some(body)).await
    }
}

pub fn error_kind(v: &Value) -> &str {
    v["error"]["kind"]
        .as_str()
        .unwrap_or_else(|| panic!("no error shape: {v}"))
}
