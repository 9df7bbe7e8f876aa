//! `GET /v1/tasks/{id}?wait=SECONDS`: a read of a task held until it ends, woken by the
//! notification of its end rather than by polling.
//!
//! ```text
//!   request ── subscribe to the id ── asyncflow.watch_task(id, wait): a waiter row, the task read
//!              ended? answer : sleep until the first of: its notification, the recheck, the
//!              wait's end, shutdown ── get_task ── ended or the wait over? answer : sleep ...
//!   a statement ending the task ── NOTIFY asyncflow_ended, '<id>' ──> serve's LISTEN connection
//!              (db::listen) ──> Waiters: a watch per waited id ──> the requests waiting on it
//! ```
//!
//! Invariants: one LISTEN connection per server process however many requests wait; a waiting
//! request holds no pooled connection; an end is not missed (the request subscribes before
//! watch_task, which registers before it reads: see sql/api/47_task_waiters.sql). After the
//! LISTEN connection comes back, every waiting request reads again (notifications sent while it
//! was down are lost). Without a LISTEN (the router alone) a waiting read looks again after
//! 20 ms, doubling to 0.5 s.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::broadcast::{self, error::RecvError};
use tokio::sync::watch;
use tokio::time::Instant;

use super::keyed_watch::KeyedWatch;
use super::{ApiError, ApiResult, AppState};
use crate::db::api;
use crate::db::listen::Wake;
use crate::error::echo;
use crate::ids::TaskId;
use crate::task::Task;

/// With a LISTEN connection: the longest a waiting read goes without looking (a backstop for
/// an end that sends no notification, such as a claim failing an unreadable context).
pub const RECHECK_LISTENING: Duration = Duration::from_secs(5);
/// Without one: the first pause between two looks, doubling to [`POLL_MAX`].
const POLL_FIRST: Duration = Duration::from_millis(20);
const POLL_MAX: Duration = Duration::from_millis(500);

/// The ends heard on the server's LISTEN connection, fanned out per task id: only the requests
/// waiting on a task are woken by its notification.
#[derive(Default)]
pub struct Waiters {
    tasks: KeyedWatch,
}

impl Waiters {
    /// Fans `ended` out to the waiting requests, and a reconnect (`None` on `wakes`) to all of
    /// them, until the senders close.
    pub fn spawn(mut ended: broadcast::Receiver<TaskId>, mut wakes: broadcast::Receiver<Wake>) -> Arc<Waiters> {
        let waiters = Arc::new(Waiters::default());
        let fan_out = waiters.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    got = ended.recv() => match got {
                        Ok(id) => fan_out.wake(Some(id.as_str())),
                        // more than the channel keeps: every waiting request reads again
                        Err(RecvError::Lagged(_)) => fan_out.wake(None),
                        Err(RecvError::Closed) => return,
                    },
                    got = wakes.recv() => match got {
                        Ok(None) | Err(RecvError::Lagged(_)) => fan_out.wake(None),
                        Ok(Some(_)) => {}
                        Err(RecvError::Closed) => return,
                    },
                }
            }
        });
        waiters
    }

    /// A receiver that changes when the task `id` may have ended.
    fn subscribe(&self, id: &str) -> watch::Receiver<u64> {
        self.tasks.subscribe(id)
    }

    /// Forgets `id` when no request waits on it any more (its last receiver just dropped).
    fn leave(&self, id: &str) {
        self.tasks.leave(id)
    }

    /// Wakes the requests waiting on `id` (None: on every task).
    fn wake(&self, id: Option<&str>) {
        self.tasks.wake(id)
    }
}

/// The task once it has ended, or as it is when `wait` runs out (or the server shuts down).
pub(super) async fn read_when_ended(state: &AppState, id: &str, wait: Duration) -> ApiResult<Task> {
    let deadline = Instant::now() + wait;
    let not_found = || ApiError::not_found(format!("unknown task {}", echo(id)));
    let Some(waiters) = state.task_waiters.clone() else {
        return poll(state, id, deadline).await;
    };
    // before watch_task: a notification from here on wakes the sleep below
    let mut woken = waiters.subscribe(id);
    let outcome = async {
        let c = state.pool.get().await.map_err(crate::Error::from)?;
        let mut task = api::watch_task(&c, id, wait.as_secs_f64()).await?.ok_or_else(not_found)?;
        drop(c);
        loop {
            if task.status.is_final() || Instant::now() >= deadline {
                return Ok(task);
            }
            let until = (Instant::now() + RECHECK_LISTENING).min(deadline);
            tokio::select! {
                _ = tokio::time::sleep_until(until) => {}
                changed = woken.changed() => {
                    if changed.is_err() {
                        // the fan-out ended (the server is stopping): no more wake-ups
                        tokio::time::sleep_until(until).await;
                    }
                }
                _ = state.shutdown.cancelled() => return Ok(task),
            }
            task = state.client().get_task(id).await?.ok_or_else(not_found)?;
        }
    }
    .await;
    drop(woken);
    waiters.leave(id);
    outcome
}

/// Without a LISTEN connection: looks again after 20 ms, doubling to 0.5 s.
async fn poll(state: &AppState, id: &str, deadline: Instant) -> ApiResult<Task> {
    let mut pause = POLL_FIRST;
    loop {
        // a connection per look, not held through the wait
        let task = state.client().get_task(id).await?;
        let task = task.ok_or_else(|| ApiError::not_found(format!("unknown task {}", echo(id))))?;
        let now = Instant::now();
        if task.status.is_final() || now >= deadline {
            return Ok(task);
        }
        tokio::select! {
            _ = tokio::time::sleep(pause.min(deadline - now)) => {}
            _ = state.shutdown.cancelled() => return Ok(task),
        }
        pause = (pause * 2).min(POLL_MAX);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_end_wakes_the_requests_of_its_task_only_and_left_tasks_are_forgotten() {
        let waiters = Waiters::default();
        let mut a = waiters.subscribe("t-1-1");
        let b = waiters.subscribe("t-1-2");
        waiters.wake(Some("t-1-1"));
        assert!(a.has_changed().unwrap());
        assert!(!b.has_changed().unwrap());
        a.borrow_and_update();
        waiters.wake(None);
        assert!(a.has_changed().unwrap() && b.has_changed().unwrap());
        drop(b);
        waiters.leave("t-1-2");
        assert_eq!(waiters.tasks.watched(), vec!["t-1-1"]);
        drop(a);
        waiters.wake(None);
        assert!(waiters.tasks.watched().is_empty());
    }
}
