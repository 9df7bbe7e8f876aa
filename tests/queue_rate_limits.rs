//! Rate limits per queue key of a type with fair_queues: one key's limit, the limit for every
//! key, held by the fair claim across workers; bad limits refused with nothing changed.
use crate::common;

use asyncflow::db::api;
use asyncflow::task_type::QueueRateLimit;
use common::{sqlstate, TestDb};
use serde_json::json;

async fn register(c: &impl tokio_postgres::GenericClient, name: &str, settings: serde_json::Value) {
    c.query_one("select asyncflow.register_task_type($1, $2)", &[&name, &settings]).await.unwrap();
}

/// `count` tasks of queue key `key`, created an hour before `now` (so all are due).
async fn enqueue(
    c: &impl tokio_postgres::GenericClient,
    ty: &str,
    key: &str,
    count: usize,
    now: chrono::DateTime<chrono::Utc>,
) {
    let tasks: Vec<serde_json::Value> = (0..count).map(|_| json!({"queue_key": key})).collect();
    c.execute("select asyncflow.create_tasks($1, $2, $3)", &[&ty, &json!(tasks), &(now - chrono::Duration::hours(1))])
        .await
        .unwrap();
}

fn limit(queue_key: Option<&str>, max_starts: Option<i32>, period: f64) -> QueueRateLimit {
    QueueRateLimit { queue_key: queue_key.map(str::to_string), max_starts, period: Some(period) }
}

/// Two workers claim a type whose key `slow` may start 10 tasks a second, for 20 s: the starts of
/// `slow` in any 20 s stay within 10 % of 200 (plus the bucket's first 10), while the key `fast`
/// of the same type, without a limit, starts all its 2,000 tasks meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_keys_rate_limit_holds_within_ten_percent_across_two_workers_while_another_key_runs_unthrottled() {
    let db = TestDb::new().await;
    let c = db.conn().await;
    register(&**c, "crawl", json!({"fair_queues": true, "schedule_interval": 0.05, "schedule_limit": 50})).await;
    let set = api::set_queue_rate_limit(&c, "crawl", &limit(Some("slow"), Some(10), 1.0)).await.unwrap();
    assert_eq!(set, limit(Some("slow"), Some(10), 1.0));
    let now = chrono::Utc::now();
    enqueue(&**c, "crawl", "slow", 600, now).await;
    enqueue(&**c, "crawl", "fast", 2000, now).await;
    let stop = tokio_util::sync::CancellationToken::new();
    let mut workers = Vec::new();
    for n in 0..2 {
        let config = asyncflow::worker::WorkerConfig {
            worker_id: asyncflow::WorkerId::new(&format!("rate-{n}")).unwrap(),
            concurrency: 20,
            shutdown_grace: std::time::Duration::from_millis(300),
            heartbeat_check: std::time::Duration::from_millis(100),
            ..Default::default()
        };
        let worker = asyncflow::worker::Worker::new(db.pool.clone(), db.url.clone(), config).register(
            asyncflow::TypeName::new("crawl").unwrap(),
            |_call: asyncflow::function::StageCall| async {
                asyncflow::function::StageReply::Succeeded { result: json!({}) }
            },
            None,
            Default::default(),
        );
        workers.push(tokio::spawn(worker.run(stop.clone())));
    }
    // a measurement over real time: the limit is per second of the clock
    tokio::time::sleep(std::time::Duration::from_secs(22)).await;
    stop.cancel();
    for w in workers {
        w.await.unwrap().unwrap();
    }
    // starts in the 20 s from the first one, by their claim times, per key
    let rows = c
        .query(
            "with s as (select min(claimed_at) as first from asyncflow.tasks where task_type = 'crawl')
             select t.queue_key, count(*) filter (where t.claimed_at < s.first + interval '20 seconds'),
               count(distinct t.owner) filter (where t.claimed_at < s.first + interval '20 seconds')
             from asyncflow.tasks t, s where t.task_type = 'crawl' and t.claimed_at is not null
             group by t.queue_key order by t.queue_key",
            &[],
        )
        .await
        .unwrap();
    let started: Vec<(String, i64, i64)> = rows.iter().map(|r| (r.get(0), r.get(1), r.get(2))).collect();
    eprintln!("started in 20 s (key, tasks, workers): {started:?}");
    assert_eq!(started.len(), 2, "{started:?}");
    let (fast, slow) = (&started[0], &started[1]);
    assert_eq!((fast.0.as_str(), slow.0.as_str()), ("fast", "slow"));
    assert_eq!(slow.2, 2, "both workers started tasks of the limited key");
    assert!((180..=220).contains(&slow.1), "{} starts of slow in 20 s at 10 per second", slow.1);
    assert_eq!(fast.1, 2000, "the key without a limit started all its tasks");
    // without the limit the key starts far more: the limit, not the workers, held it
    let removed = api::set_queue_rate_limit(&c, "crawl", &limit(Some("slow"), None, 1.0)).await.unwrap();
    assert_eq!(removed, QueueRateLimit { queue_key: Some("slow".into()), max_starts: None, period: None });
    let w = asyncflow::WorkerId::new("unlimited").unwrap();
    assert_eq!(api::claim_tasks(&c, "crawl", &w, 50, None).await.unwrap().len(), 50);
}

#[tokio::test]
async fn a_rate_limit_for_every_key_bounds_each_key_on_its_own_and_a_keys_own_limit_takes_its_place() {
    let db = TestDb::new().await;
    let c = db.conn().await;
    let w = asyncflow::WorkerId::new("w").unwrap();
    register(&**c, "tenant", json!({"fair_queues": true, "schedule_limit": 1000})).await;
    let t0 = chrono::DateTime::parse_from_rfc3339("2030-01-01T00:00:00Z").unwrap().with_timezone(&chrono::Utc);
    for k in 0..9 {
        enqueue(&**c, "tenant", &format!("k{k}"), 10, t0).await;
    }
    enqueue(&**c, "tenant", "vip", 10, t0).await;
    // every key 2 starts per hour; vip 5 per hour of its own
    let set = "select asyncflow.set_queue_rate_limit('tenant', $1, $2, $3, $4)";
    c.query_one(set, &[&None::<String>, &Some(2), &3600.0, &t0]).await.unwrap();
    c.query_one(set, &[&Some("vip"), &Some(5), &3600.0, &t0]).await.unwrap();
    let claim = |secs: i64| {
        let (c, w) = (&c, &w);
        async move {
            let claimed =
                api::claim_tasks(c, "tenant", w, 1000, Some(t0 + chrono::Duration::seconds(secs))).await.unwrap();
            let mut per_key = std::collections::BTreeMap::<String, usize>::new();
            for t in claimed {
                *per_key.entry(t.queue_key.unwrap_or_default()).or_default() += 1;
            }
            per_key
        }
    };
    let first = claim(0).await;
    assert_eq!(first.len(), 10, "{first:?}");
    assert!(first.iter().all(|(k, n)| *n == if k == "vip" { 5 } else { 2 }), "{first:?}");
    assert!(claim(1).await.is_empty(), "every bucket is empty");
    // half an hour: one more token for each key, two and a half for vip
    let later = claim(1801).await;
    assert!(later.iter().all(|(k, n)| *n == if k == "vip" { 2 } else { 1 }), "{later:?}");
    assert_eq!(later.values().sum::<usize>(), 11, "{later:?}");
    // a hold of the type claims instead (its claims spend the keys' buckets): nothing is left
    let held: i64 =
        c.query_one("select count(*) from asyncflow.type_hold__tenant('w', 100)", &[]).await.unwrap().get(0);
    assert_eq!(held, 0);
    // the type shows its limits
    let shown = api::list_task_types(&c).await.unwrap().into_iter().find(|t| t.task_type == "tenant").unwrap();
    let hourly = |n| asyncflow::task_type::RateLimit { max_starts: Some(n), period: 3600.0 };
    assert_eq!(shown.queue_rate_limit, Some(hourly(2)));
    assert_eq!(shown.queue_rate_limits.into_iter().collect::<Vec<_>>(), vec![("vip".to_string(), hourly(5))]);
    // without the limit for every key, only vip stays limited
    c.query_one(set, &[&None::<String>, &None::<i32>, &1.0, &t0]).await.unwrap();
    let free = claim(1802).await;
    assert_eq!(free.get("vip"), None, "{free:?}");
    assert_eq!(free.values().sum::<usize>(), 9 * 7, "{free:?}");
    let shown = api::list_task_types(&c).await.unwrap().into_iter().find(|t| t.task_type == "tenant").unwrap();
    assert_eq!((shown.queue_rate_limit, shown.queue_rate_limits.len()), (None, 1));
}

/// The buckets of keys under the limit for every key: a bucket refilled to full is removed by
/// maintenance (a missing bucket is a full one), one spent within the period stays, and so does a
/// key's own limit; the key's next claim starts from a full bucket, as it would have.
#[tokio::test]
async fn full_buckets_of_the_limit_for_every_key_are_pruned_and_a_pruned_key_starts_full() {
    let db = TestDb::new().await;
    let c = db.conn().await;
    let w = asyncflow::WorkerId::new("w").unwrap();
    register(&**c, "tenant", json!({"fair_queues": true, "schedule_limit": 1000})).await;
    let t0 = chrono::DateTime::parse_from_rfc3339("2030-01-01T00:00:00Z").unwrap().with_timezone(&chrono::Utc);
    let at = |secs: i64| t0 + chrono::Duration::seconds(secs);
    // "old" has only what its first claim takes: no claim walks it again
    enqueue(&**c, "tenant", "old", 2, t0).await;
    for key in ["recent", "vip"] {
        enqueue(&**c, "tenant", key, 10, t0).await;
    }
    // every key 2 starts per minute; vip 5 of its own
    let set = "select asyncflow.set_queue_rate_limit('tenant', $1, $2, $3, $4)";
    c.query_one(set, &[&None::<String>, &Some(2), &60.0, &t0]).await.unwrap();
    c.query_one(set, &[&Some("vip"), &Some(5), &60.0, &t0]).await.unwrap();
    let claimed = api::claim_tasks(&c, "tenant", &w, 1000, Some(at(0))).await.unwrap();
    assert_eq!(claimed.len(), 9, "2 + 2 + 5");
    let buckets = || async {
        let rows = c
            .query("select queue_key from asyncflow.queue_rate_limits where task_type = 'tenant' order by 1", &[])
            .await
            .unwrap();
        rows.iter().map(|r| r.get::<_, String>(0)).collect::<Vec<_>>()
    };
    assert_eq!(buckets().await, vec!["old", "recent", "vip"]);
    // 50 s on, "recent" spends again (its bucket refilled by then); "old" is left alone
    let tasks = api::claim_tasks(&c, "tenant", &w, 1000, Some(at(50))).await.unwrap();
    assert!(tasks.iter().any(|t| t.queue_key.as_deref() == Some("recent")), "{tasks:?}");
    let prune = |secs| {
        let c = &c;
        async move { c.query_one("select asyncflow.prune_rate_buckets($1)", &[&at(secs)]).await.unwrap().get::<_, i32>(0) }
    };
    // 59 s: "old" (0 tokens at 0 s, 2 a minute) is not full yet, nor is "recent"
    assert_eq!(prune(59).await, 0);
    // 61 s: "old" is full (2.03), and goes; "recent", spent at 50 s, is not (1.03); vip's own
    // limit stays
    assert_eq!(prune(61).await, 1);
    assert_eq!(buckets().await, vec!["recent", "vip"]);
    // "old" claims again from a full bucket: 2 starts, as with the row kept
    enqueue(&**c, "tenant", "old", 3, at(62)).await;
    let again = api::claim_tasks(&c, "tenant", &w, 1000, Some(at(62))).await.unwrap();
    let old = again.iter().filter(|t| t.queue_key.as_deref() == Some("old")).count();
    assert_eq!(old, 2, "{again:?}");
    assert_eq!(buckets().await, vec!["old", "recent", "vip"]);
    // a bucket row another transaction holds is passed over, not waited for (the pass would
    // keep the claim locks it took meanwhile): "recent" goes, the held "old" stays
    let mut other = db.raw().await;
    let holder = other.transaction().await.unwrap();
    holder
        .execute(
            "select 1 from asyncflow.queue_rate_limits where task_type = 'tenant' and queue_key = 'old' for update",
            &[],
        )
        .await
        .unwrap();
    let pruned =
        tokio::time::timeout(std::time::Duration::from_secs(10), prune(3600)).await.expect("the pass never waits");
    assert_eq!(pruned, 1);
    assert_eq!(buckets().await, vec!["old", "vip"]);
    holder.commit().await.unwrap();
    // through the maintenance service, once the row is free
    let services = asyncflow::maintenance::services(&db.pool, &asyncflow::maintenance::MaintenanceConfig::default());
    let pruner = services.iter().find(|s| s.name() == "rate_bucket_pruner").expect("the service is listed");
    let report = pruner.run_once(Some(at(3600))).await.unwrap();
    assert_eq!(report.changed, 1, "{report:?}");
    assert_eq!(buckets().await, vec!["vip"]);
}

#[tokio::test]
async fn bad_queue_rate_limits_are_refused_and_change_nothing() {
    let db = TestDb::new().await;
    let c = db.conn().await;
    register(&**c, "fair", json!({"fair_queues": true})).await;
    register(&**c, "plain", json!({})).await;
    api::set_queue_rate_limit(&c, "fair", &limit(Some("a"), Some(3), 2.0)).await.unwrap();
    let state = || async {
        let c = db.conn().await;
        let types: Vec<serde_json::Value> = c
            .query("select asyncflow.task_type_json(y) from asyncflow.task_types y order by task_type", &[])
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        let buckets: Vec<String> = c
            .query("select r::text from asyncflow.queue_rate_limits r order by task_type, queue_key", &[])
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        (types, buckets)
    };
    let before = state().await;
    let long = "k".repeat(256);
    for (ty, key, max, period, code) in [
        ("fair", Some("a"), Some(-1), 1.0, "AF006"),
        ("fair", Some("a"), Some(0), 1.0, "AF006"),
        ("fair", None, Some(1_000_001), 1.0, "AF006"),
        ("fair", Some("a"), Some(5), 0.0, "AF006"),
        ("fair", None, Some(5), f64::NAN, "AF006"),
        ("fair", Some(long.as_str()), Some(5), 1.0, "AF006"),
        ("plain", Some("a"), Some(5), 1.0, "AF006"),
        ("plain", None, None, 1.0, "AF006"),
        ("nope", Some("a"), Some(5), 1.0, "AF001"),
    ] {
        let e = c
            .query_one("select asyncflow.set_queue_rate_limit($1, $2, $3, $4)", &[&ty, &key, &max, &period])
            .await
            .unwrap_err();
        assert_eq!(sqlstate(&e), code, "{ty} {key:?} {max:?} {period}: {e:?}");
    }
    assert_eq!(state().await, before, "a refused limit changed nothing");
    // over HTTP: the same refusals, with their status codes
    let app = asyncflow::http::router(db.pool.clone(), &common::http_config(&[], 64 * 1024));
    let put = |ty: &'static str, body: serde_json::Value| {
        let app = app.clone();
        async move {
            let uri = format!("/v1/task-types/{ty}/queue-rate-limit");
            let (status, _, bytes) =
                common::request(&app, "PUT", &uri, Some(body.to_string()), Some("application/json"), None).await;
            (status.as_u16(), serde_json::from_slice::<serde_json::Value>(&bytes).unwrap_or_default())
        }
    };
    assert_eq!(put("fair", json!({"queue_key": "a", "max_starts": -1})).await.0, 400);
    assert_eq!(put("fair", json!({"queue_key": "a", "max_starts": 5, "period": 0})).await.0, 400);
    assert_eq!(put("fair", json!({"queue_key": "a", "period": 2})).await.0, 400, "max_starts is required");
    assert_eq!(put("fair", json!({"max_starts": 5, "extra": 1})).await.0, 400);
    assert_eq!(put("plain", json!({"max_starts": 5})).await.0, 400);
    assert_eq!(put("nope", json!({"max_starts": 5})).await.0, 404);
    assert_eq!(state().await, before, "a refused limit changed nothing");
    assert_eq!(
        put("fair", json!({"max_starts": 7, "period": 0.5})).await,
        (200, json!({"queue_key": null, "max_starts": 7, "period": 0.5}))
    );
    assert_eq!(
        put("fair", json!({"queue_key": "b", "max_starts": null})).await,
        (200, json!({"queue_key": "b", "max_starts": 7, "period": 0.5})),
        "a key without a limit of its own answers the one for every key"
    );
}
