//! The producer: one loop per task type. It claims at most the free slots (and at most the
//! type's schedule_limit), hands each task to an executor, and when nothing is ready sleeps until
//! the first of: a NOTIFY for its type, the next delayed task's time, the poll interval
//! (schedule_interval, only without a LISTEN connection: with one, the worker's sweep finds
//! what a lost NOTIFY missed), a freed slot, or shutdown. On a
//! server (no NOTIFY) it sends a hold that waits there for ready work instead (a long-poll, see
//! [`wait_on_server`]), and wakes on its worker's own reports that queue tasks again. A claim
//! that fails is tried again after a jittered back-off (0.1 s doubling to 25.6 s), which ends
//! early when the LISTEN connection is made again, that is when the database is back.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use tokio::sync::broadcast::{self, error::RecvError};
use tokio_util::sync::CancellationToken;

use super::hold::{self, Hold};
use super::remote::ServerBackend;
use super::{executor, Backend, Registered, Shared};
use crate::db::listen::Wake;
use crate::error::{Error, Result};
use crate::ids::TypeName;
use crate::task::{ClaimedTask, ReportKind};
use crate::task_type::TaskTypeSettings;

/// How soon after a wake-up the producer looks again when the wake-up found less than a batch.
const RECHECK_AFTER_WAKE: Duration = Duration::from_millis(25);

/// The first pause after a claim that found nothing although tasks were due, when claims are
/// not held (with held claims the pause starts at the hold window).
const EMPTY_CLAIM_PAUSE: Duration = Duration::from_millis(10);

/// Longest sleep of an idle producer that LISTENs (see the wait in [`run`]).
const IDLE_SLEEP_MAX: Duration = Duration::from_secs(3600);

/// Longest wait for more free slots before claiming a small batch while saturated.
const FILL_WAIT: Duration = Duration::from_millis(3);

pub(super) async fn run(
    shared: Arc<Shared>,
    task_type: TypeName,
    registered: Registered,
    settings: TaskTypeSettings,
    mut wakes: broadcast::Receiver<Wake>,
    stop: CancellationToken,
) {
    // The database keeps schedule_interval within 0.01 .. 86,400 s; a server's answer is held to
    // the same range here (NaN or an absurd value would make Duration panic).
    let poll =
        Duration::try_from_secs_f64(settings.schedule_interval.clamp(0.01, 86_400.0)).unwrap_or(Duration::from_secs(5));
    let batch = settings.schedule_limit.max(1) as usize;
    let lease_secs = i64::from(settings.max_processing_time);
    let mut freed = shared.freed.subscribe();
    // calls of this type ending (None: not reached, every type has one)
    let mut ended = shared.ended.get(task_type.as_str()).map(|e| e.subscribe());
    let mut failures: u32 = 0;
    let mut recheck = false;
    // claims in a row that found nothing although tasks were due
    let mut empty_claims: u32 = 0;
    // a claim waits (at most FILL_WAIT) until a quarter of the batch is free
    let fill_threshold = (batch.min(shared.concurrency) / 4).max(1);
    let mut fill_deadline: Option<tokio::time::Instant> = None;
    loop {
        if stop.is_cancelled() {
            return;
        }
        freed.borrow_and_update();
        // seen before the claim: a call of this type that ends from here on wakes the wait below
        if let Some(ended) = ended.as_mut() {
            ended.borrow_and_update();
        }
        let free = shared.slots.available_permits().min(batch);
        if free == 0 {
            fill_deadline = None;
            tokio::select! {
                _ = freed.changed() => continue,
                _ = stop.cancelled() => return,
            }
        }
        if free < fill_threshold {
            // Saturated: slots free one by one as calls end. Claiming each alone would cost a
            // round trip and a commit per task; wait a moment for a worthwhile batch instead.
            let deadline = *fill_deadline.get_or_insert_with(|| tokio::time::Instant::now() + FILL_WAIT);
            if tokio::time::Instant::now() < deadline {
                tokio::select! {
                    _ = freed.changed() => continue,
                    _ = tokio::time::sleep_until(deadline) => {}
                    _ = stop.cancelled() => return,
                }
            }
        }
        fill_deadline = None;
        let want = shared.reserve(free);
        if want == 0 {
            // max_tasks: the budget is spent (the worker is stopping), or reserved by another
            // type's claim in flight, which gives back what it does not use and says so on
            // `freed`.
            tokio::select! {
                _ = freed.changed() => continue,
                _ = stop.cancelled() => return,
            }
        }
        let Ok(mut permits) = shared.slots.clone().try_acquire_many_owned(want as u32) else {
            shared.unreserve(want);
            continue;
        };
        // the claim found nothing (see the wait below)
        let got_none;
        match claim(&shared, &task_type, want, settings.speculative_chaining).await {
            Ok((tasks, hold)) => {
                failures = 0;
                got_none = tasks.is_empty();
                let full = tasks.len() == want;
                shared.unreserve(want - tasks.len());
                shared.stats.claimed.fetch_add(tasks.len() as u64, Ordering::Relaxed);
                shared.check_budget();
                for (index, task) in tasks.into_iter().enumerate() {
                    let Some(permit) = permits.split(1) else { break };
                    let held = hold.as_ref().map(|h| (h.clone(), index));
                    executor::spawn(&shared, &registered, task, lease_secs, permit, held);
                }
                if permits.num_permits() > 0 {
                    // Unused slots go back: producers of other types may be waiting for one.
                    drop(permits);
                    shared.freed.send_modify(|n| *n = n.wrapping_add(1));
                }
                if full {
                    continue;
                }
                if !got_none {
                    // Fewer than asked for: this producer goes on to ask when the next task is due
                    // (a round trip) and to wait. Spawned calls would wait for that await: the
                    // last one in this thread's next-task slot, the others for a thread to steal
                    // them. Yielding first starts them now: an idle worker's woken call started
                    // about 35 µs sooner (`asyncflow bench --only wake`). A full claim claims
                    // again at once, its calls taken up by the other threads meanwhile.
                    tokio::task::yield_now().await;
                }
            }
            Err(e) => {
                shared.unreserve(want);
                drop(permits);
                shared.freed.send_modify(|n| *n = n.wrapping_add(1));
                failures += 1;
                if back_off(&task_type, &e, failures, &mut wakes, &stop).await {
                    continue;
                }
                return;
            }
        }
        // On a server: wait there for ready work (see wait_on_server), hold after hold while a
        // slot is free (a hold claims first: it answers at once when work is ready).
        if let (Backend::Server(remote), Some(wait)) = (&shared.backend, shared.hold_wait) {
            let mut waited = Waited::Poll;
            while remote.waits() {
                waited = wait_on_server(&shared, remote, &task_type, &registered, lease_secs, batch, wait, &stop).await;
                if !matches!(waited, Waited::Again) {
                    break;
                }
                failures = 0;
            }
            match waited {
                Waited::Stop => return,
                Waited::Again | Waited::NoSlot => continue,
                Waited::Failed(e) => {
                    failures += 1;
                    if back_off(&task_type, &e, failures, &mut wakes, &stop).await {
                        continue;
                    }
                    return;
                }
                // answered at once with nothing (a server shutting down, or one that does not
                // wait): the poll below, this once
                Waited::Poll => {}
            }
        }
        // Nothing more ready: sleep until something may be. Right after a wake-up, look once
        // more shortly: transactions that committed alongside the notifying one skipped their
        // own NOTIFY (see asyncflow.wake).
        // With a LISTEN connection every task made ready wakes the producer, so only the next
        // due task (delayed, or a retry's back-off) bounds the sleep; the worker's sweep stands
        // in for a wake-up that went missing. Without one, poll at schedule_interval.
        let idle_cap = if shared.listening { IDLE_SLEEP_MAX } else { poll };
        let mut wait = match shared.backend.next_due(&task_type).await {
            Ok(Some(due)) => due.min(idle_cap),
            Ok(None) => idle_cap,
            Err(_) => poll,
        };
        let held_back = wait.is_zero() && got_none;
        if held_back {
            // "Ready now" right after a claim that found nothing: the ready tasks are in a hold
            // (this worker's or another's: pending until it ends, at most the window), or behind
            // the type's concurrency limit or its queue keys' limits until a running task ends.
            // Looking again at once would spin; look again after a pause that starts at the hold
            // window (or EMPTY_CLAIM_PAUSE) and doubles while claims keep finding nothing, up to
            // the poll. A call of this type ending in this worker (its reply written, since the
            // claim began) may be what frees room: the pause then ends at once, or a floor after
            // the claim that found nothing if that is later, so a limit's slot does not wait out
            // a doubled pause. The floor starts at EMPTY_CLAIM_PAUSE and doubles with the claims
            // that keep finding nothing, up to 16 times, however often the type's calls end.
            let base = shared.paces.floor().max(EMPTY_CLAIM_PAUSE);
            wait = base.saturating_mul(1 << empty_claims.min(10)).min(poll);
            empty_claims = empty_claims.saturating_add(1);
        } else {
            empty_claims = 0;
        }
        if std::mem::take(&mut recheck) {
            wait = wait.min(RECHECK_AFTER_WAKE);
        }
        let waiting_since = tokio::time::Instant::now();
        let mut deadline = waiting_since + wait;
        let floor = waiting_since + EMPTY_CLAIM_PAUSE.saturating_mul(1 << empty_claims.saturating_sub(1).min(4));
        loop {
            let call_ended = async {
                match ended.as_mut() {
                    Some(ended) if held_back => ended.changed().await.is_ok(),
                    _ => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = tokio::time::sleep_until(deadline) => break,
                _ = stop.cancelled() => return,
                open = call_ended => {
                    if !open {
                        // not reached (the worker holds the sender): the pause as it is
                        ended = None;
                        continue;
                    }
                    deadline = deadline.min(tokio::time::Instant::now().max(floor));
                }
                wake = wakes.recv() => match wake {
                    Ok(Some(t)) if t != task_type.as_str() => continue,
                    Err(RecvError::Closed) => { tokio::time::sleep_until(deadline).await; break }
                    _ => { recheck = true; break }
                },
            }
        }
    }
}

/// Claims up to `want` tasks: held (see [`hold`]) on the database unless the worker's hold window
/// is zero; the tasks of a hold come with it (chaining stages speculatively when the type's
/// `speculative_chaining` says so).
async fn claim(
    shared: &Arc<Shared>,
    task_type: &TypeName,
    want: usize,
    speculative_chaining: bool,
) -> Result<(Vec<ClaimedTask>, Option<Arc<Hold>>)> {
    match (&shared.backend, &shared.holds) {
        (Backend::Database(pool), Some(holds)) => {
            let permit =
                holds.clone().acquire_owned().await.map_err(|_| Error::Unexpected("hold slots closed".into()))?;
            let conn = pool.get().await?;
            hold::claim(shared, conn, task_type, want, permit, speculative_chaining).await
        }
        _ => Ok((shared.backend.claim(task_type, &shared.worker_id, want).await?, None)),
    }
}

/// Waits `2^failures` tenths of a second (jittered, at most 25.6 s) after a failed claim; false
/// when the worker stops meanwhile.
///
/// The back-off ends early when the LISTEN connection is made again (its "look at every type"
/// wake-up): the database is back, and every producer looks at once rather than waiting out up
/// to 25.6 s more. A wake-up for a type only says that someone could write to the database, not
/// that this producer's claim would work (a revoked grant fails the same way): it keeps the
/// back-off.
async fn back_off(
    task_type: &TypeName,
    e: &Error,
    failures: u32,
    wakes: &mut broadcast::Receiver<Wake>,
    stop: &CancellationToken,
) -> bool {
    let cap = (100u64 << failures.min(8)).min(30_000);
    let wait = Duration::from_millis(rand::thread_rng().gen_range(cap / 2..=cap));
    tracing::warn!(task_type = %task_type, error = %e, retry_in = ?wait, "claim failed");
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(deadline) => return true,
            _ = stop.cancelled() => return false,
            wake = wakes.recv() => match wake {
                Ok(None) => {
                    tracing::info!(task_type = %task_type, "the database is reachable again; claiming");
                    return true;
                }
                Err(RecvError::Closed) => {
                    tokio::time::sleep_until(deadline).await;
                    return true;
                }
                Ok(Some(_)) | Err(RecvError::Lagged(_)) => {}
            },
        }
    }
}

/// How a hold that waited on the server ended.
enum Waited {
    /// The worker is stopping.
    Stop,
    /// It claimed tasks (and started those that fit), or its wait ran out: hold again.
    Again,
    /// No slot is free: the loop waits for one.
    NoSlot,
    /// It answered with nothing before its wait ran out, or the server does not wait: poll.
    Poll,
    /// It failed.
    Failed(Error),
}

/// A worker on a server with nothing to do sends a hold that waits there (a long-poll, see
/// `http::hold_wait`) instead of sleeping its poll interval: the server answers as soon as it
/// has claimed work of the type, so a task starts about as soon as on a worker that LISTENs.
///
/// The hold takes no slots while it waits: they stay free for the other types' producers. Of
/// the tasks it brings, those that find a slot (and room in max_tasks) are started, and the
/// rest are handed back at once (`release`: ready again, the try given back). A hold given up
/// because the worker stops may have claimed tasks: they are looked for before the worker ends.
#[allow(clippy::too_many_arguments)]
async fn wait_on_server(
    shared: &Arc<Shared>,
    remote: &ServerBackend,
    task_type: &TypeName,
    registered: &Registered,
    lease_secs: i64,
    batch: usize,
    wait: Duration,
    stop: &CancellationToken,
) -> Waited {
    // no slot free (other types' calls took them since the claim): the loop waits for one first,
    // rather than bring tasks to hand back
    let want = shared.slots.available_permits().min(batch);
    if want == 0 {
        return Waited::NoSlot;
    }
    let asked = tokio::time::Instant::now();
    let answer = tokio::select! {
        answer = remote.claim_waiting(task_type, &shared.worker_id, want, wait) => answer,
        _ = stop.cancelled() => {
            remote.abandoned(task_type);
            return Waited::Stop;
        }
    };
    let tasks = match answer {
        Ok(Some(tasks)) => tasks,
        Ok(None) => return Waited::Poll,
        Err(e) => return Waited::Failed(e),
    };
    if tasks.is_empty() {
        // the wait ran out: hold again; an empty answer well before it did is not waited on
        return if asked.elapsed() >= wait / 2 { Waited::Again } else { Waited::Poll };
    }
    let granted = shared.reserve(tasks.len());
    let mut started = 0;
    let mut handed_back = Vec::new();
    for task in tasks {
        let permit = if started < granted { shared.slots.clone().try_acquire_owned().ok() } else { None };
        match permit {
            Some(permit) => {
                started += 1;
                executor::spawn(&shared, &registered, task, lease_secs, permit, None);
            }
            None => handed_back.push(super::report(&task.task_id, task.claim_seq, ReportKind::Release, None)),
        }
    }
    shared.unreserve(granted - started);
    shared.stats.claimed.fetch_add(started as u64, Ordering::Relaxed);
    shared.check_budget();
    if !handed_back.is_empty() {
        tracing::debug!(task_type = %task_type, count = handed_back.len(), "handing back what a waiting hold brought beyond the free slots");
        let reporter = shared.reporter.clone();
        tokio::spawn(async move { reporter.send(handed_back).await });
    }
    Waited::Again
}
