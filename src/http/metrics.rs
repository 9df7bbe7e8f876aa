//! `GET /metrics`: Prometheus metrics in the text exposition format 0.0.4, written by hand (no
//! client library). Like every route under `/v1`, it needs `Authorization: Bearer <token>` when
//! the server has tokens (Prometheus: `authorization: {credentials: ...}` in the scrape config).
//!
//! Two kinds of figures:
//!
//! ```text
//!   from the database, at scrape time        the same on every server: scrape one, or
//!   (servers keep no state)                  aggregate with max by (type, ...)
//!   from this process, since it started      per server: aggregate with sum by (...)
//! ```
//!
//! From the database (one series per registered type, label `type`):
//! - `asyncflow_database_up` (gauge): 1 when the database answered this scrape, else 0 (and the
//!   per-type families below have no samples).
//! - `asyncflow_tasks{type, status}` (gauge): stored tasks per status (pending, running,
//!   waiting, succeeded, failed, cancelled), from the counters every transition keeps. Finished
//!   tasks leave when retention drops their shard, so these fall then; they are gauges, not counters, for that
//!   reason (a counter that falls reads as a reset and `rate()` would invent a burst).
//! - `asyncflow_tasks_created_total{type}` (counter): ids handed out by the type's id sequence,
//!   which never goes back: tasks created, plus creations rolled back. 0 when the server's role
//!   may not read the sequence.
//! - `asyncflow_queue_ready{type}` (gauge): pending tasks due now (`asyncflow.queue_depth`).
//! - `asyncflow_queue_delayed{type}` (gauge): pending tasks due later.
//! - `asyncflow_queue_oldest_ready_age_seconds{type}` (gauge): how long the oldest ready task has
//!   waited since it became ready (0 when none is ready).
//! - `asyncflow_running_oldest_age_seconds{type}` (gauge): since when the longest-held running
//!   task has been held, in seconds (0 when none runs): the current hold durations' maximum, seen
//!   by every server whichever one handed the task out.
//! - `asyncflow_task_type_paused{type}` (gauge): 1 while claims of the type are paused.
//!
//! Counted by the SQL API as it works (`asyncflow.type_counters`, one row per type and
//! connection slot, written once per claim / report / rescue statement), so they only grow:
//! - `asyncflow_tasks_claimed_total{type}` (counter): claims, i.e. stage calls handed out.
//! - `asyncflow_tasks_succeeded_total{type}`, `asyncflow_tasks_failed_total{type}` (failed for
//!   good), `asyncflow_tasks_retried_total{type}` (failed tries to be tried again),
//!   `asyncflow_tasks_rescued_total{type}` (leases that ran out) (counters).
//! - `asyncflow_stage_duration_seconds{type, stage}` (histogram): stage call durations as the
//!   reports' schedule-log entries give them (claim to report), from `asyncflow.stage_times`.
//!
//! Periodic schedules (one series per schedule, label `schedule`):
//! - `asyncflow_schedule_next_tick_timestamp_seconds{schedule}` (gauge): the next tick, as of the
//!   scheduler's last pass (no sample while paused or before the first pass).
//! - `asyncflow_schedule_last_tick_timestamp_seconds{schedule}` (gauge): the newest tick released.
//! - `asyncflow_schedule_last_released{schedule}` (gauge): when the newest tick was released
//!   (its task created or its run started); behind the last tick's time by the release's lag.
//!   The task or run id is not a label (a new series at every tick): `asyncflow.list_schedules`
//!   has it.
//! - `asyncflow_schedule_paused{schedule}` (gauge): 1 while the schedule is paused.
//! - `asyncflow_schedule_error{schedule}` (gauge): 1 while the scheduler cannot use the schedule
//!   (its `error` in `asyncflow.list_schedules`).
//!
//! From this process (since it started):
//! - `asyncflow_runs{pipeline, status}` (gauge): workflow runs scheduled or running.
//! - `asyncflow_runs_ended_total{pipeline, status}` (counter): workflow runs ended, by outcome
//!   (kept in counter rows, so retention does not lower them).
//! - `asyncflow_callbacks_pending` (gauge): workflow callbacks waiting for delivery.
//! - `asyncflow_http_requests_total{method, route, status}` (counter): requests answered, by
//!   route template (`/v1/tasks/:id`; `unmatched` for unknown paths) and status.
//! - `asyncflow_http_request_duration_seconds{method, route, status}` (histogram): time to the
//!   response head.
//! - `asyncflow_worker_hold_duration_seconds{type}` (histogram): successful holds (claims) through
//!   `POST /v1/worker/hold`, by task type: what a remote worker waits for its tasks.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use axum::body::Body;
use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use futures_util::StreamExt;

use super::AppState;
use crate::db::api;

/// Upper bounds of the histograms' buckets, in seconds (Prometheus' defaults).
const BUCKETS: [(f64, &str); 11] = [
    (0.005, "0.005"),
    (0.01, "0.01"),
    (0.025, "0.025"),
    (0.05, "0.05"),
    (0.1, "0.1"),
    (0.25, "0.25"),
    (0.5, "0.5"),
    (1.0, "1"),
    (2.5, "2.5"),
    (5.0, "5"),
    (10.0, "10"),
];

/// The content type of the text format.
const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The route whose request body names the task type of a hold.
const HOLD_ROUTE: &str = "/v1/worker/hold";

/// At most this much of a hold's body is kept to read its type (a real one is far smaller).
const HOLD_BODY_KEPT: usize = 64 * 1024;

pub(super) fn routes() -> Router<AppState> {
    Router::new().route("/metrics", get(metrics))
}

/// One histogram: per-bucket counts (not cumulative; summed when written), count and sum.
#[derive(Debug, Default, Clone)]
struct Histogram {
    buckets: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

impl Histogram {
    fn observe(&mut self, seconds: f64) {
        if let Some(i) = BUCKETS.iter().position(|(le, _)| seconds <= *le) {
            self.buckets[i] += 1;
        }
        self.count += 1;
        self.sum += seconds;
    }
}

/// (method, route template, status) of a request.
type HttpKey = (&'static str, String, u16);

/// This process's figures. Servers share nothing, so these are per server.
#[derive(Debug, Default)]
pub(super) struct Metrics {
    http: Mutex<BTreeMap<HttpKey, Histogram>>,
    holds: Mutex<BTreeMap<String, Histogram>>,
}

/// A poisoned lock only means a panic elsewhere while counting: the figures are still usable.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Methods outside the usual ones share one label value, so that odd requests cannot make series.
fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::PATCH => "PATCH",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}

/// Middleware: counts and times every request by route template and status; for a hold, also
/// by the task type its body named (read as the handler reads it, so nothing is parsed twice
/// before the handler and the body limit still applies there).
pub(super) async fn track(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let route = request.extensions().get::<MatchedPath>().map(|p| p.as_str().to_string());
    let method = method_label(request.method());
    let (request, kept) = if route.as_deref() == Some(HOLD_ROUTE) && method == "POST" {
        let (parts, body) = request.into_parts();
        let kept = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&kept);
        let stream = body.into_data_stream().map(move |chunk| {
            if let Ok(bytes) = &chunk {
                let mut sink = lock(&sink);
                let room = HOLD_BODY_KEPT.saturating_sub(sink.len());
                sink.extend_from_slice(&bytes[..bytes.len().min(room)]);
            }
            chunk
        });
        (Request::from_parts(parts, Body::from_stream(stream)), Some(kept))
    } else {
        (request, None)
    };

    let started = Instant::now();
    let response = next.run(request).await;
    let seconds = started.elapsed().as_secs_f64();
    let status = response.status();
    let route = route.unwrap_or_else(|| "unmatched".to_string());
    lock(&state.metrics.http).entry((method, route, status.as_u16())).or_default().observe(seconds);

    if let (Some(kept), true) = (kept, status.is_success()) {
        #[derive(serde::Deserialize)]
        struct HoldType {
            #[serde(rename = "type")]
            task_type: String,
        }
        // A successful hold named a registered type, so the label set stays small.
        if let Ok(hold) = serde_json::from_slice::<HoldType>(&lock(&kept)) {
            lock(&state.metrics.holds).entry(hold.task_type).or_default().observe(seconds);
        }
    }
    response
}

/// The text being written: HELP and TYPE before a family's samples, label values escaped.
#[derive(Default)]
struct Exposition {
    text: String,
}

impl Exposition {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let help = help.replace('\\', "\\\\").replace('\n', "\\n");
        let _ = writeln!(self.text, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl std::fmt::Display) {
        self.text.push_str(name);
        if !labels.is_empty() {
            self.text.push('{');
            for (i, (key, value)) in labels.iter().enumerate() {
                if i > 0 {
                    self.text.push(',');
                }
                let value = value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n");
                let _ = write!(self.text, "{key}=\"{value}\"");
            }
            self.text.push('}');
        }
        let _ = writeln!(self.text, " {value}");
    }

    fn histogram(&mut self, name: &str, labels: &[(&str, &str)], h: &Histogram) {
        let mut cumulative = 0;
        let bucket = format!("{name}_bucket");
        for ((_, le), n) in BUCKETS.iter().zip(h.buckets) {
            cumulative += n;
            self.sample(&bucket, &[labels, &[("le", le)]].concat(), cumulative);
        }
        self.sample(&bucket, &[labels, &[("le", "+Inf")]].concat(), h.count);
        self.sample(&format!("{name}_sum"), labels, h.sum);
        self.sample(&format!("{name}_count"), labels, h.count);
    }
}

/// Prometheus metrics (text format 0.0.4); bearer token when the server has tokens.
#[utoipa::path(get, path = "/metrics", tag = "metrics",
    responses(
        (status = 200, description = "Metrics in the Prometheus text format 0.0.4, each named and explained \
            in src/http/metrics.rs; per-type figures are read from the database at scrape time",
            content_type = "text/plain; version=0.0.4", body = String),
        (status = 401, description = "Missing or wrong bearer token", body = super::ApiError),
    ))]
pub(super) async fn metrics(State(state): State<AppState>) -> Response {
    let mut out = Exposition::default();
    let figures = async {
        let c = state.pool.get().await.map_err(crate::Error::from)?;
        Ok::<_, crate::Error>((
            api::task_type_figures(&c).await?,
            api::queue_depth(&c).await?,
            api::type_counters(&c).await?,
            api::stage_times(&c).await?,
            api::workflow_figures(&c).await?,
            api::list_schedules(&c).await?,
        ))
    }
    .await;
    out.family("asyncflow_database_up", "gauge", "1 when the database answered this scrape, else 0.");
    let (figures, depth, counters, stages, workflows, schedules) = match figures {
        Ok(f) => {
            out.sample("asyncflow_database_up", &[], 1);
            f
        }
        Err(e) => {
            tracing::warn!(error = %e, "metrics: the database did not answer");
            out.sample("asyncflow_database_up", &[], 0);
            Default::default()
        }
    };
    database_families(&mut out, &figures, &depth);
    activity_families(&mut out, &counters, &stages);
    workflow_families(&mut out, &workflows);
    schedule_families(&mut out, &schedules);
    process_families(&mut out, &state.metrics);
    ([(header::CONTENT_TYPE, CONTENT_TYPE)], out.text).into_response()
}

fn database_families(out: &mut Exposition, figures: &[api::TaskTypeFigures], depth: &[crate::task::QueueDepth]) {
    out.family(
        "asyncflow_tasks",
        "gauge",
        "Stored tasks per type and status (finished ones leave with dropped shards).",
    );
    for f in figures {
        for (status, n) in [
            ("pending", f.pending),
            ("running", f.running),
            ("waiting", f.waiting),
            ("succeeded", f.succeeded),
            ("failed", f.failed),
            ("cancelled", f.cancelled),
        ] {
            out.sample("asyncflow_tasks", &[("type", &f.task_type), ("status", status)], n);
        }
    }
    out.family(
        "asyncflow_tasks_created_total",
        "counter",
        "Ids handed out by the type's id sequence: tasks created, plus creations rolled back.",
    );
    for f in figures {
        out.sample("asyncflow_tasks_created_total", &[("type", &f.task_type)], f.created);
    }
    out.family("asyncflow_queue_ready", "gauge", "Pending tasks due now.");
    for d in depth {
        out.sample("asyncflow_queue_ready", &[("type", &d.task_type)], d.ready);
    }
    out.family("asyncflow_queue_delayed", "gauge", "Pending tasks due later.");
    for d in depth {
        out.sample("asyncflow_queue_delayed", &[("type", &d.task_type)], d.delayed);
    }
    out.family(
        "asyncflow_queue_oldest_ready_age_seconds",
        "gauge",
        "Seconds the oldest ready task has waited since it became ready (0 when none is ready).",
    );
    for d in depth {
        out.sample("asyncflow_queue_oldest_ready_age_seconds", &[("type", &d.task_type)], d.oldest_ready_age);
    }
    out.family(
        "asyncflow_running_oldest_age_seconds",
        "gauge",
        "Seconds since the longest-held running task was claimed (0 when none runs).",
    );
    for f in figures {
        out.sample("asyncflow_running_oldest_age_seconds", &[("type", &f.task_type)], f.oldest_running_age);
    }
    out.family("asyncflow_task_type_paused", "gauge", "1 while claims of the type are paused.");
    for d in depth {
        out.sample("asyncflow_task_type_paused", &[("type", &d.task_type)], u8::from(d.paused));
    }
}

/// Counters kept by the SQL API itself (asyncflow.type_counters, asyncflow.stage_times): they
/// only grow, whatever retention drops.
fn activity_families(out: &mut Exposition, counters: &[api::TypeCounters], stages: &[api::StageTimes]) {
    type Family = (&'static str, &'static str, fn(&api::TypeCounters) -> i64);
    let families: [Family; 5] = [
        ("asyncflow_tasks_claimed_total", "Claims (one per stage call handed to a worker).", |c| c.claimed),
        ("asyncflow_tasks_succeeded_total", "Tasks that succeeded.", |c| c.succeeded),
        ("asyncflow_tasks_failed_total", "Tasks failed for good, by a report or when out of tries at rescue.", |c| {
            c.failed
        }),
        ("asyncflow_tasks_retried_total", "Failed tries that will be tried again after their back-off.", |c| c.retried),
        ("asyncflow_tasks_rescued_total", "Leases that ran out without a report (the rescuer took the task).", |c| {
            c.rescued
        }),
    ];
    for (name, help, value) in families {
        out.family(name, "counter", help);
        for c in counters {
            out.sample(name, &[("type", &c.task_type)], value(c));
        }
    }
    let name = "asyncflow_stage_duration_seconds";
    out.family(name, "histogram", "Stage call durations as reported (claim to report), by type and stage.");
    let bucket = format!("{name}_bucket");
    for s in stages {
        let labels = [("type", s.task_type.as_str()), ("stage", s.stage.as_str())];
        let mut cumulative = 0;
        for (bound, n) in s.bounds.iter().zip(&s.buckets) {
            cumulative += n;
            let le = bound.to_string();
            out.sample(&bucket, &[&labels[..], &[("le", le.as_str())]].concat(), cumulative);
        }
        out.sample(&bucket, &[&labels[..], &[("le", "+Inf")]].concat(), s.calls);
        out.sample(&format!("{name}_sum"), &labels, s.seconds);
        out.sample(&format!("{name}_count"), &labels, s.calls);
    }
}

fn workflow_families(out: &mut Exposition, figures: &[(String, String, String, i64)]) {
    let of = |kind: &'static str| figures.iter().filter(move |f| f.1 == kind);
    out.family("asyncflow_runs", "gauge", "Workflow runs scheduled or running, per pipeline.");
    for (pipeline, _, status, n) in of("open") {
        out.sample("asyncflow_runs", &[("pipeline", pipeline), ("status", status)], n);
    }
    out.family(
        "asyncflow_runs_ended_total",
        "counter",
        "Workflow runs ended, per pipeline and outcome (succeeded, failed, timed_out, cancelled).",
    );
    for (pipeline, _, status, n) in of("ended") {
        out.sample("asyncflow_runs_ended_total", &[("pipeline", pipeline), ("status", status)], n);
    }
    out.family("asyncflow_callbacks_pending", "gauge", "Workflow callbacks waiting for delivery.");
    out.sample("asyncflow_callbacks_pending", &[], of("callbacks").map(|f| f.3).sum::<i64>());
}

fn schedule_families(out: &mut Exposition, schedules: &[crate::schedule::Schedule]) {
    let seconds = |t: chrono::DateTime<chrono::Utc>| t.timestamp_millis() as f64 / 1000.0;
    let name = "asyncflow_schedule_next_tick_timestamp_seconds";
    out.family(name, "gauge", "The schedule's next tick (Unix time), as of the scheduler's last pass.");
    for s in schedules {
        if let Some(next) = s.next_tick.filter(|_| !s.paused) {
            out.sample(name, &[("schedule", &s.name)], seconds(next));
        }
    }
    let name = "asyncflow_schedule_last_tick_timestamp_seconds";
    out.family(name, "gauge", "The newest tick released (Unix time).");
    for s in schedules {
        if let Some(last) = s.last_tick {
            out.sample(name, &[("schedule", &s.name)], seconds(last));
        }
    }
    let name = "asyncflow_schedule_last_released";
    out.family(name, "gauge", "When the newest tick was released (Unix time).");
    for s in schedules {
        if let Some(released) = s.last_released_at {
            out.sample(name, &[("schedule", &s.name)], seconds(released));
        }
    }
    out.family("asyncflow_schedule_paused", "gauge", "1 while the schedule is paused.");
    for s in schedules {
        out.sample("asyncflow_schedule_paused", &[("schedule", &s.name)], u8::from(s.paused));
    }
    out.family("asyncflow_schedule_error", "gauge", "1 while the scheduler cannot use the schedule.");
    for s in schedules {
        out.sample("asyncflow_schedule_error", &[("schedule", &s.name)], u8::from(s.error.is_some()));
    }
}

fn process_families(out: &mut Exposition, metrics: &Metrics) {
    let http = lock(&metrics.http).clone();
    out.family("asyncflow_http_requests_total", "counter", "HTTP requests answered by this server.");
    for ((method, route, status), h) in &http {
        let status = status.to_string();
        out.sample(
            "asyncflow_http_requests_total",
            &[("method", method), ("route", route), ("status", &status)],
            h.count,
        );
    }
    out.family(
        "asyncflow_http_request_duration_seconds",
        "histogram",
        "Time from request to response head on this server, by route template and status.",
    );
    for ((method, route, status), h) in &http {
        let status = status.to_string();
        out.histogram(
            "asyncflow_http_request_duration_seconds",
            &[("method", method), ("route", route), ("status", &status)],
            h,
        );
    }
    let holds = lock(&metrics.holds).clone();
    out.family(
        "asyncflow_worker_hold_duration_seconds",
        "histogram",
        "Successful holds (claims) through POST /v1/worker/hold on this server, by task type.",
    );
    for (task_type, h) in &holds {
        out.histogram("asyncflow_worker_hold_duration_seconds", &[("type", task_type)], h);
    }
}
