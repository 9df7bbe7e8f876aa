//! The reaper: when asyncflow runs as PID 1 (the entry point of a container without an init),
//! the processes orphaned by its functions are re-parented to it, and it must collect their exit
//! statuses, or they stay as zombies until the container ends.
//!
//! ```text
//!   asyncflow (PID 1) ── function (its own process group) ── grandchild
//!        │                   exits, group killed ───────────────┘ re-parented to PID 1
//!        └─ reaper: on SIGCHLD (and every second), each zombie child of ours that nobody awaits
//!                   is collected with waitpid(pid)
//! ```
//!
//! Invariant: the reaper never takes the exit status of a child that this process awaits itself
//! (tokio's `Child::wait` of a function's process, a build command): those are spawned through
//! [`spawn`], which registers the pid under the same lock the reaper holds while it collects,
//! so a child that exits at once cannot be taken between its start and its registration. The
//! reaper only collects by pid, never `waitpid(-1)`, and only children found in `/proc` as
//! zombies.

use std::collections::BTreeSet;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use nix::sys::wait::{waitpid, WaitPidFlag};
use nix::unistd::Pid;

/// The children whose exit status this process awaits itself.
static AWAITED: Mutex<BTreeSet<i32>> = Mutex::new(BTreeSet::new());

fn awaited() -> MutexGuard<'static, BTreeSet<i32>> {
    AWAITED.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// How often the reaper looks even without a SIGCHLD (signals of children that exit together
/// are merged into one).
const SWEEP_INTERVAL: Duration = Duration::from_secs(1);

/// A child this process awaits; the reaper leaves its pid alone until this is dropped (after
/// the child was waited for, or given up to tokio's own reaping of dropped children).
#[derive(Debug)]
pub struct Awaited(Option<i32>);

impl Awaited {
    /// The child's pid (none if it had exited before its start returned).
    pub fn pid(&self) -> Option<i32> {
        self.0
    }
}

impl Drop for Awaited {
    fn drop(&mut self) {
        if let Some(pid) = self.0 {
            awaited().remove(&pid);
        }
    }
}

/// Starts `cmd` and registers its pid as awaited, both under the reaper's lock.
pub fn spawn(cmd: &mut tokio::process::Command) -> std::io::Result<(tokio::process::Child, Awaited)> {
    let mut set = awaited();
    let child = cmd.spawn()?;
    let pid = child.id().and_then(|p| i32::try_from(p).ok());
    if let Some(pid) = pid {
        set.insert(pid);
    }
    Ok((child, Awaited(pid)))
}

/// Starts the reaper on the current tokio runtime when this process is PID 1; otherwise does
/// nothing (an ordinary parent's orphans go to the real init).
pub fn start_if_pid1() {
    if nix::unistd::getpid().as_raw() != 1 {
        return;
    }
    tracing::debug!("running as PID 1: reaping orphaned processes");
    tokio::spawn(async {
        let mut children = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child()).ok();
        loop {
            match children.as_mut() {
                Some(signal) => {
                    let _ = tokio::time::timeout(SWEEP_INTERVAL, signal.recv()).await;
                }
                None => tokio::time::sleep(SWEEP_INTERVAL).await,
            }
            let reaped = reap_orphans();
            if reaped > 0 {
                tracing::debug!(reaped, "orphaned processes reaped");
            }
        }
    });
}

/// Collects every zombie child of this process that nobody awaits; returns how many.
pub fn reap_orphans() -> usize {
    let me = nix::unistd::getpid().as_raw();
    let set = awaited();
    let mut reaped = 0;
    for pid in zombie_children(me) {
        if set.contains(&pid) {
            continue;
        }
        if let Ok(status) = waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG)) {
            if status.pid().is_some() {
                reaped += 1;
            }
        }
    }
    reaped
}

/// The pids of this process's children that are zombies, read from `/proc/<pid>/stat`.
fn zombie_children(parent: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()))
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| parse_stat(&stat))
                .is_some_and(|(state, ppid)| state == 'Z' && ppid == parent)
        })
        .collect()
}

/// The state and parent pid from a `/proc/<pid>/stat` line: `pid (comm) state ppid ...`, where
/// comm may itself hold spaces and parentheses (hence the last `)`).
fn parse_stat(stat: &str) -> Option<(char, i32)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some((state, ppid))
}

#[cfg(test)]
mod tests {
    use super::parse_stat;

    #[test]
    fn stat_lines_with_odd_command_names_are_read() {
        assert_eq!(parse_stat("42 (sleep) Z 1 42 42 0 -1"), Some(('Z', 1)));
        assert_eq!(parse_stat("43 (a) b (c) S 7 43 43 0"), Some(('S', 7)));
        assert_eq!(parse_stat("garbage"), None);
    }
}
