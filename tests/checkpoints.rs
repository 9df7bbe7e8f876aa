//! Checkpoints: a running call saves its context without ending (`asyncflow.checkpoint_task`,
//! `POST /v1/worker/checkpoint`, `StageCall::checkpoint`, a warm instance's checkpoint line, a
//! process run per call's stderr line, the Python library's `checkpoint` and `step`), fenced like
//! every report; a retry of the stage starts from the last context saved.
use crate::common;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use asyncflow::db::api;
use asyncflow::function::{Checkpoints, Function, StageCall, StageReply};
use asyncflow::task::{ClaimedTask, ReportKind, TaskStatus};
use asyncflow::WorkerId;
use chrono::{DateTime, Utc};
use common::{sqlstate, TestDb};
use serde_json::{json, Value};

use common::sql::*;

async fn claim_one(c: &deadpool_postgres::Object, ty: &str, w: &WorkerId, now: DateTime<Utc>) -> ClaimedTask {
    let claimed = api::claim_tasks(c, ty, w, 1, Some(now)).await.unwrap();
    assert_eq!(claimed.len(), 1, "one ready task of {ty} at {now}");
    claimed.into_iter().next().unwrap()
}

async fn checkpoint(
    c: &impl tokio_postgres::GenericClient,
    id: &str,
    claim_seq: Option<i64>,
    context: Value,
) -> Result<bool, tokio_postgres::Error> {
    c.query_one("select asyncflow.checkpoint_task($1, $2, $3)", &[&id, &claim_seq, &context]).await.map(|r| r.get(0))
}

#[tokio::test]
async fn a_checkpoint_is_the_context_a_retry_starts_from_and_a_stale_one_changes_nothing() {
    let db = TestDb::new().await;
    let c = db.conn().await;
    register(&**c, "agent", json!({})).await;
    let id =
        api::create_task(&c, "agent", &asyncflow::task::NewTask::with_context(json!({"prompt": "p"}))).await.unwrap();
    let id = id.as_str();
    let w = worker("w");
    let first = claim_one(&c, "agent", &w, t0()).await;
    let saved = json!({"prompt": "p", "_steps": {"model": "answer 1"}});
    assert!(checkpoint(&**c, id, Some(first.claim_seq), saved.clone()).await.unwrap());
    assert_eq!(task(&**c, id).await["context"], saved, "get_task shows it at once");
    assert_eq!(task(&**c, id).await["status"], json!("running"), "and the call goes on");

    // the call fails after its checkpoint: the retry starts from it
    let fail = ReportKind::Fail { error: "model timed out".into(), retry: true };
    let r = api::report_tasks(&c, &w, &[rep(id, first.claim_seq, fail)], Some(t0() + secs(1.0))).await.unwrap();
    assert!(r[0].accepted);
    // pending between tries: no call runs, so no checkpoint is taken
    assert!(!checkpoint(&**c, id, Some(first.claim_seq), json!({"late": true})).await.unwrap());
    let second = claim_one(&c, "agent", &w, t0() + secs(3600.0)).await;
    assert_eq!((second.attempt, second.context.clone()), (2, saved.clone()));

    // the first call's token is stale now: refused, nothing changed
    assert!(!checkpoint(&**c, id, Some(first.claim_seq), json!({"stale": true})).await.unwrap());
    assert_eq!(task(&**c, id).await["context"], saved);
    // a checkpoint replaces the whole context; the next one too
    assert!(checkpoint(&**c, id, Some(second.claim_seq), json!({"only": 1})).await.unwrap());
    assert!(checkpoint(&**c, id, Some(second.claim_seq), json!({"only": 2})).await.unwrap());
    assert_eq!(task(&**c, id).await["context"], json!({"only": 2}));
    // and the reply's context, when it gives one, is the next stage's
    let advance = ReportKind::Advance { stage: "next".into(), context: None };
    api::report_tasks(&c, &w, &[rep(id, second.claim_seq, advance)], Some(t0() + secs(3601.0))).await.unwrap();
    let third = claim_one(&c, "agent", &w, t0() + secs(3602.0)).await;
    assert_eq!(third.context, json!({"only": 2}));
    // an ended task takes none
    let done = ReportKind::Succeed { result: json!(1) };
    api::report_tasks(&c, &w, &[rep(id, third.claim_seq, done)], Some(t0() + secs(3603.0))).await.unwrap();
    assert!(!checkpoint(&**c, id, Some(third.claim_seq), json!({"after": "end"})).await.unwrap());
    assert_eq!(task(&**c, id).await["context"], json!({"only": 2}));
}

#[tokio::test]
async fn bad_checkpoints_are_refused_with_a_reason_and_change_nothing() {
    let db = TestDb::new().await;
    let c = db.conn().await;
    register(&**c, "agent", json!({})).await;
    let id = api::create_task(&c, "agent", &asyncflow::task::NewTask::with_context(json!({"k": 1}))).await.unwrap();
    let id = id.as_str();
    let call = claim_one(&c, "agent", &worker("w"), t0()).await;
    let seq = Some(call.claim_seq);
    c.execute("update asyncflow.config set max_context_bytes = 1024", &[]).await.unwrap();
    for (context, claim_seq, code, says) in [
        (json!([1, 2]), seq, "AF006", "context must be a JSON object"),
        (json!("text"), seq, "AF006", "context must be a JSON object"),
        (Value::Null, seq, "AF006", "context must be a JSON object"),
        (json!({"big": "x".repeat(4000)}), seq, "AF005", "context is too large"),
        (json!({}), None, "AF006", "claim_seq"),
    ] {
        let e = checkpoint(&**c, id, claim_seq, context.clone()).await.unwrap_err();
        assert_eq!(sqlstate(&e), code, "{context}: {e}");
        assert!(e.as_db_error().unwrap().message().contains(says), "{context}: {e}");
    }
    let e = checkpoint(&**c, "agent-1-999999", seq, json!({})).await.unwrap_err();
    assert_eq!(sqlstate(&e), "AF007");
    let e = checkpoint(&**c, "not an id", seq, json!({})).await.unwrap_err();
    assert_eq!(sqlstate(&e), "AF007");
    assert_eq!(task(&**c, id).await["context"], json!({"k": 1}), "nothing changed");

    // the same over HTTP: 400, 413, 404, 409 and 200
    let app = asyncflow::http::router(db.pool.clone(), &common::http_config(&["tok"], 1 << 20));
    let post = |body: Value| {
        let app = app.clone();
        async move {
            let (status, _, bytes) = common::request(
                &app,
                "POST",
                "/v1/worker/checkpoint",
                Some(body.to_string()),
                Some("application/json"),
                Some("tok"),
            )
            .await;
            (status.as_u16(), serde_json::from_slice::<Value>(&bytes).unwrap_or(Value::Null))
        }
    };
    let body = |claim_seq: i64, context: Value| json!({"task_id": id, "claim_seq": claim_seq, "context": context});
    assert_eq!(post(body(call.claim_seq, json!([1]))).await.0, 400);
    assert_eq!(post(body(call.claim_seq, json!({"big": "x".repeat(4000)}))).await.0, 413);
    assert_eq!(post(json!({"task_id": id, "claim_seq": call.claim_seq, "contxt": {}})).await.0, 400);
    assert_eq!(post(json!({"task_id": "agent-1-999999", "claim_seq": 1, "context": {}})).await.0, 404);
    let (status, stale) = post(body(call.claim_seq - 1, json!({"stale": true}))).await;
    assert_eq!(status, 409, "{stale}");
    assert_eq!(task(&**c, id).await["context"], json!({"k": 1}), "nothing changed");
    let (status, answer) = post(body(call.claim_seq, json!({"saved": true}))).await;
    assert_eq!((status, answer), (200, json!({"task_id": id})));
    assert_eq!(task(&**c, id).await["context"], json!({"saved": true}));
}

/// Runs a worker with `handler` for `ty` until the task `id` has ended (its retries back off a
/// second or more, so the worker may go idle between them): on the database, or on the server at
/// `server` (the HTTP worker protocol).
async fn work_until_ended<F: Function + Clone>(
    db: &TestDb,
    server: Option<&str>,
    ty: &str,
    id: &str,
    handler: F,
) -> asyncflow::task::Task {
    use asyncflow::worker::{RemoteClient, Worker, WorkerConfig};
    let ty = asyncflow::TypeName::new(ty).unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let worker = match server {
            None => Worker::new(db.pool.clone(), db.url.clone(), WorkerConfig::default()),
            Some(base) => Worker::remote(RemoteClient::new(base, None).unwrap(), WorkerConfig::default()),
        };
        let worker = worker.register(ty.clone(), handler.clone(), None, Default::default());
        asyncflow::testing::work_until_idle(worker).await.unwrap();
        let task = api::get_task(&db.conn().await, id).await.unwrap().unwrap();
        if task.status.is_final() {
            return task;
        }
        assert!(tokio::time::Instant::now() < deadline, "the task did not end: {task:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn a_rust_handler_checkpoints_through_its_call_and_the_retry_starts_from_it() {
    let db = TestDb::new().await;
    a_rust_handler_checkpoints(&db, None).await;
}

#[tokio::test]
async fn a_rust_handler_on_a_server_worker_checkpoints_through_the_worker_protocol() {
    let db = TestDb::new().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let stop = tokio_util::sync::CancellationToken::new();
    let (pool, url, stopped) = (db.pool.clone(), db.url.clone(), stop.clone());
    let config = common::http_config(&[], 1 << 20);
    let server = tokio::spawn(async move { asyncflow::http::serve_on(listener, pool, &url, config, stopped).await });
    a_rust_handler_checkpoints(&db, Some(&base)).await;
    stop.cancel();
    let _ = server.await;
}

/// A handler that checkpoints, then fails its first try: the second starts from the checkpoint.
async fn a_rust_handler_checkpoints(db: &TestDb, server: Option<&str>) {
    let c = db.conn().await;
    register(&**c, "agent", json!({})).await;
    let id = api::create_task(&c, "agent", &asyncflow::task::NewTask::with_context(json!({"n": 0}))).await.unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let handler = {
        let seen = seen.clone();
        move |call: StageCall| {
            let seen = seen.clone();
            async move {
                seen.lock().unwrap().push((call.attempt, call.context.clone()));
                if call.attempt == 1 {
                    let saved = call.checkpoint(json!({"n": 1, "_steps": {"expensive": 42}})).await;
                    assert!(saved.unwrap(), "the checkpoint is written");
                    // a context the database refuses is an error for the handler, not a write
                    assert!(call.checkpoint(json!([1])).await.is_err());
                    return StageReply::Failed { error: "crashed after the expensive step".into(), retry: true };
                }
                StageReply::Succeeded { result: call.context.clone() }
            }
        }
    };
    let task = work_until_ended(db, server, "agent", id.as_str(), handler).await;
    assert_eq!(task.status, TaskStatus::Succeeded);
    assert_eq!(task.result, Some(json!({"n": 1, "_steps": {"expensive": 42}})));
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen, vec![(1, json!({"n": 0})), (2, json!({"n": 1, "_steps": {"expensive": 42}}))]);

    // a call no worker made has nowhere to write one
    let call: StageCall = serde_json::from_value(json!({
        "task_id": "t-1-1", "type": "t", "stage": "s", "context": {}, "attempt": 1, "priority": 0,
        "user_id": null, "deadline": "2030-01-01T00:00:00Z"
    }))
    .unwrap();
    assert!(call.checkpoint(json!({})).await.unwrap_err().to_string().contains("not made by a worker"));
}

/// A warm function on the Python helper library: `step("charge", ...)` leaves a mark per run of
/// its fn (in `$AF_MARKS`), then the first attempt fails; `context.bad` checkpoints a context the
/// worker refuses.
const STEP_FIXTURE: &str = r#"
import os, sys, uuid
sys.path.insert(0, os.environ["AF_SDK"])
from asyncflow_function import checkpoint, run, step

def charge():
    open(os.path.join(os.environ["AF_MARKS"], "charge-" + uuid.uuid4().hex), "w").close()
    return {"receipt": "r-1"}

async def handle(call):
    if call["context"].get("bad"):
        checkpoint({"bad": "refused by the worker"})
        return {"result": "unreachable"}
    receipt = await step("charge", charge)
    if call["attempt"] == 1:
        raise RuntimeError("crashed after the charge")
    return {"result": {"receipt": receipt, "context": call["context"]}}

run(handle)
"#;

/// The command that runs [`STEP_FIXTURE`] from `dir` (its marks kept there too).
fn step_fixture(dir: &std::path::Path) -> Vec<String> {
    let sdk = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("functions/sdk/python");
    std::fs::write(dir.join("fixture.py"), STEP_FIXTURE).unwrap();
    let script = format!(
        "AF_SDK='{}' AF_MARKS='{}' exec python3 '{}'",
        sdk.display(),
        dir.display(),
        dir.join("fixture.py").display()
    );
    vec!["sh".into(), "-c".into(), script]
}

fn warm_python(dir: &std::path::Path, concurrency: usize) -> asyncflow::function::warm::WarmFunction {
    use asyncflow::function::warm::{WarmFunction, WarmOptions};
    let options = WarmOptions {
        instances: 1,
        concurrency,
        // one call at a time: the default of function.toml, calls sent ahead
        send_ahead: if concurrency == 1 { asyncflow::function::registry::SEND_AHEAD_DEFAULT } else { 0 },
        max_calls_per_instance: None,
        timeout: Some(Duration::from_secs(30)),
        max_reply: asyncflow::function::exec::MAX_REPLY_BYTES_DEFAULT,
        idle_stop: Duration::from_secs(30),
    };
    WarmFunction::new("steps", step_fixture(dir), dir.to_path_buf(), vec![], options)
}

/// How many times the fixture's step ran its fn (its marks in `dir`).
fn charges(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| e.as_ref().map(|e| e.file_name().to_string_lossy().starts_with("charge-")).unwrap_or(false))
        .count()
}

/// A call whose checkpoints land in `saved` (refused when the context has "bad").
fn recorded_call(attempt: i32, context: Value, saved: &Arc<Mutex<Vec<Value>>>) -> StageCall {
    let mut call: StageCall = serde_json::from_value(json!({
        "task_id": "steps-1-1", "type": "steps", "stage": "s", "context": context, "attempt": attempt,
        "priority": 0, "user_id": null, "deadline": "2030-01-01T00:00:00Z"
    }))
    .unwrap();
    let saved = saved.clone();
    call.checkpoints = Checkpoints::new(move |context| {
        let saved = saved.clone();
        Box::pin(async move {
            if context.get("bad").is_some() {
                return Err(asyncflow::Error::InvalidArgument("context is too large".into()));
            }
            saved.lock().unwrap().push(context);
            Ok(true)
        })
    });
    call
}

#[tokio::test]
async fn a_warm_instances_checkpoint_line_is_written_before_its_reply_and_step_runs_once_across_a_retry() {
    for concurrency in [1, 4] {
        let dir = std::env::temp_dir().join(format!("af-checkpoints-{}-{concurrency}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let f = warm_python(&dir, concurrency);
        let saved = Arc::new(Mutex::new(Vec::new()));
        let reply = f.call(recorded_call(1, json!({"order": 7}), &saved)).await;
        assert!(matches!(&reply, StageReply::Failed { error, retry: true } if error.contains("crashed")), "{reply:?}");
        let checkpointed = saved.lock().unwrap().clone();
        assert_eq!(checkpointed, vec![json!({"order": 7, "_steps": {"charge": {"receipt": "r-1"}}})]);
        let reply = f.call(recorded_call(2, checkpointed[0].clone(), &saved)).await;
        let StageReply::Succeeded { result } = reply else { panic!("{reply:?}") };
        assert_eq!(result["receipt"], json!({"receipt": "r-1"}));
        assert_eq!(charges(&dir), 1, "concurrency {concurrency}: the step ran once across the retry");
        // a checkpoint the worker cannot write fails the call, with retry; the instance serves on
        let reply = f.call(recorded_call(1, json!({"bad": true}), &saved)).await;
        assert!(
            matches!(&reply, StageReply::Failed { error, retry: true } if error.contains("a checkpoint was refused")),
            "{reply:?}"
        );
        assert_eq!(saved.lock().unwrap().len(), 1);
        let reply = f.call(recorded_call(2, checkpointed[0].clone(), &saved)).await;
        assert!(matches!(reply, StageReply::Succeeded { .. }), "{reply:?}");
        f.stop().await;
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[tokio::test]
async fn a_warm_python_step_survives_a_failure_through_a_real_worker_on_the_database() {
    let db = TestDb::new().await;
    let c = db.conn().await;
    register(&**c, "steps", json!({})).await;
    let dir = std::env::temp_dir().join(format!("af-checkpoints-worker-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let id = api::create_task(&c, "steps", &asyncflow::task::NewTask::with_context(json!({"order": 7}))).await.unwrap();
    let task = work_until_ended(&db, None, "steps", id.as_str(), warm_python(&dir, 4)).await;
    assert_eq!(task.status, TaskStatus::Succeeded, "{task:?}");
    let result = task.result.unwrap();
    assert_eq!(result["receipt"], json!({"receipt": "r-1"}));
    assert_eq!(result["context"], json!({"order": 7, "_steps": {"charge": {"receipt": "r-1"}}}));
    assert_eq!(task.attempt, 2, "the first try failed after its checkpoint: {:?}", task.schedule_log);
    assert_eq!(charges(&dir), 1, "the step ran once across the retry");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The fixture of [`STEP_FIXTURE`] as an executable run once per call.
fn per_call_python(dir: &std::path::Path) -> asyncflow::function::exec::ExecFunction {
    asyncflow::function::exec::ExecFunction::new(
        "steps",
        step_fixture(dir),
        dir.to_path_buf(),
        asyncflow::function::exec::MAX_REPLY_BYTES_DEFAULT,
    )
}

#[tokio::test]
async fn a_process_run_per_call_checkpoints_on_stderr_before_its_reply_and_step_runs_once_across_a_retry() {
    let dir = std::env::temp_dir().join(format!("af-checkpoints-exec-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let f = per_call_python(&dir);
    let saved = Arc::new(Mutex::new(Vec::new()));
    // a context far longer than a logged stderr line: the checkpoint line is taken whole
    let blob = "x".repeat(50_000);
    let reply = f.call(recorded_call(1, json!({"order": 7, "blob": blob}), &saved)).await;
    assert!(matches!(&reply, StageReply::Failed { error, retry: true } if error.contains("crashed")), "{reply:?}");
    let checkpointed = saved.lock().unwrap().clone();
    assert_eq!(checkpointed, vec![json!({"order": 7, "blob": blob, "_steps": {"charge": {"receipt": "r-1"}}})]);
    let reply = f.call(recorded_call(2, checkpointed[0].clone(), &saved)).await;
    let StageReply::Succeeded { result } = reply else { panic!("{reply:?}") };
    assert_eq!(result["receipt"], json!({"receipt": "r-1"}));
    assert_eq!(charges(&dir), 1, "the step ran once across the retry");
    // a checkpoint the worker cannot write fails the call, with retry, whatever its reply said
    let reply = f.call(recorded_call(1, json!({"bad": true}), &saved)).await;
    assert!(
        matches!(&reply, StageReply::Failed { error, retry: true } if error.contains("a checkpoint was refused")),
        "{reply:?}"
    );
    assert_eq!(saved.lock().unwrap().len(), 1, "nothing more written");
    // so does a checkpoint line that is not JSON
    let broken = asyncflow::function::exec::ExecFunction::new(
        "broken",
        vec!["sh".into(), "-c".into(), r#"echo 'asyncflow:checkpoint {"cut' >&2; echo '{"result": 1}'"#.into()],
        dir.clone(),
        asyncflow::function::exec::MAX_REPLY_BYTES_DEFAULT,
    );
    let reply = broken.call(recorded_call(1, json!({}), &saved)).await;
    assert!(
        matches!(&reply, StageReply::Failed { error, retry: true } if error.contains("checkpoint line is not JSON")),
        "{reply:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_python_step_run_per_call_survives_a_failure_through_a_real_worker_on_the_database() {
    let db = TestDb::new().await;
    let c = db.conn().await;
    register(&**c, "steps", json!({})).await;
    let dir = std::env::temp_dir().join(format!("af-checkpoints-exec-worker-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let id = api::create_task(&c, "steps", &asyncflow::task::NewTask::with_context(json!({"order": 7}))).await.unwrap();
    let task = work_until_ended(&db, None, "steps", id.as_str(), per_call_python(&dir)).await;
    assert_eq!(task.status, TaskStatus::Succeeded, "{task:?}");
    let result = task.result.unwrap();
    assert_eq!(result["context"], json!({"order": 7, "_steps": {"charge": {"receipt": "r-1"}}}));
    assert_eq!(task.attempt, 2, "the first try failed after its checkpoint: {:?}", task.schedule_log);
    assert_eq!(charges(&dir), 1, "the step ran once across the retry");
    let _ = std::fs::remove_dir_all(&dir);
}
