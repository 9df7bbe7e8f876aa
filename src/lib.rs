//! # asyncflow
//!
//! A runner for long, multi-stage asynchronous tasks with PostgreSQL as the only
//! infrastructure.
//!
//! ## Glossary
//! - **task type**: a named kind of task with its settings (batch size, poll interval, lease
//!   length, retries, back-off, shard size, retention, concurrency). Its tasks live in their own
//!   partitions, `asyncflow.tasks_<type>_<shard>`.
//! - **task**: one row for its whole life; `stage` says where it is, `context` travels from stage
//!   to stage.
//! - **order_time**: the one sort key. Workers take the smallest order_time <= now.
//! - **claim**: a worker takes ready tasks (`FOR UPDATE SKIP LOCKED`), stamping owner, a lease
//!   deadline and a fencing token (`claim_seq`). Every report carries the token.
//! - **function**: what runs a stage ([`function::Function`]).
//!
//! ## Lifecycle
//! ```text
//!   create_task ──> pending ──claim──> running ──advance──> pending (next stage)
//!                     ^  ^                │ ├──later──────> pending (order_time = now + N s)
//!                     │  └─fail (tries    │ ├──succeed────> succeeded
//!                     │    left: backoff)─┤ └──fail (out of tries / no retry) ──> failed
//!                     └── rescue (lease   │
//!                         expired) ───────┘        pending/running ──cancel──> cancelled
//!                                                  failed/cancelled ──retry──> pending
//! ```
//!
//! ## Module map
//! - [`db`]: pool, embedded PostgreSQL, migrations, [`db::api`] (the only SQL text), LISTEN.
//! - [`task`], [`task_type`], [`run`], [`schedule`], [`ids`]: the data the SQL API takes and gives.
//! - [`client`]: enqueue and admin from Rust, on the database or on a server.
//! - [`worker`]: producer / executor / reporter running [`function`]s, on the database or on a
//!   server through the HTTP worker protocol.
//! - [`protocol`]: the HTTP API's bodies, shared by the server, the client and the worker: the
//!   worker protocol's, and one module per admin resource.
//! - [`http`]: the HTTP API server.
//! - [`maintenance`]: leader election, the [`maintenance::Maintainer`] running the services it is
//!   handed, and the task engine's rescuer, shard and retention services.
//! - [`workflow`]: versioned DAG pipelines run on top of tasks (engine in SQL): pipeline files,
//!   and the checker, run retention and callbacks as maintenance services.
//! - [`logging`]: the log's format (text or JSON) and filter.
//! - [`trace`]: OpenTelemetry traces (OTLP export, off by default) continuing each task's enqueue.
//! - [`reaper`]: a process running as PID 1 collects its functions' orphans.
//! - [`cli`]: the command-line front ends; [`demo`]: the README's main command;
//!   [`bench`](mod@bench): the throughput benchmark.
//!
//! ## Example
//! ```no_run
//! # async fn example(url: &str) -> asyncflow::Result<()> {
//! use asyncflow::{client::Client, task::NewTask};
//! let pool = asyncflow::db::pool(url, 4)?;
//! asyncflow::db::migrate::migrate(url).await?;
//! let client = Client::new(pool); // or Client::server("http://host:8080", token)?
//! client.register_type("video", &Default::default()).await?;
//! let task = client.create_task("video", &NewTask::with_context(serde_json::json!({"url": "x"}))).await?;
//! println!("created {}", task.id);
//! # Ok(())
//! # }
//! ```
#![warn(missing_docs)]

#[cfg(feature = "cli")]
pub mod bench;
#[cfg(feature = "cli")]
pub mod cli;
pub mod client;
#[cfg(feature = "cli")]
pub mod config;
pub mod db;
#[cfg(feature = "cli")]
pub mod demo;
pub mod error;
pub mod event;
pub mod explain;
#[cfg(feature = "worker")]
pub mod function;
#[cfg(feature = "server")]
pub mod http;
pub mod ids;
#[cfg(feature = "cli")]
pub mod logging;
pub mod maintenance;
pub mod out;
pub mod protocol;
#[cfg(feature = "worker")]
pub mod reaper;
pub mod run;
pub mod schedule;
pub mod signature;
pub mod task;
pub mod task_type;
#[cfg(feature = "testing")]
pub mod testing;
pub mod trace;
#[cfg(feature = "worker")]
pub mod worker;
pub mod workflow;

pub use error::{Error, Result};
pub use ids::{TaskId, TypeName, WorkerId};
