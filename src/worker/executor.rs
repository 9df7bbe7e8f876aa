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

use super::hold::{chainable, Answer, Hold, CHAIN_MAX};
use super::reporter::{report_reply, CallLog};
use super::{report, InFlight, Registered, Shared};
use crate::function::{Checkpoints, StageCall, StageReply};
use crate::task::{ClaimedTask, ReportKind};
use crate::trace::CallSpans;

/// Starts [`run`] for `task` on the worker's task tracker. Boxed: spawned unboxed, the call's
/// future (about 1.4 KB, 4 KB before it was made smaller) was copied whole at each move (about
/// 1 µs of the worker's CPU per task).
#[inline]
pub(super) fn spawn(
    shared: &Arc<Shared>,
    registered: &Registered,
    task: ClaimedTask,
    lease_secs: i64,
    permit: OwnedSemaphorePermit,
    hold: Option<(Arc<Hold>, usize)>,
) {
    shared.tracker.spawn(Box::pin(run(shared.clone(), registered.clone(), task, lease_secs, permit, hold)));
}

/// One task's call (or chain of calls) and its reply's report. A function that returns its
/// future rather than an `async fn`, which would keep each argument twice in the future (as given
/// and as its local): the future is allocated and written for every call, and its size is CPU.
fn run(
    shared: Arc<Shared>,
    registered: Registered,
    mut task: ClaimedTask,
    lease_secs: i64,
    permit: OwnedSemaphorePermit,
    hold: Option<(Arc<Hold>, usize)>,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    async move {
        let (task_id, claim_seq, lease_until) = (task.task_id.clone(), task.claim_seq, task.lease_until);
        let task_type = task.task_type.clone();
        let mut call_log = CallLog::from(&task);
        let key = task_id.to_string();
        let lost = match &hold {
            Some((hold, index)) => hold.lost_token(*index),
            None => CancellationToken::new(),
        };
        let generation = shared.generations.fetch_add(1, Ordering::Relaxed) + 1;
        let progress = crate::function::Progress::default();
        {
            let mut inflight = shared.lock_inflight();
            if inflight.is_empty() {
                // the heartbeater waits for a first call (see next_check)
                shared.started.notify_one();
            }
            inflight.insert(
                key.clone(),
                InFlight {
                    generation,
                    hold: hold.as_ref().map(|(h, _)| h.clone()),
                    claim_seq,
                    lease_until,
                    lease_secs,
                    lost: lost.clone(),
                    progress: progress.clone(),
                    progress_sent: 0,
                },
            );
        }

        // With the type's speculative_chaining, while the hold is open, an advance may run its next
        // stage at once (see hold::Hold::chain), before the advance is committed: the task's next
        // call is made from this one, so a copy is kept beforehand. Without it (the default), the
        // next stage is claimed anew once the hold's finish has durably committed the advance.
        let mut passes = 0;
        let (kind, report_span) = loop {
            let chain_from = match &hold {
                Some((h, _)) if passes < CHAIN_MAX && shared.context_limit() > 0 && h.may_chain() => {
                    // boxed: None but with speculative chaining, and it is kept across the call
                    Some(Box::new((task.clone(), h.elapsed())))
                }
                _ => None,
            };
            // with traces exported, the function continues the stage span, else the enqueue's
            // context (boxed: a span is about 500 bytes, kept across the call in this future)
            let spans = CallSpans::start(&task).map(Box::new);
            let mut stage_call = StageCall::from(task);
            stage_call.progress = progress.clone();
            stage_call.checkpoints = checkpoints(&shared, &task_id, claim_seq);
            match &spans {
                Some(spans) => stage_call.traceparent = Some(spans.traceparent()),
                None => stage_call.traceparent = stage_call.traceparent.filter(|t| crate::trace::is_traceparent(t)),
            }
            let kind = call_once(&shared, &registered, stage_call, &lost, &key).await;
            let report_span = spans.map(|s| Box::new(s.called(kind.as_ref())));
            let chain_from = chain_from.map(|from| *from);
            let chained = match (&hold, chain_from, kind) {
                (Some((h, index)), Some((mut next, start)), Some(ReportKind::Advance { stage, context }))
                    if chainable(&stage, context.as_ref(), shared.context_limit()) =>
                {
                    if h.chain(*index, &next.stage, start, &stage, context.as_ref()) {
                        next.stage = stage;
                        if let Some(context) = context {
                            next.context = context;
                        }
                        next.attempt = 1;
                        Ok(next)
                    } else {
                        Err(Some(ReportKind::Advance { stage, context }))
                    }
                }
                (_, _, kind) => Err(kind),
            };
            match chained {
                Ok(next) => {
                    if let Some(span) = report_span {
                        span.written("chained");
                    }
                    passes += 1;
                    call_log = CallLog::from(&next);
                    task = next;
                }
                Err(kind) => break (kind, report_span),
            }
        };
        // The call's last progress, unless a heartbeat has already carried it: written with the reply,
        // so a value reported just before the reply is not lost with the heartbeats that end here.
        let last_progress = {
            let mut inflight = shared.lock_inflight();
            match inflight.get(&key) {
                Some(f) if f.generation == generation => {
                    let sent = f.progress_sent;
                    inflight.remove(&key);
                    progress.newer_than(sent).map(|(_, value)| value)
                }
                _ => None,
            }
        };

        // A held claim's success or advance is written by the hold while it is open, which then
        // also counts it and frees its slot; any other reply waits for the hold's end (the task is
        // claimed then), and so does one with progress to write (the finish writes no progress).
        let (kind, permit, ended) = match (hold, kind) {
            (Some((hold, _)), Some(kind)) if last_progress.is_some() => (Some(kind), permit, Some(hold)),
            (Some((hold, index)), Some(kind)) => match hold.take(index, kind, permit) {
                Ok(()) => {
                    if let Some(span) = report_span {
                        span.written("held");
                    }
                    return;
                }
                Err((kind, permit)) => (Some(kind), permit, Some(hold)),
            },
            (Some((hold, _)), None) => (None, permit, Some(hold)),
            (None, kind) => (kind, permit, None),
        };
        // boxed, as the report below: neither is on a held call's way, and this future is
        // allocated for every call
        let answer = match ended {
            Some(hold) => Box::pin(hold.ended(&task_id)).await,
            None => Answer::Report,
        };
        let written = match (kind, answer) {
            (Some(kind), Answer::Report) => {
                Box::pin(report_reply(&shared, &task_id, claim_seq, &call_log, kind, last_progress)).await
            }
            (Some(_), Answer::Lost) => {
                tracing::debug!(task = %key, "held claim failed: the call's reply is dropped");
                "dropped"
            }
            (None, _) => "none",
        };
        if let Some(span) = report_span {
            span.written(written);
        }
        drop(permit);
        shared.calls_ended(&task_type, 1);
    }
}

/// A call's checkpoints, written through the worker's backend under the call's claim.
fn checkpoints(shared: &Arc<Shared>, task_id: &crate::ids::TaskId, claim_seq: i64) -> Checkpoints {
    let (shared, task_id) = (shared.clone(), task_id.to_string());
    Checkpoints::new(move |context| {
        let (shared, task_id) = (shared.clone(), task_id.clone());
        Box::pin(async move { shared.backend.checkpoint(&task_id, claim_seq, &context).await })
    })
}

/// Runs one stage call: its reply, a retryable failure if it panicked or overran its timeout,
/// a release at the end of the shutdown grace, or None if the task was taken away. The call's
/// future is made before the returned one, which so keeps no copy of `stage_call`.
fn call_once<'a>(
    shared: &'a Shared,
    registered: &'a Registered,
    stage_call: StageCall,
    lost: &'a CancellationToken,
    key: &'a str,
) -> impl std::future::Future<Output = Option<ReportKind>> + Send + 'a {
    // Polled here rather than spawned (a second task per call cost about a tenth of the
    // worker's CPU in a burn-down); dropping it abandons the call, and a panic is caught.
    // stops what the function started outside its future, however the call ends
    let cancel = stage_call.cancel.clone();
    let call = AssertUnwindSafe(registered.function.call(stage_call)).catch_unwind();
    async move {
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
                tracing::warn!(task = %key, "task taken away (cancelled, or its lease lost): call stopped");
                None
            }
            _ = shared.release.cancelled() => Some(ReportKind::Release),
        };
        cancel.cancel();
        kind
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

/// Stops the calls the cancel channel names ([`crate::db::listen::Cancel`], see
/// [`crate::db::listen`]): the call is abandoned at once, as when its lease is lost, so an
/// executable's process group is killed, an HTTP request dropped and a Rust handler's future
/// dropped (its [`crate::function::CallCancel`] fired).
pub(super) async fn stop_cancelled_calls(
    shared: Arc<Shared>,
    mut cancels: tokio::sync::broadcast::Receiver<crate::db::listen::Cancel>,
    stop: CancellationToken,
) {
    use tokio::sync::broadcast::error::RecvError;
    loop {
        let message = tokio::select! {
            m = cancels.recv() => m,
            _ = stop.cancelled() => return,
        };
        let cancel = match message {
            Ok(cancel) => cancel,
            // a burst of cancels overflowed the channel: the heartbeats refused find the rest
            Err(RecvError::Lagged(_)) => continue,
            Err(RecvError::Closed) => return,
        };
        if let Some(f) = shared.lock_inflight().get(cancel.task_id.as_str()) {
            if f.claim_seq == cancel.claim_seq {
                tracing::info!(task = %cancel.task_id, "task cancelled: stopping its call");
                f.lost.cancel();
            }
        }
    }
}

/// The shortest pause between two looks at the calls in flight.
const HEARTBEAT_CHECK_MIN: Duration = Duration::from_millis(50);

/// A lease is extended once a third of it has gone: an extension then has two thirds of the
/// lease to arrive (a report's round trip, a busy reporter), and the next look comes after a
/// sixth (see [`next_check`]), well before the lease runs out.
fn extension_due(lease_until: chrono::DateTime<Utc>, lease_secs: i64, now: chrono::DateTime<Utc>) -> bool {
    (lease_until - now).num_milliseconds() < lease_secs.saturating_mul(2000) / 3
}

/// The pause before the next look: a sixth of the shortest lease in flight, at most `every`
/// (the configured check) and at least [`HEARTBEAT_CHECK_MIN`]; `every` while no call is in
/// flight (a call that starts then wakes the heartbeater at once, [`Shared::started`], so that
/// a short lease is seen well before a third of it has gone).
fn next_check(shortest_lease_secs: Option<i64>, every: Duration) -> Duration {
    match shortest_lease_secs {
        Some(secs) => {
            let sixth = Duration::from_millis(u64::try_from(secs.max(0)).unwrap_or(0).saturating_mul(1000) / 6);
            sixth.min(every).max(HEARTBEAT_CHECK_MIN)
        }
        None => every.max(HEARTBEAT_CHECK_MIN),
    }
}

/// Extends the lease of each call once a third of it has gone, looking every sixth of the
/// shortest lease in flight (at most every `every`); a refused extension means the lease is
/// lost, and the call is abandoned.
pub(super) async fn heartbeat_loop(shared: Arc<Shared>, every: Duration, stop: CancellationToken) {
    let mut pause = Duration::ZERO;
    let mut idle = false;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = shared.started.notified(), if idle => {}
            _ = stop.cancelled() => return,
        }
        let now = Utc::now();
        // due: a lease a third gone, or new progress to show (it rides on the heartbeat)
        type Due = (String, i64, Option<(u64, serde_json::Value)>);
        let (due, shortest): (Vec<Due>, Option<i64>) = {
            let inflight = shared.lock_inflight();
            let shortest = inflight.values().map(|f| f.lease_secs).min();
            let due = inflight
                .iter()
                // not while its hold's finish is under way: the row is still pending there, and a
                // heartbeat that read it so would be refused and the call abandoned
                .filter(|(_, f)| f.hold.as_ref().is_none_or(|h| h.has_ended()))
                .map(|(k, f)| (k, f, f.progress.newer_than(f.progress_sent)))
                .filter(|(_, f, progress)| progress.is_some() || extension_due(f.lease_until, f.lease_secs, now))
                .map(|(k, f, progress)| (k.clone(), f.claim_seq, progress))
                .collect();
            (due, shortest)
        };
        pause = next_check(shortest, every);
        idle = shortest.is_none();
        if due.is_empty() {
            continue;
        }
        let mut reports = Vec::with_capacity(due.len());
        for (key, claim_seq, progress) in &due {
            if let Ok(id) = crate::ids::TaskId::parse(key) {
                let progress = progress.as_ref().map(|(_, v)| v.clone());
                reports.push(report(&id, *claim_seq, ReportKind::Heartbeat, progress));
            }
        }
        let results = shared.reporter.send(reports).await;
        let mut inflight = shared.lock_inflight();
        for result in results.into_iter().flatten() {
            let Some(f) = inflight.get_mut(&result.task_id) else {
                continue;
            };
            match (result.accepted, result.lease_until) {
                (true, Some(until)) => {
                    f.lease_until = until;
                    if let Some((_, _, Some((version, _)))) = due.iter().find(|d| d.0 == result.task_id) {
                        f.progress_sent = f.progress_sent.max(*version);
                    }
                }
                _ => f.lost.cancel(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_is_extended_once_a_third_of_it_has_gone() {
        let now = Utc::now();
        let lease = |ms: i64| now + chrono::Duration::milliseconds(ms);
        assert!(!extension_due(lease(1400), 2, now));
        assert!(extension_due(lease(1300), 2, now));
        assert!(!extension_due(lease(201_000), 300, now));
        assert!(extension_due(lease(199_000), 300, now));
    }

    #[test]
    fn the_check_follows_the_shortest_lease_in_flight() {
        let second = Duration::from_secs(1);
        assert_eq!(next_check(Some(2), second), Duration::from_millis(333));
        assert_eq!(next_check(Some(1), second), Duration::from_millis(166));
        assert_eq!(next_check(Some(300), second), second);
        assert_eq!(next_check(Some(0), second), HEARTBEAT_CHECK_MIN);
        assert_eq!(next_check(None, second), second);
        assert_eq!(next_check(Some(60), Duration::from_millis(20)), HEARTBEAT_CHECK_MIN);
    }
}
