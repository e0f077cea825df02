//! A TCP proxy between a client under test and a real server, for faults
//! that need no root and no `tc netem`: **freeze** (connections stay open,
//! nothing moves either way, as when a network path silently drops
//! everything) and **cut after a request** (the next client request that
//! contains a pattern is forwarded to the server, which runs it, and then
//! the connection is cut before the reply comes back: the client cannot
//! know whether its command ran, and a client that re-sends runs it twice)
//! and **hold from the n-th request** (requests before it go through, it
//! and everything after wait until released: the test can act on the
//! server between two commands of one pipeline).
//!
//! Threads, not async: the proxy must keep working while the test's own
//! runtime is blocked or busy. Every thread ends when its sockets close;
//! dropping the proxy closes the listener's connections.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

/// How long a cut connection waits, after forwarding the request, for the
/// server to have read it before both sides are closed.
const CUT_DELAY: Duration = Duration::from_millis(100);

#[derive(Default)]
struct State {
    frozen: AtomicBool,
    /// Cut the connection that carries the next request holding this.
    cut_on: Mutex<Option<Vec<u8>>>,
    cuts: AtomicU64,
    /// Hold requests from the n-th one holding this pattern on.
    hold_from: Mutex<Option<(Vec<u8>, usize)>>,
    /// A connection is holding requests back now.
    holding: AtomicBool,
    conns: Mutex<Vec<TcpStream>>,
    closed: AtomicBool,
}

/// A running proxy on a free loopback port.
pub struct Proxy {
    port: u16,
    state: Arc<State>,
}

impl Proxy {
    /// Listens on a free 127.0.0.1 port and forwards each connection to
    /// `upstream`.
    pub fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind(("127.0.0.1", 0)).expect("bind the proxy");
        Proxy::serve(listener, upstream)
    }

    /// Like [`start`](Self::start) on a given port (e.g. one a Redis
    /// Cluster node announces as its own).
    pub fn start_on(port: u16, upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind(("127.0.0.1", port)).expect("bind the proxy");
        Proxy::serve(listener, upstream)
    }

    fn serve(listener: TcpListener, upstream: SocketAddr) -> Proxy {
        let port = listener.local_addr().expect("proxy address").port();
        let state = Arc::new(State::default());
        let st = state.clone();
        thread::spawn(move || {
            for client in listener.incoming() {
                if st.closed.load(Ordering::Relaxed) {
                    return;
                }
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(upstream) else {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                if let (Ok(c), Ok(s)) = (client.try_clone(), server.try_clone()) {
                    let mut conns = st.conns.lock().unwrap_or_else(|e| e.into_inner());
                    conns.push(c);
                    conns.push(s);
                }
                let cut = Arc::new(AtomicBool::new(false));
                pump(&st, &client, &server, Way::Requests(cut.clone()));
                pump(&st, &server, &client, Way::Replies(cut));
            }
        });
        Proxy { port, state }
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Nothing moves in either direction until [`thaw`](Self::thaw); the
    /// connections stay open.
    pub fn freeze(&self) {
        self.state.frozen.store(true, Ordering::SeqCst);
    }

    /// Traffic flows again (what was held is delivered).
    pub fn thaw(&self) {
        self.state.frozen.store(false, Ordering::SeqCst);
    }

    /// The next client request whose bytes contain `pattern` reaches the
    /// server, and then its connection is cut before any reply returns.
    pub fn cut_after_request(&self, pattern: &[u8]) {
        *self.state.cut_on.lock().unwrap_or_else(|e| e.into_inner()) = Some(pattern.to_vec());
    }

    /// On each connection: the requests before the `nth` (1-based) one
    /// whose command name is `pattern` (e.g. `EVALSHA`) go through; that
    /// one and all after it wait for [`release`](Self::release). The held
    /// part starts at the request's RESP array header.
    pub fn hold_from(&self, pattern: &[u8], nth: usize) {
        *self
            .state
            .hold_from
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some((pattern.to_vec(), nth.max(1)));
    }

    /// Whether requests are being held back now (see [`hold_from`](Self::hold_from)).
    pub fn holding(&self) -> bool {
        self.state.holding.load(Ordering::SeqCst)
    }

    /// Lets held requests go on, and holds nothing more.
    pub fn release(&self) {
        *self
            .state
            .hold_from
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// How many connections were cut by [`cut_after_request`](Self::cut_after_request).
    pub fn cuts(&self) -> u64 {
        self.state.cuts.load(Ordering::SeqCst)
    }

    /// Closes every connection made so far.
    pub fn cut_all(&self) {
        for c in self
            .state
            .conns
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            let _ = c.shutdown(Shutdown::Both);
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.state.closed.store(true, Ordering::SeqCst);
        self.cut_all();
        // Wake the accept loop so that it sees `closed`.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// How often a holding connection looks whether it was released.
const GATE_TICK: Duration = Duration::from_millis(10);

fn is_timeout(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

/// Splits one connection's request stream at the n-th request that holds a
/// pattern. Until then it passes everything on but a short tail (where the
/// header of a matching request may begin); from then on it keeps all.
struct Gate {
    pattern: Vec<u8>,
    nth: usize,
    seen: usize,
    /// Bytes not passed on yet.
    pending: Vec<u8>,
    /// `pending[..scanned]` was searched already.
    scanned: usize,
    held: bool,
}

impl Gate {
    /// Bytes kept back while searching: a request header plus the pattern.
    const TAIL: usize = 64;

    fn new(pattern: Vec<u8>, nth: usize) -> Gate {
        Gate {
            pattern,
            nth,
            seen: 0,
            pending: Vec::new(),
            scanned: 0,
            held: false,
        }
    }

    /// Takes newly read bytes (none on a read time-out) and returns what
    /// may be passed on now.
    fn take(&mut self, bytes: &[u8]) -> Vec<u8> {
        self.pending.extend_from_slice(bytes);
        if self.held {
            return Vec::new();
        }
        let p = self.pattern.len().max(1);
        let mut i = self.scanned;
        while i + p <= self.pending.len() {
            if self.pending[i..i + p] == self.pattern[..] {
                self.seen += 1;
                if self.seen == self.nth {
                    let start = request_start(&self.pending, i);
                    self.held = true;
                    return self.pending.drain(..start).collect();
                }
                i += p;
            } else {
                i += 1;
            }
        }
        self.scanned = i;
        // Nothing new arrived for a while: the request is complete, pass it
        // all on; otherwise keep a tail where a request header may begin.
        let cut = if bytes.is_empty() {
            self.pending.len()
        } else {
            self.pending
                .len()
                .saturating_sub(Self::TAIL)
                .min(self.scanned)
        };
        self.scanned -= cut.min(self.scanned);
        self.pending.drain(..cut).collect()
    }
}

/// Where the RESP request holding `at` begins: the `*<n>` array header
/// before its first argument (`$<len>` then the bytes at `at`).
fn request_start(buf: &[u8], at: usize) -> usize {
    let before = &buf[..at];
    // Back over "$<len>\r\n", then over "*<n>\r\n".
    let arg = before.iter().rposition(|&b| b == b'$').unwrap_or(0);
    let head = buf[..arg].iter().rposition(|&b| b == b'*').unwrap_or(arg);
    head
}

/// One direction of a connection; both share the connection's "cut" flag.
enum Way {
    /// Client to server: requests are matched here, and a match sets the flag.
    Requests(Arc<AtomicBool>),
    /// Server to client: once the flag is set, nothing more is passed on.
    Replies(Arc<AtomicBool>),
}

/// Copies `from` to `to` on its own thread.
fn pump(st: &Arc<State>, from: &TcpStream, to: &TcpStream, way: Way) {
    let (Ok(mut from), Ok(mut to)) = (from.try_clone(), to.try_clone()) else {
        return;
    };
    let st = st.clone();
    thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        let mut gate: Option<Gate> = None;
        loop {
            if matches!(way, Way::Requests(_)) {
                let armed = st
                    .hold_from
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .clone();
                match (&mut gate, armed) {
                    (None, Some((pattern, nth))) => {
                        let _ = from.set_read_timeout(Some(GATE_TICK));
                        gate = Some(Gate::new(pattern, nth));
                    }
                    (Some(g), None) => {
                        // Released: pass on what was kept back.
                        let _ = from.set_read_timeout(None);
                        let kept = std::mem::take(&mut g.pending);
                        gate = None;
                        st.holding.store(false, Ordering::SeqCst);
                        if to.write_all(&kept).is_err() {
                            break;
                        }
                    }
                    _ => {}
                }
            }
            let n = match from.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if gate.is_some() && is_timeout(&e) => 0,
                Err(_) => break,
            };
            if gate.is_none() && matches!(way, Way::Requests(_)) {
                // Armed while this read waited: these bytes count too.
                let armed = st
                    .hold_from
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .clone();
                if let Some((pattern, nth)) = armed {
                    let _ = from.set_read_timeout(Some(GATE_TICK));
                    gate = Some(Gate::new(pattern, nth));
                }
            }
            if let Some(g) = gate.as_mut() {
                let pass = g.take(&buf[..n]);
                if g.held {
                    st.holding.store(true, Ordering::SeqCst);
                }
                if to.write_all(&pass).is_err() {
                    break;
                }
                continue;
            }
            while st.frozen.load(Ordering::SeqCst) && !st.closed.load(Ordering::SeqCst) {
                thread::sleep(Duration::from_millis(5));
            }
            let chunk = &buf[..n];
            let cut = match &way {
                Way::Replies(cut) if cut.load(Ordering::SeqCst) => break,
                Way::Replies(_) => false,
                Way::Requests(_) => {
                    let mut on = st.cut_on.lock().unwrap_or_else(|e| e.into_inner());
                    let hit = on
                        .as_ref()
                        .is_some_and(|p| chunk.windows(p.len().max(1)).any(|w| w == &p[..]));
                    if hit {
                        *on = None;
                    }
                    hit
                }
            };
            if cut {
                // Before the request leaves: its reply must not get through.
                if let Way::Requests(flag) = &way {
                    flag.store(true, Ordering::SeqCst);
                }
                st.cuts.fetch_add(1, Ordering::SeqCst);
            }
            if to.write_all(chunk).is_err() {
                break;
            }
            if cut {
                thread::sleep(CUT_DELAY);
                break;
            }
        }
        let _ = from.shutdown(Shutdown::Both);
        let _ = to.shutdown(Shutdown::Both);
    });
}
