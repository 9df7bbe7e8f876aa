//! The workflow services with an injected clock: the checker (delayed starts, stuck nodes, run
//! deadlines and run retries), callback delivery (endpoint down then up, signature, give-up,
//! callback nodes, allowed targets), run retention; and the HTTP routes.
use crate::common;

use std::time::Duration;

use asyncflow::maintenance::Service;
use asyncflow::workflow::callback::{CallbackConfig, CallbackSender};
use asyncflow::workflow::checker::{RunChecker, RunRetention};
use common::sql::{register, secs, t0};
use common::workflow::{claim, event, node, ok, pipeline, receiver, report, run, start, work_all};
use common::{request, TestDb};
use serde_json::{json, Value};

fn one_task(timeout: Option<u64>, extra: Value) -> Value {
    let mut a = json!({"name": "a", "type": "task", "function": "wf"});
    if let Some(t) = timeout {
        a["timeout"] = json!(t);
        a["timeout_retries"] = json!(1);
    }
    let mut def = json!({"nodes": [{"name": "start", "type": "start"}, a, {"name": "end", "type": "end"}],
        "edges": [["start", "a"], ["a", "end"]]});
    if let (Some(d), Some(e)) = (def.as_object_mut(), extra.as_object()) {
        d.extend(e.clone());
    }
    def
}

#[tokio::test]
async fn the_checker_begins_delayed_runs_restarts_stuck_nodes_and_fails_stuck_runs() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    register(&c, "wf", json!({"max_processing_time": 3600})).await;
    let checker = RunChecker::new(db.pool.clone(), Duration::from_secs(1));

    // delayed start: nothing runs before run_at
    pipeline(&c, "later", one_task(None, json!({}))).await;
    let id: String = c
        .query_one("select asyncflow.start_run('later', run_at => $1, p_now => $2)", &[&(t0() + secs(3600.0)), &t0()])
        .await
        .unwrap()
        .get(0);
    assert_eq!(run(&c, &id).await["status"], "scheduled");
    assert!(claim(&c, "wf", Some(t0() + secs(7200.0))).await.is_empty(), "no task before the run begins");
    assert_eq!(checker.run_once(Some(t0() + secs(60.0))).await.unwrap().changed, 0);
    let report_ = checker.run_once(Some(t0() + secs(3601.0))).await.unwrap();
    assert_eq!(report_.changed, 1, "{report_:?}");
    assert_eq!(run(&c, &id).await["status"], "running");
    let a = claim(&c, "wf", Some(t0() + secs(3601.0))).await;
    report(&c, vec![(&a[0], ok(json!(1)))], Some(t0() + secs(3602.0))).await;
    assert_eq!(run(&c, &id).await["status"], "succeeded");

    // a node with a 10 s timeout and one timeout retry: restarted once, then failed
    pipeline(&c, "stuck", one_task(Some(10), json!({}))).await;
    let id = start(&c, "stuck", json!({}), Some("http://127.0.0.1:9/x"), Some(t0())).await;
    let first = claim(&c, "wf", Some(t0())).await;
    assert_eq!(checker.run_once(Some(t0() + secs(5.0))).await.unwrap().changed, 0, "not stuck yet");
    let r = checker.run_once(Some(t0() + secs(11.0))).await.unwrap();
    assert!(r.detail.iter().any(|d| d.contains("node restarted")), "{r:?}");
    let again = claim(&c, "wf", Some(t0() + secs(11.0))).await;
    assert_eq!(again.len(), 1, "a new task for the node");
    assert_ne!(again[0].task_id, first[0].task_id);
    assert_eq!(
        report(&c, vec![(&first[0], ok(json!("late")))], Some(t0() + secs(12.0))).await,
        [false],
        "the old try is fenced off"
    );
    assert_eq!(event(&run(&c, &id).await, "a")["exec_cnt"], 2);
    let r = checker.run_once(Some(t0() + secs(22.0))).await.unwrap();
    assert!(r.detail.iter().any(|d| d.contains("node failed")), "{r:?}");
    let r = run(&c, &id).await;
    assert_eq!(r["status"], "failed");
    assert!(r["error"].as_str().unwrap().contains("timed out"), "{}", r["error"]);
    assert_eq!(r["callbacks"][0]["payload"]["status"], "failed");
    assert_eq!(report(&c, vec![(&again[0], ok(json!("late")))], Some(t0() + secs(23.0))).await, [false]);

    // a run past its deadline: timed out, and still called back
    pipeline(&c, "slow", one_task(None, json!({"timeout": 60}))).await;
    let id = start(&c, "slow", json!({}), Some("http://127.0.0.1:9/y"), Some(t0())).await;
    let a = claim(&c, "wf", Some(t0())).await;
    assert_eq!(checker.run_once(Some(t0() + secs(59.0))).await.unwrap().changed, 0);
    checker.run_once(Some(t0() + secs(61.0))).await.unwrap();
    let r = run(&c, &id).await;
    assert_eq!(r["status"], "timed_out");
    assert_eq!(r["callbacks"][0]["payload"]["status"], "timed_out");
    let task: Value = c.query_one("select asyncflow.get_task($1)", &[&a[0].task_id]).await.unwrap().get(0);
    assert_eq!(task["status"], "cancelled", "its work is stopped");
}

#[tokio::test]
async fn a_timed_out_run_is_retried_as_a_new_run_with_the_same_notify_key_while_retries_allow() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    register(&c, "wf", json!({"max_processing_time": 3600})).await;
    pipeline(&c, "flaky", one_task(None, json!({"timeout": 60, "retries": 1}))).await;
    let checker = RunChecker::new(db.pool.clone(), Duration::from_secs(1));
    let first: String = c
        .query_one(
            "select asyncflow.start_run('flaky', '{}', 'http://127.0.0.1:9/z', notify_key => 'order-7', p_now => $1)",
            &[&t0()],
        )
        .await
        .unwrap()
        .get(0);
    checker.run_once(Some(t0() + secs(61.0))).await.unwrap();
    let old = run(&c, &first).await;
    assert_eq!(old["status"], "timed_out");
    assert!(old["callbacks"].as_array().unwrap().is_empty(), "a retried run does not call back");
    let second = old["retried_by"].as_str().unwrap().to_string();
    let new = run(&c, &second).await;
    assert_eq!(
        (new["attempt"].clone(), new["notify_key"].clone(), new["retry_of"].clone()),
        (json!(2), json!("order-7"), json!(first))
    );
    assert_eq!(new["status"], "running");
    checker.run_once(Some(t0() + secs(130.0))).await.unwrap();
    let new = run(&c, &second).await;
    assert_eq!(new["status"], "timed_out", "out of retries");
    assert_eq!(new["callbacks"][0]["payload"]["notify_key"], "order-7");
    assert!(new["retried_by"].is_null());
}

/// What the checker cannot do for one run fails that run alone. Otherwise a timed-out run whose
/// retry needs its version, retired meanwhile, would make every pass of the checker roll back,
/// so no other run would begin or time out any more.
#[tokio::test]
async fn a_run_the_checker_cannot_retry_times_out_alone_and_the_checker_goes_on() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    register(&c, "wf", json!({"max_processing_time": 3600})).await;
    let checker = RunChecker::new(db.pool.clone(), Duration::from_secs(1));
    pipeline(&c, "p", one_task(None, json!({"retries": 1, "timeout": 60}))).await;
    let stuck = start(&c, "p", json!({}), None, Some(t0())).await;
    // a newer version of p retires the one the run was started on
    pipeline(&c, "p", one_task(Some(30), json!({"retries": 1, "timeout": 60}))).await;
    pipeline(&c, "later", one_task(None, json!({}))).await;
    let delayed: String = c
        .query_one("select asyncflow.start_run('later', run_at => $1, p_now => $2)", &[&(t0() + secs(30.0)), &t0()])
        .await
        .unwrap()
        .get(0);
    let pass = checker.run_once(Some(t0() + secs(61.0))).await.expect("the pass goes through");
    assert!(pass.changed >= 2, "{pass:?}");
    let r = run(&c, &stuck).await;
    assert_eq!(r["status"], "timed_out", "{r}");
    assert!(r["error"].as_str().unwrap().contains("not retried"), "{}", r["error"]);
    assert!(r["retried_by"].is_null());
    assert_eq!(run(&c, &delayed).await["status"], "running", "the other run began");

    // a delayed run that cannot begin (a chain of instant nodes past the server's stack depth)
    // fails alone, saying why. put_pipeline refuses such a chain (the step limit), so one is
    // written here straight into asyncflow.pipelines: 400 parallel nodes between start and end.
    let names: Vec<String> = std::iter::once("start".to_string())
        .chain((0..400).map(|i| format!("j{i}")))
        .chain(std::iter::once("end".to_string()))
        .collect();
    let mut nodes = serde_json::Map::new();
    for (i, name) in names.iter().enumerate() {
        let kind = if i == 0 {
            "start"
        } else if i + 1 == names.len() {
            "end"
        } else {
            "parallel"
        };
        let before: Vec<&String> = if i == 0 { vec![] } else { vec![&names[i - 1]] };
        let after: Vec<Value> = names.get(i + 1).map(|n| json!({"to": n, "when": null})).into_iter().collect();
        nodes.insert(name.clone(), json!({"type": kind, "in": before, "out": after, "in_degree": before.len()}));
    }
    let plan = json!({"start": "start", "end": "end", "timeout": 86400, "retries": 0, "nodes": nodes,
        "order": names, "pruned": []});
    let definition = json!({"nodes": names.iter().map(|n| json!({"name": n, "type": plan["nodes"][n]["type"]}))
        .collect::<Vec<_>>(), "edges": names.windows(2).map(|w| json!([w[0], w[1]])).collect::<Vec<_>>()});
    c.execute(
        "insert into asyncflow.pipelines (name, version, status, definition, plan) values ('deep', 1, 'active', $1, $2)",
        &[&definition, &plan],
    )
    .await
    .unwrap();
    let deep: String = c
        .query_one("select asyncflow.start_run('deep', run_at => $1, p_now => $2)", &[&(t0() + secs(100.0)), &t0()])
        .await
        .unwrap()
        .get(0);
    checker.run_once(Some(t0() + secs(101.0))).await.expect("the pass goes through");
    let r = run(&c, &deep).await;
    assert_eq!(r["status"], "failed", "{}", r["error"]);
    assert!(r["error"].as_str().unwrap().contains("could not begin"), "{}", r["error"]);
}

#[tokio::test]
async fn a_callback_to_an_endpoint_that_is_down_is_delivered_signed_once_it_is_back() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    register(&c, "wf", json!({"max_retry_num": 0})).await;
    pipeline(&c, "p", one_task(None, json!({}))).await;
    // a port with nobody listening: the endpoint is down
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let url = format!("http://127.0.0.1:{port}/hook");
    let id = start(&c, "p", json!({"film": 9}), Some(&url), Some(t0())).await;
    let a = claim(&c, "wf", Some(t0())).await;
    report(&c, vec![(&a[0], json!({"outcome": "fail", "error": "codec missing", "retry": false}))], Some(t0())).await;
    assert_eq!(run(&c, &id).await["status"], "failed");

    let config =
        CallbackConfig { secret: Some("s3cret-key".into()), timeout: Duration::from_secs(2), ..Default::default() };
    let sender = CallbackSender::new(db.pool.clone(), config);
    let pass = sender.run_once(Some(t0())).await.unwrap();
    assert_eq!(pass.changed, 1, "one attempt: {pass:?}");
    let cb = &run(&c, &id).await["callbacks"][0];
    assert_eq!((cb["status"].clone(), cb["attempts"].clone()), (json!("pending"), json!(1)));
    assert!(cb["log"][0]["error"].as_str().unwrap().to_lowercase().contains("connect"), "{}", cb["log"]);
    assert_eq!(sender.run_once(Some(t0() + secs(0.5))).await.unwrap().changed, 0, "backing off");

    let up = receiver(tokio::net::TcpListener::bind(("127.0.0.1", port)).await.unwrap(), 200).await;
    let pass = sender.run_once(Some(t0() + secs(2.0))).await.unwrap();
    assert_eq!(pass.changed, 1, "{pass:?}");
    let cb = &run(&c, &id).await["callbacks"][0];
    assert_eq!((cb["status"].clone(), cb["attempts"].clone()), (json!("delivered"), json!(2)));
    assert_eq!(cb["log"].as_array().unwrap().len(), 2, "each attempt recorded");
    assert_eq!(cb["log"][1]["http_status"], 200);
    let seen = up.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "delivered once");
    let (headers, body) = &seen[0];
    let signature = headers.get("x-asyncflow-signature").unwrap().to_str().unwrap();
    assert!(asyncflow::function::http::verify(b"s3cret-key", body, signature), "a valid signature");
    assert!(!asyncflow::function::http::verify(b"other", body, signature));
    let payload: Value = serde_json::from_slice(body).unwrap();
    assert_eq!((payload["run_id"].clone(), payload["status"].clone()), (json!(id), json!("failed")));
    assert_eq!(payload["error"], "node a failed: codec missing", "a failed run calls back with its error");
    assert_eq!(payload["callback_id"], cb["callback_id"]);
    assert_eq!(headers.get("x-asyncflow-attempt").unwrap(), "2");
    assert_eq!(sender.run_once(Some(t0() + secs(600.0))).await.unwrap().changed, 0, "nothing more to send");
    let _ = up.stop.send(());
}

#[tokio::test]
async fn a_callback_that_is_never_accepted_is_given_up_and_a_callback_node_fails_with_it() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    c.execute("update asyncflow.config set callback_give_up = 30", &[]).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let refusing = receiver(listener, 503).await;
    pipeline(
        &c,
        "cbn",
        json!({"nodes": [{"name": "start", "type": "start"}, {"name": "tell", "type": "callback", "url": url},
        {"name": "end", "type": "end"}], "edges": [["start", "tell"], ["tell", "end"]]}),
    )
    .await;
    let id = start(&c, "cbn", json!({}), None, Some(t0())).await;
    assert_eq!(event(&run(&c, &id).await, "tell")["status"], "running");
    let sender = CallbackSender::new(db.pool.clone(), CallbackConfig::default());
    let mut t = 0.0;
    while run(&c, &id).await["status"] == "running" {
        sender.run_once(Some(t0() + secs(t))).await.unwrap();
        t += 5.0;
        assert!(t < 100.0, "given up after 30 s");
    }
    let r = run(&c, &id).await;
    assert_eq!(r["status"], "failed");
    assert_eq!(r["callbacks"][0]["status"], "failed");
    assert!(r["error"].as_str().unwrap().contains("HTTP 503"), "{}", r["error"]);
    let attempts = refusing.seen.lock().unwrap().len();
    assert!(attempts >= 3, "{attempts} attempts");
    assert_eq!(r["callbacks"][0]["attempts"], json!(attempts));
    let _ = refusing.stop.send(());

    // an accepting endpoint: the node succeeds and the run goes on
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let accepting = receiver(listener, 204).await;
    pipeline(
        &c,
        "cbn2",
        json!({"nodes": [{"name": "start", "type": "start"}, {"name": "tell", "type": "callback"},
        {"name": "end", "type": "end"}], "edges": [["start", "tell"], ["tell", "end"]]}),
    )
    .await;
    let id2 = start(&c, "cbn2", json!({"k": 2}), Some(&url), Some(t0())).await;
    sender.run_once(Some(t0())).await.unwrap();
    let r = run(&c, &id2).await;
    assert_eq!(r["status"], "succeeded", "a callback node without url posts to the run's notify_url: {r}");
    assert_eq!(event(&r, "tell")["result"]["http_status"], 204);
    sender.run_once(Some(t0() + secs(1.0))).await.unwrap();
    let kinds: Vec<String> = accepting
        .seen
        .lock()
        .unwrap()
        .iter()
        .map(|(_, b)| serde_json::from_slice::<Value>(b).unwrap()["kind"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(kinds, ["node", "run"], "the node's POST, then the run's outcome");
    let _ = accepting.stop.send(());
}

/// Callbacks connect only where `--callback-allow` lets them, whether the URL names an address or
/// a host name; a refused callback fails at its first attempt, with why, since every retry would
/// be refused the same way (it was retried for a day, until give_up_at), and a callback node
/// fails with it.
#[tokio::test]
async fn callbacks_reach_only_the_allowed_networks_whether_named_by_address_or_by_host_name() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    register(&c, "wf", json!({"max_retry_num": 0})).await;
    pipeline(&c, "p", one_task(None, json!({}))).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let up = receiver(listener, 200).await;
    // an IP literal (checked before connecting) and a host name (checked at resolution), each
    // named by a run's notify_url and by a callback node
    let urls = [format!("http://127.0.0.1:{port}/hook"), format!("http://localhost:{port}/hook")];
    let mut refused = Vec::new();
    for (i, url) in urls.iter().enumerate() {
        let id = start(&c, "p", json!({}), Some(url), Some(t0())).await;
        let a = claim(&c, "wf", Some(t0())).await;
        report(&c, vec![(&a[0], json!({"outcome": "fail", "error": "no", "retry": false}))], Some(t0())).await;
        refused.push(id);
        let name = format!("tell{i}");
        pipeline(
            &c,
            &name,
            json!({"nodes": [{"name": "start", "type": "start"}, {"name": "tell", "type": "callback", "url": url},
            {"name": "end", "type": "end"}], "edges": [["start", "tell"], ["tell", "end"]]}),
        )
        .await;
        refused.push(start(&c, &name, json!({}), None, Some(t0())).await);
    }

    let public = CallbackConfig { targets: "public".parse().unwrap(), ..Default::default() };
    let sender = CallbackSender::new(db.pool.clone(), public);
    let pass = sender.run_once(Some(t0())).await.unwrap();
    assert_eq!(pass.changed, 4, "{pass:?}");
    let mut nodes = 0;
    for id in &refused {
        let r = run(&c, id).await;
        let cb = &r["callbacks"][0];
        assert_eq!((cb["status"].clone(), cb["attempts"].clone()), (json!("failed"), json!(1)), "failed at once: {r}");
        let error = cb["log"][0]["error"].as_str().unwrap();
        assert!(error.contains("is not an allowed callback target (--callback-allow public)"), "{error}");
        assert_eq!(cb["log"][0]["given_up"], true, "{cb}");
        if cb["kind"] == "node" {
            nodes += 1;
            assert_eq!(r["status"], "failed", "the callback node fails with its delivery: {r}");
            let why = event(&r, "tell")["error"].as_str().unwrap_or_default().to_string();
            assert!(why.contains("not delivered: ") && why.contains("not an allowed callback target"), "{why}");
        }
    }
    assert_eq!(nodes, 2, "both callback nodes were checked");
    // the host name's refusal does not tell whoever started the run what it resolved to
    let named = run(&c, &refused[2]).await["callbacks"][0]["log"][0]["error"].as_str().unwrap().to_string();
    assert!(named.contains("localhost (as resolved)") && !named.contains("127.0.0.1"), "{named}");
    let later = sender.run_once(Some(t0() + secs(3600.0))).await.unwrap();
    assert_eq!(later.changed, 0, "nothing is tried again: {later:?}");
    assert!(up.seen.lock().unwrap().is_empty(), "no connection was made");

    // where the setting allows the target, the same callbacks are delivered
    let mut allowed = Vec::new();
    for url in &urls {
        let id = start(&c, "p", json!({}), Some(url), Some(t0())).await;
        let a = claim(&c, "wf", Some(t0())).await;
        report(&c, vec![(&a[0], json!({"outcome": "fail", "error": "no", "retry": false}))], Some(t0())).await;
        allowed.push(id);
    }
    let local = CallbackConfig { targets: "127.0.0.0/8".parse().unwrap(), ..Default::default() };
    let pass = CallbackSender::new(db.pool.clone(), local).run_once(Some(t0() + secs(2.0))).await.unwrap();
    assert_eq!(pass.changed, 2, "{pass:?}");
    for id in &allowed {
        assert_eq!(run(&c, id).await["callbacks"][0]["status"], "delivered");
    }
    assert_eq!(up.seen.lock().unwrap().len(), 2);
    let _ = up.stop.send(());
}

#[tokio::test]
async fn retention_drops_whole_days_of_ended_runs_and_keeps_a_day_with_an_open_run() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    register(&c, "wf", json!({})).await;
    pipeline(&c, "p", one_task(None, json!({}))).await;
    let day1 = t0();
    let day2 = t0() + secs(86400.0);
    let done = start(&c, "p", json!({}), None, Some(day1)).await;
    work_all(&c, &["wf"], Some(day1), |t| ok(json!(node(t)))).await;
    let open = start(&c, "p", json!({}), None, Some(day2)).await;
    let retention = RunRetention::new(db.pool.clone(), Duration::from_secs(60));
    assert_eq!(retention.run_once(Some(day2 + secs(3600.0))).await.unwrap().changed, 0, "within retention (7 days)");
    let pass = retention.run_once(Some(day2 + secs(8.0 * 86400.0))).await.unwrap();
    assert_eq!(pass.detail, ["run records of 2030-01-01 dropped"], "{pass:?}");
    let tables: i64 = c
        .query_one("select count(*) from pg_class where relname like '%\\_20300101' and relnamespace = 'asyncflow'::regnamespace", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(tables, 0, "the day's partitions are gone: no DELETE, no dead tuples");
    assert!(c.query_one("select asyncflow.get_run($1)", &[&done]).await.unwrap().get::<_, Option<Value>>(0).is_none());
    assert_eq!(run(&c, &open).await["status"], "running", "a day with an open run stays");
    work_all(&c, &["wf"], Some(day2), |t| ok(json!(node(t)))).await;
    let pass = retention.run_once(Some(day2 + secs(9.0 * 86400.0))).await.unwrap();
    assert_eq!(pass.detail, ["run records of 2030-01-02 dropped"], "{pass:?}");
}

/// A day of ended runs, with its notify_url callback settled, that retention may drop at
/// `t0() + 8 days`.
async fn an_expired_day(c: &tokio_postgres::Client) -> chrono::DateTime<chrono::Utc> {
    register(c, "wf", json!({})).await;
    pipeline(c, "p", one_task(None, json!({}))).await;
    let id = start(c, "p", json!({}), Some("http://127.0.0.1:9/x"), Some(t0())).await;
    work_all(c, &["wf"], Some(t0()), |t| ok(json!(node(t)))).await;
    c.execute("update asyncflow.callbacks set status = 'delivered' where run_id = $1", &[&id]).await.unwrap();
    t0() + secs(8.0 * 86400.0)
}

/// Dropping a day of runs takes the run tables before the day's partitions, the order every
/// statement on them takes (the table, then its partitions), as dropping a shard does. Locking
/// the partitions first, it would meet the tables' locks only at DROP TABLE: a reader that held
/// `runs` (check_runs, list_runs, claim_callbacks on `callbacks`: each scans every day) and
/// reached for the day's partition would deadlock with it.
#[tokio::test]
async fn dropping_a_day_of_runs_takes_the_tables_before_their_partitions() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    let later = an_expired_day(&c).await;
    // a transaction holding `runs`, as a scan of every day does before it reaches the partitions
    let mut reader = db.raw().await;
    let tx = reader.transaction().await.unwrap();
    tx.batch_execute("lock table only asyncflow.runs in access share mode").await.unwrap();
    let dropper = db.raw().await;
    let dropping = tokio::spawn(async move {
        dropper.query("select asyncflow.drop_expired_runs($1)", &[&later]).await.map(|rows| rows.len())
    });
    let watcher = db.raw().await;
    common::wait_for_lock_wait(&watcher, "drop_expired_runs").await;
    // the day's partition is not locked by the waiting drop: the reader reaches it at once
    // (before, it met the drop's lock on the partition: a deadlock, unless the drop's own 1 s
    // lock_timeout ran out first)
    tx.batch_execute("set local lock_timeout = '100ms'").await.unwrap();
    let read = tx.query("select count(*) from asyncflow.runs_20300101", &[]).await;
    assert!(read.is_ok(), "the reader's side went on: {read:?}");
    tx.commit().await.unwrap();
    let first = dropping.await.unwrap();
    assert!(first.is_ok(), "the drop waited (or gave up for this pass) without a deadlock: {first:?}");
    let again = c.query("select asyncflow.drop_expired_runs($1)", &[&later]).await.unwrap().len();
    assert_eq!(first.unwrap_or(0) + again, 1, "the day is dropped by one of the two passes");
}

/// Workflow statements do not take the five run tables in one order (record_callback:
/// callbacks, then run_events and runs; a task's trigger: run_traces, then run_events; start,
/// check and cancel: runs first), so no order of the drop's locks agrees with all of them.
/// Instead the drop waits long only for its first table, when it holds nothing stronger than
/// the ACCESS SHARE its first query left on runs and callbacks; for each of
/// the others it waits at most 100 ms and otherwise gives the day up until the next pass,
/// releasing everything. A writer that holds one of the tables and then reaches for another the
/// drop took waits briefly, where before the drop held them for its 1 s lock_timeout and the
/// writer could be the one PostgreSQL's deadlock check (after 1 s) cancelled.
#[tokio::test]
async fn dropping_a_day_of_runs_gives_way_at_once_to_a_writer_holding_one_of_its_tables() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    let later = an_expired_day(&c).await;
    // a writer that has updated `callbacks`, as record_callback does before run_events and runs
    let mut writer = db.raw().await;
    let tx = writer.transaction().await.unwrap();
    tx.batch_execute("lock table only asyncflow.callbacks in row exclusive mode").await.unwrap();
    let started = std::time::Instant::now();
    let first = c.query("select asyncflow.drop_expired_runs($1)", &[&later]).await;
    let took = started.elapsed();
    assert!(first.as_ref().is_ok_and(|rows| rows.is_empty()), "the day waits for the next pass: {first:?}");
    assert!(took < Duration::from_millis(800), "gave up in about 100 ms, not after 1 s: {took:?}");
    // and holds nothing afterwards: the writer goes on to the tables the drop had taken
    tx.batch_execute("set local lock_timeout = '100ms'").await.unwrap();
    let went_on = tx.batch_execute("lock table only asyncflow.run_events, asyncflow.runs in row exclusive mode").await;
    assert!(went_on.is_ok(), "{went_on:?}");
    tx.commit().await.unwrap();
    let again = c.query("select asyncflow.drop_expired_runs($1)", &[&later]).await.unwrap().len();
    assert_eq!(again, 1, "dropped at the next pass");
}

#[tokio::test]
async fn pipelines_and_runs_over_http() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    register(&c, "wf", json!({})).await;
    let app = asyncflow::http::router(db.pool.clone(), &common::http_config(&[], 64 * 1024));
    let call = |method: &'static str, uri: String, body: Option<Value>| {
        let app = app.clone();
        async move {
            let (status, _, bytes) =
                request(&app, method, &uri, body.map(|b| b.to_string()), Some("application/json"), None).await;
            (status.as_u16(), serde_json::from_slice::<Value>(&bytes).unwrap_or(Value::Null))
        }
    };
    let (s, b) = call(
        "PUT",
        "/v1/pipelines/p".into(),
        Some(json!({"nodes": [{"name": "start", "type": "start"}],
        "edges": []})),
    )
    .await;
    assert_eq!((s, b["code"].clone()), (400, json!("invalid_pipeline")), "{b}");
    let (s, b) = call("PUT", "/v1/pipelines/p".into(), Some(one_task(None, json!({})))).await;
    assert_eq!((s, b["version"].clone(), b["created"].clone()), (200, json!(1), json!(true)), "{b}");
    let (s, b) = call("PUT", "/v1/pipelines/p?status=draft".into(), Some(one_task(Some(5), json!({})))).await;
    assert_eq!((s, b["status"].clone()), (200, json!("draft")));
    let (s, b) = call("POST", "/v1/pipelines/p/versions/2/activate".into(), None).await;
    assert_eq!((s, b["status"].clone()), (200, json!("active")));
    let (s, b) = call("GET", "/v1/pipelines".into(), None).await;
    assert_eq!((s, b.as_array().unwrap().len()), (200, 2));
    let (s, b) = call("POST", "/v1/runs".into(), Some(json!({"pipeline": "p", "input": {"a": 1}, "bogus": 1}))).await;
    assert_eq!(s, 400, "{b}");
    let (s, b) = call("POST", "/v1/runs".into(), Some(json!({"pipeline": "nope"}))).await;
    assert_eq!((s, b["code"].clone()), (404, json!("unknown_pipeline")));
    let (s, b) =
        call("POST", "/v1/runs".into(), Some(json!({"pipeline": "p", "input": {"a": 1}, "notify_key": "k"}))).await;
    assert_eq!(s, 201, "{b}");
    let id = b["run_id"].as_str().unwrap().to_string();
    let (s, b) = call("GET", format!("/v1/runs/{id}"), None).await;
    assert_eq!((s, b["version"].clone(), b["status"].clone()), (200, json!(2), json!("running")));
    let (s, b) = call("POST", format!("/v1/runs/{id}/retry"), None).await;
    assert_eq!((s, b["code"].clone()), (409, json!("wrong_state")), "a running run is not retried");
    let (s, b) = call("POST", format!("/v1/runs/{id}/nodes/a/complete"), Some(json!({"result": 1}))).await;
    assert_eq!((s, b["code"].clone()), (409, json!("wrong_state")));
    let (s, b) = call("GET", "/v1/runs?pipeline=p&status=running&limit=1".into(), None).await;
    assert_eq!((s, b["runs"][0]["run_id"].clone(), b["next"].clone()), (200, json!(id), json!(id)));
    let (s, b) = call("GET", "/v1/runs?status=sideways".into(), None).await;
    assert_eq!(s, 400, "{b}");
    let (s, b) = call("POST", format!("/v1/runs/{id}/cancel"), None).await;
    assert_eq!((s, b["cancelled"].clone()), (200, json!(true)));
    let (s, b) = call("POST", format!("/v1/runs/{id}/retry"), None).await;
    assert_eq!((s, b["retry_of"].clone()), (201, json!(id)));
    let (s, b) = call("POST", format!("/v1/runs/{id}/nodes/a/retry"), None).await;
    assert_eq!((s, b["code"].clone()), (409, json!("wrong_state")), "{b}");
    let (s, b) = call("GET", "/v1/runs/r20300101-00000000000000000000000000000000".into(), None).await;
    assert_eq!((s, b["code"].clone()), (404, json!("unknown_run")));
    let (s, _) = call("GET", "/v1/runs/..%2F..".into(), None).await;
    assert_eq!(s, 404);

    // monitoring: the retried run is running, the cancelled one counted as ended
    let (status, _, bytes) = request(&app, "GET", "/metrics", None, None, None).await;
    assert_eq!(status.as_u16(), 200);
    let text = String::from_utf8(bytes).unwrap();
    for line in [
        "asyncflow_runs{pipeline=\"p\",status=\"running\"} 1",
        "asyncflow_runs_ended_total{pipeline=\"p\",status=\"cancelled\"} 1",
        "asyncflow_callbacks_pending 0",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} missing from\n{text}");
    }
}

#[tokio::test]
async fn a_failed_node_is_retried_and_an_async_node_completed_over_http_and_the_cli() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    register(&c, "wf", json!({"max_retry_num": 0})).await;
    pipeline(
        &c,
        "two",
        json!({"nodes": [{"name": "start", "type": "start"},
        {"name": "a", "type": "task", "function": "wf"}, {"name": "approve", "type": "task", "async": true},
        {"name": "end", "type": "end"}], "edges": [["start", "a"], ["a", "approve"], ["approve", "end"]]}),
    )
    .await;
    let app = asyncflow::http::router(db.pool.clone(), &common::http_config(&[], 64 * 1024));
    let post = |uri: String, body: Option<Value>| {
        let app = app.clone();
        async move {
            let (status, _, bytes) =
                request(&app, "POST", &uri, body.map(|b| b.to_string()), Some("application/json"), None).await;
            (status.as_u16(), serde_json::from_slice::<Value>(&bytes).unwrap_or(Value::Null))
        }
    };
    let cli = |args: Vec<String>| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_asyncflow"))
            .args(&args)
            .env("DATABASE_URL", &db.url)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };

    // over HTTP: the node fails, is retried, then the async node is completed
    let id = start(&c, "two", json!({}), None, None).await;
    let a = claim(&c, "wf", None).await;
    report(&c, vec![(&a[0], json!({"outcome": "fail", "error": "no disk", "retry": false}))], None).await;
    assert_eq!(run(&c, &id).await["status"], "failed");
    let (s, b) = post(format!("/v1/runs/{id}/nodes/a/retry"), None).await;
    assert_eq!((s, b["retried"].clone()), (200, json!(true)), "{b}");
    let a = claim(&c, "wf", None).await;
    report(&c, vec![(&a[0], ok(json!("A")))], None).await;
    let (s, b) = post(format!("/v1/runs/{id}/nodes/approve/complete"), Some(json!({"result": {"by": "alice"}}))).await;
    assert_eq!((s, b["status"].clone()), (200, json!("succeeded")), "{b}");
    assert_eq!(b["result"], json!({"approve": {"by": "alice"}}));

    // a null result is a result, not "left out" (found by a bug hunt: the server read null as
    // absent and took the function's result)
    let id = start(&c, "two", json!({}), None, None).await;
    let a = claim(&c, "wf", None).await;
    report(&c, vec![(&a[0], ok(json!("A")))], None).await;
    let (s, b) = post(format!("/v1/runs/{id}/nodes/approve/complete"), Some(json!({"result": null}))).await;
    assert_eq!((s, b["result"].clone()), (200, json!({"approve": null})), "{b}");

    // with the CLI: the same, and an external failure
    let id = start(&c, "two", json!({}), None, None).await;
    let a = claim(&c, "wf", None).await;
    report(&c, vec![(&a[0], json!({"outcome": "fail", "error": "no disk", "retry": false}))], None).await;
    let (okay, out, err) = cli(vec!["run".into(), "retry-node".into(), id.clone(), "a".into()]);
    assert!(okay && out.contains("\"retried\": true"), "{out}{err}");
    let a = claim(&c, "wf", None).await;
    report(&c, vec![(&a[0], ok(json!("A")))], None).await;
    let (okay, out, err) = cli(vec![
        "run".into(),
        "complete-node".into(),
        id.clone(),
        "approve".into(),
        "--error".into(),
        "rejected".into(),
    ]);
    assert!(okay && out.contains("\"status\": \"failed\""), "{out}{err}");
    assert_eq!(run(&c, &id).await["error"], "node approve failed: rejected");
    let (okay, _, err) = cli(vec!["run".into(), "retry-node".into(), id.clone(), "nope".into()]);
    assert!(!okay && err.contains("has no node"), "{err}");
}
