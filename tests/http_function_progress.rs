//! Progress from HTTP functions: a function called by a worker over HTTP posts its progress to an
//! `asyncflow serve` (`POST /v1/worker/progress`) with the task id and the claim's fencing token
//! from its stage call; `get_task` shows it while the call runs, and a stale token is refused.
use crate::common;

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use asyncflow::db::api;
use asyncflow::task::TaskStatus;
use common::{wait_until, Folder, TestDb};
use serde_json::{json, Value};

const TOKEN: &str = "progress-token-0123456789";

/// An `asyncflow serve` on a free port, with a bearer token; killed when dropped.
struct Server {
    child: Child,
    url: String,
}

impl Server {
    async fn start(db: &TestDb) -> Server {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let child = Command::new(env!("CARGO_BIN_EXE_asyncflow"))
            .args(["serve", "--listen", &format!("127.0.0.1:{port}"), "--token", TOKEN])
            .env("DATABASE_URL", &db.url)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start asyncflow serve");
        let url = format!("http://127.0.0.1:{port}");
        let ready = format!("{url}/readyz");
        let client = reqwest::Client::new();
        wait_until(Duration::from_secs(30), "the server to be ready", || async {
            client.get(&ready).send().await.map(|r| r.status().is_success()).unwrap_or(false)
        })
        .await;
        Server { child, url }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `POST /v1/worker/progress` on the server: the status and the body.
async fn post_progress(server: &str, body: Value) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(format!("{server}/v1/worker/progress"))
        .bearer_auth(TOKEN)
        .json(&body)
        .send()
        .await
        .expect("the server answers");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or_default())
}

/// What the HTTP function shares with the test: the calls it got (task id, claim_seq, the
/// server's answer to its progress) and the signal to answer.
#[derive(Clone)]
struct FunctionState {
    server: String,
    calls: tokio::sync::mpsc::UnboundedSender<(String, i64, u16)>,
    go: Arc<tokio::sync::Notify>,
}

/// The HTTP function: posts its progress to the server with its call's task id and claim_seq,
/// then answers once the test says so.
async fn function(axum::extract::State(state): axum::extract::State<FunctionState>, body: String) -> String {
    let call: Value = serde_json::from_str(&body).expect("the stage call is JSON");
    let task_id = call["task_id"].as_str().expect("task_id").to_string();
    let claim_seq = call["claim_seq"].as_i64().expect("claim_seq");
    let progress =
        json!({"task_id": task_id, "claim_seq": claim_seq, "progress": {"percent": 30, "message": "fetching"}});
    let (status, _) = post_progress(&state.server, progress).await;
    state.calls.send((task_id, claim_seq, status)).expect("the test listens");
    state.go.notified().await;
    json!({"result": {"fetched": true}}).to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_http_function_posts_progress_to_the_server_during_its_call_and_a_stale_token_is_refused() {
    let db = TestDb::new().await;
    let server = Server::start(&db).await;
    let (calls_tx, mut calls) = tokio::sync::mpsc::unbounded_channel();
    let go = Arc::new(tokio::sync::Notify::new());
    let state = FunctionState { server: server.url.clone(), calls: calls_tx, go: go.clone() };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let function_url = format!("http://{}/fetch", listener.local_addr().unwrap());
    let app = axum::Router::new().route("/fetch", axum::routing::post(function)).with_state(state);
    let function_server = tokio::spawn(async move { axum::serve(listener, app).await });

    // a database worker calls the function for the type `fetch`
    let folder = Folder::new(&[("fetch", &format!("url = \"{function_url}\"\ntimeout = 60\n"), "")]);
    let specs = asyncflow::function::registry::load_dir(&folder.0).unwrap();
    let config = asyncflow::worker::WorkerConfig {
        worker_id: asyncflow::WorkerId::new("http-progress").unwrap(),
        concurrency: 2,
        shutdown_grace: Duration::from_millis(300),
        heartbeat_check: Duration::from_millis(100),
        ..Default::default()
    };
    let worker =
        asyncflow::worker::Worker::new(db.pool.clone(), db.url.clone(), config).register_specs(specs.values()).unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let running = tokio::spawn(worker.run(stop.clone()));
    wait_until(Duration::from_secs(10), "the type registered", || async {
        api::list_task_types(&db.conn().await).await.map(|t| t.iter().any(|t| t.task_type == "fetch")).unwrap_or(false)
    })
    .await;
    let c = db.conn().await;
    let id = api::create_task(&c, "fetch", &Default::default()).await.unwrap();

    // the call posted its progress, the server took it, and get_task shows it while it runs
    let (task_id, claim_seq, status) =
        tokio::time::timeout(Duration::from_secs(20), calls.recv()).await.expect("the function is called").unwrap();
    assert_eq!((task_id.as_str(), status), (id.as_str(), 200));
    let t = api::get_task(&c, id.as_str()).await.unwrap().unwrap();
    assert_eq!(t.status, TaskStatus::Running);
    assert_eq!(t.progress, Some(json!({"percent": 30, "message": "fetching"})));

    // another claim's token is refused and changes nothing; so are an unknown task and a bad value
    let stale = json!({"task_id": id.as_str(), "claim_seq": claim_seq - 1, "progress": {"percent": 99}});
    assert_eq!(post_progress(&server.url, stale).await.0, 409);
    let unknown = json!({"task_id": "fetch-1-999999", "claim_seq": claim_seq, "progress": {"percent": 99}});
    assert_eq!(post_progress(&server.url, unknown).await.0, 404);
    let null = json!({"task_id": id.as_str(), "claim_seq": claim_seq, "progress": null});
    assert_eq!(post_progress(&server.url, null).await.0, 400);
    let big = json!({"task_id": id.as_str(), "claim_seq": claim_seq, "progress": {"m": "x".repeat(5000)}});
    assert_eq!(post_progress(&server.url, big).await.0, 400);
    let t = api::get_task(&c, id.as_str()).await.unwrap().unwrap();
    assert_eq!((t.status, t.progress), (TaskStatus::Running, Some(json!({"percent": 30, "message": "fetching"}))));

    // the call ends: the task succeeds, keeps its last progress, and the claim's token is stale
    go.notify_one();
    wait_until(Duration::from_secs(20), "the task succeeds", || async {
        api::get_task(&db.conn().await, id.as_str()).await.unwrap().unwrap().status == TaskStatus::Succeeded
    })
    .await;
    let late = json!({"task_id": id.as_str(), "claim_seq": claim_seq, "progress": {"percent": 100}});
    let (status, body) = post_progress(&server.url, late).await;
    assert_eq!(status, 409, "{body}");
    let t = api::get_task(&c, id.as_str()).await.unwrap().unwrap();
    assert_eq!(t.progress, Some(json!({"percent": 30, "message": "fetching"})));
    stop.cancel();
    running.await.unwrap().unwrap();
    function_server.abort();
}

#[tokio::test]
async fn report_tasks_takes_progress_with_a_heartbeat_and_with_the_reply_fenced_by_the_claim() {
    let db = TestDb::new().await;
    let c = db.conn().await;
    c.query_one("select asyncflow.register_task_type('job', '{}')", &[]).await.unwrap();
    let id = api::create_task(&c, "job", &Default::default()).await.unwrap();
    let w = asyncflow::WorkerId::new("w").unwrap();
    let claimed = api::claim_tasks(&c, "job", &w, 1, None).await.unwrap();
    let claim_seq = claimed[0].claim_seq;
    let report = |outcome: &str, progress: Value| json!([{"task_id": id.as_str(), "claim_seq": claim_seq, "outcome": outcome, "progress": progress}]);
    let big = json!({"m": "x".repeat(5000)});
    let e = c.query("select * from asyncflow.report_tasks('w', $1)", &[&report("succeed", big)]).await.unwrap_err();
    assert_eq!(common::sqlstate(&e), "AF006", "{e:?}");
    assert!(format!("{e:?}").contains("progress is too large"), "{e:?}");
    let rows = c
        .query("select accepted from asyncflow.report_tasks('w', $1)", &[&report("heartbeat", json!({"step": 3}))])
        .await
        .unwrap();
    assert!(rows[0].get::<_, bool>(0));
    let t = api::get_task(&c, id.as_str()).await.unwrap().unwrap();
    assert_eq!((t.status, t.progress), (TaskStatus::Running, Some(json!({"step": 3}))));
    // set_progress, the SQL form of POST /v1/worker/progress, fenced the same way
    let row = c
        .query_one(
            "select accepted from asyncflow.set_progress($1, $2, $3)",
            &[&id.as_str(), &(claim_seq + 1), &json!(1)],
        )
        .await
        .unwrap();
    assert!(!row.get::<_, bool>(0), "a stale token is refused");
    assert_eq!(api::get_task(&c, id.as_str()).await.unwrap().unwrap().progress, Some(json!({"step": 3})));
    // the reply writes the last progress with it; a stale one changes nothing
    let stale = json!([{"task_id": id.as_str(), "claim_seq": claim_seq + 1, "outcome": "succeed", "progress": 99}]);
    let rows = c.query("select accepted from asyncflow.report_tasks('w', $1)", &[&stale]).await.unwrap();
    assert!(!rows[0].get::<_, bool>(0));
    let rows = c
        .query("select accepted from asyncflow.report_tasks('w', $1)", &[&report("succeed", json!({"step": 5}))])
        .await
        .unwrap();
    assert!(rows[0].get::<_, bool>(0));
    let t = api::get_task(&c, id.as_str()).await.unwrap().unwrap();
    assert_eq!((t.status, t.progress), (TaskStatus::Succeeded, Some(json!({"step": 5}))));
}
