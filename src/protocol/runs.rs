//! The runs resource (`/v1/runs`): what a client sends and what it gets back besides the run
//! documents themselves, which the SQL API builds (`asyncflow.get_run`, `list_runs`,
//! `complete_node`) and which travel as they are. What starts a run is [`crate::run::StartRun`].

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A run started (or, for a retry, the new run).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct RunStarted {
    /// The run's id.
    pub run_id: String,
    /// The run it retries (retries only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_of: Option<String>,
}

/// One page of runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct RunPage {
    /// The runs, newest first (run documents without events).
    #[cfg_attr(feature = "server", schema(value_type = Vec<Object>))]
    pub runs: Vec<Value>,
    /// `before` for the next page; null on the last page.
    pub next: Option<String>,
}

impl RunPage {
    /// The page of `runs` a list asked with `limit` found: a full page has a next one, of the
    /// runs before its last.
    pub fn new(runs: Vec<Value>, limit: i32) -> Self {
        let next = if runs.len() as i32 == limit {
            runs.last().and_then(|r| r["run_id"].as_str()).map(str::to_string)
        } else {
            None
        };
        RunPage { runs, next }
    }
}

/// The outcome of a run cancel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct RunCancelled {
    /// Run id.
    pub run_id: String,
    /// False when the run had already ended.
    pub cancelled: bool,
}

/// The outcome of a node retry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct RunNodeRetried {
    /// Run id.
    pub run_id: String,
    /// Node name.
    pub node: String,
    /// True: the run is running again from this node.
    pub retried: bool,
}

/// The query string of a run list.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::IntoParams))]
#[cfg_attr(feature = "server", into_params(parameter_in = Query))]
#[serde(deny_unknown_fields)]
pub struct RunQuery {
    /// Only this pipeline.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pipeline: Option<String>,
    /// Only this status: scheduled, running, succeeded, failed, timed_out, cancelled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// Runs older than this run (`next` of the previous page).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub before: Option<String>,
    /// Page size, 1..=1000 (default 100).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<i32>,
}

/// The external completion of an asynchronous node.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CompleteNodeRequest {
    /// The node's result, any JSON value, `null` included (left out: its function's result).
    #[serde(default, deserialize_with = "crate::task::present", skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// Fail the node, and the run, with this error instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}
