//! The wake-up channel: one dedicated (unpooled) connection LISTENs on `asyncflow` and fans each
//! notification out to every subscriber. The payload is a task type name; `None` means "look at
//! every type" and is sent after each (re)connect, because notifications sent while the
//! connection was down are lost. A lost connection is retried with jittered back-off.

use std::time::Duration;

use futures_util::StreamExt;
use rand::Rng;
use tokio::sync::broadcast;
use tokio_postgres::{AsyncMessage, NoTls};
use tokio_util::sync::CancellationToken;

use crate::db::api;

/// A wake-up: the type that has new ready work, or None for all types.
pub type Wake = Option<String>;

/// Starts the listener; it runs until `cancel` fires.
pub fn spawn(url: String, cancel: CancellationToken) -> broadcast::Sender<Wake> {
    let (tx, _) = broadcast::channel(1024);
    let sender = tx.clone();
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
            let cap_ms = (100u64 << failures.min(8)).min(10_000);
            let wait = Duration::from_millis(rand::thread_rng().gen_range(cap_ms / 2..=cap_ms));
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(wait) => {}
            }
        }
    });
    tx
}

async fn listen_once(url: &str, tx: &broadcast::Sender<Wake>, failures: &mut u32) -> Result<(), String> {
    let (client, mut connection) = tokio_postgres::connect(url, NoTls).await.map_err(|e| e.to_string())?;
    let forward = tx.clone();
    let driver = async move {
        let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(message) = messages.next().await {
            match message {
                Ok(AsyncMessage::Notification(n)) => {
                    let _ = forward.send(Some(n.payload().to_string()));
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
        let _ = tx.send(None);
        std::future::pending::<Result<(), String>>().await
    };
    tokio::select! {
        r = driver => r,
        r = subscribe => r,
    }
}
