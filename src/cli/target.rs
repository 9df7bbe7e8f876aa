//! Where the admin commands go ([`Target`]): the database, or with `--server URL` an
//! `asyncflow serve`. Either way a command is one [`crate::client::Client`] call, which
//! `--server` only points at the server.

use clap::Args;

/// Where admin commands go.
#[derive(Debug, Clone, Args)]
pub struct Target {
    /// Talk to an asyncflow server (its HTTP API) instead of the database.
    #[arg(long, env = "ASYNCFLOW_SERVER", global = true)]
    pub server: Option<String>,
    /// Bearer token for --server.
    #[arg(long, env = "ASYNCFLOW_TOKEN", hide_env_values = true, global = true)]
    pub token: Option<String>,
}
