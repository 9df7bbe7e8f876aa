//! Helpers shared by the workflow tests: pipelines, runs, and a test worker that claims and
//! reports through the SQL API with an injected clock.
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};
use tokio_postgres::GenericClient;

/// Stores a definition as the active version of `name`; the stored version.
pub async fn pipeline(c: &impl GenericClient, name: &str, definition: Value) -> Value {
    c.query_one("select asyncflow.put_pipeline($1, $2)", &[&name, &definition])
        .await
        .unwrap_or_else(|e| panic!("put_pipeline {name}: {e:?}"))
        .get(0)
}

/// The AF010 message a definition is refused with.
pub async fn refused(c: &impl GenericClient, name: &str, definition: Value) -> String {
    match c.query_one("select asyncflow.put_pipeline($1, $2)", &[&name, &definition]).await {
        Ok(row) => panic!("accepted: {}", row.get::<_, Value>(0)),
        Err(e) => {
            let db = e.as_db_error().expect("a database error");
            assert_eq!(db.code().code(), "AF010", "{}", db.message());
            db.message().to_string()
        }
    }
}

/// Starts a run at `now` (None: the database's clock).
pub async fn start(
    c: &impl GenericClient,
    name: &str,
    input: Value,
    notify_url: Option<&str>,
    now: Option<chrono::DateTime<chrono::Utc>>,
) -> String {
    c.query_one("select asyncflow.start_run($1, $2, $3, p_now => $4)", &[&name, &input, &notify_url, &now])
        .await
        .unwrap_or_else(|e| panic!("start_run {name}: {e:?}"))
        .get(0)
}

/// The run document.
pub async fn run(c: &impl GenericClient, run_id: &str) -> Value {
    c.query_one("select asyncflow.get_run($1)", &[&run_id]).await.unwrap().get(0)
}

/// One event of a run document.
pub fn event<'a>(run: &'a Value, node: &str) -> &'a Value {
    run["events"]
        .as_array()
        .and_then(|events| events.iter().find(|e| e["node"] == node))
        .unwrap_or_else(|| panic!("no event {node} in {run}"))
}

/// A claimed task: id, stage, context, claim_seq.
#[derive(Debug, Clone)]
pub struct Claimed {
    pub task_id: String,
    pub stage: String,
    pub context: Value,
    pub claim_seq: i64,
}

/// Claims up to 1000 ready tasks of a type as worker `w`.
pub async fn claim(c: &impl GenericClient, ty: &str, now: Option<chrono::DateTime<chrono::Utc>>) -> Vec<Claimed> {
    c.query("select task_id, stage, context, claim_seq from asyncflow.claim_tasks($1, 'w', 1000, $2)", &[&ty, &now])
        .await
        .unwrap()
        .iter()
        .map(|r| Claimed { task_id: r.get(0), stage: r.get(1), context: r.get(2), claim_seq: r.get(3) })
        .collect()
}

/// Reports on claimed tasks: each gets `outcome` merged into {task_id, claim_seq}.
pub async fn report(
    c: &impl GenericClient,
    answers: Vec<(&Claimed, Value)>,
    now: Option<chrono::DateTime<chrono::Utc>>,
) -> Vec<bool> {
    let reports: Vec<Value> = answers
        .into_iter()
        .map(|(t, outcome)| {
            let mut r = json!({"task_id": t.task_id, "claim_seq": t.claim_seq});
            if let (Some(r), Some(o)) = (r.as_object_mut(), outcome.as_object()) {
                r.extend(o.clone());
            }
            r
        })
        .collect();
    c.query("select accepted from asyncflow.report_tasks('w', $1, $2)", &[&json!(reports), &now])
        .await
        .unwrap_or_else(|e| panic!("report_tasks: {e:?}"))
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// A success report with this result.
pub fn ok(result: Value) -> Value {
    json!({"outcome": "succeed", "result": result})
}

/// Works every ready task of the types until none is left, answering each with `answer`
/// (given the task's context); returns how many tasks were worked.
pub async fn work_all<F>(
    c: &impl GenericClient,
    types: &[&str],
    now: Option<chrono::DateTime<chrono::Utc>>,
    answer: F,
) -> usize
where
    F: Fn(&Claimed) -> Value,
{
    let mut worked = 0;
    loop {
        let mut claimed = Vec::new();
        for ty in types {
            claimed.extend(claim(c, ty, now).await);
        }
        if claimed.is_empty() {
            return worked;
        }
        worked += claimed.len();
        let answers: Vec<(&Claimed, Value)> = claimed.iter().map(|t| (t, answer(t))).collect();
        let accepted = report(c, answers, now).await;
        assert!(accepted.iter().all(|a| *a), "every report accepted");
    }
}

/// The node a task works for (from its context).
pub fn node(t: &Claimed) -> &str {
    t.context["node"].as_str().unwrap_or_default()
}

/// What a callback receiver got: each request's headers and body.
pub type Seen = Arc<Mutex<Vec<(axum::http::HeaderMap, Vec<u8>)>>>;

/// A callback receiver on a given port: records every request, answers `status`.
pub struct Receiver {
    pub seen: Seen,
    pub stop: tokio::sync::oneshot::Sender<()>,
}

pub async fn receiver(listener: tokio::net::TcpListener, status: u16) -> Receiver {
    let seen: Seen = Arc::default();
    let record = seen.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
            let record = record.clone();
            async move {
                record.lock().unwrap().push((headers, body.to_vec()));
                axum::http::StatusCode::from_u16(status).unwrap()
            }
        }),
    );
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = stopped.await;
            })
            .await;
    });
    Receiver { seen, stop }
}
