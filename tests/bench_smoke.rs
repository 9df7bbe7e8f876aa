//! `asyncflow bench` runs every phase end to end at toy sizes and writes its results and chart.
//! It asserts what the command produces, never how fast anything was: figures come from the
//! command, not from tests.
use crate::common;

use std::process::Command;

use common::TestDb;
use serde_json::Value;

struct OutDir(std::path::PathBuf);

impl Drop for OutDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[tokio::test]
async fn the_bench_command_runs_every_phase_and_writes_results_and_a_chart() {
    // the PgBouncer phases (wake_pgbouncer, ephemeral) run, not left out for want of it
    tokio::task::spawn_blocking(common::process::install_pgbouncer).await.unwrap();
    let db = TestDb::new().await;
    // the bench makes (and drops) a database of its own on the same server
    let server_url = db.url.split('?').next().unwrap_or(&db.url).to_string();
    let out = OutDir(std::env::temp_dir().join(format!("asyncflow-bench-{}", uuid::Uuid::new_v4().simple())));
    let run = Command::new(env!("CARGO_BIN_EXE_asyncflow"))
        .args(["bench", "--seconds", "0.3", "--tasks", "300", "--aged-rows", "2000", "--drop-rows", "1000"])
        .args(["--wake-rate", "40", "--dropin-tasks", "200", "--fork-tasks", "5", "--dashboard-tasks", "2000"])
        .args(["--waiting-tasks", "20000"])
        .args([
            "--idle-workers",
            "2",
            "--idle-types",
            "2",
            "--idle-seconds",
            "1",
            "--idle-settle",
            "0",
            "--idle-large",
            "3",
        ])
        .args(["--ephemeral-tasks", "300", "--ephemeral-workers", "6", "--ephemeral-waves", "2"])
        .args(["--json", "--out"])
        .arg(&out.0)
        .env("DATABASE_URL", &server_url)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let bench_db = format!("asyncflow_bench_{}", run.id());
    let run = run.wait_with_output().unwrap();
    if !run.status.success() {
        // the progress lines and the workers' logs come first: the error is at the end
        let stderr = String::from_utf8_lossy(&run.stderr);
        let lines: Vec<&str> = stderr.lines().collect();
        panic!(
            "bench failed ({}), the last lines:\n{}",
            run.status,
            lines[lines.len().saturating_sub(30)..].join("\n")
        );
    }
    let printed: Value = serde_json::from_slice(&run.stdout).expect("--json prints the results");
    let written: Value = serde_json::from_str(&std::fs::read_to_string(out.0.join("results.json")).unwrap()).unwrap();
    assert_eq!(printed, written);
    let keys: Vec<&str> = written["figures"].as_array().unwrap().iter().filter_map(|f| f["key"].as_str()).collect();
    for key in [
        "update",
        "insert",
        "enqueue",
        "parts_floor",
        "parts_row",
        "parts_function",
        "bulk",
        "limit",
        "limit_burndown",
        "limit_wal",
        "limit_burndown_wal",
        "limit3",
        "limit3_burndown",
        "limit3_wal",
        "limit3_burndown_wal",
        "burndown",
        "burndown3",
        "chained3",
        "fair_1",
        "fair_100",
        "fair_300",
        "events_waits",
        "events_burn_empty",
        "events_burn_beside",
        "events_create",
        "events_send",
        "commit_p50",
        "paced_insert_p50",
        "wake_p50",
        "wake_p99",
        "wake_remote_p50",
        "wake_remote_after_commit_p50",
        "wake_remote_p99",
    ] {
        assert!(keys.contains(&key), "{key} missing from {keys:?}");
    }
    for key in ["children_plain", "children_burndown", "children_join"] {
        assert!(keys.contains(&key), "{key} missing from {keys:?}");
    }
    for key in ["wake_direct_p50", "wake_pgbouncer_p50", "ephemeral_direct", "ephemeral_fleet"] {
        assert!(keys.contains(&key), "{key} missing from {keys:?}");
    }
    for key in ["idle_baseline", "idle_direct_2w_2t", "idle_remote_2w_2t", "idle_remote_3w_2t", "idle_poll_only_3w_2t"]
    {
        assert!(keys.contains(&key), "{key} missing from {keys:?}");
    }
    for key in ["dropin_rust", "dropin_warm", "dropin_http", "dropin_fork", "dropin_warm_over_fork", "dropin3_warm"] {
        assert!(keys.contains(&key), "{key} missing from {keys:?}");
    }
    for key in [
        "aging_empty",
        "aging",
        "drop",
        "drop_dead",
        "dashboard_before",
        "dashboard_tasks",
        "metrics_tasks",
        "search_before",
        "search_tasks",
        "failed_before",
        "failed_tasks",
    ] {
        assert!(keys.contains(&key), "{key} missing from {keys:?}");
    }
    for f in written["figures"].as_array().unwrap() {
        let value = f["value"].as_f64().unwrap_or(f64::NAN);
        // the worker's share of the wake latency is negative when the function started before
        // the commit's acknowledgement reached the client (seen in a CI run: -0.39 ms)
        let may_be_negative =
            matches!(f["key"].as_str(), Some("wake_after_commit_p50" | "wake_remote_after_commit_p50"));
        assert!(value.is_finite() && (value >= 0.0 || may_be_negative), "{f}");
        // the idle phase's figures are costs beyond its own baseline (no asyncflow process),
        // which may be zero: they are absolute, with an absolute bar
        let idle = f["key"].as_str().is_some_and(|k| k.starts_with("idle_"));
        if f["key"] != "update" && !idle && f["unit"].as_str().is_some_and(|u| u.ends_with("/s")) {
            assert!(f["ratio"].as_f64().is_some_and(|r| r > 0.0), "a rate has its ratio to the baseline: {f}");
        }
    }
    let figure = |key: &str| written["figures"].as_array().unwrap().iter().find(|f| f["key"] == key).unwrap().clone();
    assert_eq!(figure("drop_dead")["value"], 0.0);
    // the fair burn-downs (one per --queue-keys count, 100,000 keys cut to the 300 tasks) and the
    // 3-stage ones (with and without speculative chaining) are compared with the plain one of the
    // same run
    for key in ["fair_1", "fair_100", "fair_300", "burndown3", "chained3"] {
        assert_eq!(figure(key)["ratio_to"], "1-stage burn-down", "{key}");
    }
    // the 3-stage physical limit is compared with the 1-stage one of the same run, and the 3-stage
    // burn-down with it; three durable row changes per task write more WAL than one
    assert_eq!(figure("limit3")["ratio_to"], "limit");
    assert_eq!(figure("limit3_burndown")["ratio_to"], "3-stage limit");
    let wal = |key: &str| figure(key)["value"].as_f64().unwrap_or(f64::NAN);
    assert!(
        wal("limit_wal") > 0.0 && wal("limit3_wal") > wal("limit_wal"),
        "{} {}",
        figure("limit_wal"),
        figure("limit3_wal")
    );
    // tasks waiting for events: the burn-down beside them against the one in an empty type,
    // send_event against create_task, both of the same phase
    assert_eq!(figure("events_burn_beside")["ratio_to"], "the burn-down in an empty type");
    assert_eq!(figure("events_send")["ratio_to"], "create_task");
    // create_task's parts are compared with the INSERT its bar is measured against
    for key in ["parts_floor", "parts_row", "parts_function"] {
        assert_eq!(figure(key)["ratio_to"], "INSERT", "{key}");
    }
    // the timed phases and the burn-downs carry the CPU per operation: this process's always,
    // the whole machine's where /proc/stat is read (a toy burn-down may last under a tick)
    let proc_stat = std::path::Path::new("/proc/stat").exists();
    for key in ["update", "insert", "enqueue", "parts_floor", "parts_row", "parts_function", "burndown", "burndown3"] {
        let f = figure(key);
        assert!(f["own_cpu_us"].as_f64().is_some_and(|c| c > 0.0), "{key}: {f}");
        if proc_stat {
            let least = if key.starts_with("burndown") { 0.0 } else { f64::MIN_POSITIVE };
            assert!(f["cpu_us"].as_f64().is_some_and(|c| c >= least), "{key}: {f}");
        }
    }
    assert!(figure("wake_p50")["cpu_us"].is_null(), "latencies are not counted per operation");
    let svg = std::fs::read_to_string(out.0.join("chart.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("burn-down") && svg.trim_end().ends_with("</svg>"));
    // the benchmark database is gone
    let c = db.raw().await;
    let left: i64 =
        c.query_one("select count(*) from pg_database where datname = $1", &[&bench_db]).await.unwrap().get(0);
    assert_eq!(left, 0, "the benchmark database is dropped at the end");
}

#[test]
fn bad_bench_options_are_refused_before_anything_runs() {
    let run = Command::new(env!("CARGO_BIN_EXE_asyncflow"))
        .args(["bench", "--only", "burndown,nap"])
        .env("DATABASE_URL", "postgres://nobody@127.0.0.1:1/none")
        .output()
        .unwrap();
    assert!(!run.status.success());
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(err.contains("unknown phase \"nap\""), "{err}");
}
