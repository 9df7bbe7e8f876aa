//! Executable functions: one process per stage call.
//!
//! ```text
//!   worker ── StageCall JSON ──> stdin   ┐
//!          ── ASYNCFLOW_* env ─────────> │ the function's process (its own process group,
//!   worker <── one reply object ─ stdout │ working directory = its folder)
//!   log    <── lines ─────────── stderr  ┘   (a line `asyncflow:progress <json>` is the call's
//! ```                                          progress instead: see [`PROGRESS_PREFIX`])
//!
//! A line `asyncflow:checkpoint <json>` on stderr saves the call's context while it runs (see
//! [`CHECKPOINT_PREFIX`]): the worker writes each such line in order, and all of them before the
//! reply, so a failure's retry starts from the last one.
//!
//! Exit 0 means "the reply is on stdout". A non-zero exit, a reply that is not one of the four
//! forms, or stdout past the limit (which kills the process group at once) is a failure with
//! retry, its error taken from the stderr tail.
//! When the call is abandoned (timeout, lease lost, shutdown) its future is dropped, and the drop
//! kills the whole process group, so no grandchild outlives the call. The call ends when the
//! process exits: its group is killed then too, so a program it left running that inherited its
//! pipes cannot hold the call open (one that left the group is not waited for past a second).

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::process::{
    checkpoint_refused, command, exit_text, keep_tail, progress_line, read_stderr, tail, write_checkpoint, GroupGuard,
};
use super::{BoxFuture, Function, StageCall, StageReply};

pub use super::process::{kill_running_groups, CHECKPOINT_PREFIX, PROGRESS_PREFIX, WORKER_CREDENTIALS};

/// Largest reply read from stdout (and the longest reply line of a warm function).
pub const MAX_REPLY_BYTES_DEFAULT: usize = 1024 * 1024;
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

impl ExecInner {
    async fn run(&self, call: StageCall) -> StageReply {
        let input = match serde_json::to_vec(&call) {
            Ok(v) => v,
            Err(e) => return StageReply::fail(format!("cannot encode the stage call: {e}")),
        };
        let mut cmd = match command(&self.argv, &self.dir, &self.hidden) {
            Ok(cmd) => cmd,
            Err(why) => return StageReply::Failed { error: why, retry: false },
        };
        cmd.env("ASYNCFLOW_TASK_ID", &call.task_id)
            .env("ASYNCFLOW_TYPE", &call.task_type)
            .env("ASYNCFLOW_STAGE", &call.stage)
            .env("ASYNCFLOW_ATTEMPT", call.attempt.to_string())
            .env("ASYNCFLOW_DEADLINE", call.deadline.to_rfc3339());
        // the trace context to join, the W3C name for it in an environment; never the worker's own
        match &call.traceparent {
            Some(parent) => cmd.env("TRACEPARENT", parent),
            None => cmd.env_remove("TRACEPARENT"),
        };
        let program = self.argv.first().map(String::as_str).unwrap_or_default();
        // registered as awaited, so that a worker running as PID 1 never reaps it itself
        let (mut child, _awaited) = match crate::reaper::spawn(&mut cmd) {
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
        // `asyncflow:checkpoint <json>` lines, written in their order by a task of their own
        // while the process runs on, and all of them before the reply (waited for below)
        let (checkpoint_tx, mut checkpoint_rx) =
            tokio::sync::mpsc::unbounded_channel::<Result<serde_json::Value, String>>();
        let (checkpoints, call_id) = (call.checkpoints.clone(), call.task_id.clone());
        let checkpoint_writer = tokio::spawn(async move {
            let mut refused = None;
            while let Some(line) = checkpoint_rx.recv().await {
                let written = match line {
                    Ok(context) => write_checkpoint(&checkpoints, &call_id, context).await,
                    Err(why) => Err(why),
                };
                if let Err(why) = written {
                    refused.get_or_insert(why);
                }
            }
            refused
        });
        let kept = &mut err;
        let read_err = read_stderr(
            stderr,
            move |line| {
                if let Some(json) = line.strip_prefix(CHECKPOINT_PREFIX) {
                    let context =
                        serde_json::from_str(json).map_err(|e| format!("the checkpoint line is not JSON: {e}"));
                    // the writer ends only once this sender is gone
                    let _ = checkpoint_tx.send(context);
                    return;
                }
                // `asyncflow:progress <json>`: the call's progress, sent with the next heartbeat (a
                // call id it names can only be this process's one call)
                if let Some((_, json)) = progress_line(line) {
                    match progress.report_json(json) {
                        Ok(()) => return,
                        Err(e) => tracing::warn!(function = %name, task = %task, error = %e, "progress line not taken"),
                    }
                }
                tracing::info!(function = %name, task = %task, "stderr: {line}")
            },
            |chunk| keep_tail(kept, chunk),
            limit,
        );
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
        // the checkpoints read go to the database before the reply does (the stderr reader, and
        // with it the writer's sender, is gone now)
        if let Ok(Some(why)) = checkpoint_writer.await {
            return StageReply::read(checkpoint_refused(&why), &call.progress)
                .unwrap_or_else(|e| StageReply::Failed { error: e, retry: true });
        }
        if out.len() > limit {
            return StageReply::fail(format!("the reply on stdout is larger than {limit} bytes"));
        }
        let status = match status {
            Ok(s) => s,
            Err(e) => return StageReply::fail(format!("waiting for the function: {e}")),
        };
        let stderr_tail = tail(&err);
        if !status.success() {
            let how = exit_text(&status);
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
        StageReply::read(value, &call.progress)
            .unwrap_or_else(|why| StageReply::fail(format!("malformed reply: {why}")))
    }
}
