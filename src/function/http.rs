//! HTTP-endpoint functions: the stage call is POSTed as JSON, the reply read from the body.
//!
//! With a secret configured, each request carries
//! `X-Asyncflow-Signature: sha256=<hex HMAC-SHA256(secret, body)>`, so the endpoint can check
//! that the call comes from asyncflow (compare in constant time). A non-2xx answer is a failure
//! with retry, its error taken from the body; so is a body past the size limit or one that is not
//! a stage reply.

use std::sync::Arc;
use std::time::Duration;

use super::{BoxFuture, Function, StageCall, StageReply};
use crate::error::with_causes;

pub use crate::signature::{sign, verify, SIGNATURE_HEADER};

/// A function behind an HTTP endpoint.
#[derive(Clone)]
pub struct HttpFunction {
    inner: Arc<HttpInner>,
}

struct HttpInner {
    url: reqwest::Url,
    /// The url as errors show it: without user, password and query, which may carry
    /// credentials, since the error is written on the task for its clients to read.
    shown: String,
    client: reqwest::Client,
    secret: Option<Vec<u8>>,
    max_reply: usize,
}

impl HttpFunction {
    /// An endpoint at `url`; `timeout` bounds each request.
    pub fn new(
        url: reqwest::Url,
        timeout: Option<Duration>,
        secret: Option<Vec<u8>>,
        max_reply: usize,
    ) -> Result<Self, String> {
        // One client per function: its pool keeps the connections alive between calls (reqwest
        // keeps idle ones 90 s), so a call costs no new TCP or TLS handshake.
        // A redirect is an answer that is not 2xx, so a failure: followed, a POST would come
        // back as a GET without the call, and whatever answered that taken for the reply.
        let mut builder = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .redirect(reqwest::redirect::Policy::none());
        if let Some(t) = timeout {
            builder = builder.timeout(t);
        }
        let client = builder.build().map_err(|e| format!("HTTP client: {e}"))?;
        let mut shown = url.clone();
        let _ = shown.set_username("");
        let _ = shown.set_password(None);
        shown.set_query(None);
        shown.set_fragment(None);
        let shown = shown.to_string();
        Ok(HttpFunction { inner: Arc::new(HttpInner { url, shown, client, secret, max_reply }) })
    }
}

impl Function for HttpFunction {
    fn call(&self, call: StageCall) -> BoxFuture<'static, StageReply> {
        let inner = self.inner.clone();
        Box::pin(async move { inner.run(call).await })
    }
}

impl HttpInner {
    async fn run(&self, call: StageCall) -> StageReply {
        let body = match serde_json::to_vec(&call) {
            Ok(b) => b,
            Err(e) => return StageReply::fail(format!("cannot encode the stage call: {e}")),
        };
        let mut request = self
            .client
            .post(self.url.clone())
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header("x-asyncflow-task-id", &call.task_id);
        // a value no header can carry (a row written past the API) is left out, not a failure
        if let Some(parent) = call.traceparent.as_deref().and_then(|p| reqwest::header::HeaderValue::from_str(p).ok()) {
            request = request.header("traceparent", parent);
        }
        if let Some(secret) = &self.secret {
            request = request.header(SIGNATURE_HEADER, sign(secret, &body));
        }
        let mut response = match request.body(body).send().await {
            Ok(r) => r,
            Err(e) => return StageReply::fail(format!("calling {}: {}", self.shown, with_causes(&e.without_url()))),
        };
        let status = response.status();
        let mut received = Vec::new();
        loop {
            match response.chunk().await {
                Ok(Some(chunk)) => {
                    received.extend_from_slice(&chunk);
                    if received.len() > self.max_reply {
                        return StageReply::fail(format!("the reply body is larger than {} bytes", self.max_reply));
                    }
                }
                Ok(None) => break,
                Err(e) => return StageReply::fail(format!("reading the reply: {}", with_causes(&e.without_url()))),
            }
        }
        let text = String::from_utf8_lossy(&received);
        if !status.is_success() {
            let excerpt: String = text.trim().chars().take(200).collect();
            return StageReply::fail(format!("HTTP {status}: {excerpt}"));
        }
        match serde_json::from_slice::<serde_json::Value>(&received) {
            Ok(v) => StageReply::read(v, &call.progress)
                .unwrap_or_else(|why| StageReply::fail(format!("malformed reply: {why}"))),
            Err(e) => StageReply::fail(format!("the reply body is not JSON ({e})")),
        }
    }
}
