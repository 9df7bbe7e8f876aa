//! Data asyncflow could store but not read back (issue: numbers beyond f64, nesting beyond
//! serde_json's limit, clocks beyond RFC 3339's years) is refused where it comes in: AF006
//! naming the field (HTTP 400), nothing changed. Values at the limits are taken and read back by
//! the Rust readers (`api::get_task`, claims, the HTTP API).
use crate::common;

use asyncflow::db::api;
use asyncflow::http::router;
use asyncflow::task::ReportKind;
use axum::http::StatusCode;
use common::sql::*;
use common::workflow::{pipeline, start};
use common::{http_config, request, sqlstate, TestDb};
use serde_json::{json, Value};

/// An object `levels` deep: {"a": [[...[1]...]]} (an object, then arrays).
fn deep(levels: usize) -> String {
    format!("{{\"a\": {}1{}}}", "[".repeat(levels - 1), "]".repeat(levels - 1))
}

/// Objects only, `levels` deep: {"a": {"a": ... 1}}.
fn deep_objects(levels: usize) -> String {
    format!("{}1{}", "{\"a\": ".repeat(levels), "}".repeat(levels))
}

/// f64's largest, written out as PostgreSQL keeps it: a 309-digit integer.
fn f64_max_digits() -> String {
    format!("17976931348623157{}", "0".repeat(292))
}

/// Contexts no reader can parse back, with the start of the reason given.
fn bad_contexts() -> Vec<(String, &'static str)> {
    let number = "holds the number";
    let nests = "nests deeper than 64 levels";
    vec![
        (r#"{"n": 1e400}"#.to_string(), number),
        (r#"{"n": -1e400}"#.to_string(), number),
        (r#"{"n": 1.7976931348623157e308}"#.to_string(), number),
        (format!(r#"{{"n": {}}}"#, f64_max_digits()), number),
        (r#"{"n": 1.0000000000000001e308}"#.to_string(), number),
        (r#"{"a": [1, "x", {"b": [true, -1e309]}]}"#.to_string(), number),
        (deep(65), nests),
        (deep_objects(65), nests),
        (deep(200), nests),
        (deep(10_000), nests),
    ]
}

/// Contexts at the limits: every one is stored and read back.
fn good_contexts() -> Vec<String> {
    vec![
        r#"{"n": 1e307}"#.to_string(),
        r#"{"n": 1e308, "m": -1e308}"#.to_string(),
        r#"{"n": 9.999999999999999999e307}"#.to_string(),
        r#"{"n": 1e-400, "s": "1e400", "1e400": [1e-5]}"#.to_string(),
        deep(64),
        deep_objects(64),
    ]
}

fn message(e: &tokio_postgres::Error) -> String {
    e.as_db_error().map(|d| d.message().to_string()).unwrap_or_else(|| format!("{e:?}"))
}

/// The call fails with AF006 and a message that starts with `start`.
fn assert_refused(e: &tokio_postgres::Error, start: &str, what: &str) {
    assert_eq!(sqlstate(e), "AF006", "{what}: {}", message(e));
    assert!(message(e).starts_with(start), "{what}: {:?} does not start with {start:?}", message(e));
}

async fn count(c: &tokio_postgres::Client, table: &str) -> i64 {
    c.query_one(&format!("select count(*) from asyncflow.{table}"), &[]).await.unwrap().get(0)
}

#[tokio::test]
async fn json_a_reader_cannot_parse_is_refused_where_tasks_are_created() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    register(&c, "edge", json!({})).await;
    for (bad, why) in bad_contexts() {
        let what = &bad[..bad.len().min(40)];
        // create_task's direct path (no idempotency key) hands a refused context to the general
        // path, which names it; with a key, the general path through insert_tasks
        for sql in [
            "select asyncflow.create_task('edge', $1::text::jsonb)",
            "select asyncflow.create_task('edge', $1::text::jsonb, 30, stage => 's', user_id => 'u')",
            "select asyncflow.create_task('edge', $1::text::jsonb, idempotency_key => 'k')",
        ] {
            let e = c.query_one(sql, &[&bad]).await.unwrap_err();
            assert_refused(&e, &format!("context: {why}"), &format!("{sql} {what}"));
        }
        let e = c
            .query(
                "select * from asyncflow.create_tasks('edge', jsonb_build_array('{}'::jsonb, \
                 '{\"context\": {\"ok\": 1}}'::jsonb, '{\"idempotency_key\": \"k2\"}'::jsonb, \
                 jsonb_build_object('context', $1::text::jsonb)))",
                &[&bad],
            )
            .await
            .unwrap_err();
        assert_refused(&e, &format!("tasks[3].context: {why}"), &format!("create_tasks {what}"));
    }
    assert_eq!(count(&c, "tasks").await, 0, "nothing was created");
    assert_eq!(count(&c, "idempotency_keys").await, 0, "no key was taken");

    // the number in the message is cut, the rule named
    let e = c.query_one("select asyncflow.create_task('edge', '{\"n\": 1e400}')", &[]).await.unwrap_err();
    assert_eq!(
        message(&e),
        "context: holds the number 10000000000000000000… (401 characters): numbers must lie between -1e308 \
         and 1e308 (the limit of asyncflow's JSON)"
    );
}

#[tokio::test]
async fn json_at_the_limits_is_stored_and_read_back_by_every_reader() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    let pool = db.conn().await;
    register(&c, "edge", json!({})).await;
    let mut ids = Vec::new();
    for good in good_contexts() {
        let id: String =
            c.query_one("select asyncflow.create_task('edge', $1::text::jsonb)", &[&good]).await.unwrap().get(0);
        ids.push((id, good.clone()));
        let bulk: Vec<String> = c
            .query(
                "select * from asyncflow.create_tasks('edge', jsonb_build_array(jsonb_build_object('context', \
                 $1::text::jsonb, 'idempotency_key', md5($1::text))))",
                &[&good],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        ids.push((bulk[0].clone(), good));
    }
    for (id, good) in &ids {
        // the Rust reader (serde_json into the Task type) takes it
        let t = api::get_task(&pool, id).await.unwrap_or_else(|e| panic!("{id} {}: {e}", &good[..20])).unwrap();
        if !good.contains('e') {
            assert_eq!(t.context, serde_json::from_str::<Value>(good).unwrap());
        }
    }
    // a claim reads every context of the type: none stalls it
    let claimed = api::claim_tasks(&pool, "edge", &worker("w"), 100, None).await.unwrap();
    assert_eq!(claimed.len(), ids.len());
    // what a worker read it may hand on: 9.999999999999999999e307 reads as the f64 nearest 1e308,
    // which writes as 1e+308, within the range
    let edge = claimed.iter().find(|t| t.context["n"].as_f64().is_some_and(|n| n > 9e307)).unwrap();
    let context = edge.context.clone();
    let results = api::report_tasks(
        &pool,
        &worker("w"),
        &[rep(
            edge.task_id.as_str(),
            edge.claim_seq,
            ReportKind::Advance { stage: "next".into(), context: Some(context) },
        )],
        None,
    )
    .await
    .unwrap();
    assert!(results[0].accepted, "{results:?}");
}

#[tokio::test]
async fn reports_refuse_contexts_and_results_a_reader_cannot_parse() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    register(&c, "edge", json!({})).await;
    c.query("select * from asyncflow.create_tasks('edge', '[{}, {}]')", &[]).await.unwrap();
    let claimed: Vec<(String, i64)> = c
        .query("select task_id, claim_seq from asyncflow.claim_tasks('edge', 'w', 10)", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let (first, second) = (&claimed[0], &claimed[1]);
    for (bad, why) in bad_contexts() {
        let what = &bad[..bad.len().min(40)];
        let good = json!({"task_id": first.0, "claim_seq": first.1, "outcome": "succeed", "result": {"ok": 1}});
        for (report, field) in [
            (json!({"outcome": "advance", "stage": "s2", "context": "BAD"}), "context"),
            (json!({"outcome": "later", "delay": 5, "context": "BAD"}), "context"),
            (json!({"outcome": "succeed", "result": "BAD"}), "result"),
        ] {
            let mut report = report;
            report["task_id"] = json!(second.0);
            report["claim_seq"] = json!(second.1);
            // the bad value goes in as text: serde_json could not hold it
            let reports = json!([good, report]).to_string().replace("\"BAD\"", &bad);
            let e =
                c.query("select * from asyncflow.report_tasks('w', $1::text::jsonb)", &[&reports]).await.unwrap_err();
            assert_refused(&e, &format!("reports[1].{field}: {why}"), &format!("report_tasks {field} {what}"));
        }
        // the typed arrays: report_task_arrays and the type's own function
        for sql in [
            "select * from asyncflow.report_task_arrays('w', array[$1::text, $2::text], array[$3::bigint, \
             $4::bigint], array['succeed', 'succeed'], p_results => array['{}'::jsonb, $5::text::jsonb])",
            "select * from asyncflow.type_report__edge('w', array[$1::text, $2::text], array[$3::bigint, \
             $4::bigint], array['succeed', 'succeed'], null, null, array['{}'::jsonb, $5::text::jsonb], null, null, \
             null, null)",
            "select * from asyncflow.type_report__edge('w', array[$1::text, $2::text], array[$3::bigint, \
             $4::bigint], array['advance', 'advance'], array['s', 's'], array['{}'::jsonb, $5::text::jsonb], null, \
             null, null, null, null)",
        ] {
            let e = c.query(sql, &[&first.0, &second.0, &first.1, &second.1, &bad]).await.unwrap_err();
            let field = if sql.contains("advance") { "context" } else { "result" };
            assert_refused(&e, &format!("reports[1].{field}: {why}"), &format!("{sql} {what}"));
        }
    }
    // nothing was applied: both tasks still run under their claims
    for (id, seq) in &claimed {
        let t = task(&c, id).await;
        assert_eq!((t["status"].clone(), t["claim_seq"].clone()), (json!("running"), json!(seq)), "{t}");
    }
    // at the limit: accepted
    let deepest = serde_json::from_str::<Value>(&deep(64)).unwrap();
    let ok: Vec<bool> = c
        .query(
            "select accepted from asyncflow.report_tasks('w', $1)",
            &[&json!([{"task_id": first.0, "claim_seq": first.1, "outcome": "succeed", "result": deepest},
                      {"task_id": second.0, "claim_seq": second.1, "outcome": "advance", "stage": "s2",
                       "context": {"n": 1e308}}])],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(ok, vec![true, true]);
    assert_eq!(task(&c, &first.0).await["result"], deepest);
}

#[tokio::test]
async fn a_held_reply_a_reader_cannot_parse_is_claimed_and_its_report_refused() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    register(&c, "edge", json!({})).await;
    c.query("select * from asyncflow.create_tasks('edge', '[{}, {}]')", &[]).await.unwrap();
    c.batch_execute("begin").await.unwrap();
    let held: Vec<(String, i64)> = c
        .query("select task_id, claim_seq from asyncflow.type_hold__edge('w', 10)", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(held.len(), 2);
    let parts = |id: &str| {
        let id = asyncflow::TaskId::parse(id).unwrap();
        (id.shard(), id.number())
    };
    let ((s0, n0), (s1, n1)) = (parts(&held[0].0), parts(&held[1].0));
    // a success whose result nests too deep, an advance whose context holds 1e400
    let answers: Vec<(i64, bool, String)> = c
        .query(
            "select n, accepted, status::text from asyncflow.type_finish__edge('w', array[$1::integer, \
             $2::integer], array[$3::bigint, $4::bigint], array[$5::bigint, $6::bigint], array['succeed', 'advance'], \
             array[$7::text::jsonb, null], array[null, 's2'], array[null, '{\"n\": 1e400}'::jsonb], \
             array[0.001, 0.001]::float8[])",
            &[&s0, &s1, &n0, &n1, &held[0].1, &held[1].1, &deep(65)],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    c.batch_execute("commit").await.unwrap();
    // both claimed (running, leased) instead of written: answered, as a reply that did not pass
    assert_eq!(answers, vec![(1, true, "running".to_string()), (2, true, "running".to_string())]);
    for (id, _) in &held {
        let t = task(&c, id).await;
        assert_eq!((t["status"].clone(), t["stage"].clone()), (json!("running"), json!("start")), "{t}");
    }
    // the worker then reports the reply as usual, and it is refused naming the field
    let e = c
        .query(
            "select * from asyncflow.report_tasks('w', jsonb_build_array(jsonb_build_object('task_id', $1::text, \
             'claim_seq', $2::bigint, 'outcome', 'succeed', 'result', $3::text::jsonb)))",
            &[&held[0].0, &held[0].1, &deep(65)],
        )
        .await
        .unwrap_err();
    assert_refused(&e, "reports[0].result: nests deeper than 64 levels", "report of a held reply");
}

/// A pipeline whose one node is asynchronous: its task, then its external completion.
async fn async_pipeline(c: &tokio_postgres::Client) {
    register(c, "wf", json!({})).await;
    pipeline(
        c,
        "ext",
        json!({"nodes": [{"name": "start", "type": "start"}, {"name": "wait", "type": "task", "async": true},
            {"name": "work", "type": "task", "function": "wf"}, {"name": "end", "type": "end"}],
            "edges": [["start", "wait"], ["wait", "work"], ["work", "end"]]}),
    )
    .await;
}

#[tokio::test]
async fn runs_refuse_inputs_and_node_results_a_reader_cannot_parse() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    async_pipeline(&c).await;
    for (bad, why) in bad_contexts() {
        let what = &bad[..bad.len().min(40)];
        let e = c.query_one("select asyncflow.start_run('ext', $1::text::jsonb)", &[&bad]).await.unwrap_err();
        assert_refused(&e, &format!("input: {why}"), &format!("start_run {what}"));
    }
    assert_eq!(count(&c, "runs").await, 0, "no run was started");

    let run_id = start(&c, "ext", json!({"x": 1}), None, None).await;
    for (bad, why) in bad_contexts() {
        let what = &bad[..bad.len().min(40)];
        let e = c
            .query_one("select asyncflow.complete_node($1, 'wait', $2::text::jsonb)", &[&run_id, &bad])
            .await
            .unwrap_err();
        assert_refused(&e, &format!("result: {why}"), &format!("complete_node {what}"));
    }
    let run: Value = c.query_one("select asyncflow.get_run($1)", &[&run_id]).await.unwrap().get(0);
    let wait = run["events"].as_array().unwrap().iter().find(|e| e["node"] == "wait").unwrap();
    assert_eq!(wait["status"], "external", "still waiting: {wait}");

    // at the limit: taken. A node's context holds the run's input one level down and its
    // predecessors' results two levels down: a task whose context would nest deeper than the
    // rule allows is not made, and its node fails saying so.
    let deepest = serde_json::from_str::<Value>(&deep(64)).unwrap();
    let after: Value =
        c.query_one("select asyncflow.complete_node($1, 'wait', $2)", &[&run_id, &deepest]).await.unwrap().get(0);
    assert_eq!(after["status"], "failed", "{after}");
    let run: Value = c.query_one("select asyncflow.get_run($1)", &[&run_id]).await.unwrap().get(0);
    let work = run["events"].as_array().unwrap().iter().find(|e| e["node"] == "work").unwrap();
    assert_eq!(work["status"], "failed", "{work}");
    let error = work["error"].as_str().unwrap_or_default();
    assert!(error.contains("context: nests deeper than 64 levels"), "{error}");
    let input_at_limit = start(&c, "ext", deepest.clone(), None, None).await;
    let run: Value = c.query_one("select asyncflow.get_run($1)", &[&input_at_limit]).await.unwrap().get(0);
    assert_eq!(run["input"], deepest);
    let wide = start(&c, "ext", json!({"n": 1e308}), None, None).await;
    let done: Value = c
        .query_one("select asyncflow.complete_node($1, 'wait', $2)", &[&wide, &json!({"m": -1e308})])
        .await
        .unwrap()
        .get(0);
    assert_eq!(done["status"], "running", "{done}");
    let work: Vec<Value> = c
        .query("select context from asyncflow.claim_tasks('wf', 'w', 10)", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(work.len(), 1);
    assert_eq!(work[0]["inputs"]["wait"], json!({"m": -1e308}));
}

/// A call of each public function that takes a clock, with everything but the clock ($1) valid.
fn clocked_calls(task: &str, failed: &str, run: &str) -> Vec<String> {
    let q = |s: &str| format!("'{s}'");
    let (task, failed, run) = (q(task), q(failed), q(run));
    vec![
        "select asyncflow.create_task('edge', '{}', p_now => $1::text::timestamptz)".into(),
        "select asyncflow.create_task('edge', '{}', 5, stage => 's', p_now => $1::text::timestamptz)".into(),
        "select asyncflow.create_task('edge', '{}', idempotency_key => 'k', p_now => $1::text::timestamptz)".into(),
        "select * from asyncflow.create_tasks('edge', '[{}]', $1::text::timestamptz)".into(),
        "select * from asyncflow.claim_tasks('edge', 'w', 10, $1::text::timestamptz)".into(),
        "select * from asyncflow.type_claim__edge('w', 10, $1::text::timestamptz)".into(),
        format!(
            "select * from asyncflow.report_tasks('w', jsonb_build_array(jsonb_build_object('task_id', {task}, \
             'claim_seq', 1, 'outcome', 'succeed')), $1::text::timestamptz)"
        ),
        format!(
            "select * from asyncflow.report_task_arrays('w', array[{task}], array[1], array['succeed'], \
             p_now => $1::text::timestamptz)"
        ),
        format!(
            "select * from asyncflow.type_report__edge('w', array[{task}], array[1], array['succeed'], null, null, \
             null, null, null, null, $1::text::timestamptz)"
        ),
        format!("select asyncflow.cancel_task({task}, $1::text::timestamptz)"),
        format!("select asyncflow.retry_task({failed}, $1::text::timestamptz)"),
        "select asyncflow.start_run('ext', p_now => $1::text::timestamptz)".into(),
        format!("select asyncflow.cancel_run({run}, $1::text::timestamptz)"),
        format!("select asyncflow.retry_run({run}, $1::text::timestamptz)"),
        format!("select asyncflow.retry_node({run}, 'wait', $1::text::timestamptz)"),
        format!("select asyncflow.complete_node({run}, 'wait', p_now => $1::text::timestamptz)"),
        "select * from asyncflow.rescue_expired($1::text::timestamptz)".into(),
        "select asyncflow.roll_shard('edge', $1::text::timestamptz)".into(),
        "select asyncflow.advance_begin_pos('edge', $1::text::timestamptz)".into(),
        "select * from asyncflow.drop_expired_shards('edge', $1::text::timestamptz)".into(),
        "select * from asyncflow.check_runs($1::text::timestamptz)".into(),
        "select * from asyncflow.claim_callbacks('w', 10, 60, $1::text::timestamptz)".into(),
        "select asyncflow.record_callback('r20300101-x_cb1', 1, 200, null, 5, false, $1::text::timestamptz)".into(),
        "select * from asyncflow.drop_expired_runs($1::text::timestamptz)".into(),
        "select asyncflow.maintenance_due($1::text::timestamptz)".into(),
    ]
}

#[tokio::test]
async fn clocks_outside_the_readable_range_are_refused_by_every_function_that_takes_one() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    register(&c, "edge", json!({"max_retry_num": 0})).await;
    async_pipeline(&c).await;
    let ids: Vec<String> = c
        .query("select * from asyncflow.create_tasks('edge', '[{}, {}]')", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let claimed: Vec<(String, i64)> = c
        .query("select task_id, claim_seq from asyncflow.claim_tasks('edge', 'w', 10)", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(claimed.len(), 2);
    let (running, failed) = (&ids[0], &ids[1]);
    let failed_seq = claimed.iter().find(|(id, _)| id == failed).map(|(_, seq)| *seq);
    c.query(
        "select * from asyncflow.report_tasks('w', jsonb_build_array(jsonb_build_object('task_id', $1::text, \
         'claim_seq', $2::bigint, 'outcome', 'fail', 'retry', false)))",
        &[failed, &failed_seq],
    )
    .await
    .unwrap();
    let run_id = start(&c, "ext", json!({}), None, None).await;
    let before = (count(&c, "tasks").await, count(&c, "runs").await);
    let snapshot = || async {
        (
            task(&c, running).await["status"].clone(),
            task(&c, failed).await["status"].clone(),
            c.query_one("select asyncflow.get_run($1) ->> 'status'", &[&run_id]).await.unwrap().get::<_, String>(0),
        )
    };
    assert_eq!(snapshot().await, (json!("running"), json!("failed"), "running".to_string()));

    for clock in ["infinity", "-infinity", "9999-06-01 00:00:00+00", "9998-01-01 00:00:01+00", "0001-06-01 00:00:00+00"]
    {
        for sql in clocked_calls(running, failed, &run_id) {
            let e = c.query(&sql, &[&clock]).await.unwrap_err();
            assert_refused(
                &e,
                "p_now: the clock must be a timestamp from 0002-01-01 to 9998-01-01",
                &format!("{clock}: {sql}"),
            );
        }
    }
    assert_eq!((count(&c, "tasks").await, count(&c, "runs").await), before, "nothing was created");
    assert_eq!(snapshot().await, (json!("running"), json!("failed"), "running".to_string()), "nothing changed");

    // At the top of the range the times a call derives from the clock (a lease of a year, a
    // later's delay of a year) stay readable.
    let pool = db.conn().await;
    let top = "9998-01-01T00:00:00Z".parse::<chrono::DateTime<chrono::Utc>>().unwrap();
    let bottom = "0002-01-01T00:00:00Z".parse::<chrono::DateTime<chrono::Utc>>().unwrap();
    register(&c, "late", json!({"max_processing_time": 31_536_000})).await;
    for now in [bottom, top] {
        let id: String =
            c.query_one("select asyncflow.create_task('late', p_now => $1)", &[&now]).await.unwrap().get(0);
        let t = api::get_task(&pool, &id).await.unwrap().unwrap();
        assert_eq!(t.created_at, now);
    }
    let claimed = api::claim_tasks(&pool, "late", &worker("w"), 10, Some(top)).await.unwrap();
    assert_eq!(claimed.len(), 2);
    assert_eq!(claimed[0].lease_until, top + chrono::Duration::days(365));
    let later = ReportKind::Later { delay: 31_536_000.0, context: None };
    let answers = api::report_tasks(
        &pool,
        &worker("w"),
        &[rep(claimed[0].task_id.as_str(), claimed[0].claim_seq, later)],
        Some(top),
    )
    .await
    .unwrap();
    assert!(answers[0].accepted);
    let t = api::get_task(&pool, claimed[0].task_id.as_str()).await.unwrap().unwrap();
    assert_eq!(t.order_time, top + chrono::Duration::days(365));
    assert!(api::get_task(&pool, claimed[1].task_id.as_str()).await.unwrap().is_some());
}

/// One request through the router: status and JSON body.
async fn call(app: &axum::Router, method: &str, uri: &str, body: String) -> (StatusCode, Value) {
    let (status, _, bytes) = request(app, method, uri, Some(body), Some("application/json"), None).await;
    (status, serde_json::from_slice(&bytes).unwrap_or_else(|_| json!({"raw": String::from_utf8_lossy(&bytes)})))
}

#[tokio::test]
async fn the_http_api_answers_400_for_json_a_reader_cannot_parse() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    register(&c, "edge", json!({})).await;
    async_pipeline(&c).await;
    let app = router(db.pool.clone(), &http_config(&[], 1 << 20));
    for (bad, why) in bad_contexts() {
        let what = &bad[..bad.len().min(40)];
        // serde_json refuses numbers beyond f64 and nesting past 127 levels itself; what it
        // takes (f64's largest, 65 to 127 levels) the database refuses, naming the field
        let serde_refuses = serde_json::from_str::<Value>(&bad).is_err();
        if bad.contains("1.0000000000000001e308") {
            // read by the server as the f64 nearest it, which is 1e308: within the range
            let (status, answer) =
                call(&app, "POST", "/v1/tasks", format!(r#"{{"type": "edge", "context": {bad}}}"#)).await;
            assert_eq!(status, StatusCode::CREATED, "{answer}");
            let t = api::get_task(&db.conn().await, answer["id"].as_str().unwrap()).await.unwrap().unwrap();
            assert_eq!(t.context, json!({"n": 1e308}));
            continue;
        }
        let expect = |field: &str| {
            if serde_refuses {
                ("bad_request", "invalid JSON body".to_string())
            } else {
                ("invalid_argument", format!("{field}: {why}"))
            }
        };
        for (uri, body, field) in [
            ("/v1/tasks", format!(r#"{{"type": "edge", "context": {bad}}}"#), "context".to_string()),
            (
                "/v1/tasks/bulk",
                format!(r#"{{"type": "edge", "tasks": [{{}}, {{"context": {bad}}}]}}"#),
                "tasks[1].context".into(),
            ),
            ("/v1/runs", format!(r#"{{"pipeline": "ext", "input": {bad}}}"#), "input".into()),
        ] {
            let (status, answer) = call(&app, "POST", uri, body).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{uri} {what}: {answer}");
            let (code, start) = expect(&field);
            assert_eq!(answer["code"], code, "{uri} {what}: {answer}");
            let message = answer["message"].as_str().unwrap_or_default();
            assert!(message.starts_with(&start), "{uri} {what}: {message:?} does not start with {start:?}");
        }
    }
    assert_eq!(count(&c, "tasks").await, 1, "only the one read as 1e308");
    assert_eq!(count(&c, "runs").await, 0);

    // a worker's reply and a node's completion
    api::create_task(&db.conn().await, "edge", &Default::default()).await.unwrap();
    let (status, held) =
        call(&app, "POST", "/v1/worker/hold", json!({"worker_id": "w", "type": "edge"}).to_string()).await;
    assert_eq!(status, StatusCode::OK, "{held}");
    let (id, seq) = (held["tasks"][0]["task_id"].clone(), held["tasks"][0]["claim_seq"].clone());
    let run_id = start(&c, "ext", json!({}), None, None).await;
    let deeper = deep(100);
    let cases = [
        (
            "/v1/worker/report".to_string(),
            format!(
                r#"{{"worker_id": "w", "reports": [{{"task_id": {id}, "claim_seq": {seq}, "outcome": "succeed", "result": {deeper}}}]}}"#
            ),
            "reports[0].result: nests deeper than 64 levels",
        ),
        (
            "/v1/worker/advance".to_string(),
            format!(
                r#"{{"worker_id": "w", "task_id": {id}, "claim_seq": {seq}, "stage": "s2", "context": {{"n": 1.7976931348623157e308}}}}"#
            ),
            "reports[0].context: holds the number 17976931348623157000…",
        ),
        (
            format!("/v1/runs/{run_id}/nodes/wait/complete"),
            format!(r#"{{"result": {deeper}}}"#),
            "result: nests deeper than 64 levels",
        ),
    ];
    for (uri, body, start) in cases {
        let (status, answer) = call(&app, "POST", &uri, body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{uri}: {answer}");
        assert_eq!(answer["code"], "invalid_argument", "{uri}: {answer}");
        let message = answer["message"].as_str().unwrap_or_default();
        assert!(message.starts_with(start), "{uri}: {message:?}");
    }
    let t = task(&c, id.as_str().unwrap()).await;
    assert_eq!((t["status"].clone(), t["claim_seq"].clone()), (json!("running"), seq), "{t}");

    // at the limits: created, and read back over HTTP
    for good in good_contexts() {
        let (status, created) =
            call(&app, "POST", "/v1/tasks", format!(r#"{{"type": "edge", "context": {good}}}"#)).await;
        assert_eq!(status, StatusCode::CREATED, "{created}");
        let (status, got) =
            call(&app, "GET", &format!("/v1/tasks/{}", created["id"].as_str().unwrap()), String::new()).await;
        assert_eq!(status, StatusCode::OK, "{got}");
        if !good.contains('e') {
            assert_eq!(got["context"], serde_json::from_str::<Value>(&good).unwrap());
        }
    }
    let (status, page) = call(&app, "GET", "/v1/tasks?type=edge", String::new()).await;
    assert_eq!(status, StatusCode::OK, "{page}");
}

#[tokio::test]
async fn the_compatibility_layer_refuses_json_a_reader_cannot_parse() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    register(&c, "edge", json!({})).await;
    let app = router(db.pool.clone(), &http_config(&[], 1 << 20));
    // a context travels as a string holding JSON; one that parses (f64's largest, 100 levels)
    // is checked as any context is
    for (context, start) in [
        (deep(100), "input invalid: context: nests deeper than 64 levels"),
        (r#"{"n": 1.7976931348623157e308}"#.to_string(), "input invalid: context: holds the number"),
    ] {
        let (status, answer) =
            call(&app, "POST", "/create_task", json!({"task_type": "edge", "context": context}).to_string()).await;
        assert_eq!(status, StatusCode::OK, "the envelope says it: {answer}");
        assert_eq!(answer["code"], 8020, "{answer}");
        let message = answer["msg"].as_str().unwrap_or_default();
        assert!(message.starts_with(start), "{message:?}");
    }
    assert_eq!(count(&c, "tasks").await, 0);
}

/// A pipeline definition holding JSON a reader cannot parse (here in its free-form description)
/// is refused, so every stored pipeline reads back.
#[tokio::test]
async fn a_pipeline_definition_a_reader_cannot_parse_is_refused() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    let err = c
        .batch_execute(
            "select asyncflow.put_pipeline('odd', '{\"description\": {\"n\": 1e400}, \"nodes\": [{\"name\": \"start\", \
             \"type\": \"start\"}, {\"name\": \"end\", \"type\": \"end\"}], \"edges\": [[\"start\", \"end\"]]}')",
        )
        .await
        .expect_err("refused");
    let db_err = err.as_db_error().expect("a database error");
    assert_eq!(db_err.code().code(), "AF006", "{}", db_err.message());
    assert!(db_err.message().contains("definition"), "{}", db_err.message());
    let n: i64 = c.query_one("select count(*) from asyncflow.pipelines", &[]).await.unwrap().get(0);
    assert_eq!(n, 0, "nothing stored");
}
