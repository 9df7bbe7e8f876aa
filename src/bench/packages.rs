//! The Python package (`packages/python`) under load, each figure beside a baseline of the same
//! run:
//!
//! ```text
//!   async IO   an `async def` function that awaits asyncio.sleep(0.1) per call, one warm
//!              instance with `concurrency = 200`, the drop-in worker with --concurrency 200,
//!              beside the same function with concurrency 1      bar >= 1,000 calls/s and >= 50 x
//!   enqueue    asyncflow.enqueue(conn, ...) then commit, one task per transaction, from
//!              --connections threads of one Python process, beside create_task sent by psycopg
//!              itself the same way; in turn, twice each (medians)          bar >= 0.8 x psycopg
//! ```
//!
//! The package is written into a temporary folder from the sources compiled in (no install);
//! the enqueue needs psycopg 3 importable by `python3`.

use std::path::PathBuf;
use std::time::Instant;

use super::dropin::{python, run_worker, write_python_package, Maintenance};
use super::{load, median, BenchArgs, Figure, Progress};
use crate::db::{api, DbPool};
use crate::error::{Error, Result};

/// The IO-bound function: each call awaits 100 ms.
const PY_SLEEPER: &str = r#"import asyncio
from asyncflow.function import run


async def handle(call):
    await asyncio.sleep(0.1)
    return {"result": None}


run(handle)
"#;

/// Calls of the concurrent function, and of the one-at-a-time reference (10 calls/s at best).
const IO_TASKS: usize = 10_000;
const IO_TASKS_SERIAL: usize = 50;
/// `concurrency` of the instance and `--concurrency` of the worker.
const IO_CONCURRENCY: usize = 200;

/// The enqueue timing: argv = url, type, threads, seconds per run, runs of each kind. Prints
/// {"direct": [rates], "client": [rates]} in tasks/s.
const PY_ENQUEUE: &str = r#"import json, sys, threading, time
import psycopg
import asyncflow

url, task_type = sys.argv[1], sys.argv[2]
threads, seconds, runs = int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])


def direct(conn):
    conn.execute("select asyncflow.create_task(%s, %s::jsonb)", (task_type, "{}"))


def client(conn):
    asyncflow.enqueue(conn, task_type, {})


def rate(enqueue):
    conns = [psycopg.connect(url) for _ in range(threads)]
    counts = [0] * threads
    start = threading.Barrier(threads + 1)

    def loop(i):
        conn, n = conns[i], 0
        start.wait()
        while time.monotonic() < stop:
            enqueue(conn)
            conn.commit()
            n += 1
        counts[i] = n

    workers = [threading.Thread(target=loop, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    stop = time.monotonic() + seconds
    began = time.monotonic()
    start.wait()
    for w in workers:
        w.join()
    took = time.monotonic() - began
    for c in conns:
        c.close()
    return sum(counts) / took


out = {"direct": [], "client": []}
for r in range(runs):
    for kind in (("direct", "client") if r % 2 == 0 else ("client", "direct")):
        out[kind].append(rate(direct if kind == "direct" else client))
print(json.dumps(out))
"#;

/// Runs the package's phases and adds their figures.
pub(super) async fn run(
    pool: &DbPool,
    url: &str,
    args: &BenchArgs,
    figures: &mut Vec<Figure>,
    progress: &mut Progress,
) -> Result<()> {
    let folder = Folder::new().await?;

    // async IO: the same function at concurrency 200, then 1
    let mut rates = Vec::new();
    for (concurrency, tasks) in [(IO_CONCURRENCY, IO_TASKS), (1, IO_TASKS_SERIAL)] {
        progress.detail(&format!("async Python, asyncio.sleep(0.1), concurrency {concurrency}"));
        let name = if concurrency == 1 { "bench_pyio_serial".to_string() } else { "bench_pyio_wide".to_string() };
        let functions = folder.sleeper(&name, concurrency)?;
        load::queue(pool, &name, tasks, None).await?;
        api::bench_checkpoint(&pool.get().await?).await?;
        let started = Instant::now();
        let summary = run_worker(&functions, &folder.root, url, &name, concurrency, Maintenance::Off).await?;
        let seconds = started.elapsed().as_secs_f64();
        let done = serde_json::from_str::<serde_json::Value>(&summary).ok().and_then(|s| s["succeeded"].as_u64());
        if done != Some(tasks as u64) {
            return Err(Error::Config(format!("{name} finished {done:?} of {tasks} tasks: {summary}")));
        }
        super::aging::clear(pool, &name).await?;
        rates.push(tasks as f64 / seconds);
    }
    let (wide, serial) = (rates[0], rates[1]);
    figures.push(
        Figure::new(
            "py_async_serial",
            "Python package: async function awaiting 0.1 s, concurrency 1 (reference)",
            serial,
            "calls/s",
        )
        .ratio(Some(serial), "concurrency 1"),
    );
    figures.push(
        Figure::new(
            "py_async_200",
            &format!("Python package: async function awaiting 0.1 s, one instance, concurrency {IO_CONCURRENCY}"),
            wide,
            "calls/s",
        )
        .ratio(Some(serial), "concurrency 1")
        .bar(">= 1,000 calls/s and >= 50 x concurrency 1", Some(wide >= 1000.0 && wide >= 50.0 * serial)),
    );

    // enqueue: the package's client beside psycopg alone
    progress.detail("enqueue through the Python client beside create_task from psycopg");
    let name = "bench_py_enqueue";
    load::register(pool, name, None).await?;
    let seconds = (args.seconds / 2.0).max(1.0);
    let out = tokio::process::Command::new(&folder.python)
        .arg(folder.root.join("enqueue.py"))
        .args([url, name, &args.connections.to_string(), &seconds.to_string(), "2"])
        .env("PYTHONPATH", &folder.root)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| Error::Config(format!("starting {}: {e}", folder.python)))?;
    if !out.status.success() {
        return Err(Error::Config(format!(
            "the enqueue timing failed (it needs psycopg 3: `python3 -m pip install 'psycopg[binary]'`): {}",
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    let got: serde_json::Value =
        serde_json::from_slice(&out.stdout).map_err(|e| Error::Config(format!("the enqueue timing's output: {e}")))?;
    let rates_of = |kind: &str| {
        let mut r: Vec<f64> = got[kind].as_array().into_iter().flatten().filter_map(|v| v.as_f64()).collect();
        median(&mut r)
    };
    let (direct, client) = (rates_of("direct"), rates_of("client"));
    super::aging::clear(pool, name).await?;
    let conns = args.connections;
    figures.push(
        Figure::new(
            "py_enqueue_psycopg",
            &format!("enqueue: create_task from psycopg, one per transaction, {conns} threads (median of 2)"),
            direct,
            "tasks/s",
        )
        .ratio(Some(direct), "create_task from psycopg"),
    );
    figures.push(
        Figure::new(
            "py_enqueue_client",
            &format!("enqueue: asyncflow.enqueue (Python), one per transaction, {conns} threads (median of 2)"),
            client,
            "tasks/s",
        )
        .ratio(Some(direct), "create_task from psycopg")
        .bar(">= 0.8 x create_task from psycopg", Some(client >= 0.8 * direct)),
    );
    Ok(())
}

/// A temporary folder with the package, the scripts and the functions folders; removed when
/// dropped.
struct Folder {
    root: PathBuf,
    python: String,
}

impl Folder {
    async fn new() -> Result<Folder> {
        let python = python().await;
        let root = std::env::temp_dir().join(format!("asyncflow-bench-packages-{}", std::process::id()));
        let io = |e: std::io::Error| Error::Config(format!("bench folder {}: {e}", root.display()));
        std::fs::create_dir_all(&root).map_err(io)?;
        write_python_package(&root)?;
        std::fs::write(root.join("sleeper.py"), PY_SLEEPER).map_err(io)?;
        std::fs::write(root.join("enqueue.py"), PY_ENQUEUE).map_err(io)?;
        Ok(Folder { root, python })
    }

    /// A functions folder holding only `name`: the sleeper, warm, one instance, `concurrency`
    /// calls in flight on it.
    fn sleeper(&self, name: &str, concurrency: usize) -> Result<PathBuf> {
        let functions = self.root.join(format!("run_{name}"));
        let dir = functions.join(name);
        let sleeper = self.root.join("sleeper.py");
        let toml = format!(
            "command = [{:?}, {:?}]\nmode = \"warm\"\ninstances = 1\nconcurrency = {concurrency}\ntimeout = 60\n",
            self.python,
            sleeper.to_string_lossy()
        );
        std::fs::create_dir_all(&dir)
            .and_then(|()| std::fs::write(dir.join("function.toml"), toml))
            .map_err(|e| Error::Config(format!("bench folder {}: {e}", dir.display())))?;
        Ok(functions)
    }
}

impl Drop for Folder {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}
