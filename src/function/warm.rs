//! Warm executable functions: long-lived processes that serve many calls, one line each way.
//!
//! ```text
//!   worker ── {"id": "7", <stage call>}\n ──> stdin   ┐  instance 1 of N (its own process
//!   worker <── {"id": "7", <stage reply>}\n ── stdout │  group, working directory = its folder)
//!   log    <── lines ─────────────────────── stderr   ┘   (a progress line is the call's
//! ```                                                     in flight: see [`InFlight`])
//!
//! Before its reply, a call may save its context with a line `{"id": "7", "checkpoint": {...}}`
//! on stdout (see [`StageCall::checkpoint`]): the worker writes it before it reads the next
//! line, so a reply that follows (a failure) is written after it, and the retry starts from it.
//! A checkpoint the database refuses (not an object, too large) fails the call with retry.
//!
//! `function.toml` says `mode = "warm"` and `instances = N`: up to N processes of the function's
//! `command`, started when a call needs one (not before), each serving one call at a time
//! (`concurrency = N` lets one serve N at once: see [`super::warm_shared`]). A
//! reply carries the id of its call. An instance that exits, or breaks the protocol (a line
//! that is not JSON, a reply with another id, a line past the reply size limit), is killed with
//! its process group, its call fails with retry, and the next instance starts after a back-off
//! that grows with each failure in a row (reset by the next good reply). A call that times out
//! (its `timeout` runs from when its instance receives it) or is abandoned (cancelled, its lease
//! lost, handed back at shutdown) kills its own instance only. After `max_calls_per_instance`
//! calls an instance is retired and the next call starts a fresh one. Instances idle for
//! [`IDLE_STOP`] are stopped (so a worker that has nothing to do holds no process), and
//! [`Function::stop`] stops the rest when the worker ends. Stopping an instance closes its stdin
//! and sends SIGTERM to its process group; what is still there after [`RETIRE_GRACE`] is killed.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio::sync::Semaphore;
use tokio::time::Instant;

use super::process::{
    checkpoint_refused, command, exit_text, keep_tail, progress_line, read_stderr, tail, write_checkpoint, GroupGuard,
    STDERR_LINE_BYTES,
};
use super::{BoxFuture, Checkpoints, Function, Progress, StageCall, StageReply};

/// How long an instance may sit idle before it is stopped.
pub const IDLE_STOP: Duration = Duration::from_secs(60);
/// How long a stopped instance has to exit after its stdin closed and SIGTERM, before SIGKILL.
pub const RETIRE_GRACE: Duration = Duration::from_secs(5);
/// The first back-off after a failed instance; it doubles with each failure in a row.
const BACKOFF_FIRST: Duration = Duration::from_millis(100);
/// The longest back-off.
const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// How long the exit status of an instance that closed its stdout is waited for.
const EXIT_AFTER_EOF: Duration = Duration::from_secs(1);
/// How long the last stderr lines of a failed instance are waited for.
pub(super) const STDERR_AFTER_EXIT: Duration = Duration::from_millis(500);

/// How a warm function runs.
#[derive(Debug, Clone)]
pub struct WarmOptions {
    /// Most instances at once.
    pub instances: usize,
    /// Calls in flight on one instance at once (1: one at a time, as an instance that knows
    /// nothing of concurrency expects; more: see [`super::warm_shared`]).
    pub concurrency: usize,
    /// With `concurrency` 1: calls queued on an instance's stdin while it serves one (0: one call
    /// at a time, none waiting; see [`super::warm_shared`]).
    pub send_ahead: usize,
    /// Calls an instance serves before it is replaced (None: no limit).
    pub max_calls_per_instance: Option<u64>,
    /// Per call, from when an instance receives it.
    pub timeout: Option<Duration>,
    /// Longest reply line.
    pub max_reply: usize,
    /// How long an idle instance is kept.
    pub idle_stop: Duration,
}

impl WarmOptions {
    /// Calls one instance is given at once: `concurrency`, or with one at a time the call it
    /// serves and those sent ahead.
    pub(super) fn per_instance(&self) -> usize {
        if self.concurrency == 1 {
            1 + self.send_ahead
        } else {
            self.concurrency
        }
    }
}

/// A function served by long-lived processes of one command.
#[derive(Clone)]
pub struct WarmFunction {
    pool: Arc<Pool>,
}

pub(super) struct Pool {
    pub(super) name: String,
    argv: Vec<String>,
    dir: PathBuf,
    hidden: Vec<String>,
    pub(super) options: WarmOptions,
    /// One permit per instance: a call holds one while it waits for and runs on an instance.
    slots: Arc<Semaphore>,
    /// The permits of `slots` in all.
    slots_total: usize,
    state: Mutex<State>,
    /// The last call id handed out.
    pub(super) ids: AtomicU64,
}

#[derive(Default)]
pub(super) struct State {
    /// Instances waiting for a call, the most recently used last.
    idle: Vec<Instance>,
    /// Instances that failed in a row (exited, broke the protocol, could not start).
    pub(super) failures: u32,
    /// No instance starts before this (the back-off after a failure).
    pub(super) start_after: Option<Instant>,
    /// Whether the task that stops idle instances runs.
    janitor: bool,
    /// With `concurrency` > 1 or calls sent ahead: the instances, each with many calls at once.
    pub(super) shared: Vec<Arc<super::warm_shared::Shared>>,
    /// With `concurrency` > 1 or calls sent ahead: instances being started (counted against
    /// `instances`).
    pub(super) starting: usize,
}

/// One running process.
pub(super) struct Instance {
    pub(super) child: Child,
    pub(super) stdin: ChildStdin,
    pub(super) stdout: BufReader<ChildStdout>,
    pub(super) stderr_tail: Arc<Mutex<VecDeque<u8>>>,
    /// The task reading stderr: it ends when the pipe closes.
    pub(super) stderr_reader: tokio::task::JoinHandle<()>,
    /// The call it serves now, for the progress lines on its stderr.
    pub(super) in_flight: InFlight,
    /// Declared after the child: kills the group when the instance is dropped, however.
    pub(super) guard: GroupGuard,
    pub(super) pid: u32,
    /// The reaper leaves the pid alone while the instance lives.
    pub(super) _awaited: crate::reaper::Awaited,
    calls: u64,
    last_used: Instant,
}

/// The calls an instance serves now (their ids and progress), none between calls. stderr is read
/// by a task of its own, so a line may be read after the reply that followed it on stdout: a
/// progress line that names its call (`asyncflow:progress:<id> <json>`, as the helper libraries
/// write it) is taken only while that call is in flight, and one that names none is the call's
/// in flight when there is exactly one, or the first in line of calls sent ahead. Neither can
/// reach another task's call.
#[derive(Clone, Default)]
pub(super) struct InFlight(Arc<Mutex<Calls>>);

#[derive(Default)]
pub(super) struct Calls {
    calls: HashMap<String, (Progress, Checkpoints)>,
    /// Calls sent ahead: the one the instance serves now.
    first: Option<String>,
}

impl InFlight {
    fn lock(&self) -> std::sync::MutexGuard<'_, Calls> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The one call in flight (an instance serving one call at a time), or none.
    fn set(&self, call: Option<(String, &StageCall)>) {
        let mut calls = self.lock();
        calls.calls.clear();
        calls.calls.extend(call.map(|(id, call)| (id, (call.progress.clone(), call.checkpoints.clone()))));
    }

    /// One more call in flight (an instance serving many, or calls sent ahead).
    pub(super) fn add(&self, id: &str, call: &StageCall) {
        self.lock().calls.insert(id.to_string(), (call.progress.clone(), call.checkpoints.clone()));
    }

    /// Calls sent ahead: the one the instance serves now (None: none).
    pub(super) fn first(&self, id: Option<&str>) {
        self.lock().first = id.map(str::to_string);
    }

    /// Where the call `id` in flight writes its checkpoints.
    pub(super) fn checkpoints(&self, id: &str) -> Option<Checkpoints> {
        self.lock().calls.get(id).map(|(_, c)| c.clone())
    }

    /// A call no longer in flight.
    pub(super) fn remove(&self, id: &str) {
        self.lock().calls.remove(id);
    }

    /// Takes a progress line for the call it names (None: the only call in flight, or the first
    /// of calls sent ahead); false when that call is not in flight.
    fn progress(&self, named: Option<&str>, json: &str) -> Result<bool, String> {
        let calls = self.lock();
        let progress = match (named, calls.first.as_deref()) {
            (Some(id), _) | (None, Some(id)) => calls.calls.get(id).map(|(p, _)| p),
            (None, None) if calls.calls.len() == 1 => calls.calls.values().next().map(|(p, _)| p),
            (None, None) => None,
        };
        match progress {
            Some(progress) => progress.report_json(json).map(|()| true),
            None => Ok(false),
        }
    }
}

/// A call line: the stage call with its id.
#[derive(Serialize)]
struct CallLine<'a> {
    id: &'a str,
    #[serde(flatten)]
    call: &'a StageCall,
}

/// The line that sends `call` as call `id`, its newline included. Written into a buffer made
/// large enough for a call with a small context at once (serde_json's own starts at 128 bytes
/// and grows twice for a no-op's line of about 300).
pub(super) fn call_line(id: &str, call: &StageCall) -> serde_json::Result<Vec<u8>> {
    let mut line = Vec::with_capacity(CALL_LINE_START);
    serde_json::to_writer(&mut line, &CallLine { id, call })?;
    line.push(b'\n');
    Ok(line)
}

/// The room a call line's buffer starts with.
const CALL_LINE_START: usize = 512;

impl WarmFunction {
    /// `argv[0]` is the program (already resolved), run in `dir`, its processes not inheriting
    /// the worker's credentials nor the variables in `hidden`.
    pub fn new(
        name: impl Into<String>,
        argv: Vec<String>,
        dir: PathBuf,
        hidden: Vec<String>,
        options: WarmOptions,
    ) -> Self {
        let options =
            WarmOptions { instances: options.instances.max(1), concurrency: options.concurrency.max(1), ..options };
        let slots_total = options.instances.saturating_mul(options.per_instance());
        let slots = Arc::new(Semaphore::new(slots_total));
        WarmFunction {
            pool: Arc::new(Pool {
                name: name.into(),
                argv,
                dir,
                hidden,
                options,
                slots,
                slots_total,
                state: Mutex::new(State::default()),
                ids: AtomicU64::new(0),
            }),
        }
    }
}

impl Function for WarmFunction {
    fn call(&self, call: StageCall) -> BoxFuture<'static, StageReply> {
        let pool = self.pool.clone();
        Box::pin(async move { pool.run(call).await })
    }

    fn stop(&self) -> BoxFuture<'static, ()> {
        let pool = self.pool.clone();
        Box::pin(async move {
            let (idle, shared) = {
                let mut state = pool.lock();
                (std::mem::take(&mut state.idle), std::mem::take(&mut state.shared))
            };
            futures_util::future::join_all(idle.into_iter().map(|i| i.retire(&pool.name))).await;
            futures_util::future::join_all(shared.into_iter().map(|s| s.stop(pool.name.clone()))).await;
        })
    }
}

/// Why an exchange with an instance failed: the instance is done for.
pub(super) enum Broken {
    /// It closed its stdout (exited, most likely).
    Closed,
    /// It broke the protocol or its pipes failed.
    Protocol(String),
}

impl Pool {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    async fn run(self: Arc<Self>, call: StageCall) -> StageReply {
        // the permit is held until the call ends; the instance goes back to the pool before
        let Ok(_permit) = self.slots.clone().acquire_owned().await else {
            return StageReply::fail("the function's instances are closed");
        };
        if self.options.concurrency > 1 || self.options.send_ahead > 0 {
            return super::warm_shared::run(&self, call).await;
        }
        let mut instance = match self.take().await {
            Ok(instance) => instance,
            Err(why) => {
                self.failed();
                return StageReply::fail(why);
            }
        };
        let id = (self.ids.fetch_add(1, Ordering::Relaxed) + 1).to_string();
        let line = match call_line(&id, &call) {
            Ok(line) => line,
            Err(e) => {
                self.put_back(instance);
                return StageReply::fail(format!("cannot encode the stage call: {e}"));
            }
        };
        instance.in_flight.set(Some((id.clone(), &call)));
        // dropping this future (cancel, lease lost, hand-back) drops the instance: its group
        // is killed, and the next call starts another
        let exchange = instance.exchange(&line, &id, self.options.max_reply, &call.checkpoints);
        let outcome = match self.options.timeout {
            Some(t) => tokio::time::timeout(t, exchange).await,
            None => Ok(exchange.await),
        };
        instance.in_flight.set(None);
        match outcome {
            Err(_) => {
                let secs = self.options.timeout.map(|t| t.as_secs_f64()).unwrap_or_default();
                tracing::info!(function = %self.name, pid = instance.pid, task = %call.task_id, "call timed out: instance killed");
                StageReply::fail(format!("timed out after {secs} s"))
            }
            Ok(Ok(reply)) => {
                instance.calls += 1;
                self.lock().failures = 0;
                if self.options.max_calls_per_instance.is_some_and(|max| instance.calls >= max) {
                    tracing::debug!(function = %self.name, pid = instance.pid, calls = instance.calls, "instance recycled");
                    let name = self.name.clone();
                    tokio::spawn(async move { instance.retire(&name).await });
                } else {
                    self.put_back(instance);
                }
                StageReply::read(reply, &call.progress)
                    .unwrap_or_else(|why| StageReply::fail(format!("malformed reply: {why}")))
            }
            Ok(Err(broken)) => {
                let why = instance.failure_text(broken).await;
                tracing::warn!(function = %self.name, pid = instance.pid, task = %call.task_id, "instance failed, restarting: {why}");
                drop(instance);
                self.failed();
                StageReply::fail(why)
            }
        }
    }

    /// An idle instance that is still alive, or a new one once the back-off allows it.
    async fn take(self: &Arc<Self>) -> Result<Instance, String> {
        loop {
            let wait = {
                let mut state = self.lock();
                while let Some(mut instance) = state.idle.pop() {
                    match instance.child.try_wait() {
                        Ok(None) => return Ok(instance),
                        status => {
                            let how = match status {
                                Ok(Some(s)) => exit_text(&s),
                                _ => "gone".to_string(),
                            };
                            let stderr = tail(&instance.stderr_tail.lock().unwrap_or_else(|p| p.into_inner()));
                            tracing::warn!(function = %self.name, pid = instance.pid, "idle instance exited ({how}): {stderr}");
                            state.note_failure();
                        }
                    }
                }
                match state.start_after {
                    Some(at) if at > Instant::now() => at,
                    _ => break,
                }
            };
            tokio::time::sleep_until(wait).await;
        }
        self.start()
    }

    pub(super) fn start(self: &Arc<Self>) -> Result<Instance, String> {
        let mut cmd = command(&self.argv, &self.dir, &self.hidden)?;
        cmd.env("ASYNCFLOW_TYPE", &self.name);
        let program = self.argv.first().map(String::as_str).unwrap_or_default();
        // registered as awaited, so that a worker running as PID 1 never reaps it itself
        let (mut child, awaited) =
            crate::reaper::spawn(&mut cmd).map_err(|e| format!("cannot start {program}: {e}"))?;
        let pid = child.id().unwrap_or_default();
        let guard = GroupGuard::new(child.id().map(|pid| pid as i32));
        let (Some(stdin), Some(stdout), Some(stderr)) = (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err("the function's pipes could not be opened".into());
        };
        let stderr_tail = Arc::new(Mutex::new(VecDeque::new()));
        let in_flight = InFlight::default();
        let (name, kept, calls) = (self.name.clone(), stderr_tail.clone(), in_flight.clone());
        let stderr_reader = tokio::spawn(async move {
            read_stderr(
                stderr,
                |line| match progress_line(line).map(|(named, json)| (named, calls.progress(named, json))) {
                    Some((_, Ok(true))) => {}
                    Some((named, Ok(false))) => {
                        tracing::debug!(function = %name, pid, call = ?named, "progress line for no call in flight: dropped")
                    }
                    Some((_, Err(e))) => tracing::warn!(function = %name, pid, error = %e, "progress line not taken"),
                    None => tracing::info!(function = %name, pid, "stderr: {line}"),
                },
                |chunk| keep_tail(&mut kept.lock().unwrap_or_else(|p| p.into_inner()), chunk),
                // a warm instance checkpoints on stdout: its stderr lines are only logged
                STDERR_LINE_BYTES,
            )
            .await
        });
        tracing::debug!(function = %self.name, pid, "instance started");
        let janitor = !std::mem::replace(&mut self.lock().janitor, true);
        if janitor {
            tokio::spawn(stop_idle(Arc::downgrade(self)));
        }
        Ok(Instance {
            child,
            stdin,
            stdout: BufReader::new(stdout),
            stderr_tail,
            stderr_reader,
            in_flight,
            guard,
            pid,
            _awaited: awaited,
            calls: 0,
            last_used: Instant::now(),
        })
    }

    fn put_back(&self, mut instance: Instance) {
        instance.last_used = Instant::now();
        self.lock().idle.push(instance);
    }

    /// An instance failed: the next one starts after the back-off.
    pub(super) fn failed(&self) {
        self.lock().note_failure();
    }
}

impl State {
    fn note_failure(&mut self) {
        self.failures = self.failures.saturating_add(1);
        let backoff = BACKOFF_FIRST.saturating_mul(1 << self.failures.saturating_sub(1).min(16)).min(BACKOFF_MAX);
        self.start_after = Some(Instant::now() + backoff);
    }
}

/// Stops the instances idle for longer than the pool's `idle_stop`, looking a few times per
/// period; ends (to be started again with the next instance) once the pool has none, or with it.
async fn stop_idle(pool: Weak<Pool>) {
    let every = match pool.upgrade() {
        Some(pool) => (pool.options.idle_stop / 4).max(Duration::from_millis(100)),
        None => return,
    };
    loop {
        tokio::time::sleep(every).await;
        let Some(pool) = pool.upgrade() else { return };
        let stale = {
            let mut state = pool.lock();
            let limit = pool.options.idle_stop;
            let (stale, kept): (Vec<Instance>, Vec<Instance>) =
                std::mem::take(&mut state.idle).into_iter().partition(|i| i.last_used.elapsed() >= limit);
            state.idle = kept;
            let (stale_shared, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut state.shared)
                .into_iter()
                .partition(|s: &Arc<super::warm_shared::Shared>| s.idle_for() >= Some(limit));
            state.shared = kept;
            for shared in stale_shared {
                tracing::debug!(function = %pool.name, pid = shared.pid, "idle instance stopped");
                tokio::spawn(shared.stop(pool.name.clone()));
            }
            let busy = pool.slots.available_permits() < pool.slots_total;
            if state.idle.is_empty() && state.shared.is_empty() && !busy {
                state.janitor = false;
            }
            (stale, !state.janitor)
        };
        let (stale, done) = stale;
        for instance in stale {
            tracing::debug!(function = %pool.name, pid = instance.pid, "idle instance stopped");
            let name = pool.name.clone();
            tokio::spawn(async move { instance.retire(&name).await });
        }
        if done {
            return;
        }
    }
}

impl Instance {
    /// Writes one call line and reads the reply line with the same id (the id taken out),
    /// writing the call's checkpoint lines met on the way.
    async fn exchange(
        &mut self,
        line: &[u8],
        id: &str,
        limit: usize,
        checkpoints: &Checkpoints,
    ) -> Result<Value, Broken> {
        if let Err(e) = self.stdin.write_all(line).await {
            return Err(match e.kind() {
                std::io::ErrorKind::BrokenPipe => Broken::Closed,
                _ => Broken::Protocol(format!("writing the call: {e}")),
            });
        }
        let mut refused = None;
        loop {
            let reply = read_line(&mut self.stdout, limit).await?;
            let text = reply.strip_suffix(b"\r").unwrap_or(&reply);
            let value: Value = serde_json::from_slice(text).map_err(|e| {
                let start: String = String::from_utf8_lossy(text).chars().take(120).collect();
                Broken::Protocol(format!("a reply line that is not JSON ({e}): {start:?}"))
            })?;
            let Value::Object(mut map) = value else {
                return Err(Broken::Protocol("a reply line that is not a JSON object".into()));
            };
            match map.remove("id") {
                Some(Value::String(got)) if got == id => {}
                Some(other) => {
                    return Err(Broken::Protocol(format!("a reply with id {other} to the call with id {id:?}")))
                }
                None => return Err(Broken::Protocol(format!("a reply without id to the call with id {id:?}"))),
            }
            match checkpoint_line(&mut map) {
                Some(context) => {
                    if let Err(why) = write_checkpoint(checkpoints, id, context).await {
                        refused.get_or_insert(why);
                    }
                }
                None => return Ok(refused.map_or(Value::Object(map), |why| checkpoint_refused(&why))),
            }
        }
    }

    /// The call's error for a broken exchange, with how the instance ended and its stderr tail.
    async fn failure_text(&mut self, broken: Broken) -> String {
        let why = match broken {
            Broken::Protocol(why) => {
                self.guard.kill();
                format!("the function broke the protocol: {why}")
            }
            Broken::Closed => closed_text(self.child.wait()).await,
        };
        last_stderr(&mut self.stderr_reader).await;
        let stderr = tail(&self.stderr_tail.lock().unwrap_or_else(|p| p.into_inner()));
        if stderr.is_empty() {
            why
        } else {
            format!("{why}: {stderr}")
        }
    }

    /// Closes stdin, sends SIGTERM to the group, waits up to [`RETIRE_GRACE`] for the process
    /// to exit, then kills the group (dropping the guard).
    async fn retire(self, name: &str) {
        let Instance { mut child, stdin, guard, pid, .. } = self;
        drop(stdin);
        guard.signal(nix::sys::signal::Signal::SIGTERM);
        match tokio::time::timeout(RETIRE_GRACE, child.wait()).await {
            Ok(_) => tracing::debug!(function = %name, pid, "instance stopped"),
            Err(_) => {
                tracing::warn!(function = %name, pid, "instance still running {RETIRE_GRACE:?} after SIGTERM: killed")
            }
        }
        drop(guard);
    }
}

/// Why an instance closed its stdout: its exit status (`exited`), when it comes within
/// [`EXIT_AFTER_EOF`].
pub(super) async fn closed_text(
    exited: impl std::future::Future<Output = std::io::Result<std::process::ExitStatus>>,
) -> String {
    match tokio::time::timeout(EXIT_AFTER_EOF, exited).await {
        Ok(Ok(status)) => format!("the function's instance exited ({})", exit_text(&status)),
        _ => "the function's instance closed its stdout".to_string(),
    }
}

/// Lets the stderr reader take the last lines of an instance that ended in (not waited for long:
/// a process that left the group may hold the pipe open).
pub(super) async fn last_stderr(reader: &mut tokio::task::JoinHandle<()>) {
    let _ = tokio::time::timeout(STDERR_AFTER_EXIT, reader).await;
}

/// Reads up to the next newline (not included), at most `limit` bytes.
pub(super) async fn read_line(reader: &mut BufReader<ChildStdout>, limit: usize) -> Result<Vec<u8>, Broken> {
    let mut line = Vec::new();
    loop {
        let buf = reader.fill_buf().await.map_err(|e| Broken::Protocol(format!("reading the reply: {e}")))?;
        if buf.is_empty() {
            return Err(Broken::Closed);
        }
        let (piece, used, done) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (&buf[..i], i + 1, true),
            None => (buf, buf.len(), false),
        };
        if line.len() + piece.len() > limit {
            return Err(Broken::Protocol(format!("a reply line longer than {limit} bytes")));
        }
        line.extend_from_slice(piece);
        reader.consume(used);
        if done {
            return Ok(line);
        }
    }
}

/// The context of a checkpoint line (`{"id", "checkpoint": {...}}`, the id already taken out), or
/// None for a reply.
pub(super) fn checkpoint_line(map: &mut serde_json::Map<String, Value>) -> Option<Value> {
    if map.len() == 1 {
        map.remove("checkpoint")
    } else {
        None
    }
}
