//! Child tasks and a join: the `spawn` reply, the children's latch, the join's `children`, the
//! cancel cascade and bad spawns (sql/api/46_children.sql), through SQL, a worker, HTTP and the
//! command line.
use crate::common;

use asyncflow::db::api;
use asyncflow::function::{StageCall, StageReply};
use asyncflow::task::{ClaimedTask, ReportKind, TaskStatus};
use asyncflow::WorkerId;
use chrono::{DateTime, Utc};
use common::{sqlstate, TestDb};
use serde_json::{json, Value};

use common::sql::*;

fn spawn(children: Value, stage: &str) -> ReportKind {
    let Value::Array(spawn) = children else { panic!("a list") };
    ReportKind::Spawn { stage: stage.into(), spawn, context: Some(json!({"spawned": true})) }
}

/// Claims up to `n` ready tasks of `ty` at `now`.
async fn claim(c: &deadpool_postgres::Object, ty: &str, w: &WorkerId, n: i32, now: DateTime<Utc>) -> Vec<ClaimedTask> {
    api::claim_tasks(c, ty, w, n, Some(now)).await.unwrap()
}

async fn report(
    c: &deadpool_postgres::Object,
    w: &WorkerId,
    t: &ClaimedTask,
    kind: ReportKind,
    now: DateTime<Utc>,
) -> bool {
    let r = api::report_tasks(c, w, &[rep(t.task_id.as_str(), t.claim_seq, kind)], Some(now)).await.unwrap();
    r[0].accepted
}

async fn tasks_of(c: &deadpool_postgres::Object, ty: &str) -> i64 {
    c.query_one("select count(*) from asyncflow.tasks where task_type = $1", &[&ty]).await.unwrap().get(0)
}

async fn explain(c: &deadpool_postgres::Object, id: &str) -> Value {
    serde_json::to_value(api::explain_task(c, id, None).await.unwrap().unwrap()).unwrap()
}

/// The children's outcomes the join's call gets (the parent's `wake`).
async fn wake(c: &deadpool_postgres::Object, id: &str) -> Value {
    let key = asyncflow::TaskId::parse(id).unwrap();
    c.query_one(
        "select wake from asyncflow.tasks where task_type = $1 and shard = $2 and id = $3",
        &[&key.task_type(), &key.shard(), &key.number()],
    )
    .await
    .unwrap()
    .get(0)
}

/// A "fan" task that has spawned `children` of type "leaf" (both types registered), waiting at
/// stage "join": its id.
async fn fanned_out(c: &deadpool_postgres::Object, children: Value) -> String {
    register(&***c, "fan", json!({})).await;
    register(&***c, "leaf", json!({})).await;
    let id = api::create_task(c, "fan", &Default::default()).await.unwrap();
    let w = worker("w");
    let call = claim(c, "fan", &w, 1, t0()).await.remove(0);
    assert!(report(c, &w, &call, spawn(children, "join"), t0()).await);
    id.to_string()
}

#[tokio::test]
async fn a_worker_spawns_children_and_its_join_gets_their_outcomes_in_spawn_order() {
    use asyncflow::worker::{Worker, WorkerConfig};
    use asyncflow::TypeName;
    use std::time::Duration;
    let db = TestDb::new().await;
    let c = db.conn().await;
    for ty in ["crawl", "page", "thumb"] {
        api::register_task_type(&c, &TypeName::new(ty).unwrap(), &Default::default()).await.unwrap();
    }
    let parent = api::create_task(&c, "crawl", &Default::default()).await.unwrap();
    let crawl = |call: StageCall| async move {
        match call.stage.as_str() {
            // two types, priorities that reverse the run order: the join keeps spawn order
            "start" => StageReply::Spawn {
                spawn: vec![
                    json!({"type": "page", "context": {"n": 1}}),
                    json!({"type": "thumb", "context": {"n": 2}, "priority": 100}),
                    json!({"type": "page", "context": {"n": 3}, "priority": 200}),
                    json!({"type": "page", "context": {"n": 4, "fail": true}}),
                ],
                next_stage: "join".into(),
                context: Some(json!({"site": "example.org"})),
            },
            _ => StageReply::Succeeded {
                result: json!({"children": call.children, "context": call.context, "event": call.event}),
            },
        }
    };
    let child = |call: StageCall| async move {
        if call.context["fail"] == json!(true) {
            return StageReply::Failed { error: "404".into(), retry: false };
        }
        StageReply::Succeeded { result: json!({"n": call.context["n"], "type": call.task_type}) }
    };
    let worker = Worker::new(db.pool.clone(), db.url.clone(), WorkerConfig::default())
        .register(TypeName::new("crawl").unwrap(), crawl, None, Default::default())
        .register(TypeName::new("page").unwrap(), child, None, Default::default())
        .register(TypeName::new("thumb").unwrap(), child, None, Default::default());
    let summary = tokio::time::timeout(Duration::from_secs(60), asyncflow::testing::work_until_idle(worker))
        .await
        .expect("idle")
        .unwrap();
    assert_eq!(summary.waited, 1, "{summary:?}");
    let done = api::get_task(&c, parent.as_str()).await.unwrap().unwrap();
    assert_eq!(done.status, TaskStatus::Succeeded, "{done:?}");
    let result = done.result.unwrap();
    assert_eq!(result["context"], json!({"site": "example.org"}));
    assert_eq!(result["event"], Value::Null, "a join's call has no event");
    let children = result["children"].as_array().unwrap().clone();
    let summary: Vec<(Value, Value, Value, Value)> = children
        .iter()
        .map(|k| (k["type"].clone(), k["status"].clone(), k["result"]["n"].clone(), k["error"].clone()))
        .collect();
    assert_eq!(
        summary,
        vec![
            (json!("page"), json!("succeeded"), json!(1), Value::Null),
            (json!("thumb"), json!("succeeded"), json!(2), Value::Null),
            (json!("page"), json!("succeeded"), json!(3), Value::Null),
            (json!("page"), json!("failed"), Value::Null, json!("404")),
        ]
    );
    // each child names its parent (get_task, its typed answer and the command line)
    for k in &children {
        let id = k["id"].as_str().unwrap();
        let t = api::get_task(&c, id).await.unwrap().unwrap();
        assert_eq!(t.parent_id.as_deref(), Some(parent.as_str()));
        assert_eq!(task(&**c, id).await["parent_id"], json!(parent.as_str()));
    }
    assert_eq!(done.parent_id, None);
    let out = common::cli::asyncflow(Some(&db.url), &["task", "get", children[0]["id"].as_str().unwrap()]);
    let said: Value = serde_json::from_str(&common::cli::ok(&out)).unwrap();
    assert_eq!(said["parent_id"], json!(parent.as_str()));
    let log = task(&**c, parent.as_str()).await["schedule_log"].clone();
    assert!(log.as_array().unwrap().iter().any(|e| e["event"] == json!("children ended")), "{log}");
}

#[tokio::test]
async fn a_stale_or_rolled_back_spawn_creates_nothing_and_the_live_one_creates_its_children_once() {
    let db = TestDb::new().await;
    let c = db.conn().await;
    register(&**c, "fan", json!({"max_processing_time": 10})).await;
    register(&**c, "leaf", json!({})).await;
    let id = api::create_task(&c, "fan", &Default::default()).await.unwrap();
    let (a, b) = (worker("a"), worker("b"));
    let now = t0();
    let first = claim(&c, "fan", &a, 1, now).await.remove(0);
    let list = json!([{"type": "leaf", "context": {"i": 0}}, {"type": "leaf", "context": {"i": 1}}]);

    // the worker dies before its report commits: nothing was created, the task still runs
    {
        let mut raw = db.conn().await;
        let tx = raw.transaction().await.unwrap();
        let r =
            api::report_tasks(&tx, &a, &[rep(id.as_str(), first.claim_seq, spawn(list.clone(), "join"))], Some(now))
                .await
                .unwrap();
        assert!(r[0].accepted);
        assert_eq!(tasks_of(&c, "leaf").await, 0, "not visible before the commit");
        // rolled back and awaited: a dropped transaction's rollback is sent later, and its row
        // lock would make the rescue below skip the task
        tx.rollback().await.unwrap();
    }
    assert_eq!(tasks_of(&c, "leaf").await, 0);
    assert_eq!(task(&**c, id.as_str()).await["status"], json!("running"));

    // its lease runs out; another worker claims it; the first one's late report is refused
    let rescued = api::rescue_expired(&c, Some(now + secs(11.0)), 100, &[]).await.unwrap();
    assert_eq!(rescued.len(), 1);
    let second = claim(&c, "fan", &b, 1, now + secs(100.0)).await.remove(0);
    assert!(!report(&c, &a, &first, spawn(list.clone(), "join"), now + secs(101.0)).await, "fenced");
    assert_eq!(tasks_of(&c, "leaf").await, 0, "a fenced spawn creates nothing");

    // the live claim's spawn creates its children once; sent again, it is refused
    assert!(report(&c, &b, &second, spawn(list.clone(), "join"), now + secs(102.0)).await);
    assert!(!report(&c, &b, &second, spawn(list.clone(), "join"), now + secs(103.0)).await);
    assert_eq!(tasks_of(&c, "leaf").await, 2);
    let t = task(&**c, id.as_str()).await;
    assert_eq!((t["status"].clone(), t["stage"].clone()), (json!("waiting"), json!("join")));
    assert_eq!(t["context"], json!({"spawned": true}));
    let e = explain(&c, id.as_str()).await;
    assert_eq!(
        (e["reason"].clone(), e["ended"].clone(), e["total"].clone()),
        (json!("waiting_children"), json!(0), json!(2))
    );
    assert_eq!(e["next_stage"], json!("join"));
    // a waiting parent is in no claim
    assert!(claim(&c, "fan", &b, 10, now + secs(104.0)).await.is_empty());
}

#[tokio::test]
async fn cancelling_a_parent_cancels_its_unfinished_children_and_theirs() {
    let db = TestDb::new().await;
    let c = db.conn().await;
    register(&**c, "top", json!({})).await;
    register(&**c, "mid", json!({})).await;
    register(&**c, "low", json!({})).await;
    let w = worker("w");
    let now = t0();
    let top = api::create_task(&c, "top", &Default::default()).await.unwrap();
    let call = claim(&c, "top", &w, 1, now).await.remove(0);
    let list = json!([{"type": "mid", "context": {"i": 0}}, {"type": "mid", "context": {"i": 1}},
        {"type": "mid", "context": {"i": 2}}]);
    assert!(report(&c, &w, &call, spawn(list, "join"), now).await);
    // mid 0 succeeds, mid 1 runs, mid 2 spawns a grandchild and waits
    let mids = claim(&c, "mid", &w, 3, now + secs(1.0)).await;
    assert_eq!(mids.len(), 3);
    let by_i = |i: i64| mids.iter().find(|m| m.context["i"] == json!(i)).unwrap().clone();
    assert!(report(&c, &w, &by_i(0), ReportKind::Succeed { result: json!(0) }, now + secs(2.0)).await);
    assert!(report(&c, &w, &by_i(2), spawn(json!([{"type": "low"}]), "join"), now + secs(2.0)).await);
    let e = explain(&c, top.as_str()).await;
    assert_eq!((e["ended"].clone(), e["total"].clone()), (json!(1), json!(3)), "{e}");

    assert!(api::cancel_task(&c, top.as_str()).await.unwrap());
    let status = |id: String| {
        let c = &c;
        async move { api::get_task(c, &id).await.unwrap().map(|t| json!(t.status)).unwrap_or_default() }
    };
    assert_eq!(status(top.to_string()).await, json!("cancelled"));
    assert_eq!(status(by_i(0).task_id.to_string()).await, json!("succeeded"), "an ended child stays as it was");
    assert_eq!(status(by_i(1).task_id.to_string()).await, json!("cancelled"));
    assert_eq!(status(by_i(2).task_id.to_string()).await, json!("cancelled"));
    let low: String = c
        .query_one(
            "select asyncflow.format_task_id(task_type, shard, id) from asyncflow.tasks where task_type = 'low'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(status(low).await, json!("cancelled"), "a grandchild too");
    // the running child's late report is refused; no join row is left behind
    assert!(!report(&c, &w, &by_i(1), ReportKind::Succeed { result: json!(1) }, now + secs(3.0)).await);
    let joins: i64 = c.query_one("select count(*) from asyncflow.joins", &[]).await.unwrap().get(0);
    assert_eq!(joins, 0);
}

#[tokio::test]
async fn bad_spawns_are_refused_with_a_clear_error_and_change_nothing() {
    let db = TestDb::new().await;
    let c = db.conn().await;
    register(&**c, "fan", json!({})).await;
    register(&**c, "leaf", json!({})).await;
    c.execute("update asyncflow.config set max_context_bytes = 4096", &[]).await.unwrap();
    let id = api::create_task(&c, "fan", &Default::default()).await.unwrap();
    let w = worker("w");
    let call = claim(&c, "fan", &w, 1, t0()).await.remove(0);
    let big = "x".repeat(5000);
    for (reports, says) in [
        (json!({"spawn": [{"type": "nosuch"}]}), "spawn[0]: unknown task type \"nosuch\""),
        (json!({"spawn": [{"type": "leaf"}, {"type": "Bad-Name"}]}), "spawn[1]: unknown task type"),
        (json!({"spawn": {"type": "leaf"}}), "spawn must be a JSON array"),
        (json!({"spawn": "leaf"}), "spawn must be a JSON array"),
        (json!({}), "spawn must be a JSON array"),
        (json!({"spawn": [1]}), "spawn[0]: must be a JSON object"),
        (json!({"spawn": [{"context": {}}]}), "spawn[0]: type must be a string"),
        (json!({"spawn": [{"type": "leaf", "context": [1]}]}), "spawn[0]: context must be a JSON object"),
        (json!({"spawn": [{"type": "leaf", "idempotency_key": "k"}]}), "spawn[0]: idempotency_key is not taken"),
        (json!({"spawn": [{"type": "leaf", "colour": "red"}]}), "spawn[0]: unknown field \"colour\""),
        (json!({"spawn": [{"type": "leaf", "priority": "high"}]}), "the children of type leaf: tasks[0]: priority"),
        (json!({"spawn": [{"type": "leaf", "stage": "no spaces"}]}), "the children of type leaf: tasks[0]: stage"),
        (json!({"spawn": [{"type": "leaf", "context": {"blob": big}}]}), "spawn is too large"),
        (json!({"spawn": [{"type": "leaf"}], "stage": "bad stage"}), "stage must match"),
    ] {
        let mut r = json!({"task_id": id.as_str(), "claim_seq": call.claim_seq, "outcome": "spawn", "stage": "join"});
        r.as_object_mut().unwrap().extend(reports.as_object().unwrap().clone());
        let e = c
            .query("select * from asyncflow.report_tasks('w', $1)", &[&json!([r])])
            .await
            .expect_err(&format!("{reports} is refused"));
        let message = e.as_db_error().map(|d| d.message().to_string()).unwrap_or_default();
        assert!(message.contains(says), "{reports}: {message}");
        assert!(matches!(sqlstate(&e).as_str(), "AF006" | "AF004"), "{reports}: {}", sqlstate(&e));
        let t = task(&**c, id.as_str()).await;
        assert_eq!((t["status"].clone(), t["claim_seq"].clone()), (json!("running"), json!(call.claim_seq)));
        assert_eq!(tasks_of(&c, "leaf").await, 0, "{reports}");
    }
    assert_eq!(tasks_of(&c, "nosuch").await, 0);
    let known: i64 =
        c.query_one("select count(*) from asyncflow.task_types where task_type = 'nosuch'", &[]).await.unwrap().get(0);
    assert_eq!(known, 0, "a spawn registers no type");

    // a function's reply is checked by the worker first: the call fails saying why
    for bad in [
        json!({"spawn": {"type": "leaf"}, "next_stage": "join"}),
        json!({"spawn": [{"type": "Leaf!"}], "next_stage": "join"}),
        json!({"spawn": [{"type": "leaf", "context": 3}], "next_stage": "join"}),
        json!({"spawn": [], "result": 1}),
        json!({"spawn": [], "wait": {"event": "k", "timeout": 1}, "next_stage": "join"}),
    ] {
        assert!(StageReply::from_json(bad.clone()).is_err(), "{bad}");
    }
    let good = json!({"spawn": [{"type": "leaf", "priority": 3}], "next_stage": "join", "context": {"a": 1}});
    let reply = StageReply::from_json(good.clone()).unwrap();
    assert_eq!(reply.to_json(), good);
}

#[tokio::test]
async fn an_empty_spawn_goes_straight_to_its_next_stage() {
    let db = TestDb::new().await;
    let c = db.conn().await;
    register(&**c, "fan", json!({})).await;
    let id = api::create_task(&c, "fan", &Default::default()).await.unwrap();
    let w = worker("w");
    let call = claim(&c, "fan", &w, 1, t0()).await.remove(0);
    assert!(report(&c, &w, &call, spawn(json!([]), "join"), t0()).await);
    let next = claim(&c, "fan", &w, 1, t0() + secs(1.0)).await.remove(0);
    assert_eq!((next.task_id.as_str(), next.stage.as_str()), (id.as_str(), "join"));
    assert_eq!(StageCall::from(next).children, Some(json!([])));
}

#[tokio::test]
async fn a_thousand_children_join_through_one_counter_update_per_report() {
    let db = TestDb::new().await;
    let c = db.conn().await;
    register(&**c, "fan", json!({})).await;
    register(&**c, "leaf", json!({"schedule_limit": 1000})).await;
    let id = api::create_task(&c, "fan", &Default::default()).await.unwrap();
    let w = worker("w");
    let now = t0();
    let call = claim(&c, "fan", &w, 1, now).await.remove(0);
    let list: Vec<Value> = (0..1000).map(|i| json!({"type": "leaf", "context": {"i": i}})).collect();
    assert!(report(&c, &w, &call, spawn(Value::Array(list), "join"), now).await);
    let leaves = claim(&c, "leaf", &w, 1000, now + secs(1.0)).await;
    assert_eq!(leaves.len(), 1000);
    // the last child ends first, a result too large to carry is left out
    let mut order: Vec<&ClaimedTask> = leaves.iter().collect();
    order.sort_by_key(|t| -t.context["i"].as_i64().unwrap());
    let mut raw = db.conn().await;
    for (batch, chunk) in order.chunks(100).enumerate() {
        let reports: Vec<_> = chunk
            .iter()
            .map(|t| {
                let i = t.context["i"].as_i64().unwrap();
                let result = if i == 7 { json!({"big": "y".repeat(5000)}) } else { json!({"i": i}) };
                rep(t.task_id.as_str(), t.claim_seq, ReportKind::Succeed { result })
            })
            .collect();
        // in one transaction, to read its own statistics: 100 children ending are one update of
        // the parent's counter and none of the parent's row (no scan of the children either)
        // (the backend's counts, read before and after: they may hold earlier transactions' too)
        const UPDATES: &str = "select (select n_tup_upd from pg_catalog.pg_stat_xact_user_tables \
            where schemaname = 'asyncflow' and relname = 'joins'), (select n_tup_upd \
            from pg_catalog.pg_stat_xact_user_tables where schemaname = 'asyncflow' and relname = 'tasks_fan_1')";
        let tx = raw.transaction().await.unwrap();
        let before = tx.query_one(UPDATES, &[]).await.unwrap();
        let r = api::report_tasks(&tx, &w, &reports, Some(now + secs(2.0))).await.unwrap();
        assert!(r.iter().all(|r| r.accepted));
        let after = tx.query_one(UPDATES, &[]).await.unwrap();
        let delta = |i: usize| after.get::<_, i64>(i) - before.get::<_, i64>(i);
        let (counter, parent) = (delta(0), delta(1));
        let last = batch == 9;
        assert_eq!(counter, 1, "batch {batch}: one counter update");
        assert_eq!(parent, last as i64, "batch {batch}: the parent changes only at the join");
        tx.commit().await.unwrap();
        if !last {
            let e = explain(&c, id.as_str()).await;
            assert_eq!((e["ended"].clone(), e["total"].clone()), (json!((batch + 1) * 100), json!(1000)));
        }
    }
    let joined = claim(&c, "fan", &w, 1, now + secs(3.0)).await.remove(0);
    assert_eq!(joined.stage, "join");
    let children = StageCall::from(joined).children.unwrap();
    let children = children.as_array().unwrap();
    assert_eq!(children.len(), 1000);
    for (i, k) in children.iter().enumerate() {
        assert_eq!(k["id"], json!(leaves.iter().find(|t| t.context["i"] == json!(i)).unwrap().task_id.as_str()));
        assert_eq!(k["status"], json!("succeeded"));
        if i == 7 {
            assert_eq!((k["result"].clone(), k["result_left_out"].clone()), (Value::Null, json!(true)), "{k}");
        } else {
            assert_eq!(k["result"], json!({"i": i}));
        }
    }
}

#[tokio::test]
async fn children_that_fail_by_the_rescuer_or_are_retried_by_hand_count_once() {
    let db = TestDb::new().await;
    let c = db.conn().await;
    register(&**c, "fan", json!({})).await;
    register(&**c, "leaf", json!({"max_retry_num": 0, "max_processing_time": 10})).await;
    let id = api::create_task(&c, "fan", &Default::default()).await.unwrap();
    let w = worker("w");
    let now = t0();
    let call = claim(&c, "fan", &w, 1, now).await.remove(0);
    assert!(report(&c, &w, &call, spawn(json!([{"type": "leaf"}, {"type": "leaf"}]), "join"), now).await);
    let leaves = claim(&c, "leaf", &w, 2, now).await;
    // one fails for good when its lease runs out (no tries left), the other by its reply
    assert!(report(&c, &w, &leaves[0], ReportKind::Fail { error: "boom".into(), retry: false }, now).await);
    let e = explain(&c, id.as_str()).await;
    assert_eq!(e["ended"], json!(1));
    // retried by hand while the parent waits: live again, it no longer counts
    assert!(api::retry_task(&c, leaves[0].task_id.as_str()).await.unwrap());
    assert_eq!(explain(&c, id.as_str()).await["ended"], json!(0));
    let rescued = api::rescue_expired(&c, Some(now + secs(11.0)), 100, &[]).await.unwrap();
    assert_eq!(rescued[0].status, TaskStatus::Failed);
    assert_eq!(explain(&c, id.as_str()).await["ended"], json!(1));
    let again = claim(&c, "leaf", &w, 1, now + secs(20.0)).await.remove(0);
    assert!(report(&c, &w, &again, ReportKind::Succeed { result: json!("ok") }, now + secs(21.0)).await);
    let children = wake(&c, id.as_str()).await["children"].clone();
    let statuses: Vec<Value> = children.as_array().unwrap().iter().map(|k| k["status"].clone()).collect();
    assert_eq!(statuses, vec![json!("succeeded"), json!("failed")]);
    assert_eq!(task(&**c, id.as_str()).await["status"], json!("pending"));
}

#[tokio::test]
async fn a_worker_on_a_server_spawns_and_its_next_hold_carries_the_children() {
    let db = TestDb::new().await;
    let c = db.conn().await;
    register(&**c, "order", json!({})).await;
    register(&**c, "item", json!({})).await;
    let id = api::create_task(&c, "order", &Default::default()).await.unwrap();
    let app = asyncflow::http::router(db.pool.clone(), &common::http_config(&["tok"], 1 << 20));
    let call = |method: &'static str, path: String, body: Option<Value>| {
        let app = app.clone();
        async move {
            let (status, _, bytes) = common::request(
                &app,
                method,
                &path,
                body.map(|b| b.to_string()),
                Some("application/json"),
                Some("tok"),
            )
            .await;
            (status, serde_json::from_slice::<Value>(&bytes).unwrap_or(Value::Null))
        }
    };
    let hold = |ty: &str, n: i32| json!({"type": ty, "worker_id": "w1", "limit": n});
    let (_, held) = call("POST", "/v1/worker/hold".into(), Some(hold("order", 1))).await;
    let claim_seq = held["tasks"][0]["claim_seq"].clone();
    let report = |extra: Value| {
        let mut r = json!({"task_id": id.as_str(), "claim_seq": claim_seq, "outcome": "spawn", "stage": "ship"});
        r.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        json!({"worker_id": "w1", "reports": [r]})
    };
    // a misspelt field is refused, not dropped
    let (status, _) = call("POST", "/v1/worker/report".into(), Some(report(json!({"spwan": []})))).await;
    assert_eq!(status, 400);
    let (status, answer) = call(
        "POST",
        "/v1/worker/report".into(),
        Some(report(
            json!({"spawn": [{"type": "item", "context": {"sku": "a"}}, {"type": "item", "context": {"sku": "b"}}]}),
        )),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["results"][0]["status"], json!("waiting"));
    let (_, explained) = call("GET", format!("/v1/tasks/{id}/explain"), None).await;
    assert_eq!(explained["reason"], json!("waiting_children"));
    let (_, items) = call("POST", "/v1/worker/hold".into(), Some(hold("item", 2))).await;
    let items = items["tasks"].as_array().unwrap().clone();
    assert_eq!(items.len(), 2);
    let (_, got) = call("GET", format!("/v1/tasks/{}", items[0]["task_id"].as_str().unwrap()), None).await;
    assert_eq!(got["parent_id"], json!(id.as_str()));
    let reports: Vec<Value> = items
        .iter()
        .map(|t| {
            json!({"task_id": t["task_id"], "claim_seq": t["claim_seq"], "outcome": "succeed",
                "result": {"sku": t["context"]["sku"]}})
        })
        .collect();
    let (status, _) =
        call("POST", "/v1/worker/report".into(), Some(json!({"worker_id": "w1", "reports": reports}))).await;
    assert_eq!(status, 200);
    let (_, held) = call("POST", "/v1/worker/hold".into(), Some(hold("order", 1))).await;
    let task: ClaimedTask = serde_json::from_value(held["tasks"][0].clone()).unwrap();
    assert_eq!(task.stage, "ship");
    let sent = serde_json::to_value(StageCall::from(task)).unwrap();
    let skus: Vec<Value> = sent["children"].as_array().unwrap().iter().map(|k| k["result"]["sku"].clone()).collect();
    assert_eq!(skus, vec![json!("a"), json!("b")]);
    assert!(sent.get("event").is_none() && sent.get("timed_out").is_none(), "{sent}");
}

#[tokio::test]
async fn a_waiting_parent_keeps_its_shard_live() {
    let db = TestDb::new().await;
    let c = db.conn().await;
    register(&**c, "roll", json!({"shard_max_rows": 10})).await;
    register(&**c, "leaf", json!({})).await;
    let mut ids = Vec::new();
    for _ in 0..10 {
        ids.push(api::create_task(&c, "roll", &Default::default()).await.unwrap());
    }
    let w = worker("w");
    let call = claim(&c, "roll", &w, 1, t0()).await.remove(0);
    assert!(report(&c, &w, &call, spawn(json!([{"type": "leaf"}]), "join"), t0()).await);
    for id in ids.iter().filter(|id| **id != call.task_id) {
        api::cancel_task(&c, id.as_str()).await.unwrap();
    }
    let rolled: Option<i32> = c.query_one("select asyncflow.roll_shard('roll')", &[]).await.unwrap().get(0);
    assert_eq!(rolled, Some(2));
    let begin: i32 = c.query_one("select asyncflow.advance_begin_pos('roll')", &[]).await.unwrap().get(0);
    assert_eq!(begin, 1, "the waiting parent's shard is still live");
}

#[tokio::test]
async fn get_v1_tasks_children_lists_a_parents_children_for_its_dashboard_page() {
    let db = TestDb::new().await;
    let c = db.conn().await;
    let list: Vec<Value> = (0..3).map(|i| json!({"type": "leaf", "context": {"i": i}})).collect();
    let id = fanned_out(&c, Value::Array(list)).await;
    let app = asyncflow::http::router(db.pool.clone(), &common::http_config(&["tok"], 1 << 20));
    let get = |path: String| {
        let app = app.clone();
        async move {
            let (status, _, bytes) = common::request(&app, "GET", &path, None, None, Some("tok")).await;
            (status, serde_json::from_slice::<Value>(&bytes).unwrap_or(Value::Null))
        }
    };
    let (status, answer) = get(format!("/v1/tasks/{id}/children?limit=2")).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["total"], json!(3));
    let shown: Vec<Value> = answer["children"].as_array().unwrap().iter().map(|k| k["id"].clone()).collect();
    assert_eq!(shown, vec![json!("leaf-1-1"), json!("leaf-1-2")]);
    assert_eq!(answer["children"][0]["status"], json!("pending"));
    let (_, none) = get("/v1/tasks/leaf-1-1/children".into()).await;
    assert_eq!(none, json!({"total": 0, "children": []}));
    assert_eq!(get(format!("/v1/tasks/{id}/children?limit=0")).await.0, 400);
    assert_eq!(get(format!("/v1/tasks/{id}/children?limt=2")).await.0, 400);
    assert_eq!(get("/v1/tasks/fan-1-999/children".into()).await.0, 404);
    // the task page asks for them, and shows a child's parent
    let page =
        [include_str!("../src/http/dashboard/tasks.js"), include_str!("../src/http/dashboard/index.html")].concat();
    for hook in ["/children?limit=", "id=\"children-list\"", "'parent_id'"] {
        assert!(page.contains(hook), "{hook}");
    }
}

#[tokio::test]
async fn cancelling_a_parent_does_not_wait_for_a_child_a_worker_is_writing() {
    let db = TestDb::new().await;
    let c = db.conn().await;
    let id = fanned_out(&c, json!([{"type": "leaf"}, {"type": "leaf"}])).await;
    // a held claim's transaction holds leaf-1-1, as a hold does while its calls run
    let mut holder = db.conn().await;
    let hold = holder.transaction().await.unwrap();
    hold.execute("select 1 from asyncflow.tasks where task_type = 'leaf' and shard = 1 and id = 1 for update", &[])
        .await
        .unwrap();
    let cancelled = tokio::time::timeout(std::time::Duration::from_secs(10), api::cancel_task(&c, &id))
        .await
        .expect("the cancel does not wait for the held child")
        .unwrap();
    assert!(cancelled);
    // the hold's finish then writes its child, which counts on no join any more
    hold.execute(
        "update asyncflow.tasks set status = 'succeeded', finished_at = now() \
         where task_type = 'leaf' and shard = 1 and id = 1",
        &[],
    )
    .await
    .unwrap();
    hold.commit().await.unwrap();
    assert_eq!(task(&**c, "leaf-1-1").await["status"], json!("succeeded"));
    assert_eq!(task(&**c, "leaf-1-2").await["status"], json!("cancelled"));
    assert_eq!(task(&**c, &id).await["status"], json!("cancelled"));
}

/// A child whose context no worker could read (written past the API) fails at its claim, by a
/// plain claim, a fair claim or either's hold, and that end counts on its parent's join as a
/// failure by a reply does.
#[tokio::test]
async fn a_child_failed_at_its_claim_for_an_unreadable_context_counts_on_the_join() {
    use asyncflow::TypeName;
    let db = TestDb::new().await;
    let c = db.conn().await;
    let fair = json!({"fair_queues": true, "max_retry_num": 0});
    let plain = json!({"max_retry_num": 0});
    register(&**c, "fan", json!({})).await;
    for (ty, settings) in [("plain", &plain), ("fair", &fair), ("held", &plain), ("held_fair", &fair)] {
        register(&**c, ty, settings.clone()).await;
    }
    let id = api::create_task(&c, "fan", &Default::default()).await.unwrap();
    let w = worker("w");
    let now = Utc::now();
    let call = claim(&c, "fan", &w, 1, now).await.remove(0);
    let kids = json!([{"type": "plain"}, {"type": "fair"}, {"type": "held"}, {"type": "held_fair"}]);
    assert!(report(&c, &w, &call, spawn(kids, "join"), now).await);
    // past the API: a number no reader can parse, in every child's context
    let n = c
        .execute(
            "update asyncflow.tasks set context = '{\"x\": 1e400}'::text::jsonb where parent_id = $1",
            &[&id.as_str()],
        )
        .await
        .unwrap();
    assert_eq!(n, 4);
    for ty in ["plain", "fair"] {
        assert!(claim(&c, ty, &w, 10, now).await.is_empty(), "{ty}: nothing handed out");
        assert_eq!(explain(&c, id.as_str()).await["reason"], json!("waiting_children"), "{ty}");
    }
    for ty in ["held", "held_fair"] {
        let mut conn = db.pool.get().await.unwrap();
        let tx = conn.transaction().await.unwrap();
        let held = api::hold_tasks(&tx, &TypeName::new(ty).unwrap(), &w, 10).await.unwrap();
        assert!(held.is_empty(), "{ty}: nothing held");
        tx.commit().await.unwrap();
    }
    let parent = task(&**c, id.as_str()).await;
    assert_eq!(parent["status"], json!("pending"), "the join started: {parent}");
    let children = wake(&c, id.as_str()).await["children"].clone();
    let children = children.as_array().unwrap();
    assert_eq!(children.len(), 4);
    for k in children {
        assert_eq!(k["status"], json!("failed"), "{k}");
        assert!(k["error"].as_str().unwrap_or_default().starts_with("context cannot be read"), "{k}");
    }
}

/// A grandchild's end counts on its parent's join (holding that join's row) and starts the join
/// (writing the parent's row) while its grandparent is cancelled: the cancel takes a child's join
/// before the child's row, as the counting does, so neither waits for the other in a cycle (a
/// deadlock error, one of them rolled back) and the child that went on is cancelled too.
#[tokio::test]
async fn cancelling_a_grandparent_while_a_grandchild_ends_is_no_deadlock() {
    let db = TestDb::new().await;
    let c = db.conn().await;
    register(&**c, "mid", json!({})).await;
    let id = fanned_out(&c, json!([{"type": "mid"}])).await;
    let w = worker("w");
    let mid = claim(&c, "mid", &w, 1, t0()).await.remove(0);
    assert!(report(&c, &w, &mid, spawn(json!([{"type": "leaf"}]), "join"), t0()).await);
    let key = mid.task_id.clone();
    // the grandchild's ending statement: it has counted on mid's join, and holds its row
    let mut counter = db.conn().await;
    let ending = counter.transaction().await.unwrap();
    ending
        .execute(
            "select 1 from asyncflow.joins where task_type = $1 and shard = $2 and id = $3 for update",
            &[&key.task_type(), &key.shard(), &key.number()],
        )
        .await
        .unwrap();
    let cancel = {
        let pool = db.pool.clone();
        let id = id.clone();
        tokio::spawn(async move { api::cancel_task(&pool.get().await.unwrap(), &id).await })
    };
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    // its count reaches the total: the join starts, writing mid's row
    ending.execute("select asyncflow.count_child_ends(array[$1])", &[&key.as_str()]).await.unwrap();
    ending.commit().await.unwrap();
    let cancelled = tokio::time::timeout(std::time::Duration::from_secs(10), cancel).await.unwrap().unwrap();
    assert!(cancelled.unwrap());
    assert_eq!(task(&**c, &id).await["status"], json!("cancelled"));
    assert_eq!(task(&**c, key.as_str()).await["status"], json!("cancelled"), "mid went on, then was cancelled");
}
