//! `asyncflow task explain ID`: why a task is not running (`asyncflow.explain_task`), on the
//! database directly or on an `asyncflow serve` with `--server URL`
//! (`GET /v1/tasks/{id}/explain`). Output is JSON on stdout: `{"reason", ...detail}`.

use serde_json::{json, Value};

use super::remote::{call, encode, Target};
use crate::db::api;
use crate::db::DbPool;
use crate::error::{echo, Error, Result};

/// Runs `task explain ID`; the JSON to print.
pub async fn explain(pool: Option<&DbPool>, target: &Target, id: &str) -> Result<Value> {
    match pool {
        Some(p) => match api::explain_task(&p.get().await?, id, None).await? {
            Some(e) => Ok(json!(e)),
            None => Err(Error::UnknownTask(format!("unknown task {}", echo(id)))),
        },
        None => call(target, reqwest::Method::GET, &format!("/v1/tasks/{}/explain", encode(id)), None).await,
    }
}
