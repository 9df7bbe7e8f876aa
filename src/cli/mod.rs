//! The command line: the clap definition of `asyncflow` and the dispatch of its subcommands.
//! Each subcommand calls one module function. The front ends are the modules here: the admin
//! commands (`task`, `type`, `pipeline`, `run`, `schedule`) and `status`, each one
//! [`crate::client::Client`] call and a print, on the database or, with `--server`, on an
//! `asyncflow serve` ([`target`]); and the options of `worker` and `maintain`, with the
//! maintenance services both run ([`maintain::services`]).

pub mod args;
pub mod event;
pub mod maintain;
pub mod pipeline;
pub mod run;
pub mod schedule;
pub mod status;
pub mod target;
pub mod task;
pub mod task_type;
pub mod worker;

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use tokio_util::sync::CancellationToken;

use crate::config::{DbConfig, DATA_DIR_DEFAULT, POOL_SIZE_DEFAULT};
use crate::db;
use crate::error::Result;

/// asyncflow: multi-stage asynchronous tasks on PostgreSQL.
#[derive(Debug, Parser)]
#[command(name = "asyncflow", version, about)]
pub struct Cli {
    /// PostgreSQL URL (required, except by demo and bench, and with --embedded).
    #[arg(long, env = "DATABASE_URL", global = true)]
    pub database_url: Option<String>,
    /// With no database URL, start a private PostgreSQL in --data-dir (demo and bench do so
    /// without it).
    #[arg(long, global = true)]
    pub embedded: bool,
    /// Data directory of the embedded server.
    #[arg(long, env = "ASYNCFLOW_DATA_DIR", default_value = DATA_DIR_DEFAULT, global = true)]
    pub data_dir: PathBuf,
    /// Connections in the pool.
    #[arg(long, env = "ASYNCFLOW_POOL_SIZE", default_value_t = POOL_SIZE_DEFAULT, global = true)]
    pub pool_size: usize,
    /// How the database URL reaches PostgreSQL: `session` (directly, or a pooler in session
    /// mode) or `transaction` (a pooler in transaction mode, such as PgBouncer's default
    /// deployments: unnamed statements, a lease for leadership, no LISTEN but on --listen-url).
    #[arg(long, env = "ASYNCFLOW_POOL_MODE", value_enum, default_value = "session", global = true)]
    pub pool_mode: db::pooling::PoolMode,
    /// A direct PostgreSQL URL (bypassing the pooler) for the LISTEN connection and migrations,
    /// with --pool-mode transaction; without it such a process polls (docs/scaling.md).
    #[arg(long, env = "ASYNCFLOW_LISTEN_URL", global = true)]
    pub listen_url: Option<String>,
    /// Log lines as text (coloured only on a terminal) or as one JSON object per line.
    #[arg(long, env = "ASYNCFLOW_LOG_FORMAT", value_enum, default_value = "text", global = true)]
    pub log_format: crate::logging::LogFormat,
    /// Traces: where to export them (none by default).
    #[command(flatten)]
    pub trace: crate::trace::TraceConfig,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Enqueue real multi-stage tasks and run them to the end (the README's main job).
    Demo(crate::demo::DemoArgs),
    /// Bring the database schema up to date (the only command that changes it; the others
    /// check that it is current).
    Migrate,
    /// Run the maintenance services while this process leads (rescue, shards, schedules,
    /// workflows...; --help lists them).
    #[command(long_about = maintain::long_about())]
    Maintain(maintain::MaintainArgs),
    /// Print queue depth, counts and shard positions per type (database, or --server).
    Status {
        /// Where to ask.
        #[command(flatten)]
        target: target::Target,
    },
    /// Run the functions of a functions folder.
    Worker(worker::WorkerArgs),
    /// Serve the HTTP API.
    Serve(ServeArgs),
    /// Create, show, list, cancel or retry tasks (database, or a server with --server).
    Task {
        /// Where to send the command.
        #[command(flatten)]
        target: target::Target,
        /// What to do.
        #[command(subcommand)]
        command: task::TaskCommand,
    },
    /// List task types, change settings, pause, resume (database, or a server with --server).
    Type {
        /// Where to send the command.
        #[command(flatten)]
        target: target::Target,
        /// What to do.
        #[command(subcommand)]
        command: task_type::TypeCommand,
    },
    /// Apply, list, show, activate or retire workflow pipelines (database, or --server).
    Pipeline {
        /// Where to send the command.
        #[command(flatten)]
        target: target::Target,
        /// What to do.
        #[command(subcommand)]
        command: pipeline::PipelineCommand,
    },
    /// Start, show, list, cancel or retry workflow runs and their nodes (database, or --server).
    Run {
        /// Where to send the command.
        #[command(flatten)]
        target: target::Target,
        /// What to do.
        #[command(subcommand)]
        command: run::RunCommand,
    },
    /// List, set, pause, resume or remove periodic schedules (database, or --server).
    Schedule {
        /// Where to send the command.
        #[command(flatten)]
        target: target::Target,
        /// What to do.
        #[command(subcommand)]
        command: schedule::ScheduleCommand,
    },
    /// Send events that waiting tasks wait for (database, or --server).
    Event {
        /// Where to send the command.
        #[command(flatten)]
        target: target::Target,
        /// What to do.
        #[command(subcommand)]
        command: event::EventCommand,
    },
    /// Measure throughput against this database's commit-rate ceiling, in one run.
    Bench(crate::bench::BenchArgs),
}

/// `serve` options.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: std::net::SocketAddr,
    /// Accepted bearer tokens (comma-separated; at least 16 characters each).
    #[arg(long = "token", env = "ASYNCFLOW_TOKENS", value_delimiter = ',', hide_env_values = true)]
    pub tokens: Vec<String>,
    /// Allow listening beyond loopback without tokens.
    #[arg(long)]
    pub insecure_no_auth: bool,
    /// Largest request body in bytes.
    #[arg(long, default_value_t = crate::http::MAX_BODY_DEFAULT)]
    pub max_body: usize,
    /// Time a client has to send a request's head (e.g. 30s), from when the server starts
    /// waiting for it: on a new connection and between requests on a kept-alive one, so it is
    /// also how long an idle connection stays open.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "30s")]
    pub header_timeout: Duration,
    /// Time a client has to send a request's body, from the end of its head.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "60s")]
    pub body_timeout: Duration,
    /// Migrate the database first (as `asyncflow migrate`; needs the schema's owner). Without
    /// it, a database that is not current is refused.
    #[arg(long)]
    pub migrate: bool,
}

/// For the commands that print and end: a reader that goes away (`asyncflow task list | head -1`)
/// ends the process quietly by SIGPIPE, as it ends `cat`, instead of a panic in `println!`.
/// Never for the long-running commands, whose sockets must see EPIPE as an error, not die of it.
fn quiet_on_closed_output() {
    use nix::sys::signal::{signal, SigHandler, Signal};
    // SAFETY: restoring the default disposition of SIGPIPE installs no handler of ours, and it
    // happens before this process starts any work that could write to a pipe or socket.
    if let Err(e) = unsafe { signal(Signal::SIGPIPE, SigHandler::SigDfl) } {
        tracing::debug!(error = %e, "SIGPIPE left ignored");
    }
}

/// A token fired by the first SIGINT or SIGTERM; a second signal exits the process at once
/// (exit status 130), leaving held tasks to the rescuer when their leases run out.
pub fn shutdown_on_signal() -> CancellationToken {
    let token = CancellationToken::new();
    let fire = token.clone();
    tokio::spawn(async move {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "cannot watch SIGTERM");
                let _ = tokio::signal::ctrl_c().await;
                fire.cancel();
                return;
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        tracing::info!("shutdown signal received: finishing in-flight work (signal again to exit at once)");
        fire.cancel();
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        eprintln!("asyncflow: second signal: exiting now");
        // what the running functions started would outlive them otherwise
        crate::function::exec::kill_running_groups();
        std::process::exit(130);
    });
    token
}

/// Migrates the database at `url` when asked (`--migrate`), or else checks that it is current.
async fn migrate_or_check(url: &str, migrate: bool) -> Result<()> {
    if migrate {
        db::migrate::migrate(&db::pooling::migration_url(url)?).await.map(|_| ())
    } else {
        db::migrate::check_current(url).await
    }
}

/// `serve` needs the client's grants for its API, and refuses to start without them; without
/// the worker's it serves everything but the worker protocol, and says so once.
async fn check_serve_grants(pool: &db::DbPool) -> Result<()> {
    use db::migrate::{check_grants, Grant};
    let client = pool.get().await?;
    check_grants(&client, Grant::Client, None).await?;
    if let Err(e) = check_grants(&client, Grant::Worker, None).await {
        tracing::info!("the worker protocol's routes (/v1/worker/...) will be refused: {e}");
    }
    Ok(())
}

/// Prints an admin command's answer as JSON.
fn print<T: serde::Serialize>(answer: &T) -> Result<()> {
    let text = serde_json::to_string_pretty(answer).map_err(|e| crate::Error::Unexpected(e.to_string()))?;
    crate::outln!("{text}");
    Ok(())
}

/// The admin client a command's `--server` picks: that server, or the database at `url` (checked
/// current first).
async fn admin_client(target: &target::Target, url: Option<&str>) -> Result<crate::client::Client> {
    match (&target.server, url) {
        (Some(server), _) => crate::client::Client::server(server, target.token.clone()),
        (None, Some(url)) => {
            db::migrate::check_current(url).await?;
            Ok(crate::client::Client::new(db::pool(url, 2)?))
        }
        (None, None) => Err(crate::Error::Config("no database URL and no --server".into())),
    }
}

/// Runs the parsed command line.
pub async fn run(cli: Cli) -> Result<()> {
    db::pooling::set_mode(cli.pool_mode);
    if let Some(direct) = cli.listen_url.clone().filter(|u| !u.is_empty()) {
        db::config(&direct)?;
        db::pooling::set_direct_url(direct);
    }
    if matches!(
        cli.command,
        Command::Task { .. }
            | Command::Type { .. }
            | Command::Pipeline { .. }
            | Command::Run { .. }
            | Command::Status { .. }
            | Command::Schedule { .. }
            | Command::Event { .. }
            | Command::Migrate
    ) {
        quiet_on_closed_output();
    }
    if matches!(cli.command, Command::Worker(_) | Command::Serve(_) | Command::Maintain(_)) {
        // the entry point of a container without an init: collect the orphans (the embedded
        // server's commands are left out: they wait for their own children)
        crate::reaper::start_if_pid1();
    }
    if let Command::Worker(args) = &cli.command {
        if let Some(server) = &args.target.server {
            // A worker on a server needs no database here (and starts no embedded one).
            let (config, options) = args.setup()?;
            let client = crate::worker::RemoteClient::new(server, args.target.token.clone())?;
            let summary = crate::worker::folder::run_remote(client, &options, config, shutdown_on_signal()).await?;
            crate::outln!("{}", serde_json::to_string(&summary).unwrap_or_default());
            return Ok(());
        }
    }
    let db_config = DbConfig { database_url: cli.database_url, data_dir: cli.data_dir, pool_size: cli.pool_size };
    // Admin commands sent to a server need no database here.
    let remote = match &cli.command {
        Command::Task { target, .. }
        | Command::Type { target, .. }
        | Command::Pipeline { target, .. }
        | Command::Run { target, .. }
        | Command::Schedule { target, .. }
        | Command::Event { target, .. }
        | Command::Status { target } => target.server.is_some(),
        _ => false,
    };
    if remote {
        match cli.command {
            Command::Task { target, command } => task::task(&admin_client(&target, None).await?, command).await?,
            Command::Type { target, command } => {
                task_type::task_type(&admin_client(&target, None).await?, command).await?
            }
            Command::Pipeline { target, command } => {
                pipeline::pipeline(&admin_client(&target, None).await?, command).await?
            }
            Command::Run { target, command } => run::run(&admin_client(&target, None).await?, command).await?,
            Command::Schedule { target, command } => {
                schedule::schedule(&admin_client(&target, None).await?, command).await?
            }
            Command::Event { target, command } => event::event(&admin_client(&target, None).await?, command).await?,
            Command::Status { target } => status::print(&admin_client(&target, None).await?).await?,
            _ => {}
        }
        return Ok(());
    }
    // A private server for the demo and the benchmark; elsewhere only when asked for.
    let embedded = cli.embedded || matches!(cli.command, Command::Demo(_) | Command::Bench(_));
    let (url, _embedded) = db_config.resolve(embedded).await?;
    match cli.command {
        Command::Migrate => {
            let report = db::migrate::migrate(&db::pooling::migration_url(&url)?).await?;
            if report.applied.is_empty() {
                crate::outln!("database is current (version {})", report.version);
            } else {
                crate::outln!("applied migrations {:?}; database at version {}", report.applied, report.version);
            }
        }
        Command::Demo(args) => {
            db::migrate::migrate(&url).await?;
            let pool = db::pool(&url, db_config.pool_size)?;
            crate::demo::run(pool, &url, &args).await?;
        }
        Command::Task { target, command } => task::task(&admin_client(&target, Some(&url)).await?, command).await?,
        Command::Type { target, command } => {
            task_type::task_type(&admin_client(&target, Some(&url)).await?, command).await?
        }
        Command::Pipeline { target, command } => {
            pipeline::pipeline(&admin_client(&target, Some(&url)).await?, command).await?
        }
        Command::Run { target, command } => run::run(&admin_client(&target, Some(&url)).await?, command).await?,
        Command::Schedule { target, command } => {
            schedule::schedule(&admin_client(&target, Some(&url)).await?, command).await?
        }
        Command::Event { target, command } => event::event(&admin_client(&target, Some(&url)).await?, command).await?,
        Command::Serve(args) => {
            let config = crate::http::HttpConfig {
                listen: args.listen,
                tokens: args.tokens.into_iter().filter(|t| !t.is_empty()).collect(),
                insecure_no_auth: args.insecure_no_auth,
                max_body: args.max_body,
                header_timeout: args.header_timeout,
                body_timeout: args.body_timeout,
            };
            config.validate()?;
            let shutdown = shutdown_on_signal();
            if !db::wait_for_database(&url, &shutdown).await? {
                return Ok(());
            }
            migrate_or_check(&url, args.migrate).await?;
            let pool = db::pool(&url, db_config.pool_size)?;
            check_serve_grants(&pool).await?;
            crate::http::serve(pool, &url, config, shutdown).await?;
        }
        Command::Bench(args) => {
            crate::bench::run(&url, &args).await?;
        }
        Command::Status { target } => status::print(&admin_client(&target, Some(&url)).await?).await?,
        Command::Worker(args) => {
            let (config, options) = args.setup()?;
            let shutdown = shutdown_on_signal();
            if !db::wait_for_database(&url, &shutdown).await? {
                return Ok(());
            }
            migrate_or_check(&url, args.migrate).await?;
            let pool = db::pool(&url, db_config.pool_size.max(args.concurrency.min(64) + 4))?;
            let maintainer = args.maintainer(&pool, &url);
            let summary = crate::worker::folder::run(pool, &url, &options, config, maintainer, shutdown).await?;
            crate::outln!("{}", serde_json::to_string(&summary).unwrap_or_default());
        }
        Command::Maintain(args) => maintain::run(&url, args).await?,
    }
    Ok(())
}
