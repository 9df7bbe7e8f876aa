//! Warm instances that serve many calls at once: `concurrency = N` in `function.toml`.
//!
//! ```text
//!   call 7 ─┐                     ┌─> {"id": "7", ...}\n ┐ stdin (one writer at a time)
//!   call 8 ─┼─ pick an instance ──┼─> {"id": "8", ...}\n ┘
//!   call 9 ─┘  with room (< N)    │
//!                                 └── reader task: {"id": "8", reply}\n ──> the waiter of id 8
//! ```
//!
//! Calls fill one instance up to `concurrency` before the next instance starts (at most
//! `instances`). Replies come back in any order; the reader hands each to the call with its id.
//! A call that times out or is abandoned (cancelled, its lease lost) ends alone where the
//! function allows it: the worker writes `{"cancel": "<id>"}` and stops waiting; the function
//! stops that call and answers it (any line with its id, e.g. `{"id", "cancelled": true}`), and
//! its other calls go on. An instance that has not answered within [`CANCEL_GRACE`] is killed,
//! as an instance serving one call is at once, and its other calls fail with retry. An instance
//! that exits or breaks the protocol (a line that is not JSON, a reply with an id it was not
//! given) fails every call in flight on it, with retry.
//!
//! Invariants: a call's id is in `waiting` from its line's write until its reply or its end;
//! `load` counts the calls the instance has been given and not answered (abandoned ones
//! included, so that an instance that does not stop them gets no more than N).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::process::{tail, GroupGuard};
use super::warm::{read_line, Broken, CallLine, InFlight, Instance, Pool, RETIRE_GRACE};
use super::{StageCall, StageReply};

/// How long a function has to answer a call it was told to cancel before its instance is killed.
pub const CANCEL_GRACE: Duration = Duration::from_secs(5);
/// How long a call waits for room when every instance is full of abandoned calls.
const ROOM_WAIT: Duration = Duration::from_millis(20);

type Waiter = oneshot::Sender<Result<Value, String>>;

/// One process serving many calls.
pub(super) struct Shared {
    pub(super) pid: u32,
    name: String,
    stdin: tokio::sync::Mutex<Option<ChildStdin>>,
    child: tokio::sync::Mutex<Child>,
    guard: GroupGuard,
    stderr_tail: Arc<Mutex<VecDeque<u8>>>,
    in_flight: InFlight,
    state: Mutex<SharedState>,
    _awaited: crate::reaper::Awaited,
}

struct SharedState {
    waiting: HashMap<String, Waiter>,
    /// Calls the worker stopped waiting for, not answered yet.
    cancelled: HashSet<String>,
    load: usize,
    calls: u64,
    /// Takes no more calls (recycled after max_calls_per_instance, or broken).
    retiring: bool,
    /// Why it broke, once it did.
    dead: Option<String>,
    last_used: Instant,
}

impl Shared {
    fn new(pool: &Arc<Pool>, instance: Instance) -> Arc<Shared> {
        let Instance { child, stdin, stdout, stderr_tail, stderr_reader, in_flight, guard, pid, _awaited, .. } =
            instance;
        drop(stderr_reader); // detached: it ends with the pipe
        let shared = Arc::new(Shared {
            pid,
            name: pool.name.clone(),
            stdin: tokio::sync::Mutex::new(Some(stdin)),
            child: tokio::sync::Mutex::new(child),
            guard,
            stderr_tail,
            in_flight,
            state: Mutex::new(SharedState {
                waiting: HashMap::new(),
                cancelled: HashSet::new(),
                load: 0,
                calls: 0,
                retiring: false,
                dead: None,
                last_used: Instant::now(),
            }),
            _awaited,
        });
        tokio::spawn(read_replies(shared.clone(), stdout, pool.options.max_reply, pool.options.max_calls_per_instance));
        shared
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SharedState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How long it has had no call, None while it has some (or once it broke).
    pub(super) fn idle_for(&self) -> Option<Duration> {
        let state = self.lock();
        (state.load == 0 && state.dead.is_none()).then(|| state.last_used.elapsed())
    }

    async fn write(&self, line: &[u8]) -> Result<(), String> {
        let mut stdin = self.stdin.lock().await;
        let Some(pipe) = stdin.as_mut() else { return Err("the instance is stopping".into()) };
        pipe.write_all(line).await.map_err(|e| format!("writing the call: {e}"))
    }

    /// Ends the instance: every call in flight fails with `why` (and the stderr tail).
    fn broke(&self, why: &str) {
        self.guard.kill();
        let stderr = tail(&self.stderr_tail.lock().unwrap_or_else(|p| p.into_inner()));
        let why = if stderr.is_empty() { why.to_string() } else { format!("{why}: {stderr}") };
        let waiting = {
            let mut state = self.lock();
            state.dead.get_or_insert_with(|| why.clone());
            state.retiring = true;
            std::mem::take(&mut state.waiting)
        };
        if !waiting.is_empty() {
            tracing::warn!(function = %self.name, pid = self.pid, calls = waiting.len(), "instance failed: {why}");
        }
        for (id, waiter) in waiting {
            self.in_flight.remove(&id);
            let _ = waiter.send(Err(why.clone()));
        }
    }

    /// Closes stdin, SIGTERM to the group, SIGKILL after [`RETIRE_GRACE`].
    pub(super) async fn stop(self: Arc<Self>, name: String) {
        self.lock().retiring = true;
        drop(self.stdin.lock().await.take());
        self.guard.signal(nix::sys::signal::Signal::SIGTERM);
        let mut child = self.child.lock().await;
        if tokio::time::timeout(RETIRE_GRACE, child.wait()).await.is_err() {
            tracing::warn!(function = %name, pid = self.pid, "instance still running {RETIRE_GRACE:?} after SIGTERM: killed");
        }
        self.guard.kill();
    }

    /// A call that will not be waited for any more: the function is told to stop it, and has
    /// [`CANCEL_GRACE`] to answer it before the instance is killed.
    fn abandon(self: &Arc<Self>, id: &str) {
        {
            let mut state = self.lock();
            if state.waiting.remove(id).is_none() {
                return; // answered, or the instance broke
            }
            state.cancelled.insert(id.to_string());
        }
        self.in_flight.remove(id);
        let (shared, id) = (self.clone(), id.to_string());
        tokio::spawn(async move {
            let line = format!("{}\n", serde_json::json!({ "cancel": id }));
            if let Err(why) = shared.write(line.as_bytes()).await {
                shared.broke(&why);
                return;
            }
            tokio::time::sleep(CANCEL_GRACE).await;
            if shared.lock().cancelled.contains(&id) {
                tracing::info!(function = %shared.name, pid = shared.pid, call = %id, "cancelled call not stopped within {CANCEL_GRACE:?}: instance killed");
                shared.broke(&format!("the instance did not stop call {id} within {CANCEL_GRACE:?} and was killed"));
            }
        });
    }
}

/// Reads the replies of one instance and hands each to its call, until the instance ends.
async fn read_replies(shared: Arc<Shared>, stdout: BufReader<ChildStdout>, limit: usize, max_calls: Option<u64>) {
    let mut stdout = stdout;
    // calls whose checkpoint was refused: their reply becomes a failure
    let mut refused: HashMap<String, String> = HashMap::new();
    loop {
        let line = match read_line(&mut stdout, limit).await {
            Ok(line) => line,
            Err(Broken::Closed) => {
                shared.broke("the function's instance closed its stdout (exited)");
                return;
            }
            Err(Broken::Protocol(why)) => {
                shared.broke(&format!("the function broke the protocol: {why}"));
                return;
            }
        };
        let text = line.strip_suffix(b"\r").unwrap_or(&line);
        let map = match serde_json::from_slice::<Value>(text) {
            Ok(Value::Object(map)) => map,
            Ok(_) => {
                shared.broke("the function broke the protocol: a reply line that is not a JSON object");
                return;
            }
            Err(e) => {
                let start: String = String::from_utf8_lossy(text).chars().take(120).collect();
                shared
                    .broke(&format!("the function broke the protocol: a reply line that is not JSON ({e}): {start:?}"));
                return;
            }
        };
        let mut map = map;
        let id = match map.remove("id") {
            Some(Value::String(id)) => id,
            other => {
                shared.broke(&format!("the function broke the protocol: a reply with id {other:?}, not a call's"));
                return;
            }
        };
        // a checkpoint line is written before the next line is read (the call's reply above all)
        if let Some(context) = super::warm::checkpoint_line(&mut map) {
            if let Some(checkpoints) = shared.in_flight.checkpoints(&id) {
                if let Err(why) = super::process::write_checkpoint(&checkpoints, &id, context).await {
                    refused.entry(id).or_insert(why);
                }
            }
            continue;
        }
        let (waiter, stop_now) = {
            let mut state = shared.lock();
            let waiter = state.waiting.remove(&id);
            if waiter.is_none() && !state.cancelled.remove(&id) {
                drop(state);
                shared.broke(&format!("the function broke the protocol: a reply with id {id:?}, which no call has"));
                return;
            }
            state.load = state.load.saturating_sub(1);
            state.last_used = Instant::now();
            if waiter.is_some() {
                state.calls += 1;
                if max_calls.is_some_and(|max| state.calls >= max) {
                    state.retiring = true;
                }
            }
            (waiter, state.retiring && state.load == 0 && state.dead.is_none())
        };
        shared.in_flight.remove(&id);
        let reply = match refused.remove(&id) {
            Some(why) => super::process::checkpoint_refused(&why),
            None => Value::Object(map),
        };
        if let Some(waiter) = waiter {
            let _ = waiter.send(Ok(reply));
        }
        if stop_now {
            tracing::debug!(function = %shared.name, pid = shared.pid, "instance recycled");
            tokio::spawn(shared.clone().stop(shared.name.clone()));
        }
    }
}

/// Ends an abandoned call (dropped, or timed out) on its instance.
struct Pending {
    shared: Arc<Shared>,
    id: String,
    done: bool,
}

impl Drop for Pending {
    fn drop(&mut self) {
        if !self.done {
            self.shared.abandon(&self.id);
        }
    }
}

/// Runs one call on an instance with room (the caller holds the pool's permit).
pub(super) async fn run(pool: &Arc<Pool>, call: StageCall) -> StageReply {
    let id = (pool.ids.fetch_add(1, Ordering::Relaxed) + 1).to_string();
    let line = match serde_json::to_vec(&CallLine { id: &id, call: &call }) {
        Ok(mut line) => {
            line.push(b'\n');
            line
        }
        Err(e) => return StageReply::fail(format!("cannot encode the stage call: {e}")),
    };
    let (tx, rx) = oneshot::channel();
    let shared = match pick(pool, &id, tx, &call).await {
        Ok(shared) => shared,
        Err(why) => {
            pool.failed();
            return StageReply::fail(why);
        }
    };
    let mut pending = Pending { shared: shared.clone(), id: id.clone(), done: false };
    if let Err(why) = shared.write(&line).await {
        shared.broke(&why);
    }
    let outcome = match pool.options.timeout {
        Some(t) => tokio::time::timeout(t, rx).await,
        None => Ok(rx.await),
    };
    match outcome {
        Err(_) => {
            let secs = pool.options.timeout.map(|t| t.as_secs_f64()).unwrap_or_default();
            tracing::info!(function = %pool.name, pid = shared.pid, task = %call.task_id, "call timed out: cancelled");
            StageReply::fail(format!("timed out after {secs} s")) // `pending` cancels it
        }
        Ok(Ok(Ok(reply))) => {
            pending.done = true;
            pool.lock().failures = 0;
            // a reply may carry the call's last progress, as on the one-call path (warm.rs)
            StageReply::read(reply, &call.progress)
                .unwrap_or_else(|why| StageReply::fail(format!("malformed reply: {why}")))
        }
        Ok(Ok(Err(why))) => {
            pending.done = true;
            pool.failed();
            StageReply::fail(why)
        }
        Ok(Err(_)) => {
            pending.done = true;
            pool.failed();
            StageReply::fail("the function's instance ended")
        }
    }
}

/// An instance with room, the call registered on it: the fullest with room (calls gather on
/// few instances), or a new one when none has room and there may be more.
async fn pick(pool: &Arc<Pool>, id: &str, waiter: Waiter, call: &StageCall) -> Result<Arc<Shared>, String> {
    let concurrency = pool.options.concurrency;
    let mut waiter = Some(waiter);
    loop {
        let wait = {
            let mut state = pool.lock();
            state.shared.retain(|s| !s.lock().retiring);
            let best =
                state.shared.iter().filter(|s| s.lock().load < concurrency).max_by_key(|s| s.lock().load).cloned();
            if let Some(shared) = best {
                let mut s = shared.lock();
                s.load += 1;
                s.last_used = Instant::now();
                if let Some(w) = waiter.take() {
                    s.waiting.insert(id.to_string(), w);
                }
                drop(s);
                shared.in_flight.add(id, call);
                return Ok(shared);
            }
            if state.shared.len() + state.starting >= pool.options.instances {
                Some(Instant::now() + ROOM_WAIT)
            } else {
                match state.start_after {
                    Some(at) if at > Instant::now() => Some(at),
                    _ => {
                        state.starting += 1;
                        None
                    }
                }
            }
        };
        match wait {
            Some(at) => tokio::time::sleep_until(at).await,
            None => {
                let started = pool.start();
                let mut state = pool.lock();
                state.starting -= 1;
                state.shared.push(Shared::new(pool, started?));
            }
        }
    }
}
