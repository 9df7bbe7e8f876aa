//! The drop-in worker's burn-downs: `asyncflow worker --functions <folder> --exit-when-idle` (this
//! very binary, in a process of its own) working pre-queued no-op tasks to the end, with
//!
//! - a Python no-op in warm mode (`mode = "warm"`, on the `asyncflow` package of `packages/python`),
//! - the same Python no-op forked per call (one process per stage call),
//! - an HTTP no-op served by a small local server (in this process),
//!
//! each timed from the worker's start to its exit, in stage calls per second, beside the
//! in-process Rust burn-down of the same tasks in the same run (its reference). The CPU per call
//! is the whole machine's and the worker process's (with its functions' processes; the HTTP
//! no-op's server is this process and not counted).

use std::path::{Path, PathBuf};
use std::time::Instant;

use serde_json::json;

use super::cpu::{self, CpuMeter};
use super::{load, BenchArgs, Figure, Progress};
use crate::db::{api, DbPool};
use crate::error::{Error, Result};

/// The Python package (`packages/python/asyncflow`), written beside the functions so that the
/// benchmark needs no checkout and no install.
const PYTHON_PACKAGE: [(&str, &str); 8] = [
    ("__init__.py", include_str!("../../packages/python/asyncflow/__init__.py")),
    ("_task.py", include_str!("../../packages/python/asyncflow/_task.py")),
    ("_sql.py", include_str!("../../packages/python/asyncflow/_sql.py")),
    ("function.py", include_str!("../../packages/python/asyncflow/function.py")),
    ("client.py", include_str!("../../packages/python/asyncflow/client.py")),
    ("aio.py", include_str!("../../packages/python/asyncflow/aio.py")),
    ("http.py", include_str!("../../packages/python/asyncflow/http.py")),
    ("py.typed", ""),
];

/// Writes the package `asyncflow` into `root` (to be on the PYTHONPATH).
pub(super) fn write_python_package(root: &Path) -> Result<()> {
    let dir = root.join("asyncflow");
    let io = |e: std::io::Error| Error::Config(format!("bench folder {}: {e}", dir.display()));
    std::fs::create_dir_all(&dir).map_err(io)?;
    for (file, text) in PYTHON_PACKAGE {
        std::fs::write(dir.join(file), text).map_err(io)?;
    }
    Ok(())
}

/// The no-op: stage `s<n>` goes on to `s<n+1>` until the last of `argv[1]` stages, then succeeds.
const PYTHON_NOOP: &str = r#"import sys
from asyncflow import function

STAGES = int(sys.argv[1])


def handle(call):
    stage = call["stage"]
    n = int(stage[1:]) if stage[:1] == "s" and stage[1:].isdigit() else 1
    if n < STAGES:
        return {"next_stage": "s%d" % (n + 1)}
    return {"result": None}


function.run(handle)
"#;

/// The three ways the drop-in worker runs a function here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Warm,
    Fork,
    Http,
}

/// One measured drop-in burn-down.
struct Measured {
    calls_per_s: f64,
    /// The whole machine's busy CPU per call.
    cpu_us: Option<f64>,
    /// The worker process's per call, its functions' processes included.
    worker_us: Option<f64>,
}

/// Runs the drop-in burn-downs of `stages` stages and adds their figures.
pub(super) async fn run(
    pool: &DbPool,
    url: &str,
    args: &BenchArgs,
    stages: u32,
    figures: &mut Vec<Figure>,
    progress: &mut Progress,
) -> Result<()> {
    let tasks = args.dropin_tasks;
    let calls = |tasks: usize| (tasks as u64) * u64::from(stages);
    let folder = Folder::new(stages).await?;
    let server = HttpNoop::start(stages).await?;
    // The workers below run maintenance, as a worker does by default. A new database's first
    // pass does what a deployment does once (the partitions of the coming days, say): done here,
    // before any figure, so that each drain pays only what maintenance costs as it goes.
    maintain_once(url).await?;

    progress.detail("in-process Rust reference");
    let name = format!("bench_dropin_ref{stages}");
    load::queue(pool, &name, tasks, None).await?;
    let reference = load::burn_down(pool, url, &name, tasks, stages, args.concurrency).await?;
    let reference_calls = reference.rate * f64::from(stages);
    super::aging::clear(pool, &name).await?;

    let mut measured = Vec::new();
    for (kind, count) in [(Kind::Warm, tasks), (Kind::Http, tasks), (Kind::Fork, args.fork_tasks)] {
        progress.detail(&format!("{kind:?} x {count}"));
        let name = format!("bench_dropin_{}{stages}", format!("{kind:?}").to_lowercase());
        folder.write(&name, kind, args.instances, server.port)?;
        load::queue(pool, &name, count, None).await?;
        api::bench_checkpoint(&pool.get().await?).await?;
        let meter = CpuMeter::start();
        let children = cpu::children_seconds();
        let started = Instant::now();
        let concurrency = args.dropin_concurrency.unwrap_or(args.concurrency);
        let summary = folder.run_worker(url, &name, concurrency).await?;
        let seconds = started.elapsed().as_secs_f64();
        let cpu = meter.per_op(calls(count));
        let worker = children.and_then(|before| Some(cpu::children_seconds()? - before));
        let worker_us = worker.map(|s| s / calls(count) as f64 * 1e6);
        let done = serde_json::from_str::<serde_json::Value>(&summary).ok().and_then(|s| s["succeeded"].as_u64());
        if done != Some(count as u64) {
            return Err(Error::Config(format!(
                "drop-in burn-down {name} finished {done:?} of {count} tasks: {summary}"
            )));
        }
        super::aging::clear(pool, &name).await?;
        measured.push((
            kind,
            count,
            Measured { calls_per_s: calls(count) as f64 / seconds, cpu_us: cpu.machine_us, worker_us },
        ));
    }
    server.stop();
    // what every drop-in figure pays once: the worker's start (connections, registration, the
    // LISTEN) and exit, with nothing to do
    let startup = if stages == 1 {
        let name = "bench_dropin_empty";
        folder.write(name, Kind::Warm, args.instances, server.port)?;
        load::register(pool, name, None).await?;
        let started = Instant::now();
        folder.run_worker(url, name, args.dropin_concurrency.unwrap_or(args.concurrency)).await?;
        Some(started.elapsed().as_secs_f64())
    } else {
        None
    };

    let suffix = if stages == 1 { "1-stage".to_string() } else { format!("{stages}-stage") };
    let key = |k: &str| if stages == 1 { format!("dropin_{k}") } else { format!("dropin{stages}_{k}") };
    let mut ref_fig = Figure::new(
        &key("rust"),
        &format!("drop-in reference: in-process Rust burn-down, {suffix}, {tasks} tasks"),
        reference_calls,
        "calls/s",
    )
    .ratio(Some(reference_calls), "in-process Rust");
    // the reference's CPU is counted per task: per call here, as the others
    ref_fig.cpu_us = reference.cpu.machine_us.map(|us| us / f64::from(stages));
    ref_fig.own_cpu_us = reference.cpu.own_us.map(|us| us / f64::from(stages));
    figures.push(ref_fig);
    if let Some(seconds) = startup {
        figures.push(Figure::new(
            "dropin_startup",
            "drop-in worker: start and exit on an empty queue (in each figure below)",
            seconds,
            "s",
        ));
    }
    let fork_rate = measured.iter().find(|(k, _, _)| *k == Kind::Fork).map(|(_, _, m)| m.calls_per_s);
    for (kind, count, m) in &measured {
        let (k, what) = match kind {
            Kind::Warm => ("warm", format!("Python no-op, warm ({} instances)", args.instances)),
            Kind::Fork => ("fork", "Python no-op, forked per call".to_string()),
            Kind::Http => ("http", "HTTP no-op, local server".to_string()),
        };
        let mut fig =
            Figure::new(&key(k), &format!("drop-in worker: {what}, {suffix}, {count} tasks"), m.calls_per_s, "calls/s")
                .ratio(Some(reference_calls), "in-process Rust");
        if *kind == Kind::Warm && stages == 1 {
            let pass = m.calls_per_s >= 10_000.0 && m.calls_per_s >= 0.6 * reference_calls;
            fig = fig.bar(">= 10,000 calls/s and >= 0.6 x in-process Rust", Some(pass));
        }
        fig.cpu_us = m.cpu_us;
        fig.own_cpu_us = m.worker_us;
        figures.push(fig);
        if *kind == Kind::Warm {
            if let Some(fork) = fork_rate {
                let times = m.calls_per_s / fork;
                let mut fig = Figure::new(
                    &key("warm_over_fork"),
                    &format!("drop-in worker: warm Python over forked Python, {suffix}"),
                    times,
                    "x",
                );
                if stages == 1 {
                    fig = fig.bar(">= 50 x", Some(times >= 50.0));
                }
                figures.push(fig);
            }
        }
    }
    Ok(())
}

/// A functions folder in a temporary directory, removed when dropped.
struct Folder {
    root: PathBuf,
    stages: u32,
    /// The Python interpreter (see [`python`]).
    python: String,
}

impl Folder {
    async fn new(stages: u32) -> Result<Folder> {
        let python = python().await;
        let root = std::env::temp_dir().join(format!("asyncflow-bench-{}-{stages}", std::process::id()));
        let io = |e: std::io::Error| Error::Config(format!("bench folder {}: {e}", root.display()));
        std::fs::create_dir_all(&root).map_err(io)?;
        write_python_package(&root)?;
        std::fs::write(root.join("noop.py"), PYTHON_NOOP).map_err(io)?;
        Ok(Folder { root, stages, python })
    }

    /// Writes `<name>/function.toml` (only that function in the folder it runs from).
    fn write(&self, name: &str, kind: Kind, instances: usize, port: u16) -> Result<()> {
        let dir = self.root.join("run").join(name);
        let noop = self.root.join("noop.py");
        let (noop, python) = (noop.to_string_lossy(), &self.python);
        let toml = match kind {
            Kind::Warm => format!(
                "command = [{python:?}, {noop:?}, \"{}\"]\nmode = \"warm\"\ninstances = {instances}\n",
                self.stages
            ),
            Kind::Fork => format!("command = [{python:?}, {noop:?}, \"{}\"]\n", self.stages),
            Kind::Http => format!("url = \"http://127.0.0.1:{port}/\"\n"),
        };
        let _ = std::fs::remove_dir_all(self.root.join("run"));
        std::fs::create_dir_all(&dir)
            .and_then(|()| std::fs::write(dir.join("function.toml"), toml))
            .map_err(|e| Error::Config(format!("bench folder {}: {e}", dir.display())))
    }

    /// Runs `asyncflow worker` on the folder, with its default maintenance, until it is idle;
    /// its summary line.
    async fn run_worker(&self, url: &str, name: &str, concurrency: usize) -> Result<String> {
        run_worker(&self.root.join("run"), &self.root, url, name, concurrency, Maintenance::On).await
    }
}

/// The Python interpreter itself, not a launcher in front of it (pyenv's shim is a shell script
/// that would cost a forked function more than Python's own start).
pub(super) async fn python() -> String {
    tokio::process::Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .await
        .ok()
        .filter(|out| out.status.success())
        .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_string())
        .filter(|path| !path.is_empty())
        .unwrap_or_else(|| "python3".to_string())
}

/// Whether a worker the bench starts runs the maintenance services, as a worker does by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Maintenance {
    /// The default a user gets: the worker takes part in maintenance.
    On,
    /// `--no-maintenance`.
    Off,
}

/// `asyncflow worker --exit-when-idle` (this program) on the functions folder `functions` for the
/// type `name` at `concurrency`, on `url`, with or without maintenance, logging warnings only,
/// killed when dropped.
pub(super) fn worker_command(
    functions: &Path,
    url: &str,
    name: &str,
    concurrency: usize,
    maintenance: Maintenance,
) -> Result<tokio::process::Command> {
    let mut cmd = this_program(url)?;
    cmd.arg("worker");
    if maintenance == Maintenance::Off {
        cmd.arg("--no-maintenance");
    }
    cmd.args(["--exit-when-idle", "--functions"]).arg(functions).args([
        "--types",
        name,
        "--concurrency",
        &concurrency.to_string(),
    ]);
    Ok(cmd)
}

/// This program, to be given its arguments, on `url`, logging warnings only, killed when dropped.
fn this_program(url: &str) -> Result<tokio::process::Command> {
    let exe = std::env::current_exe().map_err(|e| Error::Config(format!("this program's path: {e}")))?;
    let mut cmd = tokio::process::Command::new(exe);
    cmd.env("DATABASE_URL", url).env("ASYNCFLOW_LOG", "warn").stdin(std::process::Stdio::null()).kill_on_drop(true);
    Ok(cmd)
}

/// `asyncflow maintain --once` (this program) on `url`: one pass of every maintenance service.
async fn maintain_once(url: &str) -> Result<()> {
    let out = this_program(url)?
        .args(["maintain", "--once"])
        .output()
        .await
        .map_err(|e| Error::Config(format!("starting asyncflow maintain --once: {e}")))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Err(Error::Config(format!("asyncflow maintain --once failed ({}): {stderr}", out.status)));
    }
    Ok(())
}

/// Runs `asyncflow worker --exit-when-idle` (this program) on the functions folder `functions`
/// for the type `name`, with `python_path` on the PYTHONPATH, until it is idle; its summary line.
pub(super) async fn run_worker(
    functions: &Path,
    python_path: &Path,
    url: &str,
    name: &str,
    concurrency: usize,
    maintenance: Maintenance,
) -> Result<String> {
    let out = worker_command(functions, url, name, concurrency, maintenance)?
        .env("PYTHONPATH", python_path)
        .output()
        .await
        .map_err(|e| Error::Config(format!("starting asyncflow worker: {e}")))?;
    let stdout = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Err(Error::Config(format!("asyncflow worker for {name} failed ({}): {stderr}", out.status)));
    }
    Ok(stdout)
}

impl Drop for Folder {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// A local HTTP no-op of `stages` stages, served from this process.
pub(super) struct HttpNoop {
    pub(super) port: u16,
    stop: tokio_util::sync::CancellationToken,
}

impl HttpNoop {
    pub(super) async fn start(stages: u32) -> Result<HttpNoop> {
        let app = axum::Router::new().route(
            "/",
            axum::routing::post(move |axum::Json(call): axum::Json<serde_json::Value>| async move {
                let stage = call.get("stage").and_then(|s| s.as_str()).unwrap_or_default();
                let n: u32 = stage.strip_prefix('s').and_then(|s| s.parse().ok()).unwrap_or(1);
                axum::Json(if n < stages {
                    json!({"next_stage": format!("s{}", n + 1)})
                } else {
                    json!({"result": null})
                })
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| Error::Config(format!("HTTP no-op: {e}")))?;
        let port = listener.local_addr().map_err(|e| Error::Config(format!("HTTP no-op: {e}")))?.port();
        let stop = tokio_util::sync::CancellationToken::new();
        let until = stop.clone();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).with_graceful_shutdown(async move { until.cancelled().await }).await;
        });
        Ok(HttpNoop { port, stop })
    }

    pub(super) fn stop(&self) {
        self.stop.cancel();
    }
}
