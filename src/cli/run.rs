//! `asyncflow run ...`: start, show, list, cancel or retry workflow runs and their nodes, on the
//! database directly or on an `asyncflow serve` with `--server URL` (same operations, same JSON).
//! Output is JSON on stdout.

use std::time::{Duration, Instant};

use clap::Subcommand;
use reqwest::Method;
use serde_json::{json, Value};

use super::remote::{call, encode, json_arg, Target};
use crate::db::{api, DbPool};
use crate::error::{Error, Result};
use crate::run::StartRun;

/// `run` subcommands.
#[derive(Debug, Subcommand)]
pub enum RunCommand {
    /// Start a run; prints {"run_id"}.
    Start {
        /// Pipeline name.
        pipeline: String,
        /// Input, a JSON object.
        #[arg(long, default_value = "{}")]
        input: String,
        /// Where the outcome is POSTed.
        #[arg(long)]
        notify_url: Option<String>,
        /// The caller's key for this run, sent with the outcome.
        #[arg(long)]
        notify_key: Option<String>,
        /// Not before this time: RFC 3339 (2030-01-01T09:00:00Z), or a delay from now (90s, 10m).
        #[arg(long, value_parser = super::args::run_at)]
        run_at: Option<chrono::DateTime<chrono::Utc>>,
        /// A given version instead of the active one.
        #[arg(long)]
        version: Option<i32>,
        /// Start at most one run per key: again with the same key answers the first run.
        #[arg(long)]
        idempotency_key: Option<String>,
        /// The W3C trace context the run joins (00-<trace id>-<parent id>-<flags>); its node
        /// tasks carry it.
        #[arg(long)]
        traceparent: Option<String>,
        /// Wait until the run ends and print it (exit status 1 unless it succeeded).
        #[arg(long)]
        wait: bool,
        /// Longest wait with --wait.
        #[arg(long, value_parser = humantime::parse_duration, default_value = "10m")]
        timeout: Duration,
    },
    /// Show a run: events, segments, traces, callbacks.
    Get {
        /// Run id.
        id: String,
    },
    /// List runs, newest first (pass the printed "next" as --before for the next page).
    List {
        /// Only this pipeline.
        #[arg(long)]
        pipeline: Option<String>,
        /// Only this status (scheduled, running, succeeded, failed, timed_out, cancelled).
        #[arg(long)]
        status: Option<String>,
        /// Runs older than this run.
        #[arg(long)]
        before: Option<String>,
        /// Page size (1..1000).
        #[arg(long, default_value_t = 100)]
        limit: i32,
    },
    /// Cancel a scheduled or running run.
    Cancel {
        /// Run id.
        id: String,
    },
    /// Run a failed, timed-out or cancelled run again as a new run (same notify key).
    Retry {
        /// Run id.
        id: String,
    },
    /// Resume a failed run from a failed node.
    RetryNode {
        /// Run id.
        id: String,
        /// Node name.
        node: String,
    },
    /// Complete an asynchronous node waiting for an external result.
    CompleteNode {
        /// Run id.
        id: String,
        /// Node name.
        node: String,
        /// Its result, a JSON value (default: its function's result).
        #[arg(long)]
        result: Option<String>,
        /// Fail the node (and the run) with this error instead.
        #[arg(long)]
        error: Option<String>,
    },
}

/// Runs a `run` command; the JSON to print.
pub async fn run(pool: Option<&DbPool>, target: &Target, command: RunCommand) -> Result<Value> {
    match command {
        RunCommand::Start {
            pipeline,
            input,
            notify_url,
            notify_key,
            run_at,
            version,
            idempotency_key,
            traceparent,
            wait,
            timeout,
        } => {
            let start = StartRun {
                pipeline,
                input: Some(json_arg("--input", &input)?),
                notify_url,
                notify_key,
                run_at,
                version,
                idempotency_key,
                traceparent,
            };
            let run_id = match pool {
                Some(pool) => api::start_run(&pool.get().await?, &start, None).await?,
                None => {
                    let body = serde_json::to_value(&start).map_err(|e| Error::InvalidArgument(e.to_string()))?;
                    let answer = call(target, Method::POST, "/v1/runs", Some(body)).await?;
                    answer["run_id"]
                        .as_str()
                        .map(str::to_string)
                        .ok_or_else(|| Error::Unexpected(format!("the server answered no run_id: {answer}")))?
                }
            };
            if !wait {
                return Ok(json!({"run_id": run_id}));
            }
            // a timeout past what the clock can hold waits without end
            let deadline = Instant::now().checked_add(timeout);
            loop {
                let run = get_run(pool, target, &run_id).await?;
                let status = run["status"].as_str().unwrap_or_default();
                if !matches!(status, "scheduled" | "running") {
                    if status != "succeeded" {
                        return Err(Error::WrongState(format!("run {run_id} ended {status}: {}", run["error"])));
                    }
                    return Ok(run);
                }
                if deadline.is_some_and(|d| Instant::now() > d) {
                    return Err(Error::WrongState(format!("run {run_id} is still {status} after {timeout:?}")));
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        RunCommand::Get { id } => get_run(pool, target, &id).await,
        RunCommand::List { pipeline, status, before, limit } => match pool {
            Some(pool) => {
                let runs = api::list_runs(
                    &pool.get().await?,
                    pipeline.as_deref(),
                    status.as_deref(),
                    limit,
                    before.as_deref(),
                )
                .await?;
                let next = if runs.len() as i32 == limit { runs.last().map(|r| r["run_id"].clone()) } else { None };
                Ok(json!({"runs": runs, "next": next}))
            }
            None => {
                let mut query = vec![format!("limit={limit}")];
                for (k, v) in [("pipeline", &pipeline), ("status", &status), ("before", &before)] {
                    if let Some(v) = v {
                        query.push(format!("{k}={}", encode(v)));
                    }
                }
                call(target, Method::GET, &format!("/v1/runs?{}", query.join("&")), None).await
            }
        },
        RunCommand::Cancel { id } => match pool {
            Some(pool) => Ok(json!({"run_id": id, "cancelled": api::cancel_run(&pool.get().await?, &id).await?})),
            None => call(target, Method::POST, &format!("/v1/runs/{}/cancel", encode(&id)), None).await,
        },
        RunCommand::Retry { id } => match pool {
            Some(pool) => Ok(json!({"run_id": api::retry_run(&pool.get().await?, &id).await?, "retry_of": id})),
            None => call(target, Method::POST, &format!("/v1/runs/{}/retry", encode(&id)), None).await,
        },
        RunCommand::RetryNode { id, node } => match pool {
            Some(pool) => Ok(
                json!({"run_id": id, "node": node, "retried": api::retry_node(&pool.get().await?, &id, &node).await?}),
            ),
            None => {
                call(target, Method::POST, &format!("/v1/runs/{}/nodes/{}/retry", encode(&id), encode(&node)), None)
                    .await
            }
        },
        RunCommand::CompleteNode { id, node, result, error } => {
            let result: Option<Value> = result.map(|r| json_arg("--result", &r)).transpose()?;
            match pool {
                Some(pool) => {
                    api::complete_node(&pool.get().await?, &id, &node, result.as_ref(), error.as_deref()).await
                }
                None => {
                    let path = format!("/v1/runs/{}/nodes/{}/complete", encode(&id), encode(&node));
                    // `result` only when given: null is a result, left out is the function's
                    let mut body = json!({"error": error});
                    if let Some(r) = result {
                        body["result"] = r;
                    }
                    call(target, Method::POST, &path, Some(body)).await
                }
            }
        }
    }
}

async fn get_run(pool: Option<&DbPool>, target: &Target, id: &str) -> Result<Value> {
    match pool {
        Some(pool) => api::get_run(&pool.get().await?, id)
            .await?
            .ok_or_else(|| Error::UnknownRun(format!("unknown run {}", crate::error::echo(id)))),
        None => call(target, Method::GET, &format!("/v1/runs/{}", encode(id)), None).await,
    }
}
