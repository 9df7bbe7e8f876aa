//! Leader election for maintenance.
//!
//! ```text
//!   process A                         PostgreSQL                      process B
//!   dedicated connection ---- pg_try_advisory_lock(K) = true
//!   is_leader = true                                    <---- pg_try_advisory_lock(K) = false
//!   ping every check interval                                       retry every check interval
//!   connection dies  ==> lock released by the server
//!   is_leader = false, reconnect                        <---- pg_try_advisory_lock(K) = true
//!                                                                   is_leader = true
//! ```
//!
//! The lock is a session lock, so it lives exactly as long as the connection: a leader whose
//! connection is gone steps down on its next check (or as soon as the connection task ends),
//! and by then the server has released the lock for someone else. Between the server dropping
//! the connection and the old leader noticing, both may briefly believe they lead; every
//! maintenance operation is safe to run twice at once (row locks, SKIP LOCKED), so this costs
//! nothing but duplicate work.

use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::db::{self, api};

/// Lock key (class 'AF', 2) for the maintenance leader.
pub const MAINTENANCE_LOCK: i32 = 2;

/// A running election participant.
pub struct LeaderHandle {
    /// True while this process leads.
    pub is_leader: watch::Receiver<bool>,
    /// Backend pid of the dedicated connection while connected (tests kill it).
    pub backend_pid: watch::Receiver<Option<i32>>,
}

/// Takes part in the election for `key` until `stop` fires.
pub fn spawn(url: String, key: i32, check: Duration, stop: CancellationToken) -> LeaderHandle {
    let (leader_tx, is_leader) = watch::channel(false);
    let (pid_tx, backend_pid) = watch::channel(None);
    tokio::spawn(async move {
        loop {
            if stop.is_cancelled() {
                break;
            }
            match db::connect(&url).await {
                Ok((client, mut driver)) => {
                    pid_tx.send_replace(api::backend_pid(&client).await.ok());
                    loop {
                        let check_result = if *leader_tx.borrow() {
                            api::ping(&client).await.map(|_| true)
                        } else {
                            api::try_lead(&client, key).await
                        };
                        match check_result {
                            Ok(leading) => {
                                leader_tx.send_if_modified(|l| std::mem::replace(l, leading) != leading);
                            }
                            Err(e) => {
                                tracing::warn!(error = %e, "leader connection failed; stepping down");
                                break;
                            }
                        }
                        tokio::select! {
                            _ = tokio::time::sleep(check) => {}
                            _ = &mut driver => {
                                tracing::warn!("leader connection closed; stepping down");
                                break;
                            }
                            _ = stop.cancelled() => break,
                        }
                    }
                    leader_tx.send_if_modified(|l| std::mem::replace(l, false));
                    pid_tx.send_replace(None);
                    drop(client);
                }
                Err(e) => tracing::warn!(error = %e, "leader connection could not be made"),
            }
            tokio::select! {
                _ = tokio::time::sleep(check) => {}
                _ = stop.cancelled() => break,
            }
        }
        leader_tx.send_replace(false);
    });
    LeaderHandle { is_leader, backend_pid }
}
