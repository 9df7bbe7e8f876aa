//! `asyncflow run ...`: start, show, list, cancel or retry workflow runs and their nodes, on the
//! database directly or on an `asyncflow serve` with `--server URL` (same operations, same JSON).
//! Output is JSON on stdout: `start --wait` prints a summary of the ended run (id, status, node
//! counts by status, duration, the failed nodes' errors), `--full` the run whole as `get` does.

use std::time::{Duration, Instant};

use clap::Subcommand;
use serde_json::{json, Value};

use super::args::json_arg;
use super::print;
use crate::client::Client;
use crate::error::{Error, Result};
use crate::protocol::runs::{CompleteNodeRequest, RunQuery};
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
        /// Wait until the run ends and print a summary of it: status, node counts, duration,
        /// the failed nodes' errors (exit status 1 unless it succeeded).
        #[arg(long)]
        wait: bool,
        /// With --wait: print the ended run whole (events, segments, traces, callbacks).
        #[arg(long, requires = "wait")]
        full: bool,
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

/// Runs a `run` command and prints its answer.
pub async fn run(client: &Client, command: RunCommand) -> Result<()> {
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
            full,
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
            let started = client.start_run(&start).await?;
            if !wait {
                return print(&started);
            }
            let run = wait_until_ended(client, &started.run_id, timeout).await?;
            let status = run["status"].as_str().unwrap_or_default();
            print(&if full { run.clone() } else { run_summary(&run) })?;
            if status != "succeeded" {
                // the summary says which nodes failed; the exit status says it failed
                return Err(Error::WrongState(format!("run {} ended {status}: {}", started.run_id, run["error"])));
            }
            Ok(())
        }
        RunCommand::Get { id } => print(&client.get_run(&id).await?),
        RunCommand::List { pipeline, status, before, limit } => {
            print(&client.list_runs(&RunQuery { pipeline, status, before, limit: Some(limit) }).await?)
        }
        RunCommand::Cancel { id } => print(&client.cancel_run(&id).await?),
        RunCommand::Retry { id } => print(&client.retry_run(&id).await?),
        RunCommand::RetryNode { id, node } => print(&client.retry_node(&id, &node).await?),
        RunCommand::CompleteNode { id, node, result, error } => {
            // `result` only when given: null is a result, left out is the function's
            let result: Option<Value> = result.map(|r| json_arg("--result", &r)).transpose()?;
            print(&client.complete_node(&id, &node, &CompleteNodeRequest { result, error }).await?)
        }
    }
}

/// The run once it has ended (neither scheduled nor running), read every 200 ms; an error after
/// `timeout`.
async fn wait_until_ended(client: &Client, run_id: &str, timeout: Duration) -> Result<Value> {
    // a timeout past what the clock can hold waits without end
    let deadline = Instant::now().checked_add(timeout);
    loop {
        let run = client.get_run(run_id).await?;
        let status = run["status"].as_str().unwrap_or_default();
        if !matches!(status, "scheduled" | "running") {
            return Ok(run);
        }
        if deadline.is_some_and(|d| Instant::now() > d) {
            return Err(Error::WrongState(format!("run {run_id} is still {status} after {timeout:?}")));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// What `run start --wait` prints of an ended run: its id, pipeline, version, status and error,
/// how many of its nodes ended in each status, how long it ran (`duration_s`, from its start, or
/// its creation when it never started, to its end), and each failed node's error (and each
/// failed segment's, with its number).
fn run_summary(run: &Value) -> Value {
    let events = run["events"].as_array().map(Vec::as_slice).unwrap_or_default();
    let mut nodes = serde_json::Map::new();
    let mut failed = Vec::new();
    for event in events {
        let status = event["status"].as_str().unwrap_or("unknown");
        let count = nodes.entry(status.to_string()).or_insert(json!(0));
        *count = json!(count.as_u64().unwrap_or(0) + 1);
        if let Some(error) = event["error"].as_str() {
            failed.push(json!({"node": event["node"], "error": error}));
        }
        for segment in event["segments"].as_array().map(Vec::as_slice).unwrap_or_default() {
            if let Some(error) = segment["error"].as_str() {
                failed.push(json!({"node": event["node"], "segment": segment["n"], "error": error}));
            }
        }
    }
    let time = |key: &str| run[key].as_str().and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok());
    let duration = match (time("started_at").or_else(|| time("created_at")), time("finished_at")) {
        (Some(from), Some(to)) => json!((to - from).num_milliseconds() as f64 / 1000.0),
        _ => Value::Null,
    };
    json!({
        "run_id": run["run_id"],
        "pipeline": run["pipeline"],
        "version": run["version"],
        "status": run["status"],
        "error": run["error"],
        "nodes": nodes,
        "duration_s": duration,
        "failed_nodes": failed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ended_run_is_summed_up_with_its_node_counts_duration_and_failed_nodes() {
        let run = json!({"run_id": "r1", "pipeline": "p", "version": 2, "status": "failed",
            "error": "node join failed", "input": {"big": "x"}, "created_at": "2030-01-01T00:00:00Z",
            "started_at": "2030-01-01T00:00:01Z", "finished_at": "2030-01-01T00:00:13.5Z", "traces": [1, 2, 3],
            "events": [
                {"node": "start", "status": "succeeded", "error": null},
                {"node": "seg", "status": "failed", "error": "segment 1 failed: boom", "segments": [
                    {"n": 0, "status": "succeeded", "error": null},
                    {"n": 1, "status": "failed", "error": "boom"}]},
                {"node": "other", "status": "cancelled", "error": null},
                {"node": "join", "status": "succeeded", "error": null}]});
        assert_eq!(
            run_summary(&run),
            json!({"run_id": "r1", "pipeline": "p", "version": 2, "status": "failed", "error": "node join failed",
                "nodes": {"succeeded": 2, "failed": 1, "cancelled": 1}, "duration_s": 12.5,
                "failed_nodes": [{"node": "seg", "error": "segment 1 failed: boom"},
                    {"node": "seg", "segment": 1, "error": "boom"}]})
        );
        // a run that never started counts from its creation; no events, no counts
        let scheduled = json!({"run_id": "r2", "status": "cancelled", "created_at": "2030-01-01T00:00:00Z",
            "started_at": null, "finished_at": "2030-01-01T00:00:02Z", "events": []});
        let summary = run_summary(&scheduled);
        assert_eq!((&summary["duration_s"], &summary["nodes"]), (&json!(2.0), &json!({})));
    }
}
