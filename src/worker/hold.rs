//! Held claims: on the database a batch is claimed as row locks in an open transaction
//! (`type_hold__<type>`), and the transaction ends (`type_finish__<type>`) when every call of the
//! batch has replied or the hold window (`WorkerConfig::hold_window`) has passed. The calls that
//! succeeded by then go from pending straight to succeeded in that transaction, and those that
//! went on to a next stage straight to pending at that stage: one row version per task
//! instead of two (claim, then report), and no report of their own; the hold counts them and
//! frees their slots after its commit. The others are claimed as running when it ends and report
//! through the reporter as usual; a reply that came before the end waits for the commit, so that
//! its report finds the task running.
//!
//! A stage's call starts only from a durable completion of the stage before: the finish of a
//! hold that writes a success or an advance commits synchronously (`asyncflow.commit_durably`),
//! and the next stage is claimed anew after it. Only a type with `speculative_chaining` trades
//! that for speed: a call that goes on to a next stage while the hold is open has that stage run
//! at once, by the same executor, in the same hold ([`Hold::chain`]), before the advance is
//! committed; the finish writes the stages passed and the last reply together, so a task whose
//! stages all reply within the window costs one row change, as a 1-stage task does. Each stage
//! passed is checked first as its report would be ([`chainable`]); the finish checks it again.
//!
//! If the finish fails (the connection is lost, say), the calls still running are abandoned
//! (their `lost` token, before the rollback makes their tasks ready again) and the transaction
//! rolls back: nothing of the batch was written, and no report is made for it, as after a lost
//! lease. The connection of a hold is never given back to the pool inside its transaction
//! ([`TxConn`]).

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use deadpool_postgres::Object;
use tokio::sync::{watch, Notify, OwnedSemaphorePermit};
use tokio_util::sync::CancellationToken;

use super::reporter::CallLog;
use super::Shared;
use crate::db::api;
use crate::error::{Error, Result};
use crate::ids::{TaskId, TypeName};
use crate::task::{ClaimedTask, ReportKind, ReportResult};

/// Holds open at once, per worker: each keeps a pooled connection in a transaction.
pub(super) const HOLDS_MAX: usize = 4;

/// One open hold, shared by its finisher and its calls' executors.
pub(super) struct Hold {
    state: Mutex<State>,
    /// When the batch's rows arrived: the time of a reply the hold takes is counted from here.
    started: Instant,
    /// Notified when the last call of the batch has replied.
    all_in: Notify,
    /// None until the hold has ended.
    outcome: watch::Sender<Option<Arc<Outcome>>>,
    /// By the batch's order: each call's `lost` token, made with the hold so that a call whose
    /// executor has not started yet is abandoned too.
    lost: Vec<CancellationToken>,
    /// The worker's pace of held calls, which each call of the batch adds to when it ends (see
    /// [`super::pace`]).
    paces: Arc<super::pace::Paces>,
    /// The type's `speculative_chaining`: whether a call's next stage may run in the hold,
    /// before the advance it comes from is committed ([`Hold::chain`]).
    speculative: bool,
}

struct State {
    open: bool,
    /// Calls of the batch that have not replied.
    waiting: usize,
    /// By the batch's order: the reply (a success or an advance) and time of each call that
    /// replied so while the hold was open.
    taken: Vec<Option<(ReportKind, f64)>>,
    /// The slots of the calls whose replies the hold took, freed when the hold has ended.
    slots: Vec<OwnedSemaphorePermit>,
    /// By the batch's order: the stages each call chained while the hold was open.
    chains: Vec<Option<Chain>>,
}

/// The stages a call of the batch passed in the hold, and where its task is now.
#[derive(Debug, Default)]
struct Chain {
    /// The stage the task is at (its current call's).
    stage: String,
    /// Its context, when a passed stage replaced it.
    context: Option<serde_json::Value>,
    /// When the current call began, in seconds since the batch arrived.
    start: f64,
    /// Per stage passed: the stage, when its call began and what it took, in seconds.
    log: Vec<(String, f64, f64)>,
}

impl Chain {
    /// The finish's `passed` value for this task.
    fn to_json(&self) -> serde_json::Value {
        let ms = |secs: f64| (secs * 1000.0).floor().max(0.0);
        serde_json::json!({
            "stage": self.stage,
            "context": self.context,
            "start_ms": ms(self.start),
            "log": self.log.iter()
                .map(|(stage, start, cost)| serde_json::json!({"stage": stage, "start_ms": ms(*start), "cost_ms": ms(*cost)}))
                .collect::<Vec<_>>(),
        })
    }
}

/// Most stages one call chains in a hold (the schedule log keeps 20 entries).
pub(super) const CHAIN_MAX: usize = 16;

/// Whether an advance to `stage` with `context` may run at once in the hold: it would pass the
/// report's checks (the stage rule, a context that is an object, within the JSON rules and, by
/// a wide margin, within `limit` bytes; JSON text can take up to about six times its length as
/// jsonb). `limit` 0 (not known yet) chains nothing.
pub(super) fn chainable(stage: &str, context: Option<&serde_json::Value>, limit: usize) -> bool {
    if limit == 0 || !crate::function::is_stage_name(stage) {
        return false;
    }
    let Some(context) = context else { return true };
    if !context.is_object() || !json_within_rules(context, 0) {
        return false;
    }
    serde_json::to_vec(context).is_ok_and(|text| text.len().saturating_mul(8) <= limit)
}

/// Whether the hold's finish can write `reply`: a success or an advance that PostgreSQL can
/// hold (no NUL in a stage name, the JSON rules kept). Anything else goes to the reporter,
/// which fails such a task alone; in the finish it would fail the whole batch, whose tasks
/// would then be claimed and called again and again.
fn holdable(reply: &ReportKind) -> bool {
    match reply {
        ReportKind::Succeed { result } => json_within_rules(result, 0),
        ReportKind::Advance { stage, context } => {
            !stage.contains('\0') && context.as_ref().is_none_or(|c| json_within_rules(c, 0))
        }
        _ => false,
    }
}

/// The JSON rules the database keeps (`asyncflow.json_ok`): at most 64 levels of arrays and
/// objects, numbers within ±1e308; and no NUL in a string, which PostgreSQL's JSON cannot hold.
fn json_within_rules(value: &serde_json::Value, depth: usize) -> bool {
    use serde_json::Value;
    match value {
        Value::Null | Value::Bool(_) => true,
        Value::Number(n) => n.as_f64().is_some_and(|f| f.abs() <= 1e308),
        Value::String(s) => !s.contains('\0'),
        Value::Array(items) => depth < 63 && items.iter().all(|v| json_within_rules(v, depth + 1)),
        Value::Object(map) => {
            depth < 63 && map.iter().all(|(k, v)| !k.contains('\0') && json_within_rules(v, depth + 1))
        }
    }
}

enum Outcome {
    /// Committed: the finish's answers, by task id, for the tasks that did not end as asked
    /// (as their call's reply when the hold took it, claimed otherwise).
    Ended(HashMap<String, ReportResult>),
    /// Rolled back: nothing of the batch was written.
    Failed,
}

/// What an executor does with its call's reply once the hold has ended.
pub(super) enum Answer {
    /// The task is claimed (running): report the reply as usual.
    Report,
    /// The hold failed: the task is not this worker's; no report.
    Lost,
}

impl Hold {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn replied(&self, state: &mut State) {
        state.waiting = state.waiting.saturating_sub(1);
        if state.waiting == 0 {
            self.all_in.notify_one();
        }
    }

    /// Whether the hold's finish is over (committed or failed): until then its tasks' rows are
    /// still this hold's, pending and locked, even after it stopped taking replies.
    pub(super) fn has_ended(&self) -> bool {
        self.outcome.borrow().is_some()
    }

    /// Whether a call of the hold that replies "advance" may have its next stage run at once:
    /// the type chains speculatively and the hold is still open.
    pub(super) fn may_chain(&self) -> bool {
        self.speculative && self.lock().open
    }

    /// The call at `index` of the batch, begun at `start` (seconds since the batch arrived),
    /// went on from `ran` to `next` (with `context`, None keeping the current one): if the hold is
    /// still open, it records the stage passed and says the executor may run `next` at once
    /// (true); the finish writes it. Once the hold has ended (false), the advance is reported
    /// as usual.
    pub(super) fn chain(
        &self,
        index: usize,
        ran: &str,
        start: f64,
        next: &str,
        context: Option<&serde_json::Value>,
    ) -> bool {
        let now = self.started.elapsed().as_secs_f64();
        let mut state = self.lock();
        if !state.open || !self.speculative {
            return false;
        }
        let Some(place) = state.chains.get_mut(index) else { return false };
        let chain = place.get_or_insert_with(Chain::default);
        chain.log.push((ran.to_string(), start, (now - start).max(0.0)));
        chain.stage = next.to_string();
        if let Some(context) = context {
            chain.context = Some(context.clone());
        }
        chain.start = now;
        true
    }

    /// Seconds since the batch arrived.
    pub(super) fn elapsed(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    /// The `lost` token of the call at `index` of the batch: fired if the hold fails, or if it
    /// ends with the task refused.
    pub(super) fn lost_token(&self, index: usize) -> CancellationToken {
        self.lost.get(index).cloned().unwrap_or_default()
    }

    /// The call at `index` of the batch replied with `reply`. While the hold is open it takes a
    /// success or an advance and the call's slot, and the executor is done: the hold writes the
    /// reply, counts it and frees the slot when it ends. Any other reply, or any once the hold
    /// has ended (the task is claimed), comes back with the slot.
    pub(super) fn take(
        &self,
        index: usize,
        reply: ReportKind,
        slot: OwnedSemaphorePermit,
    ) -> std::result::Result<(), (ReportKind, OwnedSemaphorePermit)> {
        if !holdable(&reply) {
            return Err((reply, slot));
        }
        let secs = self.started.elapsed().as_secs_f64();
        let mut state = self.lock();
        if !state.open {
            return Err((reply, slot));
        }
        if let Some(place) = state.taken.get_mut(index) {
            *place = Some((reply, secs));
        }
        state.slots.push(slot);
        self.replied(&mut state);
        // every call of a hold ends here or in `ended`, once: the worker's pace counts each
        self.paces.replied();
        Ok(())
    }

    /// The call of `task_id` ended otherwise (a reply the hold did not take, or none). Waits for
    /// the end of the hold and says what becomes of the reply.
    pub(super) async fn ended(&self, task_id: &TaskId) -> Answer {
        self.paces.replied();
        {
            let mut state = self.lock();
            if state.open {
                self.replied(&mut state);
            }
        }
        let mut outcome = self.outcome.subscribe();
        let ended = match outcome.wait_for(Option::is_some).await {
            Ok(seen) => seen.clone(),
            Err(_) => None,
        };
        match ended.as_deref() {
            Some(Outcome::Ended(exceptions)) => match exceptions.get(task_id.as_str()) {
                None => Answer::Report,
                Some(r) if r.accepted => Answer::Report,
                Some(_) => Answer::Lost,
            },
            Some(Outcome::Failed) | None => Answer::Lost,
        }
    }
}

/// A pooled connection inside a transaction. Dropped without [`TxConn::end`] (a future dropped
/// mid-way, say), the connection is taken out of the pool rather than given back in the
/// transaction, with its locks, to the next user.
struct TxConn(Option<Object>);

impl TxConn {
    fn client(&self) -> &Object {
        // Some until `end` or drop, which consume it
        self.0.as_ref().expect("TxConn used after its end")
    }

    /// Ends the transaction with `sql` (commit or rollback); the connection goes back to the
    /// pool only if that worked.
    async fn end(mut self, sql: &str) -> std::result::Result<(), tokio_postgres::Error> {
        let Some(conn) = self.0.take() else { return Ok(()) };
        match conn.batch_execute(sql).await {
            Ok(()) => Ok(()),
            Err(e) => {
                drop(Object::take(conn));
                Err(e)
            }
        }
    }
}

impl Drop for TxConn {
    fn drop(&mut self) {
        if let Some(conn) = self.0.take() {
            drop(Object::take(conn));
        }
    }
}

/// Claims up to `want` tasks of `task_type` in a transaction on a connection of its own. Held
/// tasks come with their hold, which [`finish`] (spawned here) ends; tasks the type claims the
/// usual way (a concurrency limit, a pipeline watching it) come committed and without a hold.
pub(super) async fn claim(
    shared: &Arc<Shared>,
    conn: Object,
    task_type: &TypeName,
    want: usize,
    permit: OwnedSemaphorePermit,
    speculative_chaining: bool,
) -> Result<(Vec<ClaimedTask>, Option<Arc<Hold>>)> {
    let conn = TxConn(Some(conn));
    // One round trip: the client sends both before reading an answer, `begin` first (a hold
    // that ran outside the transaction, were `begin` to fail, locked nothing and changed nothing).
    let held = tokio::try_join!(
        async { conn.client().batch_execute("begin").await.map_err(Error::from_db) },
        api::hold_tasks(conn.client(), task_type, &shared.worker_id, want as i32),
    )
    .map(|((), rows)| rows);
    let rows = match held {
        Ok(rows) => rows,
        Err(e) => {
            let _ = conn.end("rollback").await;
            return Err(e);
        }
    };
    if rows.is_empty() || rows.iter().any(|(_, held)| !held) {
        // nothing claimed, or claimed the usual way: the claim is the commit
        conn.end("commit").await.map_err(Error::from_db)?;
        return Ok((rows.into_iter().map(|(task, _)| task).collect(), None));
    }
    let tasks: Vec<ClaimedTask> = rows.into_iter().map(|(task, _)| task).collect();
    let hold = Arc::new(Hold {
        state: Mutex::new(State {
            open: true,
            waiting: tasks.len(),
            taken: (0..tasks.len()).map(|_| None).collect(),
            slots: Vec::with_capacity(tasks.len()),
            chains: (0..tasks.len()).map(|_| None).collect(),
        }),
        started: Instant::now(),
        all_in: Notify::new(),
        outcome: watch::channel(None).0,
        lost: tasks.iter().map(|_| CancellationToken::new()).collect(),
        paces: shared.paces.clone(),
        speculative: speculative_chaining,
    });
    let fences: Vec<(TaskId, i64, CallLog)> =
        tasks.iter().map(|t| (t.task_id.clone(), t.claim_seq, CallLog::from(t))).collect();
    // the calls in flight: this batch's slots are reserved already (see Shared::reserve)
    let fitted = shared.paces.window(shared.active.load(Ordering::SeqCst), Instant::now());
    let window = tasks.iter().map(lease_quarter).min().unwrap_or(fitted).min(fitted);
    shared.tracker.spawn(finish(shared.clone(), conn, hold.clone(), task_type.clone(), fences, window, permit));
    Ok((tasks, Some(hold)))
}

/// A quarter of the task's lease: the hold ends well before a heartbeat would be due.
fn lease_quarter(task: &ClaimedTask) -> Duration {
    let ms = (task.lease_until - task.claimed_at).num_milliseconds().max(0) as u64;
    Duration::from_millis(ms / 4)
}

/// Ends the hold once every call has replied or `window` has passed.
async fn finish(
    shared: Arc<Shared>,
    conn: TxConn,
    hold: Arc<Hold>,
    task_type: TypeName,
    fences: Vec<(TaskId, i64, CallLog)>,
    window: Duration,
    permit: OwnedSemaphorePermit,
) {
    let _ = tokio::time::timeout(window, hold.all_in.notified()).await;
    let (taken, mut slots, chains) = {
        let mut state = hold.lock();
        state.open = false;
        (std::mem::take(&mut state.taken), std::mem::take(&mut state.slots), std::mem::take(&mut state.chains))
    };
    let lost = &hold.lost;
    let passed: Vec<Option<serde_json::Value>> = chains.iter().map(|c| c.as_ref().map(Chain::to_json)).collect();
    let tasks: Vec<(&TaskId, i64, Option<&ReportKind>, Option<f64>, Option<&serde_json::Value>)> = fences
        .iter()
        .zip(&taken)
        .zip(&passed)
        .map(|(((id, seq, _), reply), chain)| {
            (id, *seq, reply.as_ref().map(|r| &r.0), reply.as_ref().map(|r| r.1), chain.as_ref())
        })
        .collect();
    let outcome = match api::finish_held(conn.client(), &task_type, &shared.worker_id, &tasks).await {
        // the connection goes back to the pool at once: the reports below may need one
        Ok(answers) => match conn.end("commit").await {
            Ok(()) => Ok(answers),
            Err(e) => {
                abandon(lost);
                Err(Error::from_db(e))
            }
        },
        Err(e) => {
            // the calls still running hold nothing any more: abandoned before the rollback
            // makes their tasks ready again (and this worker may claim them anew)
            abandon(lost);
            let _ = conn.end("rollback").await;
            Err(e)
        }
    };
    let outcome = match outcome {
        Ok(answers) => Outcome::Ended(answers.into_iter().map(|r| (r.task_id.clone(), r)).collect()),
        Err(e) => {
            tracing::warn!(task_type = %task_type, error = %e, count = tasks.len(), "held claim failed: its tasks are ready again");
            shared.stats.claimed.fetch_sub(fences.len() as u64, Ordering::Relaxed);
            Outcome::Failed
        }
    };
    // A task the finish refused (its row could not be matched: not this transaction's lock)
    // is not this worker's: its call, if still running, is abandoned.
    if let Outcome::Ended(exceptions) = &outcome {
        let mut refused = 0;
        for ((id, _, _), token) in fences.iter().zip(lost) {
            if exceptions.get(id.as_str()).is_some_and(|r| !r.accepted) {
                token.cancel();
                refused += 1;
            }
        }
        if refused > 0 {
            tracing::warn!(task_type = %task_type, count = refused, "held tasks refused by the finish: left ready");
        }
    }
    let outcome = Arc::new(outcome);
    hold.outcome.send_replace(Some(outcome.clone()));
    drop(permit);

    // The replies the hold took: counted here, their slots freed; one whose task was claimed
    // instead (a result too large, a bad next stage) is reported as usual, and says why.
    let (mut succeeded, mut advanced) = (0u64, 0u64);
    let mut to_report = Vec::new();
    for ((id, seq, call), (reply, chain)) in fences.iter().zip(taken.into_iter().zip(&chains)) {
        // the stages chained were written with the task, unless it was refused
        if let (Some(chain), Outcome::Ended(exceptions)) = (chain, &*outcome) {
            if exceptions.get(id.as_str()).is_none_or(|r| r.accepted) {
                advanced += chain.log.len() as u64;
            }
        }
        let Some((reply, _)) = reply else { continue };
        match &*outcome {
            Outcome::Ended(exceptions) => match exceptions.get(id.as_str()) {
                None if matches!(reply, ReportKind::Succeed { .. }) => succeeded += 1,
                None => advanced += 1,
                // logged at the stage the reply came from: a chained one's, if any
                Some(r) if r.accepted => {
                    let call = chain.as_ref().map_or_else(|| call.clone(), |c| call.chained(&c.stage));
                    to_report.push((id, *seq, call, reply))
                }
                Some(_) => {
                    shared.stats.refused.fetch_add(1, Ordering::Relaxed);
                }
            },
            Outcome::Failed => {}
        }
    }
    shared.stats.succeeded.fetch_add(succeeded, Ordering::Relaxed);
    shared.stats.advanced.fetch_add(advanced, Ordering::Relaxed);
    // the slots of the written replies are free now (slots are alike: any of them will do);
    // those of the replies still to report, once reported, all at once
    let kept = slots.split_off(slots.len().saturating_sub(to_report.len()));
    let freed = slots.len();
    drop(slots);
    shared.calls_ended(task_type.as_str(), freed);
    if !kept.is_empty() {
        let shared = &shared;
        let reports = to_report.into_iter().map(|(id, seq, call, reply)| async move {
            // the hold took only replies without progress still to send (see executor::run)
            super::reporter::report_reply(shared, id, seq, &call, reply, None).await
        });
        futures_util::future::join_all(reports).await;
        let freed = kept.len();
        drop(kept);
        shared.calls_ended(task_type.as_str(), freed);
    }
}

/// Abandons the calls of a failed hold that are still running (and those not yet started).
fn abandon(lost: &[CancellationToken]) {
    for token in lost {
        token.cancel();
    }
}
