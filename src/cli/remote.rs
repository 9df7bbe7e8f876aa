//! Admin commands sent to an `asyncflow serve` (`--server URL`) instead of the database: where
//! they go ([`Target`]), the one HTTP call they make (`call`, the server's error codes mapped
//! back to the crate's errors), and the argument helpers the commands share.

use clap::Args;
use serde_json::Value;

use crate::error::{Error, Result};

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

/// A JSON command-line argument, read into `T`; `what` names it in the error.
pub(super) fn json_arg<T: serde::de::DeserializeOwned>(what: &str, text: &str) -> Result<T> {
    serde_json::from_str(text).map_err(|e| Error::InvalidArgument(format!("{what}: {e}")))
}

/// A server's answer: the body on 2xx, its message as an error otherwise.
pub(super) async fn call(target: &Target, method: reqwest::Method, path: &str, body: Option<Value>) -> Result<Value> {
    let base = target.server.as_deref().unwrap_or_default().trim_end_matches('/');
    let what = format!("{method} {base}{path}");
    let mut request = reqwest::Client::new().request(method, format!("{base}{path}"));
    if let Some(token) = &target.token {
        request = request.bearer_auth(token);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.map_err(|e| {
        use crate::error::{Transport, TransportError};
        let kind = if e.is_connect() { Transport::NotSent } else { Transport::NoAnswer };
        TransportError::new(kind, what, crate::error::with_causes(&e))
    })?;
    let status = response.status();
    let value: Value = response.json().await.unwrap_or(Value::Null);
    if status.is_success() {
        return Ok(value);
    }
    let message = value["message"].as_str().unwrap_or("no message").to_string();
    Err(match status.as_u16() {
        404 if value["code"] == "unknown_task_type" => Error::UnknownTaskType(message),
        404 if value["code"] == "unknown_run" => Error::UnknownRun(message),
        404 if value["code"] == "unknown_pipeline" => Error::UnknownPipeline(message),
        404 if value["code"] == "unknown_schedule" => Error::UnknownSchedule(message),
        400 if value["code"] == "invalid_pipeline" => Error::InvalidPipeline(message),
        409 if value["code"] == "wrong_state" => Error::WrongState(message),
        404 => Error::UnknownTask(message),
        400 | 413 | 409 | 401 => Error::InvalidArgument(format!("HTTP {status}: {message}")),
        _ => Error::Config(format!("HTTP {status}: {message}")),
    })
}
