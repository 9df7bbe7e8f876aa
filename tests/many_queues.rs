//! Many queues within a type: a task's queue_key, claims by turns of key in a type with
//! fair_queues, the per-key limit queue_concurrency, and the refusals of bad keys and settings.
use crate::common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use asyncflow::db::api;
use asyncflow::function::{StageCall, StageReply};
use asyncflow::task::{ClaimedTask, NewTask, QueueLimit, Report, ReportKind, TaskStatus};
use asyncflow::task_type::TaskTypeUpdate;
use asyncflow::worker::{Worker, WorkerConfig};
use asyncflow::{TypeName, WorkerId};
use common::{sqlstate, wait_until, TestDb};
use serde_json::json;
use tokio_util::sync::CancellationToken;

async fn register(db: &TestDb, name: &str, settings: TaskTypeUpdate) {
    api::register_task_type(&db.conn().await, &TypeName::new(name).unwrap(), &settings).await.unwrap();
}

fn fair(limit: i32, per_key: Option<i32>) -> TaskTypeUpdate {
    TaskTypeUpdate {
        fair_queues: Some(true),
        queue_concurrency: Some(per_key),
        schedule_limit: Some(limit),
        ..Default::default()
    }
}

fn keyed(key: &str, n: usize) -> Vec<NewTask> {
    (0..n)
        .map(|i| NewTask { context: Some(json!({"n": i})), queue_key: Some(key.into()), ..Default::default() })
        .collect()
}

/// The queue keys of claimed tasks, in claim order.
async fn keys_of(db: &TestDb, tasks: &[ClaimedTask]) -> Vec<String> {
    let c = db.conn().await;
    let mut keys = Vec::new();
    for t in tasks {
        let task = api::get_task(&c, t.task_id.as_str()).await.unwrap().unwrap();
        keys.push(task.queue_key.unwrap_or_default());
    }
    keys
}

async fn claim(db: &TestDb, ty: &str, limit: i32) -> Vec<ClaimedTask> {
    api::claim_tasks(&db.conn().await, ty, &WorkerId::new("claimer").unwrap(), limit, None).await.unwrap()
}

#[tokio::test]
async fn a_key_with_a_backlog_does_not_hold_back_the_other_keys() {
    let db = TestDb::new().await;
    let c = db.conn().await;
    // The same tasks in a type without fair_queues: the backlog, older, goes first.
    for ty in ["plain", "crawl"] {
        register(
            &db,
            ty,
            if ty == "crawl" {
                fair(4, None)
            } else {
                TaskTypeUpdate { schedule_limit: Some(4), ..Default::default() }
            },
        )
        .await;
        api::create_tasks(&c, ty, &keyed("big.example", 100)).await.unwrap();
        for site in ["a.example", "b.example", "c.example", "d.example", "e.example", "f.example"] {
            api::create_tasks(&c, ty, &keyed(site, 1)).await.unwrap();
        }
    }
    let mut plain = Vec::new();
    let mut crawl = Vec::new();
    for _ in 0..2 {
        plain.extend(keys_of(&db, &claim(&db, "plain", 4).await).await);
        crawl.extend(keys_of(&db, &claim(&db, "crawl", 4).await).await);
    }
    assert!(plain.iter().all(|k| k == "big.example"), "by order_time the backlog comes first: {plain:?}");
    // By turns: every key has had one task by the end of the second claim, the backlog no more
    // than one per round.
    let mut served: Vec<&str> = crawl.iter().map(String::as_str).collect();
    served.sort();
    assert_eq!(
        served,
        ["a.example", "b.example", "big.example", "big.example", "c.example", "d.example", "e.example", "f.example"],
        "{crawl:?}"
    );
    // The next claim starts where the last stopped: only the backlog is left, and it fills the batch.
    assert_eq!(keys_of(&db, &claim(&db, "crawl", 4).await).await, vec!["big.example"; 4]);
}

#[tokio::test]
async fn tasks_without_a_key_are_one_queue_and_within_a_key_priority_goes_first() {
    let db = TestDb::new().await;
    let c = db.conn().await;
    register(&db, "feed", fair(10, None)).await;
    api::create_tasks(&c, "feed", &vec![NewTask::default(); 5]).await.unwrap();
    let mut low = keyed("tenant-1", 3);
    low.push(NewTask { priority: Some(3600), queue_key: Some("tenant-1".into()), ..Default::default() });
    let urgent = api::create_tasks(&c, "feed", &low).await.unwrap().pop().unwrap();
    // One round: one of the keyless queue, one of tenant-1 (its urgent task); then the rounds
    // go on until the batch is full.
    let first = claim(&db, "feed", 2).await;
    assert_eq!(keys_of(&db, &first).await, vec!["", "tenant-1"]);
    assert_eq!(first[1].task_id, urgent);
    let rest = claim(&db, "feed", 10).await;
    let mut keys = keys_of(&db, &rest).await;
    keys.sort();
    assert_eq!(keys, ["", "", "", "", "tenant-1", "tenant-1", "tenant-1"]);
    assert!(claim(&db, "feed", 10).await.is_empty());
}

#[tokio::test]
async fn queue_concurrency_caps_each_key_across_concurrent_claimers() {
    let db = TestDb::new().await;
    let c = db.conn().await;
    register(&db, "tenant", fair(5, Some(2))).await;
    for key in ["a", "b", "c"] {
        api::create_tasks(&c, "tenant", &keyed(key, 10)).await.unwrap();
    }
    // Eight claimers at once, each on its own connection, each claiming until it gets nothing.
    let mut claimers = Vec::new();
    for n in 0..8 {
        let pool = db.pool.clone();
        claimers.push(tokio::spawn(async move {
            let c = pool.get().await.unwrap();
            let w = WorkerId::new(&format!("w{n}")).unwrap();
            let mut got = Vec::new();
            loop {
                let batch = api::claim_tasks(&c, "tenant", &w, 5, None).await.unwrap();
                if batch.is_empty() {
                    return got;
                }
                got.extend(batch);
            }
        }));
    }
    let mut claimed = Vec::new();
    for h in claimers {
        claimed.extend(h.await.unwrap());
    }
    let running = |c: deadpool_postgres::Object| async move {
        let rows = c
            .query(
                "select queue_key, count(*) from asyncflow.tasks where task_type = 'tenant' and status = 'running' \
                 group by queue_key order by queue_key",
                &[],
            )
            .await
            .unwrap();
        rows.iter().map(|r| (r.get::<_, String>(0), r.get::<_, i64>(1))).collect::<Vec<_>>()
    };
    assert_eq!(running(db.conn().await).await, [("a".into(), 2), ("b".into(), 2), ("c".into(), 2)]);
    assert_eq!(claimed.len(), 6);
    // One of key a ends: one more of a, and only of a, may run.
    succeed(&db, &first_of_key(&db, &claimed, "a").await).await;
    assert_eq!(keys_of(&db, &claim(&db, "tenant", 5).await).await, vec!["a"]);
    assert!(claim(&db, "tenant", 5).await.is_empty());
}

async fn first_of_key(db: &TestDb, tasks: &[ClaimedTask], key: &str) -> ClaimedTask {
    for (t, k) in tasks.iter().zip(keys_of(db, tasks).await) {
        if k == key {
            return t.clone();
        }
    }
    panic!("no task of key {key} among {} claimed", tasks.len());
}

/// Reports the claimed task succeeded, as the worker that holds it; the report must be taken.
async fn succeed(db: &TestDb, task: &ClaimedTask) {
    let c = db.conn().await;
    let owner = api::get_task(&c, task.task_id.as_str()).await.unwrap().unwrap().owner.unwrap();
    let report = Report {
        task_id: task.task_id.clone(),
        claim_seq: task.claim_seq,
        kind: ReportKind::Succeed { result: json!({}) },
        progress: None,
    };
    assert!(api::report_tasks(&c, &WorkerId::new(&owner).unwrap(), &[report], None).await.unwrap()[0].accepted);
}

/// The names of the indexes on the tasks of type `ty`, in order.
async fn index_names(db: &TestDb, ty: &str) -> Vec<String> {
    let rows = db
        .conn()
        .await
        .query(
            "select indexname::text from pg_indexes where schemaname = 'asyncflow' and tablename = $1 order by 1",
            &[&format!("tasks_{ty}")],
        )
        .await
        .unwrap();
    rows.iter().map(|r| r.get::<_, String>(0)).collect()
}

/// Per queue key: calls in flight now, and the most seen at once.
type InFlight = (HashMap<String, usize>, HashMap<String, usize>);

#[tokio::test]
async fn the_worker_keeps_each_key_under_its_limit_and_runs_every_task_to_the_end() {
    let db = TestDb::new().await;
    let ty = TypeName::new("site").unwrap();
    // In flight per key, and the most seen at once.
    let state: Arc<Mutex<InFlight>> = Arc::default();
    let seen = state.clone();
    let config = WorkerConfig {
        worker_id: WorkerId::new("fair-worker").unwrap(),
        concurrency: 16,
        shutdown_grace: Duration::from_millis(300),
        ..WorkerConfig::default()
    };
    let stop = CancellationToken::new();
    let worker = Worker::new(db.pool.clone(), db.url.clone(), config).register(
        ty,
        move |call: StageCall| {
            let state = seen.clone();
            async move {
                let key = call.context["key"].as_str().unwrap_or_default().to_string();
                {
                    let mut s = state.lock().unwrap();
                    let now = {
                        let n = s.0.entry(key.clone()).or_default();
                        *n += 1;
                        *n
                    };
                    let most = s.1.entry(key.clone()).or_default();
                    *most = (*most).max(now);
                }
                tokio::time::sleep(Duration::from_millis(15)).await;
                *state.lock().unwrap().0.entry(key).or_default() -= 1;
                StageReply::Succeeded { result: json!({}) }
            }
        },
        None,
        TaskTypeUpdate { schedule_interval: Some(0.2), ..fair(16, Some(2)) },
    );
    let running = tokio::spawn(worker.run(stop.clone()));
    wait_until(Duration::from_secs(10), "type registered", || async {
        !api::list_task_types(&db.conn().await).await.unwrap().is_empty()
    })
    .await;
    let c = db.conn().await;
    let mut ids = Vec::new();
    for key in ["k1", "k2", "k3"] {
        let tasks: Vec<NewTask> = (0..12)
            .map(|_| NewTask { context: Some(json!({"key": key})), queue_key: Some(key.into()), ..Default::default() })
            .collect();
        ids.extend(api::create_tasks(&c, "site", &tasks).await.unwrap());
    }
    wait_until(Duration::from_secs(30), "every task succeeded", || async {
        let counts = api::count_by_status_of(&db.conn().await, &ids).await.unwrap();
        counts.iter().any(|(s, n)| *s == TaskStatus::Succeeded && *n == ids.len() as i64)
    })
    .await;
    stop.cancel();
    running.await.unwrap().unwrap();
    let most = state.lock().unwrap().1.clone();
    assert_eq!(most.len(), 3, "{most:?}");
    assert!(most.values().all(|&n| n <= 2), "a key ran more than 2 at once: {most:?}");
    assert!(most.values().any(|&n| n == 2), "the limit, not the worker, was the bound: {most:?}");
}

#[tokio::test]
async fn bad_queue_keys_and_settings_are_refused_and_change_nothing() {
    let db = TestDb::new().await;
    register(&db, "tenant", fair(5, None)).await;
    let c = db.raw().await;
    let long = "k".repeat(256);
    let cases: Vec<(&str, Vec<&(dyn tokio_postgres::types::ToSql + Sync)>, &str)> = vec![
        ("select asyncflow.create_task('tenant', queue_key => '')", vec![], "queue_key must be a string of 1 to 255"),
        ("select asyncflow.create_task('tenant', queue_key => $1)", vec![&long], "queue_key must be a string of 1 to 255"),
        (
            "select asyncflow.create_task('tenant', queue_key => 'k', idempotency_key => 'i', context => '{}', user_id => $1)",
            vec![&long],
            "user_id",
        ),
        ("select asyncflow.create_tasks('tenant', '[{}, {\"queue_key\": 5}]')", vec![], "tasks[1]: queue_key must be"),
        ("select asyncflow.create_tasks('tenant', '[{\"queue_key\": \"\"}]')", vec![], "tasks[0]: queue_key must be"),
        ("select asyncflow.register_task_type('tenant', '{\"fair_queues\": \"yes\"}')", vec![], "fair_queues must be true or false"),
        ("select asyncflow.register_task_type('tenant', '{\"queue_concurrency\": 0}')", vec![], "queue_concurrency must be an integer"),
    ];
    for (sql, params, why) in cases {
        let e = c.query(sql, &params).await.expect_err(sql);
        assert_eq!(sqlstate(&e), "AF006", "{sql}: {e}");
        let message = e.as_db_error().map(|d| d.message().to_string()).unwrap_or_default();
        assert!(message.contains(why), "{sql}: {message}");
    }
    let n: i64 = c.query_one("select count(*) from asyncflow.tasks", &[]).await.unwrap().get(0);
    assert_eq!(n, 0);
    let t = api::list_task_types(&db.conn().await).await.unwrap().pop().unwrap();
    assert!(t.fair_queues);
    assert_eq!(t.queue_concurrency, None);
    let e = c
        .query(
            "select asyncflow.create_tasks('tenant', jsonb_build_array(jsonb_build_object('queue_key', $1::text)))",
            &[&long],
        )
        .await
        .unwrap_err();
    assert!(e.as_db_error().is_some_and(|d| d.message().contains("tasks[0]: queue_key must be")), "{e}");
    // A key is any text of 1 to 255 characters, kept as given; with an idempotency key too.
    let longest = "é".repeat(255);
    let kept = api::create_tasks(
        &db.conn().await,
        "tenant",
        &[NewTask { queue_key: Some(longest.clone()), idempotency_key: Some("once".into()), ..Default::default() }],
    )
    .await
    .unwrap();
    assert_eq!(
        api::get_task(&db.conn().await, kept[0].as_str()).await.unwrap().unwrap().queue_key,
        Some(longest.clone())
    );
    let again = api::create_task(
        &db.conn().await,
        "tenant",
        &NewTask { queue_key: Some("k".into()), idempotency_key: Some("twice".into()), ..Default::default() },
    )
    .await
    .unwrap();
    assert_eq!(api::get_task(&db.conn().await, again.as_str()).await.unwrap().unwrap().queue_key.as_deref(), Some("k"));
    let mut both = keys_of(&db, &claim(&db, "tenant", 5).await).await;
    both.sort();
    let mut expected = vec!["k".to_string(), longest];
    expected.sort();
    assert_eq!(both, expected);
    let odd = "ü/ 'x'; drop table y --";
    let id =
        api::create_task(&db.conn().await, "tenant", &NewTask { queue_key: Some(odd.into()), ..Default::default() })
            .await
            .unwrap();
    assert_eq!(api::get_task(&db.conn().await, id.as_str()).await.unwrap().unwrap().queue_key.as_deref(), Some(odd));
    assert_eq!(keys_of(&db, &claim(&db, "tenant", 5).await).await, vec![odd]);
}

#[tokio::test]
async fn fair_queues_builds_its_indexes_when_turned_on_and_drops_them_when_turned_off() {
    let db = TestDb::new().await;
    let c = db.conn().await;
    register(&db, "mail", TaskTypeUpdate::default()).await;
    // Keys given before the setting is on are kept, and count once it is.
    api::create_tasks(&c, "mail", &keyed("x", 3)).await.unwrap();
    api::create_tasks(&c, "mail", &keyed("y", 1)).await.unwrap();
    assert_eq!(
        index_names(&db, "mail").await,
        [
            "tasks_mail$failed_cancelled",
            "tasks_mail_parent_id_idx",
            "tasks_mail_pkey",
            "tasks_mail_ready",
            "tasks_mail_running"
        ]
    );
    register(&db, "mail", fair(2, None)).await;
    assert_eq!(
        index_names(&db, "mail").await,
        [
            "tasks_mail$failed_cancelled",
            "tasks_mail$key_ready",
            "tasks_mail$key_running",
            "tasks_mail_parent_id_idx",
            "tasks_mail_pkey",
            "tasks_mail_ready",
            "tasks_mail_running"
        ]
    );
    assert_eq!(keys_of(&db, &claim(&db, "mail", 2).await).await, ["x", "y"]);
    // Named again (a worker's start): nothing to build, the same indexes stay.
    let oids = || async {
        let rows = db
            .conn()
            .await
            .query(
                "select indexrelid::oid from pg_index where indrelid = 'asyncflow.tasks_mail'::regclass order by 1",
                &[],
            )
            .await
            .unwrap();
        rows.iter().map(|r| r.get::<_, u32>(0)).collect::<Vec<_>>()
    };
    let before = oids().await;
    register(&db, "mail", TaskTypeUpdate { fair_queues: Some(true), ..Default::default() }).await;
    assert_eq!(oids().await, before);
    register(&db, "mail", TaskTypeUpdate { fair_queues: Some(false), ..Default::default() }).await;
    assert_eq!(
        index_names(&db, "mail").await,
        [
            "tasks_mail$failed_cancelled",
            "tasks_mail_parent_id_idx",
            "tasks_mail_pkey",
            "tasks_mail_ready",
            "tasks_mail_running"
        ]
    );
    assert_eq!(keys_of(&db, &claim(&db, "mail", 2).await).await, ["x", "x"]);
}

#[tokio::test]
async fn the_key_indexes_never_take_the_names_of_another_types_indexes() {
    let db = TestDb::new().await;
    let c = db.conn().await;
    // type x_key's own indexes are tasks_x_key_ready and tasks_x_key_running
    register(&db, "x_key", TaskTypeUpdate::default()).await;
    register(&db, "x", fair(10, None)).await;
    assert_eq!(
        index_names(&db, "x").await,
        [
            "tasks_x$failed_cancelled",
            "tasks_x$key_ready",
            "tasks_x$key_running",
            "tasks_x_parent_id_idx",
            "tasks_x_pkey",
            "tasks_x_ready",
            "tasks_x_running"
        ]
    );
    register(&db, "x", TaskTypeUpdate { fair_queues: Some(false), ..Default::default() }).await;
    assert_eq!(
        index_names(&db, "x_key").await,
        [
            "tasks_x_key$failed_cancelled",
            "tasks_x_key_parent_id_idx",
            "tasks_x_key_pkey",
            "tasks_x_key_ready",
            "tasks_x_key_running"
        ]
    );
    // and the other way round: a fair type first, then the type whose names would have been its
    register(&db, "y", fair(10, None)).await;
    register(&db, "y_key", TaskTypeUpdate::default()).await;
    api::create_tasks(&c, "y_key", &keyed("k", 2)).await.unwrap();
    assert_eq!(claim(&db, "y_key", 10).await.len(), 2);
}

#[tokio::test]
async fn keys_with_nothing_due_or_no_room_do_not_hide_a_ready_key_from_the_claim() {
    let db = TestDb::new().await;
    let c = db.conn().await;
    register(&db, "later", fair(1, None)).await;
    register(&db, "capped", fair(1, Some(1))).await;
    // 300 keys whose only task is due in an hour, and one key with a task ready now, last in
    // key order
    let delayed: Vec<NewTask> = (0..300)
        .map(|n| NewTask {
            queue_key: Some(format!("k{n:03}")),
            run_at: Some(chrono::Utc::now() + chrono::Duration::hours(1)),
            ..Default::default()
        })
        .collect();
    api::create_tasks(&c, "later", &delayed).await.unwrap();
    api::create_tasks(&c, "later", &keyed("z-ready", 1)).await.unwrap();
    assert_eq!(keys_of(&db, &claim(&db, "later", 1).await).await, ["z-ready"]);
    // 300 keys, each with one running task (its cap) and one more waiting; one of them ends
    let two_each: Vec<NewTask> = (0..300).flat_map(|n| keyed(&format!("k{n:03}"), 2)).collect();
    api::create_tasks(&c, "capped", &two_each).await.unwrap();
    let mut running = Vec::new();
    for _ in 0..300 {
        running.extend(claim(&db, "capped", 1).await);
    }
    assert_eq!(running.len(), 300);
    assert!(claim(&db, "capped", 1).await.is_empty(), "every key is at its cap");
    succeed(&db, &first_of_key(&db, &running, "k150").await).await;
    assert_eq!(keys_of(&db, &claim(&db, "capped", 1).await).await, ["k150"]);
}

#[tokio::test]
async fn a_claim_over_many_capped_keys_holds_one_advisory_lock() {
    let db = TestDb::new().await;
    register(&db, "wide", fair(500, Some(1))).await;
    let tasks: Vec<NewTask> = (0..400).flat_map(|n| keyed(&format!("k{n:03}"), 1)).collect();
    api::create_tasks(&db.conn().await, "wide", &tasks).await.unwrap();
    let mut c = db.raw().await;
    let tx = c.transaction().await.unwrap();
    let got = tx.query("select * from asyncflow.type_claim__wide('w', 500)", &[]).await.unwrap();
    assert_eq!(got.len(), 400);
    let locks: i64 = tx
        .query_one("select count(*) from pg_locks where locktype = 'advisory' and pid = pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(locks, 1);
    tx.commit().await.unwrap();
}

#[tokio::test]
async fn a_key_of_its_own_limit_holds_or_widens_that_key_only_and_the_queues_list_shows_it() {
    let db = TestDb::new().await;
    let c = db.conn().await;
    register(&db, "tenant", fair(20, Some(1))).await;
    for key in ["held", "wide", "plain"] {
        api::create_tasks(&c, "tenant", &keyed(key, 4)).await.unwrap();
    }
    let limit = |key: &str, n: Option<i32>| QueueLimit { queue_key: key.into(), concurrency: n };
    assert_eq!(api::set_queue_limit(&c, "tenant", &limit("held", Some(0))).await.unwrap(), Some(0));
    assert_eq!(api::set_queue_limit(&c, "tenant", &limit("wide", Some(3))).await.unwrap(), Some(3));
    let mut keys = keys_of(&db, &claim(&db, "tenant", 20).await).await;
    keys.sort();
    assert_eq!(keys, ["plain", "wide", "wide", "wide"]);
    let queues = api::queue_keys(&c, "tenant", None, 100).await.unwrap();
    let row = |k: &str| queues.iter().find(|q| q.queue_key == k).cloned().unwrap();
    assert_eq!(queues.iter().map(|q| q.queue_key.as_str()).collect::<Vec<_>>(), ["held", "plain", "wide"]);
    assert_eq!((row("held").ready, row("held").running, row("held").concurrency), (4, 0, Some(0)));
    assert_eq!((row("plain").ready, row("plain").running, row("plain").concurrency), (3, 1, Some(1)));
    assert_eq!((row("wide").ready, row("wide").running, row("wide").concurrency), (1, 3, Some(3)));
    assert!(row("held").oldest_ready_age >= 0.0);
    // pages
    let page = api::queue_keys(&c, "tenant", Some("held"), 1).await.unwrap();
    assert_eq!(page.iter().map(|q| q.queue_key.as_str()).collect::<Vec<_>>(), ["plain"]);
    // the hold removed: the type's limit applies again
    assert_eq!(api::set_queue_limit(&c, "tenant", &limit("held", None)).await.unwrap(), Some(1));
    assert_eq!(keys_of(&db, &claim(&db, "tenant", 20).await).await, ["held"]);
    // bad input: a clear error, nothing changed
    let raw = db.raw().await;
    for (sql, why) in [
        ("select asyncflow.set_queue_limit('tenant', 'k', -1)", "concurrency must be an integer between 0 and 1000000"),
        ("select asyncflow.set_queue_limit('tenant', null, 1)", "queue_key must be a string of at most 255"),
        ("select asyncflow.set_queue_limit('nope', 'k', 1)", "unknown task type"),
        ("select * from asyncflow.queue_keys('tenant', p_limit => 0)", "limit must be between 1 and 1000"),
    ] {
        let e = raw.query(sql, &[]).await.expect_err(sql);
        let message = e.as_db_error().map(|d| d.message().to_string()).unwrap_or_default();
        assert!(message.contains(why), "{sql}: {message}");
    }
    register(&db, "plainly", TaskTypeUpdate::default()).await;
    let e = api::queue_keys(&c, "plainly", None, 10).await.unwrap_err();
    assert!(e.to_string().contains("fair_queues"), "{e}");
    // no claim of a type without fair_queues would read a key's limit
    let e = api::set_queue_limit(&c, "plainly", &limit("k", Some(1))).await.unwrap_err();
    assert!(e.to_string().contains("fair_queues"), "{e}");
    // over HTTP and in the library, a limit left out is refused, not read as a removal
    let e = serde_json::from_value::<QueueLimit>(json!({"queue_key": "held"})).unwrap_err();
    assert!(e.to_string().contains("missing field `concurrency`"), "{e}");
    assert_eq!(
        serde_json::from_value::<QueueLimit>(json!({"queue_key": "held", "concurrency": null})).unwrap(),
        limit("held", None)
    );
    let n: i64 = raw.query_one("select count(*) from asyncflow.queue_limits", &[]).await.unwrap().get(0);
    assert_eq!(n, 1, "only wide's own limit is left");
}

#[tokio::test]
async fn a_task_whose_worker_vanished_is_rescued_and_claimed_again_under_its_key_and_limit() {
    let db = TestDb::new().await;
    let c = db.conn().await;
    register(
        &db,
        "crawl",
        TaskTypeUpdate { max_processing_time: Some(30), max_retry_interval: Some(-1), ..fair(10, Some(1)) },
    )
    .await;
    let ids = api::create_tasks(&c, "crawl", &keyed("site", 2)).await.unwrap();
    let first = claim(&db, "crawl", 10).await;
    assert_eq!(first.len(), 1, "one at a time for the key");
    assert_eq!(first[0].task_id, ids[0]);
    // the worker vanishes: its lease runs out, the rescuer queues the task again (after its
    // 1 s back-off), and the key's one slot is free again for it
    let later = chrono::Utc::now() + chrono::Duration::seconds(31);
    let rescued = api::rescue_expired(&c, Some(later), 100, &[]).await.unwrap();
    assert_eq!(rescued.len(), 1);
    let due = later + chrono::Duration::seconds(2);
    let again = api::claim_tasks(&c, "crawl", &WorkerId::new("second").unwrap(), 10, Some(due)).await.unwrap();
    assert_eq!(again.len(), 1, "still one at a time: {again:?}");
    let task = api::get_task(&c, again[0].task_id.as_str()).await.unwrap().unwrap();
    assert_eq!(task.queue_key.as_deref(), Some("site"));
    assert_eq!(task.status, TaskStatus::Running);
}

#[tokio::test]
async fn an_idle_worker_with_held_keys_backs_off_instead_of_claiming_on_and_on() {
    // Four types whose one due task is in a key held at 0: every claim would find nothing. Their
    // producers must not claim on and on, nor wake each other: a claim that finds nothing hands
    // its slots back, and that must not count as room.
    let db = TestDb::new().await;
    db.raw().await.batch_execute(&format!("alter database {} set track_functions = 'pl'", db.name)).await.unwrap();
    let c = db.conn().await;
    let types = ["ta", "tb", "tc", "td"];
    let mut worker = Worker::new(
        db.pool.clone(),
        db.url.clone(),
        WorkerConfig {
            worker_id: WorkerId::new("idle").unwrap(),
            shutdown_grace: Duration::from_millis(300),
            ..WorkerConfig::default()
        },
    );
    for t in types {
        register(&db, t, fair(10, None)).await;
        api::set_queue_limit(&c, t, &QueueLimit { queue_key: "k".into(), concurrency: Some(0) }).await.unwrap();
        api::create_tasks(&c, t, &keyed("k", 1)).await.unwrap();
        worker = worker.register(
            TypeName::new(t).unwrap(),
            |_call: StageCall| async move { StageReply::Succeeded { result: json!({}) } },
            None,
            TaskTypeUpdate::default(),
        );
    }
    let stop = CancellationToken::new();
    let running = tokio::spawn(worker.run(stop.clone()));
    tokio::time::sleep(Duration::from_secs(4)).await;
    stop.cancel();
    running.await.unwrap().unwrap();
    // the worker's connections are closed: their function statistics have reached the server
    let raw = db.raw().await;
    let claims = || async {
        raw.execute("select pg_stat_clear_snapshot()", &[]).await.unwrap();
        let rows = raw
            .query(
                "select calls from pg_stat_user_functions where funcname like 'type_claim__t_' order by funcname",
                &[],
            )
            .await
            .unwrap();
        rows.iter().map(|r| r.get::<_, i64>(0)).collect::<Vec<_>>()
    };
    wait_until(Duration::from_secs(10), "the claims' statistics", || async { claims().await.len() == types.len() })
        .await;
    let calls = claims().await;
    // nothing is due where every pending task is in a held key (next_due): no claim at all, or a
    // few while starting; waking each other, they made hundreds
    assert!(calls.iter().all(|&n| n <= 15), "claims per type in 4 s: {calls:?}");
}

/// The keys and `held` flags of a held claim of `ty` (`type_hold__<ty>`), in its order; the
/// hold's transaction is rolled back.
async fn hold_keys(db: &TestDb, ty: &str, limit: i32) -> Vec<(String, bool)> {
    let mut c = db.conn().await;
    let tx = c.transaction().await.unwrap();
    let sql = format!("select queue_key, held from asyncflow.type_hold__{ty}('holder', $1)");
    let rows = tx.query(sql.as_str(), &[&limit]).await.unwrap();
    let held = rows.iter().map(|r| (r.get::<_, Option<String>>(0).unwrap_or_default(), r.get(1))).collect();
    tx.rollback().await.unwrap();
    held
}

/// A type with fair_queues and no per-key limit is claimed as a hold (row locks, no row written
/// until the calls end), by the same turns as its claim: from the key after the cursor, round
/// the end of the keys and back, each key's oldest first; a key with a backlog fills the rest of
/// the batch in the same statement. With a per-key limit (which counts running tasks) the hold
/// claims instead and says so.
#[tokio::test]
async fn a_fair_type_without_key_limits_is_claimed_as_a_hold_by_the_same_turns() {
    let db = TestDb::new().await;
    register(&db, "turns", fair(100, None)).await;
    let c = db.conn().await;
    for (key, n) in [("a", 2), ("b", 6), ("c", 1)] {
        api::create_tasks(&c, "turns", &keyed(key, n)).await.unwrap();
    }
    let keys = |held: &[(String, bool)]| held.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>();
    let held = hold_keys(&db, "turns", 7).await;
    assert!(held.iter().all(|(_, h)| *h), "{held:?}");
    assert_eq!(keys(&held), ["a", "b", "c", "a", "b", "b", "b"]);
    // nothing was written: the tasks are still pending, the cursor where it was
    let depth = api::queue_keys(&c, "turns", None, 10).await.unwrap();
    let ready: i64 = depth.iter().map(|q| q.ready).sum();
    let running: i64 = depth.iter().map(|q| q.running).sum();
    assert_eq!((ready, running), (9, 0));
    // a claim moves the cursor past "a": the next turns start at "b" and wrap to "a"
    let first = claim(&db, "turns", 1).await;
    assert_eq!(keys_of(&db, &first).await, ["a"]);
    let held = hold_keys(&db, "turns", 5).await;
    assert_eq!(keys(&held), ["b", "c", "a", "b", "b"]);
    // a limit per key counts running tasks: claimed, not held
    register(&db, "turns", fair(100, Some(1))).await;
    let held = hold_keys(&db, "turns", 5).await;
    assert!(held.iter().all(|(_, h)| !*h), "{held:?}");
    assert_eq!(keys(&held), ["b", "c"], "a has its one running task");
}
