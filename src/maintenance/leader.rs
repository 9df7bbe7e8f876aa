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
//!
//! A participant given an [`Identity`] also writes who leads into `asyncflow.maintenance_leader`
//! at every check while it leads (`note_leader`: since when, last seen), and removes it when it
//! stops leading cleanly, so `GET /v1/workers` can show the leader. The row is only what the
//! leader said: the lock decides, and a row not refreshed for a while is not shown.

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

/// Who a leader says it is in `asyncflow.maintenance_leader`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The process's id.
    pub id: String,
    /// Its host.
    pub host: String,
}

impl Identity {
    /// This process: `<host>-<pid>` on its host.
    pub fn of_this_process() -> Self {
        let host = crate::ids::host_name();
        Identity { id: format!("{host}-{}", std::process::id()), host }
    }
}

/// Takes part in the election for `key` until `stop` fires.
pub fn spawn(url: String, key: i32, check: Duration, stop: CancellationToken) -> LeaderHandle {
    spawn_noted(url, key, check, stop, None)
}

/// As [`spawn`]; while leading, also records `identity` as the leader (see the module docs).
pub fn spawn_noted(
    url: String,
    key: i32,
    check: Duration,
    stop: CancellationToken,
    identity: Option<Identity>,
) -> LeaderHandle {
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
                                if let (true, Some(me)) = (leading, &identity) {
                                    // only shown, never relied on: a failure costs the row, not the lead
                                    if let Err(e) = api::note_leader(&client, &me.id, &me.host, None).await {
                                        tracing::warn!(error = %e, "could not record the maintenance leader");
                                    }
                                }
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
                    let was_leading = leader_tx.send_if_modified(|l| std::mem::replace(l, false));
                    if let (true, Some(me), false) = (was_leading, &identity, client.is_closed()) {
                        let _ = api::leave_leadership(&client, &me.id).await;
                    }
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
