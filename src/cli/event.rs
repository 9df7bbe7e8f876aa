//! `asyncflow event send KEY --payload JSON`: sends an event (`asyncflow.send_event`), on the
//! database directly or on an `asyncflow serve` with `--server URL` (`POST /v1/events`). Output
//! is JSON on stdout: `{"key", "woken"}`.

use clap::Subcommand;
use serde_json::Value;

use super::args::json_arg;
use super::print;
use crate::client::Client;
use crate::error::Result;

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

/// Runs an `event` command and prints its answer.
pub async fn event(client: &Client, command: EventCommand) -> Result<()> {
    match command {
        EventCommand::Send { key, payload } => {
            let payload: Value = json_arg("--payload", &payload)?;
            print(&client.send_event(&key, &payload).await?)
        }
    }
}
