//! Running a functions folder: what `asyncflow worker` and `asyncflow demo` share. Reads and
//! checks every `function.toml` (nothing runs if one is bad), runs build steps, registers the
//! types, then runs a [`Worker`] and, unless told not to, a [`Maintainer`] beside it. On a server
//! ([`run_remote`]) the worker runs alone: maintenance belongs to processes with a database
//! connection (`asyncflow maintain`, or database-mode workers).

use std::path::PathBuf;

use tokio_util::sync::CancellationToken;

use super::{RemoteClient, Worker, WorkerConfig, WorkerSummary};
use crate::db::DbPool;
use crate::error::{Error, Result};
use crate::function::registry::{self, FunctionSpec};
use crate::maintenance::Maintainer;

/// What to run from a folder.
#[derive(Debug, Clone)]
pub struct FolderOptions {
    /// The functions folder.
    pub dir: PathBuf,
    /// Only these types (empty: every function found).
    pub types: Vec<String>,
}

/// Reads the folder and keeps the requested types; an unknown requested type is an error.
pub fn load(options: &FolderOptions) -> Result<Vec<FunctionSpec>> {
    let mut all = registry::load_dir(&options.dir)?;
    if options.types.is_empty() {
        return Ok(all.into_values().collect());
    }
    let mut chosen = Vec::new();
    for name in &options.types {
        let key = crate::ids::TypeName::new(name)?;
        match all.remove(&key) {
            Some(spec) => chosen.push(spec),
            None => {
                return Err(Error::Config(format!("--types: no function for type {name} in {}", options.dir.display())))
            }
        }
    }
    Ok(chosen)
}

/// Runs the folder's functions until the worker stops (see [`WorkerConfig`]), and `maintainer`
/// (taking part in the leader election) until then.
pub async fn run(
    pool: DbPool,
    database_url: &str,
    options: &FolderOptions,
    config: WorkerConfig,
    maintainer: Option<Maintainer>,
    shutdown: CancellationToken,
) -> Result<WorkerSummary> {
    let specs = load_and_build(options).await?;
    // an --exit-when-idle worker that runs maintenance stays while maintenance has work due
    let config = WorkerConfig { idle_waits_for_maintenance: maintainer.is_some(), ..config };
    let worker = Worker::new(pool, database_url, config).register_specs(&specs)?;
    let maintenance_stop = CancellationToken::new();
    // the worker's leases are its own to end: this process's rescuer leaves them alone
    let own = [worker.id().clone()];
    let maintenance =
        maintainer.map(|maintainer| tokio::spawn(maintainer.with_own_workers(&own).run(maintenance_stop.clone())));
    let outcome = worker.run(shutdown).await;
    maintenance_stop.cancel();
    if let Some(task) = maintenance {
        let _ = task.await;
    }
    outcome
}

/// Runs the folder's functions against an `asyncflow serve` until the worker stops.
pub async fn run_remote(
    client: RemoteClient,
    options: &FolderOptions,
    config: WorkerConfig,
    shutdown: CancellationToken,
) -> Result<WorkerSummary> {
    let specs = load_and_build(options).await?;
    tracing::info!(server = %client.server(), "worker on a server: claims and reports over HTTP, no maintenance here");
    Worker::remote(client, config).register_specs(&specs)?.run(shutdown).await
}

async fn load_and_build(options: &FolderOptions) -> Result<Vec<FunctionSpec>> {
    let specs = load(options)?;
    for spec in &specs {
        spec.build().await?;
    }
    Ok(specs)
}
