//! `asyncflow worker --server URL`: the worker binary claiming and reporting through an
//! `asyncflow serve` (the HTTP worker protocol) with no database connection of its own; the
//! protocol's reads for it (next-due, held) and fenced release; a server killed and restarted
//! mid-run; a hold whose answer is lost; holds that wait (the long-poll, in `hold_wait.rs`).
use crate::common;

#[path = "worker_remote/hold_wait.rs"]
mod hold_wait;

use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use asyncflow::db::api;
use asyncflow::task::{NewTask, Task, TaskStatus};
use asyncflow::task_type::TaskTypeUpdate;
use asyncflow::{TaskId, TypeName};
use common::{wait_until, Folder, TestDb};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const TOKEN: &str = "remote-worker-token-0123456789";
/// Where a worker on a server would find a database if it wrongly looked for one: nowhere.
const NO_DATABASE: &str = "postgres://nobody@127.0.0.1:1/none";

/// A functions folder with one function `name` whose `run` is `body` (sh).
fn folder(name: &str, toml: &str, body: &str) -> Folder {
    Folder::new(&[(name, toml, body)])
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// An `asyncflow serve` on `port`; killed when dropped.
struct Server(Child);

impl Server {
    async fn start(db: &TestDb, port: u16) -> Server {
        Server::start_with(db, port, &[]).await
    }

    /// With more `serve` options.
    async fn start_with(db: &TestDb, port: u16, extra: &[&str]) -> Server {
        let child = Command::new(env!("CARGO_BIN_EXE_asyncflow"))
            .args(["serve", "--listen", &format!("127.0.0.1:{port}"), "--token", TOKEN])
            .args(extra)
            .env("DATABASE_URL", &db.url)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start asyncflow serve");
        let ready = format!("http://127.0.0.1:{port}/readyz");
        let client = reqwest::Client::new();
        wait_until(Duration::from_secs(30), "the server to be ready", || async {
            client.get(&ready).send().await.map(|r| r.status().is_success()).unwrap_or(false)
        })
        .await;
        Server(child)
    }

    fn kill(mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn worker(server: &str, dir: &Path, id: &str, extra: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_asyncflow"))
        .args(["worker", "--server", server, "--token", TOKEN, "--functions"])
        .arg(dir)
        .args(["--worker-id", id])
        .args(extra)
        .env("DATABASE_URL", NO_DATABASE)
        .env_remove("ASYNCFLOW_SERVER")
        .env_remove("ASYNCFLOW_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the worker binary")
}

/// Waits for the worker to exit; its status, stdout and stderr.
async fn wait_child(mut child: Child, timeout: Duration) -> (std::process::ExitStatus, String, String) {
    tokio::task::spawn_blocking(move || {
        let mut err = String::new();
        let mut stderr = child.stderr.take();
        let reader = std::thread::spawn(move || {
            if let Some(s) = stderr.as_mut() {
                let _ = s.read_to_string(&mut err);
            }
            err
        });
        let deadline = Instant::now() + timeout;
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the worker did not exit within {timeout:?}: {}", reader.join().unwrap_or_default());
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let mut out = String::new();
        if let Some(mut stdout) = child.stdout.take() {
            let _ = stdout.read_to_string(&mut out);
        }
        (status, out, reader.join().unwrap_or_default())
    })
    .await
    .unwrap()
}

async fn register(db: &TestDb, name: &str, settings: TaskTypeUpdate) {
    api::register_task_type(&db.conn().await, &TypeName::new(name).unwrap(), &settings).await.unwrap();
}

async fn tasks(db: &TestDb, ids: &[TaskId]) -> Vec<Task> {
    api::get_tasks(&db.conn().await, ids).await.unwrap()
}

async fn succeeded(db: &TestDb, ids: &[TaskId]) -> i64 {
    let counts = api::count_by_status_of(&db.conn().await, ids).await.unwrap();
    counts.iter().filter(|(s, _)| *s == TaskStatus::Succeeded).map(|(_, n)| n).sum()
}

/// The attempts in a task's schedule log never overlap in time (no two holders at once), and
/// each stage was finished by exactly one accepted report.
fn assert_one_holder_at_a_time(task: &Task, stages: &[&str]) {
    let mut spans: Vec<(i64, i64)> = task
        .schedule_log
        .iter()
        .filter_map(|e| {
            let start = e.start?.timestamp_millis();
            Some((start, start + e.cost_ms? as i64))
        })
        .collect();
    spans.sort();
    for pair in spans.windows(2) {
        assert!(pair[0].1 <= pair[1].0 + 1, "{}: overlapping attempts {pair:?}: {:?}", task.id, task.schedule_log);
    }
    for stage in stages {
        let done = task
            .schedule_log
            .iter()
            .filter(|e| {
                e.stage.as_deref() == Some(*stage) && matches!(e.outcome.as_deref(), Some("advance" | "succeed"))
            })
            .count();
        assert_eq!(done, 1, "{}: stage {stage} finished {done} times: {:?}", task.id, task.schedule_log);
    }
}

const PIPELINE: &str = r#"input=$(cat)
case "$ASYNCFLOW_STAGE" in
  probe) echo '{"next_stage": "transform", "context": {"probed": true}}' ;;
  transform) echo "{\"next_stage\": \"publish\", \"context\": {\"seen\": $input}}" ;;
  publish) echo "{\"result\": $input}" ;;
esac"#;

#[tokio::test]
async fn a_worker_on_a_server_runs_three_stages_with_no_database_and_exits_when_idle() {
    let db = TestDb::new().await;
    let port = free_port();
    let _server = Server::start(&db, port).await;
    let dir = folder(
        "pipe",
        "command = [\"./run\"]\n[settings]\ninitial_stage = \"probe\"\nschedule_interval = 0.2\n",
        PIPELINE,
    );
    register(&db, "pipe", TaskTypeUpdate { initial_stage: Some("probe".into()), ..Default::default() }).await;
    let c = db.conn().await;
    let new: Vec<NewTask> = (0..12).map(|i| NewTask::with_context(json!({"n": i}))).collect();
    let ids = api::create_tasks(&c, "pipe", &new).await.unwrap();
    let later = NewTask { run_at: Some(chrono::Utc::now() + chrono::Duration::hours(1)), ..Default::default() };
    let delayed = api::create_task(&c, "pipe", &later).await.unwrap();

    let server = format!("http://127.0.0.1:{port}");
    let child = worker(&server, &dir.0, "remote-1", &["--exit-when-idle", "--concurrency", "3"]);
    let (status, out, err) = wait_child(child, Duration::from_secs(60)).await;
    assert!(status.success(), "exit status {status:?}: {err}");
    assert!(out.contains("\"stopped_by\":\"Idle\"") && out.contains("\"succeeded\":12"), "{out}");
    assert!(out.contains("\"advanced\":24") && out.contains("\"refused\":0"), "{out}");
    for t in tasks(&db, &ids).await {
        assert_eq!(t.status, TaskStatus::Succeeded, "{}", t.id);
        let result = t.result.clone().unwrap();
        assert_eq!(result["stage"], "publish");
        assert_eq!(result["context"]["seen"]["context"], json!({"probed": true}), "context carried through stages");
        assert!(t.schedule_log.iter().all(|e| e.worker.as_deref() == Some("remote-1")), "{:?}", t.schedule_log);
        assert_one_holder_at_a_time(&t, &["probe", "transform", "publish"]);
    }
    let d = api::get_task(&c, delayed.as_str()).await.unwrap().unwrap();
    assert_eq!(d.status, TaskStatus::Pending, "the delayed task did not keep the worker alive");
}

#[tokio::test]
async fn the_worker_protocol_tells_next_due_and_held_tasks_and_releases_fenced() {
    let db = TestDb::new().await;
    let port = free_port();
    let _server = Server::start(&db, port).await;
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    let call = |method: reqwest::Method, path: &str, body: Option<Value>| {
        let mut r = http.request(method, format!("{base}{path}")).bearer_auth(TOKEN);
        if let Some(b) = body {
            r = r.json(&b);
        }
        async move {
            let res = r.send().await.unwrap();
            let status = res.status().as_u16();
            (status, res.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    use reqwest::Method;
    let (s, _) = call(Method::PUT, "/v1/task-types/far", Some(json!({"max_processing_time": 60}))).await;
    assert_eq!(s, 200);
    let (s, due) = call(Method::GET, "/v1/worker/next-due?type=far", None).await;
    assert_eq!((s, due["due"].clone(), due["wait_ms"].clone()), (200, Value::Null, Value::Null), "nothing pending");
    let run_at = (chrono::Utc::now() + chrono::Duration::seconds(60)).to_rfc3339();
    call(Method::POST, "/v1/tasks", Some(json!({"type": "far", "run_at": run_at}))).await;
    let (_, due) = call(Method::GET, "/v1/worker/next-due?type=far", None).await;
    let wait = due["wait_ms"].as_i64().unwrap();
    assert!((50_000..=60_000).contains(&wait), "a delayed task is due in about a minute: {due}");
    let (_, created) = call(Method::POST, "/v1/tasks", Some(json!({"type": "far"}))).await;
    let id = created["id"].as_str().unwrap().to_string();
    let (_, due) = call(Method::GET, "/v1/worker/next-due?type=far", None).await;
    assert_eq!(due["wait_ms"], 0, "a ready task: {due}");

    let (_, held) = call(Method::POST, "/v1/worker/hold", Some(json!({"type": "far", "worker_id": "w1"}))).await;
    let seq = held["tasks"][0]["claim_seq"].as_i64().unwrap();
    let (s, mine) = call(Method::POST, "/v1/worker/held", Some(json!({"type": "far", "worker_id": "w1"}))).await;
    assert_eq!(s, 200);
    assert_eq!(mine["tasks"].as_array().unwrap().len(), 1, "{mine}");
    assert_eq!((mine["tasks"][0]["task_id"].as_str(), mine["tasks"][0]["claim_seq"].as_i64()), (Some(&*id), Some(seq)));
    let (_, theirs) = call(Method::POST, "/v1/worker/held", Some(json!({"type": "far", "worker_id": "w2"}))).await;
    assert_eq!(theirs["tasks"], json!([]));

    // release is fenced like every report: another worker, or an old token, is refused with 409
    for (worker, claim_seq) in [("w2", seq), ("w1", seq + 1)] {
        let body = json!({"worker_id": worker, "task_id": id, "claim_seq": claim_seq});
        let (s, e) = call(Method::POST, "/v1/worker/release", Some(body)).await;
        assert_eq!((s, e["code"].as_str()), (409, Some("stale_fencing_token")), "{e}");
    }
    let body = json!({"worker_id": "w1", "task_id": id, "claim_seq": seq});
    let (s, released) = call(Method::POST, "/v1/worker/release", Some(body)).await;
    assert_eq!((s, released["status"].as_str()), (200, Some("pending")), "{released}");
    let t = api::get_task(&db.conn().await, &id).await.unwrap().unwrap();
    assert_eq!((t.status, t.attempt, t.owner), (TaskStatus::Pending, 0, None), "handed back, the try given back");

    // validated like the rest
    let cases = [
        (Method::GET, "/v1/worker/next-due?type=Bad-Name", None, 400),
        (Method::GET, "/v1/worker/next-due", None, 400),
        (Method::POST, "/v1/worker/held", Some(json!({"type": "far"})), 400),
        (Method::POST, "/v1/worker/held", Some(json!({"type": "far", "worker_id": "w", "x": 1})), 400),
        (Method::POST, "/v1/worker/held", Some(json!({"type": "no such", "worker_id": "w"})), 400),
        (
            Method::POST,
            "/v1/worker/release",
            Some(json!({"worker_id": "w1", "task_id": "far-1-999", "claim_seq": 1})),
            404,
        ),
    ];
    for (method, path, body, want) in cases {
        let (s, e) = call(method.clone(), path, body.clone()).await;
        assert_eq!(s, want, "{method} {path} {body:?}: {e}");
        assert!(e["message"].is_string(), "{e}");
    }
    let anonymous = reqwest::Client::new().get(format!("{base}/v1/worker/next-due?type=far")).send().await.unwrap();
    assert_eq!(anonymous.status().as_u16(), 401, "the bearer token guards the new routes too");
}

const SLOW_PIPELINE: &str = r#"cat > /dev/null
sleep 0.1
case "$ASYNCFLOW_STAGE" in
  one) echo '{"next_stage": "two"}' ;;
  two) echo '{"next_stage": "three"}' ;;
  three) echo "{\"result\": {\"task\": \"$ASYNCFLOW_TASK_ID\"}}" ;;
esac"#;

#[tokio::test]
async fn a_worker_carries_on_when_its_server_is_killed_and_restarted_on_the_same_port() {
    let db = TestDb::new().await;
    let port = free_port();
    let server = Server::start(&db, port).await;
    let toml = "command = [\"./run\"]\n[settings]\ninitial_stage = \"one\"\nschedule_interval = 0.2\n";
    let dir = folder("steps", toml, SLOW_PIPELINE);
    register(&db, "steps", TaskTypeUpdate { initial_stage: Some("one".into()), ..Default::default() }).await;
    let ids = api::create_tasks(&db.conn().await, "steps", &vec![NewTask::default(); 60]).await.unwrap();

    let url = format!("http://127.0.0.1:{port}");
    let child = worker(&url, &dir.0, "survivor", &["--exit-when-idle", "--concurrency", "4"]);
    wait_until(Duration::from_secs(60), "some tasks done before the crash", || async {
        succeeded(&db, &ids).await >= 10
    })
    .await;
    server.kill();
    // Down long enough for claims, reports and idle checks to fail and be retried.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let done_while_down = succeeded(&db, &ids).await;
    assert!(done_while_down < ids.len() as i64, "the server went down mid-run");
    let _server = Server::start(&db, port).await;

    let (status, out, err) = wait_child(child, Duration::from_secs(120)).await;
    assert!(status.success(), "exit status {status:?}: {out} {err}");
    assert!(out.contains("\"stopped_by\":\"Idle\""), "{out}");
    assert!(err.contains("failed; retrying") || err.contains("claim failed"), "the outage was noticed: {err}");
    assert_eq!(succeeded(&db, &ids).await, ids.len() as i64, "every task succeeded: {out}");
    for t in tasks(&db, &ids).await {
        assert_eq!(t.result, Some(json!({"task": t.id.as_str()})));
        assert_one_holder_at_a_time(&t, &["one", "two", "three"]);
    }
}

/// A TCP proxy in front of `upstream` that, once armed, forwards the next hold request and then
/// cuts the connection instead of returning the answer: a hold whose answer is lost.
async fn lossy_proxy(upstream: u16, armed: Arc<AtomicBool>) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            let armed = armed.clone();
            tokio::spawn(async move {
                let Ok(mut server) = tokio::net::TcpStream::connect(("127.0.0.1", upstream)).await else { return };
                let (mut cr, mut cw) = client.split();
                let (mut sr, mut sw) = server.split();
                let cut = AtomicBool::new(false);
                let up = async {
                    let mut buf = vec![0u8; 64 * 1024];
                    loop {
                        let n = match cr.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => n,
                        };
                        if buf[..n].windows(20).any(|w| w == b"POST /v1/worker/hold")
                            && armed.swap(false, Ordering::SeqCst)
                        {
                            cut.store(true, Ordering::SeqCst);
                        }
                        if sw.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                };
                let down = async {
                    let mut buf = vec![0u8; 64 * 1024];
                    loop {
                        let n = match sr.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => n,
                        };
                        if cut.load(Ordering::SeqCst) {
                            return; // the answer is dropped with the connection
                        }
                        if cw.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                };
                tokio::select! {
                    _ = up => {}
                    _ = down => {}
                }
            });
        }
    });
    port
}

#[tokio::test]
async fn tasks_claimed_by_a_hold_whose_answer_was_lost_are_handed_back_and_run() {
    let db = TestDb::new().await;
    let port = free_port();
    let _server = Server::start(&db, port).await;
    // Long leases and no rescuer: only the worker itself can find the lost claims in time.
    let toml = "command = [\"./run\"]\n[settings]\nschedule_interval = 0.2\nmax_processing_time = 600\n";
    let dir = folder("lost", toml, "cat > /dev/null; echo '{\"result\": 1}'");
    register(&db, "lost", TaskTypeUpdate::default()).await;
    let ids = api::create_tasks(&db.conn().await, "lost", &vec![NewTask::default(); 5]).await.unwrap();
    let armed = Arc::new(AtomicBool::new(true));
    let proxy = lossy_proxy(port, armed.clone()).await;

    let child =
        worker(&format!("http://127.0.0.1:{proxy}"), &dir.0, "unlucky", &["--exit-when-idle", "--concurrency", "5"]);
    let (status, out, err) = wait_child(child, Duration::from_secs(60)).await;
    assert!(status.success(), "exit status {status:?}: {err}");
    assert!(!armed.load(Ordering::SeqCst), "the first hold's answer was cut");
    assert!(err.contains("handed back tasks claimed by a hold whose answer was lost"), "{err}");
    assert_eq!(succeeded(&db, &ids).await, 5, "{out}");
    let released: usize = tasks(&db, &ids)
        .await
        .iter()
        .map(|t| t.schedule_log.iter().filter(|e| e.outcome.as_deref() == Some("release")).count())
        .sum();
    assert!(released >= 1, "the lost claims were released, not left to expire");
}

/// Whether process `pid` has ended (gone, or a zombie waiting to be reaped).
fn process_ended(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

/// A cancel reaches a worker on a server at once, through the server's cancel stream
/// (`GET /v1/worker/cancels`), not at its next heartbeat: with the default 300 s lease the
/// heartbeat would come after 100 s.
#[tokio::test]
async fn cancelling_a_task_stops_its_call_on_a_worker_on_a_server_within_a_second() {
    let db = TestDb::new().await;
    let port = free_port();
    let _server = Server::start(&db, port).await;
    let dir = folder("sleeper", "command = [\"./run\"]\n", "echo $$ > pid\nexec sleep 200");
    let pid_file = dir.0.join("sleeper").join("pid");
    register(&db, "sleeper", TaskTypeUpdate { schedule_interval: Some(0.2), ..Default::default() }).await;
    let server = format!("http://127.0.0.1:{port}");
    let child = worker(&server, &dir.0, "remote-cancel", &["--exit-when-idle"]);
    let id = api::create_task(&db.conn().await, "sleeper", &NewTask::default()).await.unwrap();
    let mut pid = 0;
    wait_until(Duration::from_secs(20), "the function started", || {
        let read = std::fs::read_to_string(&pid_file).ok().and_then(|s| s.trim().parse::<i32>().ok());
        if let Some(p) = read {
            pid = p;
        }
        async move { read.is_some() }
    })
    .await;
    // the worker opens its cancel stream as it starts; give it a moment past the first claim
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!process_ended(pid));
    let cancelled_at = Instant::now();
    assert!(api::cancel_task(&db.conn().await, id.as_str()).await.unwrap());
    while !process_ended(pid) {
        assert!(cancelled_at.elapsed() < Duration::from_secs(10), "the call ran on after its task was cancelled");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let took = cancelled_at.elapsed();
    eprintln!("from cancel_task to the process's end on a worker on a server: {took:?}");
    assert!(took < Duration::from_secs(1), "{took:?}");
    let (status, _out, err) = wait_child(child, Duration::from_secs(30)).await;
    assert!(status.success(), "exit status {status:?}: {err}");
    assert!(err.contains("task cancelled: stopping its call"), "{err}");
    let t = api::get_task(&db.conn().await, id.as_str()).await.unwrap().unwrap();
    assert_eq!(t.status, TaskStatus::Cancelled);
}

/// The cancel stream: `{}` first, then the cancels of the types asked for only, as
/// newline-delimited JSON; bad arguments are a 400.
#[tokio::test]
async fn the_cancel_stream_sends_the_cancels_of_its_types() {
    let db = TestDb::new().await;
    let port = free_port();
    let _server = Server::start(&db, port).await;
    register(&db, "watched", TaskTypeUpdate::default()).await;
    register(&db, "other", TaskTypeUpdate::default()).await;
    let c = db.conn().await;
    let watched = api::create_task(&c, "watched", &NewTask::default()).await.unwrap();
    let other = api::create_task(&c, "other", &NewTask::default()).await.unwrap();
    let mut seqs = Vec::new();
    for ty in ["watched", "other"] {
        let owner = asyncflow::WorkerId::new("w").unwrap();
        let claimed = api::claim_tasks(&c, ty, &owner, 1, None).await.unwrap();
        assert_eq!(claimed.len(), 1);
        seqs.push(claimed[0].claim_seq);
    }
    let http = reqwest::Client::new();
    let base = format!("http://127.0.0.1:{port}/v1/worker/cancels");
    for bad in ["types=", "types=no%20such", "types=watched&wait=0", "types=watched&wait=3601", "wait=5"] {
        let r = http.get(format!("{base}?{bad}")).bearer_auth(TOKEN).send().await.unwrap();
        assert_eq!(r.status(), 400, "{bad}");
    }
    let mut stream = http.get(format!("{base}?types=watched&wait=5")).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(stream.status(), 200);
    assert_eq!(stream.headers()["content-type"], "application/x-ndjson");
    let first = stream.chunk().await.unwrap().unwrap();
    assert_eq!(&first[..], b"{}\n", "the first line says the stream is live");
    assert!(api::cancel_task(&c, other.as_str()).await.unwrap());
    assert!(api::cancel_task(&c, watched.as_str()).await.unwrap());
    let mut text = String::new();
    while !text.contains('\n') {
        let chunk = tokio::time::timeout(Duration::from_secs(5), stream.chunk()).await.unwrap().unwrap().unwrap();
        text.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    let line: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(line, json!({"task_id": watched.as_str(), "claim_seq": seqs[0]}), "only the watched type's cancel");
    // the stream ends by itself after `wait`
    let rest = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(chunk) = stream.chunk().await.unwrap() {
            assert!(!String::from_utf8_lossy(&chunk).contains(other.as_str()), "another type's cancel");
        }
    })
    .await;
    assert!(rest.is_ok(), "the stream did not end after its wait");
}

/// A worker on a server keeps a heartbeat row as a worker on the database does (through `POST
/// /v1/worker/presence`), so `GET /v1/workers` lists it, and removes it when it stops cleanly
/// (`POST /v1/worker/gone`).
#[tokio::test]
async fn a_worker_on_a_server_is_listed_while_it_runs_and_gone_after_a_clean_stop() {
    let db = TestDb::new().await;
    let port = free_port();
    let _server = Server::start(&db, port).await;
    let dir = folder("echo", "command = [\"./run\"]\n", "#!/bin/sh\ncat >/dev/null\necho '{\"result\": {}}'\n");
    register(&db, "echo", TaskTypeUpdate::default()).await;
    let server = format!("http://127.0.0.1:{port}");
    let child = worker(&server, &dir.0, "remote-listed", &[]);
    let c = db.conn().await;
    wait_until(Duration::from_secs(30), "the remote worker's row", || async {
        api::list_workers(&c, 60.0, None).await.unwrap().iter().any(|w| w.id == "remote-listed")
    })
    .await;
    let rows = api::list_workers(&c, 60.0, None).await.unwrap();
    let row = rows.iter().find(|w| w.id == "remote-listed").unwrap();
    assert_eq!(row.types, vec!["echo".to_string()]);
    assert_eq!(row.pid, i32::try_from(child.id()).unwrap());
    assert!(!row.host.is_empty());
    // SIGTERM: a clean stop removes the row
    let term = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(term.success());
    let (status, _, err) = wait_child(child, Duration::from_secs(30)).await;
    assert!(status.success(), "exit status {status:?}: {err}");
    assert!(api::list_workers(&c, 60.0, None).await.unwrap().is_empty(), "the row is gone");
    // bad presence bodies are refused, and write nothing
    let client = reqwest::Client::new();
    let post = |path: &'static str, body: Value| {
        let (client, server) = (&client, &server);
        async move {
            client
                .post(format!("{server}{path}"))
                .bearer_auth(TOKEN)
                .json(&body)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    let good = json!({"worker_id": "w", "host": "h", "pid": 1, "types": ["echo"], "in_flight": 0,
        "started_at": "2030-01-01T00:00:00Z"});
    let mut negative = good.clone();
    negative["in_flight"] = json!(-1);
    let mut long_id = good.clone();
    long_id["worker_id"] = json!("x".repeat(300));
    let mut extra = good.clone();
    extra["colour"] = json!("red");
    for bad in [negative, long_id, extra, json!({"worker_id": "w"})] {
        assert_eq!(post("/v1/worker/presence", bad.clone()).await, 400, "{bad}");
    }
    assert!(api::list_workers(&c, 60.0, None).await.unwrap().is_empty());
    assert_eq!(post("/v1/worker/presence", good).await, 200);
    assert_eq!(api::list_workers(&c, 60.0, None).await.unwrap().len(), 1);
    assert_eq!(post("/v1/worker/gone", json!({"worker_id": "w"})).await, 200);
    assert!(api::list_workers(&c, 60.0, None).await.unwrap().is_empty());
}
