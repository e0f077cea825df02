//! One worker: a long-lived `sh -c CMD` in its own process group, kept
//! running by a supervisor task that owns it. Deliveries reach it as
//! requests on a channel; the supervisor writes each one's line to the
//! worker's stdin, keeps its reply channel by id, and answers it when the
//! worker's result line for that id comes. When the worker exits, writes a
//! line that is not a result, or is asked to be killed (a delivery timed
//! out), every delivery it holds is answered with why (they are retried)
//! and a new worker starts, after a pause that grows while workers keep
//! dying young. Its stderr goes to rmq's, each line prefixed with its
//! number.

use std::collections::HashMap;
use std::io::Write;
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, oneshot};

use super::lines;
use crate::cmd::consume::verdict::Verdict;
use crate::cmd::consume::Ctx;
use crate::{output, reaper};

/// A delivery's answer: the worker's verdict, or why the worker could not
/// give one (it exited, was restarted, ...).
pub(super) type Answer = Result<Verdict, String>;

pub(super) enum Request {
    /// Hand this line (delivery `id`) to the worker; say on `written`
    /// when the worker has it (its timeout starts then: not while a worker
    /// is being started); answer on `reply`.
    Deliver {
        id: String,
        line: Vec<u8>,
        written: oneshot::Sender<()>,
        reply: oneshot::Sender<Answer>,
    },
    /// Kill the worker (its deliveries are answered with `why`) and start
    /// another; say on `done` once its process group is dead.
    Kill {
        why: String,
        done: Option<oneshot::Sender<()>>,
    },
}

/// The handle on one worker.
pub(super) struct Worker {
    pub(super) number: usize,
    requests: mpsc::UnboundedSender<Request>,
    /// Deliveries handed to it and not answered yet.
    pub(super) in_flight: AtomicUsize,
}

impl Worker {
    /// Starts worker `number` running `cmd` (and its supervisor); it ends
    /// when the last handle is dropped.
    pub(super) fn start(
        number: usize,
        cmd: String,
        ctx: Arc<Ctx>,
    ) -> (Arc<Worker>, tokio::task::JoinHandle<()>) {
        let (requests, inbox) = mpsc::unbounded_channel();
        let supervisor = tokio::spawn(supervise(number, cmd, ctx, inbox));
        let worker = Arc::new(Worker {
            number,
            requests,
            in_flight: AtomicUsize::new(0),
        });
        (worker, supervisor)
    }

    /// Hands a delivery's line to the worker: the first channel says when
    /// the worker has it, the second brings the answer.
    pub(super) fn deliver(
        &self,
        id: String,
        line: Vec<u8>,
    ) -> (oneshot::Receiver<()>, oneshot::Receiver<Answer>) {
        let (reply, answer) = oneshot::channel();
        let (written, handed) = oneshot::channel();
        // A supervisor that is gone drops `reply`: the caller sees it.
        let _ = self.requests.send(Request::Deliver {
            id,
            line,
            written,
            reply,
        });
        (handed, answer)
    }

    pub(super) fn kill(&self, why: String) {
        let _ = self.requests.send(Request::Kill { why, done: None });
    }

    /// Kills the worker and waits until its process group is dead (serial
    /// mode: a slot's lease was lost while the worker held its message,
    /// and no handler may run on once another member may start it).
    pub(super) async fn kill_and_wait(&self, why: String) {
        let (done, dead) = oneshot::channel();
        let asked = self.requests.send(Request::Kill {
            why,
            done: Some(done),
        });
        if asked.is_ok() {
            // Dropped unsent: the supervisor is gone, and its worker too.
            let _ = dead.await;
        }
    }
}

/// Counts a delivery in flight at a worker while it lives.
pub(super) struct Counted(pub(super) Arc<Worker>);

impl Counted {
    pub(super) fn new(w: Arc<Worker>) -> Counted {
        w.in_flight.fetch_add(1, Ordering::Relaxed);
        Counted(w)
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Runs worker `number` until every handle is gone, restarting it when it
/// ends.
async fn supervise(
    number: usize,
    cmd: String,
    ctx: Arc<Ctx>,
    mut inbox: mpsc::UnboundedReceiver<Request>,
) {
    let mut pause = Duration::from_millis(100);
    loop {
        let started = Instant::now();
        let why = match run_once(number, &cmd, &ctx, &mut inbox).await {
            Ended::Closed => return,
            Ended::Restart(why) => why,
        };
        if started.elapsed() > Duration::from_secs(10) {
            pause = Duration::from_millis(100);
        }
        output::warn_line(&format!(
            "worker {number} {why}; starting another in {pause:?}"
        ));
        // Deliveries that arrive meanwhile wait in the channel.
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(5));
    }
}

enum Ended {
    /// Every handle is gone: the consumer is done.
    Closed,
    /// The worker ended (why); start another.
    Restart(String),
}

/// One life of the worker process.
async fn run_once(
    number: usize,
    cmd: &str,
    ctx: &Ctx,
    inbox: &mut mpsc::UnboundedReceiver<Request>,
) -> Ended {
    let Started {
        mut child,
        pid,
        mut stdin,
        mut stdout,
    } = match start(number, cmd, ctx).await {
        Ok(started) => started,
        Err(why) => return Ended::Restart(why),
    };
    let mut pending: HashMap<String, oneshot::Sender<Answer>> = HashMap::new();
    let mut line = Vec::new();
    let mut killed: Option<oneshot::Sender<()>> = None;
    let ended = loop {
        tokio::select! {
            request = inbox.recv() => match request {
                Some(Request::Deliver { id, line, written, reply }) => {
                    if let Err(e) = stdin.write_all(&line).await {
                        let _ = reply.send(Err(format!("worker {number} could not be written to ({e})")));
                        break Ended::Restart(format!("closed its stdin ({e})"));
                    }
                    let _ = written.send(());
                    pending.insert(id, reply);
                }
                Some(Request::Kill { why, done }) => {
                    killed = done;
                    break Ended::Restart(why);
                }
                None => break Ended::Closed,
            },
            // (Not cancellation safe, but what a cancelled read took stays
            // in `line`, and the next read goes on from there.)
            read = stdout.read_until(b'\n', &mut line) => match read {
                Ok(0) | Err(_) => break Ended::Restart(exited(&mut child).await),
                Ok(_) => {
                    if let Err(why) = answer(number, &std::mem::take(&mut line), &mut pending) {
                        break Ended::Restart(why);
                    }
                }
            },
        }
    };
    // Closing stdin first lets a worker that reads to the end exit by
    // itself; its group is killed either way.
    drop(stdin);
    put_down(ctx, &mut child, pid, killed).await;
    fail_held(number, &ended, pending);
    ended
}

/// Each delivery the worker still held fails, saying how it ended.
fn fail_held(number: usize, ended: &Ended, held: HashMap<String, oneshot::Sender<Answer>>) {
    let why = match ended {
        Ended::Restart(why) => format!("worker {number} {why}"),
        Ended::Closed => format!("worker {number} stopped"),
    };
    for (_, reply) in held {
        let _ = reply.send(Err(why.clone()));
    }
}

/// A worker process started: its stdin and stdout (its stderr goes to
/// rmq's, each line prefixed), watched by the reaper.
struct Started {
    child: tokio::process::Child,
    pid: Option<u32>,
    stdin: tokio::process::ChildStdin,
    stdout: BufReader<tokio::process::ChildStdout>,
}

/// Starts worker `number`; Err says why it could not.
async fn start(number: usize, cmd: &str, ctx: &Ctx) -> Result<Started, String> {
    let mut child = worker_command(number, cmd)
        .spawn()
        .map_err(|e| format!("could not start (sh -c: {e})"))?;
    let pid = child.id();
    if let (Some(r), Some(pid)) = (&ctx.reaper, pid) {
        r.watch(pid).await;
    }
    let (Some(stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err("has no pipes".into());
    };
    tokio::spawn(prefix_stderr(number, stderr));
    Ok(Started {
        child,
        pid,
        stdin,
        stdout: BufReader::new(stdout),
    })
}

/// `sh -c CMD` for worker `number` (`RMQ_WORKER`), its stdio piped, in
/// a process group of its own (killed whole).
fn worker_command(number: usize, cmd: &str) -> tokio::process::Command {
    let mut command = reaper::shell();
    command
        .arg("-c")
        .arg(cmd)
        .env("RMQ_WORKER", number.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    command
}

/// Hands a result line to the delivery it answers; Err (why the worker
/// is restarted) for a line that is not a result.
fn answer(
    number: usize,
    line: &[u8],
    pending: &mut HashMap<String, oneshot::Sender<Answer>>,
) -> Result<(), String> {
    match lines::result(line) {
        Ok(None) => {}
        Ok(Some((id, verdict))) => match pending.remove(&id) {
            Some(reply) => {
                let _ = reply.send(Ok(verdict));
            }
            // Late (its delivery timed out) or made up.
            None => output::warn_line(&format!(
                "worker {number} answered id {id:?}, which it does not hold: ignored"
            )),
        },
        Err(e) => {
            return Err(format!(
                "wrote a line that is not a result ({e}): restarted (write logs to stderr)"
            ))
        }
    }
    Ok(())
}

/// Kills the worker's whole process group and reaps it, then tells who
/// asked for the kill (`killed`).
async fn put_down(
    ctx: &Ctx,
    child: &mut tokio::process::Child,
    pid: Option<u32>,
    killed: Option<oneshot::Sender<()>>,
) {
    if let Some(pid) = pid {
        reaper::kill_group(pid).await;
    }
    let _ = child.start_kill();
    let _ = child.wait().await;
    if let Some(done) = killed {
        let _ = done.send(());
    }
    if let (Some(r), Some(pid)) = (&ctx.reaper, pid) {
        r.forget(pid).await;
    }
}

/// How the worker ended, once its stdout closed.
async fn exited(child: &mut tokio::process::Child) -> String {
    let status = tokio::time::timeout(Duration::from_secs(2), child.wait()).await;
    match status {
        Ok(Ok(s)) => match s.code() {
            Some(c) => format!("exited (exit status {c})"),
            None => {
                use std::os::unix::process::ExitStatusExt;
                format!("exited (killed by signal {})", s.signal().unwrap_or(0))
            }
        },
        _ => "closed its stdout".into(),
    }
}

/// Copies the worker's stderr to rmq's, each line prefixed `[worker N] `.
async fn prefix_stderr(number: usize, stderr: tokio::process::ChildStderr) {
    let mut reader = BufReader::new(stderr);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match reader.read_until(b'\n', &mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                let line = String::from_utf8_lossy(&buf);
                // A closed stderr loses the copy, nothing else.
                let _ = writeln!(
                    std::io::stderr().lock(),
                    "[worker {number}] {}",
                    line.trim_end()
                );
            }
        }
    }
}
