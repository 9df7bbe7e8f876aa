//! The integration tests, one module per file of this folder, built as one test binary.
//!
//! One binary links the crate and its dependencies once, where a binary per file linked them
//! 45 times (about 2 GB of executables in `target/`). Every test still gets its own database
//! (`common::TestDb`); the PostgreSQL server is shared by the whole binary. Run one file's tests
//! with `cargo test --test suite <module>::`, for example `cargo test --test suite warm_functions::`.
//!
//! `tests/functions.rs` stays a binary of its own: it sets variables in the process
//! environment, which the other tests' servers and children would inherit.
//!
//! A new test file is added here as a module.

mod common;

mod admin_cli;
mod bad_data;
mod bad_rows;
mod bench_smoke;
mod checkpoints;
mod children;
mod cli_options;
mod compat_http;
mod dashboard;
mod dashboard_actions;
mod dashboard_data;
mod debounce;
mod deploy;
mod docs_waiting_page;
mod docs_warm_page;
mod durability;
mod enqueue_first;
mod events;
mod examples;
mod explain;
mod failover;
mod fencing;
mod final_progress;
mod http;
mod http_function_progress;
mod leadership;
mod liveness;
mod logs;
mod maintenance;
mod many_queues;
mod metrics;
mod migrations;
mod nginx_cluster;
mod openapi;
mod openapi_fuzz;
mod openapi_schemas;
mod packages;
mod pgbouncer;
mod pid1;
mod queue_rate_limits;
mod roles;
mod rust_library;
mod schedule_entry_points;
mod schedules;
mod scheduling_features;
mod schema_snapshot;
mod smoke;
mod sql_api;
mod sql_worker_api;
mod task_search;
mod traces;
mod waiting_figures;
mod warm_functions;
mod worker;
mod worker_process;
mod worker_remote;
mod workflow;
mod workflow_definitions;
mod workflow_example;
mod workflow_services;
