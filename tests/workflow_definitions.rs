//! Pipeline definitions: what is refused (with the node or edge named), what the execution plan
//! prunes, versions and their status.
use crate::common;

use common::sql::register;
use common::workflow::{pipeline, refused, run, start};
use common::TestDb;
use serde_json::{json, Value};

fn def(nodes: Value, edges: Value) -> Value {
    json!({"nodes": nodes, "edges": edges})
}

fn se() -> Vec<Value> {
    vec![json!({"name": "start", "type": "start"}), json!({"name": "end", "type": "end"})]
}

fn with(extra: Vec<Value>) -> Value {
    let mut nodes = se();
    nodes.extend(extra);
    json!(nodes)
}

#[tokio::test]
async fn invalid_definitions_are_refused_with_the_node_named_and_nothing_stored() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    register(&c, "wf", json!({})).await;
    let a = json!({"name": "a", "type": "task", "function": "wf"});
    let b = json!({"name": "b", "type": "task", "function": "wf"});
    let cases: Vec<(Value, &str)> = vec![
        (json!([1]), "must be a JSON object"),
        (json!({"nodes": [], "edges": []}), "nodes must be a non-empty array"),
        (json!({"nodes": se(), "edges": [], "colour": 1}), "unknown field 'colour'"),
        (
            def(with(vec![json!({"name": "start", "type": "task", "function": "wf"})]), json!([])),
            "node 'start': the name is used twice",
        ),
        (def(with(vec![json!({"name": "x", "type": "teleport"})]), json!([])), "node 'x': type must be one of"),
        (
            def(with(vec![json!({"name": "Bad", "type": "task", "function": "wf"})]), json!([])),
            "node 'Bad': a node name must match",
        ),
        (
            def(
                with(vec![json!({"name": "a", "type": "task", "function": "nope"})]),
                json!([["start", "a"], ["a", "end"]]),
            ),
            "node 'a': unknown function \"nope\"",
        ),
        (
            def(with(vec![json!({"name": "a", "type": "task"})]), json!([["start", "a"], ["a", "end"]])),
            "node 'a': a task node needs a function",
        ),
        (
            def(with(vec![json!({"name": "a", "type": "task", "function": "wf", "colour": 1})]), json!([])),
            "node 'a': unknown field 'colour' for a task node",
        ),
        (
            def(with(vec![json!({"name": "d", "type": "dynamic", "function": "wf", "items": "$$$"})]), json!([])),
            "node 'd': items must be a jsonpath",
        ),
        (
            def(with(vec![json!({"name": "p", "type": "pipeline", "pipeline": "nope"})]), json!([])),
            "node 'p': unknown pipeline",
        ),
        (
            def(with(vec![json!({"name": "p", "type": "pipeline", "pipeline": "bad"})]), json!([])),
            "node 'p': a pipeline cannot run itself",
        ),
        (def(json!([{"name": "end", "type": "end"}]), json!([])), "no start node"),
        (
            def(with(vec![json!({"name": "start2", "type": "start"})]), json!([])),
            "node 'start2': a pipeline has exactly one start node",
        ),
        (def(with(vec![a.clone()]), json!([["start", "a"], ["a", "zz"]])), "edge a -> zz: unknown node 'zz'"),
        (
            def(with(vec![a.clone(), b.clone()]), json!([["start", "a"], ["a", "b"], ["b", "a"], ["b", "end"]])),
            "node 'a': it is on a cycle (a, b)",
        ),
        (
            def(with(vec![a.clone()]), json!([["start", "a"], ["a", "a"], ["a", "end"]])),
            "node 'a': an edge from the node to itself is a cycle",
        ),
        (
            def(with(vec![a.clone(), b.clone()]), json!([["start", "a"], ["a", "end"], ["b", "end"]])),
            "node 'b': unreachable from the start node",
        ),
        (
            def(with(vec![a.clone(), b.clone()]), json!([["start", "a"], ["a", "end"], ["a", "b"]])),
            "node 'b': no path from it to the end node",
        ),
        (
            def(with(vec![a.clone()]), json!([["start", "a"], ["a", "end"], ["a", "end"]])),
            "edge a -> end: listed twice",
        ),
        (
            def(with(vec![a.clone()]), json!([["start", "a"], {"from": "a", "to": "end", "when": "$.x"}])),
            "edge a -> end: only a router's edges have a condition",
        ),
        (
            def(
                with(vec![json!({"name": "r", "type": "router"})]),
                json!([["start", "r"], {"from": "r", "to": "end", "when": "(("}]),
            ),
            "edge r -> end: when must be a jsonpath predicate",
        ),
        (
            def(with(vec![a.clone()]), json!([["start", "a"], ["a", "end"], ["end", "a"]])),
            "node 'end' is the end node and has no out-edges",
        ),
        (
            def(with(vec![json!({"name": "cb", "type": "callback", "url": "javascript:alert(1)"})]), json!([])),
            "node 'cb': url must be an http(s) URL",
        ),
        (json!({"nodes": se(), "edges": [["start", "end"]], "timeout": -1}), "timeout must be seconds"),
        // integer fields with a fraction, and fields of the wrong JSON type, refused before any cast
        // (they were stored, then failed start_run or check_runs with 22P02)
        (json!({"nodes": se(), "edges": [["start", "end"]], "retries": 1.5}), "retries must be an integer"),
        (
            def(with(vec![json!({"name": "a", "type": "task", "function": "wf", "priority": 1.5})]), json!([])),
            "node 'a': priority must be an integer, got 1.5",
        ),
        (
            def(
                with(vec![
                    json!({"name": "a", "type": "task", "function": "wf", "timeout": 1, "timeout_retries": 1.5}),
                ]),
                json!([]),
            ),
            "node 'a': timeout_retries must be an integer",
        ),
        (
            def(
                with(vec![
                    json!({"name": "d", "type": "dynamic", "function": "wf", "items": "$.x", "max_segments": 2.5}),
                ]),
                json!([]),
            ),
            "node 'd': max_segments must be an integer",
        ),
        (
            def(with(vec![json!({"name": "p", "type": "pipeline", "pipeline": "other", "version": "abc"})]), json!([])),
            "node 'p': version must be an integer",
        ),
        (
            def(with(vec![json!({"name": "a", "type": "task", "function": "wf", "async": "maybe"})]), json!([])),
            "node 'a': async must be true or false",
        ),
    ];
    for (definition, expected) in cases {
        let message = refused(&c, "bad", definition.clone()).await;
        assert!(message.contains(expected), "{definition}\n  refused with {message:?}\n  expected {expected:?}");
    }
    let stored: i64 = c.query_one("select count(*) from asyncflow.pipelines", &[]).await.unwrap().get(0);
    assert_eq!(stored, 0, "nothing stored");
    let err = c.query_one("select asyncflow.put_pipeline('Bad Name', '{}')", &[]).await.unwrap_err();
    assert_eq!(common::sqlstate(&err), "AF010");
    let err = c
        .query_one(
            "select asyncflow.put_pipeline('ok', $1, 'sideways')",
            &[&def(json!(se()), json!([["start", "end"]]))],
        )
        .await
        .unwrap_err();
    assert_eq!(common::sqlstate(&err), "AF006");
}

#[tokio::test]
async fn versions_are_drafted_activated_and_retired_and_the_plan_prunes_what_can_never_run() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    register(&c, "wf", json!({})).await;
    let routed = def(
        with(vec![
            json!({"name": "r", "type": "router"}),
            json!({"name": "yes", "type": "task", "function": "wf"}),
            json!({"name": "no", "type": "task", "function": "wf"}),
            json!({"name": "never", "type": "task", "function": "wf"}),
            json!({"name": "after_never", "type": "parallel"}),
        ]),
        json!([["start", "r"], {"from": "r", "to": "yes", "when": "$.input.ok == true"}, {"from": "r", "to": "no"},
            {"from": "r", "to": "never", "when": "$.input.x > 1"}, ["never", "after_never"], ["after_never", "end"],
            ["yes", "end"], ["no", "end"]]),
    );
    register(&c, "plain", json!({})).await;
    let v1 = pipeline(&c, "p", routed.clone()).await;
    let watched: Vec<String> = c
        .query("select tgrelid::regclass::text from pg_trigger where tgname = 'tg_tasks__workflow' order by 1", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        watched,
        ["asyncflow.tasks_wf", "asyncflow.tasks_wf_1"],
        "only the types a pipeline names carry the trigger"
    );
    let pruned: Vec<String> = v1["plan"]["pruned"].as_array().unwrap().iter().map(|p| p.to_string()).collect();
    assert_eq!(pruned.len(), 3, "{pruned:?}");
    assert!(pruned[0].contains("never") && pruned[0].contains("default edge"), "{pruned:?}");
    assert!(v1["plan"]["nodes"].get("after_never").is_none(), "unreachable once pruned");
    assert_eq!(v1["plan"]["nodes"]["end"]["in_degree"], 2, "pruned edges do not count in the latch");
    assert_eq!(v1["plan"]["order"], json!(["start", "end", "r", "yes", "no"]));

    let draft: Value = c
        .query_one("select asyncflow.put_pipeline('p', $1, 'draft')", &[&def(json!(se()), json!([["start", "end"]]))])
        .await
        .unwrap()
        .get(0);
    assert_eq!((draft["version"].clone(), draft["status"].clone()), (json!(2), json!("draft")));
    let active: Value = c.query_one("select asyncflow.get_pipeline('p')", &[]).await.unwrap().get(0);
    assert_eq!(active["version"], 1, "a draft does not replace the active version");
    c.query_one("select asyncflow.set_pipeline_status('p', 2, 'active')", &[]).await.unwrap();
    let versions: Vec<Value> =
        c.query("select asyncflow.list_pipelines()", &[]).await.unwrap().iter().map(|r| r.get(0)).collect();
    let statuses: Vec<(i64, String)> =
        versions.iter().map(|v| (v["version"].as_i64().unwrap(), v["status"].as_str().unwrap().to_string())).collect();
    assert_eq!(statuses, [(2, "active".to_string()), (1, "retired".to_string())]);
    c.query_one("select asyncflow.set_pipeline_status('p', 2, 'retired')", &[]).await.unwrap();
    let err = c.query_one("select asyncflow.start_run('p')", &[]).await.unwrap_err();
    assert_eq!(common::sqlstate(&err), "AF011", "no active version left");
    let message = |e: &tokio_postgres::Error| e.as_db_error().map(|d| d.message().to_string()).unwrap_or_default();
    assert!(message(&err).starts_with("pipeline 'p' has no active version"), "{err}");
    // a pipeline nothing was applied under is unknown, not one without an active version
    let err = c.query_one("select asyncflow.start_run('nopipe')", &[]).await.unwrap_err();
    assert_eq!(common::sqlstate(&err), "AF011");
    assert_eq!(message(&err), "unknown pipeline 'nopipe': no version of it was applied");
    let err = c.query_one("select asyncflow.set_pipeline_status('p', 9, 'active')", &[]).await.unwrap_err();
    assert_eq!(common::sqlstate(&err), "AF011");
    // a TOML file and a JSON file of the same pipeline give the same definition
    let dir = std::env::temp_dir().join(format!("af-pipes-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("t.toml"), "edges = [[\"start\", \"end\"]]\n[[nodes]]\nname = \"start\"\ntype = \"start\"\n[[nodes]]\nname = \"end\"\ntype = \"end\"\n").unwrap();
    let file = asyncflow::workflow::definition::read(&dir.join("t.toml")).unwrap();
    assert_eq!(file.name, "t");
    assert_eq!(file.definition, def(json!(se()), json!([["start", "end"]])));
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn two_pipelines_naming_one_type_can_be_put_at_once() {
    let db = TestDb::new().await;
    let a = db.raw().await;
    let b = db.raw().await;
    register(&a, "shared", json!({})).await;
    let def_of = |node: &str| {
        def(
            with(vec![json!({"name": node, "type": "task", "function": "shared"})]),
            json!([["start", node], [node, "end"]]),
        )
    };
    // The first put holds its transaction open; the second, naming the same type, found no
    // workflow trigger yet either, and failed creating it (42710) once the first committed.
    a.batch_execute("begin").await.unwrap();
    a.query_one("select asyncflow.put_pipeline('first', $1)", &[&def_of("x")]).await.unwrap();
    let second = tokio::spawn(async move {
        b.query_one("select asyncflow.put_pipeline('second', $1)", &[&def_of("y")]).await.map(|_| ())
    });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    a.batch_execute("commit").await.unwrap();
    second.await.unwrap().expect("the second put waits for the first and succeeds");
    let triggers: i64 = a
        .query_one(
            "select count(*) from pg_catalog.pg_trigger where tgname = 'tg_tasks__workflow' \
             and tgrelid = 'asyncflow.tasks_shared'::regclass",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(triggers, 1);
}

/// The largest definitions allowed compile, and more edges than allowed are refused before any
/// work. A compile that rescans every edge per node and per edge takes 1.6 s for a 500-node
/// chain and about 6 s for 100 nodes all joined to each other, and with no limit on edges one
/// put_pipeline could hold a backend for hours. The statement timeout bounds the test; it
/// measures nothing.
#[tokio::test]
async fn the_largest_definitions_compile_and_edges_past_the_limit_are_refused() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    c.batch_execute("set statement_timeout = '5s'").await.unwrap();
    register(&c, "wf", json!({})).await;
    // task nodes: a chain of nodes that complete at once this long is past the step limit
    let inner = |n: usize| -> (Vec<String>, Value) {
        let names: Vec<String> = (1..=n).map(|i| format!("n{i}")).collect();
        let nodes = names.iter().map(|name| json!({"name": name, "type": "task", "function": "wf"})).collect();
        (names.clone(), with(nodes))
    };

    // 500 nodes in a chain
    let (names, nodes) = inner(498);
    let mut edges = vec![json!(["start", "n1"]), json!(["n498", "end"])];
    edges.extend(names.windows(2).map(|w| json!([w[0], w[1]])));
    let plan = &pipeline(&c, "chain", def(nodes, json!(edges))).await["plan"];
    assert_eq!(plan["order"].as_array().map(Vec::len), Some(500));
    assert_eq!(plan["nodes"]["n2"]["in"], json!(["n1"]));
    assert_eq!(plan["nodes"]["n2"]["out"], json!([{"to": "n3", "when": null}]));
    assert_eq!(plan["nodes"]["end"]["in_degree"], json!(1));

    // 100 nodes each joined to every later one: 4,952 edges
    let (names, nodes) = inner(100);
    let mut edges = vec![json!(["start", "n1"]), json!(["n100", "end"])];
    for (i, from) in names.iter().enumerate() {
        edges.extend(names[i + 1..].iter().map(|to| json!([from, to])));
    }
    let plan = &pipeline(&c, "dense", def(nodes, json!(edges))).await["plan"];
    assert_eq!(plan["nodes"]["n100"]["in_degree"], json!(99));
    assert_eq!(plan["nodes"]["n1"]["out"].as_array().map(Vec::len), Some(99));
    assert_eq!(plan["nodes"]["n1"]["out"][0], json!({"to": "n2", "when": null}), "definition order");
    assert_eq!(plan["pruned"], json!([]));

    // one edge past the limit, and a cycle through all 500 nodes named at once
    let message = refused(&c, "wide", def(json!(se()), json!(vec![json!(["start", "end"]); 5001]))).await;
    assert!(message.contains("at most 5000 edges"), "{message}");
    let (names, nodes) = inner(498);
    let mut edges = vec![json!(["start", "n1"]), json!(["n498", "end"]), json!(["n498", "n1"])];
    edges.extend(names.windows(2).map(|w| json!([w[0], w[1]])));
    let message = refused(&c, "ring", def(nodes, json!(edges))).await;
    assert!(message.starts_with("node 'n1': it is on a cycle (n1, n2, n3,"), "{message}");
    assert!(message.ends_with("n497, n498)"), "{message}");
}

/// start, then `n` nodes of one type in a chain, then end.
fn chain(n: usize, node: Value) -> Value {
    let names: Vec<String> = (1..=n).map(|i| format!("n{i}")).collect();
    let nodes = names
        .iter()
        .map(|name| {
            let mut one = node.clone();
            one["name"] = json!(name);
            one
        })
        .collect();
    let mut edges: Vec<Value> = names.windows(2).map(|w| json!([w[0], w[1]])).collect();
    let first = names.first().map_or("end", String::as_str);
    edges.push(json!(["start", first]));
    edges.push(json!([names.last().map_or("start", String::as_str), "end"]));
    def(with(nodes), json!(edges))
}

/// The engine runs the nodes that complete at once, and skips the branches a router does not
/// take, by recursion within PostgreSQL's stack. Stored unchecked, a long enough chain of them
/// would run out of stack at run time (start_run raises 54001 from 209 parallel nodes on; a
/// task's report would fail the run). So put_pipeline counts a plan's steps (3 a node that may
/// complete at once, 1 a node a router may skip, 5 a sub-pipeline plus its own steps) and
/// refuses more than 300, naming the node the longest chain ends at; the longest chains allowed
/// run.
#[tokio::test]
async fn a_chain_of_steps_one_call_would_recurse_through_past_the_limit_is_refused() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    register(&c, "wf", json!({})).await;
    let parallel = json!({"type": "parallel"});

    // 100 nodes that complete at once, start and end included: 300 steps, and it runs
    let stored = pipeline(&c, "longest", chain(98, parallel.clone())).await;
    assert_eq!(stored["plan"]["steps"], json!(300));
    let id = start(&c, "longest", json!({}), None, None).await;
    assert_eq!(run(&c, &id).await["status"], "succeeded");
    let message = refused(&c, "deep", chain(99, parallel.clone())).await;
    assert!(
        message.starts_with(
            "node 'end': reaching it can take 303 steps in one call (start -> n1 -> n2 -> ... -> n98 -> n99 -> end), \
             more than the limit of 300"
        ),
        "{message}"
    );
    let message = refused(&c, "routers", chain(99, json!({"type": "router"}))).await;
    assert!(message.contains("303 steps"), "{message}");
    let got: Option<Value> = c.query_one("select asyncflow.get_pipeline('deep')", &[]).await.unwrap().get(0);
    assert_eq!(got, None, "nothing stored");

    // task nodes cut the chain (each task's end is a new call) ...
    let stored = pipeline(&c, "tasks", chain(400, json!({"type": "task", "function": "wf"}))).await;
    assert_eq!(stored["plan"]["steps"], json!(4), "start, n1 / n400, end");
    // ... unless a router may skip them: a skipped node is 1 step
    let skipped = |n: usize| -> Value {
        let mut d = chain(n, json!({"type": "task", "function": "wf"}));
        d["nodes"].as_array_mut().unwrap().push(json!({"name": "r", "type": "router"}));
        let edges = d["edges"].as_array_mut().unwrap();
        edges.retain(|e| e[0] != "start");
        edges.push(json!(["start", "r"]));
        edges.push(json!({"from": "r", "to": "n1", "when": "$.input.go == true"}));
        edges.push(json!(["r", "end"]));
        d
    };
    let stored = pipeline(&c, "skips", skipped(291)).await;
    assert_eq!(stored["plan"]["steps"], json!(300), "start, r, 291 skipped tasks, end");
    let id = start(&c, "skips", json!({"go": false}), None, None).await;
    let r = run(&c, &id).await;
    assert_eq!(r["status"], "succeeded", "{}", r["error"]);
    let message = refused(&c, "skips", skipped(292)).await;
    assert!(message.contains("301 steps in one call (start -> r -> n1 -> ... -> n291 -> n292 -> end)"), "{message}");

    // a sub-pipeline node counts 5 and the steps of the version it starts
    let stored = pipeline(&c, "child", chain(60, parallel.clone())).await;
    assert_eq!(stored["plan"]["steps"], json!(186));
    let parent = |n: usize| -> Value {
        let mut d = chain(n, parallel.clone());
        d["nodes"].as_array_mut().unwrap().push(json!({"name": "sub", "type": "pipeline", "pipeline": "child"}));
        let edges = d["edges"].as_array_mut().unwrap();
        edges.retain(|e| e[1] != "end");
        edges.push(json!([format!("n{n}"), "sub"]));
        edges.push(json!(["sub", "end"]));
        d
    };
    let stored = pipeline(&c, "parent", parent(34)).await;
    assert_eq!(stored["plan"]["steps"], json!(299));
    assert_eq!(stored["plan"]["nodes"]["sub"]["steps_around"], json!(113), "35 nodes before, its own 5, end");
    let id = start(&c, "parent", json!({}), None, None).await;
    assert_eq!(run(&c, &id).await["status"], "succeeded");
    let message = refused(&c, "parent", parent(35)).await;
    assert!(message.contains("302 steps in one call (start -> n1 -> n2 -> ... -> n35 -> sub -> end)"), "{message}");
}

/// A node is skipped only when every in-edge is dead (wf_arrive), so the step count does not take
/// every node below a router as skippable: a join of all of a router's branches, or of a router's
/// branch and a node no router skips, is never skipped, and the task nodes after it cut the chain
/// (each task's end is a new call), so 400 of them are stored. A join below a router that may
/// itself be skipped still counts.
#[tokio::test]
async fn task_nodes_after_a_join_no_router_can_skip_cut_the_chain() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    register(&c, "wf", json!({})).await;
    let task = |name: &str| json!({"name": name, "type": "task", "function": "wf"});
    // start -> probe -> r -> {fast | slow} -> j, or (optional) start -> main -> j and r -> {opt | j},
    // then t1 .. t<n> -> end
    let build = |kind: &str, n: usize| -> Value {
        let mut nodes =
            vec![task("probe"), json!({"name": "r", "type": "router"}), json!({"name": "j", "type": "parallel"})];
        let mut edges = vec![json!(["start", "probe"]), json!(["probe", "r"])];
        match kind {
            "diamond" => {
                nodes.extend([task("fast"), task("slow")]);
                edges.extend([
                    json!({"from": "r", "to": "fast", "when": "$.input.big == false"}),
                    json!(["r", "slow"]),
                    json!(["fast", "j"]),
                    json!(["slow", "j"]),
                ]);
            }
            "optional" => {
                nodes.extend([task("main"), task("opt")]);
                edges.extend([
                    json!(["start", "main"]),
                    json!(["main", "j"]),
                    json!({"from": "r", "to": "opt", "when": "$.input.x == 1"}),
                    json!(["r", "j"]),
                    json!(["opt", "j"]),
                ]);
            }
            _ => {
                // the diamond below a second router, which the first may skip
                nodes.extend([json!({"name": "r0", "type": "router"}), task("fast"), task("slow")]);
                edges.retain(|e| e[0] != "probe");
                edges.extend([
                    json!(["probe", "r0"]),
                    json!({"from": "r0", "to": "r", "when": "$.input.go == true"}),
                    json!(["r0", "end"]),
                    json!({"from": "r", "to": "fast", "when": "$.input.big == false"}),
                    json!(["r", "slow"]),
                    json!(["fast", "j"]),
                    json!(["slow", "j"]),
                ]);
            }
        }
        let mut prev = "j".to_string();
        for i in 1..=n {
            let name = format!("t{i}");
            nodes.push(task(&name));
            edges.push(json!([prev, name]));
            prev = name;
        }
        edges.push(json!([prev, "end"]));
        def(with(nodes), json!(edges))
    };
    for kind in ["diamond", "optional"] {
        let stored = pipeline(&c, kind, build(kind, 400)).await;
        assert_eq!(stored["plan"]["steps"], json!(8), "{kind}: r, j, t1 (router, join, a task that ends the chain)");
    }
    let message = refused(&c, "skippable", build("skippable", 400)).await;
    assert!(message.contains("steps in one call (r0 -> r -> fast -> "), "{message}");
}
