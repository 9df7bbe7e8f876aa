//! Helpers shared by the SQL API tests (tests/sql_api.rs, tests/sql_worker_api.rs).
use asyncflow::task::{Report, ReportKind};
use asyncflow::{TaskId, WorkerId};
use chrono::{DateTime, TimeZone, Utc};
use serde_json::Value;

pub fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2030, 1, 1, 12, 0, 0).unwrap()
}

pub fn secs(s: f64) -> chrono::Duration {
    chrono::Duration::milliseconds((s * 1000.0) as i64)
}

pub async fn register(c: &impl tokio_postgres::GenericClient, ty: &str, settings: Value) {
    c.query_one("select asyncflow.register_task_type($1, $2)", &[&ty, &settings]).await.unwrap();
}

pub async fn task_count(c: &impl tokio_postgres::GenericClient) -> i64 {
    c.query_one("select count(*) from asyncflow.tasks", &[]).await.unwrap().get(0)
}

pub async fn task(c: &impl tokio_postgres::GenericClient, id: &str) -> Value {
    c.query_one("select asyncflow.get_task($1)", &[&id]).await.unwrap().get(0)
}

pub fn at(v: &Value, key: &str) -> DateTime<Utc> {
    serde_json::from_value(v[key].clone()).unwrap()
}

pub fn worker(name: &str) -> WorkerId {
    WorkerId::new(name).unwrap()
}

pub fn rep(id: &str, claim_seq: i64, kind: ReportKind) -> Report {
    Report { task_id: TaskId::parse(id).unwrap(), claim_seq, kind, progress: None }
}
