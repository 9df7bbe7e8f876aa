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
//! **Sent ahead** (`concurrency = 1`, `send_ahead = K`): an instance still serves one call at a
//! time, in order, but up to K more calls wait in its stdin while it works, so that a loop over
//! stdin lines reads many calls per read and the worker reads many replies per read (no process
//! switch per call). Calls go to an idle instance first, then to a new one while there may be
//! more, then to the one with the shortest line. Here a call's timeout runs from when the
//! instance has answered every call before it (when it reads this one), a reply must answer the
//! first call in line (any other is a protocol error), and an instance whose call is abandoned is
//! killed once it has begun that call (at once if it has), as one serving one call at a time is:
//! the calls behind it never began, and go to another instance.
//!
//! Invariants: a call's id is in `waiting` from its registration until its reply or its end;
//! `load` counts the calls the instance has been given and not answered (abandoned ones
//! included, so that an instance that does not stop them gets no more than N); lines go to stdin
//! in the order they were queued in `outbox`, and with `order` kept in that order.

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
use super::warm::{closed_text, last_stderr, read_line, Broken, InFlight, Instance, Pool, RETIRE_GRACE};
use super::{StageCall, StageReply};

/// How long a function has to answer a call it was told to cancel before its instance is killed.
pub const CANCEL_GRACE: Duration = Duration::from_secs(5);
/// How long a call waits for room when every instance is full of abandoned calls.
const ROOM_WAIT: Duration = Duration::from_millis(20);

/// What a call waiting on an instance gets.
enum Answer {
    Reply(Value),
    /// The instance failed: the call fails with retry.
    Failed(String),
    /// The instance ended before it began this (sent-ahead) call: send it to another.
    Again,
}

type Waiter = oneshot::Sender<Answer>;

/// One process serving many calls.
pub(super) struct Shared {
    pub(super) pid: u32,
    name: String,
    stdin: tokio::sync::Mutex<Option<ChildStdin>>,
    child: tokio::sync::Mutex<Child>,
    guard: GroupGuard,
    stderr_tail: Arc<Mutex<VecDeque<u8>>>,
    /// The task reading stderr (it ends with the pipe): waited for a little when the instance
    /// exits, for its last lines.
    stderr_reader: tokio::sync::Mutex<tokio::task::JoinHandle<()>>,
    in_flight: InFlight,
    state: Mutex<SharedState>,
    /// Serves its calls one at a time, in order (sent ahead); else many at once.
    ordered: bool,
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
    /// Call lines queued for stdin, not written yet.
    outbox: Vec<u8>,
    /// Sent ahead: the ids of the calls queued and not answered, in order (abandoned ones too).
    order: VecDeque<String>,
    /// Sent ahead: when the first in line began (when the call before it was answered).
    first_since: Instant,
}

impl Shared {
    fn new(pool: &Arc<Pool>, instance: Instance, ordered: bool) -> Arc<Shared> {
        let Instance { child, stdin, stdout, stderr_tail, stderr_reader, in_flight, guard, pid, _awaited, .. } =
            instance;
        let shared = Arc::new(Shared {
            pid,
            name: pool.name.clone(),
            stdin: tokio::sync::Mutex::new(Some(stdin)),
            child: tokio::sync::Mutex::new(child),
            guard,
            stderr_tail,
            stderr_reader: tokio::sync::Mutex::new(stderr_reader),
            in_flight,
            state: Mutex::new(SharedState {
                waiting: HashMap::new(),
                cancelled: HashSet::new(),
                load: 0,
                calls: 0,
                retiring: false,
                dead: None,
                last_used: Instant::now(),
                outbox: Vec::new(),
                order: VecDeque::new(),
                first_since: Instant::now(),
            }),
            ordered,
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

    /// Queues a line for stdin and writes what is queued.
    async fn send(&self, line: &[u8]) -> Result<(), String> {
        self.queue(line, None);
        self.flush().await
    }

    /// Queues a line (a call's, with its id when sent ahead).
    fn queue(&self, line: &[u8], id: Option<&str>) {
        let mut state = self.lock();
        state.outbox.extend_from_slice(line);
        if let Some(id) = id {
            if state.order.is_empty() {
                self.in_flight.first(Some(id));
                state.first_since = Instant::now();
            }
            state.order.push_back(id.to_string());
        }
    }

    /// Sent ahead: when the call `id` began, None while calls ahead of it are not answered yet
    /// (Some(now) for a call not waiting any more: answered, or failed).
    fn began(&self, id: &str) -> Option<Instant> {
        let state = self.lock();
        if state.order.front().is_some_and(|first| first == id) {
            Some(state.first_since)
        } else if state.waiting.contains_key(id) {
            None
        } else {
            Some(Instant::now())
        }
    }

    /// Writes the queued lines, in one write when several calls queued at once (none left when it
    /// returns, unless the pipe failed).
    async fn flush(&self) -> Result<(), String> {
        let mut stdin = self.stdin.lock().await;
        let lines = std::mem::take(&mut self.lock().outbox);
        if lines.is_empty() {
            return Ok(()); // written by a call that queued after this one
        }
        let Some(pipe) = stdin.as_mut() else { return Err("the instance is stopping".into()) };
        pipe.write_all(&lines).await.map_err(|e| format!("writing the call: {e}"))
    }

    /// Ends the instance: every call in flight fails with `why` (and the stderr tail).
    fn broke(&self, why: &str) {
        self.guard.kill();
        let stderr = tail(&self.stderr_tail.lock().unwrap_or_else(|p| p.into_inner()));
        let why = if stderr.is_empty() { why.to_string() } else { format!("{why}: {stderr}") };
        let (waiting, begun) = {
            let mut state = self.lock();
            state.dead.get_or_insert_with(|| why.clone());
            state.retiring = true;
            // sent ahead, only the first in line has begun; else every call may have
            let begun = if self.ordered { state.order.front().cloned() } else { None };
            state.order.clear();
            (std::mem::take(&mut state.waiting), begun)
        };
        if !waiting.is_empty() {
            tracing::warn!(function = %self.name, pid = self.pid, calls = waiting.len(), "instance failed: {why}");
        }
        for (id, waiter) in waiting {
            self.in_flight.remove(&id);
            let answer = if !self.ordered || begun.as_deref() == Some(id.as_str()) {
                Answer::Failed(why.clone())
            } else {
                Answer::Again
            };
            let _ = waiter.send(answer);
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
        let begun = {
            let mut state = self.lock();
            if state.waiting.remove(id).is_none() {
                return; // answered, or the instance broke
            }
            state.cancelled.insert(id.to_string());
            state.order.front().is_some_and(|first| first == id)
        };
        self.in_flight.remove(id);
        if self.ordered {
            // it cannot be stopped halfway: its instance is killed once it begins it
            if begun {
                self.broke(&format!("call {id} was abandoned while the instance ran it: instance killed"));
            }
            return;
        }
        let (shared, id) = (self.clone(), id.to_string());
        tokio::spawn(async move {
            let line = format!("{}\n", serde_json::json!({ "cancel": id }));
            if let Err(why) = shared.send(line.as_bytes()).await {
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
                let why = closed_text(async { shared.child.lock().await.wait().await }).await;
                last_stderr(&mut *shared.stderr_reader.lock().await).await;
                shared.broke(&why);
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
        let (waiter, stop_now, abandoned_next) = {
            let mut state = shared.lock();
            if shared.ordered {
                match state.order.front() {
                    Some(first) if *first == id => {
                        state.order.pop_front();
                        state.first_since = Instant::now();
                        shared.in_flight.first(state.order.front().map(String::as_str));
                    }
                    first => {
                        let why = format!(
                            "the function broke the protocol: a reply with id {id:?} while call {first:?} is first in line"
                        );
                        drop(state);
                        shared.broke(&why);
                        return;
                    }
                }
            }
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
            // sent ahead: the next in line begins now; an abandoned one must not run
            let state = &mut *state;
            let abandoned_next = state.order.front().filter(|next| state.cancelled.remove(*next)).cloned();
            (waiter, state.retiring && state.load == 0 && state.dead.is_none(), abandoned_next)
        };
        shared.in_flight.remove(&id);
        let reply = match refused.remove(&id) {
            Some(why) => super::process::checkpoint_refused(&why),
            None => Value::Object(map),
        };
        if let Some(waiter) = waiter {
            let _ = waiter.send(Answer::Reply(reply));
        }
        if let Some(next) = abandoned_next {
            shared.broke(&format!("call {next} was abandoned before the instance began it: instance killed"));
            return;
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
    let line = match super::warm::call_line(&id, &call) {
        Ok(line) => line,
        Err(e) => return StageReply::fail(format!("cannot encode the stage call: {e}")),
    };
    loop {
        let (tx, mut rx) = oneshot::channel();
        let shared = match pick(pool, &id, &line, tx, &call).await {
            Ok(shared) => shared,
            Err(why) => {
                pool.failed();
                return StageReply::fail(why);
            }
        };
        let mut pending = Pending { shared: shared.clone(), id: id.clone(), done: false };
        // the calls that get a slot at the same time (the replies read in one go free theirs
        // together) queue their lines before the first of them writes: one write for them all
        tokio::task::yield_now().await;
        if let Err(why) = shared.flush().await {
            shared.broke(&why);
        }
        let outcome = match pool.options.timeout {
            None => Ok((&mut rx).await),
            // sent ahead, the timeout runs from when the call began: looked up when it expires
            Some(t) => {
                let mut deadline = Instant::now() + t;
                loop {
                    match tokio::time::timeout_at(deadline, &mut rx).await {
                        Ok(answer) => break Ok(answer),
                        Err(elapsed) if !shared.ordered => break Err(elapsed),
                        Err(elapsed) => match shared.began(&id) {
                            None => deadline = Instant::now() + t,
                            Some(at) if at + t > Instant::now() => deadline = at + t,
                            Some(_) => break Err(elapsed),
                        },
                    }
                }
            }
        };
        pending.done = outcome.is_ok();
        return match outcome {
            Err(_) => {
                let secs = pool.options.timeout.map(|t| t.as_secs_f64()).unwrap_or_default();
                tracing::info!(function = %pool.name, pid = shared.pid, task = %call.task_id, "call timed out: cancelled");
                StageReply::fail(format!("timed out after {secs} s")) // `pending` cancels it
            }
            Ok(Ok(Answer::Reply(reply))) => {
                pool.lock().failures = 0;
                // a reply may carry the call's last progress, as on the one-call path (warm.rs)
                StageReply::read(reply, &call.progress)
                    .unwrap_or_else(|why| StageReply::fail(format!("malformed reply: {why}")))
            }
            Ok(Ok(Answer::Again)) => continue,
            Ok(Ok(Answer::Failed(why))) => {
                pool.failed();
                StageReply::fail(why)
            }
            Ok(Err(_)) => {
                pool.failed();
                StageReply::fail("the function's instance ended")
            }
        };
    }
}

/// An instance with room, the call registered on it and its line queued.
/// Many calls at once: the fullest with room (calls gather on few instances). Sent ahead: an
/// idle one, else a new one while there may be more, else the one with the shortest line. A new
/// one when none has room and there may be more.
async fn pick(
    pool: &Arc<Pool>,
    id: &str,
    line: &[u8],
    waiter: Waiter,
    call: &StageCall,
) -> Result<Arc<Shared>, String> {
    let ordered = pool.options.concurrency == 1;
    let room = pool.options.per_instance();
    let mut waiter = Some(waiter);
    loop {
        let wait = {
            let mut state = pool.lock();
            state.shared.retain(|s| !s.lock().retiring);
            let more = state.shared.len() + state.starting < pool.options.instances;
            // an instance has room below `room` calls, and below its last before it is replaced
            let max_calls = pool.options.max_calls_per_instance.unwrap_or(u64::MAX);
            let loads = state.shared.iter().map(|s| (s.lock(), s)).filter_map(|(st, s)| {
                (st.load < room && st.calls.saturating_add(st.load as u64) < max_calls).then_some((st.load, s))
            });
            let best = if ordered {
                loads.min_by_key(|(load, _)| *load).filter(|(load, _)| *load == 0 || !more)
            } else {
                loads.max_by_key(|(load, _)| *load)
            }
            .map(|(_, s)| s.clone());
            if let Some(shared) = best {
                {
                    let mut s = shared.lock();
                    s.load += 1;
                    s.last_used = Instant::now();
                    if let Some(w) = waiter.take() {
                        s.waiting.insert(id.to_string(), w);
                    }
                }
                shared.in_flight.add(id, call);
                shared.queue(line, ordered.then_some(id));
                return Ok(shared);
            }
            if !more {
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
                state.shared.push(Shared::new(pool, started?, ordered));
            }
        }
    }
}
