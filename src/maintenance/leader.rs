//! Leader election for maintenance.
//!
//! ```text
//!   process A                         PostgreSQL                      process B
//!   dedicated connection ---- pg_try_advisory_lock(K) = true
//!   is_leader = true                                    <---- pg_try_advisory_lock(K) = false
//!   note_leader every check interval                  <---- pg_advisory_lock(K): waits there,
//!                                                            at most FOLLOWER_WAIT, then again
//!   connection dies  ==> lock released by the server  ----> granted
//!   is_leader = false, reconnect                                    is_leader = true
//! ```
//!
//! A participant that does not lead waits for the lock on the server (`lock_timeout` =
//! [`FOLLOWER_WAIT`], then it asks again): an idle fleet's followers cost the server one
//! statement a minute each, and the lock passes as soon as the leader's session ends. The
//! leader's check is the write of its row (`note_leader`): one statement per check interval.
//!
//! **Through a pooler in transaction mode** ([`crate::db::pooling`]) no session outlives a
//! transaction, so no session lock can be held: the lead is a lease instead
//! ([`crate::maintenance::lease`]), the same row renewed at each check.
//!
//! The lock is a session lock, so it lives exactly as long as the connection: a leader whose
//! connection is gone steps down on its next check (or as soon as the connection task ends),
//! and by then the server has released the lock for someone else. Between the server dropping
//! the connection and the old leader noticing, both may briefly believe they lead; every
//! maintenance operation is safe to run twice at once (row locks, SKIP LOCKED), so this costs
//! nothing but duplicate work.
//!
//! **Bounded when the network fails.** A connection that goes silent (a partition, a path that
//! stops forwarding without closing the socket) would otherwise keep the lock on the server
//! until TCP gives up, hours later. Both ends bound it, from the check interval `c` (2 s by
//! default) and the check timeout `t` = max(`c`, 1 s):
//! - the leader steps down when a check does not answer within `t`: at most `c + t` (4 s) after
//!   its last answered check;
//! - the server ends the session (and frees the lock) once it has been idle for
//!   `idle_session_timeout` = `2c + t` (6 s), longer than the leader takes to step down, so the
//!   old leader has stopped before anyone else can lead; TCP keepalive and `tcp_user_timeout`
//!   on the session (set like idle_session_timeout, see [`session_limits`]) end it too when the
//!   peer is gone;
//! - another participant waits for the lock, so it leads as soon as the server ended the old
//!   session: at most `2c + t` (6 s) after the old leader's last answered check, `3c + t` (8 s)
//!   if its own connection had to be made again. A waiting participant whose own network path
//!   failed holds the lock it is granted only until its idle session ends (`2c + t`).
//!
//! **Only a role that can lead.** A maintenance participant ([`spawn_maintenance`]) asks
//! `asyncflow.can_maintain()` before it first tries for the lock: a role that may not run every
//! service (a worker role) would hold the lock and fail every pass, keeping the owner's
//! `asyncflow maintain` out. Such a process says so once, at INFO, and takes no part. A leader
//! whose services fail anyway (a grant revoked later) is told to [`LeaderHandle::resign`]: it
//! gives up the lock and stays out of the election for a while, asking again before it returns.
//!
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::db::{self, api};

/// Lock key (class 'AF', 2) for the maintenance lead.
pub const MAINTENANCE_LOCK: i32 = 2;

/// A running election participant.
pub struct LeaderHandle {
    /// True while this process leads.
    pub is_leader: watch::Receiver<bool>,
    /// Backend pid of the dedicated connection while connected (tests kill it).
    pub backend_pid: watch::Receiver<Option<i32>>,
    resign: mpsc::UnboundedSender<Duration>,
}

impl LeaderHandle {
    pub(super) fn new(
        is_leader: watch::Receiver<bool>,
        backend_pid: watch::Receiver<Option<i32>>,
        resign: mpsc::UnboundedSender<Duration>,
    ) -> Self {
        LeaderHandle { is_leader, backend_pid, resign }
    }

    /// Gives the lead up, if held, and stays out of the election for `pause`.
    pub fn resign(&self, pause: Duration) {
        let _ = self.resign.send(pause);
    }
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

/// How long a check may take before the participant gives its connection up (and the lead, if
/// it held it): the check interval, at least a second.
pub fn check_timeout(check: Duration) -> Duration {
    check.max(Duration::from_secs(1))
}

/// What the server is told about the participant's session (see the module docs): idle for
/// longer than a leader takes to notice it cannot reach the server, it is ended.
pub fn session_limits(check: Duration) -> api::SessionLimits {
    let timeout = check_timeout(check);
    let idle = check * 2 + timeout;
    api::SessionLimits {
        idle,
        keepalive_idle: timeout,
        keepalive_interval: Duration::from_secs(1),
        keepalive_count: 2,
        user_timeout: idle,
        lock_wait: FOLLOWER_WAIT,
    }
}

/// The longest one wait of a participant for the lock lasts before it asks again (see the
/// module docs): an idle fleet's participants cost the server one statement each per wait.
pub const FOLLOWER_WAIT: Duration = Duration::from_secs(60);

/// The longest a cut-off leader keeps leading after its last answered check (`c + t`).
pub fn step_down_bound(check: Duration) -> Duration {
    check + check_timeout(check)
}

/// The longest until another participant leads after the old leader's last answered check
/// (`3c + t`), once the server ended the old session.
pub fn takeover_bound(check: Duration) -> Duration {
    session_limits(check).idle + check
}

/// Takes part in the election for `key` until `stop` fires.
pub fn spawn(url: String, key: i32, check: Duration, stop: CancellationToken) -> LeaderHandle {
    start(url, key, check, stop, None, false)
}

/// As [`spawn`]; while leading, also records `identity` as the leader (see the module docs).
pub fn spawn_noted(
    url: String,
    key: i32,
    check: Duration,
    stop: CancellationToken,
    identity: Option<Identity>,
) -> LeaderHandle {
    start(url, key, check, stop, identity, false)
}

/// Takes part in the maintenance election, as [`spawn_noted`], once the role has been found
/// able to run every maintenance service (`asyncflow.can_maintain()`); a role that is not takes
/// no part, and says so once.
pub fn spawn_maintenance(url: String, check: Duration, stop: CancellationToken, identity: Identity) -> LeaderHandle {
    if db::pooling::mode() == db::pooling::PoolMode::Transaction {
        return super::lease::start(url, check, stop, identity, true);
    }
    start(url, MAINTENANCE_LOCK, check, stop, Some(identity), true)
}

/// What one check found.
enum Checked {
    /// The lock is held (true) or not.
    Leading(bool),
    /// The role may not maintain: leave the election.
    Cannot,
}

fn start(
    url: String,
    key: i32,
    check: Duration,
    stop: CancellationToken,
    identity: Option<Identity>,
    must_be_able: bool,
) -> LeaderHandle {
    let (leader_tx, is_leader) = watch::channel(false);
    let (pid_tx, backend_pid) = watch::channel(None);
    let (resign, mut resigned) = mpsc::unbounded_channel::<Duration>();
    let timeout = check_timeout(check);
    let limits = session_limits(check);
    tokio::spawn(async move {
        // asked once per connection until it answers; after a resignation, asked again
        let mut able = !must_be_able;
        'participate: loop {
            if stop.is_cancelled() {
                break;
            }
            let mut pause = check;
            match db::connect(&url).await {
                Ok((client, mut driver)) => {
                    let set_up = async {
                        api::limit_session(&client, &limits).await?;
                        api::backend_pid(&client).await
                    };
                    match tokio::time::timeout(timeout, set_up).await {
                        Ok(Ok(pid)) => {
                            pid_tx.send_replace(Some(pid));
                        }
                        Ok(Err(e)) => tracing::warn!(error = %e, "leader connection could not be set up"),
                        Err(_) => tracing::warn!(?timeout, "leader connection did not answer its set-up in time"),
                    }
                    while pid_tx.borrow().is_some() {
                        if able && !*leader_tx.borrow() {
                            // wait on the server for the lock rather than ask again every check
                            tokio::select! {
                                got = api::wait_lead(&client, key) => match got {
                                    // the check below records the leader at once
                                    Ok(true) => {
                                        leader_tx.send_replace(true);
                                    }
                                    Ok(false) => continue,
                                    Err(e) => {
                                        tracing::warn!(error = %e, "leader connection failed while waiting for the lead");
                                        break;
                                    }
                                },
                                _ = &mut driver => {
                                    tracing::warn!("leader connection closed");
                                    break;
                                }
                                asked = resigned.recv() => {
                                    if let Some(p) = asked {
                                        pause = p;
                                        able = !must_be_able;
                                    }
                                    break;
                                }
                                _ = stop.cancelled() => break,
                            }
                        }
                        let leading = *leader_tx.borrow();
                        let checked = async {
                            if !able {
                                let (ok, denied) = api::can_maintain(&client).await?;
                                if !ok {
                                    return Ok::<_, crate::error::Error>((Checked::Cannot, denied));
                                }
                                able = true;
                            }
                            let held = if leading {
                                if identity.is_none() {
                                    api::ping(&client).await?;
                                }
                                true
                            } else {
                                api::try_lead(&client, key).await?
                            };
                            // the leader's row, written at each check, is its ping too
                            if let (true, Some(me)) = (held, &identity) {
                                // only shown, never relied on: a failure costs the row, not the lead
                                if let Err(e) = api::note_leader(&client, &me.id, &me.host, None).await {
                                    if db_closed(&e) {
                                        return Err(e);
                                    }
                                    tracing::warn!(error = %e, "could not record the maintenance leader");
                                }
                            }
                            Ok((Checked::Leading(held), Vec::new()))
                        };
                        match tokio::time::timeout(timeout, checked).await {
                            Ok(Ok((Checked::Leading(held), _))) => {
                                leader_tx.send_if_modified(|l| std::mem::replace(l, held) != held);
                            }
                            Ok(Ok((Checked::Cannot, denied))) => {
                                let role = api::current_role(&client).await.unwrap_or_default();
                                tracing::info!(role, may_not_run = ?denied,
                                    "maintenance: this process takes no part in maintenance: its role may not run \
                                     every maintenance service (run `asyncflow maintain` as the schema's owner)");
                                break 'participate;
                            }
                            Ok(Err(e)) => {
                                tracing::warn!(error = %e, "leader connection failed; stepping down");
                                break;
                            }
                            Err(_) => {
                                tracing::warn!(?timeout, "leader check did not answer in time; stepping down");
                                break;
                            }
                        }
                        tokio::select! {
                            _ = tokio::time::sleep(check) => {}
                            _ = &mut driver => {
                                tracing::warn!("leader connection closed; stepping down");
                                break;
                            }
                            asked = resigned.recv() => {
                                if let Some(p) = asked {
                                    pause = p;
                                    // asked again before it leads again: the grants may be gone
                                    able = !must_be_able;
                                }
                                break;
                            }
                            _ = stop.cancelled() => break,
                        }
                    }
                    let was_leading = leader_tx.send_if_modified(|l| std::mem::replace(l, false));
                    if let (true, Some(me), false) = (was_leading, &identity, client.is_closed()) {
                        let _ = tokio::time::timeout(timeout, api::leave_leadership(&client, &me.id)).await;
                    }
                    pid_tx.send_replace(None);
                    // closing the connection frees the lock at once on a reachable server
                    drop(client);
                    driver.abort();
                }
                Err(e) => tracing::warn!(error = %e, "leader connection could not be made"),
            }
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = stop.cancelled() => break,
            }
        }
        leader_tx.send_replace(false);
    });
    LeaderHandle { is_leader, backend_pid, resign }
}

/// Whether `e` means the connection is gone (so the check as a whole failed).
fn db_closed(e: &crate::error::Error) -> bool {
    matches!(e, crate::error::Error::Database(d) if db::connection_failed(d))
}
