//! The command line: the clap definition of `asyncflow` and the dispatch of its subcommands.
//! Each subcommand calls one module function; the admin front ends (`task`, `type`, `pipeline`,
//! `run`, `status`) are the modules here, each talking to the database or, with `--server`, to
//! an `asyncflow serve` ([`remote`]).

pub mod pipeline;
pub mod remote;
pub mod run;
pub mod status;
pub mod task;
pub mod task_type;

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use tokio_util::sync::CancellationToken;

use crate::config::{DbConfig, DATA_DIR_DEFAULT, POOL_SIZE_DEFAULT};
use crate::db;
use crate::error::Result;
use crate::maintenance::{leader, Maintainer, MaintenanceConfig};
use crate::workflow::targets::Targets;

/// asyncflow: multi-stage asynchronous tasks on PostgreSQL.
#[derive(Debug, Parser)]
#[command(name = "asyncflow", version, about)]
pub struct Cli {
    /// PostgreSQL URL; unset starts a private embedded server.
    #[arg(long, env = "DATABASE_URL", global = true)]
    pub database_url: Option<String>,
    /// Data directory of the embedded server.
    #[arg(long, env = "ASYNCFLOW_DATA_DIR", default_value = DATA_DIR_DEFAULT, global = true)]
    pub data_dir: PathBuf,
    /// Connections in the pool.
    #[arg(long, env = "ASYNCFLOW_POOL_SIZE", default_value_t = POOL_SIZE_DEFAULT, global = true)]
    pub pool_size: usize,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Enqueue real multi-stage tasks and run them to the end (the README's main job).
    Demo(crate::demo::DemoArgs),
    /// Bring the database schema up to date.
    Migrate,
    /// Run the maintenance loops (rescue, shard roll, begin_pos, retention).
    Maintain(MaintainArgs),
    /// Print queue depth, counts and shard positions per type.
    Status,
    /// Run the functions of a functions folder.
    Worker(WorkerArgs),
    /// Serve the HTTP API.
    Serve(ServeArgs),
    /// Create, show, list, cancel or retry tasks (database, or a server with --server).
    Task {
        /// Where to send the command.
        #[command(flatten)]
        target: remote::Target,
        /// What to do.
        #[command(subcommand)]
        command: task::TaskCommand,
    },
    /// List task types, change settings, pause, resume (database, or a server with --server).
    Type {
        /// Where to send the command.
        #[command(flatten)]
        target: remote::Target,
        /// What to do.
        #[command(subcommand)]
        command: task_type::TypeCommand,
    },
    /// Apply, list, show, activate or retire workflow pipelines (database, or --server).
    Pipeline {
        /// Where to send the command.
        #[command(flatten)]
        target: remote::Target,
        /// What to do.
        #[command(subcommand)]
        command: pipeline::PipelineCommand,
    },
    /// Start, show, list, cancel or retry workflow runs and their nodes (database, or --server).
    Run {
        /// Where to send the command.
        #[command(flatten)]
        target: remote::Target,
        /// What to do.
        #[command(subcommand)]
        command: run::RunCommand,
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
}

/// `worker` options.
#[derive(Debug, Args)]
pub struct WorkerArgs {
    /// The functions folder (one sub-folder with a function.toml per task type).
    #[arg(long, default_value = "functions")]
    pub functions: PathBuf,
    /// Only these task types (comma-separated); default: every function found.
    #[arg(long, value_delimiter = ',')]
    pub types: Vec<String>,
    /// Stage calls at once.
    #[arg(long, default_value_t = crate::worker::CONCURRENCY_DEFAULT)]
    pub concurrency: usize,
    /// Exit 0 once no task of the worker's types is ready and in-flight calls are done.
    #[arg(long)]
    pub exit_when_idle: bool,
    /// Exit after claiming and finishing this many tasks.
    #[arg(long)]
    pub max_tasks: Option<u64>,
    /// Exit after this long (e.g. 90s, 10m), handing back what is unfinished after the grace.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub max_runtime: Option<Duration>,
    /// Time in-flight calls get after SIGTERM/SIGINT before their tasks are handed back.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "30s")]
    pub shutdown_grace: Duration,
    /// How long a claim is held as row locks for its calls to end before it is written as
    /// running (calls that end within it cost one row change instead of two); 0s turns holding
    /// off. At most 1s.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "20ms")]
    pub hold_window: Duration,
    /// Do not take part in the maintenance leader election (a worker on --server never does).
    #[arg(long)]
    pub no_maintenance: bool,
    /// This worker's id (default: host-pid-random).
    #[arg(long, env = "ASYNCFLOW_WORKER_ID")]
    pub worker_id: Option<String>,
    /// Key that signs workflow callbacks (HMAC-SHA256), when this worker runs maintenance.
    #[arg(long, env = "ASYNCFLOW_CALLBACK_SECRET", hide_env_values = true)]
    pub callback_secret: Option<String>,
    /// Where workflow callbacks may connect, when this worker runs maintenance: `any`, or
    /// `public` (no loopback, private or link-local address) and/or networks, comma-separated.
    #[arg(long, env = "ASYNCFLOW_CALLBACK_ALLOW", default_value = "any")]
    pub callback_allow: Targets,
    /// Claim and report through an asyncflow server (the HTTP worker protocol) instead of the
    /// database: no database connection is made.
    #[command(flatten)]
    pub target: remote::Target,
}

impl WorkerArgs {
    /// The worker's settings and what to run, checked.
    fn setup(&self) -> Result<(crate::worker::WorkerConfig, crate::worker::folder::FolderOptions)> {
        if self.concurrency == 0 || self.concurrency > 10_000 {
            return Err(crate::Error::Config("--concurrency must be between 1 and 10000".into()));
        }
        if self.hold_window > Duration::from_secs(1) {
            return Err(crate::Error::Config("--hold-window must be at most 1s".into()));
        }
        let worker_id = match &self.worker_id {
            Some(id) => crate::WorkerId::new(id)?,
            None => crate::WorkerId::generate(),
        };
        let config = crate::worker::WorkerConfig {
            worker_id,
            concurrency: self.concurrency,
            shutdown_grace: self.shutdown_grace,
            exit_when_idle: self.exit_when_idle,
            max_tasks: self.max_tasks,
            max_runtime: self.max_runtime,
            hold_window: self.hold_window,
            ..crate::worker::WorkerConfig::default()
        };
        let options = crate::worker::folder::FolderOptions {
            dir: self.functions.clone(),
            types: self.types.clone(),
            maintenance: (!self.no_maintenance && self.target.server.is_none()).then(|| MaintenanceConfig {
                callbacks: callback_config(self.callback_secret.clone(), self.callback_allow.clone()),
                ..MaintenanceConfig::default()
            }),
        };
        Ok((config, options))
    }
}

/// `maintain` options.
#[derive(Debug, Args)]
pub struct MaintainArgs {
    /// One pass of every service, if leadership can be had, then exit.
    #[arg(long)]
    pub once: bool,
    /// Seconds between rescuer passes.
    #[arg(long, default_value_t = 1.0)]
    pub rescue_interval: f64,
    /// Seconds between shard roll / begin_pos passes.
    #[arg(long, default_value_t = 5.0)]
    pub shard_interval: f64,
    /// Seconds between retention passes.
    #[arg(long, default_value_t = 60.0)]
    pub retention_interval: f64,
    /// Seconds between workflow checker passes.
    #[arg(long, default_value_t = 1.0)]
    pub check_interval: f64,
    /// Key that signs workflow callbacks (HMAC-SHA256).
    #[arg(long, env = "ASYNCFLOW_CALLBACK_SECRET", hide_env_values = true)]
    pub callback_secret: Option<String>,
    /// Where workflow callbacks may connect: `any`, or `public` (no loopback, private or
    /// link-local address) and/or networks (10.1.2.0/24), comma-separated.
    #[arg(long, env = "ASYNCFLOW_CALLBACK_ALLOW", default_value = "any")]
    pub callback_allow: Targets,
}

/// Callback delivery settings with this secret (an empty one counts as none) and these targets.
fn callback_config(secret: Option<String>, targets: Targets) -> crate::workflow::callback::CallbackConfig {
    let secret = secret.filter(|s| !s.is_empty());
    if secret.is_none() {
        tracing::warn!(
            "no callback secret (--callback-secret / ASYNCFLOW_CALLBACK_SECRET): workflow callbacks go unsigned"
        );
    }
    crate::workflow::callback::CallbackConfig { secret, targets, ..Default::default() }
}

fn seconds(name: &str, value: f64) -> Result<Duration> {
    Duration::try_from_secs_f64(value)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| crate::Error::Config(format!("--{name} must be a positive number of seconds")))
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

/// Runs the parsed command line.
pub async fn run(cli: Cli) -> Result<()> {
    if let Command::Worker(args) = &cli.command {
        if let Some(server) = &args.target.server {
            // A worker on a server needs no database here (and starts no embedded one).
            let (config, options) = args.setup()?;
            let client = crate::worker::RemoteClient::new(server, args.target.token.clone())?;
            let summary = crate::worker::folder::run_remote(client, &options, config, shutdown_on_signal()).await?;
            println!("{}", serde_json::to_string(&summary).unwrap_or_default());
            return Ok(());
        }
    }
    let db_config = DbConfig { database_url: cli.database_url, data_dir: cli.data_dir, pool_size: cli.pool_size };
    // Admin commands sent to a server need no database here.
    let remote = match &cli.command {
        Command::Task { target, .. }
        | Command::Type { target, .. }
        | Command::Pipeline { target, .. }
        | Command::Run { target, .. } => target.server.is_some(),
        _ => false,
    };
    if remote {
        let output = match cli.command {
            Command::Task { target, command } => task::task(None, &target, command).await?,
            Command::Type { target, command } => task_type::task_type(None, &target, command).await?,
            Command::Pipeline { target, command } => pipeline::pipeline(None, &target, command).await?,
            Command::Run { target, command } => run::run(None, &target, command).await?,
            _ => return Ok(()),
        };
        println!("{}", serde_json::to_string_pretty(&output).unwrap_or_default());
        return Ok(());
    }
    let (url, _embedded) = db_config.resolve().await?;
    match cli.command {
        Command::Migrate => {
            let report = db::migrate::migrate(&url).await?;
            if report.applied.is_empty() {
                println!("database is current (version {})", report.version);
            } else {
                println!("applied migrations {:?}; database at version {}", report.applied, report.version);
            }
        }
        Command::Demo(args) => {
            db::migrate::migrate(&url).await?;
            let pool = db::pool(&url, db_config.pool_size)?;
            crate::demo::run(pool, &url, &args).await?;
        }
        Command::Task { target, command } => {
            db::migrate::migrate(&url).await?;
            let pool = db::pool(&url, 2)?;
            let output = task::task(Some(&pool), &target, command).await?;
            println!("{}", serde_json::to_string_pretty(&output).unwrap_or_default());
        }
        Command::Type { target, command } => {
            db::migrate::migrate(&url).await?;
            let pool = db::pool(&url, 2)?;
            let output = task_type::task_type(Some(&pool), &target, command).await?;
            println!("{}", serde_json::to_string_pretty(&output).unwrap_or_default());
        }
        Command::Pipeline { target, command } => {
            db::migrate::migrate(&url).await?;
            let pool = db::pool(&url, 2)?;
            let output = pipeline::pipeline(Some(&pool), &target, command).await?;
            println!("{}", serde_json::to_string_pretty(&output).unwrap_or_default());
        }
        Command::Run { target, command } => {
            db::migrate::migrate(&url).await?;
            let pool = db::pool(&url, 2)?;
            let output = run::run(Some(&pool), &target, command).await?;
            println!("{}", serde_json::to_string_pretty(&output).unwrap_or_default());
        }
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
            db::migrate::migrate(&url).await?;
            let pool = db::pool(&url, db_config.pool_size)?;
            crate::http::serve(pool, config, shutdown).await?;
        }
        Command::Bench(args) => {
            crate::bench::run(&url, &args).await?;
        }
        Command::Status => {
            let pool = db::pool(&url, 2)?;
            status::print(&pool).await?;
        }
        Command::Worker(args) => {
            let (config, options) = args.setup()?;
            let shutdown = shutdown_on_signal();
            if !db::wait_for_database(&url, &shutdown).await? {
                return Ok(());
            }
            db::migrate::migrate(&url).await?;
            let pool = db::pool(&url, db_config.pool_size.max(args.concurrency.min(64) + 4))?;
            let summary = crate::worker::folder::run(pool, &url, &options, config, shutdown).await?;
            println!("{}", serde_json::to_string(&summary).unwrap_or_default());
        }
        Command::Maintain(args) => {
            let config = MaintenanceConfig {
                rescue_interval: seconds("rescue-interval", args.rescue_interval)?,
                shard_interval: seconds("shard-interval", args.shard_interval)?,
                retention_interval: seconds("retention-interval", args.retention_interval)?,
                check_interval: seconds("check-interval", args.check_interval)?,
                callbacks: callback_config(args.callback_secret, args.callback_allow),
                ..MaintenanceConfig::default()
            };
            let pool = db::pool(&url, 4)?;
            let maintainer = Maintainer::new(pool, url.clone(), config);
            if args.once {
                maintain_once(&url, &maintainer).await?;
            } else {
                let shutdown = shutdown_on_signal();
                if !db::wait_for_database(&url, &shutdown).await? {
                    return Ok(());
                }
                maintainer.run(shutdown).await;
            }
        }
    }
    Ok(())
}

async fn maintain_once(url: &str, maintainer: &Maintainer) -> Result<()> {
    let (client, _driver) = db::connect(url).await?;
    if !db::api::try_lead(&client, leader::MAINTENANCE_LOCK).await? {
        println!("another process leads maintenance; nothing done");
        return Ok(());
    }
    for report in maintainer.run_once(None).await? {
        println!("{:<15} changed {:>6}  {}", report.service, report.changed, report.detail.join(", "));
    }
    Ok(())
}
