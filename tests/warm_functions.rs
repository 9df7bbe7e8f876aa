//! Warm functions (`mode = "warm"`) through the real worker binary and real processes: crashes,
//! protocol breaks, timeouts and cancels that kill only their own instance, recycling, SIGTERM
//! hand-back, `--exit-when-idle`; the Python helper library in both modes; HTTP connection reuse.
use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use asyncflow::db::api;
use asyncflow::task::{NewTask, Task, TaskStatus};
use asyncflow::TaskId;
use common::process::{signal, wait_child};
use common::{wait_until, Folder, TestDb};
use serde_json::json;

/// A Python function on the helper library. It leaves marks in `$AF_MARKS`: `start-<pid>` when
/// it starts, `busy-<pid>` when a call sleeps, `broke-<pid>` before it breaks the protocol,
/// `term-<pid>` on SIGTERM, `exit-<pid>` when its loop ends (stdin closed). On the first attempt
/// of a call, `context.do` picks a misdeed: crash, garbage, wrong_id, oversize. A call with
/// `context.progress` first writes a progress line naming the call `context.other_call` (when
/// given), then reports its progress through the library, leaves `progress-<pid>` and waits for
/// a `release` mark (at most 60 s).
const FIXTURE: &str = r#"
import atexit, os, signal, sys, time
sys.path.insert(0, os.environ["AF_SDK"])
import asyncflow_function

def mark(what):
    with open(os.path.join(os.environ["AF_MARKS"], "%s-%d" % (what, os.getpid())), "w") as f:
        f.write(what)

def on_term(signum, frame):
    mark("term")
    os._exit(0)

mark("start")
signal.signal(signal.SIGTERM, on_term)
atexit.register(mark, "exit")

def handle(call):
    ctx = call.get("context") or {}
    first = call["attempt"] == 1
    do = ctx.get("do") if first else None
    if do == "crash":
        mark("crash")
        sys.stderr.write("about to crash\n")
        sys.stderr.flush()
        os._exit(3)
    if do == "garbage":
        mark("broke")
        os.write(1, b"this is not json\n")
    if do == "wrong_id":
        mark("broke")
        os.write(1, b'{"id": "nope", "result": 1}\n')
    if do == "oversize":
        mark("broke")
        os.write(1, b'{"result": "' + b"x" * (1100 * 1024) + b'"}\n')
    if "sleep" in ctx:
        mark("busy")
        time.sleep(ctx["sleep"])
    if "progress" in ctx:
        if "other_call" in ctx:
            sys.stderr.write('asyncflow:progress:%s {"other": true}\n' % ctx["other_call"])
            sys.stderr.flush()
        asyncflow_function.progress(ctx["progress"])
        mark("progress")
        release = os.path.join(os.environ["AF_MARKS"], "release")
        for _ in range(3000):
            if os.path.exists(release):
                break
            time.sleep(0.02)
    return {"result": {"pid": os.getpid(), "attempt": call["attempt"]}}

asyncflow_function.run(handle)
"#;

/// A Node function on the helper library: a throw on the first attempt when `context.throw`.
const NODE_FIXTURE: &str = r#"
const { run } = require(process.env.AF_NODE_SDK);
run(async (call) => {
  console.log('a log line, sent to stderr');
  if (call.context.throw && call.attempt === 1) throw new Error('thrown on purpose');
  return { result: { pid: process.pid, attempt: call.attempt } };
});
"#;

struct Setup {
    folder: Folder,
    marks: PathBuf,
}

impl Setup {
    /// One function per (type, extra function.toml lines), each running the Python fixture.
    fn new(functions: &[(&str, &str)]) -> Setup {
        Setup::running(functions, "exec python3 \"$AF_FIXTURE\"")
    }

    /// One function per (type, extra function.toml lines), each running `run` (a sh script).
    fn running(functions: &[(&str, &str)], run: &str) -> Setup {
        let specs: Vec<(String, String)> = functions
            .iter()
            .map(|(name, toml)| {
                (name.to_string(), format!("command = [\"./run\"]\n{toml}\n[settings]\nschedule_interval = 0.2\n"))
            })
            .collect();
        let specs: Vec<(&str, &str, &str)> = specs.iter().map(|(n, t)| (n.as_str(), t.as_str(), run)).collect();
        let folder = Folder::new(&specs);
        std::fs::write(folder.0.join("fixture.py"), FIXTURE).unwrap();
        std::fs::write(folder.0.join("fixture.js"), NODE_FIXTURE).unwrap();
        let marks = folder.0.join("marks");
        std::fs::create_dir_all(&marks).unwrap();
        Setup { folder, marks }
    }

    fn worker(&self, db: &TestDb, extra: &[&str]) -> Child {
        let sdk = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("functions/sdk");
        Command::new(env!("CARGO_BIN_EXE_asyncflow"))
            .args(["worker", "--no-maintenance", "--functions"])
            .arg(&self.folder.0)
            .args(extra)
            .env("DATABASE_URL", &db.url)
            .env("ASYNCFLOW_LOG", "asyncflow=debug")
            .env("AF_FIXTURE", self.folder.0.join("fixture.py"))
            .env("AF_MARKS", &self.marks)
            .env("AF_SDK", sdk.join("python"))
            .env("AF_NODE_SDK", sdk.join("node/asyncflow-function.js"))
            .env("AF_NODE_FIXTURE", self.folder.0.join("fixture.js"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the worker binary")
    }

    /// The pids with a mark of this kind.
    fn marked(&self, what: &str) -> BTreeSet<i32> {
        std::fs::read_dir(&self.marks)
            .unwrap()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.strip_prefix(&format!("{what}-"))?.parse().ok())
            .collect()
    }

    fn stopped_gracefully(&self, pid: i32) -> bool {
        self.marked("term").contains(&pid) || self.marked("exit").contains(&pid)
    }
}

/// Whether the process is gone (or a zombie: dead, not yet reaped).
fn dead(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

async fn wait_dead(pid: i32) {
    wait_until(Duration::from_secs(15), &format!("process {pid} gone"), || async move { dead(pid) }).await;
}

/// Kills the worker when the test ends, however it ends.
struct Running(Option<Child>);

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(child) = self.0.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

async fn register(db: &TestDb, name: &str, settings: asyncflow::task_type::TaskTypeUpdate) {
    api::register_task_type(&db.conn().await, &asyncflow::TypeName::new(name).unwrap(), &settings).await.unwrap();
}

fn retry_settings(max_retry_num: i32) -> asyncflow::task_type::TaskTypeUpdate {
    asyncflow::task_type::TaskTypeUpdate {
        max_retry_num: Some(max_retry_num),
        max_retry_interval: Some(-1),
        ..Default::default()
    }
}

async fn get(db: &TestDb, id: &TaskId) -> Task {
    api::get_task(&db.conn().await, id.as_str()).await.unwrap().unwrap()
}

async fn create(db: &TestDb, ty: &str, context: serde_json::Value) -> TaskId {
    api::create_task(&db.conn().await, ty, &NewTask::with_context(context)).await.unwrap()
}

/// Waits until the task is final; returns it.
async fn finished(db: &TestDb, id: &TaskId) -> Task {
    wait_until(Duration::from_secs(60), &format!("task {id} final"), || async { get(db, id).await.status.is_final() })
        .await;
    get(db, id).await
}

fn pid_of(task: &Task) -> i32 {
    let result = task.result.as_ref().unwrap_or_else(|| panic!("no result: {:?}", task.error));
    result["pid"].as_i64().unwrap() as i32
}

/// The pid that served each task, every one of them succeeded.
async fn served_by(db: &TestDb, ids: &[TaskId]) -> Vec<i32> {
    let mut pids = Vec::new();
    for id in ids {
        let t = get(db, id).await;
        assert_eq!(t.status, TaskStatus::Succeeded, "{:?}", t.schedule_log);
        pids.push(pid_of(&t));
    }
    pids
}

fn first_error(task: &Task) -> String {
    task.schedule_log.first().and_then(|e| e.error.clone()).unwrap_or_default()
}

#[tokio::test]
async fn a_crashed_instance_fails_its_call_with_retry_and_is_replaced() {
    let db = TestDb::new().await;
    let setup = Setup::new(&[("warmy", "mode = \"warm\"\ninstances = 1\n")]);
    register(&db, "warmy", retry_settings(3)).await;
    let _worker = Running(Some(setup.worker(&db, &[])));
    let before = finished(&db, &create(&db, "warmy", json!({})).await).await;
    let crashing = finished(&db, &create(&db, "warmy", json!({"do": "crash"})).await).await;
    assert_eq!(crashing.status, TaskStatus::Succeeded, "{:?}", crashing.schedule_log);
    assert_eq!(crashing.retry_count, 1);
    let error = first_error(&crashing);
    assert!(error.contains("exited (exit status 3)") && error.contains("about to crash"), "{error}");
    let crashed = *setup.marked("crash").iter().next().expect("the crash left its mark");
    assert_eq!(crashed, pid_of(&before), "the one instance served the call before the crash");
    wait_dead(crashed).await;
    assert_ne!(pid_of(&crashing), crashed, "the retry ran on a new instance");
    assert_eq!(setup.marked("start").len(), 2);
}

#[tokio::test]
async fn protocol_breaks_fail_the_call_with_retry_and_restart_the_instance() {
    let db = TestDb::new().await;
    let setup = Setup::new(&[("warmy", "mode = \"warm\"\ninstances = 1\n")]);
    register(&db, "warmy", retry_settings(3)).await;
    let _worker = Running(Some(setup.worker(&db, &[])));
    for (misdeed, expected) in [
        ("garbage", "a reply line that is not JSON"),
        ("wrong_id", "a reply with id \"nope\""),
        ("oversize", "a reply line longer than 1048576 bytes"),
    ] {
        let broke_before = setup.marked("broke");
        let t = finished(&db, &create(&db, "warmy", json!({"do": misdeed})).await).await;
        assert_eq!((t.status, t.retry_count), (TaskStatus::Succeeded, 1), "{misdeed}: {:?}", t.schedule_log);
        let error = first_error(&t);
        assert!(error.contains("broke the protocol") && error.contains(expected), "{misdeed}: {error}");
        let broke: Vec<i32> = setup.marked("broke").difference(&broke_before).copied().collect();
        assert_eq!(broke.len(), 1, "{misdeed}");
        wait_dead(broke[0]).await;
        assert_ne!(pid_of(&t), broke[0], "{misdeed}: the retry ran on a new instance");
    }
}

/// Starts an instance with a quick call, sends a 60 s call to it, starts a second instance with
/// another quick call; returns (long call, pid running it, pid of the other instance).
async fn one_busy_one_idle(db: &TestDb, setup: &Setup) -> (TaskId, i32, i32) {
    let first = pid_of(&finished(db, &create(db, "warmy", json!({})).await).await);
    let long = create(db, "warmy", json!({"sleep": 60})).await;
    wait_until(Duration::from_secs(30), "the long call running", || async { !setup.marked("busy").is_empty() }).await;
    let busy = *setup.marked("busy").iter().next().unwrap();
    assert_eq!(busy, first, "the idle instance took the long call");
    let other = pid_of(&finished(db, &create(db, "warmy", json!({})).await).await);
    assert_ne!(other, busy, "a second instance served the quick call");
    (long, busy, other)
}

/// The instance `busy` is gone, `other` lives on and serves the next call.
async fn only_busy_died(db: &TestDb, busy: i32, other: i32) {
    wait_dead(busy).await;
    assert!(!dead(other), "the other instance lives on");
    let after = finished(db, &create(db, "warmy", json!({})).await).await;
    assert_eq!(pid_of(&after), other, "the other instance serves the next call");
}

#[tokio::test]
async fn a_timed_out_call_kills_only_its_own_instance() {
    let db = TestDb::new().await;
    let setup = Setup::new(&[("warmy", "mode = \"warm\"\ninstances = 2\ntimeout = 3\n")]);
    register(&db, "warmy", retry_settings(0)).await;
    let _worker = Running(Some(setup.worker(&db, &["--concurrency", "4"])));
    let (long, busy, other) = one_busy_one_idle(&db, &setup).await;
    let t = finished(&db, &long).await;
    assert_eq!(t.status, TaskStatus::Failed);
    assert!(first_error(&t).contains("timed out after 3 s"), "{:?}", t.schedule_log);
    only_busy_died(&db, busy, other).await;
}

#[tokio::test]
async fn a_cancelled_call_kills_only_its_own_instance() {
    let db = TestDb::new().await;
    let setup = Setup::new(&[("warmy", "mode = \"warm\"\ninstances = 2\n")]);
    register(&db, "warmy", retry_settings(3)).await;
    let _worker = Running(Some(setup.worker(&db, &["--concurrency", "4"])));
    let (long, busy, other) = one_busy_one_idle(&db, &setup).await;
    assert!(api::cancel_task(&db.conn().await, long.as_str()).await.unwrap());
    only_busy_died(&db, busy, other).await;
    assert_eq!(get(&db, &long).await.status, TaskStatus::Cancelled);
}

#[tokio::test]
async fn instances_are_recycled_after_max_calls_per_instance() {
    let db = TestDb::new().await;
    let setup = Setup::new(&[("warmy", "mode = \"warm\"\ninstances = 1\nmax_calls_per_instance = 3\n")]);
    register(&db, "warmy", retry_settings(0)).await;
    let ids = api::create_tasks(&db.conn().await, "warmy", &vec![NewTask::with_context(json!({})); 7]).await.unwrap();
    let child = setup.worker(&db, &["--exit-when-idle", "--concurrency", "4"]);
    let (status, out) = wait_child(child, Duration::from_secs(60)).await;
    assert!(status.success(), "{status:?}: {out}");
    let mut calls: BTreeMap<i32, usize> = BTreeMap::new();
    for pid in served_by(&db, &ids).await {
        *calls.entry(pid).or_default() += 1;
    }
    assert_eq!(calls.values().copied().collect::<Vec<_>>().iter().sum::<usize>(), 7);
    assert!(calls.values().all(|&n| n <= 3), "{calls:?}");
    assert!(calls.len() >= 3, "{calls:?}");
    for pid in calls.keys() {
        assert!(dead(*pid));
        assert!(setup.stopped_gracefully(*pid), "instance {pid} was retired by stdin's end or SIGTERM");
    }
}

#[tokio::test]
async fn sigterm_hands_the_running_call_back_and_stops_every_instance() {
    let db = TestDb::new().await;
    let setup = Setup::new(&[("warmy", "mode = \"warm\"\ninstances = 2\n")]);
    register(&db, "warmy", retry_settings(3)).await;
    let mut worker = Running(Some(setup.worker(&db, &["--concurrency", "4", "--shutdown-grace", "1s"])));
    let (long, busy, other) = one_busy_one_idle(&db, &setup).await;
    let child = worker.0.take().unwrap();
    signal(&child, nix::sys::signal::Signal::SIGTERM);
    let (status, out) = wait_child(child, Duration::from_secs(30)).await;
    assert!(status.success(), "{status:?}: {out}");
    assert!(out.contains("\"released\":1"), "{out}");
    let t = get(&db, &long).await;
    assert_eq!((t.status, t.attempt, t.retry_count, t.owner), (TaskStatus::Pending, 0, 0, None));
    assert!(dead(busy) && dead(other));
    assert!(setup.stopped_gracefully(other), "the idle instance got the end of stdin or SIGTERM");
    assert!(!setup.stopped_gracefully(busy), "the running one was killed with its call");
}

#[tokio::test]
async fn exit_when_idle_stops_warm_instances_and_the_library_serves_forked_calls_too() {
    let db = TestDb::new().await;
    let setup = Setup::new(&[("warmy", "mode = \"warm\"\ninstances = 2\n"), ("forked", "")]);
    register(&db, "warmy", retry_settings(0)).await;
    register(&db, "forked", retry_settings(0)).await;
    let c = db.conn().await;
    let warm = api::create_tasks(&c, "warmy", &vec![NewTask::with_context(json!({})); 20]).await.unwrap();
    let forked = api::create_tasks(&c, "forked", &vec![NewTask::with_context(json!({})); 3]).await.unwrap();
    let child = setup.worker(&db, &["--exit-when-idle", "--concurrency", "4"]);
    let (status, out) = wait_child(child, Duration::from_secs(60)).await;
    assert!(status.success(), "{status:?}: {out}");
    assert!(out.contains("\"stopped_by\":\"Idle\""), "{out}");
    let warm_pids: BTreeSet<i32> = served_by(&db, &warm).await.into_iter().collect();
    assert!(warm_pids.len() <= 2, "{warm_pids:?}");
    for pid in &warm_pids {
        assert!(dead(*pid), "instance {pid} stopped with the worker");
        assert!(setup.stopped_gracefully(*pid));
    }
    let forked_pids: BTreeSet<i32> = served_by(&db, &forked).await.into_iter().collect();
    assert_eq!(forked_pids.len(), 3, "one process per call without mode = \"warm\"");
    assert_eq!(setup.marked("start").len(), warm_pids.len() + 3);
}

/// An HTTP function's calls share one kept-alive connection.
#[tokio::test]
async fn http_function_calls_reuse_one_connection() {
    use asyncflow::function::http::HttpFunction;
    use asyncflow::function::{Function, StageCall, StageReply};
    use std::net::SocketAddr;
    use std::sync::{Arc, Mutex};
    let peers: Arc<Mutex<BTreeSet<SocketAddr>>> = Arc::default();
    let seen = peers.clone();
    let app = axum::Router::new().route(
        "/fn",
        axum::routing::post(
            move |axum::extract::ConnectInfo(peer): axum::extract::ConnectInfo<SocketAddr>| async move {
                seen.lock().unwrap().insert(peer);
                axum::Json(json!({"result": 1}))
            },
        ),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await.unwrap()
    });
    let url = reqwest::Url::parse(&format!("http://{addr}/fn")).unwrap();
    let f = HttpFunction::new(url, Some(Duration::from_secs(10)), None, 1024 * 1024).unwrap();
    let call: StageCall = serde_json::from_value(json!({
        "task_id": "t", "type": "x", "stage": "s", "context": {}, "attempt": 1, "priority": 0,
        "user_id": null, "deadline": "2030-01-01T00:00:00Z"
    }))
    .unwrap();
    for _ in 0..20 {
        assert_eq!(f.call(call.clone()).await, StageReply::Succeeded { result: json!(1) });
    }
    assert_eq!(peers.lock().unwrap().len(), 1, "twenty calls, one connection");
}

#[tokio::test]
async fn a_node_function_on_the_helper_library_serves_warm_calls_and_survives_a_throw() {
    let db = TestDb::new().await;
    let setup = Setup::running(&[("nodey", "mode = \"warm\"\ninstances = 1\n")], "exec node \"$AF_NODE_FIXTURE\"");
    register(&db, "nodey", retry_settings(3)).await;
    let c = db.conn().await;
    let plain = api::create_tasks(&c, "nodey", &vec![NewTask::with_context(json!({})); 6]).await.unwrap();
    let throwing = api::create_task(&c, "nodey", &NewTask::with_context(json!({"throw": true}))).await.unwrap();
    // not --exit-when-idle: the throwing task's retry is due a second later
    let _worker = Running(Some(setup.worker(&db, &["--concurrency", "4"])));
    let t = finished(&db, &throwing).await;
    for id in &plain {
        finished(&db, id).await;
    }
    let pids: BTreeSet<i32> = served_by(&db, &plain).await.into_iter().collect();
    assert_eq!(pids.len(), 1, "one process served every call: {pids:?}");
    assert_eq!((t.status, t.retry_count), (TaskStatus::Succeeded, 1), "{:?}", t.schedule_log);
    assert!(first_error(&t).contains("Error: thrown on purpose"), "{:?}", t.schedule_log);
    assert!(pids.contains(&pid_of(&t)), "the throw was the call's failure, not the process's");
}

/// The Python fixture as a warm function of one instance, without a worker.
fn library_function(setup: &Setup, name: &str, idle_stop: Duration) -> asyncflow::function::warm::WarmFunction {
    use asyncflow::function::warm::{WarmFunction, WarmOptions};
    let sdk = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("functions/sdk/python");
    let script = format!(
        "AF_SDK='{}' AF_MARKS='{}' exec python3 '{}'",
        sdk.display(),
        setup.marks.display(),
        setup.folder.0.join("fixture.py").display()
    );
    let options = WarmOptions {
        instances: 1,
        concurrency: 1,
        send_ahead: 0,
        max_calls_per_instance: None,
        timeout: None,
        max_reply: asyncflow::function::exec::MAX_REPLY_BYTES_DEFAULT,
        idle_stop,
    };
    WarmFunction::new(name, vec!["sh".into(), "-c".into(), script], setup.folder.0.clone(), vec![], options)
}

/// A stage call with this context.
fn call_with(context: serde_json::Value) -> asyncflow::function::StageCall {
    serde_json::from_value(json!({
        "task_id": "t-1-1", "type": "t", "stage": "s", "context": context, "attempt": 1, "priority": 0,
        "user_id": null, "deadline": "2030-01-01T00:00:00Z"
    }))
    .unwrap()
}

/// The library's warm function alone: an instance idle past `idle_stop` is stopped (end of stdin,
/// SIGTERM), and the next call starts another.
#[tokio::test]
async fn an_idle_instance_is_stopped_and_the_next_call_starts_another() {
    use asyncflow::function::Function;
    let setup = Setup::new(&[("idle", "")]);
    let f = library_function(&setup, "idle", Duration::from_secs(1));
    let call = call_with(json!({}));
    let pid = |reply: asyncflow::function::StageReply| match reply {
        asyncflow::function::StageReply::Succeeded { result } => result["pid"].as_i64().unwrap() as i32,
        other => panic!("{other:?}"),
    };
    let first = pid(f.call(call.clone()).await);
    assert_eq!(pid(f.call(call.clone()).await), first, "the instance served the second call too");
    wait_dead(first).await;
    assert!(setup.stopped_gracefully(first), "stopped by the end of stdin or SIGTERM");
    let again = pid(f.call(call).await);
    assert_ne!(again, first, "a new instance for the next call");
    f.stop().await;
    wait_dead(again).await;
    assert!(setup.stopped_gracefully(again), "stop() ends the instance gracefully");
}

/// Lets the fixture's calls waiting for a `release` mark end.
fn release(setup: &Setup) {
    std::fs::write(setup.marks.join("release"), "release").unwrap();
}

#[tokio::test]
async fn a_warm_python_function_reports_progress_with_the_helper_library_and_get_task_shows_it_while_the_call_runs() {
    let db = TestDb::new().await;
    let setup = Setup::new(&[("warmy", "mode = \"warm\"\ninstances = 1\n")]);
    // the default lease: the worker looks every second for progress to send with a heartbeat
    // (a short lease would make a loaded machine's late heartbeat a lost call)
    register(&db, "warmy", retry_settings(0)).await;
    let _worker = Running(Some(setup.worker(&db, &[])));
    // a first call, so that the one reporting progress is not the instance's first
    let before = pid_of(&finished(&db, &create(&db, "warmy", json!({})).await).await);
    let progress = json!({"percent": 40, "message": "encoding"});
    let id = create(&db, "warmy", json!({"progress": progress})).await;
    wait_until(Duration::from_secs(30), "progress in get_task while the call runs", || async {
        let t = get(&db, &id).await;
        t.status == TaskStatus::Running && t.progress.as_ref() == Some(&progress)
    })
    .await;
    assert_eq!(setup.marked("progress"), BTreeSet::from([before]), "the warm instance reported it");
    release(&setup);
    let t = finished(&db, &id).await;
    assert_eq!(t.status, TaskStatus::Succeeded, "{:?}", t.schedule_log);
    assert_eq!(pid_of(&t), before, "one instance served both calls");
    assert_eq!(t.progress, Some(progress), "the task keeps its last progress");
}

/// The library's warm function alone: a progress line naming another call than the one in flight
/// (a line read late, after its call replied) is not taken for the call in flight.
#[tokio::test]
async fn a_progress_line_naming_another_call_is_not_taken_for_the_call_in_flight() {
    use asyncflow::function::{Function, StageReply};
    let setup = Setup::new(&[("named", "")]);
    let f = library_function(&setup, "named", Duration::from_secs(60));
    let call = call_with(json!({"progress": {"percent": 40}, "other_call": "999"}));
    let progress = call.progress.clone();
    let running = tokio::spawn(f.call(call));
    wait_until(Duration::from_secs(30), "the call's progress taken", || async { progress.newer_than(0).is_some() })
        .await;
    // stderr is read in order: the line naming call 999 came first, and was not taken (it
    // would have been version 1, and the call's own version 2)
    assert_eq!(progress.newer_than(0), Some((1, json!({"percent": 40}))));
    release(&setup);
    assert!(matches!(running.await.unwrap(), StageReply::Succeeded { .. }));
    f.stop().await;
}

/// A warm function without the library: it reads stdin in chunks, answers every call of a chunk
/// in order, and says in each reply how many calls the largest chunk so far held.
const CHUNKS_FIXTURE: &str = r#"
import json, os
buf, most = b"", 0
while True:
    chunk = os.read(0, 65536)
    if not chunk:
        break
    *lines, buf = (buf + chunk).split(b"\n")
    most = max(most, len(lines))
    out = b""
    for line in lines:
        call = json.loads(line)
        reply = {"id": call["id"], "result": {"pid": os.getpid(), "attempt": call["attempt"], "most": most}}
        out += json.dumps(reply).encode() + b"\n"
    os.write(1, out)
"#;

#[tokio::test]
async fn calls_sent_ahead_reach_an_instance_many_per_read_and_send_ahead_0_sends_one_at_a_time() {
    let db = TestDb::new().await;
    let setup = Setup::running(
        &[
            ("ahead", "mode = \"warm\"\ninstances = 1\n"),
            ("single", "mode = \"warm\"\ninstances = 1\nsend_ahead = 0\n"),
        ],
        "exec python3 ../chunks.py",
    );
    std::fs::write(setup.folder.0.join("chunks.py"), CHUNKS_FIXTURE).unwrap();
    register(&db, "ahead", retry_settings(0)).await;
    register(&db, "single", retry_settings(0)).await;
    let c = db.conn().await;
    let ahead = api::create_tasks(&c, "ahead", &vec![NewTask::with_context(json!({})); 200]).await.unwrap();
    let single = api::create_tasks(&c, "single", &vec![NewTask::with_context(json!({})); 50]).await.unwrap();
    let child = setup.worker(&db, &["--exit-when-idle", "--concurrency", "100"]);
    let (status, out) = wait_child(child, Duration::from_secs(60)).await;
    assert!(status.success(), "{status:?}: {out}");
    let most = |t: &Task| t.result.as_ref().and_then(|r| r["most"].as_i64()).unwrap_or_default();
    let mut pids = BTreeSet::new();
    let mut largest = 0;
    for id in &ahead {
        let t = get(&db, id).await;
        assert_eq!((t.status, t.attempt), (TaskStatus::Succeeded, 1), "{:?}", t.schedule_log);
        pids.insert(pid_of(&t));
        largest = largest.max(most(&t));
    }
    assert_eq!(pids.len(), 1, "one instance served every call: {pids:?}");
    assert!(largest > 1, "some read of the instance held several calls: {largest}");
    for id in &single {
        let t = get(&db, id).await;
        assert_eq!(t.status, TaskStatus::Succeeded, "{:?}", t.schedule_log);
        assert_eq!(most(&t), 1, "with send_ahead = 0 the instance has one call at a time");
    }
}

#[tokio::test]
async fn a_call_sent_ahead_times_out_from_when_its_instance_begins_it() {
    let db = TestDb::new().await;
    let setup = Setup::new(&[("warmy", "mode = \"warm\"\ninstances = 1\ntimeout = 2\n")]);
    register(&db, "warmy", retry_settings(0)).await;
    let c = db.conn().await;
    // two calls of 1.2 s on one instance: the second ends 2.4 s after it was sent
    let ids = api::create_tasks(&c, "warmy", &vec![NewTask::with_context(json!({"sleep": 1.2})); 2]).await.unwrap();
    let child = setup.worker(&db, &["--exit-when-idle", "--concurrency", "4"]);
    let (status, out) = wait_child(child, Duration::from_secs(60)).await;
    assert!(status.success(), "{status:?}: {out}");
    let pids: BTreeSet<i32> = served_by(&db, &ids).await.into_iter().collect();
    assert_eq!(pids.len(), 1, "one instance ran both, one after the other");
    for id in &ids {
        assert_eq!(get(&db, id).await.attempt, 1);
    }
}

/// A call of `sleep` seconds on the one instance, and three calls sent ahead behind it, in this
/// order: the long call, the pid running it, and the calls behind it (claimed, running). Each is
/// created once the one before is claimed: calls claimed together start in any order.
async fn calls_behind(db: &TestDb, setup: &Setup, sleep: f64) -> (TaskId, i32, Vec<TaskId>) {
    let long = create(db, "warmy", json!({"sleep": sleep})).await;
    wait_until(Duration::from_secs(30), "the long call running", || async { !setup.marked("busy").is_empty() }).await;
    let busy = *setup.marked("busy").iter().next().unwrap();
    let mut behind = Vec::new();
    for _ in 0..3 {
        let id = create(db, "warmy", json!({})).await;
        wait_until(Duration::from_secs(30), "the call behind it claimed", || async {
            get(db, &id).await.status == TaskStatus::Running
        })
        .await;
        behind.push(id);
    }
    (long, busy, behind)
}

#[tokio::test]
async fn the_calls_behind_a_timed_out_call_go_to_a_new_instance_unharmed() {
    let db = TestDb::new().await;
    let setup = Setup::new(&[("warmy", "mode = \"warm\"\ninstances = 1\ntimeout = 3\n")]);
    register(&db, "warmy", retry_settings(0)).await;
    let _worker = Running(Some(setup.worker(&db, &["--concurrency", "8"])));
    let (long, busy, behind) = calls_behind(&db, &setup, 60.0).await;
    let t = finished(&db, &long).await;
    assert!(first_error(&t).contains("timed out after 3 s"), "{:?}", t.schedule_log);
    wait_dead(busy).await;
    for id in &behind {
        let t = finished(&db, id).await;
        assert_eq!((t.status, t.attempt, t.retry_count), (TaskStatus::Succeeded, 1, 0), "{:?}", t.schedule_log);
        assert_ne!(pid_of(&t), busy, "a new instance ran it");
    }
}

#[tokio::test]
async fn a_call_cancelled_while_sent_ahead_lets_the_call_before_it_end_and_never_gets_an_answer() {
    let db = TestDb::new().await;
    let setup = Setup::new(&[("warmy", "mode = \"warm\"\ninstances = 1\n")]);
    register(&db, "warmy", retry_settings(3)).await;
    let _worker = Running(Some(setup.worker(&db, &["--concurrency", "8"])));
    let (long, busy, behind) = calls_behind(&db, &setup, 5.0).await;
    assert!(api::cancel_task(&db.conn().await, behind[0].as_str()).await.unwrap());
    let t = finished(&db, &long).await;
    assert_eq!((t.status, t.attempt, pid_of(&t)), (TaskStatus::Succeeded, 1, busy), "{:?}", t.schedule_log);
    // the cancelled call came first in line next: its instance was killed, not asked
    wait_dead(busy).await;
    assert_eq!(get(&db, &behind[0]).await.status, TaskStatus::Cancelled);
    for id in &behind[1..] {
        let t = finished(&db, id).await;
        assert_eq!((t.status, t.attempt, t.retry_count), (TaskStatus::Succeeded, 1, 0), "{:?}", t.schedule_log);
        assert_ne!(pid_of(&t), busy, "a new instance ran it");
    }
}
