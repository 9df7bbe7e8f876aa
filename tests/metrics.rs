//! `GET /metrics`: per-type figures read from the database (exact values after tasks of two
//! types were created and worked through the SQL API and the worker protocol), this server's
//! request and hold histograms, well-formed Prometheus text, and the bearer token.
use crate::common;

use std::collections::{BTreeMap, BTreeSet};

use asyncflow::http::router;
use axum::http::StatusCode;
use common::{http_config, request, TestDb};
use serde_json::{json, Value};

const TOKEN: &str = "test-token-0123456789";

/// Status, content type and body text of one call.
async fn call(
    app: &axum::Router,
    method: &str,
    uri: &str,
    body: Option<Value>,
    token: Option<&str>,
) -> (StatusCode, String, String) {
    let (status, content_type, bytes) =
        request(app, method, uri, body.map(|b| b.to_string()), Some("application/json"), token).await;
    (status, content_type, String::from_utf8(bytes).unwrap())
}

async fn json_call(app: &axum::Router, method: &str, uri: &str, body: Value) -> (StatusCode, Value) {
    let (status, _, text) = call(app, method, uri, Some(body), None).await;
    (status, serde_json::from_str(&text).unwrap())
}

#[derive(Debug, Clone, PartialEq)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

fn is_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

/// Parses the text format 0.0.4, panicking on anything malformed: every sample line is
/// `name{labels} value`, each family has HELP then TYPE before its samples, which follow together,
/// and histograms are cumulative with `+Inf` equal to `_count`.
fn parse(text: &str) -> Vec<Sample> {
    assert!(text.ends_with('\n'), "the text ends with a line feed");
    let mut samples = vec![];
    let mut helped = BTreeSet::new();
    let mut typed: BTreeMap<String, String> = BTreeMap::new();
    let mut current: Option<(String, String)> = None; // the family whose samples may follow
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').expect("HELP name text");
            assert!(is_name(name) && !help.is_empty(), "{line}");
            assert!(helped.insert(name.to_string()), "HELP twice for {name}");
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("TYPE name kind");
            assert!(["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind), "{line}");
            assert!(helped.contains(name), "HELP precedes TYPE for {name}");
            assert!(typed.insert(name.to_string(), kind.to_string()).is_none(), "TYPE twice for {name}");
            current = Some((name.to_string(), kind.to_string()));
            continue;
        }
        assert!(!line.starts_with('#') && !line.is_empty(), "unexpected line {line:?}");
        let name_end = line.find(['{', ' ']).unwrap_or_else(|| panic!("no value on {line:?}"));
        let name = &line[..name_end];
        assert!(is_name(name), "{line}");
        let (labels, rest) = match line[name_end..].strip_prefix('{') {
            Some(body) => parse_labels(body, line),
            None => (BTreeMap::new(), &line[name_end..]),
        };
        let value = rest.strip_prefix(' ').unwrap_or_else(|| panic!("one space before the value: {line}"));
        assert!(!value.contains(' '), "no timestamp expected: {line}");
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v.parse().unwrap_or_else(|_| panic!("value {v:?} in {line}")),
        };
        let (family, kind) = current.clone().unwrap_or_else(|| panic!("sample before any TYPE: {line}"));
        let belongs = name == family
            || (kind == "histogram"
                && [format!("{family}_bucket"), format!("{family}_sum"), format!("{family}_count")]
                    .contains(&name.to_string()));
        assert!(belongs, "{name} sampled under the TYPE of {family}");
        samples.push(Sample { name: name.to_string(), labels, value });
    }
    check_histograms(&samples, &typed);
    samples
}

/// `key="value",...}` and what follows the closing brace.
fn parse_labels<'a>(body: &'a str, line: &str) -> (BTreeMap<String, String>, &'a str) {
    let mut labels = BTreeMap::new();
    let mut i = 0;
    loop {
        if body[i..].starts_with('}') {
            return (labels, &body[i + 1..]);
        }
        let eq = i + body[i..].find('=').unwrap_or_else(|| panic!("label without =: {line}"));
        let key = &body[i..eq];
        assert!(is_name(key) && !key.starts_with("__"), "label name {key:?} in {line}");
        assert!(body[eq + 1..].starts_with('"'), "quoted label value in {line}");
        i = eq + 2;
        let mut value = String::new();
        let mut chars = body[i..].char_indices();
        loop {
            match chars.next().unwrap_or_else(|| panic!("unterminated label value: {line}")) {
                (_, '\\') => match chars.next().map(|(_, c)| c) {
                    Some('n') => value.push('\n'),
                    Some(c @ ('\\' | '"')) => value.push(c),
                    c => panic!("bad escape {c:?} in {line}"),
                },
                (j, '"') => {
                    i += j + 1;
                    break;
                }
                (_, c) => value.push(c),
            }
        }
        assert!(labels.insert(key.to_string(), value).is_none(), "label {key} twice in {line}");
        if body[i..].starts_with(',') {
            i += 1;
        } else {
            assert!(body[i..].starts_with('}'), "expected , or }} after a label in {line}");
        }
    }
}

fn check_histograms(samples: &[Sample], typed: &BTreeMap<String, String>) {
    for (family, _) in typed.iter().filter(|(_, k)| *k == "histogram") {
        let mut series: BTreeMap<BTreeMap<String, String>, Vec<(f64, f64)>> = BTreeMap::new();
        for s in samples.iter().filter(|s| s.name == format!("{family}_bucket")) {
            let mut labels = s.labels.clone();
            let le = labels.remove("le").expect("le on a bucket");
            let le = if le == "+Inf" { f64::INFINITY } else { le.parse().unwrap() };
            series.entry(labels).or_default().push((le, s.value));
        }
        for (labels, buckets) in series {
            assert!(buckets.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1), "{family} {labels:?}");
            assert_eq!(buckets.last().unwrap().0, f64::INFINITY, "{family} ends at +Inf");
            let count = samples
                .iter()
                .find(|s| s.name == format!("{family}_count") && s.labels == labels)
                .unwrap_or_else(|| panic!("{family}_count {labels:?}"));
            assert_eq!(buckets.last().unwrap().1, count.value, "{family} +Inf bucket = count");
            assert!(samples.iter().any(|s| s.name == format!("{family}_sum") && s.labels == labels));
        }
    }
}

/// The value of the sample with exactly these labels.
fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let labels: BTreeMap<String, String> = labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    samples.iter().find(|s| s.name == name && s.labels == labels).map(|s| s.value)
}

#[tokio::test]
async fn metrics_show_exact_per_type_figures_and_this_servers_requests() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    c.batch_execute(
        "select asyncflow.register_task_type('alpha'); \
         select asyncflow.register_task_type('beta')",
    )
    .await
    .unwrap();
    // alpha: five tasks, and one creation rolled back (it still takes an id)
    let mut alpha = vec![];
    for i in 0..5 {
        let row = c.query_one("select asyncflow.create_task('alpha', $1::jsonb)", &[&json!({"i": i})]).await.unwrap();
        alpha.push(row.get::<_, String>(0));
    }
    c.batch_execute("begin; select asyncflow.create_task('alpha'); rollback").await.unwrap();
    // beta: three due now, one in 2100
    c.query(
        "select asyncflow.create_tasks('beta', $1::jsonb)",
        &[&json!([{}, {}, {}, {"run_at": "2100-01-01T00:00:00Z"}])],
    )
    .await
    .unwrap();

    // alpha through the SQL API: three claimed; one succeeds, one fails for good, one keeps
    // running; one of the two left is cancelled
    let held = c.query("select task_id, claim_seq from asyncflow.claim_tasks('alpha', 'w1', 3)", &[]).await.unwrap();
    assert_eq!(held.len(), 3);
    let report = |i: usize, extra: Value| {
        let mut r = json!({"task_id": held[i].get::<_, String>(0), "claim_seq": held[i].get::<_, i64>(1)});
        r.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        r
    };
    let reports = json!([
        report(0, json!({"outcome": "succeed", "result": {"ok": true}})),
        report(1, json!({"outcome": "fail", "error": "boom", "retry": false}))
    ]);
    let accepted = c
        .query("select accepted from asyncflow.report_tasks('w1', $1::jsonb)", &[&reports])
        .await
        .unwrap()
        .iter()
        .filter(|r| r.get::<_, bool>(0))
        .count();
    assert_eq!(accepted, 2);
    let claimed: BTreeSet<String> = held.iter().map(|r| r.get(0)).collect();
    let unclaimed = alpha.iter().find(|id| !claimed.contains(*id)).unwrap();
    let cancelled: bool = c.query_one("select asyncflow.cancel_task($1)", &[unclaimed]).await.unwrap().get(0);
    assert!(cancelled);

    // beta through the worker protocol: two held; one succeeds, one is back in an hour; the type
    // is paused
    let app = router(db.pool.clone(), &http_config(&[], 64 * 1024));
    let (s, b) =
        json_call(&app, "POST", "/v1/worker/hold", json!({"type": "beta", "worker_id": "w2", "limit": 2})).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let tasks = b["tasks"].as_array().unwrap().clone();
    assert_eq!(tasks.len(), 2);
    let single = |t: &Value| json!({"worker_id": "w2", "task_id": t["task_id"], "claim_seq": t["claim_seq"]});
    let (s, b) = json_call(&app, "POST", "/v1/worker/succeed", single(&tasks[0])).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let mut later = single(&tasks[1]);
    later["delay"] = json!(3600);
    let (s, b) = json_call(&app, "POST", "/v1/worker/later", later).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let (s, _) = json_call(&app, "POST", "/v1/task-types/beta/pause", json!(null)).await;
    assert_eq!(s, StatusCode::OK);
    // a hold of an unknown type is no hold: it must not make a series
    let (s, _) = json_call(&app, "POST", "/v1/worker/hold", json!({"type": "nope", "worker_id": "w2"})).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    // the hold's body is read through the middleware: the body limit still holds
    let big = json!({"type": "beta", "worker_id": "w2", "pad": "x".repeat(70 * 1024)});
    let (s, _, _) = call(&app, "POST", "/v1/worker/hold", Some(big), None).await;
    assert_eq!(s, StatusCode::PAYLOAD_TOO_LARGE);
    let (s, _, _) = call(&app, "GET", &format!("/v1/tasks/{}", alpha[0]), None, None).await;
    assert_eq!(s, StatusCode::OK);
    let (s, _, _) = call(&app, "GET", "/no/such/route", None, None).await;
    assert_eq!(s, StatusCode::NOT_FOUND);

    let (s, content_type, text) = call(&app, "GET", "/metrics", None, None).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(content_type, "text/plain; version=0.0.4; charset=utf-8");
    let m = parse(&text);
    assert!(m.iter().all(|s| s.name.starts_with("asyncflow_")), "{text}");
    assert_eq!(value(&m, "asyncflow_database_up", &[]), Some(1.0));

    let tasks = |ty: &str, status: &str| value(&m, "asyncflow_tasks", &[("type", ty), ("status", status)]);
    let per_type = |name: &str, ty: &str| value(&m, name, &[("type", ty)]);
    let expected = [("alpha", [1.0, 1.0, 1.0, 1.0, 1.0]), ("beta", [3.0, 0.0, 1.0, 0.0, 0.0])];
    for (ty, counts) in expected {
        for (status, n) in ["pending", "running", "succeeded", "failed", "cancelled"].into_iter().zip(counts) {
            assert_eq!(tasks(ty, status), Some(n), "asyncflow_tasks{{type={ty}, status={status}}}\n{text}");
        }
    }
    assert_eq!(per_type("asyncflow_tasks_created_total", "alpha"), Some(6.0), "five, and one rolled back");
    assert_eq!(per_type("asyncflow_tasks_created_total", "beta"), Some(4.0));
    // the SQL API's own counters: they only grow
    for (name, alpha_n, beta_n) in [
        ("asyncflow_tasks_claimed_total", 3.0, 2.0),
        ("asyncflow_tasks_succeeded_total", 1.0, 1.0),
        ("asyncflow_tasks_failed_total", 1.0, 0.0),
        ("asyncflow_tasks_retried_total", 0.0, 0.0),
        ("asyncflow_tasks_rescued_total", 0.0, 0.0),
    ] {
        assert_eq!((per_type(name, "alpha"), per_type(name, "beta")), (Some(alpha_n), Some(beta_n)), "{name}\n{text}");
    }
    // stage calls: alpha's succeed and fail, beta's succeed and later, all of stage "start"
    for ty in ["alpha", "beta"] {
        let labels = [("type", ty), ("stage", "start")];
        assert_eq!(value(&m, "asyncflow_stage_duration_seconds_count", &labels), Some(2.0), "{text}");
        let inf = [("type", ty), ("stage", "start"), ("le", "+Inf")];
        assert_eq!(value(&m, "asyncflow_stage_duration_seconds_bucket", &inf), Some(2.0));
        let hour = [("type", ty), ("stage", "start"), ("le", "3600")];
        assert_eq!(value(&m, "asyncflow_stage_duration_seconds_bucket", &hour), Some(2.0), "all took under an hour");
    }
    assert_eq!(per_type("asyncflow_queue_ready", "alpha"), Some(1.0));
    assert_eq!(per_type("asyncflow_queue_delayed", "alpha"), Some(0.0));
    assert_eq!(per_type("asyncflow_queue_ready", "beta"), Some(1.0));
    assert_eq!(per_type("asyncflow_queue_delayed", "beta"), Some(2.0), "the one of 2100 and the one later");
    assert_eq!(per_type("asyncflow_task_type_paused", "alpha"), Some(0.0));
    assert_eq!(per_type("asyncflow_task_type_paused", "beta"), Some(1.0));
    assert_eq!(per_type("asyncflow_running_oldest_age_seconds", "beta"), Some(0.0), "nothing runs");
    let held_for = per_type("asyncflow_running_oldest_age_seconds", "alpha").unwrap();
    assert!((0.0..60.0).contains(&held_for), "{held_for}");
    let waited = per_type("asyncflow_queue_oldest_ready_age_seconds", "alpha").unwrap();
    assert!((0.0..60.0).contains(&waited), "{waited}");
    assert_eq!(per_type("asyncflow_queue_oldest_ready_age_seconds", "beta").map(|v| v >= 0.0), Some(true));

    // this server's requests, by route template and status
    for (method, route, status) in [
        ("POST", "/v1/worker/hold", "200"),
        ("POST", "/v1/worker/hold", "404"),
        ("POST", "/v1/worker/hold", "413"),
        ("POST", "/v1/worker/succeed", "200"),
        ("POST", "/v1/worker/later", "200"),
        ("POST", "/v1/task-types/:name/pause", "200"),
        ("GET", "/v1/tasks/:id", "200"),
        ("GET", "unmatched", "404"),
    ] {
        let labels = [("method", method), ("route", route), ("status", status)];
        assert_eq!(value(&m, "asyncflow_http_requests_total", &labels), Some(1.0), "{labels:?}\n{text}");
        assert_eq!(value(&m, "asyncflow_http_request_duration_seconds_count", &labels), Some(1.0), "{labels:?}");
        let inf = [("method", method), ("route", route), ("status", status), ("le", "+Inf")];
        assert_eq!(value(&m, "asyncflow_http_request_duration_seconds_bucket", &inf), Some(1.0), "{labels:?}");
        let sum = value(&m, "asyncflow_http_request_duration_seconds_sum", &labels).unwrap();
        assert!(sum > 0.0 && sum < 60.0, "{sum}");
    }
    assert!(!m.iter().any(|s| s.labels.get("route").is_some_and(|r| r.contains("alpha-"))), "ids never make labels");
    assert_eq!(value(&m, "asyncflow_worker_hold_duration_seconds_count", &[("type", "beta")]), Some(1.0));
    assert!(!m.iter().any(|s| s.labels.get("type").is_some_and(|t| t == "nope")), "no series for an unknown type");

    // the scrape itself is counted from the next one on
    let (_, _, text) = call(&app, "GET", "/metrics", None, None).await;
    let m = parse(&text);
    let labels = [("method", "GET"), ("route", "/metrics"), ("status", "200")];
    assert_eq!(value(&m, "asyncflow_http_requests_total", &labels), Some(1.0));
}

#[tokio::test]
async fn metrics_need_the_bearer_token_when_the_server_has_tokens() {
    let db = TestDb::new().await;
    let app = router(db.pool.clone(), &http_config(&[TOKEN], 64 * 1024));
    let (s, _, body) = call(&app, "GET", "/metrics", None, None).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    assert!(body.contains("unauthorized"), "{body}");
    let (s, _, _) = call(&app, "GET", "/metrics", None, Some("wrong-token-0123456789")).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    let (s, _, text) = call(&app, "GET", "/metrics", None, Some(TOKEN)).await;
    assert_eq!(s, StatusCode::OK);
    let m = parse(&text);
    // the refused scrapes are counted too
    let labels = [("method", "GET"), ("route", "/metrics"), ("status", "401")];
    assert_eq!(value(&m, "asyncflow_http_requests_total", &labels), Some(2.0), "{text}");
}

#[tokio::test]
async fn without_a_database_metrics_say_so_and_still_give_this_servers_figures() {
    let pool = asyncflow::db::pool("postgres://postgres@127.0.0.1:1/nothing", 1).unwrap();
    let app = router(pool, &http_config(&[], 64 * 1024));
    let (s, _, _) = call(&app, "GET", "/healthz", None, None).await;
    assert_eq!(s, StatusCode::OK);
    let (s, _, text) = call(&app, "GET", "/metrics", None, None).await;
    assert_eq!(s, StatusCode::OK);
    let m = parse(&text);
    assert_eq!(value(&m, "asyncflow_database_up", &[]), Some(0.0));
    assert!(!m.iter().any(|s| s.name == "asyncflow_tasks"), "no per-type figures without a database");
    let labels = [("method", "GET"), ("route", "/healthz"), ("status", "200")];
    assert_eq!(value(&m, "asyncflow_http_requests_total", &labels), Some(1.0));
}

#[test]
fn every_metric_is_documented_in_the_module_doc() {
    let source = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/src/http/metrics.rs")).unwrap();
    let doc: String = source.lines().filter(|l| l.starts_with("//!")).collect::<Vec<_>>().join("\n");
    // every metric name written as a string literal in the code
    let families: BTreeSet<&str> = source
        .match_indices("\"asyncflow_")
        .map(|(i, _)| {
            let rest = &source[i + 1..];
            &rest[..rest.find('"').unwrap()]
        })
        .filter(|name| !name.contains('{'))
        .collect();
    assert!(families.len() >= 10, "{families:?}");
    for f in families {
        assert!(doc.contains(&format!("`{f}")), "{f} is not described in the module doc of src/http/metrics.rs");
    }
}

#[tokio::test]
async fn rescues_and_retries_are_counted_and_survive_a_dropped_shard() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    c.batch_execute("select asyncflow.register_task_type('gamma', '{\"max_retry_num\": 0, \"retention\": 1, \"shard_max_rows\": 10}')")
        .await
        .unwrap();
    c.query("select asyncflow.create_tasks('gamma', '[{}, {}]'::jsonb)", &[]).await.unwrap();
    // eight more, cancelled below, fill the first shard to its 10 rows
    c.query("select asyncflow.create_tasks('gamma', (select jsonb_agg('{}'::jsonb) from generate_series(1, 8)))", &[])
        .await
        .unwrap();
    let held = c.query("select task_id, claim_seq from asyncflow.claim_tasks('gamma', 'w1', 2)", &[]).await.unwrap();
    assert_eq!(held.len(), 2);
    // one fails (out of tries: failed for good), the other's lease runs out
    let fail = json!([{"task_id": held[0].get::<_, String>(0), "claim_seq": held[0].get::<_, i64>(1),
        "outcome": "fail", "error": "no"}]);
    c.query("select * from asyncflow.report_tasks('w1', $1::jsonb)", &[&fail]).await.unwrap();
    c.query("select * from asyncflow.rescue_expired(now() + interval '1 day')", &[]).await.unwrap();
    let app = router(db.pool.clone(), &http_config(&[], 64 * 1024));
    let (_, _, text) = call(&app, "GET", "/metrics", None, None).await;
    let m = parse(&text);
    let get = |name: &str| value(&m, name, &[("type", "gamma")]);
    assert_eq!(get("asyncflow_tasks_claimed_total"), Some(2.0));
    assert_eq!(get("asyncflow_tasks_rescued_total"), Some(1.0), "{text}");
    assert_eq!(get("asyncflow_tasks_failed_total"), Some(2.0), "one by its report, one out of tries at rescue");
    assert_eq!(get("asyncflow_tasks_succeeded_total"), Some(0.0));
    // retention drops the finished shard: the stored counts go, the counters stay
    let rest: Vec<String> = c
        .query("select task_id from asyncflow.claim_tasks('gamma', 'w1', 8)", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(rest.len(), 8);
    for id in &rest {
        c.query("select asyncflow.cancel_task($1)", &[id]).await.unwrap();
    }
    c.query("select asyncflow.roll_shard('gamma', now())", &[]).await.unwrap();
    c.query("select asyncflow.advance_begin_pos('gamma', now())", &[]).await.unwrap();
    let dropped =
        c.query("select asyncflow.drop_expired_shards('gamma', now() + interval '1 day')", &[]).await.unwrap();
    assert_eq!(dropped.len(), 1, "the first shard is dropped");
    let (_, _, text) = call(&app, "GET", "/metrics", None, None).await;
    let m = parse(&text);
    assert_eq!(value(&m, "asyncflow_tasks", &[("type", "gamma"), ("status", "failed")]), Some(0.0), "{text}");
    assert_eq!(value(&m, "asyncflow_tasks_failed_total", &[("type", "gamma")]), Some(2.0));
}

/// A schedule is one series per family however many ticks it released: the task or run id of the
/// newest tick is not a label (it made a new series at every tick), and `last_released` is when
/// the newest tick was released.
#[tokio::test]
async fn a_schedules_metrics_are_one_series_per_schedule_whatever_it_released() {
    use asyncflow::maintenance::{Scheduler, Service};
    use chrono::TimeZone;
    let db = TestDb::new().await;
    let c = db.conn().await;
    c.batch_execute("select asyncflow.register_task_type('tick')").await.unwrap();
    let at = |m: u32, s: u32| chrono::Utc.with_ymd_and_hms(2030, 1, 1, 0, m, s).single().unwrap();
    let spec = asyncflow::schedule::ScheduleSpec { task_type: Some("tick".into()), ..Default::default() };
    asyncflow::db::api::set_schedule(&c, "every.minute", "* * * * *", &spec, Some(at(0, 30))).await.unwrap();
    let scheduler = Scheduler::new(db.pool.clone(), std::time::Duration::from_secs(1));
    let app = router(db.pool.clone(), &http_config(&[], 64 * 1024));
    for (pass, now) in [at(1, 5), at(2, 7)].into_iter().enumerate() {
        assert_eq!(scheduler.run_once(Some(now)).await.unwrap().changed, 1, "one tick at each pass");
        let (s, _, text) = call(&app, "GET", "/metrics", None, None).await;
        assert_eq!(s, StatusCode::OK);
        let released: Vec<Sample> =
            parse(&text).into_iter().filter(|s| s.name == "asyncflow_schedule_last_released").collect();
        let labels: BTreeMap<String, String> = [("schedule".to_string(), "every.minute".to_string())].into();
        let expected = now.timestamp_millis() as f64 / 1000.0;
        assert_eq!(
            released,
            [Sample { name: "asyncflow_schedule_last_released".into(), labels, value: expected }],
            "pass {pass}: {text}"
        );
        let last_tick =
            value(&parse(&text), "asyncflow_schedule_last_tick_timestamp_seconds", &[("schedule", "every.minute")]);
        assert_eq!(last_tick, Some(at(pass as u32 + 1, 0).timestamp() as f64));
    }
}
