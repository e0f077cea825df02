//! The accept loop: HTTP/1.1 (keep-alive) over hyper, within [`Limits`].
//!
//! Why not `axum::serve`: it has no header-read or idle timeout and no
//! connection cap, so a client that sends nothing, or trickles its
//! headers a byte a second, holds a connection (and a file descriptor) for
//! as long as it likes; about a thousand of them exhausted the common
//! 1,024 descriptor limit and the API and `/metrics` stopped answering for
//! everyone. And its graceful shutdown waits for every connection, so a
//! client holding a half-sent request kept `rmq serve` from exiting.
//!
//! Here:
//! - a request's headers must arrive within `header_read_timeout`, counted
//!   from when the server starts waiting for them: on a new connection
//!   from its accept, on a kept-alive one from the previous response (so
//!   it also bounds how long a kept-alive connection waits for its next
//!   request);
//! - a connection on which no byte moves for `idle_timeout` is closed,
//!   whatever it is doing (a body that stopped arriving, a response the
//!   client stopped reading);
//! - at most `max_connections` are served at once. At the cap, a new
//!   connection asks the connection idle the longest (no request being
//!   handled) to close, and waits briefly for its place; if none frees,
//!   it is closed at once. So idle connections cannot lock well-behaved
//!   clients out, and descriptors stay bounded (the cap plus a few waiting);
//! - a stop closes idle connections at once, lets requests being handled
//!   finish for up to `shutdown_grace`, then closes what is left.

use std::collections::HashMap;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use rmq::CancellationToken;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;

/// How the server treats connections (see the module documentation).
#[derive(Debug, Clone)]
pub struct Limits {
    /// How long a request's headers may take to arrive, counted from when
    /// the server starts waiting for them (also the longest a kept-alive
    /// connection waits for its next request).
    pub header_read_timeout: Duration,
    /// A connection on which no byte moves for this long is closed.
    pub idle_timeout: Duration,
    /// Connections served at once; beyond it the longest-idle one is
    /// closed to make room, or the new one is refused.
    pub max_connections: usize,
    /// After a stop, how long requests being handled may still take
    /// before their connections are closed.
    pub shutdown_grace: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            max_connections: 512,
            shutdown_grace: Duration::from_secs(5),
        }
    }
}

/// How long a connection asked to make room may take to finish what it
/// is sending before it is closed.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// How long a new connection at the cap waits for a place.
const ADMIT_WAIT: Duration = Duration::from_secs(2);

/// What the accept loop knows of one connection.
struct Conn {
    /// Requests whose handler is running.
    busy: AtomicUsize,
    /// When a byte last moved (or a handler finished), in ms since `Registry::epoch`.
    last_io: AtomicU64,
    /// Asks the connection to close (to make room, or a stop).
    close: CancellationToken,
}

/// Every connection being served, to pick the one to close at the cap.
struct Registry {
    epoch: Instant,
    conns: Mutex<HashMap<u64, Arc<Conn>>>,
}

impl Registry {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Conn>>> {
        self.conns.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Asks the connection idle the longest to close; whether there was one.
    fn close_longest_idle(&self) -> bool {
        let conns = self.lock();
        let victim = conns
            .values()
            .filter(|c| c.busy.load(Ordering::Acquire) == 0 && !c.close.is_cancelled())
            .min_by_key(|c| c.last_io.load(Ordering::Acquire));
        match victim {
            Some(c) => {
                c.close.cancel();
                true
            }
            None => false,
        }
    }
}

/// Serves `router` on `listener` until `shutdown` resolves, within `limits`.
pub(crate) async fn run(
    listener: TcpListener,
    router: Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    limits: Limits,
) -> io::Result<()> {
    let max = limits.max_connections.max(1);
    let places = Arc::new(Semaphore::new(max));
    // Connections waiting for a place at the cap (each holds a descriptor).
    let waiting = Arc::new(Semaphore::new((max / 4).max(4)));
    let registry = Arc::new(Registry {
        epoch: Instant::now(),
        conns: Mutex::default(),
    });
    let stop = CancellationToken::new();
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .keep_alive(true);
    let builder = Arc::new(builder);
    let mut tasks = JoinSet::new();
    let mut next_id = 0u64;
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            () = &mut shutdown => break,
            Some(_) = tasks.join_next(), if !tasks.is_empty() => continue,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of descriptors, or a connection reset before its
                    // accept: the listener stays; do not spin.
                    tracing::warn!("accepting a connection failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        next_id += 1;
        let conn = Arc::new(Conn {
            busy: AtomicUsize::new(0),
            last_io: AtomicU64::new(registry.now_ms()),
            close: stop.child_token(),
        });
        let admitted = places.clone().try_acquire_owned();
        let (places, waiting, registry) = (places.clone(), waiting.clone(), registry.clone());
        let (builder, router, limits) = (builder.clone(), router.clone(), limits.clone());
        tasks.spawn(async move {
            let place = match admitted {
                Ok(p) => p,
                Err(_) => match admit(&places, &waiting, &registry).await {
                    Some(p) => p,
                    None => return, // closed: dropping the stream
                },
            };
            registry.lock().insert(next_id, conn.clone());
            serve_one(stream, &conn, &registry, &builder, router, &limits, place).await;
            registry.lock().remove(&next_id);
        });
    }
    // The stop: idle connections close at once, busy ones when their
    // request is answered; whatever is left after the grace is cut.
    drop(listener);
    stop.cancel();
    let drained = tokio::time::timeout(limits.shutdown_grace, async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            "{} connection(s) still open {:?} after the stop: closing them",
            tasks.len(),
            limits.shutdown_grace
        );
        tasks.abort_all();
        while tasks.join_next().await.is_some() {}
    }
    Ok(())
}

/// A place for a connection that arrived at the cap: the longest-idle
/// connection is asked to close, and this one waits a little for its
/// place. `None`: refused (no place freed, or too many already waiting).
async fn admit(
    places: &Arc<Semaphore>,
    waiting: &Arc<Semaphore>,
    registry: &Registry,
) -> Option<OwnedSemaphorePermit> {
    let _in_line = waiting.clone().try_acquire_owned().ok()?;
    registry.close_longest_idle();
    let place = tokio::time::timeout(ADMIT_WAIT, places.clone().acquire_owned()).await;
    match place {
        Ok(Ok(p)) => Some(p),
        _ => {
            tracing::debug!("a connection was refused: all places are busy");
            None
        }
    }
}

/// Counts a request as being handled while it lives.
struct Busy {
    conn: Arc<Conn>,
    registry: Arc<Registry>,
}

impl Busy {
    fn enter(conn: &Arc<Conn>, registry: &Arc<Registry>) -> Busy {
        conn.busy.fetch_add(1, Ordering::AcqRel);
        Busy {
            conn: conn.clone(),
            registry: registry.clone(),
        }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.conn
            .last_io
            .store(self.registry.now_ms(), Ordering::Release);
        self.conn.busy.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Serves one admitted connection until it ends, idles out, or is closed.
async fn serve_one(
    stream: TcpStream,
    conn: &Arc<Conn>,
    registry: &Arc<Registry>,
    builder: &http1::Builder,
    router: Router,
    limits: &Limits,
    place: OwnedSemaphorePermit,
) {
    let io = TokioIo::new(Tracked {
        inner: stream,
        conn: conn.clone(),
        registry: registry.clone(),
    });
    let svc = {
        let (conn, registry) = (conn.clone(), registry.clone());
        hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
            let busy = Busy::enter(&conn, &registry);
            let mut router = router.clone();
            async move {
                let response = tower_service::Service::call(&mut router, req).await;
                drop(busy);
                response
            }
        })
    };
    let served = builder.serve_connection(io, svc);
    tokio::pin!(served);
    let idle_ms = u64::try_from(limits.idle_timeout.as_millis()).unwrap_or(u64::MAX);
    let mut tick = tokio::time::interval(
        (limits.idle_timeout / 4).clamp(Duration::from_millis(50), Duration::from_secs(1)),
    );
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut closing_since: Option<Instant> = None;
    loop {
        tokio::select! {
            r = served.as_mut() => {
                if let Err(e) = r {
                    tracing::debug!("a connection ended: {e}");
                }
                break;
            }
            () = conn.close.cancelled(), if closing_since.is_none() => {
                // Idle: closes at once; busy: after its response.
                served.as_mut().graceful_shutdown();
                closing_since = Some(Instant::now());
            }
            _ = tick.tick() => {
                let quiet = registry.now_ms().saturating_sub(conn.last_io.load(Ordering::Acquire));
                if quiet >= idle_ms {
                    tracing::debug!("closing a connection idle for {quiet} ms");
                    break;
                }
                let idle = conn.busy.load(Ordering::Acquire) == 0;
                if idle && closing_since.is_some_and(|t| t.elapsed() >= CLOSE_GRACE) {
                    break;
                }
            }
        }
    }
    drop(place);
}

/// A TCP stream that records when a byte last moved on it.
struct Tracked {
    inner: TcpStream,
    conn: Arc<Conn>,
    registry: Arc<Registry>,
}

impl Tracked {
    fn moved(&self) {
        self.conn
            .last_io
            .store(self.registry.now_ms(), Ordering::Release);
    }
}

impl AsyncRead for Tracked {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.moved();
        }
        r
    }
}

impl AsyncWrite for Tracked {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.moved();
        }
        r
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.moved();
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
