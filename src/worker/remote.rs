//! The worker on an `asyncflow serve` ([`super::Backend::Server`]): the HTTP worker protocol
//! through the one HTTP client of the crate ([`RemoteClient`]), and what keeps it from losing
//! anything.
//!
//! A hold that waits ([`HOLD_WAIT`], `wait` in the hold's body) stays open on the server until it
//! has claimed ready work, heard through the server's LISTEN connection. A server that refuses
//! the field (older than the long-poll) is asked without it from then on, and the worker polls as
//! before. A waiting hold given up (the worker stopping) may have claimed tasks: they are looked
//! for, and handed back, as after a lost answer.
//!
//! What keeps it from losing anything:
//! - Failures are retried by the callers: a producer backs off and holds again, the reporter
//!   retries a chunk of reports until the server accepts or refuses it. A refusal (the fence did
//!   not match, HTTP 409 on the single-report routes) abandons the call, as in database mode.
//! - A hold whose answer was lost (server killed, proxy error) may have claimed tasks that no
//!   one runs. Before the next hold of that type the client asks the server which tasks it holds
//!   (`/v1/worker/held`) and hands back, fenced, every one it does not know (`release`: ready at
//!   once, the try given back). Until that is done the worker does not count as idle. Leases
//!   running out (the rescuer, in `asyncflow serve`'s database's `asyncflow maintain`) remain the
//!   backstop.
//! - Lease times are moved to this machine's clock (minus the skew seen at the last hold), so
//!   heartbeats are timed right when the worker's clock and the database's differ.
//!
//! The bodies sent and read are the wire types of [`crate::protocol`], the server's own. A
//! request that gets no usable answer fails with a [`TransportError`], whose
//! [`may_have_applied`](TransportError::may_have_applied) decides whether a lost hold answer
//! needs the look at what the worker holds.

use std::borrow::Cow;
use std::collections::{BTreeSet, HashSet};
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::Utc;
use reqwest::Method;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::client::remote::REQUEST_TIMEOUT;
use crate::client::{Client, RemoteClient};
use crate::db::listen::Cancel;
use crate::error::{with_causes, Error, Result, Transport, TransportError};
use crate::ids::{TaskId, TypeName, WorkerId};
use crate::protocol::{
    CancelNotice, Held, HeldRequest, HeldTasks, HoldRequest, NextDue, ReportBatchRequest, ReportResults,
    HOLD_LIMIT_MAX, REPORTS_PER_CALL_MAX,
};
use crate::task::{ClaimedTask, Report, ReportKind, ReportResult};
use crate::task_type::{TaskTypeSettings, TaskTypeUpdate};

/// Largest report request body; half the server's default body limit.
pub(super) const REPORT_BYTES_MAX: usize = 1024 * 1024;
/// How long a hold waits on the server for ready work (a long-poll: the server answers as soon
/// as it has claimed some). Below the client's request timeout, with room for the claim itself,
/// and below the `proxy_read_timeout` of a proxy in front (nginx: 60 s by default).
pub const HOLD_WAIT: Duration = Duration::from_secs(20);
const _: () = assert!(HOLD_WAIT.as_secs() + 5 <= REQUEST_TIMEOUT.as_secs());
/// How long before the answer of a hold that waited its claim is taken to have run (see
/// `ServerBackend::hold`): an overestimate of the skew by up to this brings heartbeats forward.
const CLAIM_LATENCY_MARGIN_MS: i64 = 100;
/// How long one cancel stream lasts (the server ends it), and how much longer the request may
/// take before the worker gives it up.
const CANCELS_WAIT: Duration = Duration::from_secs(60);
const CANCELS_SLACK: Duration = Duration::from_secs(20);
/// The longest line a cancel stream may send.
const CANCEL_LINE_MAX: usize = 64 * 1024;
/// How long the worker keeps trying to register its types at start before giving up.
const STARTUP_PATIENCE: Duration = Duration::from_secs(30);

/// A worker's side of an `asyncflow serve`'s worker protocol: the HTTP client
/// ([`RemoteClient`], the one the admin [`crate::client::Client`] uses too) and what this worker
/// knows of its claims there (cheap to clone).
#[derive(Clone)]
pub struct ServerBackend {
    http: RemoteClient,
    inner: Arc<Inner>,
}

struct Inner {
    /// Tasks claimed and not yet reported for good: what this worker knows it holds.
    outstanding: Mutex<HashSet<String>>,
    /// Types whose last hold failed after it may have reached the server.
    unswept: Mutex<BTreeSet<String>>,
    /// The database's clock minus this machine's, in milliseconds, as of the last hold.
    skew_ms: AtomicI64,
    /// False once the server refused a hold's `wait` (a server older than the long-poll).
    waits: AtomicBool,
}

impl ServerBackend {
    /// The worker protocol through `http`.
    pub fn new(http: RemoteClient) -> Self {
        ServerBackend {
            http,
            inner: Arc::new(Inner {
                outstanding: Mutex::new(HashSet::new()),
                unswept: Mutex::new(BTreeSet::new()),
                skew_ms: AtomicI64::new(0),
                waits: AtomicBool::new(true),
            }),
        }
    }

    /// The admin client of the same server.
    pub(super) fn client(&self) -> Client {
        Client::Server(self.http.clone())
    }

    /// Follows the server's cancel stream (`GET /v1/worker/cancels`) for `types` until `stop`,
    /// passing each cancel on to `cancels` as the database's listener does ([`Cancel`]), so the
    /// calls stop as a database worker's do. A stream that
    /// ends is opened again at once, one that fails after a pause; cancels sent meanwhile are
    /// found by the heartbeats.
    pub(super) async fn follow_cancels(
        self,
        types: Vec<String>,
        cancels: tokio::sync::broadcast::Sender<Cancel>,
        stop: tokio_util::sync::CancellationToken,
    ) {
        let url = format!("{}/v1/worker/cancels", self.http.server());
        let query = [("types", types.join(",")), ("wait", CANCELS_WAIT.as_secs().to_string())];
        let mut failures: u32 = 0;
        loop {
            let followed = tokio::select! {
                _ = stop.cancelled() => return,
                r = self.follow_cancel_stream(&url, &query, &cancels) => r,
            };
            let pause = match followed {
                Ok(()) => {
                    failures = 0;
                    Duration::ZERO
                }
                Err(e) => {
                    failures = failures.saturating_add(1);
                    if failures == 1 {
                        tracing::debug!(error = %e, "cancel stream lost; the heartbeats find cancels meanwhile");
                    }
                    Duration::from_millis((250u64 << failures.min(6)).min(10_000))
                }
            };
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(pause) => {}
            }
        }
    }

    /// One cancel stream, to its end: Ok when the server ended it (or ended it at once: a
    /// server without a LISTEN connection), an error when it failed.
    async fn follow_cancel_stream(
        &self,
        url: &str,
        query: &[(&str, String)],
        cancels: &tokio::sync::broadcast::Sender<Cancel>,
    ) -> std::result::Result<(), String> {
        let request = self.http.request(Method::GET, url).query(query).timeout(CANCELS_WAIT + CANCELS_SLACK);
        let mut response = request.send().await.map_err(|e| with_causes(&e))?;
        if !response.status().is_success() {
            return Err(format!("GET {url}: {}", response.status()));
        }
        let started = Instant::now();
        let mut pending: Vec<u8> = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| with_causes(&e))? {
            pending.extend_from_slice(&chunk);
            while let Some(end) = pending.iter().position(|b| *b == b'\n') {
                let text: Vec<u8> = pending.drain(..=end).collect();
                let notice: CancelNotice = serde_json::from_slice(&text)
                    .map_err(|e| format!("GET {url}: a line that is not a cancel notice: {e}"))?;
                if let (Some(task_id), Some(claim_seq)) = (notice.task_id, notice.claim_seq) {
                    let task_id =
                        TaskId::parse(&task_id).map_err(|e| format!("GET {url}: a cancel notice's task id: {e}"))?;
                    let _ = cancels.send(Cancel { task_id, claim_seq });
                }
            }
            if pending.len() > CANCEL_LINE_MAX {
                return Err(format!("GET {url}: a line longer than {CANCEL_LINE_MAX} bytes"));
            }
        }
        // a stream the server ended at once (no LISTEN behind it) is not opened again at once
        if started.elapsed() < Duration::from_secs(1) {
            return Err(format!("GET {url}: the server ended the stream at once"));
        }
        Ok(())
    }

    /// The server's base URL.
    pub fn server(&self) -> &str {
        self.http.server()
    }

    /// One worker protocol request to `path` (a fixed path of `/v1/worker/`), with `body` as
    /// JSON; see [`RemoteClient::call`].
    async fn call<T: DeserializeOwned>(&self, method: Method, path: &str, body: Option<&impl Serialize>) -> Result<T> {
        self.http.call(method, &format!("{}{path}", self.http.server()), None::<&()>, body).await
    }

    pub(super) async fn register_task_type(
        &self,
        task_type: &TypeName,
        settings: &TaskTypeUpdate,
    ) -> Result<TaskTypeSettings> {
        let started = Instant::now();
        let mut failures: u32 = 0;
        loop {
            match self.client().register_type(task_type.as_str(), settings).await {
                // not reached, or no answer from it: it may be starting (an unreadable answer is
                // not a server this worker can use, and waiting would not change it)
                Err(Error::Transport(e)) if e.kind != Transport::Unreadable => {
                    if started.elapsed() >= STARTUP_PATIENCE {
                        return Err(Error::Config(format!(
                            "server {} unreachable for {STARTUP_PATIENCE:?}: {e}",
                            self.http.server()
                        )));
                    }
                    failures += 1;
                    let wait = Duration::from_millis((100u64 << failures.min(5)).min(2_000));
                    tracing::warn!(server = %self.http.server(), error = %e, retry_in = ?wait, "cannot reach the server");
                    tokio::time::sleep(wait).await;
                }
                other => return other,
            }
        }
    }

    pub(super) async fn claim(&self, task_type: &TypeName, owner: &WorkerId, want: usize) -> Result<Vec<ClaimedTask>> {
        self.hold(task_type, owner, want, None).await
    }

    /// Whether the server takes holds that wait (until it refuses one).
    pub(super) fn waits(&self) -> bool {
        self.inner.waits.load(Ordering::Relaxed)
    }

    /// Claims up to `want` tasks of `task_type`, waiting up to `wait` on the server for some when
    /// none is ready (a long-poll). None when the server does not take holds that wait (it is
    /// not asked again).
    pub(super) async fn claim_waiting(
        &self,
        task_type: &TypeName,
        owner: &WorkerId,
        want: usize,
        wait: Duration,
    ) -> Result<Option<Vec<ClaimedTask>>> {
        match self.hold(task_type, owner, want, Some(wait)).await {
            Err(Error::InvalidArgument(text)) if text.contains("unknown field `wait`") => {
                self.inner.waits.store(false, Ordering::Relaxed);
                tracing::info!(server = %self.http.server(), "the server's holds do not wait: polling each type instead");
                Ok(None)
            }
            other => other.map(Some),
        }
    }

    /// A waiting hold of `task_type` was given up before its answer came: it may have claimed
    /// tasks, looked for before the type's next hold and when the worker ends
    /// ([`ServerBackend::sweep_abandoned`]).
    pub(super) fn abandoned(&self, task_type: &TypeName) {
        lock(&self.inner.unswept).insert(task_type.to_string());
    }

    /// Hands back what holds whose answers never came claimed (see [`ServerBackend::abandoned`]).
    pub(super) async fn sweep_abandoned(&self, owner: &WorkerId) {
        let types: Vec<String> = lock(&self.inner.unswept).iter().cloned().collect();
        for name in types {
            let Ok(task_type) = TypeName::new(&name) else { continue };
            match self.sweep(&task_type, owner).await {
                Ok(()) => {
                    lock(&self.inner.unswept).remove(&name);
                }
                Err(e) => {
                    tracing::warn!(task_type = %name, error = %e, "could not look for tasks a lost hold claimed; their leases will run out")
                }
            }
        }
    }

    async fn hold(
        &self,
        task_type: &TypeName,
        owner: &WorkerId,
        want: usize,
        wait: Option<Duration>,
    ) -> Result<Vec<ClaimedTask>> {
        if lock(&self.inner.unswept).contains(task_type.as_str()) {
            self.sweep(task_type, owner).await?;
            lock(&self.inner.unswept).remove(task_type.as_str());
        }
        let limit = want.clamp(1, HOLD_LIMIT_MAX as usize) as i32;
        let body = HoldRequest {
            task_type: task_type.to_string(),
            worker_id: owner.to_string(),
            limit,
            wait: wait.map(|w| w.as_secs_f64()),
        };
        let sent = Utc::now();
        let held: Held = match self.call(Method::POST, "/v1/worker/hold", Some(&body)).await {
            Ok(held) => held,
            Err(e) => {
                // the hold may have claimed tasks whose answer never came: look before the next
                if may_have_applied(&e) {
                    lock(&self.inner.unswept).insert(task_type.to_string());
                }
                return Err(e);
            }
        };
        let mut tasks = held.tasks;
        if let Some(first) = tasks.first() {
            // claimed_at is the database's clock when the claim ran, after this request left:
            // the skew is overestimated by the latency, which only brings heartbeats forward. A
            // hold that waited claimed at the end of its wait, just before its answer came: the
            // answer's time less a margin for its latency stands for when it left.
            let left = match wait {
                Some(_) => (Utc::now() - chrono::Duration::milliseconds(CLAIM_LATENCY_MARGIN_MS)).max(sent),
                None => sent,
            };
            self.inner.skew_ms.store((first.claimed_at - left).num_milliseconds(), Ordering::Relaxed);
        }
        let skew = chrono::Duration::milliseconds(self.inner.skew_ms.load(Ordering::Relaxed));
        let mut outstanding = lock(&self.inner.outstanding);
        for task in &mut tasks {
            // checked: an answer with a time near chrono's limits would overflow (and panic)
            task.lease_until = task.lease_until.checked_sub_signed(skew).unwrap_or(task.lease_until);
            task.claimed_at = task.claimed_at.checked_sub_signed(skew).unwrap_or(task.claimed_at);
            outstanding.insert(task.task_id.to_string());
        }
        Ok(tasks)
    }

    pub(super) async fn report(&self, owner: &WorkerId, reports: &[Report]) -> Result<Vec<ReportResult>> {
        let body = ReportBatchRequest { worker_id: owner.to_string(), reports: Cow::Borrowed(reports) };
        let answer: Result<ReportResults> = self.call(Method::POST, "/v1/worker/report", Some(&body)).await;
        let results = match answer {
            Ok(r) if r.results.len() == reports.len() => r.results,
            Ok(r) => {
                let what = format!("POST {}/v1/worker/report", self.http.server());
                let detail = format!("{} results for {} reports", r.results.len(), reports.len());
                return Err(TransportError::new(Transport::Unreadable, what, detail).into());
            }
            Err(e) => {
                // Refused whole: the reporter halves a chunk of several, and replaces a refused
                // reply by a failure of its task; a report refused alone and not replaced ends
                // its call.
                if e.is_client_error() && reports.len() == 1 && !reports[0].kind.replaced_when_refused() {
                    lock(&self.inner.outstanding).remove(reports[0].task_id.as_str());
                }
                return Err(e);
            }
        };
        let skew = chrono::Duration::milliseconds(self.inner.skew_ms.load(Ordering::Relaxed));
        let mut outstanding = lock(&self.inner.outstanding);
        Ok(reports
            .iter()
            .zip(results)
            .map(|(report, r)| {
                // A report answered for good ends the call; an accepted heartbeat does not.
                if !r.accepted || !matches!(report.kind, ReportKind::Heartbeat) {
                    outstanding.remove(report.task_id.as_str());
                }
                ReportResult {
                    task_id: r.task_id,
                    accepted: r.accepted,
                    status: r.status,
                    lease_until: r.lease_until.map(|t| t.checked_sub_signed(skew).unwrap_or(t)),
                    failed_instead: false,
                }
            })
            .collect())
    }

    /// Writes this worker's heartbeat row through the server (`POST /v1/worker/presence`).
    pub(super) async fn presence(&self, row: &crate::db::api::WorkerRow) -> Result<()> {
        let body = crate::protocol::PresenceRequest {
            worker_id: row.id.clone(),
            host: row.host.clone(),
            pid: row.pid,
            types: row.types.clone(),
            in_flight: row.in_flight,
            started_at: row.started_at,
        };
        let _: crate::protocol::PresenceAnswer = self.call(Method::POST, "/v1/worker/presence", Some(&body)).await?;
        Ok(())
    }

    /// Saves a running call's context through the server (`POST /v1/worker/checkpoint`): false
    /// when the claim is stale (409).
    pub(super) async fn checkpoint(&self, task_id: &str, claim_seq: i64, context: &serde_json::Value) -> Result<bool> {
        let body =
            crate::protocol::CheckpointRequest { task_id: task_id.to_string(), claim_seq, context: context.clone() };
        let answer: Result<crate::protocol::CheckpointAccepted> =
            self.call(Method::POST, "/v1/worker/checkpoint", Some(&body)).await;
        match answer {
            Ok(_) => Ok(true),
            Err(crate::error::Error::StaleFence(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Removes this worker's heartbeat row through the server (`POST /v1/worker/gone`).
    pub(super) async fn gone(&self, id: &str) -> Result<()> {
        let body = crate::protocol::GoneRequest { worker_id: id.to_string() };
        let _: crate::protocol::PresenceAnswer = self.call(Method::POST, "/v1/worker/gone", Some(&body)).await?;
        Ok(())
    }

    pub(super) async fn next_due(&self, task_type: &TypeName) -> Result<Option<Duration>> {
        let url = format!("{}/v1/worker/next-due", self.http.server());
        let query = [("type", task_type.as_str())];
        let due: NextDue = self.http.call(Method::GET, &url, Some(&query), None::<&()>).await?;
        Ok(due.wait_ms.map(|ms| Duration::from_millis(ms.max(0) as u64)))
    }

    /// Hands back the tasks of `task_type` the server says this worker holds but the worker does
    /// not know: claimed by a hold whose answer was lost.
    async fn sweep(&self, task_type: &TypeName, owner: &WorkerId) -> Result<()> {
        let body = HeldRequest { task_type: task_type.to_string(), worker_id: owner.to_string() };
        let held: HeldTasks = self.call(Method::POST, "/v1/worker/held", Some(&body)).await?;
        let strays: Vec<Report> = {
            let known = lock(&self.inner.outstanding);
            held.tasks
                .into_iter()
                .filter(|t| !known.contains(t.task_id.as_str()))
                .map(|t| Report::new(t.task_id, t.claim_seq, ReportKind::Release))
                .collect()
        };
        if strays.is_empty() {
            return Ok(());
        }
        let mut released = 0;
        for range in chunks_by_size(&strays, REPORTS_PER_CALL_MAX, REPORT_BYTES_MAX) {
            released += self.report(owner, &strays[range]).await?.iter().filter(|r| r.accepted).count();
        }
        tracing::warn!(task_type = %task_type, released, "handed back tasks claimed by a hold whose answer was lost");
        Ok(())
    }

    /// False while a hold's answer was lost and what it may have claimed is not yet looked into.
    pub(super) fn settled(&self) -> bool {
        lock(&self.inner.unswept).is_empty()
    }
}

/// Whether a failed request may still have changed something on the server (see
/// [`TransportError::may_have_applied`]); an answered refusal changed nothing.
fn may_have_applied(e: &Error) -> bool {
    matches!(e, Error::Transport(t) if t.may_have_applied())
}

/// Cuts `reports` into consecutive ranges of at most `count` reports and about `bytes` bytes
/// of JSON (a report larger than that goes alone).
pub(super) fn chunks_by_size(reports: &[Report], count: usize, bytes: usize) -> Vec<Range<usize>> {
    struct Counter(usize);
    impl std::io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut ranges = Vec::new();
    let (mut start, mut size) = (0, 0);
    for (i, report) in reports.iter().enumerate() {
        let mut counter = Counter(1);
        let _ = serde_json::to_writer(&mut counter, report);
        if i > start && (i - start >= count || size + counter.0 > bytes) {
            ranges.push(start..i);
            (start, size) = (i, 0);
        }
        size += counter.0;
    }
    if start < reports.len() {
        ranges.push(start..reports.len());
    }
    ranges
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn report(n: u32, context_bytes: usize) -> Report {
        Report::new(
            TaskId::parse(&format!("t-1-{n}")).unwrap(),
            1,
            ReportKind::Advance { stage: "s".into(), context: Some(json!({"pad": "x".repeat(context_bytes)})) },
        )
    }

    #[test]
    fn reports_are_cut_by_count_and_by_size_keeping_their_order() {
        let small: Vec<Report> = (1..=5).map(|n| report(n, 10)).collect();
        assert_eq!(chunks_by_size(&small, 2, 1 << 20), vec![0..2, 2..4, 4..5]);
        assert_eq!(chunks_by_size(&small, 1000, 1 << 20), vec![0..5]);
        let big: Vec<Report> = (1..=4).map(|n| report(n, 400)).collect();
        assert_eq!(chunks_by_size(&big, 1000, 1000), vec![0..2, 2..4]);
        // one report over the limit goes alone
        assert_eq!(chunks_by_size(&big, 1000, 100), vec![0..1, 1..2, 2..3, 3..4]);
        assert!(chunks_by_size(&[], 10, 10).is_empty());
    }

    #[test]
    fn only_a_request_that_never_left_surely_changed_nothing() {
        let refused = Error::from(TransportError::new(Transport::NotSent, "p", "refused"));
        assert!(!may_have_applied(&refused));
        let unreadable = TransportError::new(Transport::Unreadable, "p", "a 200 with an unreadable body");
        assert!(may_have_applied(&unreadable.into()));
        let gateway = Error::from(TransportError::new(Transport::Status(502), "p", "HTTP 502"));
        assert!(may_have_applied(&gateway));
        assert!(!may_have_applied(&Error::InvalidArgument("refused".into())));
    }
}
