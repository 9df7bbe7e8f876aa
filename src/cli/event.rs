//! `asyncflow event send KEY --payload JSON`: sends an event (`asyncflow.send_event`), on the
//! database directly or on an `asyncflow serve` with `--server URL` (`POST /v1/events`). Output
//! is JSON on stdout: `{"key", "woken"}`.

use clap::Subcommand;
use serde_json::{json, Value};

use super::remote::{call, json_arg, Target};
use crate::db::api;
use crate::db::DbPool;
use crate::error::Result;
use crate::event::{EventSent, SendEvent};

/// `event` subcommands.
#[derive(Debug, Subcommand)]
pub enum EventCommand {
    /// Send an event: every task waiting for its key goes on to the stage it named.
    Send {
        /// The event key: 1 to 200 of A-Za-z0-9_.:/@#=+- (e.g. order:42/paid).
        key: String,
        /// The payload, any JSON (default {}), at most 65,536 bytes.
        #[arg(long, default_value = "{}")]
        payload: String,
    },
}

/// Runs an `event` command; the JSON to print.
pub async fn event(pool: Option<&DbPool>, target: &Target, command: EventCommand) -> Result<Value> {
    match command {
        EventCommand::Send { key, payload } => {
            let payload: Value = json_arg("--payload", &payload)?;
            match pool {
                Some(p) => {
                    let woken = api::send_event(&p.get().await?, &key, &payload, None).await?;
                    Ok(json!(EventSent { key, woken }))
                }
                None => {
                    let body = SendEvent { key, payload: Some(payload) };
                    call(target, reqwest::Method::POST, "/v1/events", Some(json!(body))).await
                }
            }
        }
    }
}
