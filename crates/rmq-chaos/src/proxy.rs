//! A small TCP proxy between the clients and Redis that can delay traffic,
//! black-hole it (connections stay open, nothing moves) or cut every
//! connection mid-stream: network faults on one machine without `tc netem`.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

const PASS: u8 = 0;
const DELAY: u8 = 1;
const BLACKHOLE: u8 = 2;

/// A running proxy; its threads live as long as the process.
#[derive(Clone)]
pub struct Proxy {
    pub port: u16,
    mode: Arc<AtomicU8>,
    delay_ms: Arc<AtomicU64>,
    conns: Arc<Mutex<Vec<TcpStream>>>,
}

impl Proxy {
    /// Listens on a free loopback port and forwards to `upstream`.
    pub fn start(upstream: SocketAddr) -> anyhow::Result<Proxy> {
        let listener = TcpListener::bind(("127.0.0.1", 0))?;
        let port = listener.local_addr()?.port();
        let proxy = Proxy {
            port,
            mode: Arc::new(AtomicU8::new(PASS)),
            delay_ms: Arc::new(AtomicU64::new(0)),
            conns: Arc::new(Mutex::new(Vec::new())),
        };
        let p = proxy.clone();
        thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let Ok(server) = TcpStream::connect(upstream) else {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                if let (Ok(c2), Ok(s2)) = (client.try_clone(), server.try_clone()) {
                    let mut conns = p.conns.lock().unwrap_or_else(|e| e.into_inner());
                    conns.push(c2);
                    conns.push(s2);
                }
                p.pump(&client, &server);
                p.pump(&server, &client);
            }
        });
        Ok(proxy)
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn pump(&self, from: &TcpStream, to: &TcpStream) {
        let (Ok(mut from), Ok(mut to)) = (from.try_clone(), to.try_clone()) else {
            return;
        };
        let (mode, delay) = (self.mode.clone(), self.delay_ms.clone());
        thread::spawn(move || {
            let mut buf = [0u8; 16 * 1024];
            loop {
                let n = match from.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                loop {
                    match mode.load(Ordering::Relaxed) {
                        BLACKHOLE => thread::sleep(Duration::from_millis(10)),
                        DELAY => {
                            thread::sleep(Duration::from_millis(delay.load(Ordering::Relaxed)));
                            break;
                        }
                        _ => break,
                    }
                }
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            let _ = to.shutdown(Shutdown::Both);
            let _ = from.shutdown(Shutdown::Both);
        });
    }

    /// Adds `ms` of latency to every chunk in both directions.
    pub fn delay(&self, ms: u64) {
        self.delay_ms.store(ms, Ordering::Relaxed);
        self.mode.store(DELAY, Ordering::Relaxed);
    }

    /// Holds every byte (connections stay open, nothing arrives).
    pub fn blackhole(&self) {
        self.mode.store(BLACKHOLE, Ordering::Relaxed);
    }

    /// Back to plain forwarding.
    pub fn pass(&self) {
        self.mode.store(PASS, Ordering::Relaxed);
    }

    /// Cuts every open connection (requests and replies in flight are lost).
    pub fn cut(&self) {
        let mut conns = self.conns.lock().unwrap_or_else(|e| e.into_inner());
        for c in conns.drain(..) {
            let _ = c.shutdown(Shutdown::Both);
        }
    }
}
