//! The reporter (river's completer): replies from every executor go through one channel and are
//! written in batches, one `report_tasks` statement for whatever has queued up, so a busy worker
//! makes one round trip for many tasks. A database or network error is retried with back-off
//! until the reports are accepted or refused; a report is never dropped while the worker runs.
//! A server takes a batch in chunks (by count and size, see [`Backend::chunks`]), each retried
//! on its own, so a retry never repeats a chunk already written. A chunk the server refuses
//! (malformed, or too large) is halved until the refused report is alone, so that one bad reply
//! (a function's invalid next stage, a result over the size limit) costs only its own report:
//! the others are written, and the bad one is replaced by a failure of its task that says why
//! the reply was refused.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{broadcast, mpsc, oneshot, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use std::sync::atomic::Ordering;

use super::backend::Backend;
use super::{report, Shared};
use crate::db::listen::Wake;
use crate::ids::{TaskId, WorkerId};
use crate::task::{ClaimedTask, Report, ReportKind, ReportResult, TaskStatus};

/// Most reports in one statement.
const BATCH_MAX: usize = 1000;

/// Report statements in flight at once. One statement runs on one database core; with two, a
/// busy worker keeps a second core writing while the first batch commits, and the claims run
/// beside them. Batches in flight together lock their tasks in (type, shard, id) order, so they
/// never deadlock on tasks; the only report of a task that can race another is a heartbeat
/// beside the call's final reply, and a heartbeat refused because the reply won changes nothing
/// (the call has ended).
const WRITERS: usize = 2;

type Pending = (Report, oneshot::Sender<ReportResult>);

/// Handle for sending reports.
#[derive(Clone)]
pub(super) struct Reporter {
    tx: mpsc::UnboundedSender<Pending>,
}

impl Reporter {
    /// Sends a batch of reports and waits for their results (None when the worker is stopping
    /// and the report could not be written).
    pub(super) async fn send(&self, reports: Vec<Report>) -> Vec<Option<ReportResult>> {
        let mut waits = Vec::with_capacity(reports.len());
        for r in reports {
            let (tx, rx) = oneshot::channel();
            if self.tx.send((r, tx)).is_err() {
                waits.push(None);
            } else {
                waits.push(Some(rx));
            }
        }
        let mut results = Vec::with_capacity(waits.len());
        for w in waits {
            results.push(match w {
                Some(rx) => rx.await.ok(),
                None => None,
            });
        }
        results
    }
}

/// Producers' wake channels by type (server mode: no NOTIFY tells them of requeued tasks).
pub(super) type OwnWakes = Arc<BTreeMap<String, broadcast::Sender<Wake>>>;

/// Starts the reporter. After `stop` fires it writes what is queued and ends. Once `give_up` has
/// fired (the worker fires it when a shutdown's grace period ends, and before `stop`), a write
/// the backend keeps failing is given up after a few tries: the leases run out and the rescuer
/// queues the tasks again, where retrying forever would keep a stopping worker alive while the
/// database is away.
/// `own_wakes` (server mode) is told the types whose tasks this worker's reports queued again.
pub(super) fn spawn(
    backend: Backend,
    worker: WorkerId,
    stop: CancellationToken,
    give_up: CancellationToken,
    own_wakes: Option<OwnWakes>,
) -> (Reporter, tokio::task::JoinHandle<()>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let task = tokio::spawn(run(backend, worker, rx, stop, give_up, own_wakes));
    (Reporter { tx }, task)
}

async fn run(
    backend: Backend,
    worker: WorkerId,
    mut rx: mpsc::UnboundedReceiver<Pending>,
    stop: CancellationToken,
    give_up: CancellationToken,
    own_wakes: Option<OwnWakes>,
) {
    // A writer is taken before the batch is gathered: while every writer is busy, replies pile
    // up in the channel and the next batch takes them all.
    let writers = Arc::new(Semaphore::new(WRITERS));
    let mut in_flight = JoinSet::new();
    loop {
        let Ok(permit) = writers.clone().acquire_owned().await else { break };
        let first = tokio::select! {
            biased;
            item = rx.recv() => item,
            _ = stop.cancelled() => rx.try_recv().ok(),
        };
        let Some(first) = first else { break };
        let mut batch = vec![first];
        while batch.len() < BATCH_MAX {
            match rx.try_recv() {
                Ok(item) => batch.push(item),
                Err(_) => break,
            }
        }
        let (backend, worker, own_wakes) = (backend.clone(), worker.clone(), own_wakes.clone());
        let give_up = give_up.clone();
        in_flight.spawn(async move {
            write(&backend, &worker, batch, &give_up, own_wakes.as_ref()).await;
            drop(permit);
        });
        while in_flight.try_join_next().is_some() {}
    }
    while in_flight.join_next().await.is_some() {}
}

/// How one chunk of reports ended.
enum Written {
    /// One result per report.
    Answered(Vec<ReportResult>),
    /// Refused whole as malformed or too large: why.
    Refused(String),
    /// Stopping, and the backend stayed away.
    GaveUp,
}

async fn write(
    backend: &Backend,
    worker: &WorkerId,
    batch: Vec<Pending>,
    give_up: &CancellationToken,
    own_wakes: Option<&OwnWakes>,
) {
    let (mut reports, answers): (Vec<Report>, Vec<_>) = batch.into_iter().unzip();
    let mut answers = answers.into_iter();
    // the reports replaced by a failure of their task, by index
    let mut replaced = vec![false; reports.len()];
    // A stack of consecutive ranges, the first on top: chunks are written in order, so each
    // takes the next answers.
    let mut todo: Vec<Range<usize>> = backend.chunks(&reports);
    todo.reverse();
    while let Some(range) = todo.pop() {
        let chunk = &reports[range.clone()];
        let results = match write_chunk(backend, worker, chunk, give_up).await {
            Written::Answered(results) => results,
            Written::Refused(_) if chunk.len() > 1 => {
                // Find the refused report(s) by halving: the others are written.
                let middle = range.start + chunk.len() / 2;
                todo.push(middle..range.end);
                todo.push(range.start..middle);
                continue;
            }
            Written::Refused(why) => {
                if let Some(failure) = failure_instead(&chunk[0], &why) {
                    // Written in its place (once: a refused failure is answered as refused).
                    tracing::warn!(task = %chunk[0].task_id, reason = %why, "report refused: the task fails instead");
                    reports[range.start] = failure;
                    if let Some(flag) = replaced.get_mut(range.start) {
                        *flag = true;
                    }
                    todo.push(range);
                    continue;
                }
                chunk
                    .iter()
                    .map(|r| ReportResult {
                        task_id: r.task_id.to_string(),
                        accepted: false,
                        status: None,
                        lease_until: None,
                        failed_instead: false,
                    })
                    .collect()
            }
            Written::GaveUp => {
                // Dropping the answers tells the executors nothing was written.
                answers.by_ref().take(chunk.len()).for_each(drop);
                continue;
            }
        };
        if let Some(wakes) = own_wakes {
            wake_requeued(wakes, &results);
        }
        for ((tx, mut result), index) in answers.by_ref().take(chunk.len()).zip(results).zip(range) {
            result.failed_instead = replaced.get(index).copied().unwrap_or(false);
            let _ = tx.send(result);
        }
    }
}

async fn write_chunk(backend: &Backend, worker: &WorkerId, reports: &[Report], give_up: &CancellationToken) -> Written {
    let mut failures: u32 = 0;
    loop {
        match backend.report(worker, reports).await {
            Ok(results) => return Written::Answered(results),
            Err(e) if e.is_client_error() => {
                // A malformed (or too large) report would be refused every time: the caller
                // looks for it.
                tracing::error!(error = %e, count = reports.len(), "reports refused");
                return Written::Refused(e.to_string());
            }
            Err(e) if give_up.is_cancelled() && failures >= 5 => {
                // Stopping and the database (or server) stays away: the leases will run out and
                // the rescuer will queue these tasks again.
                tracing::error!(error = %e, count = reports.len(), "giving up on reports at shutdown");
                return Written::GaveUp;
            }
            Err(e) => {
                failures += 1;
                let wait = Duration::from_millis((50u64 << failures.min(8)).min(5_000));
                tracing::warn!(error = %e, retry_in = ?wait, "writing reports failed; retrying");
                tokio::time::sleep(wait).await;
            }
        }
    }
}

/// The report to write instead of one the server refused as malformed: the task fails (with
/// the usual retries) saying why its reply was refused, rather than staying claimed until its
/// lease runs out and the call is made again. None for a report that is itself a failure (or a
/// heartbeat or a hand-back, which carry nothing a server could refuse). The failure carries no
/// progress: the refused report's may be what was refused.
fn failure_instead(refused: &Report, why: &str) -> Option<Report> {
    refused.kind.replaced_when_refused().then(|| {
        Report::new(
            refused.task_id.clone(),
            refused.claim_seq,
            ReportKind::Fail { error: format!("the reply was refused: {why}"), retry: true },
        )
    })
}

/// Wakes this worker's producers of the types whose tasks the reports put back in the queue.
fn wake_requeued(wakes: &OwnWakes, results: &[ReportResult]) {
    let mut types: Vec<&str> = Vec::new();
    for r in results.iter().filter(|r| r.accepted && r.status == Some(TaskStatus::Pending)) {
        let task_type = r.task_id.split('-').next().unwrap_or_default();
        if !types.contains(&task_type) {
            types.push(task_type);
        }
    }
    for task_type in types {
        if let Some(tx) = wakes.get(task_type) {
            let _ = tx.send(Some(task_type.to_string()));
        }
    }
}

/// What the log says of a call besides its task id: the fields of the lines for a failed call.
#[derive(Debug, Clone)]
pub(super) struct CallLog {
    task_type: String,
    stage: String,
    attempt: i32,
}

impl From<&ClaimedTask> for CallLog {
    fn from(task: &ClaimedTask) -> Self {
        CallLog { task_type: task.task_type.clone(), stage: task.stage.clone(), attempt: task.attempt }
    }
}

impl CallLog {
    /// The same task's call at a stage chained in its hold (the first attempt there).
    pub(super) fn chained(&self, stage: &str) -> CallLog {
        CallLog { task_type: self.task_type.clone(), stage: stage.to_string(), attempt: 1 }
    }
}

/// Reports a reply (with the call's last progress, if any) through the reporter and counts what
/// became of it: `accepted`, `refused` (the fence did not match) or `unknown` (no answer, at
/// shutdown).
pub(super) async fn report_reply(
    shared: &Shared,
    task_id: &TaskId,
    claim_seq: i64,
    call: &CallLog,
    kind: ReportKind,
    progress: Option<serde_json::Value>,
) -> &'static str {
    let counter = match &kind {
        ReportKind::Advance { .. } => &shared.stats.advanced,
        ReportKind::Succeed { .. } => &shared.stats.succeeded,
        ReportKind::Later { .. } => &shared.stats.later,
        ReportKind::Release => &shared.stats.released,
        ReportKind::Wait { .. } | ReportKind::Spawn { .. } => &shared.stats.waited,
        ReportKind::Fail { .. } | ReportKind::Heartbeat => &shared.stats.retried,
    };
    // what an operator wants to see in the log at INFO: a call that failed, and what became of it
    let failure = match &kind {
        ReportKind::Fail { error, retry } => Some((crate::error::shorten(error), *retry)),
        _ => None,
    };
    let result = shared.reporter.send(vec![report(task_id, claim_seq, kind, progress)]).await;
    let (task_type, stage, attempt) = (&call.task_type, &call.stage, call.attempt);
    match result.into_iter().next().flatten() {
        Some(r) if r.accepted => {
            if r.status == Some(TaskStatus::Failed) {
                shared.stats.failed.fetch_add(1, Ordering::Relaxed);
                let (error, outcome) = match &failure {
                    // the function said not to try again
                    Some((error, false)) => (error.as_str(), "failed"),
                    Some((error, true)) => (error.as_str(), "given_up"),
                    None => ("its reply was refused", "given_up"),
                };
                tracing::info!(task = %task_id, task_type, stage, attempt, error, outcome,
                    "task failed for good (no tries left, or not to be retried)");
            } else if r.failed_instead {
                // the reply was refused and the reporter failed the task instead (a retry)
                shared.stats.retried.fetch_add(1, Ordering::Relaxed);
                tracing::info!(task = %task_id, task_type, stage, attempt, error = "its reply was refused",
                    outcome = "retried", "the call's reply was refused; the task will be tried again");
            } else {
                counter.fetch_add(1, Ordering::Relaxed);
                if let Some((error, _)) = &failure {
                    tracing::info!(task = %task_id, task_type, stage, attempt, error = %error, outcome = "retried",
                        "call failed; the task will be tried again");
                }
            }
            "accepted"
        }
        Some(r) => {
            shared.stats.refused.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(task = %r.task_id, status = ?r.status, "report refused: the task was rescued, cancelled or claimed again");
            "refused"
        }
        None => "unknown",
    }
}
