//! A hold that waits (`POST /v1/worker/hold` with `wait`): the long-poll that gives a worker on
//! a server (`asyncflow worker --server`) the push wake-ups a worker on the database gets from
//! LISTEN. When nothing is ready the request stays open, holding no database connection, and
//! claims again as soon as the server hears of ready work of its type; it answers with what it
//! claimed, or with nothing once the wait runs out or the server shuts down.
//!
//! ```text
//!   NOTIFY asyncflow, '<type>' ──> serve's one LISTEN connection (db::listen)
//!                                  └─> Wakeups: a watch per type ──> every hold waiting on that type
//!   hold(wait): claim ─ none ─> next_due ─> sleep until the first of: a wake of the type, the
//!               next task's due time, the recheck, the wait's end, shutdown ─> claim again ...
//! ```
//!
//! Invariants: one LISTEN connection per server process however many holds wait (each wait is a
//! watch receiver, a few hundred bytes); a waiting hold holds no pooled connection; a
//! notification sent between a hold's claim and its sleep is not missed (the hold subscribes
//! before it claims). Without a LISTEN (the router alone, or a pooler that cannot LISTEN) a
//! waiting hold looks again every [`RECHECK_POLLING`]: bounded polling on the server, one
//! claim and one `next_due` per look.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::broadcast::{self, error::RecvError};
use tokio::sync::watch;
use tokio::time::Instant;

use super::keyed_watch::KeyedWatch;
use super::{ApiResult, AppState};
use crate::db::api;
use crate::db::listen::Wake;
use crate::ids::WorkerId;
use crate::task::ClaimedTask;

/// With a LISTEN connection: the longest a waiting hold goes without looking (a notification
/// lost while the connection was down is made up by the wake-up sent on reconnecting; this is
/// the backstop, as the type's poll interval is a database worker's).
pub const RECHECK_LISTENING: Duration = Duration::from_secs(5);
/// Without a LISTEN connection: how often a waiting hold looks.
pub const RECHECK_POLLING: Duration = Duration::from_secs(1);
/// After a wake-up that claimed nothing, the next look comes this soon: transactions that
/// committed beside the notifying one skipped their own NOTIFY (see `asyncflow.wake`).
const RECHECK_AFTER_WAKE: Duration = Duration::from_millis(25);
/// The first pause when tasks are due but the claim took none (held back by the type's or a
/// queue key's concurrency, or by another worker's hold); it doubles while that lasts.
const HELD_BACK_PAUSE: Duration = Duration::from_millis(25);

/// The wake-ups of the server's LISTEN connection, fanned out per task type: only the holds
/// waiting on a type are woken by its notifications.
#[derive(Default)]
pub struct Wakeups {
    types: KeyedWatch,
}

impl Wakeups {
    /// Fans `wakes` (a LISTEN connection's, see `db::listen`) out to the waiting holds until its
    /// sender closes.
    pub fn spawn(mut wakes: broadcast::Receiver<Wake>) -> Arc<Wakeups> {
        let wakeups = Arc::new(Wakeups::default());
        let fan_out = wakeups.clone();
        tokio::spawn(async move {
            loop {
                match wakes.recv().await {
                    Ok(Some(task_type)) => fan_out.wake(Some(&task_type)),
                    // a reconnect (notifications may have been lost), or more than the channel
                    // keeps: every waiting hold looks
                    Ok(None) | Err(RecvError::Lagged(_)) => fan_out.wake(None),
                    Err(RecvError::Closed) => return,
                }
            }
        });
        wakeups
    }

    /// A receiver that changes whenever work of `task_type` may be ready.
    fn subscribe(&self, task_type: &str) -> watch::Receiver<u64> {
        self.types.subscribe(task_type)
    }

    /// Wakes the holds waiting on `task_type` (None: on every type), and forgets the types no
    /// hold waits on any more.
    fn wake(&self, task_type: Option<&str>) {
        self.types.wake(task_type)
    }
}

/// Claims up to `limit` ready tasks of `task_type` for `worker`, waiting up to `wait` for some
/// when none is ready (see the module docs); an empty answer when the wait runs out.
pub(super) async fn claim_waiting(
    state: &AppState,
    task_type: &str,
    worker: &WorkerId,
    limit: i32,
    wait: Duration,
) -> ApiResult<Vec<ClaimedTask>> {
    let deadline = Instant::now() + wait;
    // before the first claim: a notification from here on wakes the sleep below
    let mut woken = state.wakeups.as_ref().map(|w| w.subscribe(task_type));
    let recheck = if woken.is_some() { RECHECK_LISTENING } else { RECHECK_POLLING };
    let mut held_back: u32 = 0;
    let mut after_wake = false;
    loop {
        let c = state.pool.get().await.map_err(crate::Error::from)?;
        let tasks = api::claim_tasks(&c, task_type, worker, limit, None).await?;
        if !tasks.is_empty() || Instant::now() >= deadline || state.shutdown.is_cancelled() {
            return Ok(tasks);
        }
        let due = api::next_due(&c, task_type).await?;
        drop(c);
        let mut pause = match due.map(|due| (due - chrono::Utc::now()).to_std()) {
            // nothing pending (or the type is paused): until a wake-up
            None => recheck,
            Some(Ok(until)) if !until.is_zero() => {
                held_back = 0;
                until.min(recheck)
            }
            // due, and yet nothing was claimed: held back until a running task ends, which
            // sends no notification
            Some(_) => {
                let pause = HELD_BACK_PAUSE.saturating_mul(1 << held_back.min(10)).min(recheck);
                held_back = held_back.saturating_add(1);
                pause
            }
        };
        if std::mem::take(&mut after_wake) {
            pause = pause.min(RECHECK_AFTER_WAKE);
        }
        let until = (Instant::now() + pause).min(deadline);
        let changed = async {
            // no LISTEN behind this server (or its fan-out ended): the pause alone
            match woken.as_mut() {
                Some(w) => {
                    if w.changed().await.is_err() {
                        std::future::pending::<()>().await;
                    }
                }
                None => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = tokio::time::sleep_until(until) => {}
            _ = changed => after_wake = true,
            _ = state.shutdown.cancelled() => return Ok(Vec::new()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_wake_reaches_the_holds_of_its_type_only_and_unwatched_types_are_forgotten() {
        let wakeups = Wakeups::default();
        let mut a = wakeups.subscribe("a");
        let b = wakeups.subscribe("b");
        wakeups.wake(Some("a"));
        assert!(a.has_changed().unwrap());
        assert!(!b.has_changed().unwrap());
        a.borrow_and_update();
        wakeups.wake(None);
        assert!(a.has_changed().unwrap() && b.has_changed().unwrap());
        drop(b);
        wakeups.wake(Some("b"));
        wakeups.wake(Some("nobody"));
        assert_eq!(wakeups.types.watched(), vec!["a"]);
        drop(a);
        wakeups.wake(None);
        assert!(wakeups.types.watched().is_empty());
    }
}
