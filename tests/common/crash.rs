//! A private PostgreSQL server that a test may crash: an immediate shutdown (SIGQUIT to the
//! postmaster, what `pg_ctl stop -m immediate` sends) loses whatever the WAL writer has not yet
//! written, as a power cut loses what was not flushed. Never the shared server of the binary.

use std::path::Path;

use asyncflow::db::embedded::{EmbeddedConfig, EmbeddedPostgres};

/// Starts (or, after [`crash`], restarts with crash recovery) the private server in `dir`: the
/// WAL writer works in rounds 10 s apart (an asynchronous commit reaches the WAL files only with
/// its next round, or with a later synchronous commit), no autovacuum commits beside the test,
/// and `settings` on top.
pub async fn start(dir: &Path, settings: &[(&str, &str)]) -> EmbeddedPostgres {
    let mut config = EmbeddedConfig::new(dir).setting("wal_writer_delay", "10000").setting("autovacuum", "off");
    for (name, value) in settings {
        config = config.setting(name, value);
    }
    EmbeddedPostgres::start(config).await.unwrap_or_else(|e| panic!("start the private server: {e}"))
}

/// One connection to the server (a pool of one, which the db::api functions take).
pub async fn connect(url: &str) -> deadpool_postgres::Object {
    let pool = asyncflow::db::pool(url, 1).expect("a pool");
    pool.get().await.expect("connect to the private server")
}

/// What `pg_ctl stop -m immediate` does: SIGQUIT to the postmaster (its pid is the first line
/// of postmaster.pid): no checkpoint, no WAL flush. Dropping `server` then waits for it to exit.
pub fn crash(dir: &Path, server: EmbeddedPostgres) {
    let text = std::fs::read_to_string(dir.join("postmaster.pid")).expect("postmaster.pid");
    let pid: i32 = text.lines().next().and_then(|l| l.trim().parse().ok()).expect("a pid");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGQUIT)
        .expect("SIGQUIT the postmaster");
    drop(server);
}
