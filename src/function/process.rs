//! What every function run as a program shares, forked per call ([`super::exec`]) or kept warm
//! ([`super::warm`]): the command (working directory, the worker's credentials hidden, its own
//! process group, killed with the worker), the process-group guard, and the stderr reader.

use std::collections::{BTreeSet, VecDeque};
use std::path::Path;
use std::process::Stdio;

use serde_json::Value;
use tokio::io::AsyncReadExt;

use super::Checkpoints;

/// The worker's own credentials, taken out of the environment a function inherits: a function
/// is handed a task, not the queue's database or the server's tokens.
pub const WORKER_CREDENTIALS: [&str; 4] =
    ["DATABASE_URL", "ASYNCFLOW_TOKEN", "ASYNCFLOW_TOKENS", "ASYNCFLOW_CALLBACK_SECRET"];

/// A stderr line starting with this reports the call's progress: the rest of the line is a JSON
/// value of at most [`crate::function::PROGRESS_BYTES_MAX`] bytes, sent with the worker's next
/// heartbeat and shown by `get_task` as `progress`. It is not logged. A warm instance may name
/// the call it reports for: `asyncflow:progress:<call id> <json>` ([`progress_line`]).
pub const PROGRESS_PREFIX: &str = "asyncflow:progress ";

/// A stderr line starting with this saves the running call's context (a process run per call:
/// a warm instance sends `{"id", "checkpoint"}` on stdout instead): the rest of the line is the
/// whole new context, a JSON object (see [`crate::function::StageCall::checkpoint`]). The worker
/// writes the checkpoints in their order, and all of them before the call's reply; one the
/// database refuses fails the call, with retry. It is not logged, and may be as long as the
/// function's reply may be.
pub const CHECKPOINT_PREFIX: &str = "asyncflow:checkpoint ";

/// A progress line's parts: the call id it names (`asyncflow:progress:<id> <json>`), if any, and
/// its JSON text; None for any other line.
pub(crate) fn progress_line(line: &str) -> Option<(Option<&str>, &str)> {
    if let Some(json) = line.strip_prefix(PROGRESS_PREFIX) {
        return Some((None, json));
    }
    let named = line.strip_prefix(PROGRESS_PREFIX.trim_end())?.strip_prefix(':')?;
    let (id, json) = named.split_once(' ')?;
    Some((Some(id), json))
}

/// How much of stderr is kept for an error message.
pub(crate) const STDERR_TAIL_BYTES: usize = 2048;
/// Longest piece of a stderr line logged at once.
pub(crate) const STDERR_LINE_BYTES: usize = 4096;

/// The command for `argv` (`argv[0]` already resolved), run in `dir`: it inherits neither the
/// worker's credentials nor the variables named in `hidden`, its stdin, stdout and stderr are
/// pipes, it runs in a process group of its own (so that all it starts can be killed with it),
/// is killed when its handle is dropped, and dies with the worker (parent-death signal).
pub(crate) fn command(argv: &[String], dir: &Path, hidden: &[String]) -> Result<tokio::process::Command, String> {
    let Some((program, args)) = argv.split_first() else {
        return Err("empty command".into());
    };
    let mut cmd = tokio::process::Command::new(program);
    for credential in WORKER_CREDENTIALS.iter().copied().chain(hidden.iter().map(String::as_str)) {
        cmd.env_remove(credential);
    }
    cmd.args(args)
        .current_dir(dir)
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
    Ok(cmd)
}

/// Kills the process group when dropped: on every way out of a call or an instance's life,
/// including abandonment.
pub(crate) struct GroupGuard(Option<i32>);

/// The process groups of the functions running now, so that an exit that does not wait for the
/// calls to end ([`kill_running_groups`]) can still take them down whole: the parent-death signal
/// reaches a function's own process only, not what it started.
static RUNNING_GROUPS: std::sync::Mutex<BTreeSet<i32>> = std::sync::Mutex::new(BTreeSet::new());

fn running_groups() -> std::sync::MutexGuard<'static, BTreeSet<i32>> {
    RUNNING_GROUPS.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl GroupGuard {
    /// Guards the group `pgid` (the pid of a process started by [`command`]).
    pub(crate) fn new(pgid: Option<i32>) -> Self {
        if let Some(pgid) = pgid {
            running_groups().insert(pgid);
        }
        GroupGuard(pgid)
    }

    /// Sends `signal` to the whole group.
    pub(crate) fn signal(&self, signal: nix::sys::signal::Signal) {
        if let Some(pgid) = self.0 {
            let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pgid), signal);
        }
    }

    /// Kills the group now (SIGKILL), leaving it registered until the guard drops.
    pub(crate) fn kill(&self) {
        self.signal(nix::sys::signal::Signal::SIGKILL);
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

/// Kills the process group of every function running now (SIGKILL), warm instances included:
/// for a worker about to exit at once (a second shutdown signal), whose guards will not run.
pub fn kill_running_groups() {
    for pgid in running_groups().iter() {
        let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(*pgid), nix::sys::signal::Signal::SIGKILL);
    }
}

/// The last lines (at most five) of a stderr tail, joined with " | ".
pub(crate) fn tail(bytes: &VecDeque<u8>) -> String {
    let text = String::from_utf8_lossy(bytes.iter().copied().collect::<Vec<u8>>().as_slice()).trim().to_string();
    text.lines().rev().take(5).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join(" | ")
}

/// Keeps the last [`STDERR_TAIL_BYTES`] of what is added.
pub(crate) fn keep_tail(kept: &mut VecDeque<u8>, chunk: &[u8]) {
    kept.extend(chunk);
    while kept.len() > STDERR_TAIL_BYTES {
        kept.pop_front();
    }
}

/// Reads a function's stderr to its end, logging each line (`log`, lossily decoded, a line
/// without end in pieces of [`STDERR_LINE_BYTES`], or of `checkpoint_bytes` for a line that
/// starts with [`CHECKPOINT_PREFIX`]) and handing every chunk read to `keep`.
/// Reading to the end whatever comes matters: stopping early would close the pipe and kill the
/// function with SIGPIPE at its next write.
pub(crate) async fn read_stderr(
    mut stderr: impl tokio::io::AsyncRead + Unpin,
    log: impl Fn(&str),
    mut keep: impl FnMut(&[u8]),
    checkpoint_bytes: usize,
) {
    let prefix = CHECKPOINT_PREFIX.as_bytes();
    let mut line: Vec<u8> = Vec::new();
    let mut chunk = [0u8; 8192];
    let log_line = |line: &[u8]| {
        let text = String::from_utf8_lossy(line);
        log(text.trim_end_matches(['\r', '\n']));
    };
    loop {
        let n = match stderr.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        for &b in &chunk[..n] {
            let longest = if line.starts_with(prefix) {
                checkpoint_bytes.max(STDERR_LINE_BYTES) + prefix.len()
            } else {
                STDERR_LINE_BYTES
            };
            if b == b'\n' || line.len() >= longest {
                log_line(&line);
                line.clear();
            }
            if b != b'\n' {
                line.push(b);
            }
        }
        keep(&chunk[..n]);
    }
    if !line.is_empty() {
        log_line(&line);
    }
}

/// How a process ended, in words: "exit status 3", "killed by signal 9".
pub(crate) fn exit_text(status: &std::process::ExitStatus) -> String {
    match (status.code(), std::os::unix::process::ExitStatusExt::signal(status)) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(sig)) => format!("killed by signal {sig}"),
        _ => "abnormal exit".to_string(),
    }
}

/// Writes a call's checkpoint; why it was not taken when the database refused it (a stale
/// claim is no error: the call's reply will be refused as well).
pub(super) async fn write_checkpoint(checkpoints: &Checkpoints, id: &str, context: Value) -> Result<(), String> {
    match checkpoints.write(context).await {
        Ok(true) => Ok(()),
        Ok(false) => {
            tracing::debug!(call = id, "checkpoint of a call no longer running: not written");
            Ok(())
        }
        Err(e) => {
            tracing::warn!(call = id, error = %e, "checkpoint refused: the call fails");
            Err(e.to_string())
        }
    }
}

/// The reply that stands for a call whose checkpoint was refused: a failure, with retry.
pub(super) fn checkpoint_refused(why: &str) -> Value {
    serde_json::json!({"error": format!("a checkpoint was refused: {why}"), "retry": true})
}
