//! The events phase: what tasks waiting for events cost the rest.
//!
//! `--waiting-tasks` tasks (a million by default) are queued in one type and each replies
//! `wait` for an event of its own (`bench:<n>`, a day's timeout), through the real worker. Then:
//! - the 1-stage burn-down of `--tasks` no-op tasks **in that same type**, beside its waiting
//!   tasks, in turn with the same burn-down in an empty type (its reference), three times each;
//!   medians. The bar: at least 0.9 x the reference.
//! - `send_event` to a key with exactly one waiter among them (each call a key not sent before,
//!   so each wakes one task), one per transaction on `--connections` connections, beside
//!   `create_task` timed the same way in the same phase. The bar: a send costs at most 2 x an
//!   enqueue, that is its rate is at least 0.5 x create_task's.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use super::load::{self, Timed};
use crate::db::{api, DbPool};
use crate::error::{Error, Result};
use crate::function::{StageCall, StageReply};
use crate::task::NewTask;

/// The type that holds the waiting tasks (and the burn-down beside them).
const WAITING_TYPE: &str = "bench_waiting";
/// The empty type of the reference burn-down.
const EMPTY_TYPE: &str = "bench_waiting_ref";
/// Rounds of each burn-down; the figures are medians.
const ROUNDS: usize = 3;

/// What the phase measured.
pub(super) struct Events {
    /// Wait replies per second while the waiting tasks were made (informative).
    pub waits: Timed,
    /// The burn-down beside the waiting tasks (median).
    pub beside: Timed,
    /// The same burn-down in an empty type (median).
    pub empty: Timed,
    /// send_event, one waiter woken per call.
    pub send: Timed,
    /// create_task, timed the same way.
    pub create: Timed,
}

/// A task with a `key` in its context waits for `bench:<key>`; any other succeeds at once.
fn function(call: StageCall) -> std::future::Ready<StageReply> {
    std::future::ready(match call.context.get("key").and_then(|k| k.as_u64()) {
        Some(key) if call.stage == "start" => StageReply::Wait {
            event: format!("bench:{key}"),
            timeout: 86_400.0,
            next_stage: "woken".into(),
            context: None,
        },
        _ => StageReply::Succeeded { result: json!(null) },
    })
}

/// The median of `runs` by rate.
fn median(mut runs: Vec<Timed>) -> Result<Timed> {
    runs.sort_by(|a, b| a.rate.total_cmp(&b.rate));
    runs.get(runs.len() / 2).copied().ok_or_else(|| Error::Config("the events phase ran no burn-down".into()))
}

/// Runs the phase: `waiting` waiting tasks, burn-downs of `tasks`, sends for `duration`.
pub(super) async fn run(
    pool: &DbPool,
    url: &str,
    waiting: usize,
    tasks: usize,
    concurrency: usize,
    connections: usize,
    duration: Duration,
) -> Result<Events> {
    load::register(pool, WAITING_TYPE, None).await?;
    load::register(pool, EMPTY_TYPE, None).await?;
    load::fill(pool, WAITING_TYPE, waiting, |n| NewTask { context: Some(json!({ "key": n })), ..NewTask::default() })
        .await?;
    let (summary, waits) =
        load::work(pool, url, WAITING_TYPE, waiting, concurrency, load::settings(None), function).await?;
    if summary.waited != waiting as u64 {
        return Err(Error::Config(format!("events: {} of {waiting} tasks began to wait", summary.waited)));
    }

    let (mut beside, mut empty) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        for (name, runs) in [(EMPTY_TYPE, &mut empty), (WAITING_TYPE, &mut beside)] {
            load::fill(pool, name, tasks, |_| NewTask::default()).await?;
            let (summary, timed) =
                load::work(pool, url, name, tasks, concurrency, load::settings(None), function).await?;
            if summary.succeeded != tasks as u64 || summary.waited != 0 {
                return Err(Error::Config(format!(
                    "events: the burn-down of {name} finished {} of {tasks} tasks ({} waited)",
                    summary.succeeded, summary.waited
                )));
            }
            runs.push(timed);
        }
    }

    // each send wakes the waiter of a key no send named before
    let next = Arc::new(AtomicUsize::new(0));
    let send = load::timed(pool, connections, duration, move |c, _| {
        let next = next.clone();
        Box::pin(async move {
            let n = next.fetch_add(1, Ordering::Relaxed);
            if n >= waiting {
                return Err(Error::Config(format!(
                    "events: every one of the {waiting} waiting tasks was woken before the time was up \
                     (raise --waiting-tasks or lower --seconds)"
                )));
            }
            match api::send_event(&c, &format!("bench:{n}"), &json!({}), None).await? {
                1 => Ok(()),
                woken => Err(Error::Config(format!("events: send_event(bench:{n}) woke {woken} tasks, not 1"))),
            }
        })
    })
    .await?;
    let create = load::enqueue_rate(pool, connections, duration).await?;
    // the phases after this one (the dashboard, the idle workers' transactions above all) do
    // not share the server with a million waiting tasks and their waits
    for name in [WAITING_TYPE, EMPTY_TYPE] {
        super::aging::clear(pool, name).await?;
    }
    Ok(Events { waits, beside: median(beside)?, empty: median(empty)?, send, create })
}

/// The phase's figures: the two bars beside their references of the same run, the references
/// (and the waits' own rate) beside UPDATE, as every rate.
pub(super) fn figures(e: &Events, waiting: usize, update: Option<f64>) -> Vec<super::Figure> {
    use super::Figure;
    let thousands = |n: usize| format!("{:.0}k", n as f64 / 1000.0);
    let beside_pass = e.beside.rate >= 0.9 * e.empty.rate;
    let send_pass = e.send.rate >= 0.5 * e.create.rate;
    vec![
        Figure::new("events_waits", "events: wait replies (tasks that begin to wait)", e.waits.rate, "tasks/s")
            .ratio(update, "UPDATE")
            .cpu(e.waits.cpu),
        Figure::new("events_burn_empty", "events: 1-stage burn-down, empty type (median)", e.empty.rate, "tasks/s")
            .ratio(update, "UPDATE")
            .cpu(e.empty.cpu),
        Figure::new(
            "events_burn_beside",
            &format!("events: the same burn-down beside {} waiting tasks (median)", thousands(waiting)),
            e.beside.rate,
            "tasks/s",
        )
        .ratio(Some(e.empty.rate), "the burn-down in an empty type")
        .bar(">= 0.9 x the burn-down in an empty type", Some(beside_pass))
        .cpu(e.beside.cpu),
        Figure::new("events_create", "events: create_task, one per transaction", e.create.rate, "tasks/s")
            .ratio(update, "UPDATE")
            .cpu(e.create.cpu),
        Figure::new(
            "events_send",
            &format!("events: send_event waking 1 of {} waiting, one per transaction", thousands(waiting)),
            e.send.rate,
            "events/s",
        )
        .ratio(Some(e.create.rate), "create_task")
        .bar("cost <= 2 x create_task (rate >= 0.5 x)", Some(send_pass))
        .cpu(e.send.cpu),
    ]
}
