//! The reporter (river's completer): replies from every executor go through one channel and are
//! written in batches, one `report_tasks` statement for whatever has queued up, so a busy worker
//! makes one round trip for many tasks. A database error is retried with back-off; a report is
//! never dropped while the worker runs.

use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::db::{api, DbPool};
use crate::ids::WorkerId;
use crate::task::{Report, ReportResult};

/// Most reports in one statement.
const BATCH_MAX: usize = 1000;

type Pending = (Report, oneshot::Sender<ReportResult>);

/// Handle for sending reports.
#[derive(Clone)]
pub(super) struct Reporter {
    tx: mpsc::UnboundedSender<Pending>,
}

impl Reporter {
    /// Sends a batch of reports and waits for their results (None when the worker is stopping
    /// and the report could not be written).
    pub(super) async fn send(&self, reports: Vec<Report>) -> Vec<Option<ReportResult>> {
        let mut waits = Vec::with_capacity(reports.len());
        for r in reports {
            let (tx, rx) = oneshot::channel();
            if self.tx.send((r, tx)).is_err() {
                waits.push(None);
            } else {
                waits.push(Some(rx));
            }
        }
        let mut results = Vec::with_capacity(waits.len());
        for w in waits {
            results.push(match w {
                Some(rx) => rx.await.ok(),
                None => None,
            });
        }
        results
    }
}

/// Starts the reporter. After `stop` fires it writes what is queued and ends.
pub(super) fn spawn(
    pool: DbPool,
    worker: WorkerId,
    stop: CancellationToken,
) -> (Reporter, tokio::task::JoinHandle<()>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let task = tokio::spawn(run(pool, worker, rx, stop));
    (Reporter { tx }, task)
}

async fn run(pool: DbPool, worker: WorkerId, mut rx: mpsc::UnboundedReceiver<Pending>, stop: CancellationToken) {
    loop {
        let first = tokio::select! {
            biased;
            item = rx.recv() => item,
            _ = stop.cancelled() => rx.try_recv().ok(),
        };
        let Some(first) = first else { return };
        let mut batch = vec![first];
        while batch.len() < BATCH_MAX {
            match rx.try_recv() {
                Ok(item) => batch.push(item),
                Err(_) => break,
            }
        }
        write(&pool, &worker, batch, &stop).await;
    }
}

async fn write(pool: &DbPool, worker: &WorkerId, batch: Vec<Pending>, stop: &CancellationToken) {
    let reports: Vec<Report> = batch.iter().map(|(r, _)| r.clone()).collect();
    let mut failures: u32 = 0;
    loop {
        let outcome = match pool.get().await {
            Ok(client) => api::report_tasks(&client, worker, &reports, None).await,
            Err(e) => Err(e.into()),
        };
        match outcome {
            Ok(results) => {
                for ((_, tx), result) in batch.into_iter().zip(results) {
                    let _ = tx.send(result);
                }
                return;
            }
            Err(e) if e.is_client_error() => {
                // A malformed report would be refused every time: answer each one as refused.
                tracing::error!(error = %e, "reports refused as malformed");
                for (report, tx) in batch {
                    let _ = tx.send(ReportResult {
                        task_id: report.task_id.to_string(),
                        accepted: false,
                        status: None,
                        lease_until: None,
                    });
                }
                return;
            }
            Err(e) if stop.is_cancelled() && failures >= 5 => {
                // Stopping and the database stays away: the leases will run out and the
                // rescuer will queue these tasks again.
                tracing::error!(error = %e, count = batch.len(), "giving up on reports at shutdown");
                return;
            }
            Err(e) => {
                failures += 1;
                let wait = Duration::from_millis((50u64 << failures.min(8)).min(5_000));
                tracing::warn!(error = %e, retry_in = ?wait, "writing reports failed; retrying");
                tokio::time::sleep(wait).await;
            }
        }
    }
}
