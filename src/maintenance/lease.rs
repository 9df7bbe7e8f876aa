//! The maintenance lead as a lease, for a process behind a pooler in transaction mode
//! ([`crate::db::pooling`]), where no session lock outlives its transaction.
//!
//! ```text
//!   every check interval c, through the pool:
//!     asyncflow.take_lead(me, host, lease)   the row is mine, or was not renewed for `lease`
//!       -> true: lead (the row renewed)       -> false: someone else leads
//!   a leader whose renewal did not answer within c + t steps down (as on the lock)
//! ```
//!
//! The lease is `2c + t` (6 s by default), the idle session timeout of the lock's form: a leader
//! cut off steps down after `c + t`, before its lease runs out. The others ask about every
//! [`FOLLOWER_CHECK`] (30 s, jittered): through a pooler each question is a transaction, and an
//! idle fleet of 50 asks under 2 times a second. So another participant leads within about
//! `2c + t` + 37.5 s of the old leader's last renewal (8 s on the lock's form), or at its next
//! question when the old leader stepped down cleanly and removed the row.

use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use super::leader::{check_timeout, session_limits, Identity, LeaderHandle};
use crate::db::{self, api};

/// How often a participant that does not lead asks for the lease: one transaction each, through
/// a pooler, so a large fleet asks rarely ([`FOLLOWER_CHECK`], jittered), and never more often
/// than the leader renews.
fn follower_check(check: Duration) -> Duration {
    let jitter = rand::Rng::gen_range(&mut rand::thread_rng(), 0.75..1.25);
    FOLLOWER_CHECK.mul_f64(jitter).max(check)
}

/// See [`follower_check`].
pub const FOLLOWER_CHECK: Duration = Duration::from_secs(30);

/// Takes part in the maintenance election by lease until `stop` (see the module docs).
pub(super) fn start(
    url: String,
    check: Duration,
    stop: CancellationToken,
    identity: Identity,
    must_be_able: bool,
) -> LeaderHandle {
    let (leader_tx, is_leader) = watch::channel(false);
    let (pid_tx, backend_pid) = watch::channel(None);
    let (resign, mut resigned) = mpsc::unbounded_channel::<Duration>();
    let timeout = check_timeout(check);
    let lease = session_limits(check).idle.as_secs_f64();
    tokio::spawn(async move {
        let pool = match db::pool(&url, 1) {
            Ok(pool) => pool,
            Err(e) => {
                tracing::warn!(error = %e, "maintenance: no lease connection; this process takes no part");
                return;
            }
        };
        let mut able = !must_be_able;
        let mut last_renewed: Option<Instant> = None;
        loop {
            let checked = async {
                let client = pool.get().await?;
                if !able {
                    let (ok, denied) = api::can_maintain(&client).await?;
                    if !ok {
                        return Ok::<_, crate::error::Error>(Err(denied));
                    }
                    able = true;
                }
                Ok(Ok(api::take_lead(&client, &identity.id, &identity.host, lease, None).await?))
            };
            match tokio::time::timeout(timeout, checked).await {
                Ok(Ok(Ok(held))) => {
                    last_renewed = held.then(Instant::now);
                    leader_tx.send_if_modified(|l| std::mem::replace(l, held) != held);
                    // no backend of its own: the pooler lends one per transaction
                    pid_tx.send_replace(None);
                }
                Ok(Ok(Err(denied))) => {
                    tracing::info!(may_not_run = ?denied,
                        "maintenance: this process takes no part in maintenance: its role may not run every \
                         maintenance service (run `asyncflow maintain` as the schema's owner)");
                    break;
                }
                Ok(Err(e)) => tracing::warn!(error = %e, "maintenance lease check failed"),
                Err(_) => tracing::warn!(?timeout, "maintenance lease check did not answer in time"),
            }
            // a leader that could not renew for c + t steps down before its lease runs out
            if last_renewed.is_some_and(|at| at.elapsed() >= check + timeout) {
                last_renewed = None;
                leader_tx.send_if_modified(|l| std::mem::replace(l, false));
            }
            // a leader renews every check; the others ask rarely (see the module docs)
            let next = if last_renewed.is_some() { check } else { follower_check(check) };
            tokio::select! {
                _ = tokio::time::sleep(next) => {}
                asked = resigned.recv() => {
                    let pause = asked.unwrap_or(check);
                    step_down(&pool, &identity, &leader_tx, timeout).await;
                    last_renewed = None;
                    able = !must_be_able;
                    tokio::select! {
                        _ = tokio::time::sleep(pause) => {}
                        _ = stop.cancelled() => break,
                    }
                }
                _ = stop.cancelled() => break,
            }
        }
        step_down(&pool, &identity, &leader_tx, timeout).await;
    });
    LeaderHandle::new(is_leader, backend_pid, resign)
}

/// Gives the lead up, if held: the row goes, so that another participant leads at its next
/// check rather than when the lease runs out.
async fn step_down(pool: &db::DbPool, identity: &Identity, leader_tx: &watch::Sender<bool>, timeout: Duration) {
    if leader_tx.send_if_modified(|l| std::mem::replace(l, false)) {
        let leave = async { api::leave_lease(&pool.get().await?, &identity.id).await };
        if let Err(e) = tokio::time::timeout(timeout, leave).await.unwrap_or(Ok(())) {
            tracing::debug!(error = %e, "could not remove the maintenance lease row");
        }
    }
}
