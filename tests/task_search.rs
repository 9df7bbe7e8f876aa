//! Finding tasks by filter and search, and bulk retry / cancel of what a filter selects, through
//! the HTTP router (no socket) against a real database; the database is read after each change.
use crate::common;

use asyncflow::db::api;
use asyncflow::http::router;
use asyncflow::ids::{TypeName, WorkerId};
use asyncflow::task::{NewTask, Report, ReportKind, TaskStatus};
use asyncflow::task_type::TaskTypeUpdate;
use axum::http::StatusCode;
use common::{http_config, request, TestDb};
use serde_json::{json, Value};

async fn call(app: &axum::Router, method: &str, uri: &str, body: Option<Value>) -> (StatusCode, Value) {
    let (status, _, bytes) =
        request(app, method, uri, body.map(|b| b.to_string()), Some("application/json"), None).await;
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

fn ids(page: &Value) -> Vec<String> {
    page["tasks"]
        .as_array()
        .map(|t| t.iter().map(|t| t["id"].as_str().unwrap_or("").to_string()).collect())
        .unwrap_or_default()
}

/// Two types; in `mail`, five tasks failed with "smtp timeout <n>" (user u1 for the even ones), one
/// with "dns error", two pending (one with an idempotency key), one with queue key q-7 in `crawl`.
/// The failed ids in creation order and the keyed pending task's id.
async fn scene(db: &TestDb) -> (Vec<String>, String, String) {
    let c = db.conn().await;
    for name in ["mail", "crawl"] {
        api::register_task_type(&c, &TypeName::new(name).unwrap(), &TaskTypeUpdate::default()).await.unwrap();
    }
    let mut failed = vec![];
    for n in 0..6 {
        let user = if n % 2 == 0 { Some("u1".to_string()) } else { None };
        failed.push(api::create_task(&c, "mail", &NewTask { user_id: user, ..Default::default() }).await.unwrap());
    }
    let worker = WorkerId::new("search-test").unwrap();
    let claimed = api::claim_tasks(&c, "mail", &worker, 6, None).await.unwrap();
    assert_eq!(claimed.len(), 6);
    let reports: Vec<Report> = claimed
        .iter()
        .map(|t| {
            let n = failed.iter().position(|id| *id == t.task_id).unwrap();
            let error = if n == 5 { "dns error".to_string() } else { format!("smtp timeout {n}") };
            Report {
                task_id: t.task_id.clone(),
                claim_seq: t.claim_seq,
                kind: ReportKind::Fail { error, retry: false },
                progress: None,
            }
        })
        .collect();
    assert!(api::report_tasks(&c, &worker, &reports, None).await.unwrap().iter().all(|r| r.accepted));
    api::create_task(&c, "mail", &NewTask::default()).await.unwrap();
    let keyed = NewTask { idempotency_key: Some("order-42".into()), ..Default::default() };
    let keyed = api::create_task(&c, "mail", &keyed).await.unwrap();
    let queued = NewTask { queue_key: Some("q-7".into()), ..Default::default() };
    let queued = api::create_task(&c, "crawl", &queued).await.unwrap();
    (failed.iter().map(|id| id.to_string()).collect(), keyed.to_string(), queued.to_string())
}

#[tokio::test]
async fn tasks_are_filtered_by_every_field_and_found_by_id_key_or_error_text() {
    let db = TestDb::new().await;
    let (failed, keyed, queued) = scene(&db).await;
    let app = router(db.pool.clone(), &http_config(&[], 64 * 1024));
    let list = |q: &str| {
        let uri = format!("/v1/tasks?{q}");
        let app = app.clone();
        async move {
            let (status, body) = call(&app, "GET", &uri, None).await;
            assert_eq!(status, StatusCode::OK, "{uri}: {body}");
            ids(&body)
        }
    };
    // newest first unless asked otherwise
    let newest: Vec<String> = failed.iter().rev().cloned().collect();
    assert_eq!(list("type=mail&status=failed").await, newest);
    assert_eq!(list("type=mail&status=failed&order=oldest").await, failed);
    assert_eq!(list("type=mail&status=failed&order=newest").await, newest);
    assert_eq!(
        list("type=mail&status=failed&user_id=u1").await,
        [failed[4].clone(), failed[2].clone(), failed[0].clone()]
    );
    assert_eq!(list("queue_key=q-7").await, [queued.clone()]);
    assert_eq!(list("type=mail&stage=start&status=pending").await.len(), 2);
    assert_eq!(list(&format!("q={}", failed[3])).await, [failed[3].clone()], "an exact id");
    assert_eq!(
        list(&format!("q={}&status=pending", failed[3])).await,
        Vec::<String>::new(),
        "an id that fails a filter"
    );
    assert_eq!(list("q=order-42").await, [keyed.clone()], "an idempotency key");
    assert_eq!(list("q=SMTP%20timeout").await, newest[1..], "error text, case-insensitive");
    assert_eq!(list("q=dns").await, [failed[5].clone()]);
    assert_eq!(list("q=%25").await, Vec::<String>::new(), "a % in the text is a plain character");
    // paging goes on after `next`, in either order
    let (_, first) = call(&app, "GET", "/v1/tasks?type=mail&status=failed&limit=4", None).await;
    let next = first["next"].as_str().unwrap().to_string();
    assert_eq!((ids(&first), next.clone()), (newest[..4].to_vec(), newest[3].clone()));
    assert_eq!(list(&format!("type=mail&status=failed&after={next}")).await, newest[4..]);
    let (_, first) = call(&app, "GET", "/v1/tasks?type=mail&status=failed&limit=4&order=oldest", None).await;
    let next = first["next"].as_str().unwrap().to_string();
    assert_eq!(list(&format!("type=mail&status=failed&order=oldest&after={next}")).await, failed[4..]);

    let c = db.conn().await;
    let t0 = api::get_task(&c, &failed[0]).await.unwrap().unwrap().created_at;
    let later = (t0 + chrono::Duration::hours(1)).to_rfc3339().replace('+', "%2B");
    let earlier = (t0 - chrono::Duration::hours(1)).to_rfc3339().replace('+', "%2B");
    assert_eq!(list(&format!("type=mail&status=failed&created_after={earlier}")).await, newest);
    assert_eq!(list(&format!("type=mail&created_after={later}")).await, Vec::<String>::new());
    assert_eq!(list(&format!("type=mail&status=failed&created_before={later}")).await, newest);

    // bad input: a clear 400, nothing else
    for q in ["status=done", "created_after=yesterday", "limit=0", "colour=red", "order=asc"] {
        let (status, body) = call(&app, "GET", &format!("/v1/tasks?{q}"), None).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{q}: {body}");
        assert!(body["message"].as_str().is_some_and(|m| !m.is_empty()), "{q}: {body}");
    }
}

#[tokio::test]
async fn bulk_retry_counts_first_then_retries_only_what_the_filter_selects_in_bounded_calls() {
    let db = TestDb::new().await;
    let (failed, _, _) = scene(&db).await;
    let app = router(db.pool.clone(), &http_config(&[], 64 * 1024));
    let c = db.conn().await;
    let statuses = |ids: Vec<String>| {
        let c = &c;
        async move {
            let mut out = vec![];
            for id in ids {
                out.push(api::get_task(c, &id).await.unwrap().unwrap().status);
            }
            out
        }
    };
    let filter = json!({"type": "mail", "q": "smtp timeout"});

    let (status, dry) =
        call(&app, "POST", "/v1/tasks/bulk-retry", Some(json!({"filter": filter, "dry_run": true}))).await;
    assert_eq!(status, StatusCode::OK, "{dry}");
    assert_eq!(dry, json!({"matched": 5, "changed": 0, "more": false}));
    assert!(statuses(failed.clone()).await.iter().all(|s| *s == TaskStatus::Failed), "a dry run changes nothing");

    // two per call: the answer says more remain until none do
    let (_, one) = call(&app, "POST", "/v1/tasks/bulk-retry", Some(json!({"filter": filter, "limit": 2}))).await;
    assert_eq!(one, json!({"matched": 2, "changed": 2, "more": true}));
    assert_eq!(
        statuses(failed.clone()).await,
        [
            TaskStatus::Pending,
            TaskStatus::Pending,
            TaskStatus::Failed,
            TaskStatus::Failed,
            TaskStatus::Failed,
            TaskStatus::Failed
        ]
    );
    let (_, two) = call(&app, "POST", "/v1/tasks/bulk-retry", Some(json!({"filter": filter}))).await;
    assert_eq!(two, json!({"matched": 3, "changed": 3, "more": false}));
    let after = statuses(failed.clone()).await;
    assert_eq!(after[..5], [TaskStatus::Pending; 5]);
    assert_eq!(after[5], TaskStatus::Failed, "the dns error did not match");
    let log = api::get_task(&c, &failed[0]).await.unwrap().unwrap().schedule_log;
    assert_eq!(log.last().and_then(|e| e.event.as_deref()), Some("retried by hand"));

    // bulk cancel of the pending ones of user u1
    let cancel = json!({"filter": {"type": "mail", "status": "pending", "user_id": "u1"}});
    let (_, dry) =
        call(&app, "POST", "/v1/tasks/bulk-cancel", Some(json!({"filter": cancel["filter"], "dry_run": true}))).await;
    assert_eq!(dry["matched"], 3, "{dry}");
    let (_, done) = call(&app, "POST", "/v1/tasks/bulk-cancel", Some(cancel)).await;
    assert_eq!(done, json!({"matched": 3, "changed": 3, "more": false}));
    let after = statuses(failed.clone()).await;
    assert_eq!(
        after,
        [
            TaskStatus::Cancelled,
            TaskStatus::Pending,
            TaskStatus::Cancelled,
            TaskStatus::Pending,
            TaskStatus::Cancelled,
            TaskStatus::Failed
        ]
    );

    // bad input changes nothing
    for body in [
        json!({"filter": {"status": "nope"}}),
        json!({"filter": {"colour": "red"}}),
        json!({"filter": {}, "limit": 1001}),
        json!({"filter": {}, "limit": 0}),
        json!({"dry_run": "yes"}),
    ] {
        let (status, answer) = call(&app, "POST", "/v1/tasks/bulk-retry", Some(body.clone())).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {answer}");
    }
    assert_eq!(statuses(failed.clone()).await, after, "nothing changed by the refused calls");
}

#[tokio::test]
async fn pages_without_a_type_cross_types_in_name_order_and_shards_newest_or_oldest_first() {
    let db = TestDb::new().await;
    let c = db.conn().await;
    // registered out of name order; shards of 10 tasks (the least), rolled as they fill
    let settings = TaskTypeUpdate { shard_max_rows: Some(10), ..Default::default() };
    for name in ["zeta", "alpha", "mid"] {
        api::register_task_type(&c, &TypeName::new(name).unwrap(), &settings).await.unwrap();
    }
    let mut created = vec![];
    for round in 0..3 {
        for name in ["zeta", "alpha", "mid"] {
            for _ in 0..10 {
                let id = api::create_task(&c, name, &NewTask::default()).await.unwrap();
                created.push(id);
            }
            assert!(api::roll_shard(&c, name, None).await.unwrap().is_some(), "{name}: round {round} rolled");
        }
    }
    // in `mid` and `zeta`, one task of each failed with an error to search for
    let worker = WorkerId::new("search-test").unwrap();
    let mut failed = vec![];
    for name in ["mid", "zeta"] {
        let claimed = api::claim_tasks(&c, name, &worker, 1, None).await.unwrap();
        let report = Report {
            task_id: claimed[0].task_id.clone(),
            claim_seq: claimed[0].claim_seq,
            kind: ReportKind::Fail { error: format!("quota exceeded in {name}"), retry: false },
            progress: None,
        };
        assert!(api::report_tasks(&c, &worker, &[report], None).await.unwrap()[0].accepted);
        failed.push(claimed[0].task_id.to_string());
    }
    created.sort_by(|a, b| (a.task_type(), a.number()).cmp(&(b.task_type(), b.number())));
    let oldest: Vec<String> = created.iter().map(|id| id.to_string()).collect();
    created.sort_by(|a, b| (a.task_type(), b.number()).cmp(&(b.task_type(), a.number())));
    let newest: Vec<String> = created.into_iter().map(|id| id.into_string()).collect();
    assert_eq!(newest.len(), 90);

    let app = router(db.pool.clone(), &http_config(&[], 64 * 1024));
    // every page of 7, no type given: the types by name, each type's tasks by id across its shards
    for (order, expected) in [("", &newest), ("&order=newest", &newest), ("&order=oldest", &oldest)] {
        let mut seen = vec![];
        let mut after: Option<String> = None;
        for _ in 0..20 {
            let uri = match &after {
                Some(a) => format!("/v1/tasks?limit=7{order}&after={a}"),
                None => format!("/v1/tasks?limit=7{order}"),
            };
            let (status, page) = call(&app, "GET", &uri, None).await;
            assert_eq!(status, StatusCode::OK, "{uri}: {page}");
            seen.extend(ids(&page));
            match page["next"].as_str() {
                Some(next) => after = Some(next.to_string()),
                None => break,
            }
        }
        assert_eq!(&seen, expected, "all pages{order}: types by name, each type's ids in that order");
    }

    let (_, page) = call(&app, "GET", "/v1/tasks?status=failed", None).await;
    assert_eq!(ids(&page), failed, "a status across types");
    let (_, page) = call(&app, "GET", "/v1/tasks?q=QUOTA%20exceeded", None).await;
    assert_eq!(ids(&page), failed, "error text across types");
    let (_, page) = call(&app, "GET", &format!("/v1/tasks?status=failed&after={}", failed[0]), None).await;
    assert_eq!(ids(&page), failed[1..], "a status after a task of another type");
}

/// Scans, in this transaction, of the shard indexes under `tasks_<type>$failed_cancelled`.
async fn failed_index_scans(c: &tokio_postgres::Transaction<'_>, task_type: &str) -> i64 {
    let parent = format!("asyncflow.\"tasks_{task_type}$failed_cancelled\"");
    c.query_one(
        "select coalesce(sum(pg_stat_get_xact_numscans(i.inhrelid)), 0)::bigint from pg_catalog.pg_inherits i \
         where i.inhparent = pg_catalog.to_regclass($1)",
        &[&parent],
    )
    .await
    .unwrap()
    .get(0)
}

#[tokio::test]
async fn failed_and_cancelled_tasks_are_found_through_their_own_index_even_after_many_calls() {
    let db = TestDb::new().await;
    let c = db.conn().await;
    api::register_task_type(&c, &TypeName::new("relay").unwrap(), &TaskTypeUpdate::default()).await.unwrap();
    let mut ids = vec![];
    for _ in 0..30 {
        ids.push(api::create_task(&c, "relay", &NewTask::default()).await.unwrap().to_string());
    }
    let worker = WorkerId::new("search-test").unwrap();
    let claimed = api::claim_tasks(&c, "relay", &worker, 2, None).await.unwrap();
    let reports: Vec<Report> = claimed
        .iter()
        .map(|t| Report {
            task_id: t.task_id.clone(),
            claim_seq: t.claim_seq,
            kind: ReportKind::Fail { error: "refused".into(), retry: false },
            progress: None,
        })
        .collect();
    assert!(api::report_tasks(&c, &worker, &reports, None).await.unwrap().iter().all(|r| r.accepted));
    assert!(api::cancel_task(&c, &ids[29]).await.unwrap());
    let mut failed: Vec<_> = claimed.iter().map(|t| t.task_id.clone()).collect();
    // newest first
    failed.sort_by_key(|id| std::cmp::Reverse(id.number()));
    let failed: Vec<String> = failed.into_iter().map(|id| id.into_string()).collect();

    let mut raw = db.raw().await;
    let tx = raw.transaction().await.unwrap();
    let find = |filter: Value| {
        let tx = &tx;
        async move {
            let rows = tx.query("select asyncflow.find_tasks($1, null, 50) as t", &[&filter]).await.unwrap();
            rows.iter().map(|r| r.get::<_, Value>("t")["id"].as_str().unwrap_or("").to_string()).collect::<Vec<_>>()
        }
    };
    // more calls than the plan cache needs to settle on one plan for every value
    for _ in 0..8 {
        assert_eq!(find(json!({})).await.len(), 30);
    }
    assert_eq!(failed_index_scans(&tx, "relay").await, 0);
    assert_eq!(find(json!({"status": "failed"})).await, failed);
    let after_failed = failed_index_scans(&tx, "relay").await;
    assert!(after_failed > 0, "the failed tasks were read through their index");
    assert_eq!(find(json!({"status": "cancelled"})).await, [ids[29].clone()]);
    assert!(failed_index_scans(&tx, "relay").await > after_failed, "and the cancelled ones");
    assert_eq!(find(json!({"status": "pending"})).await.len(), 27, "other statuses are read as before");
}
