//! The load phases: baselines, enqueue, burn-downs and wake latency.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::Rng;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::cpu::{CpuMeter, CpuPerOp};
use crate::db::{api, DbPool};
use crate::error::{Error, Result};
use crate::function::{StageCall, StageReply};
use crate::http;
use crate::ids::{TypeName, WorkerId};
use crate::task::NewTask;
use crate::task_type::TaskTypeUpdate;
use crate::worker::{RemoteClient, Worker, WorkerConfig};

type OpFuture = crate::function::BoxFuture<'static, Result<()>>;

/// What a timed phase measured: operations per second, and the whole machine's busy CPU per
/// operation in microseconds (None where it cannot be read).
#[derive(Debug, Clone, Copy)]
pub(super) struct Timed {
    pub rate: f64,
    pub cpu: CpuPerOp,
}

/// Runs `op` in a loop on `connections` connections for `duration`.
pub(super) async fn timed<F>(pool: &DbPool, connections: usize, duration: Duration, op: F) -> Result<Timed>
where
    F: Fn(deadpool_postgres::Object, i32) -> OpFuture + Send + Sync + Clone + 'static,
{
    let count = Arc::new(AtomicU64::new(0));
    let stop = CancellationToken::new();
    let mut tasks = Vec::new();
    for _ in 0..connections.max(1) {
        let (pool, op, count, stop) = (pool.clone(), op.clone(), count.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            while !stop.is_cancelled() {
                let id = rand::thread_rng().gen_range(1..=100_000);
                let c = pool.get().await?;
                op(c, id).await?;
                count.fetch_add(1, Ordering::Relaxed);
            }
            Ok::<(), Error>(())
        }));
    }
    let start = Instant::now();
    let meter = CpuMeter::start();
    let before = count.load(Ordering::Relaxed);
    tokio::time::sleep(duration).await;
    stop.cancel();
    let cpu = meter.per_op(count.load(Ordering::Relaxed).saturating_sub(before));
    for t in tasks {
        t.await.map_err(|e| Error::Config(format!("bench task: {e}")))??;
    }
    // the CPU is read at the stop, before the connections finish their last call, and divided
    // by the calls that had ended by then
    let rate = count.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64();
    Ok(Timed { rate, cpu })
}

/// The commit-rate ceiling: one-row UPDATEs by primary key in autocommit.
pub(super) async fn update_rate(pool: &DbPool, connections: usize, duration: Duration) -> Result<Timed> {
    timed(pool, connections, duration, |c, id| Box::pin(async move { api::bench_update(&c, id).await })).await
}

/// The same with one-row INSERTs.
pub(super) async fn insert_rate(pool: &DbPool, connections: usize, duration: Duration) -> Result<Timed> {
    let timed =
        timed(pool, connections, duration, |c, n| Box::pin(async move { api::bench_insert(&c, n).await })).await?;
    // as after the enqueue phases: no autovacuum of these rows during the phases after it
    api::bench_truncate_inserts(&pool.get().await?).await?;
    Ok(timed)
}

/// `create_task`, one per transaction.
pub(super) async fn enqueue_rate(pool: &DbPool, connections: usize, duration: Duration) -> Result<Timed> {
    register(pool, "bench_enqueue", None).await?;
    let timed = timed(pool, connections, duration, |c, _| {
        Box::pin(async move { api::create_task(&c, "bench_enqueue", &NewTask::default()).await.map(|_| ()) })
    })
    .await?;
    // the phases after this one do not share the server with vacuuming its rows
    super::aging::clear(pool, "bench_enqueue").await?;
    Ok(timed)
}

/// What `create_task`'s transaction is made of, part by part, each timed like it (one per
/// transaction, `connections` connections): the INSERT baseline's own statement inside the
/// thinnest function an enqueue could be (what the function alone costs), the INSERT of the
/// task row create_task writes, sent bare by the client, and that INSERT inside the smallest
/// PL/pgSQL function that could wrap it (SECURITY DEFINER, names schema-qualified, no SET clause:
/// as create_task is). What create_task adds beyond the last is its own work: the type's row,
/// the checks, the wake.
pub(super) async fn enqueue_parts(pool: &DbPool, connections: usize, duration: Duration) -> Result<EnqueueParts> {
    api::bench_insert_function_prepare(&pool.get().await?).await?;
    let floor =
        timed(pool, connections, duration, |c, n| Box::pin(async move { api::bench_insert_in_function(&c, n).await }))
            .await?;
    api::bench_truncate_inserts(&pool.get().await?).await?;
    let name = "bench_parts";
    register(pool, name, None).await?;
    let row = Arc::new(api::bench_task_row_prepare(&pool.get().await?, name).await?);
    let bare = row.clone();
    let bare = timed(pool, connections, duration, move |c, _| {
        let row = bare.clone();
        Box::pin(async move { api::bench_task_row(&c, &row).await })
    })
    .await?;
    let wrapped = timed(pool, connections, duration, move |c, _| {
        let row = row.clone();
        Box::pin(async move { api::bench_task_row_in_function(&c, &row).await })
    })
    .await?;
    // the phases after this one do not share the server with vacuuming its rows
    super::aging::clear(pool, name).await?;
    Ok(EnqueueParts { floor, bare, wrapped })
}

/// The enqueue-parts phase's three timings (see [`enqueue_parts`]).
pub(super) struct EnqueueParts {
    /// The INSERT baseline's statement in the thinnest enqueue function.
    pub floor: Timed,
    /// create_task's task row, a bare INSERT.
    pub bare: Timed,
    /// That row in the smallest function that could wrap it.
    pub wrapped: Timed,
}

/// `create_tasks` with 1,000 tasks per call, `tasks` in all, from `connections` connections at
/// once (bulk loaders run side by side; one call keeps one database core busy).
pub(super) async fn bulk_rate(pool: &DbPool, tasks: usize, connections: usize) -> Result<f64> {
    register(pool, "bench_bulk", None).await?;
    // like the burn-downs: not paying for a checkpoint of the single-task phase's WAL
    api::bench_checkpoint(&pool.get().await?).await?;
    let connections = connections.clamp(1, tasks.max(1));
    let start = Instant::now();
    let mut loaders = Vec::with_capacity(connections);
    for k in 0..connections {
        let share = tasks / connections + usize::from(k < tasks % connections);
        let pool = pool.clone();
        loaders.push(tokio::spawn(async move { fill(&pool, "bench_bulk", share, |_| NewTask::default()).await }));
    }
    for loader in loaders {
        loader.await.map_err(|e| Error::Config(format!("bench task: {e}")))??;
    }
    Ok(tasks as f64 / start.elapsed().as_secs_f64())
}

/// Registers (or updates) a benchmark task type: claims of up to 1,000.
pub(super) async fn register(pool: &DbPool, name: &str, interval: Option<f64>) -> Result<()> {
    let settings = settings(interval);
    api::register_task_type(&pool.get().await?, &TypeName::new(name)?, &settings).await.map(|_| ())
}

pub(super) fn settings(interval: Option<f64>) -> TaskTypeUpdate {
    TaskTypeUpdate { schedule_limit: Some(1000), schedule_interval: interval, ..Default::default() }
}

/// Queues `tasks` empty tasks of `name`, 1,000 per call.
pub(super) async fn queue(pool: &DbPool, name: &str, tasks: usize, interval: Option<f64>) -> Result<()> {
    register(pool, name, interval).await?;
    fill(pool, name, tasks, |_| NewTask::default()).await
}

/// Queues `tasks` empty tasks of `name`, a type with fair_queues, spread in turn over `keys`
/// queue keys, 1,000 per call.
pub(super) async fn queue_keyed(pool: &DbPool, name: &str, tasks: usize, keys: usize) -> Result<()> {
    let fair = TaskTypeUpdate { fair_queues: Some(true), ..settings(None) };
    api::register_task_type(&pool.get().await?, &TypeName::new(name)?, &fair).await?;
    fill(pool, name, tasks, |n| NewTask { queue_key: Some(format!("key{}", n % keys.max(1))), ..NewTask::default() })
        .await
}

/// Inserts `tasks` tasks of the registered type `name` on one connection, 1,000 per call, the
/// n-th as `task(n)` makes it.
pub(super) async fn fill(pool: &DbPool, name: &str, tasks: usize, task: impl Fn(usize) -> NewTask) -> Result<()> {
    let c = pool.get().await?;
    let mut made = 0;
    while made < tasks {
        let batch: Vec<NewTask> = (made..tasks.min(made + 1000)).map(&task).collect();
        made += api::create_tasks(&c, name, &batch).await?.len();
    }
    Ok(())
}

/// Times a worker (no-op Rust function of `stages` stages) working the queued tasks of `name` to
/// the end; tasks per second.
pub(super) async fn burn_down(
    pool: &DbPool,
    url: &str,
    name: &str,
    tasks: usize,
    stages: u32,
    concurrency: usize,
) -> Result<Timed> {
    burn(pool, url, name, tasks, stages, concurrency, settings(None)).await
}

/// [`burn_down`] of a type with `speculative_chaining`: a held call's next stage runs at once in
/// the same hold.
pub(super) async fn burn_down_chained(
    pool: &DbPool,
    url: &str,
    name: &str,
    tasks: usize,
    stages: u32,
    concurrency: usize,
) -> Result<Timed> {
    let chained = TaskTypeUpdate { speculative_chaining: Some(true), ..settings(None) };
    burn(pool, url, name, tasks, stages, concurrency, chained).await
}

async fn burn(
    pool: &DbPool,
    url: &str,
    name: &str,
    tasks: usize,
    stages: u32,
    concurrency: usize,
    type_settings: TaskTypeUpdate,
) -> Result<Timed> {
    let noop = move |call: StageCall| async move {
        let n: u32 = call.stage.strip_prefix('s').and_then(|s| s.parse().ok()).unwrap_or(1);
        if n < stages {
            StageReply::Next { next_stage: format!("s{}", n + 1), context: None }
        } else {
            StageReply::Succeeded { result: json!(null) }
        }
    };
    let (summary, timed) = work(pool, url, name, tasks, concurrency, type_settings, noop).await?;
    if summary.succeeded != tasks as u64 {
        return Err(Error::Config(format!("burn-down {name} finished {} of {tasks} tasks", summary.succeeded)));
    }
    Ok(timed)
}

/// Runs a worker with `function` on the queued tasks of `name` until it is idle, timed as
/// `tasks` operations: what the worker did, and the rate.
pub(super) async fn work(
    pool: &DbPool,
    url: &str,
    name: &str,
    tasks: usize,
    concurrency: usize,
    type_settings: TaskTypeUpdate,
    function: impl crate::function::Function,
) -> Result<(crate::worker::WorkerSummary, Timed)> {
    let config =
        WorkerConfig { worker_id: WorkerId::generate(), concurrency, exit_when_idle: true, ..WorkerConfig::default() };
    let worker = Worker::new(pool.clone(), url, config).register(TypeName::new(name)?, function, None, type_settings);
    // every burn-down starts right after a checkpoint, so none pays for the WAL of the phase
    // before it (the aged one would otherwise pay for the 10 M-row fill)
    api::bench_checkpoint(&pool.get().await?).await?;
    let start = Instant::now();
    let meter = CpuMeter::start();
    let summary = worker.run(CancellationToken::new()).await?;
    let elapsed = start.elapsed().as_secs_f64();
    let cpu = meter.per_op(tasks as u64);
    Ok((summary, Timed { rate: tasks as f64 / elapsed, cpu }))
}

/// p50 / p95 / p99 in milliseconds.
pub(super) struct Latency {
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
    /// From create_task's return (its commit acknowledged) to the start, p50: the worker's
    /// share of the latency. Negative when the function started before the acknowledgement
    /// reached the client.
    pub after_commit_p50: f64,
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Median time of a one-row UPDATE commit on one connection (ms): the floor under any latency
/// that involves a commit.
pub(super) async fn commit_latency(pool: &DbPool) -> Result<f64> {
    let c = pool.get().await?;
    let mut samples = Vec::with_capacity(300);
    for i in 0..300 {
        let start = Instant::now();
        api::bench_update(&c, 1 + (i * 331) % 100_000).await?;
        samples.push(start.elapsed().as_secs_f64() * 1000.0);
    }
    samples.sort_by(f64::total_cmp);
    Ok(percentile(&samples, 0.5))
}

/// Median time of a one-row INSERT in autocommit (ms), one every 1/`rate` s on one connection
/// for `duration`: the commit floor at the wake phase's pace. Between calls the server and its
/// disk go idle, and a commit from idle is slower than one in a busy stream.
pub(super) async fn paced_insert_latency(pool: &DbPool, duration: Duration, rate: f64) -> Result<f64> {
    let c = pool.get().await?;
    let count = (duration.as_secs_f64() * rate).ceil().max(1.0) as usize;
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut samples = Vec::with_capacity(count);
    for i in 0..count {
        tick.tick().await;
        let start = Instant::now();
        api::bench_insert(&c, i as i32).await?;
        samples.push(start.elapsed().as_secs_f64() * 1000.0);
    }
    samples.sort_by(f64::total_cmp);
    Ok(percentile(&samples, 0.5))
}

/// Lets the server settle after the load phases: a checkpoint, then a wait (at most 30 s) until
/// no autovacuum worker is busy in the benchmark's database, so the latency phase measures an
/// idle worker on an idle server rather than the clean-up of the burn-downs before it.
pub(super) async fn settle(pool: &DbPool) -> Result<()> {
    let c = pool.get().await?;
    api::bench_checkpoint(&c).await?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while api::bench_autovacuum_workers(&c).await? > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}

/// Two idle workers, one on the database and one on a server (`worker --server` on an `asyncflow
/// serve` in this process, on a loopback port, with its own LISTEN connection as `asyncflow
/// serve` has); tasks created one per transaction at `rate` per second, in turn for each, until
/// each has had `duration` x `rate`; the time from calling create_task to the function
/// starting, the database worker's first. In turn, not one after the other: both see the same
/// server and the same load, which moves by more than the gap measured within seconds.
pub(super) async fn wake_latencies(
    pool: &DbPool,
    url: &str,
    duration: Duration,
    rate: f64,
) -> Result<(Latency, Latency)> {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
    let listen = listener.local_addr()?;
    let config = http::HttpConfig {
        listen,
        tokens: Vec::new(),
        insecure_no_auth: false,
        max_body: http::MAX_BODY_DEFAULT,
        header_timeout: http::HEADER_TIMEOUT_DEFAULT,
        body_timeout: http::BODY_TIMEOUT_DEFAULT,
    };
    let stop_server = CancellationToken::new();
    let (server_pool, server_url, server_stop) = (pool.clone(), url.to_string(), stop_server.clone());
    let server =
        tokio::spawn(async move { http::serve_on(listener, server_pool, &server_url, config, server_stop).await });
    let client = RemoteClient::new(&format!("http://{listen}"), None)?;
    let config = || WorkerConfig { worker_id: WorkerId::generate(), concurrency: 16, ..WorkerConfig::default() };
    let database = Worker::new(pool.clone(), url, config());
    let remote = Worker::remote(client, config());
    let measured =
        idle_workers_latency(pool, duration, rate, [("bench_wake", database), ("bench_wake_remote", remote)]).await;
    stop_server.cancel();
    server.await.map_err(|e| Error::Config(format!("bench server: {e}")))??;
    let [db, remote] = measured?;
    Ok((db, remote))
}

/// When each task's function started, by the `seq` in its context.
type StartTimes = Arc<Mutex<HashMap<u64, Instant>>>;

/// Each worker given idle on a type of its own; tasks created one per transaction at `rate` per
/// second, in turn for each type, `duration` x `rate` per type; per worker, the time from calling
/// create_task to the function starting.
pub(super) async fn idle_workers_latency<const N: usize>(
    pool: &DbPool,
    duration: Duration,
    rate: f64,
    workers: [(&str, Worker); N],
) -> Result<[Latency; N]> {
    let stop = CancellationToken::new();
    // the workers stop however this ends
    let _stop_workers = stop.clone().drop_guard();
    let mut running = Vec::with_capacity(N);
    let mut started: Vec<(&str, StartTimes)> = Vec::with_capacity(N);
    for (name, worker) in workers {
        // a long poll interval: every start must come from a wake-up, not a poll
        register(pool, name, Some(60.0)).await?;
        let times: StartTimes = Arc::default();
        let seen = times.clone();
        let worker = worker.register(
            TypeName::new(name)?,
            move |call: StageCall| {
                let now = Instant::now();
                if let Some(seq) = call.context.get("seq").and_then(|v| v.as_u64()) {
                    if let Ok(mut map) = seen.lock() {
                        map.insert(seq, now);
                    }
                }
                async move { StageReply::Succeeded { result: json!(null) } }
            },
            None,
            settings(Some(60.0)),
        );
        running.push(tokio::spawn(worker.run(stop.clone())));
        started.push((name, times));
    }
    // let the workers start, listen and go idle
    tokio::time::sleep(Duration::from_millis(1500)).await;

    let count = (duration.as_secs_f64() * rate).ceil().max(1.0) as u64;
    let every = Duration::from_secs_f64(1.0 / rate);
    let c = pool.get().await?;
    let mut sent: Vec<HashMap<u64, (Instant, Instant)>> = vec![HashMap::with_capacity(count as usize); N];
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    for seq in 0..count {
        for ((name, _), sent) in started.iter().zip(sent.iter_mut()) {
            tick.tick().await;
            let task = NewTask { context: Some(json!({ "seq": seq })), ..Default::default() };
            let at = Instant::now();
            api::create_task(&c, name, &task).await?;
            sent.insert(seq, (at, Instant::now()));
        }
    }
    let all_started = || started.iter().all(|(_, m)| m.lock().map(|m| m.len() as u64 >= count).unwrap_or(true));
    let deadline = Instant::now() + Duration::from_secs(10);
    while !all_started() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.cancel();
    for run in running {
        run.await.map_err(|e| Error::Config(format!("bench worker: {e}")))??;
    }
    let mut latencies = Vec::with_capacity(N);
    for ((name, times), sent) in started.iter().zip(&sent) {
        let got = times.lock().map_err(|_| Error::Config("wake latency: poisoned lock".into()))?;
        if (got.len() as u64) < count {
            return Err(Error::Config(format!(
                "wake latency ({name}): only {} of {count} tasks started within 10 s",
                got.len()
            )));
        }
        latencies.push(latency(sent, &got));
    }
    latencies.try_into().map_err(|_| Error::Config("wake latency: a worker's figures are missing".into()))
}

/// From each task's create_task call (its start and its return) to its function's start.
fn latency(sent: &HashMap<u64, (Instant, Instant)>, started: &HashMap<u64, Instant>) -> Latency {
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let mut samples: Vec<f64> = Vec::with_capacity(sent.len());
    let mut after_commit: Vec<f64> = Vec::with_capacity(sent.len());
    for (seq, (called, returned)) in sent {
        if let Some(start) = started.get(seq) {
            samples.push(ms(start.saturating_duration_since(*called)));
            after_commit.push(if *start >= *returned { ms(*start - *returned) } else { -ms(*returned - *start) });
        }
    }
    samples.sort_by(f64::total_cmp);
    after_commit.sort_by(f64::total_cmp);
    Latency {
        p50: percentile(&samples, 0.5),
        p95: percentile(&samples, 0.95),
        p99: percentile(&samples, 0.99),
        after_commit_p50: percentile(&after_commit, 0.5),
    }
}
