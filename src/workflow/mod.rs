//! Workflows (seed dag-engine-design): versioned pipelines of nodes run as DAGs.
//!
//! The engine lives in SQL (`sql/migrations/V9`..`V12`), next to the task engine it drives:
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

pub mod callback;
pub mod checker;
pub mod definition;
pub mod targets;
