//! Callback delivery: a run's outcome to its `notify_url`, and callback nodes' POSTs.
//!
//! ```text
//!   claim_callbacks (due, SKIP LOCKED, attempt + 1, held for the lease)
//!        -> POST url, JSON body, signed -> 2xx: delivered
//!                                       -> else: due again in min(2^(n-1), max) s,
//!                                                or failed once past give_up_at
//!        -> target refused by --callback-allow: failed at once (no attempt would differ)
//!   record_callback (fenced by the attempt number)
//! ```
//!
//! Each request carries `Content-Type: application/json`, `X-Asyncflow-Callback-Id`,
//! `X-Asyncflow-Attempt` and, when a secret is configured, `X-Asyncflow-Signature:
//! sha256=<hex HMAC-SHA256(secret, body)>` (the same scheme as HTTP function calls, see
//! [`crate::signature::verify`]). Delivery is at least once: a receiver dedups on the
//! callback id (also in the body as `callback_id`). Every attempt is recorded in the callback's
//! log, and a failed run calls back like any other. Where callbacks may connect is
//! [`CallbackConfig::targets`] (`--callback-allow`, see [`super::targets`]): a refused target
//! fails the callback at its first attempt, recorded with why (a callback node fails with it),
//! since every later attempt would be refused the same way until the operator changes the
//! setting; retrying it only delayed the failure by a day (give_up_at).

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use futures_util::StreamExt;

use super::targets::{Refused, TargetResolver, Targets};
use crate::db::{api, DbPool};
use crate::error::{find_cause, with_causes, Error, Result};
use crate::maintenance::{RunOnceReport, Service};
use crate::run::{CallbackDelivery, CallbackOutcome};
use crate::signature::{sign, SIGNATURE_HEADER};
use futures_util::future::BoxFuture;

/// Header carrying the callback id.
pub const CALLBACK_ID_HEADER: &str = "x-asyncflow-callback-id";
/// Header carrying the attempt number.
pub const ATTEMPT_HEADER: &str = "x-asyncflow-attempt";

/// Callback delivery settings.
#[derive(Debug, Clone)]
pub struct CallbackConfig {
    /// HMAC-SHA256 key for the signature header; unsigned when None.
    pub secret: Option<String>,
    /// Time between passes.
    pub interval: Duration,
    /// One request's time limit.
    pub timeout: Duration,
    /// Deliveries claimed per statement.
    pub batch: i32,
    /// Deliveries in flight at once.
    pub concurrency: usize,
    /// The addresses callbacks may connect to (default: any).
    pub targets: Targets,
}

/// Default pass interval.
pub const CALLBACK_INTERVAL_DEFAULT: Duration = Duration::from_millis(500);

impl Default for CallbackConfig {
    fn default() -> Self {
        CallbackConfig {
            secret: None,
            interval: CALLBACK_INTERVAL_DEFAULT,
            timeout: Duration::from_secs(10),
            batch: 100,
            concurrency: 16,
            targets: Targets::default(),
        }
    }
}

/// Delivers due callbacks.
pub struct CallbackSender {
    pool: DbPool,
    config: CallbackConfig,
    /// The HTTP client, or why it could not be built (reported by every pass).
    http: std::result::Result<reqwest::Client, String>,
    owner: String,
    /// Whether the warning about unsigned callbacks was logged (once, at the first callback
    /// sent without a secret: a deployment without workflow callbacks never sees it).
    warned_unsigned: std::sync::atomic::AtomicBool,
}

impl CallbackSender {
    /// A sender with its own HTTP client.
    pub fn new(pool: DbPool, config: CallbackConfig) -> Self {
        let mut builder =
            reqwest::Client::builder().timeout(config.timeout).redirect(reqwest::redirect::Policy::none());
        if !config.targets.is_any() {
            // names resolve to allowed addresses only; a proxy would connect on our behalf
            builder = builder.dns_resolver(std::sync::Arc::new(TargetResolver::new(config.targets.clone()))).no_proxy();
        }
        let http = builder.build().map_err(|e| format!("callback HTTP client: {}", with_causes(&e)));
        tracing::info!(allow = %config.targets, "callback targets (--callback-allow)");
        let owner = format!("callbacks-{}", crate::WorkerId::generate());
        CallbackSender { pool, config, http, owner, warned_unsigned: Default::default() }
    }

    /// One POST, and how it went (`cost_ms` left to the caller).
    async fn deliver(&self, http: &reqwest::Client, delivery: &CallbackDelivery) -> CallbackOutcome {
        let failed = |http_status: Option<i32>, error: String| CallbackOutcome {
            http_status,
            error: Some(error),
            ..CallbackOutcome::default()
        };
        let refused =
            |why: &Refused| CallbackOutcome { error: Some(why.to_string()), give_up: true, ..Default::default() };
        let mut payload = delivery.payload.clone();
        if let Some(obj) = payload.as_object_mut() {
            obj.insert("callback_id".into(), delivery.callback_id.clone().into());
            obj.insert("kind".into(), delivery.kind.clone().into());
        }
        if let Some(why) = self.config.targets.check_url(&delivery.url) {
            return refused(&why);
        }
        let body = match serde_json::to_vec(&payload) {
            Ok(b) => b,
            Err(e) => return failed(None, format!("payload: {e}")),
        };
        let mut request = http
            .post(&delivery.url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(CALLBACK_ID_HEADER, &delivery.callback_id)
            .header(ATTEMPT_HEADER, delivery.attempt.to_string());
        if let Some(secret) = &self.config.secret {
            request = request.header(SIGNATURE_HEADER, sign(secret.as_bytes(), &body));
        }
        match request.body(body).send().await {
            Ok(response) if response.status().is_success() => {
                CallbackOutcome { http_status: Some(response.status().as_u16() as i32), ..Default::default() }
            }
            Ok(mut response) => {
                let status = response.status();
                // the start of the answer only: an endpoint may answer anything, of any size
                let mut head = Vec::new();
                while head.len() < 1024 {
                    match response.chunk().await {
                        Ok(Some(chunk)) => head.extend_from_slice(&chunk),
                        _ => break,
                    }
                }
                let text: String = String::from_utf8_lossy(&head).chars().take(200).collect();
                failed(Some(status.as_u16() as i32), format!("HTTP {status}: {text}"))
            }
            // a host name whose every address the setting refuses (TargetResolver)
            Err(e) => match find_cause::<Refused>(&e) {
                Some(why) => refused(why),
                None => failed(None, with_causes(&e)),
            },
        }
    }
}

impl Service for CallbackSender {
    fn name(&self) -> &'static str {
        "callbacks"
    }

    fn interval(&self) -> Duration {
        self.config.interval
    }

    fn run_once(&self, now: Option<DateTime<Utc>>) -> BoxFuture<'_, Result<RunOnceReport>> {
        Box::pin(async move {
            let http = self.http.as_ref().map_err(|e| Error::Config(e.clone()))?;
            let lease = (self.config.timeout.as_secs() as i32).saturating_mul(3).max(10);
            let mut detail = Vec::new();
            loop {
                let due = {
                    let client = self.pool.get().await?;
                    api::claim_callbacks(&client, &self.owner, self.config.batch, lease, now).await?
                };
                let full = due.len() as i32 >= self.config.batch;
                if !due.is_empty()
                    && self.config.secret.is_none()
                    && !self.warned_unsigned.swap(true, std::sync::atomic::Ordering::Relaxed)
                {
                    tracing::warn!(
                        "no callback secret (--callback-secret / ASYNCFLOW_CALLBACK_SECRET): workflow callbacks go unsigned"
                    );
                }
                let outcomes: Vec<(CallbackDelivery, CallbackOutcome)> = futures_util::stream::iter(due)
                    .map(|d| async move {
                        let started = Instant::now();
                        let mut outcome = self.deliver(http, &d).await;
                        outcome.cost_ms = started.elapsed().as_millis().min(i32::MAX as u128) as i32;
                        (d, outcome)
                    })
                    .buffer_unordered(self.config.concurrency.max(1))
                    .collect()
                    .await;
                let client = self.pool.get().await?;
                for (d, outcome) in outcomes {
                    let state = api::record_callback(&client, &d.callback_id, d.attempt, &outcome, now).await?;
                    if let Some(error) = &outcome.error {
                        // the callback's status now: failed (given up), pending (tried again), or
                        // none (another sender recorded it first)
                        let outcome = match state.as_deref() {
                            Some("failed") => "given_up",
                            Some(_) => "retried",
                            None => "stale",
                        };
                        tracing::info!(callback = %d.callback_id, run = %d.run_id, kind = %d.kind,
                            attempt = d.attempt, error = %crate::error::shorten(error), outcome,
                            "callback not delivered");
                    }
                    detail.push(format!(
                        "{} attempt {}: {}",
                        d.callback_id,
                        d.attempt,
                        state.as_deref().unwrap_or("stale")
                    ));
                }
                if !full {
                    break;
                }
            }
            Ok(RunOnceReport { service: self.name(), changed: detail.len() as u64, detail })
        })
    }
}
