//! Tasks that wait for an event: the `wait` reply, `send_event`, the timeout, retention, and the
//! races between them (sql/api/45_events.sql), through SQL, HTTP and the command line.
use crate::common;

use asyncflow::db::api;
use asyncflow::function::{StageCall, StageReply};
use asyncflow::task::{ClaimedTask, ReportKind, TaskStatus};
use asyncflow::WorkerId;
use chrono::{DateTime, Utc};
use common::{sqlstate, TestDb};
use serde_json::{json, Value};

use common::sql::*;

fn wait(event: &str, timeout: f64, stage: &str, context: Option<Value>) -> ReportKind {
    ReportKind::Wait { stage: stage.into(), event: event.into(), timeout, context }
}

/// Claims the one ready task of `ty` at `now`.
async fn claim_one(c: &deadpool_postgres::Object, ty: &str, w: &WorkerId, now: DateTime<Utc>) -> ClaimedTask {
    let claimed = api::claim_tasks(c, ty, w, 1, Some(now)).await.unwrap();
    assert_eq!(claimed.len(), 1, "one ready task of {ty} at {now}");
    claimed.into_iter().next().unwrap()
}

async fn send(c: &impl tokio_postgres::GenericClient, key: &str, payload: Value, now: DateTime<Utc>) -> i32 {
    c.query_one("select asyncflow.send_event($1, $2, $3)", &[&key, &payload, &now]).await.unwrap().get(0)
}

async fn report_wait(
    c: &deadpool_postgres::Object,
    w: &WorkerId,
    t: &ClaimedTask,
    kind: ReportKind,
    now: DateTime<Utc>,
) -> TaskStatus {
    let r = api::report_tasks(c, w, &[rep(t.task_id.as_str(), t.claim_seq, kind)], Some(now)).await.unwrap();
    assert!(r[0].accepted, "{r:?}");
    r[0].status.unwrap()
}

/// The log entries that ended a wait, as end_waits writes them.
fn wait_ends(task: &Value) -> usize {
    task["schedule_log"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| matches!(e["event"].as_str(), Some("event received" | "wait timed out")))
        .count()
}

async fn counts(c: &impl tokio_postgres::GenericClient, ty: &str) -> (i64, i64, i64) {
    let r = c
        .query_one(
            "select coalesce(sum(in_pending), 0)::bigint, coalesce(sum(in_running), 0)::bigint, \
             coalesce(sum(in_waiting), 0)::bigint from (select in_pending, in_running, in_waiting \
             from asyncflow.type_counters where task_type = $1 union all select in_pending, in_running, in_waiting \
             from asyncflow.status_deltas where task_type = $1) x",
            &[&ty],
        )
        .await
        .unwrap();
    (r.get(0), r.get(1), r.get(2))
}

#[tokio::test]
async fn an_event_sent_while_the_waiting_call_still_runs_is_delivered_to_its_next_stage() {
    let db = TestDb::new().await;
    let c = db.conn().await;
    register(&**c, "order", json!({})).await;
    let id = api::create_task(&c, "order", &Default::default()).await.unwrap();
    let w = worker("w");
    let call = claim_one(&c, "order", &w, t0()).await;
    // the webhook comes while the call is still running: nobody waits yet
    assert_eq!(send(&**c, "order:1/paid", json!({"amount": 42}), t0() + secs(1.0)).await, 0);
    // the call then asks to wait: the event is already there, so the task goes on at once
    let status =
        report_wait(&c, &w, &call, wait("order:1/paid", 3600.0, "ship", Some(json!({"n": 1}))), t0() + secs(2.0)).await;
    assert_eq!(status, TaskStatus::Waiting, "the report writes the wait; its check then ends it");
    let t = task(&**c, id.as_str()).await;
    assert_eq!((t["status"].as_str(), t["stage"].as_str()), (Some("pending"), Some("ship")));
    assert_eq!(t["context"], json!({"n": 1}));
    let next = claim_one(&c, "order", &w, t0() + secs(3.0)).await;
    assert_eq!(next.stage, "ship");
    let wake = next.wake.clone().expect("the claim carries what ended the wait");
    assert_eq!(wake["timed_out"], json!(false));
    assert_eq!(wake["event"]["key"], json!("order:1/paid"));
    assert_eq!(wake["event"]["payload"], json!({"amount": 42}));
    assert_eq!(at(&wake["event"], "sent_at"), t0() + secs(1.0));
    // the stage call carries it as "event" and "timed_out"
    let call = serde_json::to_value(StageCall::from(next.clone())).unwrap();
    assert_eq!(call["event"]["payload"], json!({"amount": 42}));
    assert_eq!(call["timed_out"], json!(false));
    // a retry of that stage is told again; the stage done, the next one is not
    let r = api::report_tasks(
        &c,
        &w,
        &[rep(next.task_id.as_str(), next.claim_seq, ReportKind::Fail { error: "flaky".into(), retry: true })],
        Some(t0() + secs(4.0)),
    )
    .await
    .unwrap();
    assert!(r[0].accepted);
    let again = claim_one(&c, "order", &w, t0() + secs(100.0)).await;
    assert_eq!(again.wake, next.wake, "a retry of the woken stage carries the event too");
    let r = api::report_tasks(
        &c,
        &w,
        &[rep(again.task_id.as_str(), again.claim_seq, ReportKind::Advance { stage: "bill".into(), context: None })],
        Some(t0() + secs(101.0)),
    )
    .await
    .unwrap();
    assert!(r[0].accepted);
    let bill = claim_one(&c, "order", &w, t0() + secs(102.0)).await;
    assert_eq!(bill.wake, None);
    let call = serde_json::to_value(StageCall::from(bill)).unwrap();
    assert!(call.get("event").is_none() && call.get("timed_out").is_none(), "{call}");
    assert_eq!(counts(&**c, "order").await, (0, 1, 0), "pending, running, waiting");
}

#[tokio::test]
async fn a_waiting_task_is_woken_by_send_event_and_an_event_sent_before_its_call_began_does_not_count() {
    let db = TestDb::new().await;
    let c = db.conn().await;
    register(&**c, "approval", json!({})).await;
    let id = api::create_task(&c, "approval", &Default::default()).await.unwrap();
    let w = worker("w");
    // an event of the key sent before the call began: not for this wait
    assert_eq!(send(&**c, "doc-7", json!({"ok": false}), t0()).await, 0);
    let call = claim_one(&c, "approval", &w, t0() + secs(10.0)).await;
    report_wait(&c, &w, &call, wait("doc-7", 600.0, "approved", None), t0() + secs(11.0)).await;
    let t = task(&**c, id.as_str()).await;
    assert_eq!((t["status"].as_str(), t["stage"].as_str()), (Some("waiting"), Some("approved")));
    assert_eq!(counts(&**c, "approval").await, (0, 0, 1));
    // a waiting task holds no worker and no claim takes it
    assert!(api::claim_tasks(&c, "approval", &w, 10, Some(t0() + secs(12.0))).await.unwrap().is_empty());
    // another key wakes nothing; its key wakes it, once
    assert_eq!(send(&**c, "doc-8", json!({}), t0() + secs(13.0)).await, 0);
    assert_eq!(send(&**c, "doc-7", json!({"ok": true}), t0() + secs(14.0)).await, 1);
    assert_eq!(send(&**c, "doc-7", json!({"ok": "again"}), t0() + secs(15.0)).await, 0);
    let next = claim_one(&c, "approval", &w, t0() + secs(16.0)).await;
    assert_eq!(next.wake.unwrap()["event"]["payload"], json!({"ok": true}));
    assert_eq!(wait_ends(&task(&**c, id.as_str()).await), 1);
}

#[tokio::test]
async fn an_event_with_no_waiter_reaches_a_later_wait_within_retention_and_never_the_same_wait_twice() {
    let db = TestDb::new().await;
    let c = db.conn().await;
    register(&**c, "crawl", json!({})).await;
    c.execute("update asyncflow.config set event_retention = 3600", &[]).await.unwrap();
    let a = api::create_task(&c, "crawl", &Default::default()).await.unwrap();
    let w = worker("w");
    let call = claim_one(&c, "crawl", &w, t0()).await;
    assert_eq!(send(&**c, "page:1", json!({"n": 1}), t0() + secs(5.0)).await, 0);
    // the call asks to wait 30 minutes after the event: the event is kept and found
    report_wait(&c, &w, &call, wait("page:1", 60.0, "s2", None), t0() + secs(1800.0)).await;
    let s2 = claim_one(&c, "crawl", &w, t0() + secs(1801.0)).await;
    assert_eq!(s2.wake.as_ref().unwrap()["event"]["payload"], json!({"n": 1}));
    // the next stage waits for the same key: the event it had is not given again
    report_wait(&c, &w, &s2, wait("page:1", 60.0, "s3", None), t0() + secs(1802.0)).await;
    let t = task(&**c, a.as_str()).await;
    assert_eq!((t["status"].as_str(), t["stage"].as_str()), (Some("waiting"), Some("s3")));
    assert_eq!(wait_ends(&t), 1);

    // past the retention, the event is gone: a wait that begins after that misses it
    let b = api::create_task(&c, "crawl", &Default::default()).await.unwrap();
    let call = claim_one(&c, "crawl", &w, t0() + secs(2000.0)).await;
    assert_eq!(call.task_id, b);
    assert_eq!(send(&**c, "page:2", json!({}), t0() + secs(2001.0)).await, 0);
    // page:1's event (sent at 5 s) goes first, page:2's (2001 s) an hour after it was sent
    assert_eq!(api::drop_expired_events(&c, Some(t0() + secs(2001.0 + 3599.0)), 100).await.unwrap(), 1);
    assert_eq!(api::drop_expired_events(&c, Some(t0() + secs(2001.0 + 3601.0)), 100).await.unwrap(), 1);
    report_wait(&c, &w, &call, wait("page:2", 60.0, "s2", None), t0() + secs(5700.0)).await;
    assert_eq!(task(&**c, b.as_str()).await["status"], json!("waiting"));
}

#[tokio::test]
async fn a_wait_times_out_into_its_next_stage_with_event_null() {
    let db = TestDb::new().await;
    let c = db.conn().await;
    register(&**c, "approval", json!({})).await;
    let id = api::create_task(&c, "approval", &json_task(json!({"doc": 1}))).await.unwrap();
    let w = worker("w");
    let call = claim_one(&c, "approval", &w, t0()).await;
    report_wait(&c, &w, &call, wait("doc-1", 60.0, "decide", None), t0() + secs(1.0)).await;
    assert!(api::expire_waits(&c, Some(t0() + secs(60.0)), 100).await.unwrap().is_empty(), "not yet");
    let ended = api::expire_waits(&c, Some(t0() + secs(61.0)), 100).await.unwrap();
    assert_eq!(ended.len(), 1);
    assert_eq!((ended[0].task_id.as_str(), ended[0].timed_out), (id.as_str(), true));
    assert!(api::expire_waits(&c, Some(t0() + secs(62.0)), 100).await.unwrap().is_empty(), "once");
    assert_eq!(send(&**c, "doc-1", json!({}), t0() + secs(63.0)).await, 0, "the wait is over");
    let next = claim_one(&c, "approval", &w, t0() + secs(64.0)).await;
    assert_eq!((next.stage.as_str(), next.context.clone()), ("decide", json!({"doc": 1})));
    let call = serde_json::to_value(StageCall::from(next)).unwrap();
    assert_eq!((call["event"].clone(), call["timed_out"].clone()), (Value::Null, json!(true)));
    assert!(call.as_object().unwrap().contains_key("event"), "event: null is said, not left out");
}

fn message(e: &tokio_postgres::Error) -> String {
    e.as_db_error().map(|d| d.message().to_string()).unwrap_or_default()
}

fn json_task(context: Value) -> asyncflow::task::NewTask {
    asyncflow::task::NewTask::with_context(context)
}

#[tokio::test]
async fn a_timeout_and_a_racing_send_event_end_the_wait_exactly_once() {
    let db = TestDb::new().await;
    let c = db.conn().await;
    register(&**c, "race", json!({})).await;
    let w = worker("w");
    let n = 40;
    let mut keys: Vec<(String, f64)> = vec![("a".into(), 10.0), ("b".into(), 10.0)];
    keys.extend((0..n).map(|i| (format!("k{i}"), 100.0)));
    for (key, timeout) in &keys {
        api::create_task(&c, "race", &Default::default()).await.unwrap();
        let call = claim_one(&c, "race", &w, t0()).await;
        report_wait(&c, &w, &call, wait(key, *timeout, "next", None), t0()).await;
    }
    let watcher = db.raw().await;

    // the timeout first, in an open transaction: the event waits for the wait's row, then finds
    // it gone and wakes nothing
    let mut b = db.raw().await;
    let tx = b.transaction().await.unwrap();
    let ended: Vec<String> = tx
        .query("select event_key from asyncflow.expire_waits($1, 1) order by 1", &[&(t0() + secs(20.0))])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(ended.len(), 1);
    let (first, second) = if ended[0] == "a" { ("a", "b") } else { ("b", "a") };
    let racing = {
        let pool = db.pool.clone();
        tokio::spawn(async move { send(&**pool.get().await.unwrap(), first, json!({}), t0() + secs(20.0)).await })
    };
    common::wait_for_lock_wait(&watcher, "send_event").await;
    tx.commit().await.unwrap();
    assert_eq!(racing.await.unwrap(), 0, "the timeout won: the event wakes nothing");

    // the event first, in an open transaction: the timeout skips the wait it holds
    let mut a = db.raw().await;
    let tx = a.transaction().await.unwrap();
    assert_eq!(send(&tx, second, json!({}), t0() + secs(20.0)).await, 1);
    assert!(api::expire_waits(&c, Some(t0() + secs(20.0)), 1000).await.unwrap().is_empty());
    tx.commit().await.unwrap();

    // then many at once: each wait ends once, by one path or the other
    let mut handles = Vec::new();
    for i in 0..n {
        let pool = db.pool.clone();
        handles.push(tokio::spawn(async move {
            send(&**pool.get().await.unwrap(), &format!("k{i}"), json!({"i": i}), t0() + secs(200.0)).await as usize
        }));
    }
    let mut expired = 0;
    for _ in 0..4 {
        expired += api::expire_waits(&c, Some(t0() + secs(200.0)), 5).await.unwrap().len();
    }
    let mut woken = 0;
    for h in handles {
        woken += h.await.unwrap();
    }
    expired += api::expire_waits(&c, Some(t0() + secs(200.0)), 1000).await.unwrap().len();
    assert_eq!(woken + expired, n, "woken {woken}, expired {expired}");
    let ids: Vec<String> = c
        .query(
            "select asyncflow.format_task_id(task_type, shard, id) from asyncflow.tasks where task_type = 'race'",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(ids.len(), n + 2);
    for id in &ids {
        let t = task(&**c, id).await;
        assert_eq!(t["status"], json!("pending"), "{t}");
        assert_eq!(wait_ends(&t), 1, "one end of the wait: {t}");
    }
    let left: i64 = c.query_one("select count(*) from asyncflow.waits", &[]).await.unwrap().get(0);
    assert_eq!(left, 0);
    assert_eq!(counts(&**c, "race").await, (n as i64 + 2, 0, 0));
}

#[tokio::test]
async fn bad_keys_timeouts_and_payloads_are_refused_and_change_nothing() {
    let db = TestDb::new().await;
    let c = db.conn().await;
    register(&**c, "order", json!({})).await;
    let id = api::create_task(&c, "order", &Default::default()).await.unwrap();
    let w = worker("w");
    let call = claim_one(&c, "order", &w, t0()).await;
    report_wait(&c, &w, &call, wait("ok-key", 60.0, "next", None), t0()).await;

    let long = "k".repeat(201);
    for key in ["", "has space", "é", long.as_str(), "a;b"] {
        let e = c.query_one("select asyncflow.send_event($1, '{}')", &[&key]).await.unwrap_err();
        assert_eq!(sqlstate(&e), "AF006", "{key:?}: {e}");
        assert!(message(&e).contains("event key must be 1 to 200"), "{e:?}");
    }
    let e = c.query_one("select asyncflow.send_event(null, '{}')", &[]).await.unwrap_err();
    assert_eq!(sqlstate(&e), "AF006");
    let big = json!({"blob": "x".repeat(70_000)});
    let e = c.query_one("select asyncflow.send_event('ok-key', $1)", &[&big]).await.unwrap_err();
    assert_eq!(sqlstate(&e), "AF006");
    assert!(message(&e).contains("payload is too large"), "{e:?}");
    let e = c.query_one("select asyncflow.send_event('ok-key', null)", &[]).await.unwrap_err();
    assert_eq!(sqlstate(&e), "AF006");
    let events: i64 = c.query_one("select count(*) from asyncflow.events", &[]).await.unwrap().get(0);
    assert_eq!(events, 0);
    assert_eq!(task(&**c, id.as_str()).await["status"], json!("waiting"));

    // a wait reply with a bad timeout, key or stage is refused whole; the task is still running
    let id2 = api::create_task(&c, "order", &Default::default()).await.unwrap();
    let call = claim_one(&c, "order", &w, t0()).await;
    assert_eq!(call.task_id, id2);
    for (kind, says) in [
        (wait("k", -1.0, "next", None), "timeout must be"),
        (wait("k", 0.0, "next", None), "timeout must be"),
        (wait("k", 4e7, "next", None), "timeout must be"),
        (wait("bad key", 60.0, "next", None), "event key must be"),
        (wait("k", 60.0, "bad stage!", None), "stage must match"),
        (wait("k", 60.0, "next", Some(json!([1]))), "context must be a JSON object"),
    ] {
        let e = api::report_tasks(&c, &w, &[rep(id2.as_str(), call.claim_seq, kind)], None).await.unwrap_err();
        assert!(e.to_string().contains(says), "{says}: {e}");
    }
    let e = c
        .query(
            "select * from asyncflow.report_tasks('w', $1)",
            &[&json!([{"task_id": id2.as_str(), "claim_seq": call.claim_seq, "outcome": "wait", "stage": "next",
                "event": "k", "timeout": -5}])],
        )
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&e), "AF006", "{e}");
    let t = task(&**c, id2.as_str()).await;
    assert_eq!((t["status"].as_str(), t["stage"].as_str()), (Some("running"), Some("start")));
    let waits: i64 = c.query_one("select count(*) from asyncflow.waits", &[]).await.unwrap().get(0);
    assert_eq!(waits, 1, "only the first task's wait");

    // the reply form: a function's bad wait is its call's failure, with the reason
    for (reply, says) in [
        (json!({"wait": {"event": "k", "timeout": -1}, "next_stage": "s"}), "wait.timeout"),
        (json!({"wait": {"event": "a b", "timeout": 5}, "next_stage": "s"}), "wait.event"),
        (json!({"wait": {"event": "k"}, "next_stage": "s"}), "wait.timeout"),
        (json!({"wait": {"event": "k", "timeout": 5, "x": 1}, "next_stage": "s"}), "unknown field"),
        (json!({"wait": {"event": "k", "timeout": 5}}), "exactly one of"),
        (json!({"wait": "k", "next_stage": "s"}), "wait must be an object"),
    ] {
        let e = StageReply::from_json(reply.clone()).unwrap_err();
        assert!(e.contains(says), "{reply}: {e}");
    }
    assert_eq!(
        StageReply::from_json(json!({"wait": {"event": "k", "timeout": 5}, "next_stage": "s", "context": {"a": 1}}))
            .unwrap(),
        StageReply::Wait { event: "k".into(), timeout: 5.0, next_stage: "s".into(), context: Some(json!({"a": 1})) }
    );
}

#[tokio::test]
async fn cancelling_a_waiting_task_ends_its_wait() {
    let db = TestDb::new().await;
    let c = db.conn().await;
    register(&**c, "order", json!({})).await;
    let id = api::create_task(&c, "order", &Default::default()).await.unwrap();
    let w = worker("w");
    let call = claim_one(&c, "order", &w, t0()).await;
    report_wait(&c, &w, &call, wait("k", 60.0, "next", None), t0()).await;
    assert!(api::cancel_task(&c, id.as_str()).await.unwrap());
    assert_eq!(task(&**c, id.as_str()).await["status"], json!("cancelled"));
    assert_eq!(send(&**c, "k", json!({}), t0() + secs(1.0)).await, 0);
    assert!(api::expire_waits(&c, Some(t0() + secs(100.0)), 10).await.unwrap().is_empty());
    assert_eq!(counts(&**c, "order").await, (0, 0, 0));

    // the bulk cancel takes waiting tasks too
    let id = api::create_task(&c, "order", &Default::default()).await.unwrap();
    let call = claim_one(&c, "order", &w, t0()).await;
    report_wait(&c, &w, &call, wait("k2", 60.0, "next", None), t0()).await;
    let row = c
        .query_one("select changed from asyncflow.bulk_change_tasks('cancel', '{\"status\": \"waiting\"}')", &[])
        .await
        .unwrap();
    assert_eq!(row.get::<_, i64>(0), 1);
    assert_eq!(task(&**c, id.as_str()).await["status"], json!("cancelled"));
    let waits: i64 = c.query_one("select count(*) from asyncflow.waits", &[]).await.unwrap().get(0);
    assert_eq!(waits, 0);
}

#[tokio::test]
async fn a_wait_and_its_event_racing_in_open_transactions_never_miss_each_other() {
    let db = TestDb::new().await;
    let c = db.conn().await;
    register(&**c, "order", json!({})).await;
    let w = worker("w");
    let watcher = db.raw().await;
    let a = api::create_task(&c, "order", &Default::default()).await.unwrap();
    let b = api::create_task(&c, "order", &Default::default()).await.unwrap();
    let calls = api::claim_tasks(&c, "order", &w, 2, Some(t0())).await.unwrap();

    // the wait commits last: its report holds the key until it commits, and the event, sent
    // meanwhile, finds the committed wait
    let mut o = db.conn().await;
    let tx = o.transaction().await.unwrap();
    let call_a = calls.iter().find(|t| t.task_id == a).unwrap();
    let r = api::report_tasks(&tx, &w, &[rep(a.as_str(), call_a.claim_seq, wait("k-a", 60.0, "next", None))], None)
        .await
        .unwrap();
    assert!(r[0].accepted);
    let racing = {
        let pool = db.pool.clone();
        tokio::spawn(async move { send(&**pool.get().await.unwrap(), "k-a", json!({"a": 1}), t0() + secs(1.0)).await })
    };
    common::wait_for_lock_wait(&watcher, "send_event").await;
    tx.commit().await.unwrap();
    assert_eq!(racing.await.unwrap(), 1, "the event woke the wait committed before it");

    // the event commits last: the wait's own check waits for it, then finds the event
    let mut o = db.raw().await;
    let tx = o.transaction().await.unwrap();
    assert_eq!(send(&tx, "k-b", json!({"b": 1}), t0() + secs(1.0)).await, 0);
    let call_b = calls.iter().find(|t| t.task_id == b).unwrap().clone();
    let racing = {
        let pool = db.pool.clone();
        tokio::spawn(async move {
            let c = pool.get().await.unwrap();
            api::report_tasks(
                &c,
                &worker("w"),
                &[rep(call_b.task_id.as_str(), call_b.claim_seq, wait("k-b", 60.0, "next", None))],
                None,
            )
            .await
            .unwrap()
        })
    };
    common::wait_for_lock_wait(&watcher, "type_report__order").await;
    tx.commit().await.unwrap();
    assert!(racing.await.unwrap()[0].accepted);
    for id in [&a, &b] {
        let t = task(&**c, id.as_str()).await;
        assert_eq!(t["status"], json!("pending"), "{t}");
    }
    let woken = api::claim_tasks(&c, "order", &w, 2, Some(t0() + secs(2.0))).await.unwrap();
    let mut payloads: Vec<Value> = woken.iter().map(|t| t.wake.clone().unwrap()["event"]["payload"].clone()).collect();
    payloads.sort_by_key(|p| p.to_string());
    assert_eq!(payloads, vec![json!({"a": 1}), json!({"b": 1})]);
}

#[tokio::test]
async fn post_v1_events_and_the_event_command_send_events_and_refuse_bad_ones() {
    let db = TestDb::new().await;
    let c = db.conn().await;
    register(&**c, "order", json!({})).await;
    let w = worker("w");
    for key in ["http-1", "cli-1"] {
        api::create_task(&c, "order", &Default::default()).await.unwrap();
        // on the real clock: the route and the command send at the database's time
        let call = claim_one(&c, "order", &w, Utc::now()).await;
        report_wait(&c, &w, &call, wait(key, 3600.0, "next", None), Utc::now()).await;
    }
    let app = asyncflow::http::router(db.pool.clone(), &common::http_config(&["tok"], 1 << 20));
    let (status, _, body) = common::request(
        &app,
        "POST",
        "/v1/events",
        Some(json!({"key": "http-1", "payload": {"by": "http"}}).to_string()),
        Some("application/json"),
        Some("tok"),
    )
    .await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    assert_eq!(serde_json::from_slice::<Value>(&body).unwrap(), json!({"key": "http-1", "woken": 1}));
    for bad in [
        json!({"key": "no spaces"}),
        json!({"key": "k", "payload": {"x": "y".repeat(70_000)}}),
        json!({"payload": {}}),
        json!({"key": "k", "extra": 1}),
    ] {
        let (status, _, body) =
            common::request(&app, "POST", "/v1/events", Some(bad.to_string()), Some("application/json"), Some("tok"))
                .await;
        assert_eq!(status, 400, "{bad}: {}", String::from_utf8_lossy(&body));
    }

    let out = common::cli::asyncflow(Some(&db.url), &["event", "send", "cli-1", "--payload", r#"{"by": "cli"}"#]);
    let sent: Value = serde_json::from_str(&common::cli::ok(&out)).unwrap();
    assert_eq!(sent, json!({"key": "cli-1", "woken": 1}));
    let err = common::cli::refused(&common::cli::asyncflow(Some(&db.url), &["event", "send", "bad key"]));
    assert!(err.contains("event key must be"), "{err}");
    let err = common::cli::refused(&common::cli::asyncflow(Some(&db.url), &["event", "send", "k", "--payload", "{"]));
    assert!(err.contains("--payload"), "{err}");

    let events: i64 = c.query_one("select count(*) from asyncflow.events", &[]).await.unwrap().get(0);
    assert_eq!(events, 2, "only the good ones were kept");
    let woken = api::claim_tasks(&c, "order", &w, 2, None).await.unwrap();
    let mut by: Vec<Value> = woken.iter().map(|t| t.wake.clone().unwrap()["event"]["payload"]["by"].clone()).collect();
    by.sort_by_key(|p| p.to_string());
    assert_eq!(by, vec![json!("cli"), json!("http")]);
}

#[tokio::test]
async fn a_worker_runs_the_stage_after_a_wait_with_the_event_in_its_call() {
    use asyncflow::worker::{Worker, WorkerConfig};
    use asyncflow::TypeName;
    use std::time::Duration;
    let db = TestDb::new().await;
    let c = db.conn().await;
    let ty = TypeName::new("approval").unwrap();
    api::register_task_type(&c, &ty, &Default::default()).await.unwrap();
    let a = api::create_task(&c, "approval", &json_task(json!({"doc": "a"}))).await.unwrap();
    let b = api::create_task(&c, "approval", &json_task(json!({"doc": "b"}))).await.unwrap();
    let pool = db.pool.clone();
    // "a" is approved while its first call still runs; "b" later, by hand
    let handler = move |call: StageCall| {
        let pool = pool.clone();
        async move {
            let doc = call.context["doc"].as_str().unwrap_or_default().to_string();
            match call.stage.as_str() {
                "start" => {
                    if doc == "a" {
                        let c = pool.get().await.unwrap();
                        api::send_event(&c, "doc:a", &json!({"approved": true}), None).await.unwrap();
                    }
                    StageReply::Wait {
                        event: format!("doc:{doc}"),
                        timeout: 3600.0,
                        next_stage: "decide".into(),
                        context: Some(json!({"doc": doc, "asked": true})),
                    }
                }
                _ => StageReply::Succeeded {
                    result: json!({"event": call.event, "timed_out": call.timed_out, "context": call.context}),
                },
            }
        }
    };
    let run = |handler| {
        let worker = Worker::new(db.pool.clone(), db.url.clone(), WorkerConfig::default()).register(
            ty.clone(),
            handler,
            None,
            Default::default(),
        );
        tokio::time::timeout(Duration::from_secs(60), asyncflow::testing::work_until_idle(worker))
    };
    let summary = run(handler.clone()).await.expect("idle").unwrap();
    assert_eq!((summary.waited, summary.succeeded), (2, 1), "{summary:?}");
    let ta = api::get_task(&c, a.as_str()).await.unwrap().unwrap();
    assert_eq!(ta.status, TaskStatus::Succeeded);
    let result = ta.result.unwrap();
    assert_eq!(result["event"]["payload"], json!({"approved": true}));
    assert_eq!(result["timed_out"], json!(false));
    assert_eq!(result["context"], json!({"doc": "a", "asked": true}));
    assert_eq!(api::get_task(&c, b.as_str()).await.unwrap().unwrap().status, TaskStatus::Waiting);

    assert_eq!(api::send_event(&c, "doc:b", &json!({"approved": false}), None).await.unwrap(), 1);
    let summary = run(handler).await.expect("idle").unwrap();
    assert_eq!(summary.succeeded, 1, "{summary:?}");
    let tb = api::get_task(&c, b.as_str()).await.unwrap().unwrap();
    assert_eq!(tb.result.unwrap()["event"]["payload"], json!({"approved": false}));
}

#[tokio::test]
async fn a_worker_on_a_server_reports_a_wait_and_its_next_hold_carries_the_event() {
    let db = TestDb::new().await;
    let c = db.conn().await;
    register(&**c, "order", json!({})).await;
    let id = api::create_task(&c, "order", &Default::default()).await.unwrap();
    let app = asyncflow::http::router(db.pool.clone(), &common::http_config(&["tok"], 1 << 20));
    let post = |path: &'static str, body: Value| {
        let app = app.clone();
        async move {
            let (status, _, bytes) =
                common::request(&app, "POST", path, Some(body.to_string()), Some("application/json"), Some("tok"))
                    .await;
            (status, serde_json::from_slice::<Value>(&bytes).unwrap_or(Value::Null))
        }
    };
    let hold = json!({"type": "order", "worker_id": "w1", "limit": 1});
    let (status, held) = post("/v1/worker/hold", hold.clone()).await;
    assert_eq!(status, 200, "{held}");
    let claim_seq = held["tasks"][0]["claim_seq"].clone();
    let report = |extra: Value| {
        let mut r = json!({"task_id": id.as_str(), "claim_seq": claim_seq, "outcome": "wait"});
        r.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        json!({"worker_id": "w1", "reports": [r]})
    };
    // a misspelt field is refused, not dropped
    let (status, _) = post("/v1/worker/report", report(json!({"stage": "paid", "event": "pay:1", "timout": 5}))).await;
    assert_eq!(status, 400);
    let (status, answer) =
        post("/v1/worker/report", report(json!({"stage": "paid", "event": "pay:1", "timeout": 600}))).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["results"][0]["status"], json!("waiting"));
    let (_, sent) = post("/v1/events", json!({"key": "pay:1", "payload": {"ok": true}})).await;
    assert_eq!(sent["woken"], json!(1));
    let (_, held) = post("/v1/worker/hold", hold).await;
    let task: ClaimedTask = serde_json::from_value(held["tasks"][0].clone()).unwrap();
    assert_eq!(task.stage, "paid");
    let call = serde_json::to_value(StageCall::from(task)).unwrap();
    assert_eq!((call["event"]["payload"].clone(), call["timed_out"].clone()), (json!({"ok": true}), json!(false)));
}

#[tokio::test]
async fn a_waiting_task_keeps_its_shard_live() {
    let db = TestDb::new().await;
    let c = db.conn().await;
    register(&**c, "roll", json!({"shard_max_rows": 10})).await;
    let mut ids = Vec::new();
    for _ in 0..10 {
        ids.push(api::create_task(&c, "roll", &Default::default()).await.unwrap());
    }
    let w = worker("w");
    let call = claim_one(&c, "roll", &w, t0()).await;
    report_wait(&c, &w, &call, wait("k", 3600.0, "next", None), t0()).await;
    for id in ids.iter().filter(|id| **id != call.task_id) {
        api::cancel_task(&c, id.as_str()).await.unwrap();
    }
    let rolled: Option<i32> = c.query_one("select asyncflow.roll_shard('roll')", &[]).await.unwrap().get(0);
    assert_eq!(rolled, Some(2));
    let begin: i32 = c.query_one("select asyncflow.advance_begin_pos('roll')", &[]).await.unwrap().get(0);
    assert_eq!(begin, 1, "the waiting task's shard is still live");
    let closed: Option<DateTime<Utc>> = c
        .query_one("select closed_at from asyncflow.shards where task_type = 'roll' and shard = 1", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(closed, None);
    // woken, it is claimed from its own shard
    assert_eq!(send(&**c, "k", json!({}), t0() + secs(1.0)).await, 1);
    assert_eq!(claim_one(&c, "roll", &w, t0() + secs(2.0)).await.task_id, call.task_id);
}
