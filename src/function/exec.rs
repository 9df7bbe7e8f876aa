//! Executable functions: one process per stage call.
//!
//! ```text
//!   worker ── StageCall JSON ──> stdin   ┐
//!          ── ASYNCFLOW_* env ─────────> │ the function's process (its own process group,
//!   worker <── one reply object ─ stdout │ working directory = its folder)
//!   log    <── lines ─────────── stderr  ┘   (a line `asyncflow:progress <json>` is the call's
//! ```                                          progress instead: see [`PROGRESS_PREFIX`])
//!
//! Exit 0 means "the reply is on stdout". A non-zero exit, a reply that is not one of the four
//! forms, or stdout past the limit (which kills the process group at once) is a failure with
//! retry, its error taken from the stderr tail.
//! When the call is abandoned (timeout, lease lost, shutdown) its future is dropped, and the drop
//! kills the whole process group, so no grandchild outlives the call. The call ends when the
//! process exits: its group is killed then too, so a program it left running that inherited its
//! pipes cannot hold the call open (one that left the group is not waited for past a second).

use std::collections::{BTreeSet, VecDeque};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{BoxFuture, Function, StageCall, StageReply};

/// The worker's own credentials, taken out of the environment a function inherits: a function
/// is handed a task, not the queue's database or the server's tokens.
pub const WORKER_CREDENTIALS: [&str; 4] =
    ["DATABASE_URL", "ASYNCFLOW_TOKEN", "ASYNCFLOW_TOKENS", "ASYNCFLOW_CALLBACK_SECRET"];

/// Largest reply read from stdout.
pub const MAX_REPLY_BYTES_DEFAULT: usize = 1024 * 1024;
/// How much of stderr is kept for the error message.
const STDERR_TAIL_BYTES: usize = 2048;
/// A stderr line starting with this reports the call's progress: the rest of the line is a JSON
/// value of at most [`crate::function::PROGRESS_BYTES_MAX`] bytes, sent with the worker's next
/// heartbeat and shown by `get_task` as `progress`. It is not logged.
pub const PROGRESS_PREFIX: &str = "asyncflow:progress ";
/// Longest piece of a stderr line logged at once.
const STDERR_LINE_BYTES: usize = 4096;
/// How long the pipes are read after the process exited and its group was killed: only a
/// process that left the group (setsid) can still hold them open then, and it is not waited for.
const PIPES_AFTER_EXIT: std::time::Duration = std::time::Duration::from_secs(1);

/// A function run as a program.
#[derive(Clone)]
pub struct ExecFunction {
    inner: Arc<ExecInner>,
}

#[derive(Clone)]
struct ExecInner {
    name: String,
    argv: Vec<String>,
    dir: PathBuf,
    max_reply: usize,
    /// Variables the process does not inherit, beside the worker's credentials.
    hidden: Vec<String>,
}

impl ExecFunction {
    /// `argv[0]` is the program (already resolved), run in `dir`.
    pub fn new(name: impl Into<String>, argv: Vec<String>, dir: PathBuf, max_reply: usize) -> Self {
        ExecFunction { inner: Arc::new(ExecInner { name: name.into(), argv, dir, max_reply, hidden: Vec::new() }) }
    }

    /// The same function, its process not inheriting these variables (beside
    /// [`WORKER_CREDENTIALS`]): the signing keys of HTTP functions in the same folder.
    pub fn hiding(self, variables: Vec<String>) -> Self {
        let mut inner = ExecInner::clone(&self.inner);
        inner.hidden = variables;
        ExecFunction { inner: Arc::new(inner) }
    }
}

impl Function for ExecFunction {
    fn call(&self, call: StageCall) -> BoxFuture<'static, StageReply> {
        let inner = self.inner.clone();
        Box::pin(async move { inner.run(call).await })
    }
}

/// Kills the process group when dropped: on every way out of a call, including abandonment.
struct GroupGuard(Option<i32>);

/// The process groups of the functions running now, so that an exit that does not wait for the
/// calls to end ([`kill_running_groups`]) can still take them down whole: the parent-death signal
/// reaches a function's own process only, not what it started.
static RUNNING_GROUPS: std::sync::Mutex<BTreeSet<i32>> = std::sync::Mutex::new(BTreeSet::new());

fn running_groups() -> std::sync::MutexGuard<'static, BTreeSet<i32>> {
    RUNNING_GROUPS.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl GroupGuard {
    fn new(pgid: Option<i32>) -> Self {
        if let Some(pgid) = pgid {
            running_groups().insert(pgid);
        }
        GroupGuard(pgid)
    }
}

impl GroupGuard {
    /// Kills the group now (SIGKILL), leaving it registered until the guard drops.
    fn kill(&self) {
        if let Some(pgid) = self.0 {
            let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pgid), nix::sys::signal::Signal::SIGKILL);
        }
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        self.kill();
        if let Some(pgid) = self.0 {
            running_groups().remove(&pgid);
        }
    }
}

/// Kills the process group of every function running now (SIGKILL): for a worker about to exit
/// at once (a second shutdown signal), whose calls' guards will not run.
pub fn kill_running_groups() {
    for pgid in running_groups().iter() {
        let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(*pgid), nix::sys::signal::Signal::SIGKILL);
    }
}

fn tail(bytes: &VecDeque<u8>) -> String {
    let text = String::from_utf8_lossy(bytes.iter().copied().collect::<Vec<u8>>().as_slice()).trim().to_string();
    text.lines().rev().take(5).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join(" | ")
}

impl ExecInner {
    async fn run(&self, call: StageCall) -> StageReply {
        let input = match serde_json::to_vec(&call) {
            Ok(v) => v,
            Err(e) => return StageReply::fail(format!("cannot encode the stage call: {e}")),
        };
        let Some((program, args)) = self.argv.split_first() else {
            return StageReply::Failed { error: "empty command".into(), retry: false };
        };
        let mut cmd = tokio::process::Command::new(program);
        for credential in WORKER_CREDENTIALS.iter().copied().chain(self.hidden.iter().map(String::as_str)) {
            cmd.env_remove(credential);
        }
        cmd.args(args)
            .current_dir(&self.dir)
            .env("ASYNCFLOW_TASK_ID", &call.task_id)
            .env("ASYNCFLOW_TYPE", &call.task_type)
            .env("ASYNCFLOW_STAGE", &call.stage)
            .env("ASYNCFLOW_ATTEMPT", call.attempt.to_string())
            .env("ASYNCFLOW_DEADLINE", call.deadline.to_rfc3339())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        // If the worker itself dies (SIGKILL), the function goes with it.
        unsafe {
            cmd.pre_exec(|| {
                nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL).map_err(std::io::Error::from)?;
                Ok(())
            });
        }
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => return StageReply::fail(format!("cannot start {program}: {e}")),
        };
        let guard = GroupGuard::new(child.id().map(|pid| pid as i32));
        let (Some(mut stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return StageReply::fail("the function's pipes could not be opened");
        };

        let write = async move {
            // A function that does not read its input closes the pipe: not our failure.
            let _ = stdin.write_all(&input).await;
            drop(stdin);
        };
        let limit = self.max_reply;
        // Read into buffers outside the readers, so that what arrived counts even when a process
        // outside the group keeps a pipe open and the readers are given up.
        let mut out: Vec<u8> = Vec::new();
        let mut out_err = None;
        let mut err: VecDeque<u8> = VecDeque::new();
        let read_out = async {
            out_err = stdout.take(limit as u64 + 1).read_to_end(&mut out).await.err();
            if out.len() > limit {
                // the call has failed whatever comes next: end it now, not at the function's end
                guard.kill();
            }
        };
        let (name, task) = (self.name.clone(), call.task_id.clone());
        let progress = call.progress.clone();
        let kept = &mut err;
        let read_err = async move {
            // Read as bytes to the end whatever they are: a line that is not UTF-8 is logged
            // lossily, a line without end is logged in pieces of STDERR_LINE_BYTES. Stopping
            // early would close the pipe and kill the function with SIGPIPE at its next write.
            let mut stderr = stderr;
            let mut line: Vec<u8> = Vec::new();
            let mut chunk = [0u8; 8192];
            let log = |line: &[u8]| {
                let text = String::from_utf8_lossy(line);
                let text = text.trim_end_matches(['\r', '\n']);
                // `asyncflow:progress <json>`: the call's progress, sent with the next heartbeat
                if let Some(json) = text.strip_prefix(PROGRESS_PREFIX) {
                    match serde_json::from_str(json).map_err(|e| e.to_string()).and_then(|v| progress.report(v)) {
                        Ok(()) => return,
                        Err(e) => tracing::warn!(function = %name, task = %task, error = %e, "progress line not taken"),
                    }
                }
                tracing::info!(function = %name, task = %task, "stderr: {}", text);
            };
            loop {
                let n = match stderr.read(&mut chunk).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                for &b in &chunk[..n] {
                    if b == b'\n' || line.len() >= STDERR_LINE_BYTES {
                        log(&line);
                        line.clear();
                    }
                    if b != b'\n' {
                        line.push(b);
                    }
                }
                kept.extend(&chunk[..n]);
                while kept.len() > STDERR_TAIL_BYTES {
                    kept.pop_front();
                }
            }
            if !line.is_empty() {
                log(&line);
            }
        };
        let mut pipes = Box::pin(async {
            tokio::join!(write, read_out, read_err);
        });
        let exited = tokio::select! {
            () = &mut pipes => None,
            status = child.wait() => Some(status),
        };
        let pipes_open = exited.is_some();
        let status = match exited {
            Some(status) => status,
            None => child.wait().await,
        };
        // The call ends with the process: what it started goes with it now (as it would when
        // the call ends), so that a program left running on the function's pipes cannot keep
        // them open.
        guard.kill();
        if pipes_open && tokio::time::timeout(PIPES_AFTER_EXIT, &mut pipes).await.is_err() {
            tracing::warn!(function = %self.name, task = %call.task_id, "the function exited, but a process it started outside its group holds its pipes open: not waiting for it");
        }
        drop(pipes);
        if out.len() > limit {
            return StageReply::fail(format!("the reply on stdout is larger than {limit} bytes"));
        }
        let status = match status {
            Ok(s) => s,
            Err(e) => return StageReply::fail(format!("waiting for the function: {e}")),
        };
        let stderr_tail = tail(&err);
        if !status.success() {
            let how = match (status.code(), std::os::unix::process::ExitStatusExt::signal(&status)) {
                (Some(code), _) => format!("exit status {code}"),
                (None, Some(sig)) => format!("killed by signal {sig}"),
                _ => "abnormal exit".to_string(),
            };
            return StageReply::fail(if stderr_tail.is_empty() { how } else { format!("{how}: {stderr_tail}") });
        }
        if let Some(e) = out_err {
            return StageReply::fail(format!("reading the reply: {e}"));
        }
        let value: serde_json::Value = match serde_json::from_slice(out.trim_ascii()) {
            Ok(v) => v,
            Err(e) => {
                let start: String = String::from_utf8_lossy(&out).chars().take(120).collect();
                return StageReply::fail(format!("the reply on stdout is not JSON ({e}): {start:?}"));
            }
        };
        StageReply::from_json(value).unwrap_or_else(|why| StageReply::fail(format!("malformed reply: {why}")))
    }
}
