//! The workflow engine through the SQL API: runs moved on by their tasks' reports (claimed and
//! reported here as a worker would), fan-out and fan-in, dynamic segments, routers,
//! sub-pipelines, retries, failures and versions.
use crate::common;

use common::sql::{register, secs, t0};
use common::workflow::{claim, event, node, ok, pipeline, refused, report, run, start, work_all, Claimed};
use common::TestDb;
use serde_json::{json, Value};

fn linear() -> Value {
    json!({"nodes": [{"name": "start", "type": "start"}, {"name": "a", "type": "task", "function": "wf"},
        {"name": "b", "type": "task", "function": "wf", "stage": "second"}, {"name": "end", "type": "end"}],
        "edges": [["start", "a"], ["a", "b"], ["b", "end"]]})
}

#[tokio::test]
async fn a_linear_pipeline_runs_its_nodes_in_order_passing_each_its_predecessors_results() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    register(&c, "wf", json!({})).await;
    let stored = pipeline(&c, "lin", linear()).await;
    assert_eq!((stored["version"].clone(), stored["status"].clone()), (json!(1), json!("active")));
    let id = start(&c, "lin", json!({"x": 1}), Some("http://127.0.0.1:9/hook"), None).await;
    assert!(id.starts_with('r') && id.len() == 42, "{id}");

    let a = claim(&c, "wf", None).await;
    assert_eq!(a.len(), 1, "only a is ready");
    assert_eq!(node(&a[0]), "a");
    assert_eq!(a[0].context["input"], json!({"x": 1}));
    assert_eq!(a[0].context["inputs"], json!({"start": {"x": 1}}));
    assert_eq!(a[0].context["event_id"], json!(format!("{id}_a")));
    assert_eq!(a[0].context["run_id"], json!(id));
    assert_eq!(event(&run(&c, &id).await, "a")["status"], "running");
    report(&c, vec![(&a[0], ok(json!({"from": "a"})))], None).await;

    let b = claim(&c, "wf", None).await;
    assert_eq!((node(&b[0]), b[0].stage.as_str()), ("b", "second"), "a node may start its function at a stage");
    assert_eq!(b[0].context["inputs"], json!({"a": {"from": "a"}}));
    // a multi-stage function: advance, then succeed
    report(&c, vec![(&b[0], json!({"outcome": "advance", "stage": "third", "context": b[0].context}))], None).await;
    assert_eq!(event(&run(&c, &id).await, "b")["status"], "running", "the node waits for its task's last stage");
    let b = claim(&c, "wf", None).await;
    report(&c, vec![(&b[0], ok(json!({"from": "b"})))], None).await;

    let r = run(&c, &id).await;
    assert_eq!(r["status"], "succeeded", "{r}");
    assert_eq!(r["result"], json!({"b": {"from": "b"}}), "the end's inputs are the run's result");
    let nodes: Vec<&str> = r["events"].as_array().unwrap().iter().map(|e| e["node"].as_str().unwrap()).collect();
    assert_eq!(nodes, ["start", "a", "b", "end"], "events in plan order");
    assert!(r["events"].as_array().unwrap().iter().all(|e| e["status"] == "succeeded" && e["activations"] == 1));
    // executions: a task node's function calls (b ran two stages), one for any other node
    let calls: Vec<i64> = r["events"].as_array().unwrap().iter().map(|e| e["exec_cnt"].as_i64().unwrap()).collect();
    assert_eq!(calls, [1, 1, 2, 1]);
    assert_eq!(event(&r, "a")["event_id"], json!(format!("{id}_a")), "event id = run id + _ + node");
    let traces = r["traces"].as_array().unwrap();
    assert_eq!(traces.len(), 3, "one trace per function call: a, b (second), b (third): {traces:?}");
    assert_eq!(traces[0]["outcome"], "succeed");
    assert_eq!(traces[0]["response"], json!({"from": "a"}));
    assert_eq!(traces[1]["outcome"], "advance");
    assert_eq!(traces[2]["stage"], "third");
    let callbacks = r["callbacks"].as_array().unwrap();
    assert_eq!(callbacks.len(), 1);
    assert_eq!(callbacks[0]["kind"], "run");
    assert_eq!(callbacks[0]["url"], "http://127.0.0.1:9/hook");
    assert_eq!(callbacks[0]["payload"]["status"], "succeeded");
    assert_eq!(callbacks[0]["payload"]["result"], json!({"b": {"from": "b"}}));
}

fn diamond() -> Value {
    json!({"nodes": [{"name": "start", "type": "start"}, {"name": "a", "type": "task", "function": "wf"},
        {"name": "b", "type": "task", "function": "wf"}, {"name": "c", "type": "task", "function": "wf"},
        {"name": "d", "type": "task", "function": "wf"}, {"name": "end", "type": "end"}],
        "edges": [["start", "a"], ["a", "b"], ["a", "c"], ["b", "d"], ["c", "d"], ["d", "end"]]})
}

#[tokio::test]
async fn a_diamond_fans_out_and_joins_only_when_both_parents_are_done() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    register(&c, "wf", json!({})).await;
    pipeline(&c, "dia", diamond()).await;
    let id = start(&c, "dia", json!({}), None, None).await;
    let a = claim(&c, "wf", None).await;
    report(&c, vec![(&a[0], ok(json!("A")))], None).await;
    let bc = claim(&c, "wf", None).await;
    let mut names: Vec<&str> = bc.iter().map(node).collect();
    names.sort();
    assert_eq!(names, ["b", "c"], "both branches at once");
    let b = bc.iter().find(|t| node(t) == "b").unwrap();
    let cc = bc.iter().find(|t| node(t) == "c").unwrap();
    report(&c, vec![(b, ok(json!("B")))], None).await;
    let r = run(&c, &id).await;
    assert_eq!((event(&r, "d")["status"].clone(), event(&r, "d")["latch_cnt"].clone()), (json!("waiting"), json!(1)));
    assert!(claim(&c, "wf", None).await.is_empty(), "d waits for c");
    report(&c, vec![(cc, ok(json!("C")))], None).await;
    let d = claim(&c, "wf", None).await;
    assert_eq!(d.len(), 1);
    assert_eq!(d[0].context["inputs"], json!({"b": "B", "c": "C"}));
    report(&c, vec![(&d[0], ok(json!("D")))], None).await;
    let r = run(&c, &id).await;
    assert_eq!(r["status"], "succeeded");
    assert_eq!((event(&r, "d")["latch_cnt"].clone(), event(&r, "d")["in_degree"].clone()), (json!(2), json!(2)));
}

#[tokio::test]
async fn a_fan_in_fires_exactly_once_when_its_parents_complete_concurrently() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    register(&c, "wf", json!({})).await;
    let parents: Vec<String> = (0..8).map(|i| format!("p{i}")).collect();
    let mut nodes =
        vec![json!({"name": "start", "type": "start"}), json!({"name": "join", "type": "task", "function": "wf"})];
    let mut edges = vec![json!(["join", "end"])];
    for p in &parents {
        nodes.push(json!({"name": p, "type": "task", "function": "wf"}));
        edges.push(json!(["start", p]));
        edges.push(json!([p, "join"]));
    }
    nodes.push(json!({"name": "end", "type": "end"}));
    pipeline(&c, "fan", json!({"nodes": nodes, "edges": edges})).await;
    let runs: Vec<String> = futures::future::join_all((0..6).map(|_| start(&c, "fan", json!({}), None, None))).await;
    let claimed = claim(&c, "wf", None).await;
    assert_eq!(claimed.len(), 48);
    // Every parent reported on its own connection, all at once.
    let reports = claimed.iter().map(|t| {
        let pool = db.pool.clone();
        let t = t.clone();
        async move {
            let conn = pool.get().await.unwrap();
            let reports =
                json!([{"task_id": t.task_id, "claim_seq": t.claim_seq, "outcome": "succeed", "result": node(&t)}]);
            // a deadlock between two reports is retried, as the worker's reporter does
            loop {
                match conn.query("select accepted from asyncflow.report_tasks('w', $1)", &[&reports]).await {
                    Ok(rows) => return rows[0].get::<_, bool>(0),
                    Err(e) if common::sqlstate(&e) == "40P01" => continue,
                    Err(e) => panic!("report: {e:?}"),
                }
            }
        }
    });
    assert!(futures::future::join_all(reports).await.into_iter().all(|a| a));
    let joins = claim(&c, "wf", None).await;
    assert_eq!(joins.len(), 6, "one join task per run");
    for id in &runs {
        let r = run(&c, id).await;
        let join = event(&r, "join");
        assert_eq!((join["latch_cnt"].clone(), join["exec_cnt"].clone()), (json!(8), json!(1)), "{join}");
        let count: i64 = c
            .query_one("select count(*) from asyncflow.tasks where run_ref = $1", &[&format!("{id}_join")])
            .await
            .unwrap()
            .get(0);
        assert_eq!(count, 1, "the join's task was created once");
        let mine: &Claimed = joins.iter().find(|t| t.context["run_id"] == json!(id)).unwrap();
        assert_eq!(mine.context["inputs"].as_object().unwrap().len(), 8, "all parents' results");
    }
}

fn dynamic() -> Value {
    json!({"nodes": [{"name": "start", "type": "start"}, {"name": "split", "type": "task", "function": "wf"},
        {"name": "seg", "type": "dynamic", "function": "wf", "stage": "segment", "items": "$.nodes.split.parts"},
        {"name": "join", "type": "task", "function": "wf"}, {"name": "end", "type": "end"}],
        "edges": [["start", "split"], ["split", "seg"], ["seg", "join"], ["join", "end"]]})
}

#[tokio::test]
async fn a_dynamic_fan_out_runs_one_task_per_segment_and_joins_them_in_order_for_0_1_and_100_segments() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    register(&c, "wf", json!({})).await;
    pipeline(&c, "dyn", dynamic()).await;
    for n in [0usize, 1, 100] {
        let id = start(&c, "dyn", json!({"n": n}), None, None).await;
        let split = claim(&c, "wf", None).await;
        let parts: Vec<Value> = (0..n).map(|i| json!({"part": i})).collect();
        report(&c, vec![(&split[0], ok(json!({"parts": parts})))], None).await;
        let segments = claim(&c, "wf", None).await;
        if n == 0 {
            assert!(segments.len() == 1 && node(&segments[0]) == "join", "no segment: straight to the join");
            assert_eq!(segments[0].context["inputs"], json!({"seg": []}));
            report(&c, vec![(&segments[0], ok(json!("joined")))], None).await;
        } else {
            assert_eq!(segments.len(), n, "one task per segment");
            for s in &segments {
                let k = s.context["segment"]["n"].as_u64().unwrap() as usize;
                assert_eq!(s.context["segment"]["item"], json!({"part": k}));
                assert_eq!(s.context["segment"]["count"], json!(n));
                assert_eq!(s.context["segment"]["id"], json!(format!("{id}_seg_{k}")), "segment id = event id + _ + n");
                assert_eq!(s.stage, "segment");
            }
            // finish them in reverse order: the join still gets them in segment order
            let answers: Vec<(&Claimed, Value)> = segments
                .iter()
                .rev()
                .map(|s| (s, ok(json!(s.context["segment"]["n"].as_u64().unwrap() * 10))))
                .collect();
            for chunk in answers.chunks(7) {
                report(&c, chunk.to_vec(), None).await;
            }
            let join = claim(&c, "wf", None).await;
            assert_eq!(join.len(), 1, "the join runs once after the last segment");
            let expected: Vec<Value> = (0..n).map(|i| json!(i * 10)).collect();
            assert_eq!(join[0].context["inputs"]["seg"], json!(expected));
            report(&c, vec![(&join[0], ok(json!("joined")))], None).await;
            let r = run(&c, &id).await;
            let seg = event(&r, "seg");
            assert_eq!(seg["segment_cnt"], json!(n));
            assert_eq!(seg["segments"].as_array().unwrap().len(), n);
            assert!(seg["segments"].as_array().unwrap().iter().all(|s| s["status"] == "succeeded"));
        }
        assert_eq!(run(&c, &id).await["status"], "succeeded", "{n} segments");
    }
    // items that are not an array fail the node with a clear error
    let id = start(&c, "dyn", json!({}), None, None).await;
    let split = claim(&c, "wf", None).await;
    report(&c, vec![(&split[0], ok(json!({"parts": "nope"})))], None).await;
    let r = run(&c, &id).await;
    assert_eq!(r["status"], "failed");
    assert!(r["error"].as_str().unwrap().contains("not an array"), "{}", r["error"]);
}

fn routed() -> Value {
    json!({"nodes": [{"name": "start", "type": "start"}, {"name": "check", "type": "task", "function": "wf"},
        {"name": "route", "type": "router"}, {"name": "big", "type": "task", "function": "wf"},
        {"name": "small", "type": "task", "function": "wf"}, {"name": "tiny", "type": "task", "function": "wf"},
        {"name": "end", "type": "end"}],
        "edges": [["start", "check"], ["check", "route"],
            {"from": "route", "to": "big", "when": "$.nodes.check.size > 10"},
            {"from": "route", "to": "small"},
            {"from": "route", "to": "tiny", "when": "$.nodes.check.size < 2"},
            ["big", "end"], ["small", "end"], ["tiny", "end"]]})
}

#[tokio::test]
async fn a_router_takes_the_first_matching_edge_and_the_join_waits_only_for_that_branch() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    register(&c, "wf", json!({})).await;
    let stored = pipeline(&c, "route", routed()).await;
    // "tiny" comes after the default edge: it can never be taken, so the plan prunes it
    assert_eq!(stored["plan"]["pruned"].as_array().unwrap().len(), 2, "{}", stored["plan"]["pruned"]);
    assert!(stored["plan"]["nodes"].get("tiny").is_none());
    for (size, taken, skipped) in [(50, "big", "small"), (5, "small", "big"), (1, "small", "big")] {
        let id = start(&c, "route", json!({}), None, None).await;
        let check = claim(&c, "wf", None).await;
        report(&c, vec![(&check[0], ok(json!({"size": size})))], None).await;
        let next = claim(&c, "wf", None).await;
        assert_eq!(next.len(), 1);
        assert_eq!(node(&next[0]), taken, "size {size}");
        report(&c, vec![(&next[0], ok(json!(taken)))], None).await;
        let r = run(&c, &id).await;
        assert_eq!(r["status"], "succeeded", "the end did not wait for the branch not taken: {r}");
        assert_eq!(event(&r, skipped)["status"], "skipped");
        assert_eq!(event(&r, "route")["result"], json!({"route": taken}));
        assert_eq!(r["result"], json!({taken: taken}));
    }
}

#[tokio::test]
async fn a_sub_pipeline_runs_as_a_child_run_and_its_result_becomes_the_nodes_result() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    register(&c, "wf", json!({})).await;
    pipeline(
        &c,
        "child",
        json!({"nodes": [{"name": "start", "type": "start"},
        {"name": "inner", "type": "task", "function": "wf"}, {"name": "end", "type": "end"}],
        "edges": [["start", "inner"], ["inner", "end"]]}),
    )
    .await;
    pipeline(
        &c,
        "parent",
        json!({"nodes": [{"name": "start", "type": "start"},
        {"name": "sub", "type": "pipeline", "pipeline": "child"}, {"name": "after", "type": "task", "function": "wf"},
        {"name": "end", "type": "end"}], "edges": [["start", "sub"], ["sub", "after"], ["after", "end"]]}),
    )
    .await;
    let id = start(&c, "parent", json!({"movie": "m"}), Some("http://127.0.0.1:9/p"), None).await;
    let inner = claim(&c, "wf", None).await;
    assert_eq!(node(&inner[0]), "inner");
    assert_eq!(inner[0].context["input"]["input"], json!({"movie": "m"}), "the child's input carries the parent's");
    let child_id = inner[0].context["run_id"].as_str().unwrap().to_string();
    let child = run(&c, &child_id).await;
    assert_eq!(child["parent_event"], json!(format!("{id}_sub")));
    assert_eq!(event(&run(&c, &id).await, "sub")["child_run"], json!(child_id));
    report(&c, vec![(&inner[0], ok(json!("inner done")))], None).await;
    assert_eq!(run(&c, &child_id).await["status"], "succeeded");
    assert!(run(&c, &child_id).await["callbacks"].as_array().unwrap().is_empty(), "a child run calls nobody back");
    let after = claim(&c, "wf", None).await;
    assert_eq!(after[0].context["inputs"], json!({"sub": {"inner": "inner done"}}));
    report(&c, vec![(&after[0], ok(json!(1)))], None).await;
    assert_eq!(run(&c, &id).await["status"], "succeeded");

    // a failing child fails the parent's node and the parent
    let id = start(&c, "parent", json!({}), None, None).await;
    let inner = claim(&c, "wf", None).await;
    report(&c, vec![(&inner[0], json!({"outcome": "fail", "error": "broken", "retry": false}))], None).await;
    let r = run(&c, &id).await;
    assert_eq!(r["status"], "failed");
    assert!(r["error"].as_str().unwrap().contains("broken"), "{}", r["error"]);
}

#[tokio::test]
async fn a_node_retries_by_its_functions_policy_and_then_succeeds() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    register(&c, "wf", json!({"max_retry_num": 2, "max_retry_interval": 10})).await;
    pipeline(&c, "lin", linear()).await;
    let now = t0();
    let id = start(&c, "lin", json!({}), None, Some(now)).await;
    let a = claim(&c, "wf", Some(now)).await;
    report(&c, vec![(&a[0], json!({"outcome": "fail", "error": "flaky"}))], Some(now)).await;
    assert_eq!(event(&run(&c, &id).await, "a")["status"], "running", "a retried try keeps the node going");
    assert!(claim(&c, "wf", Some(now)).await.is_empty(), "backing off");
    let a = claim(&c, "wf", Some(now + secs(2.0))).await;
    assert_eq!(a.len(), 1, "tried again after the back-off");
    report(&c, vec![(&a[0], ok(json!("A")))], Some(now + secs(2.0))).await;
    work_all(&c, &["wf"], Some(now + secs(3.0)), |_| ok(json!("B"))).await;
    let r = run(&c, &id).await;
    assert_eq!(r["status"], "succeeded");
    assert_eq!(
        (event(&r, "a")["activations"].clone(), event(&r, "a")["exec_cnt"].clone()),
        (json!(1), json!(2)),
        "one activation, two function calls"
    );
    let outcomes: Vec<&str> = r["traces"].as_array().unwrap().iter().map(|t| t["outcome"].as_str().unwrap()).collect();
    assert_eq!(outcomes, ["fail", "succeed", "succeed"]);
    assert_eq!(r["traces"][0]["error"], "flaky");
}

#[tokio::test]
async fn a_final_failure_fails_the_run_cancels_its_other_work_and_still_calls_back() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    register(&c, "wf", json!({"max_retry_num": 0})).await;
    pipeline(&c, "dia", diamond()).await;
    let id = start(&c, "dia", json!({}), Some("https://example.invalid/done?id=42"), None).await;
    let a = claim(&c, "wf", None).await;
    report(&c, vec![(&a[0], ok(json!("A")))], None).await;
    let bc = claim(&c, "wf", None).await;
    let b = bc.iter().find(|t| node(t) == "b").unwrap();
    let other = bc.iter().find(|t| node(t) == "c").unwrap();
    report(&c, vec![(b, json!({"outcome": "fail", "error": "disk full"}))], None).await;
    let r = run(&c, &id).await;
    assert_eq!(r["status"], "failed");
    assert_eq!(r["error"], "node b failed: disk full");
    assert_eq!(event(&r, "b")["status"], "failed");
    assert_eq!(event(&r, "c")["status"], "cancelled");
    assert_eq!(event(&r, "d")["status"], "cancelled");
    let c_task: Value = c.query_one("select asyncflow.get_task($1)", &[&other.task_id]).await.unwrap().get(0);
    assert_eq!(c_task["status"], "cancelled", "the other branch's task is cancelled");
    let err = c.query_one("select asyncflow.retry_task($1)", &[&b.task_id]).await.unwrap_err();
    assert_eq!(common::sqlstate(&err), "AF013", "a node's task is retried through its node");
    let message = err.as_db_error().unwrap().message().to_string();
    assert!(message.contains(&format!("retry_node('{id}', 'b')")), "{message}");
    assert_eq!(report(&c, vec![(other, ok(json!("late")))], None).await, [false], "its late report is refused");
    let callbacks = r["callbacks"].as_array().unwrap();
    assert_eq!(callbacks.len(), 1, "a failed run calls back");
    assert_eq!(callbacks[0]["payload"]["status"], "failed");
    assert_eq!(callbacks[0]["payload"]["error"], "node b failed: disk full");

    // resumed from the failed node by hand: c runs again, the run ends, and calls back again
    let resumed: bool = c.query_one("select asyncflow.retry_node($1, 'b')", &[&id]).await.unwrap().get(0);
    assert!(resumed);
    let r = run(&c, &id).await;
    assert_eq!((r["status"].clone(), event(&r, "d")["status"].clone()), (json!("running"), json!("waiting")));
    let again = claim(&c, "wf", None).await;
    let mut names: Vec<&str> = again.iter().map(node).collect();
    names.sort();
    assert_eq!(names, ["b", "c"], "the failed node and the cancelled one");
    report(&c, again.iter().map(|t| (t, ok(json!(node(t))))).collect(), None).await;
    work_all(&c, &["wf"], None, |t| ok(json!(node(t)))).await;
    let r = run(&c, &id).await;
    assert_eq!(r["status"], "succeeded", "{r}");
    assert_eq!(event(&r, "b")["exec_cnt"], 2);
    assert_eq!(r["callbacks"].as_array().unwrap().len(), 2);
    let err = c.query_one("select asyncflow.retry_node($1, 'b')", &[&id]).await.unwrap_err();
    assert_eq!(common::sqlstate(&err), "AF013", "only a failed node of a failed run is retried");
}

#[tokio::test]
async fn a_run_started_on_version_1_finishes_on_version_1_after_version_2_is_activated() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    register(&c, "wf", json!({})).await;
    let v1 = json!({"nodes": [{"name": "start", "type": "start"}, {"name": "a", "type": "task", "function": "wf"},
        {"name": "end", "type": "end"}], "edges": [["start", "a"], ["a", "end"]]});
    pipeline(&c, "ver", v1.clone()).await;
    let old = start(&c, "ver", json!({}), None, None).await;
    assert_eq!(pipeline(&c, "ver", v1).await["created"], false, "the same definition again stores nothing");
    let v2 = pipeline(&c, "ver", linear()).await;
    assert_eq!((v2["version"].clone(), v2["status"].clone()), (json!(2), json!("active")));
    let listed: Vec<Value> =
        c.query("select asyncflow.list_pipelines()", &[]).await.unwrap().iter().map(|r| r.get(0)).collect();
    assert_eq!(listed[1]["status"], "retired", "the old active version is retired: {listed:?}");
    let new = start(&c, "ver", json!({}), None, None).await;
    work_all(&c, &["wf"], None, |t| ok(json!(node(t)))).await;
    let old_run = run(&c, &old).await;
    assert_eq!((old_run["version"].clone(), old_run["status"].clone()), (json!(1), json!("succeeded")));
    assert_eq!(old_run["events"].as_array().unwrap().len(), 3, "version 1's nodes only");
    let new_run = run(&c, &new).await;
    assert_eq!((new_run["version"].clone(), new_run["status"].clone()), (json!(2), json!("succeeded")));
    assert_eq!(event(&new_run, "b")["status"], "succeeded");
    let err = c.query_one("select asyncflow.start_run('ver', version => 1)", &[]).await.unwrap_err();
    assert_eq!(common::sqlstate(&err), "AF013", "a retired version starts no run");
}

#[tokio::test]
async fn an_asynchronous_node_waits_for_its_external_completion() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    register(&c, "wf", json!({})).await;
    pipeline(
        &c,
        "ext",
        json!({"nodes": [{"name": "start", "type": "start"},
        {"name": "submit", "type": "task", "function": "wf", "async": true},
        {"name": "approve", "type": "task", "async": true}, {"name": "end", "type": "end"}],
        "edges": [["start", "submit"], ["submit", "approve"], ["approve", "end"]]}),
    )
    .await;
    let id = start(&c, "ext", json!({}), None, None).await;
    let submit = claim(&c, "wf", None).await;
    report(&c, vec![(&submit[0], ok(json!({"job": "j-1"})))], None).await;
    let r = run(&c, &id).await;
    assert_eq!(event(&r, "submit")["status"], "external", "its function is done, the outside world is not");
    let err = c.query_one("select asyncflow.complete_node($1, 'approve')", &[&id]).await.unwrap_err();
    assert_eq!(common::sqlstate(&err), "AF013");
    c.query_one("select asyncflow.complete_node($1, 'submit')", &[&id]).await.unwrap();
    let r = run(&c, &id).await;
    assert_eq!(event(&r, "submit")["result"], json!({"job": "j-1"}), "default: the function's result");
    assert_eq!(event(&r, "approve")["status"], "external", "a node with no function only waits");
    let after: Value =
        c.query_one("select asyncflow.complete_node($1, 'approve', '{\"ok\": true}')", &[&id]).await.unwrap().get(0);
    assert_eq!(after["status"], "succeeded");
    assert_eq!(after["result"], json!({"approve": {"ok": true}}));
    let err = c.query_one("select asyncflow.complete_node($1, 'nope')", &[&id]).await.unwrap_err();
    assert_eq!(common::sqlstate(&err), "AF012");
}

/// A report locks its task and then (the workflow trigger) its run; cancel_run locks the run and
/// then its tasks. When the two meet, the deadlock detector ends one of them (40P01): cancel_run,
/// which waited first here, now retries in a savepoint of its own and ends the run, and the
/// report is written.
#[tokio::test]
async fn cancelling_a_run_while_its_task_reports_retries_past_the_deadlock() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    register(&c, "wf", json!({})).await;
    pipeline(&c, "dia", diamond()).await;
    let id = start(&c, "dia", json!({}), None, None).await;
    let a = claim(&c, "wf", None).await;
    let number = asyncflow::TaskId::parse(&a[0].task_id).unwrap().number();

    // the worker's transaction holds the task's row, as its report's update would
    let worker = db.raw().await;
    worker.batch_execute("begin").await.unwrap();
    worker
        .execute("select 1 from asyncflow.tasks where task_type = 'wf' and id = $1 for update", &[&number])
        .await
        .unwrap();
    // cancel_run locks the run and waits for the task
    let canceller = db.raw().await;
    let run_id = id.clone();
    let cancelling = tokio::spawn(async move {
        canceller.query_one("select asyncflow.cancel_run($1)", &[&run_id]).await.map(|r| r.get::<_, bool>(0))
    });
    common::wait_for_lock_wait(&c, "cancel_run").await;
    // the report's trigger now wants the run: a deadlock, found after deadlock_timeout (1 s)
    assert_eq!(report(&worker, vec![(&a[0], ok(json!(1)))], None).await, [true]);
    worker.batch_execute("commit").await.unwrap();
    let cancelled = cancelling.await.unwrap();
    assert_eq!(cancelled.map_err(|e| common::sqlstate(&e)), Ok(true));
    let r = run(&c, &id).await;
    assert_eq!(r["status"], "cancelled", "{r}");
    assert_eq!(event(&r, "a")["status"], "succeeded", "the report landed first: {r}");
}

#[tokio::test]
async fn cancelling_a_run_cancels_its_tasks_and_bad_input_changes_nothing() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    register(&c, "wf", json!({})).await;
    pipeline(&c, "dia", diamond()).await;
    let id = start(&c, "dia", json!({}), None, None).await;
    let a = claim(&c, "wf", None).await;
    let cancelled: bool = c.query_one("select asyncflow.cancel_run($1)", &[&id]).await.unwrap().get(0);
    assert!(cancelled);
    let r = run(&c, &id).await;
    assert_eq!((r["status"].clone(), event(&r, "a")["status"].clone()), (json!("cancelled"), json!("cancelled")));
    assert_eq!(report(&c, vec![(&a[0], ok(json!(1)))], None).await, [false]);
    let again: bool = c.query_one("select asyncflow.cancel_run($1)", &[&id]).await.unwrap().get(0);
    assert!(!again);
    let retried: String = c.query_one("select asyncflow.retry_run($1)", &[&id]).await.unwrap().get(0);
    let r2 = run(&c, &retried).await;
    assert_eq!((r2["attempt"].clone(), r2["retry_of"].clone()), (json!(2), json!(id)));
    assert_eq!(run(&c, &id).await["retried_by"], json!(retried));

    let runs_before: i64 = c.query_one("select count(*) from asyncflow.runs", &[]).await.unwrap().get(0);
    for (sql, code) in [
        ("select asyncflow.start_run('nope')", "AF011"),
        ("select asyncflow.start_run('dia', '[1]')", "AF006"),
        ("select asyncflow.start_run('dia', notify_url => 'ftp://x')", "AF006"),
        ("select asyncflow.start_run('dia', version => 7)", "AF011"),
        ("select asyncflow.start_run('Bad Name')", "AF006"),
        ("select asyncflow.cancel_run('r2030')", "AF012"),
        ("select asyncflow.retry_run($$r20300101-00000000000000000000000000000000$$)", "AF012"),
    ] {
        let err = c.query_one(sql, &[]).await.unwrap_err();
        assert_eq!(common::sqlstate(&err), code, "{sql}");
    }
    let runs_after: i64 = c.query_one("select count(*) from asyncflow.runs", &[]).await.unwrap().get(0);
    assert_eq!(runs_before, runs_after);
    let missing: Option<Value> = c.query_one("select asyncflow.get_run('nope')", &[]).await.unwrap().get(0);
    assert!(missing.is_none());
}

/// Retrying a node starts nothing more once the run fails again while its nodes restart: a
/// cancelled sub-pipeline node whose child pipeline was retired fails the run again at once, and
/// the retried node must then get no live task in the failed run.
#[tokio::test]
async fn retrying_a_node_starts_nothing_more_in_a_run_that_fails_again() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    register(&c, "wf", json!({"max_retry_num": 0})).await;
    register(&c, "slow", json!({"max_retry_num": 0})).await;
    let kid = json!({"nodes": [{"name": "start", "type": "start"},
        {"name": "inner", "type": "task", "function": "slow"}, {"name": "end", "type": "end"}],
        "edges": [["start", "inner"], ["inner", "end"]]});
    pipeline(&c, "kid", kid.clone()).await;
    pipeline(
        &c,
        "par",
        json!({"nodes": [{"name": "start", "type": "start"},
        {"name": "sub", "type": "pipeline", "pipeline": "kid"}, {"name": "b", "type": "task", "function": "wf"},
        {"name": "end", "type": "end"}], "edges": [["start", "sub"], ["start", "b"], ["sub", "end"], ["b", "end"]]}),
    )
    .await;
    let id = start(&c, "par", json!({}), None, None).await;
    let b = claim(&c, "wf", None).await;
    report(&c, vec![(&b[0], json!({"outcome": "fail", "error": "no", "retry": false}))], None).await;
    assert_eq!(run(&c, &id).await["status"], "failed");
    assert_eq!(event(&run(&c, &id).await, "sub")["status"], "cancelled");
    // kid's version 1 is retired by a new one...
    let mut kid2 = kid.clone();
    kid2["nodes"][1]["timeout"] = json!(30);
    pipeline(&c, "kid", kid2).await;
    // ... and that one too: kid starts no child run any more
    c.query_one("select asyncflow.set_pipeline_status('kid', 2, 'retired')", &[]).await.unwrap();
    let retried: bool = c.query_one("select asyncflow.retry_node($1, 'b')", &[&id]).await.unwrap().get(0);
    let r = run(&c, &id).await;
    assert_eq!(r["status"], "failed", "sub failed again at once: {r}");
    assert!(!retried, "retry_node says the run did not get going: {r}");
    assert_ne!(event(&r, "b")["status"], "pending", "nothing started in the failed run: {r}");
    assert!(claim(&c, "wf", None).await.is_empty(), "no live task of b");
}

/// start, `n` parallel nodes, then (when `sub` names one) a sub-pipeline node `sub`, then end.
fn instant_chain(n: usize, sub: Option<&str>) -> Value {
    let mut nodes = vec![json!({"name": "start", "type": "start"}), json!({"name": "end", "type": "end"})];
    let mut names = vec!["start".to_string()];
    for i in 1..=n {
        nodes.push(json!({"name": format!("n{i}"), "type": "parallel"}));
        names.push(format!("n{i}"));
    }
    if let Some(child) = sub {
        nodes.push(json!({"name": "sub", "type": "pipeline", "pipeline": child}));
        names.push("sub".into());
    }
    names.push("end".into());
    let edges: Vec<Value> = names.windows(2).map(|w| json!([w[0], w[1]])).collect();
    json!({"nodes": nodes, "edges": edges})
}

/// A parent counts its sub-pipeline's steps as they were when it was stored; the child can grow
/// since. The sub-pipeline node that would start a child past the limit, counting the steps of
/// the runs above, fails, saying so; otherwise a run whose sub-pipelines have grown past the
/// stack would make start_run raise 54001 (here about 890 steps in one call).
#[tokio::test]
async fn a_sub_pipeline_grown_past_the_step_limit_since_its_parent_was_stored_fails_its_node() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    pipeline(&c, "inner", instant_chain(0, None)).await;
    pipeline(&c, "middle", instant_chain(0, None)).await;
    let top = pipeline(&c, "top", instant_chain(94, Some("middle"))).await;
    assert_eq!(top["plan"]["steps"], json!(299), "95 nodes, sub 5 + middle's 6, end");
    // both sub-pipelines grow, each within the limit on its own
    assert_eq!(pipeline(&c, "middle", instant_chain(94, Some("inner"))).await["plan"]["steps"], json!(299));
    assert_eq!(pipeline(&c, "inner", instant_chain(98, None)).await["plan"]["steps"], json!(300));

    let id = start(&c, "top", json!({}), None, None).await;
    let r = run(&c, &id).await;
    assert_eq!(r["status"], "failed", "{r}");
    let sub = event(&r, "sub");
    assert_eq!(sub["status"], "failed");
    assert!(sub["child_run"].is_null(), "no child run started: {sub}");
    assert_eq!(
        sub["error"],
        json!(
            "sub-pipeline 'middle' version 2: with the runs above, one call could run 592 steps, more than the \
             limit of 300 (its steps have grown since this pipeline was stored)"
        )
    );

    // stored again, top counts middle as it is now, and is refused
    let message = refused(&c, "top", instant_chain(93, Some("middle"))).await;
    assert!(message.contains("more than the limit of 300"), "{message}");
    // middle itself runs: its sub-pipeline node checks inner as it is now, with no run above
    let id = start(&c, "middle", json!({}), None, None).await;
    let r = run(&c, &id).await;
    assert_eq!(r["status"], "failed", "{r}");
    assert!(event(&r, "sub")["error"].as_str().unwrap().contains("'inner' version 2"), "{r}");
}

/// start, then `n` sub-pipeline nodes side by side, each running `child`, then end.
fn fan_of_sub_pipelines(n: usize, child: &str) -> Value {
    let mut nodes = vec![json!({"name": "start", "type": "start"}), json!({"name": "end", "type": "end"})];
    let mut edges = Vec::new();
    for i in 1..=n {
        nodes.push(json!({"name": format!("p{i:02}"), "type": "pipeline", "pipeline": child}));
        edges.push(json!(["start", format!("p{i:02}")]));
        edges.push(json!([format!("p{i:02}"), "end"]));
    }
    json!({"nodes": nodes, "edges": edges})
}

/// Sub-pipelines nest at most 8 levels, and one run's tree starts at most 1000 of them: the node
/// that would start the 1001st fails, saying so, and the failure ends the tree. Without a bound
/// on the width, one start_run would start here 30 sub-pipelines of 40 each, 1,230 runs (up to
/// 500^8 with 500 nodes a pipeline).
#[tokio::test]
async fn one_run_starts_at_most_1000_sub_pipeline_runs_in_its_tree() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    pipeline(&c, "leaf", instant_chain(0, None)).await;
    pipeline(&c, "forty", fan_of_sub_pipelines(40, "leaf")).await;
    pipeline(&c, "thirty", fan_of_sub_pipelines(30, "forty")).await;
    let count = || async {
        let n: i64 = c.query_one("select count(*) from asyncflow.runs", &[]).await.unwrap().get(0);
        n
    };

    let id = start(&c, "thirty", json!({}), None, None).await;
    assert_eq!(count().await, 1001, "the root and 1000 sub-pipeline runs");
    let r = run(&c, &id).await;
    assert_eq!(r["status"], "failed");
    let error = r["error"].as_str().unwrap();
    let limit = format!("run {id} has started 1000 sub-pipeline runs in its tree, the limit for one run");
    assert!(error.ends_with(&limit), "{error}");
    let sub_runs: i32 =
        c.query_one("select sub_runs from asyncflow.runs where run_id = $1", &[&id]).await.unwrap().get(0);
    assert_eq!(sub_runs, 1000);

    // the count is the tree's: another run starts its own 40
    let id = start(&c, "forty", json!({}), None, None).await;
    assert_eq!(run(&c, &id).await["status"], "succeeded");
    assert_eq!(count().await, 1001 + 41);
}

/// A task node and a segment that succeed on a retry show no error beside `succeeded`, nor does
/// the task: a task's error is its last outcome's. The failed try's error stays in the task's
/// schedule log and in the run's traces.
#[tokio::test]
async fn a_node_and_a_segment_that_succeed_on_a_retry_show_no_error_and_the_log_keeps_it() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    register(&c, "wf", json!({"max_retry_num": 3, "max_retry_interval": -1})).await;
    pipeline(&c, "dyn", dynamic()).await;
    let id = start(&c, "dyn", json!({}), None, Some(t0())).await;
    let fail = |why: &str| json!({"outcome": "fail", "error": why, "retry": true});
    let split = claim(&c, "wf", Some(t0())).await;
    report(&c, vec![(&split[0], fail("split: disk full"))], Some(t0() + secs(1.0))).await;
    assert_eq!(common::sql::task(&c, &split[0].task_id).await["error"], "split: disk full", "a retry shows why");
    let split = claim(&c, "wf", Some(t0() + secs(10.0))).await;
    assert_eq!(node(&split[0]), "split");
    report(&c, vec![(&split[0], ok(json!({"parts": [1, 2]})))], Some(t0() + secs(11.0))).await;
    let task = common::sql::task(&c, &split[0].task_id).await;
    assert_eq!((task["status"].clone(), task["error"].clone()), (json!("succeeded"), Value::Null), "{task}");
    let log = task["schedule_log"].as_array().unwrap();
    assert_eq!(log[0]["error"], "split: disk full", "the log keeps the failed try: {log:?}");

    let segments = claim(&c, "wf", Some(t0() + secs(20.0))).await;
    assert_eq!(segments.len(), 2);
    let answers = vec![(&segments[0], fail("segment 0: codec crashed")), (&segments[1], fail("segment 1: no space"))];
    report(&c, answers, Some(t0() + secs(21.0))).await;
    // a success beside a failure in one batch (the general report statement), then a success
    // alone (the successes-only one): both clear the error
    let again = claim(&c, "wf", Some(t0() + secs(30.0))).await;
    assert_eq!(again.len(), 2);
    let answers = vec![(&again[0], ok(json!(1))), (&again[1], fail("segment 1: no space again"))];
    report(&c, answers, Some(t0() + secs(31.0))).await;
    let last = claim(&c, "wf", Some(t0() + secs(40.0))).await;
    assert_eq!(last[0].task_id, again[1].task_id);
    report(&c, vec![(&last[0], ok(json!(2)))], Some(t0() + secs(41.0))).await;
    let join = claim(&c, "wf", Some(t0() + secs(50.0))).await;
    report(&c, vec![(&join[0], ok(json!("joined")))], Some(t0() + secs(51.0))).await;

    let r = run(&c, &id).await;
    assert_eq!(r["status"], "succeeded", "{r}");
    for e in r["events"].as_array().unwrap() {
        assert_eq!((&e["status"], &e["error"]), (&json!("succeeded"), &Value::Null), "{e}");
    }
    for s in event(&r, "seg")["segments"].as_array().unwrap() {
        assert_eq!((&s["status"], &s["error"]), (&json!("succeeded"), &Value::Null), "{s}");
    }
    let mut errors: Vec<&str> = r["traces"].as_array().unwrap().iter().filter_map(|t| t["error"].as_str()).collect();
    errors.sort();
    assert_eq!(
        errors,
        ["segment 0: codec crashed", "segment 1: no space", "segment 1: no space again", "split: disk full"],
        "the traces keep each failed try"
    );
    for s in &segments {
        assert_eq!(common::sql::task(&c, &s.task_id).await["error"], Value::Null);
    }
}
