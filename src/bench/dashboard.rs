//! The dashboard phase: `GET /v1/dashboard`, `GET /metrics` and the first page of the task
//! search (`GET /v1/tasks?limit=50`, the dashboard's Tasks view, and its failed tasks,
//! `GET /v1/tasks?status=failed&limit=50`, none among the fill's) through the real router, on a
//! local socket, before and after the database is filled with millions of tasks. The first two
//! come from counters and the page reads as far as it fills itself, so the two timings should be
//! alike; the ones before the fill are the same-run baseline.
//!
//! ```text
//!   register bench_dash ── time the routes (CALLS each: median, max) ── baseline
//!   fill: 90 % succeeded, set-based, in shards of 5 M rolled and closed; 10 % pending (bulk create)
//!   vacuum analyze ── time the routes again
//! ```

use std::time::{Duration, Instant};

use super::{aging, load, median, Progress};
use crate::db::DbPool;
use crate::error::{Error, Result};
use crate::http::{self, HttpConfig};

/// Calls of each route per timing.
const CALLS: usize = 15;
/// The token the phase's server requires (the routes are timed behind it, as deployed).
const TOKEN: &str = "bench-dashboard-token";

/// Median and max of one route's calls, in milliseconds.
#[derive(Debug, Clone, Copy)]
pub(super) struct Timing {
    pub median_ms: f64,
    pub max_ms: f64,
}

/// The routes, at one fill.
#[derive(Debug, Clone, Copy)]
pub(super) struct Timings {
    pub dashboard: Timing,
    pub metrics: Timing,
    /// `GET /v1/tasks?limit=50`: the first page of the task search, no filter
    pub search: Timing,
    /// `GET /v1/tasks?status=failed&limit=50`: the failed tasks (none among the fill's)
    pub failed: Timing,
}

/// What the phase measured.
pub(super) struct DashboardFigures {
    pub before: Timings,
    pub after: Timings,
    pub tasks: i64,
}

/// Times the routes, fills `tasks` tasks into `bench_dash`, and times them again.
pub(super) async fn run(pool: &DbPool, tasks: i64, progress: &mut Progress) -> Result<DashboardFigures> {
    let ty = "bench_dash";
    load::register(pool, ty, None).await?;
    let config = HttpConfig {
        listen: ([127, 0, 0, 1], 0).into(),
        tokens: vec![TOKEN.to_string()],
        insecure_no_auth: false,
        max_body: 1 << 20,
        header_timeout: http::HEADER_TIMEOUT_DEFAULT,
        body_timeout: http::BODY_TIMEOUT_DEFAULT,
    };
    let listener = tokio::net::TcpListener::bind(config.listen).await.map_err(|e| Error::Config(e.to_string()))?;
    let base = format!("http://{}", listener.local_addr().map_err(|e| Error::Config(e.to_string()))?);
    let app = http::router(pool.clone(), &config);
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let client = reqwest::Client::new();

    progress.detail("timing before the fill");
    let before = time_routes(&client, &base).await?;
    let pending = tasks / 10;
    aging::fill_finished_rolling(pool, ty, tasks - pending, progress).await?;
    progress.detail(&format!("queueing {:.1} M pending tasks", pending as f64 / 1e6));
    load::queue(pool, ty, usize::try_from(pending).unwrap_or(0), None).await?;
    crate::db::api::bench_analyze(&pool.get().await?, ty).await?;
    progress.detail("timing after the fill");
    let after = time_routes(&client, &base).await?;
    server.abort();
    aging::clear(pool, ty).await?;
    Ok(DashboardFigures { before, after, tasks })
}

async fn time_routes(client: &reqwest::Client, base: &str) -> Result<Timings> {
    let (dashboard, metrics) = (format!("{base}/v1/dashboard"), format!("{base}/metrics"));
    let (search, failed) = (format!("{base}/v1/tasks?limit=50"), format!("{base}/v1/tasks?status=failed&limit=50"));
    // one call of each first: connections and prepared statements are made once per server
    for url in [&dashboard, &metrics, &search, &failed] {
        time(client, url, 1).await?;
    }
    Ok(Timings {
        dashboard: time(client, &dashboard, CALLS).await?,
        metrics: time(client, &metrics, CALLS).await?,
        search: time(client, &search, CALLS).await?,
        failed: time(client, &failed, CALLS).await?,
    })
}

async fn time(client: &reqwest::Client, url: &str, calls: usize) -> Result<Timing> {
    let mut ms = Vec::with_capacity(calls);
    for _ in 0..calls {
        let started = Instant::now();
        let response = client
            .get(url)
            .bearer_auth(TOKEN)
            .timeout(Duration::from_secs(60))
            .send()
            .await
            .map_err(|e| Error::Config(format!("{url}: {e}")))?;
        let status = response.status();
        response.bytes().await.map_err(|e| Error::Config(format!("{url}: {e}")))?;
        ms.push(started.elapsed().as_secs_f64() * 1000.0);
        if !status.is_success() {
            return Err(Error::Config(format!("{url} answered {status}")));
        }
    }
    let max_ms = ms.iter().copied().fold(0.0, f64::max);
    Ok(Timing { median_ms: median(&mut ms), max_ms })
}
