//! The notification channels: one dedicated (unpooled) connection LISTENs and fans each
//! notification out to every subscriber.
//!
//! - `asyncflow`: wake-ups. The payload is a task type name; `None` means "look at every type"
//!   and is sent after each (re)connect, because notifications sent while the connection was
//!   down are lost.
//! - `asyncflow_cancel`: the id of a task taken away from its worker while it ran (cancelled, or
//!   its workflow run or node ended without it), so the worker stops the call at once. One lost
//!   while the connection was down is made up by the next heartbeat, which is refused.
//! - `asyncflow_ended`: the id of a task that ended while somebody waited for it
//!   (`asyncflow.watch_task`), for `GET /v1/tasks/{id}?wait=`. One lost while the connection was
//!   down is made up by the `None` wake-up after the reconnect, on which waiters read again.
//!
//! A lost connection is retried with jittered back-off of at most a second, so that producers
//! waiting out a claim back-off hear within about a second that the database is back (the
//! `None` wake-up after each reconnect).

use std::time::Duration;

use futures_util::StreamExt;
use rand::Rng;
use tokio::sync::broadcast;
use tokio_postgres::{AsyncMessage, NoTls};
use tokio_util::sync::CancellationToken;

use crate::db::api;
use crate::ids::TaskId;

/// A running call to stop: the task taken away from its worker, and the claim that worker holds
/// it by (a later claim of the same task is another call). Read once from the payload of
/// `asyncflow_cancel` (`<task id> <claim_seq>`), or from a server's cancel stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cancel {
    /// The task.
    pub task_id: TaskId,
    /// The claim whose call stops.
    pub claim_seq: i64,
}

impl Cancel {
    /// Reads the payload of a notification on `asyncflow_cancel`; None for one that is not
    /// `<task id> <claim_seq>`.
    pub fn parse(payload: &str) -> Option<Cancel> {
        let (id, seq) = payload.split_once(' ')?;
        Some(Cancel { task_id: TaskId::parse(id).ok()?, claim_seq: seq.parse().ok()? })
    }
}

/// A wake-up: the type that has new ready work, or None for all types.
pub type Wake = Option<String>;

/// The channel of wake-ups (see the module docs).
pub const WAKE_CHANNEL: &str = "asyncflow";
/// The channel of cancelled calls (see the module docs).
pub const CANCEL_CHANNEL: &str = "asyncflow_cancel";
/// The channel of waited tasks that ended (see the module docs).
pub const ENDED_CHANNEL: &str = "asyncflow_ended";

/// Longest pause between two attempts to connect again.
pub const RECONNECT_MAX: Duration = Duration::from_secs(1);

/// Time between two pings of an idle LISTEN connection: each costs the server a transaction, so
/// an idle fleet pings rarely (TCP keepalive finds a peer that is gone sooner).
const PING_INTERVAL: Duration = Duration::from_secs(60);
/// The time a ping may take.
const PING_TIMEOUT: Duration = Duration::from_secs(10);

/// What the listener fans out.
#[derive(Clone)]
pub struct Channels {
    /// Wake-ups: a type with new ready work, or None for all types.
    pub wakes: broadcast::Sender<Wake>,
    /// The running calls to stop.
    pub cancels: broadcast::Sender<Cancel>,
    /// Waited tasks that ended.
    pub ended: broadcast::Sender<TaskId>,
}

/// Starts the listener; it runs until `cancel` fires.
pub fn spawn(url: String, cancel: CancellationToken) -> Channels {
    let channels = Channels {
        wakes: broadcast::channel(1024).0,
        cancels: broadcast::channel(1024).0,
        ended: broadcast::channel(1024).0,
    };
    let sender = channels.clone();
    tokio::spawn(async move {
        let mut failures: u32 = 0;
        loop {
            let run = listen_once(&url, &sender, &mut failures);
            tokio::select! {
                _ = cancel.cancelled() => return,
                outcome = run => {
                    if let Err(e) = outcome {
                        tracing::warn!(error = %e, "LISTEN connection lost; reconnecting");
                    }
                }
            }
            failures = failures.saturating_add(1);
            // capped at RECONNECT_MAX: one connection attempt a second per process costs the
            // server little, and the reconnect is what wakes the producers (see the module docs)
            let cap_ms = (100u64 << failures.min(8)).min(RECONNECT_MAX.as_millis() as u64);
            let wait = Duration::from_millis(rand::thread_rng().gen_range(cap_ms / 2..=cap_ms));
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(wait) => {}
            }
        }
    });
    channels
}

async fn listen_once(url: &str, tx: &Channels, failures: &mut u32) -> Result<(), String> {
    let pg = crate::db::config(url).map_err(|e| e.to_string())?;
    let (client, mut connection) = crate::db::within_connect_timeout(&pg, pg.connect(NoTls))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
    let forward = tx.clone();
    let driver = async move {
        let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(message) = messages.next().await {
            match message {
                Ok(AsyncMessage::Notification(n)) if n.channel() == CANCEL_CHANNEL => {
                    if let Some(cancel) = Cancel::parse(n.payload()) {
                        let _ = forward.cancels.send(cancel);
                    }
                }
                Ok(AsyncMessage::Notification(n)) if n.channel() == ENDED_CHANNEL => {
                    if let Ok(task_id) = TaskId::parse(n.payload()) {
                        let _ = forward.ended.send(task_id);
                    }
                }
                Ok(AsyncMessage::Notification(n)) => {
                    let _ = forward.wakes.send(Some(n.payload().to_string()));
                }
                Ok(_) => {}
                Err(e) => return Err(e.to_string()),
            }
        }
        Err("connection closed".to_string())
    };
    let subscribe = async {
        api::listen(&client).await.map_err(|e| e.to_string())?;
        *failures = 0;
        // Anything sent while we were not listening is lost: everyone looks again.
        let _ = tx.wakes.send(None);
        // A network path that stops forwarding without closing the socket would leave this
        // connection silent (TCP keepalive answered on the way) and its subscribers deaf: a ping
        // that does not answer in time ends it, and the reconnect wakes everyone.
        loop {
            tokio::time::sleep(PING_INTERVAL).await;
            match tokio::time::timeout(PING_TIMEOUT, api::ping(&client)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(e.to_string()),
                Err(_) => return Err(format!("no answer to a ping within {PING_TIMEOUT:?}")),
            }
        }
    };
    tokio::select! {
        r = driver => r,
        r = subscribe => r,
    }
}

#[cfg(test)]
mod tests {
    use super::Cancel;

    #[test]
    fn a_cancel_is_a_task_id_and_a_claim_seq() {
        let c = Cancel::parse("video-1-42 7").expect("a cancel");
        assert_eq!((c.task_id.as_str(), c.claim_seq), ("video-1-42", 7));
        for bad in ["video-1-42", "video-1-42 x", "not an id 7", "", "video-1-42 7 8"] {
            assert_eq!(Cancel::parse(bad), None, "{bad:?}");
        }
    }
}
