//! Workflows: versioned pipelines of nodes run as DAGs.
//!
//! The engine lives in SQL (the `asyncflow.*` workflow functions: `start_run`, `check_runs`,
//! `claim_callbacks`, ...), next to the task engine it drives:
//! every node's work is an ordinary task of its function's type, so claims, leases, retries and
//! fencing are the task engine's own. A trigger on the tasks of the types pipelines name moves a
//! run on in the very transaction that ends a node's task, so no step is ever lost between the
//! two (types no pipeline names carry no trigger and pay nothing).
//!
//! ```text
//!   start_run ──> start ──┬──> probe ─┐                          (parallel fan-out)
//!                         └──> audio ─┴──> split                 (fan-in: latch = in-degree)
//!                                            └──> segments[0..N) (dynamic fan-out, N at run time)
//!                                                   └──> join ──> publish ──> end ──> callback
//! ```
//!
//! This module holds what Rust adds around it:
//! - [`definition`]: pipeline files (JSON or TOML) for `asyncflow pipeline apply`;
//! - [`checker`]: the checker (scheduled runs, node and run deadlines) and run retention, as
//!   maintenance services;
//! - [`callback`]: delivery of run outcomes and callback nodes to their URLs, signed and retried,
//!   to the addresses [`targets`] (`--callback-allow`) lets them reach.
//!
//! The three services are [`services`]: whoever runs maintenance (`asyncflow maintain`, a worker
//! on the database, the demo) hands them to its [`Maintainer`](crate::maintenance::Maintainer)
//! beside the task engine's own.

pub mod callback;
pub mod checker;
pub mod definition;
pub mod targets;

use std::time::Duration;

use crate::db::DbPool;
use crate::maintenance::{Service, ServiceEntry};
use callback::{CallbackConfig, CallbackSender};
use checker::{RunChecker, RunRetention, CHECK_INTERVAL_DEFAULT, RUN_RETENTION_INTERVAL_DEFAULT};

/// Settings of the workflows' maintenance services.
#[derive(Debug, Clone)]
pub struct ServiceConfig {
    /// Checker pass interval.
    pub check_interval: Duration,
    /// Run retention pass interval.
    pub run_retention_interval: Duration,
    /// Callback delivery.
    pub callbacks: CallbackConfig,
}

impl Default for ServiceConfig {
    fn default() -> Self {
        ServiceConfig {
            check_interval: CHECK_INTERVAL_DEFAULT,
            run_retention_interval: RUN_RETENTION_INTERVAL_DEFAULT,
            callbacks: CallbackConfig::default(),
        }
    }
}

/// The workflows' maintenance services, in the order a pass runs them.
pub const SERVICES: &[ServiceEntry<ServiceConfig>] = &[
    ServiceEntry {
        name: "run_checker",
        about: "due scheduled runs -> begun; nodes and runs past their timeout -> retried or failed",
        build: |pool, c| Box::new(RunChecker::new(pool.clone(), c.check_interval)),
    },
    ServiceEntry {
        name: "run_retention",
        about: "days of ended runs past their retention -> dropped whole",
        build: |pool, c| Box::new(RunRetention::new(pool.clone(), c.run_retention_interval)),
    },
    ServiceEntry {
        name: "callbacks",
        about: "run outcomes and callback nodes -> POSTed to their URLs, signed and retried",
        build: |pool, c| Box::new(CallbackSender::new(pool.clone(), c.callbacks.clone())),
    },
];

/// The workflows' maintenance services ([`SERVICES`]), in the order a pass runs them.
pub fn services(pool: &DbPool, config: &ServiceConfig) -> Vec<Box<dyn Service>> {
    ServiceEntry::build_all(SERVICES, pool, config)
}
