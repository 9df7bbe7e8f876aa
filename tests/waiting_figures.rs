//! Waiting tasks in the figures: `status_counts`, the dashboard's overview and `asyncflow
//! status`, `GET /metrics`, and the task list's status filter, from the counters every
//! transition keeps.
use crate::common;

use asyncflow::db::api;
use asyncflow::task::ReportKind;
use serde_json::{json, Value};

use common::sql::*;
use common::TestDb;

#[tokio::test]
async fn waiting_tasks_are_counted_per_type_on_the_dashboard_in_metrics_and_by_status() {
    let db = TestDb::new().await;
    let c = db.conn().await;
    register(&**c, "order", json!({})).await;
    let w = worker("w");
    for _ in 0..3 {
        api::create_task(&c, "order", &Default::default()).await.unwrap();
    }
    let claimed = api::claim_tasks(&c, "order", &w, 2, None).await.unwrap();
    assert_eq!(claimed.len(), 2);
    let waits: Vec<_> = claimed
        .iter()
        .enumerate()
        .map(|(n, t)| {
            let kind = ReportKind::Wait {
                stage: "paid".into(),
                event: format!("order:{n}/paid"),
                timeout: 3600.0,
                context: None,
            };
            rep(t.task_id.as_str(), t.claim_seq, kind)
        })
        .collect();
    let reports = api::report_tasks(&c, &w, &waits, None).await.unwrap();
    assert!(reports.iter().all(|r| r.accepted), "{reports:?}");

    // the SQL function, read from the counters
    let row = c
        .query_one("select pending, running, waiting from asyncflow.status_counts() where task_type = 'order'", &[])
        .await
        .unwrap();
    assert_eq!((row.get::<_, i64>(0), row.get::<_, i64>(1), row.get::<_, i64>(2)), (1, 0, 2));

    let app = asyncflow::http::router(db.pool.clone(), &common::http_config(&["tok"], 1 << 20));
    let get = |path: &'static str| {
        let app = app.clone();
        async move {
            let (status, _, body) = common::request(&app, "GET", path, None, None, Some("tok")).await;
            assert_eq!(status, 200, "{path}: {}", String::from_utf8_lossy(&body));
            body
        }
    };
    // the dashboard's overview: per type and in the totals
    let overview: Value = serde_json::from_slice(&get("/v1/dashboard").await).unwrap();
    let order = overview["types"].as_array().unwrap().iter().find(|t| t["type"] == "order").unwrap();
    assert_eq!((order["waiting"].as_i64(), order["ready"].as_i64()), (Some(2), Some(1)), "{order}");
    assert_eq!(overview["totals"]["waiting"], 2);
    // /metrics: a sample per type for the waiting status
    let metrics = String::from_utf8(get("/metrics").await.to_vec()).unwrap();
    assert!(metrics.lines().any(|l| l == r#"asyncflow_tasks{type="order",status="waiting"} 2"#), "{metrics}");
    // the task list's filter takes the status, and a bad one names it among the choices
    let waiting: Value = serde_json::from_slice(&get("/v1/tasks?status=waiting").await).unwrap();
    assert_eq!(waiting["tasks"].as_array().map(Vec::len), Some(2), "{waiting}");
    let (status, _, body) = common::request(&app, "GET", "/v1/tasks?status=asleep", None, None, Some("tok")).await;
    assert_eq!(status, 400);
    assert!(String::from_utf8_lossy(&body).contains("pending, running, waiting, succeeded"), "{body:?}");

    // asyncflow status prints the column
    let out = common::cli::ok(&common::cli::asyncflow(Some(&db.url), &["status"]));
    let header = out.lines().find(|l| l.starts_with("type")).unwrap();
    let line = out.lines().find(|l| l.starts_with("order")).unwrap();
    let column = header.split_whitespace().position(|h| h == "waiting").unwrap();
    assert_eq!(line.split_whitespace().nth(column), Some("2"), "{out}");

    // an ended wait leaves the count
    let woken: i32 = c.query_one("select asyncflow.send_event('order:0/paid')", &[]).await.unwrap().get(0);
    assert_eq!(woken, 1);
    let row = c
        .query_one("select pending, waiting from asyncflow.status_counts() where task_type = 'order'", &[])
        .await
        .unwrap();
    assert_eq!((row.get::<_, i64>(0), row.get::<_, i64>(1)), (2, 1));
}
