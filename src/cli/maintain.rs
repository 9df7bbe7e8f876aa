//! `asyncflow maintain`: its options, the line-up of maintenance services it runs (the task
//! engine's, then the workflows'; a worker on the database runs the same), and one pass with
//! `--once`.

use std::time::Duration;

use clap::Args;

use super::shutdown_on_signal;
use crate::db::{self, DbPool};
use crate::error::Result;
use crate::maintenance::{leader, Maintainer, MaintenanceConfig, Service};
use crate::workflow::callback::CallbackConfig;
use crate::workflow::targets::Targets;

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
    /// Seconds between scheduler passes (periodic schedules' due ticks).
    #[arg(long, default_value_t = 1.0)]
    pub schedule_interval: f64,
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

/// The services `asyncflow maintain` runs, in the order `--once` runs and prints them: the task
/// engine's ([`crate::maintenance::services`]), then the workflows'
/// ([`crate::workflow::services`]).
pub fn services(
    pool: &DbPool,
    tasks: &MaintenanceConfig,
    workflows: &crate::workflow::ServiceConfig,
) -> Vec<Box<dyn Service>> {
    let mut all = crate::maintenance::services(pool, tasks);
    all.extend(crate::workflow::services(pool, workflows));
    all
}

/// Callback delivery settings with this secret (an empty one counts as none) and these targets.
pub(super) fn callback_config(secret: Option<String>, targets: Targets) -> CallbackConfig {
    let secret = secret.filter(|s| !s.is_empty());
    if secret.is_none() {
        tracing::warn!(
            "no callback secret (--callback-secret / ASYNCFLOW_CALLBACK_SECRET): workflow callbacks go unsigned"
        );
    }
    CallbackConfig { secret, targets, ..Default::default() }
}

fn seconds(name: &str, value: f64) -> Result<Duration> {
    Duration::try_from_secs_f64(value)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| crate::Error::Config(format!("--{name} must be a positive number of seconds")))
}

/// Runs `asyncflow maintain` on the database at `url`: the services until a signal, or one pass
/// with `--once`.
pub(super) async fn run(url: &str, args: MaintainArgs) -> Result<()> {
    let rescue_interval = seconds("rescue-interval", args.rescue_interval)?;
    let shard_interval = seconds("shard-interval", args.shard_interval)?;
    let retention_interval = seconds("retention-interval", args.retention_interval)?;
    let schedule_interval = seconds("schedule-interval", args.schedule_interval)?;
    let check_interval = seconds("check-interval", args.check_interval)?;
    let tasks = MaintenanceConfig {
        rescue_interval,
        shard_interval,
        retention_interval,
        schedule_interval,
        ..MaintenanceConfig::default()
    };
    let workflows = crate::workflow::ServiceConfig {
        check_interval,
        run_retention_interval: retention_interval,
        callbacks: callback_config(args.callback_secret, args.callback_allow),
    };
    let pool = db::pool(url, 4)?;
    let maintainer = Maintainer::new(url, tasks.leader_check, services(&pool, &tasks, &workflows));
    if args.once {
        maintain_once(url, &maintainer).await?;
    } else {
        let shutdown = shutdown_on_signal();
        if !db::wait_for_database(url, &shutdown).await? {
            return Ok(());
        }
        maintainer.run(shutdown).await;
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
