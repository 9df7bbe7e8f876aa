//! The progress part of the SQL seam: progress and checkpoints of a running call.

use serde_json::Value;

use super::{get, query_one, status};
use crate::db::GenericClient;
use crate::error::Result;
use crate::task::TaskStatus;

/// `asyncflow.set_progress`: sets a running task's progress, fenced by the claim's `claim_seq`.
/// Whether it was applied, and the task's status (`Error::UnknownTask` when there is no such
/// task).
pub async fn set_progress<C: GenericClient>(
    c: &C,
    task_id: &str,
    claim_seq: i64,
    progress: &Value,
) -> Result<(bool, Option<TaskStatus>)> {
    let row = query_one(
        c,
        "select accepted, status::text as status from asyncflow.set_progress($1, $2, $3)",
        &[&task_id, &claim_seq, progress],
    )
    .await?;
    Ok((get(&row, "accepted")?, status(get(&row, "status")?)?))
}

/// `asyncflow.checkpoint_task`: the running task's whole context becomes `context` (a retry of
/// the stage starts from it), fenced by the claim's `claim_seq`: false, and nothing changed, when
/// the task is no longer running under that claim (`Error::UnknownTask` when there is no such
/// task).
pub async fn checkpoint_task<C: GenericClient>(c: &C, task_id: &str, claim_seq: i64, context: &Value) -> Result<bool> {
    let row =
        query_one(c, "select asyncflow.checkpoint_task($1, $2, $3) as accepted", &[&task_id, &claim_seq, context])
            .await?;
    get(&row, "accepted")
}
