//! The command line: `asyncflow demo | migrate | maintain | status`. Each subcommand calls one
//! module function.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use tokio_util::sync::CancellationToken;

use crate::config::{DbConfig, DATA_DIR_DEFAULT, POOL_SIZE_DEFAULT};
use crate::db;
use crate::error::Result;
use crate::maintenance::{leader, Maintainer, MaintenanceConfig};

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
}

fn seconds(name: &str, value: f64) -> Result<Duration> {
    Duration::try_from_secs_f64(value)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| crate::Error::Config(format!("--{name} must be a positive number of seconds")))
}

/// A token fired by SIGINT or SIGTERM.
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
        tracing::info!("shutdown signal received");
        fire.cancel();
    });
    token
}

/// Runs the parsed command line.
pub async fn run(cli: Cli) -> Result<()> {
    let db_config = DbConfig { database_url: cli.database_url, data_dir: cli.data_dir, pool_size: cli.pool_size };
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
        Command::Status => {
            let pool = db::pool(&url, 2)?;
            crate::status::print(&pool).await?;
        }
        Command::Maintain(args) => {
            let config = MaintenanceConfig {
                rescue_interval: seconds("rescue-interval", args.rescue_interval)?,
                shard_interval: seconds("shard-interval", args.shard_interval)?,
                retention_interval: seconds("retention-interval", args.retention_interval)?,
                ..MaintenanceConfig::default()
            };
            let pool = db::pool(&url, 4)?;
            let maintainer = Maintainer::new(pool, url.clone(), config);
            if args.once {
                maintain_once(&url, &maintainer).await?;
            } else {
                maintainer.run(shutdown_on_signal()).await;
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
