//! `asyncflow bench`: measures asyncflow against the commit-rate ceiling of the same server in
//! the same run, and reports every figure both absolute and as a ratio to a baseline measured
//! alongside it (the machine is shared and noisy; ratios travel, absolute numbers do not).
//!
//! The run happens in a database of its own (`asyncflow_bench_<pid>`, created on the server the
//! URL names and dropped at the end), so existing data neither helps nor hurts the figures and
//! the 10 million aged rows leave nothing behind.
//!
//! ```text
//!   update, insert   baselines: 8 connections, a one-row UPDATE / INSERT in autocommit
//!   enqueue, bulk    create_task one per transaction (8 connections); create_tasks 1,000 per call
//!                    from 2 connections at once
//!   parts            what create_task is made of, timed the same way: the INSERT baseline's
//!                    statement inside the thinnest enqueue function (PL/pgSQL, SECURITY DEFINER:
//!                    the function's own cost), create_task's task row sent bare, then inside the
//!                    smallest PL/pgSQL function that could wrap it
//!   limit            the physical-limit baseline: the cheapest SQL that makes a burn-down's state
//!                    change (lock a batch of ready rows, write them finished, durable commit), in
//!                    turn with the 1-stage burn-down (see limit.rs)
//!   limit3           the same for a 3-stage task (each stage call a durable row change: lock,
//!                    write the next stage, or finished after the last), in turn with the 3-stage
//!                    burn-down
//!   burndown(3)      pre-queued no-op tasks worked to the end by the real worker (Rust function);
//!                    the 1-stage figure is the median of three runs
//!   fair             the 1-stage burn-down in a type with fair_queues, its tasks spread over
//!                    --queue-keys keys: what claims by turns of key cost beside plain claims
//!   events           1 M tasks waiting for events (one key each): a burn-down in their type
//!                    beside them against one in an empty type; send_event waking one of them
//!                    against create_task (see events.rs)
//!   wake             an idle worker, tasks inserted one at a time at 50/s: insert call -> start;
//!                    beside it, in turn task by task, an idle `worker --server` on an
//!                    in-process `serve`
//!   aging            the burn-down again beside 10 M finished tasks, in closed shards as the type's
//!                    own roll leaves them (5 M rows each by default), three times, in turn with
//!                    three empty-table burn-downs (its reference); medians
//!   drop             retention dropping an expired 1 M-row shard
//!   dashboard        GET /v1/dashboard, GET /metrics and the first page of GET /v1/tasks
//!                    (no filter, and status=failed) through the real router, before and after a set-based fill of 10 M tasks
//!                    (the figures before are the baseline)
//!   children         a parent spawning 10,000 children and joining them, beside a plain
//!                    burn-down of as many tasks; the join's latency (see children.rs)
//!   dropin(3)        the drop-in worker (`asyncflow worker --functions`, a process of its own)
//!                    burning down no-op tasks through a warm Python function, an HTTP function
//!                    on a local server and a Python function forked per call, in stage calls/s
//!                    beside the in-process Rust burn-down of the same tasks (see dropin.rs)
//!   waiters          the burn-down with nobody waiting for tasks, beside the same without the
//!                    waiters' check in report and finish (see waiters.rs)
//!   packages         the Python package: an async function at concurrency 200 beside
//!                    concurrency 1, and its enqueue beside psycopg's own (see packages.rs)
//!   idle             50 idle workers over 20 types: the server's transactions/s and CPU beside
//!                    no asyncflow process, directly, through PgBouncer, and on a server (idle.rs)
//!   wake_pgbouncer   the wake latency of a worker through PgBouncer with a direct LISTEN, beside
//!                    a direct one (pooled.rs)
//!   ephemeral        200 short-lived workers in waves through PgBouncer, poll-only, against a
//!                    private server of max_connections 100, beside 4 long-lived direct workers
//!                    draining as many tasks (ephemeral.rs)
//! ```
//!
//! The timed phases (baselines, enqueue, parts) and the burn-downs also give the CPU per operation:
//! the whole machine's (server, kernel and this process together, from `/proc/stat`) and this
//! process's own (the client, or the worker in a burn-down): costs that move less than a rate
//! when the VM's speed does.
//!
//! Results go to the terminal (a table, or `--json`), to `<out>/results.json` and to
//! `<out>/chart.svg`.

mod aging;
mod args;
mod children;
mod cpu;
mod dashboard;
mod dropin;
mod ephemeral;
mod events;
mod idle;
mod limit;
mod load;
mod output;
mod packages;
pub mod pgbouncer;
mod pooled;
mod waiters;

pub use args::BenchArgs;

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::db::{self, api, DbPool};
use crate::error::{Error, Result};

/// The phases, in running order.
pub const PHASES: [&str; 24] = [
    "update",
    "insert",
    "enqueue",
    "parts",
    "bulk",
    "limit",
    "limit3",
    "burndown",
    "burndown3",
    "chained3",
    "fair",
    "events",
    "wake",
    "aging",
    "drop",
    "dashboard",
    "children",
    "dropin",
    "dropin3",
    "waiters",
    "packages",
    "idle",
    "wake_pgbouncer",
    "ephemeral",
];

/// One measured figure.
#[derive(Debug, Clone, Serialize)]
pub struct Figure {
    /// Stable key (phase and what of it).
    pub key: String,
    /// What was measured.
    pub name: String,
    /// The measurement.
    pub value: f64,
    /// Its unit ("tasks/s", "commits/s", "ms", "s").
    pub unit: String,
    /// value / the baseline named in `ratio_to`, measured in the same run.
    pub ratio: Option<f64>,
    /// Which baseline the ratio is to.
    pub ratio_to: Option<String>,
    /// The bar this figure must clear, when it has one.
    pub bar: Option<String>,
    /// Whether it does.
    pub pass: Option<bool>,
    /// The whole machine's busy CPU per operation (a task, a commit), in microseconds: the timed
    /// phases and the burn-downs, on Linux.
    pub cpu_us: Option<f64>,
    /// This process's CPU per operation, in microseconds: the benchmark's client in the timed
    /// phases, the worker in the burn-downs.
    pub own_cpu_us: Option<f64>,
}

impl Figure {
    fn new(key: &str, name: &str, value: f64, unit: &str) -> Self {
        Figure {
            key: key.into(),
            name: name.into(),
            value,
            unit: unit.into(),
            ratio: None,
            ratio_to: None,
            bar: None,
            pass: None,
            cpu_us: None,
            own_cpu_us: None,
        }
    }

    fn cpu(mut self, cpu: cpu::CpuPerOp) -> Self {
        self.cpu_us = cpu.machine_us;
        self.own_cpu_us = cpu.own_us;
        self
    }

    fn ratio(mut self, baseline: Option<f64>, to: &str) -> Self {
        if let Some(b) = baseline.filter(|b| *b > 0.0) {
            self.ratio = Some(self.value / b);
            self.ratio_to = Some(to.into());
        }
        self
    }

    fn bar(mut self, bar: &str, pass: Option<bool>) -> Self {
        self.bar = Some(bar.into());
        self.pass = pass;
        self
    }
}

/// Everything one run produced.
#[derive(Debug, Clone, Serialize)]
pub struct BenchResults {
    /// When the run started (UTC).
    pub started_at: chrono::DateTime<chrono::Utc>,
    /// The command line.
    pub command: String,
    /// The server's version string.
    pub server_version: String,
    /// CPUs this process could use.
    pub cpus: usize,
    /// The figures, in running order.
    pub figures: Vec<Figure>,
}

fn wants(args: &BenchArgs, phase: &str) -> bool {
    args.only.is_empty() || args.only.iter().any(|p| p == phase)
}

/// A burn-down's figure beside the plain 1-stage burn-down of the same run when that ran, with
/// the bar "at least `share` of it"; else beside UPDATE.
fn beside_burn1(fig: Figure, burn1: Option<f64>, update: Option<f64>, share: f64) -> Figure {
    match burn1 {
        Some(plain) => {
            let pass = fig.value >= share * plain;
            fig.ratio(burn1, "1-stage burn-down").bar(&format!(">= {share} x 1-stage burn-down"), Some(pass))
        }
        None => fig.ratio(update, "UPDATE"),
    }
}

/// Runs the benchmark in a database of its own on `url`'s server, prints the table and writes
/// the results file and chart.
pub async fn run(url: &str, args: &BenchArgs) -> Result<BenchResults> {
    if let Some(bad) = args.only.iter().find(|p| !PHASES.contains(&p.as_str())) {
        return Err(Error::Config(format!("--only: unknown phase {bad:?} (phases: {})", PHASES.join(", "))));
    }
    if !(args.seconds > 0.0 && args.seconds <= 3600.0) {
        return Err(Error::Config("--seconds must be between 0 and 3600".into()));
    }
    args.check()?;
    let name = format!("asyncflow_bench_{}", std::process::id());
    let bench_url = db::with_database(url, &name)?;
    let admin_pool = db::pool(url, 1)?;
    let admin = admin_pool.get().await?;
    api::bench_create_database(&admin, &name).await?;
    let outcome = async {
        db::migrate::migrate(&bench_url).await?;
        let pool = db::pool(&bench_url, args.connections + 8)?;
        let results = run_phases(&pool, &bench_url, args).await;
        pool.close();
        results
    }
    .await;
    if args.keep_database {
        eprintln!("kept the benchmark database {name}");
    } else if let Err(e) = api::bench_drop_database(&admin, &name).await {
        eprintln!("could not drop the benchmark database {name}: {e}");
    }
    drop(admin);
    admin_pool.close();
    let results = outcome?;
    output::print(&results, args.json);
    let (json, svg) = output::write(&results, &args.out)?;
    if !args.json {
        crate::outln!("\nwritten: {} and {}", json.display(), svg.display());
    }
    Ok(results)
}

/// Aged and empty-table burn-downs run in turn, this many of each.
const AGING_ROUNDS: usize = 3;

/// How many times the 1-stage burn-down runs; its figure is the median.
const BURN_ROUNDS: usize = 3;

/// The median of a non-empty list (the upper middle of an even one).
fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}

async fn run_phases(pool: &DbPool, url: &str, args: &BenchArgs) -> Result<BenchResults> {
    let started_at = chrono::Utc::now();
    let server_version = api::server_version(&pool.get().await?).await?;
    let seconds = Duration::from_secs_f64(args.seconds);
    let chosen: Vec<&str> = PHASES.iter().copied().filter(|p| wants(args, p)).collect();
    let mut progress = Progress::new(chosen.len());
    let mut figures: Vec<Figure> = Vec::new();
    let mut update = None;
    let mut insert = None;
    let mut burn1 = None;

    if wants(args, "update") || wants(args, "insert") || wants(args, "wake") {
        api::bench_prepare(&pool.get().await?).await?;
    }
    if wants(args, "update") {
        progress.phase("baseline: one-row UPDATE");
        let timed = load::update_rate(pool, args.connections, seconds).await?;
        update = Some(timed.rate);
        figures.push(
            Figure::new("update", "baseline: one-row UPDATE, autocommit", timed.rate, "commits/s")
                .ratio(update, "UPDATE")
                .cpu(timed.cpu),
        );
    }
    if wants(args, "insert") {
        progress.phase("baseline: one-row INSERT");
        let timed = load::insert_rate(pool, args.connections, seconds).await?;
        insert = Some(timed.rate);
        figures.push(
            Figure::new("insert", "baseline: one-row INSERT, autocommit", timed.rate, "commits/s")
                .ratio(update, "UPDATE")
                .cpu(timed.cpu),
        );
    }
    if wants(args, "enqueue") {
        progress.phase("enqueue: create_task");
        let timed = load::enqueue_rate(pool, args.connections, seconds).await?;
        let rate = timed.rate;
        let pass = insert.map(|i| rate >= 0.8 * i);
        // the ratio column is to UPDATE, as for every rate; the bar's own ratio is to INSERT
        let bar = match insert {
            Some(i) => format!(">= 0.8 x INSERT (is {:.2} x)", rate / i),
            None => ">= 0.8 x INSERT".to_string(),
        };
        figures.push(
            Figure::new("enqueue", "enqueue: create_task, one per transaction", rate, "tasks/s")
                .ratio(update, "UPDATE")
                .bar(&bar, pass)
                .cpu(timed.cpu),
        );
    }
    if wants(args, "parts") {
        progress.phase("enqueue parts: a function's cost, create_task's task row bare and in a function");
        let load::EnqueueParts { floor, bare, wrapped } = load::enqueue_parts(pool, args.connections, seconds).await?;
        // their ratio is to INSERT, which create_task's bar is measured against
        figures.push(
            Figure::new("parts_floor", "baseline INSERT in the thinnest enqueue function", floor.rate, "rows/s")
                .ratio(insert, "INSERT")
                .cpu(floor.cpu),
        );
        figures.push(
            Figure::new("parts_row", "create_task's task row: bare INSERT", bare.rate, "rows/s")
                .ratio(insert, "INSERT")
                .cpu(bare.cpu),
        );
        figures.push(
            Figure::new("parts_function", "the same row in a PL/pgSQL function", wrapped.rate, "rows/s")
                .ratio(insert, "INSERT")
                .cpu(wrapped.cpu),
        );
    }
    if wants(args, "bulk") {
        progress.phase("enqueue: create_tasks bulk");
        let rate = load::bulk_rate(pool, args.tasks, args.bulk_connections).await?;
        let name = format!("enqueue: create_tasks, 1,000 per call, {} conn", args.bulk_connections);
        figures.push(
            Figure::new("bulk", &name, rate, "tasks/s")
                .ratio(update, "UPDATE")
                .bar(">= 100,000 tasks/s", Some(rate >= 100_000.0)),
        );
    }
    if wants(args, "limit") {
        progress.phase("physical limit: the cheapest SQL of a burn-down, in turn with the burn-down");
        figures.extend(limit::run(pool, url, args.tasks, args.concurrency, 1, update, None).await?);
    }
    if wants(args, "limit3") {
        progress.phase("physical limit, 3 stages: the cheapest SQL of a 3-stage burn-down, in turn with it");
        let limit1 = figures.iter().find(|f| f.key == "limit").map(|f| f.value);
        figures.extend(limit::run(pool, url, args.tasks, args.concurrency, 3, update, limit1).await?);
    }
    if wants(args, "burndown") {
        progress.phase("burn-down: 1-stage");
        // The median of three: a burn-down lasts about a second, and one that meets a moment of
        // another tenant's load on this VM says nothing about asyncflow (the aging phase's
        // reference is a median for the same reason).
        let mut runs = Vec::new();
        for _ in 0..BURN_ROUNDS {
            load::queue(pool, "bench_burn1", args.tasks, None).await?;
            runs.push(load::burn_down(pool, url, "bench_burn1", args.tasks, 1, args.concurrency).await?);
            aging::clear(pool, "bench_burn1").await?;
        }
        runs.sort_by(|a, b| a.rate.total_cmp(&b.rate));
        let Some(&timed) = runs.get(BURN_ROUNDS / 2) else {
            return Err(Error::Config("the 1-stage burn-down did not run".into()));
        };
        let rate = timed.rate;
        burn1 = Some(rate);
        figures.push(
            Figure::new(
                "burndown",
                &format!("burn-down: 1-stage no-op tasks (median of {BURN_ROUNDS})"),
                rate,
                "tasks/s",
            )
            .ratio(update, "UPDATE")
            .bar(">= 5 x UPDATE", update.map(|u| rate >= 5.0 * u))
            .cpu(timed.cpu),
        );
    }
    if wants(args, "burndown3") {
        progress.phase("burn-down: 3-stage");
        load::queue(pool, "bench_burn3", args.tasks, None).await?;
        let timed = load::burn_down(pool, url, "bench_burn3", args.tasks, 3, args.concurrency).await?;
        // beside the 1-stage burn-down when it ran: a 3-stage task should cost no more than
        // three 1-stage ones; else UPDATE
        let fig = Figure::new("burndown3", "burn-down: 3-stage no-op tasks", timed.rate, "tasks/s");
        figures.push(beside_burn1(fig, burn1, update, 0.33).cpu(timed.cpu));
    }
    if wants(args, "chained3") {
        // the same with the type's speculative_chaining: what the opt-in buys
        progress.phase("burn-down: 3-stage, speculative chaining");
        load::queue(pool, "bench_chain3", args.tasks, None).await?;
        let timed = load::burn_down_chained(pool, url, "bench_chain3", args.tasks, 3, args.concurrency).await?;
        let fig = Figure::new("chained3", "burn-down: 3-stage, speculative_chaining", timed.rate, "tasks/s");
        figures.push(beside_burn1(fig, burn1, update, 0.33).cpu(timed.cpu));
    }
    if wants(args, "fair") {
        for (i, &keys) in args.queue_keys.iter().enumerate() {
            let keys = keys.min(args.tasks);
            let name = format!("burn-down: 1-stage, fair queues, {keys} keys");
            if i == 0 {
                progress.phase(&name);
            } else {
                progress.phase_note(&name);
            }
            load::queue_keyed(pool, "bench_fair", args.tasks, keys).await?;
            let timed = load::burn_down(pool, url, "bench_fair", args.tasks, 1, args.concurrency).await?;
            aging::clear(pool, "bench_fair").await?;
            // beside the plain 1-stage burn-down when it ran (what turns of key cost), else UPDATE
            let fig = Figure::new(
                &format!("fair_{keys}"),
                &format!("burn-down: 1-stage, fair_queues, {keys} keys"),
                timed.rate,
                "tasks/s",
            );
            figures.push(beside_burn1(fig, burn1, update, 0.5).cpu(timed.cpu));
        }
    }
    if wants(args, "events") {
        progress.phase("events: tasks waiting for events beside a burn-down; send_event");
        let e =
            events::run(pool, url, args.waiting_tasks, args.tasks, args.concurrency, args.connections, seconds).await?;
        figures.extend(events::figures(&e, args.waiting_tasks, update));
    }
    if wants(args, "wake") {
        progress.phase("wake latency");
        load::settle(pool).await?;
        let commit = load::commit_latency(pool).await?;
        // a third of the phase, at the same pace as the tasks
        let paced = load::paced_insert_latency(pool, seconds / 3, args.wake_rate).await?;
        let (wake, remote) = load::wake_latencies(pool, url, seconds, args.wake_rate).await?;
        let base = Some(paced);
        let to = "paced one-row INSERT p50";
        figures.push(
            Figure::new("commit_p50", "baseline: one-row UPDATE commit, back to back, p50", commit, "ms")
                .ratio(base, to),
        );
        figures.push(
            Figure::new(
                "paced_insert_p50",
                &format!("baseline: one-row INSERT at {}/s, p50", args.wake_rate),
                paced,
                "ms",
            )
            .ratio(base, to),
        );
        figures.push(
            Figure::new("wake_p50", "wake latency: insert -> start, p50", wake.p50, "ms")
                .ratio(base, to)
                .bar("<= 2 ms", Some(wake.p50 <= 2.0)),
        );
        figures.push(
            Figure::new(
                "wake_after_commit_p50",
                "wake latency: commit acknowledged -> start, p50",
                wake.after_commit_p50,
                "ms",
            )
            .ratio(base, to),
        );
        figures.push(Figure::new("wake_p95", "wake latency: insert -> start, p95", wake.p95, "ms").ratio(base, to));
        figures.push(
            Figure::new("wake_p99", "wake latency: insert -> start, p99", wake.p99, "ms")
                .ratio(base, to)
                .bar("<= 6 ms", Some(wake.p99 <= 6.0)),
        );
        // a worker on a server (its hold waiting there), beside the database worker's
        let (db_p50, db_p99) = (Some(wake.p50), Some(wake.p99));
        figures.push(
            Figure::new("wake_remote_p50", "wake, --server worker: insert -> start, p50", remote.p50, "ms")
                .ratio(db_p50, "database worker's wake p50")
                .bar("<= 2 x database worker", Some(remote.p50 <= 2.0 * wake.p50)),
        );
        figures.push(
            Figure::new(
                "wake_remote_after_commit_p50",
                "wake, --server: commit acknowledged -> start, p50",
                remote.after_commit_p50,
                "ms",
            )
            .ratio(Some(wake.after_commit_p50), "database worker's commit -> start p50"),
        );
        figures.push(
            Figure::new("wake_remote_p99", "wake, --server worker: insert -> start, p99", remote.p99, "ms")
                .ratio(db_p99, "database worker's wake p99"),
        );
    }
    if wants(args, "aging") {
        progress.phase("aging: fill finished tasks");
        let ty = "bench_aged";
        load::register(pool, ty, None).await?;
        aging::fill_finished_rolling(pool, ty, args.aged_rows, &mut progress).await?;
        progress.phase_note("aging: burn-downs beside the finished tasks and on empty tables, in turn");
        // The reference is an empty-table burn-down run beside the aged ones, in turn (each on a
        // type of its own), not the 1-stage figure of minutes before: this VM's speed moves by
        // more than the 10 % the bar allows between two runs minutes apart.
        let (mut aged, mut empty) = (Vec::new(), Vec::new());
        for round in 0..AGING_ROUNDS {
            let fresh = format!("bench_fresh{round}");
            for aged_first in [round % 2 == 1, round % 2 == 0] {
                let (name, into) = if aged_first { (ty, &mut aged) } else { (fresh.as_str(), &mut empty) };
                load::queue(pool, name, args.tasks, None).await?;
                into.push(load::burn_down(pool, url, name, args.tasks, 1, args.concurrency).await?.rate);
            }
            aging::clear(pool, &fresh).await?;
        }
        let (aged, empty) = (median(&mut aged), median(&mut empty));
        let millions = args.aged_rows as f64 / 1e6;
        figures.push(
            Figure::new(
                "aging_empty",
                &format!("burn-down: 1-stage, empty table, beside the aged ones (median of {AGING_ROUNDS})"),
                empty,
                "tasks/s",
            )
            .ratio(update, "UPDATE"),
        );
        figures.push(
            Figure::new(
                "aging",
                &format!("burn-down: 1-stage, {millions} M finished kept (median of {AGING_ROUNDS})"),
                aged,
                "tasks/s",
            )
            .ratio(update, "UPDATE")
            .bar(">= 0.9 x empty-table burn-down", Some(aged >= 0.9 * empty)),
        );
        aging::clear(pool, ty).await?;
    }
    if wants(args, "drop") {
        progress.phase("retention: drop an expired shard");
        let dropped = aging::drop_expired_shard(pool, args.drop_rows, &mut progress).await?;
        let millions = args.drop_rows as f64 / 1e6;
        figures.push(
            Figure::new("drop", &format!("retention: drop an expired {millions} M-row shard"), dropped.seconds, "s")
                .bar("< 1 s, no dead tuples", Some(dropped.seconds < 1.0 && dropped.dead_tuples == 0)),
        );
        figures.push(Figure::new("drop_dead", "dead tuples left by the drop", dropped.dead_tuples as f64, "rows"));
    }
    if wants(args, "dashboard") {
        progress.phase("dashboard: GET /v1/dashboard, GET /metrics and GET /v1/tasks, before and after the fill");
        let d = dashboard::run(pool, args.dashboard_tasks, &mut progress).await?;
        let millions = d.tasks as f64 / 1e6;
        for (key, route, before, after) in [
            ("dashboard", "GET /v1/dashboard", d.before.dashboard, d.after.dashboard),
            ("metrics", "GET /metrics", d.before.metrics, d.after.metrics),
            ("search", "GET /v1/tasks?limit=50", d.before.search, d.after.search),
            ("failed", "GET /v1/tasks?status=failed&limit=50", d.before.failed, d.after.failed),
        ] {
            figures.push(Figure::new(
                &format!("{key}_before"),
                &format!("{route} before the fill, median"),
                before.median_ms,
                "ms",
            ));
            figures.push(
                Figure::new(
                    &format!("{key}_tasks"),
                    &format!("{route} with {millions} M tasks, median"),
                    after.median_ms,
                    "ms",
                )
                .ratio(Some(before.median_ms), "before the fill")
                .bar("< 50 ms", Some(after.median_ms < 50.0)),
            );
            figures.push(
                Figure::new(
                    &format!("{key}_tasks_max"),
                    &format!("{route} with {millions} M tasks, max"),
                    after.max_ms,
                    "ms",
                )
                .ratio(Some(before.max_ms), "before the fill, max"),
            );
        }
    }
    if wants(args, "children") {
        progress.phase("children: a parent spawns and joins 10,000 children, beside a plain burn-down");
        children::run(pool, url, args, &mut figures, &mut progress).await?;
    }
    for (phase, stages, what) in [("dropin", 1, "1-stage"), ("dropin3", 3, "3-stage")] {
        if wants(args, phase) {
            progress.phase(&format!("drop-in worker: warm Python, HTTP, forked Python, {what}"));
            dropin::run(pool, url, args, stages, &mut figures, &mut progress).await?;
        }
    }
    if wants(args, "waiters") {
        progress.phase("waiters: the burn-down with nobody waiting, beside it without the check");
        waiters::run(pool, url, args, &mut figures, &mut progress).await?;
    }
    if wants(args, "packages") {
        progress.phase("packages: async Python at concurrency 200, enqueue through the Python client");
        packages::run(pool, url, args, &mut figures, &mut progress).await?;
    }
    if wants(args, "idle") {
        progress.phase("idle workers: server transactions/s and CPU");
        idle::run(pool, url, args, &mut figures, &mut progress).await?;
    }
    if wants(args, "wake_pgbouncer") {
        progress.phase("wake latency through PgBouncer");
        pooled::run(pool, url, args, &mut figures, &mut progress).await?;
    }
    if wants(args, "ephemeral") {
        progress.phase("ephemeral workers: a fleet through PgBouncer beside 4 direct workers");
        ephemeral::run(args, update, &mut figures, &mut progress).await?;
    }
    progress.finish();
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    Ok(BenchResults { started_at, command, server_version, cpus, figures })
}

/// A phase-level progress bar on stderr (a line per phase when stderr is not a terminal).
pub(crate) struct Progress {
    total: usize,
    done: usize,
    started: Instant,
    current: String,
    tty: bool,
}

impl Progress {
    fn new(total: usize) -> Self {
        Progress {
            total,
            done: 0,
            started: Instant::now(),
            current: String::new(),
            tty: std::io::stderr().is_terminal(),
        }
    }

    /// Starts the next phase.
    fn phase(&mut self, name: &str) {
        if !self.current.is_empty() {
            self.done += 1;
        }
        self.current = name.to_string();
        self.draw("");
    }

    /// Renames the current phase without counting a new one.
    fn phase_note(&mut self, name: &str) {
        self.current = name.to_string();
        self.draw("");
    }

    /// Shows a detail of the current phase.
    pub(crate) fn detail(&mut self, detail: &str) {
        self.draw(detail);
    }

    fn draw(&self, detail: &str) {
        let width = 30;
        let filled = (self.done * width) / self.total.max(1);
        let line = format!(
            "[{}{}] {}/{} {:>5.0}s  {}{}{}",
            "#".repeat(filled),
            ".".repeat(width - filled),
            self.done,
            self.total,
            self.started.elapsed().as_secs_f64(),
            self.current,
            if detail.is_empty() { "" } else { ": " },
            detail
        );
        let mut err = std::io::stderr();
        if self.tty {
            let _ = write!(err, "\r{line:<100}");
            let _ = err.flush();
        } else {
            let _ = writeln!(err, "{line}");
        }
    }

    fn finish(&mut self) {
        self.done = self.total;
        self.current = "done".into();
        self.draw("");
        if self.tty {
            eprintln!();
        }
    }
}
