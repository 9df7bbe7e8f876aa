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
//! before it claims).
//!
//! An idle type is looked at once per server, not once per hold: one hold looks at a time (the
//! others wait for its outcome), and a look that found nothing ready (and nothing due before its
//! pause ends) leaves the type *quiet* until that pause's end, marked with the type's wake
//! generation seen before its claim. Until then, or until a wake-up of the type (which moves its
//! generation on: every hold then looks), every other hold of the type, new or renewed, waits
//! without asking the database. So a fleet of idle workers on a server costs the database a look
//! per type per [`RECHECK_LISTENING`], whatever the number of workers.
//!
//! Without a LISTEN (the router alone, or a pooler that cannot LISTEN) a waiting hold looks
//! again every [`RECHECK_POLLING`]: bounded polling on the server, one claim and one `next_due`
//! per look.

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
/// How long the other holds of a type wait for the outcome of a look under way (see
/// [`Wakeups::take_look`]); a look that fails leaves them this long at most.
const LOOK_UNDER_WAY: Duration = Duration::from_millis(200);

/// The wake-ups of the server's LISTEN connection, fanned out per task type: only the holds
/// waiting on a type are woken by its notifications.
#[derive(Default)]
pub struct Wakeups {
    types: KeyedWatch,
    /// Types a look found quiet: the generation it saw, and until when (see the module docs).
    quiet: std::sync::Mutex<std::collections::HashMap<String, (u64, Instant)>>,
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

    fn quiet_map(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, (u64, Instant)>> {
        // a poisoned lock only means a panic elsewhere: the map is still whole
        self.quiet.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether this hold looks at `task_type` now: None when it does (no mark holds for
    /// generation `seen`: the type's look is then this hold's, marked as under way for
    /// [`LOOK_UNDER_WAY`] so that the other holds wait for its outcome instead of looking
    /// beside it), else until when to wait (a look found the type quiet, or one is under way).
    fn take_look(&self, task_type: &str, seen: u64) -> Option<Instant> {
        let now = Instant::now();
        let mut quiet = self.quiet_map();
        match quiet.get(task_type) {
            Some((generation, until)) if *generation == seen && *until > now => Some(*until),
            _ => {
                quiet.insert(task_type.to_string(), (seen, now + LOOK_UNDER_WAY));
                None
            }
        }
    }

    /// A look at generation `seen` found `task_type` quiet until `until`.
    fn set_quiet(&self, task_type: &str, seen: u64, until: Instant) {
        let now = Instant::now();
        let mut quiet = self.quiet_map();
        quiet.retain(|_, (_, until)| *until > now);
        quiet.insert(task_type.to_string(), (seen, until));
    }

    /// A look at generation `seen` found `task_type` not quiet: the other holds look too.
    fn not_quiet(&self, task_type: &str, seen: u64) {
        let mut quiet = self.quiet_map();
        if quiet.get(task_type).is_some_and(|(generation, _)| *generation == seen) {
            quiet.remove(task_type);
        }
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
        // the type's generation before this look: a wake-up from here on moves it on
        let seen = woken.as_mut().map(|w| *w.borrow_and_update());
        // right after a wake-up every hold looks (work came); otherwise one look per type at a
        // time, and none while a look found it quiet
        let marks = match (state.wakeups.as_ref(), seen) {
            (Some(wakeups), Some(seen)) if !after_wake => Some((wakeups, seen)),
            _ => None,
        };
        let known_quiet = marks.and_then(|(wakeups, seen)| wakeups.take_look(task_type, seen));
        let pause = match known_quiet {
            // another hold's look found the type quiet since the last wake-up, or is under way:
            // no look of our own
            Some(quiet_until) => {
                if Instant::now() >= deadline || state.shutdown.is_cancelled() {
                    return Ok(Vec::new());
                }
                quiet_until.saturating_duration_since(Instant::now())
            }
            None => {
                let c = state.pool.get().await.map_err(crate::Error::from)?;
                let tasks = api::claim_tasks(&c, task_type, worker, limit, None).await?;
                if !tasks.is_empty() {
                    if let Some((wakeups, seen)) = marks {
                        wakeups.not_quiet(task_type, seen);
                    }
                    return Ok(tasks);
                }
                if Instant::now() >= deadline || state.shutdown.is_cancelled() {
                    return Ok(tasks);
                }
                let due = api::next_due(&c, task_type).await?;
                drop(c);
                let (mut pause, quiet) = match due.map(|due| (due - chrono::Utc::now()).to_std()) {
                    // nothing pending (or the type is paused): until a wake-up
                    None => (recheck, true),
                    Some(Ok(until)) if !until.is_zero() => {
                        held_back = 0;
                        (until.min(recheck), true)
                    }
                    // due, and yet nothing was claimed: held back until a running task ends,
                    // which sends no notification
                    Some(_) => {
                        let pause = HELD_BACK_PAUSE.saturating_mul(1 << held_back.min(10)).min(recheck);
                        held_back = held_back.saturating_add(1);
                        (pause, false)
                    }
                };
                // a look right after a wake-up is followed by another soon (see
                // RECHECK_AFTER_WAKE): it leaves no quiet mark for others to trust
                if std::mem::take(&mut after_wake) {
                    pause = pause.min(RECHECK_AFTER_WAKE);
                } else if let Some((wakeups, seen)) = marks {
                    if quiet {
                        wakeups.set_quiet(task_type, seen, Instant::now() + pause);
                    } else {
                        wakeups.not_quiet(task_type, seen);
                    }
                }
                pause
            }
        };
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

    #[tokio::test]
    async fn one_look_per_type_at_a_time_and_a_quiet_mark_holds_for_its_generation() {
        let wakeups = Wakeups::default();
        let mut a = wakeups.subscribe("a");
        let seen = *a.borrow_and_update();
        // the first hold takes the look; another waits for its outcome
        assert_eq!(wakeups.take_look("a", seen), None);
        assert!(wakeups.take_look("a", seen).is_some(), "a look is under way");
        assert_eq!(wakeups.take_look("b", seen), None, "another type has its own");
        // it found the type quiet: the others wait until the mark's end
        let until = Instant::now() + Duration::from_secs(60);
        wakeups.set_quiet("a", seen, until);
        assert_eq!(wakeups.take_look("a", seen), Some(until));
        // a look that found work lets the others look at once
        wakeups.not_quiet("a", seen);
        assert_eq!(wakeups.take_look("a", seen), None);
        // a wake-up of the type moves its generation on: no mark holds for it
        wakeups.set_quiet("a", seen, until);
        wakeups.wake(Some("a"));
        let now = *a.borrow_and_update();
        assert_ne!(now, seen);
        assert_eq!(wakeups.take_look("a", now), None);
        // a type forgotten and watched again never gets an old generation back
        drop(a);
        wakeups.wake(None);
        let again = *wakeups.subscribe("a").borrow();
        assert!(again != seen && again != now);
        // a mark past its end does not hold
        wakeups.set_quiet("a", again, Instant::now());
        assert_eq!(wakeups.take_look("a", again), None);
    }
}
