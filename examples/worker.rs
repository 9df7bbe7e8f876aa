//! A worker with a Rust handler, beside the maintainer, with a clean shutdown.
//!
//! ```sh
//! DATABASE_URL=postgres://me@localhost/app cargo run --example worker
//! ```
//! It registers the type `greet` (two stages: `start` -> `polish`), enqueues three tasks, runs a
//! worker and the maintenance services until the three have ended (or Ctrl-C), then stops both
//! and prints the results. A worker does no maintenance by itself: lease expiry, shards,
//! retention and schedules run in a [`Maintainer`], here in the same process (or run
//! `asyncflow maintain` beside it).

use std::time::Duration;

use asyncflow::db::{self, api};
use asyncflow::function::{StageCall, StageReply};
use asyncflow::maintenance::{self, Maintainer, MaintenanceConfig};
use asyncflow::task::NewTask;
use asyncflow::worker::{Worker, WorkerConfig};
use asyncflow::TypeName;
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// The handler: one call per stage; what it returns moves the task on.
async fn greet(call: StageCall) -> StageReply {
    let name = call.context["name"].as_str().unwrap_or("stranger").to_string();
    match call.stage.as_str() {
        "start" => StageReply::Next {
            next_stage: "polish".into(),
            context: Some(json!({"name": name, "greeting": format!("hello, {name}")})),
        },
        "polish" => {
            let greeting = call.context["greeting"].as_str().unwrap_or_default();
            StageReply::Succeeded { result: json!({"greeting": format!("{greeting}!")}) }
        }
        other => StageReply::Failed { error: format!("no stage {other}"), retry: false },
    }
}

#[tokio::main]
async fn main() -> asyncflow::Result<()> {
    let url = std::env::var("DATABASE_URL")
        .map_err(|_| asyncflow::Error::Config("set DATABASE_URL to a PostgreSQL database".into()))?;
    db::migrate::migrate(&url).await?;
    let pool = db::pool(&url, 8)?;
    let greet_type = TypeName::new("greet")?;
    api::register_task_type(&pool.get().await?, &greet_type, &Default::default()).await?;
    let mut ids = Vec::new();
    for name in ["Ada", "Grace", "Edsger"] {
        ids.push(api::create_task(&pool.get().await?, "greet", &NewTask::with_context(json!({"name": name}))).await?);
    }

    // One token stops everything: Ctrl-C, or the last task ending.
    let shutdown = CancellationToken::new();
    let on_signal = shutdown.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            on_signal.cancel();
        }
    });
    let config = MaintenanceConfig::default();
    let maintainer = Maintainer::new(url.clone(), config.leader_check, maintenance::services(&pool, &config));
    let maintenance = tokio::spawn(maintainer.run(shutdown.clone()));
    let worker = Worker::new(pool.clone(), url.clone(), WorkerConfig::default()).register(
        greet_type,
        greet,
        Some(Duration::from_secs(30)),
        Default::default(),
    );
    let running = tokio::spawn(worker.run(shutdown.clone()));

    // Wait for the three tasks to end, reading them as an application would.
    let mut tasks = Vec::new();
    while !shutdown.is_cancelled() {
        tasks = api::get_tasks(&pool.get().await?, &ids).await?;
        if tasks.len() == ids.len() && tasks.iter().all(|t| t.status.is_final()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    shutdown.cancel();
    let summary = running.await.map_err(|e| asyncflow::Error::Config(format!("the worker task: {e}")))??;
    let _ = maintenance.await;
    for task in &tasks {
        println!("{} {:?} {}", task.id, task.status, task.result.clone().unwrap_or_default());
    }
    println!("worker stopped: {} claimed, {} succeeded", summary.claimed, summary.succeeded);
    Ok(())
}
