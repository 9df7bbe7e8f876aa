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
    /// Time between rescuer passes (e.g. 1s; a plain number is seconds).
    #[arg(long, value_parser = super::args::interval, default_value = "1s")]
    pub rescue_interval: Duration,
    /// Time between shard roll / begin_pos passes (e.g. 5s; a plain number is seconds).
    #[arg(long, value_parser = super::args::interval, default_value = "5s")]
    pub shard_interval: Duration,
    /// Time between retention passes (e.g. 60s; a plain number is seconds).
    #[arg(long, value_parser = super::args::interval, default_value = "60s")]
    pub retention_interval: Duration,
    /// Time between scheduler passes: periodic schedules' due ticks (e.g. 1s; a plain number is seconds).
    #[arg(long, value_parser = super::args::interval, default_value = "1s")]
    pub schedule_interval: Duration,
    /// Time between workflow checker passes (e.g. 1s; a plain number is seconds).
    #[arg(long, value_parser = super::args::interval, default_value = "1s")]
    pub check_interval: Duration,
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

/// `asyncflow maintain --help`'s text: what the command does and every service it runs, made
/// from the line-ups themselves ([`crate::maintenance::SERVICES`], [`crate::workflow::SERVICES`]).
pub fn long_about() -> String {
    let mut text = String::from(
        "Run the maintenance services while this process leads maintenance. Any number of processes\n\
         may run them (maintain, and workers on the database unless --no-maintenance): one leads at\n\
         a time, and another takes over when it stops.\n\nThe services, in the order a pass runs them:",
    );
    let tasks = crate::maintenance::SERVICES.iter().map(|s| (s.name, s.about));
    let workflows = crate::workflow::SERVICES.iter().map(|s| (s.name, s.about));
    for (name, about) in tasks.chain(workflows) {
        text.push_str(&format!("\n  {name:<21}{about}"));
    }
    text
}

/// Callback delivery settings with this secret (an empty one counts as none) and these targets.
pub(super) fn callback_config(secret: Option<String>, targets: Targets) -> CallbackConfig {
    // without a secret, the sender warns at its first callback
    let secret = secret.filter(|s| !s.is_empty());
    CallbackConfig { secret, targets, ..Default::default() }
}

/// Runs `asyncflow maintain` on the database at `url`: the services until a signal, or one pass
/// with `--once`.
pub(super) async fn run(url: &str, args: MaintainArgs) -> Result<()> {
    let (rescue_interval, shard_interval) = (args.rescue_interval, args.shard_interval);
    let (retention_interval, check_interval) = (args.retention_interval, args.check_interval);
    let schedule_interval = args.schedule_interval;
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
    let maintainer =
        Maintainer::new(url, tasks.leader_check, services(&pool, &tasks, &workflows)).with_quiet_probe(pool.clone());
    if args.once {
        db::migrate::check_current(url).await?;
        check_may_maintain(&pool).await?;
        maintain_once(url, &pool, &maintainer).await?;
    } else {
        let shutdown = shutdown_on_signal();
        if !db::wait_for_database(url, &shutdown).await? {
            return Ok(());
        }
        db::migrate::check_current(url).await?;
        check_may_maintain(&pool).await?;
        maintainer.run(shutdown).await;
    }
    Ok(())
}

/// `maintain` exists to lead: a role that may not run every service (`asyncflow.can_maintain`)
/// is refused at start, naming what it may not run, instead of waiting for a lead it could never
/// exercise.
async fn check_may_maintain(pool: &DbPool) -> Result<()> {
    let client = pool.get().await?;
    let (ok, denied) = db::api::can_maintain(&client).await?;
    if ok {
        return Ok(());
    }
    let me = db::api::current_role(&client).await?;
    Err(crate::error::Error::Config(format!(
        "the database role {me} may not run maintenance (it may not call {}): run asyncflow maintain as the \
         schema's owner, the role that ran asyncflow migrate (docs/operations.md, Roles and grants)",
        denied.iter().map(|f| format!("asyncflow.{f}")).collect::<Vec<_>>().join(", ")
    )))
}

async fn maintain_once(url: &str, pool: &DbPool, maintainer: &Maintainer) -> Result<()> {
    // the lock (or, through a pooler in transaction mode, the lease) is held for the pass
    let mut _held = None;
    let leading = if db::pooling::mode() == db::pooling::PoolMode::Transaction {
        let me = leader::Identity::of_this_process();
        let lease = leader::session_limits(crate::maintenance::LEADER_CHECK_DEFAULT).idle.as_secs_f64();
        db::api::take_lead(&pool.get().await?, &me.id, &me.host, lease, None).await?
    } else {
        let (client, driver) = db::connect(url).await?;
        let led = db::api::try_lead(&client, leader::MAINTENANCE_LOCK).await?;
        _held = Some((client, driver));
        led
    };
    if !leading {
        crate::outln!("another process leads maintenance; nothing done");
        return Ok(());
    }
    for report in maintainer.run_once(None).await? {
        crate::outln!("{:<15} changed {:>6}  {}", report.service, report.changed, report.detail.join(", "));
    }
    Ok(())
}
