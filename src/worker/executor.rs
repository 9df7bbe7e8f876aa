//! The executor runs one stage call and reports its reply; the heartbeater keeps the leases of
//! long calls alive.
//!
//! A call ends in one of four ways: the function replies (reported as such), it panics or
//! overruns its timeout (reported as a retryable failure), its lease is lost (abandoned with no
//! report: the task has moved on), or the shutdown grace runs out (abandoned and handed back
//! with a `release` report).

use std::panic::AssertUnwindSafe;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use futures_util::FutureExt;
use tokio::sync::OwnedSemaphorePermit;
use tokio_util::sync::CancellationToken;

use super::hold::{Answer, Hold};
use super::{report, InFlight, Registered, Shared};
use crate::function::{StageCall, StageReply};
use crate::ids::TaskId;
use crate::task::{ClaimedTask, ReportKind, TaskStatus};

pub(super) async fn run(
    shared: Arc<Shared>,
    registered: Registered,
    task: ClaimedTask,
    lease_secs: i64,
    permit: OwnedSemaphorePermit,
    hold: Option<(Arc<Hold>, usize)>,
) {
    let (task_id, claim_seq, lease_until) = (task.task_id.clone(), task.claim_seq, task.lease_until);
    let task_type = task.task_type.clone();
    let key = task_id.to_string();
    let lost = match &hold {
        Some((hold, index)) => hold.lost_token(*index),
        None => CancellationToken::new(),
    };
    let generation = shared.generations.fetch_add(1, Ordering::Relaxed) + 1;
    shared.lock_inflight().insert(
        key.clone(),
        InFlight {
            generation,
            hold: hold.as_ref().map(|(h, _)| h.clone()),
            claim_seq,
            lease_until,
            lease_secs,
            lost: lost.clone(),
        },
    );

    // Polled here rather than spawned (a second task per call cost about a tenth of the
    // worker's CPU in a burn-down); dropping it abandons the call, and a panic is caught.
    let call = AssertUnwindSafe(registered.function.call(StageCall::from(task))).catch_unwind();
    let timeout = async {
        match registered.timeout {
            Some(t) => tokio::time::sleep(t).await,
            None => std::future::pending().await,
        }
    };
    let kind = tokio::select! {
        joined = call => match joined {
            Ok(reply) => Some(reply.into_report()),
            Err(panic) => Some(StageReply::fail(format!("the function panicked: {}", panic_text(panic))).into_report()),
        },
        _ = timeout => {
            let secs = registered.timeout.map(|t| t.as_secs_f64()).unwrap_or_default();
            Some(StageReply::fail(format!("timed out after {secs} s")).into_report())
        }
        _ = lost.cancelled() => {
            tracing::warn!(task = %key, "lease lost: call abandoned");
            None
        }
        _ = shared.release.cancelled() => Some(ReportKind::Release),
    };
    {
        let mut inflight = shared.lock_inflight();
        if inflight.get(&key).is_some_and(|f| f.generation == generation) {
            inflight.remove(&key);
        }
    }

    // A held claim's success or advance is written by the hold while it is open, which then
    // also counts it and frees its slot; any other reply waits for the hold's end (the task is
    // claimed then).
    let (kind, permit, answer) = match (hold, kind) {
        (Some((hold, index)), Some(kind)) => match hold.take(index, kind, permit) {
            Ok(()) => return,
            Err((kind, permit)) => (Some(kind), permit, hold.ended(&task_id).await),
        },
        (Some((hold, _)), None) => (None, permit, hold.ended(&task_id).await),
        (None, kind) => (kind, permit, Answer::Report),
    };
    match (kind, answer) {
        (Some(kind), Answer::Report) => report_reply(&shared, &task_id, claim_seq, kind).await,
        (Some(_), Answer::Lost) => tracing::debug!(task = %key, "held claim failed: the call's reply is dropped"),
        (None, _) => {}
    }
    drop(permit);
    shared.calls_ended(&task_type, 1);
}

/// Reports a reply through the reporter and counts what became of it.
pub(super) async fn report_reply(shared: &Shared, task_id: &TaskId, claim_seq: i32, kind: ReportKind) {
    let counter = match &kind {
        ReportKind::Advance { .. } => &shared.stats.advanced,
        ReportKind::Succeed { .. } => &shared.stats.succeeded,
        ReportKind::Later { .. } => &shared.stats.later,
        ReportKind::Release => &shared.stats.released,
        ReportKind::Fail { .. } | ReportKind::Heartbeat => &shared.stats.retried,
    };
    let result = shared.reporter.send(vec![report(task_id, claim_seq, kind)]).await;
    match result.into_iter().next().flatten() {
        Some(r) if r.accepted => {
            if r.status == Some(TaskStatus::Failed) {
                shared.stats.failed.fetch_add(1, Ordering::Relaxed);
            } else if r.failed_instead {
                // the reply was refused and the reporter failed the task instead (a retry)
                shared.stats.retried.fetch_add(1, Ordering::Relaxed);
            } else {
                counter.fetch_add(1, Ordering::Relaxed);
            }
        }
        Some(r) => {
            shared.stats.refused.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(task = %r.task_id, status = ?r.status, "report refused: the task was rescued, cancelled or claimed again");
        }
        None => {}
    }
}

fn panic_text(payload: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".to_string()
    }
}

/// Every `every`, extends the lease of each call past half of its lease length; a refused
/// extension means the lease is lost, and the call is abandoned.
pub(super) async fn heartbeat_loop(shared: Arc<Shared>, every: Duration, stop: CancellationToken) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.cancelled() => return,
        }
        let now = Utc::now();
        let due: Vec<(String, i32)> = shared
            .lock_inflight()
            .iter()
            .filter(|(_, f)| (f.lease_until - now).num_milliseconds() < f.lease_secs * 500)
            .filter(|(_, f)| !f.hold.as_ref().is_some_and(|h| h.is_open()))
            .map(|(k, f)| (k.clone(), f.claim_seq))
            .collect();
        if due.is_empty() {
            continue;
        }
        let mut reports = Vec::with_capacity(due.len());
        for (key, claim_seq) in &due {
            if let Ok(id) = crate::ids::TaskId::parse(key) {
                reports.push(report(&id, *claim_seq, ReportKind::Heartbeat));
            }
        }
        let results = shared.reporter.send(reports).await;
        let mut inflight = shared.lock_inflight();
        for result in results.into_iter().flatten() {
            let Some(f) = inflight.get_mut(&result.task_id) else {
                continue;
            };
            match (result.accepted, result.lease_until) {
                (true, Some(until)) => f.lease_until = until,
                _ => f.lost.cancel(),
            }
        }
    }
}
