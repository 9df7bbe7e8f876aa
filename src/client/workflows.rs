//! [`Client`]'s calls on workflows: pipelines (`/v1/pipelines`) and runs (`/v1/runs`). Pipeline
//! versions and runs are the JSON documents the SQL API builds.

use reqwest::Method;
use serde_json::Value;

use super::{Client, NONE};
use crate::db::api;
use crate::error::{echo, Error, Result};
use crate::protocol::pipelines::PipelineQuery;
use crate::protocol::runs::{CompleteNodeRequest, RunCancelled, RunNodeRetried, RunPage, RunQuery, RunStarted};
use crate::run::StartRun;

/// Default page size of a run list.
const RUN_PAGE_DEFAULT: i32 = 100;

impl Client {
    /// Every pipeline's versions, newest first, without definitions.
    pub async fn list_pipelines(&self) -> Result<Vec<Value>> {
        match self {
            Client::Database(pool) => api::list_pipelines(&pool.get().await?).await,
            Client::Server(r) => r.call(Method::GET, &r.url(&["v1", "pipelines"]), NONE, NONE).await,
        }
    }

    /// One version of a pipeline (`version`, or the active one, else the latest) with its
    /// definition and plan; an unknown one is an error.
    pub async fn get_pipeline(&self, name: &str, version: Option<i32>) -> Result<Value> {
        match self {
            Client::Database(pool) => api::get_pipeline(&pool.get().await?, name, version)
                .await?
                .ok_or_else(|| Error::UnknownPipeline(format!("unknown pipeline {}", echo(name)))),
            Client::Server(r) => {
                let query = PipelineQuery { version, status: None };
                r.call(Method::GET, &r.url(&["v1", "pipelines", name]), Some(&query), NONE).await
            }
        }
    }

    /// Validates `definition` and stores it as the pipeline's next version, `active` or
    /// `draft` (the same definition as the latest stores nothing: `created` false); the version.
    pub async fn put_pipeline(&self, name: &str, definition: &Value, status: &str) -> Result<Value> {
        match self {
            Client::Database(pool) => api::put_pipeline(&pool.get().await?, name, definition, status).await,
            Client::Server(r) => {
                let query = PipelineQuery { version: None, status: Some(status.to_string()) };
                r.call(Method::PUT, &r.url(&["v1", "pipelines", name]), Some(&query), Some(definition)).await
            }
        }
    }

    /// Makes a version the active one (the previous active one is retired); the version.
    pub async fn activate_pipeline(&self, name: &str, version: i32) -> Result<Value> {
        self.set_pipeline_status(name, version, "active").await
    }

    /// Retires a version: it starts no new runs; the version.
    pub async fn retire_pipeline(&self, name: &str, version: i32) -> Result<Value> {
        self.set_pipeline_status(name, version, "retired").await
    }

    async fn set_pipeline_status(&self, name: &str, version: i32, status: &str) -> Result<Value> {
        match self {
            Client::Database(pool) => api::set_pipeline_status(&pool.get().await?, name, version, status).await,
            Client::Server(r) => {
                let verb = if status == "active" { "activate" } else { "retire" };
                let url = r.url(&["v1", "pipelines", name, "versions", &version.to_string(), verb]);
                r.call(Method::POST, &url, NONE, NONE).await
            }
        }
    }

    /// Starts a run of a pipeline's active version (or of `start.version`).
    pub async fn start_run(&self, start: &StartRun) -> Result<RunStarted> {
        match self {
            Client::Database(pool) => {
                Ok(RunStarted { run_id: api::start_run(&pool.get().await?, start, None).await?, retry_of: None })
            }
            Client::Server(r) => r.call(Method::POST, &r.url(&["v1", "runs"]), NONE, Some(start)).await,
        }
    }

    /// A run with its events, segments, traces and callbacks; an unknown one is an error.
    pub async fn get_run(&self, run_id: &str) -> Result<Value> {
        match self {
            Client::Database(pool) => api::get_run(&pool.get().await?, run_id)
                .await?
                .ok_or_else(|| Error::UnknownRun(format!("unknown run {}", echo(run_id)))),
            Client::Server(r) => r.call(Method::GET, &r.url(&["v1", "runs", run_id]), NONE, NONE).await,
        }
    }

    /// One page of runs, newest first (100 unless `query` says); `next` names the next page. A
    /// `before` that names no run is a wrong argument.
    pub async fn list_runs(&self, query: &RunQuery) -> Result<RunPage> {
        match self {
            Client::Database(pool) => {
                let limit = query.limit.unwrap_or(RUN_PAGE_DEFAULT);
                let c = pool.get().await?;
                let runs = api::list_runs(
                    &c,
                    query.pipeline.as_deref(),
                    query.status.as_deref(),
                    limit,
                    query.before.as_deref(),
                )
                .await
                .map_err(|e| match e {
                    // the SQL API's AF012 for a cursor that names no run: an argument of
                    // this call is wrong (as a bad status or limit is), not the run asked for
                    Error::UnknownRun(message) => Error::InvalidArgument(format!("before: {message}")),
                    e => e,
                })?;
                Ok(RunPage::new(runs, limit))
            }
            Client::Server(r) => r.call(Method::GET, &r.url(&["v1", "runs"]), Some(query), NONE).await,
        }
    }

    /// Cancels a scheduled or running run; `cancelled` is false when it had already ended.
    pub async fn cancel_run(&self, run_id: &str) -> Result<RunCancelled> {
        match self {
            Client::Database(pool) => {
                let cancelled = api::cancel_run(&pool.get().await?, run_id).await?;
                Ok(RunCancelled { run_id: run_id.to_string(), cancelled })
            }
            Client::Server(r) => r.call(Method::POST, &r.url(&["v1", "runs", run_id, "cancel"]), NONE, NONE).await,
        }
    }

    /// Runs a failed, timed-out or cancelled run again as a new run with the same notify key.
    pub async fn retry_run(&self, run_id: &str) -> Result<RunStarted> {
        match self {
            Client::Database(pool) => {
                let new = api::retry_run(&pool.get().await?, run_id).await?;
                Ok(RunStarted { run_id: new, retry_of: Some(run_id.to_string()) })
            }
            Client::Server(r) => r.call(Method::POST, &r.url(&["v1", "runs", run_id, "retry"]), NONE, NONE).await,
        }
    }

    /// Resumes a failed run from a failed node.
    pub async fn retry_node(&self, run_id: &str, node: &str) -> Result<RunNodeRetried> {
        match self {
            Client::Database(pool) => {
                let retried = api::retry_node(&pool.get().await?, run_id, node).await?;
                Ok(RunNodeRetried { run_id: run_id.to_string(), node: node.to_string(), retried })
            }
            Client::Server(r) => {
                r.call(Method::POST, &r.url(&["v1", "runs", run_id, "nodes", node, "retry"]), NONE, NONE).await
            }
        }
    }

    /// Completes (or fails, with `error`) an asynchronous node waiting for an external result;
    /// the run afterwards.
    pub async fn complete_node(&self, run_id: &str, node: &str, completion: &CompleteNodeRequest) -> Result<Value> {
        match self {
            Client::Database(pool) => {
                let c = pool.get().await?;
                api::complete_node(&c, run_id, node, completion.result.as_ref(), completion.error.as_deref()).await
            }
            Client::Server(r) => {
                let url = r.url(&["v1", "runs", run_id, "nodes", node, "complete"]);
                r.call(Method::POST, &url, NONE, Some(completion)).await
            }
        }
    }
}
