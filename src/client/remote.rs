//! The HTTP client of an `asyncflow serve`: one request, its answer read into the type asked for,
//! and a refusal read back into the crate's [`Error`] through the one table of codes
//! ([`Error::from_wire`]). [`super::Client`]'s server backend sends its admin calls with it.

use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use crate::error::{with_causes, Error, Result, Transport, TransportError};

/// How long a connection to the server may take to open.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one request may take, answer included.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// How long an idle connection is kept: below the server's idle-connection timeout (serve
/// --header-timeout, 30 s by default), so that a request is not sent on a kept connection just
/// as the server closes it.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(20);

/// A client of an `asyncflow serve` (cheap to clone).
#[derive(Clone)]
pub struct RemoteClient {
    /// The server's base URL, without a trailing slash.
    base: String,
    token: Option<String>,
    http: reqwest::Client,
}

impl std::fmt::Debug for RemoteClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteClient").field("base", &self.base).finish_non_exhaustive()
    }
}

impl RemoteClient {
    /// A client of the server at `server` (`http://host:port`), sending `token` as a bearer
    /// token when given.
    pub fn new(server: &str, token: Option<String>) -> Result<Self> {
        let url = reqwest::Url::parse(server).map_err(|e| Error::Config(format!("--server {server:?}: {e}")))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(Error::Config(format!("--server {server:?}: must be an http:// or https:// URL")));
        }
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(REQUEST_TIMEOUT)
            .pool_idle_timeout(POOL_IDLE_TIMEOUT)
            .user_agent(concat!("asyncflow/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| Error::Config(format!("HTTP client: {}", with_causes(&e))))?;
        Ok(RemoteClient {
            base: server.trim_end_matches('/').to_string(),
            token: token.filter(|t| !t.is_empty()),
            http,
        })
    }

    /// The server's base URL.
    pub fn server(&self) -> &str {
        &self.base
    }

    /// A request to `url` carrying the bearer token, when there is one.
    pub(crate) fn request(&self, method: Method, url: &str) -> reqwest::RequestBuilder {
        let request = self.http.request(method, url);
        match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    /// The URL of `segments` under the base, each percent-encoded as one path segment.
    pub(crate) fn url(&self, segments: &[&str]) -> String {
        let mut url = self.base.clone();
        for s in segments {
            url.push('/');
            url.push_str(&encode(s));
        }
        url
    }

    /// One request to `url` with `query` as its query string and `body` as JSON; the parsed
    /// answer on 2xx, the error the status and code mean otherwise ([`status_error`]). A
    /// request that gets no usable answer is an [`Error::Transport`] saying how far it got.
    pub(crate) async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        url: &str,
        query: Option<&impl Serialize>,
        body: Option<&impl Serialize>,
    ) -> Result<T> {
        let what = format!("{method} {url}");
        let (status, bytes) = self.send(method, url, query, body, &what).await?;
        if !status.is_success() {
            return Err(status_error(status, &bytes, &what));
        }
        read(&bytes, &what)
    }

    /// A request whose success has no body (204).
    pub(crate) async fn call_no_content(&self, method: Method, url: &str) -> Result<()> {
        let what = format!("{method} {url}");
        let (status, bytes) = self.send(method, url, None::<&()>, None::<&()>, &what).await?;
        if !status.is_success() {
            return Err(status_error(status, &bytes, &what));
        }
        Ok(())
    }

    /// A GET of one thing: None when the server answers that it has no such thing (404
    /// `not_found`), where [`call`](Self::call) would make that an error.
    pub(crate) async fn get_optional<T: DeserializeOwned>(&self, url: &str) -> Result<Option<T>> {
        let what = format!("GET {url}");
        let (status, bytes) = self.send(Method::GET, url, None::<&()>, None::<&()>, &what).await?;
        if status.is_success() {
            return read(&bytes, &what).map(Some);
        }
        let value: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        if status == StatusCode::NOT_FOUND && value["code"] == "not_found" {
            return Ok(None);
        }
        Err(status_error(status, &bytes, &what))
    }

    /// Sends the request (`what` names it in errors); its status and body.
    async fn send(
        &self,
        method: Method,
        url: &str,
        query: Option<&impl Serialize>,
        body: Option<&impl Serialize>,
        what: &str,
    ) -> Result<(StatusCode, Vec<u8>)> {
        let mut request = self.request(method.clone(), url);
        if let Some(query) = query {
            request = request.query(query);
        }
        if let Some(body) = body {
            let body = serde_json::to_vec(body).map_err(|e| Error::InvalidArgument(e.to_string()))?;
            request = request.header(reqwest::header::CONTENT_TYPE, "application/json").body(body);
        }
        let transport = |e: reqwest::Error| {
            let kind = if e.is_connect() { Transport::NotSent } else { Transport::NoAnswer };
            TransportError::new(kind, what, with_causes(&e))
        };
        let started = Instant::now();
        let response = request.send().await.map_err(transport)?;
        let status = response.status();
        let bytes = response.bytes().await.map_err(transport)?;
        tracing::trace!(%method, url, status = status.as_u16(), bytes = bytes.len(), took = ?started.elapsed(), "server call");
        Ok((status, bytes.to_vec()))
    }
}

/// A success's body read into `T`; a body that does not fit is an unreadable answer.
fn read<T: DeserializeOwned>(bytes: &[u8], what: &str) -> Result<T> {
    serde_json::from_slice(bytes)
        .map_err(|e| TransportError::new(Transport::Unreadable, what, format!("the server's answer: {e}")).into())
}

/// What a non-2xx answer means: a code of the table is its error, with the server's message;
/// otherwise 4xx are the request's fault (refused, nothing changed), 401/403 and a missing route
/// are configuration, 5xx (the server, or a proxy in front of it) are transient, as a network
/// error is, and may have been applied.
pub(crate) fn status_error(status: StatusCode, body: &[u8], what: &str) -> Error {
    let value: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let message = value["message"].as_str().unwrap_or("no message");
    if let Some(e) =
        value["code"].as_str().and_then(|code| Error::from_wire(status.as_u16(), code, message.to_string()))
    {
        return e;
    }
    let text = format!("{what}: HTTP {status}: {message}");
    match status.as_u16() {
        401 | 403 => Error::Config(format!("{what}: the server refused the bearer token (HTTP {status}): {message}")),
        404 => Error::Config(format!("{text} (is the server an asyncflow serve of this version?)")),
        409 => Error::StaleFence(text),
        413 => Error::ContextTooLarge(text),
        400..=499 => Error::InvalidArgument(text),
        _ => TransportError::new(Transport::Status(status.as_u16()), what, format!("HTTP {status}: {message}")).into(),
    }
}

/// Percent-encodes `s` for a URL's path segment: every byte of its UTF-8 form but the unreserved
/// ones.
pub(crate) fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_writes_each_utf8_byte() {
        assert_eq!(encode("a-Z_0.~"), "a-Z_0.~");
        assert_eq!(encode("a b/c&d=e"), "a%20b%2Fc%26d%3De");
        assert_eq!(encode("José"), "Jos%C3%A9");
        assert_eq!(encode("€"), "%E2%82%AC");
    }

    #[test]
    fn answers_map_to_the_table_refusals_configuration_or_transient_trouble() {
        let body = br#"{"code": "x", "message": "why"}"#;
        assert!(matches!(status_error(StatusCode::BAD_REQUEST, body, "POST /r"), Error::InvalidArgument(_)));
        assert!(matches!(status_error(StatusCode::UNAUTHORIZED, body, "p"), Error::Config(_)));
        let e = status_error(StatusCode::NOT_FOUND, br#"{"code": "unknown_run", "message": "m"}"#, "p");
        assert!(matches!(&e, Error::UnknownRun(m) if m == "m"), "{e:?}");
        let e = status_error(StatusCode::CONFLICT, br#"{"code": "wrong_state", "message": "m"}"#, "p");
        assert!(matches!(e, Error::WrongState(_)), "{e:?}");
        let gateway = status_error(StatusCode::BAD_GATEWAY, b"<html>nginx</html>", "p");
        assert!(matches!(gateway, Error::Transport(t) if t.may_have_applied()));
    }

    #[test]
    fn every_code_of_the_table_reads_back_as_its_error() {
        let errors = [
            Error::UnknownTaskType(String::new()),
            Error::UnknownTask(String::new()),
            Error::StaleFence(String::new()),
            Error::InvalidTypeName(String::new()),
            Error::PriorityOutOfRange(String::new()),
            Error::ContextTooLarge(String::new()),
            Error::InvalidArgument(String::new()),
            Error::InvalidPipeline(String::new()),
            Error::UnknownPipeline(String::new()),
            Error::UnknownRun(String::new()),
            Error::WrongState(String::new()),
            Error::UnknownSchedule(String::new()),
        ];
        for e in errors {
            let (status, code) = e.wire().expect("in the table");
            let back = Error::from_wire(status, code, String::new()).expect("reads back");
            assert_eq!(std::mem::discriminant(&back), std::mem::discriminant(&e), "{code}");
        }
    }

    #[test]
    fn a_server_url_must_be_http() {
        assert!(RemoteClient::new("http://127.0.0.1:8080/", None).is_ok());
        assert_eq!(RemoteClient::new("http://h:1/", None).unwrap().server(), "http://h:1");
        assert!(matches!(RemoteClient::new("ftp://h", None), Err(Error::Config(_))));
        assert!(matches!(RemoteClient::new("not a url", None), Err(Error::Config(_))));
    }
}
