//! The workflow part of `asyncflow demo`: applies `pipelines/transcode.json` (a transcode
//! that slices a recording and works on the slices in parallel), starts runs on generated recordings with a `notify_url`
//! served here, waits until every run has ended and its signed callback has arrived, and prints
//! each run's nodes.
//!
//! ```text
//!   start -> probe ─┐
//!         -> audio ─┴> split -> segments[0..N) -> join -> publish -> end  ==POST==> /callback
//! ```

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::db::{api, DbPool};
use crate::error::{Error, Result};
use crate::run::StartRun;

/// The pipeline file the demo runs.
pub const PIPELINE_FILE: &str = "transcode.json";

/// One callback as the demo's receiver got it.
#[derive(Debug, Clone)]
pub struct Received {
    /// The run it reports.
    pub run_id: String,
    /// Its status.
    pub status: String,
    /// Whether the signature matched the secret.
    pub signed: bool,
}

/// Runs started by the demo and the callbacks received for them.
pub struct PipelineDemo {
    /// Run ids, in start order.
    pub runs: Vec<String>,
    received: Arc<Mutex<Vec<Received>>>,
    stop: CancellationToken,
}

/// Applies the pipeline, serves a callback receiver on loopback and starts `runs` runs on
/// recordings written to `inputs`, with outputs under `outputs`.
pub async fn start(
    pool: &DbPool,
    pipelines: &Path,
    runs: usize,
    inputs: &Path,
    outputs: &Path,
    secret: &str,
) -> Result<PipelineDemo> {
    let file = crate::workflow::definition::read(&pipelines.join(PIPELINE_FILE))
        .map_err(|e| e.with_hint("run the demo from the repository root, or pass --pipelines DIR"))?;
    let c = pool.get().await?;
    let stored = api::put_pipeline(&c, &file.name, &file.definition, "active").await?;
    let received: Arc<Mutex<Vec<Received>>> = Arc::default();
    let stop = CancellationToken::new();
    let url = serve_receiver(received.clone(), secret.to_string(), stop.clone()).await?;
    let mut ids = Vec::with_capacity(runs);
    for i in 0..runs {
        let source = inputs.join(format!("film-{i:02}.wav"));
        super::write_wav(&source, 2.0 + i as f64 * 1.5, 330.0 + 40.0 * i as f64, 0.3)?;
        let run = StartRun {
            pipeline: file.name.clone(),
            input: Some(json!({"source": source.display().to_string(), "out_dir": outputs.display().to_string(),
                "segment_seconds": 1.0})),
            notify_url: Some(format!("{url}?film={i}")),
            notify_key: Some(format!("film-{i:02}")),
            ..Default::default()
        };
        ids.push(api::start_run(&c, &run, None).await?);
    }
    crate::outln!(
        "started {runs} runs of pipeline {} v{} (probe | audio -> split -> N segments -> join -> publish), callbacks to {url}",
        file.name, stored["version"]
    );
    Ok(PipelineDemo { runs: ids, received, stop })
}

async fn serve_receiver(
    received: Arc<Mutex<Vec<Received>>>,
    secret: String,
    stop: CancellationToken,
) -> Result<String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let app = axum::Router::new().route(
        "/callback",
        axum::routing::post(move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
            let (received, secret) = (received.clone(), secret.clone());
            async move {
                let signature = headers
                    .get(crate::function::http::SIGNATURE_HEADER)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default();
                let signed = crate::function::http::verify(secret.as_bytes(), &body, signature);
                let payload: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                if let Ok(mut list) = received.lock() {
                    list.push(Received {
                        run_id: payload["run_id"].as_str().unwrap_or_default().to_string(),
                        status: payload["status"].as_str().unwrap_or_default().to_string(),
                        signed,
                    });
                }
                axum::http::StatusCode::NO_CONTENT
            }
        }),
    );
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).with_graceful_shutdown(stop.cancelled_owned()).await;
    });
    Ok(format!("http://{addr}/callback"))
}

impl PipelineDemo {
    /// Waits until every run has ended and its callback has arrived.
    pub async fn wait(&self, pool: &DbPool, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let called_back = self.received.lock().map(|r| r.len()).unwrap_or(0);
            if called_back >= self.runs.len() {
                return Ok(());
            }
            if Instant::now() > deadline {
                let c = pool.get().await?;
                let mut states = Vec::new();
                for id in &self.runs {
                    let run = api::get_run(&c, id).await?.unwrap_or(Value::Null);
                    states.push(format!("{id}: {}", run["status"]));
                }
                return Err(Error::Config(format!(
                    "the pipeline runs did not end and call back within {timeout:?}: {}",
                    states.join(", ")
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Prints each run: status, nodes with their time, segments, the callback.
    pub async fn print(&self, pool: &DbPool) -> Result<()> {
        let c = pool.get().await?;
        let received = self.received.lock().map(|r| r.clone()).unwrap_or_default();
        crate::outln!(
            "\n  pipeline runs (each node is a task of the transcode function; the segments ran in parallel):"
        );
        for id in &self.runs {
            let run = api::get_run(&c, id).await?.unwrap_or(Value::Null);
            let callback = received.iter().find(|r| &r.run_id == id);
            crate::outln!(
                "  {id} {} in {} ms; callback: {}",
                run["status"].as_str().unwrap_or("?"),
                run["total_cost_ms"],
                match callback {
                    Some(r) if r.signed => format!("{} (signature valid)", r.status),
                    Some(r) => format!("{} (SIGNATURE INVALID)", r.status),
                    None => "none".into(),
                }
            );
            for event in run["events"].as_array().into_iter().flatten() {
                let segments =
                    event["segments"].as_array().map(|s| format!(" ({} segments)", s.len())).unwrap_or_default();
                crate::outln!(
                    "    {:<9} {:<9} {:>6} ms{segments}",
                    event["node"].as_str().unwrap_or(""),
                    event["status"].as_str().unwrap_or(""),
                    event["total_cost_ms"]
                );
            }
            if let Some(archive) = run["result"]["publish"]["archive"].as_str() {
                crate::outln!("    published {archive}");
            }
        }
        Ok(())
    }
}

impl Drop for PipelineDemo {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}
