//! Driving the dashboard in a real browser: Debian's headless Chromium through `playwright-core`
//! (scripts in tests/dashboard/), against `asyncflow serve` started with a bearer token on a
//! free port.
//!
//! Set-up done here, so that a fresh machine works: Chromium is installed with
//! `apt-get install chromium` when `/usr/bin/chromium` (or `$CHROMIUM`) is missing, which needs
//! root; `playwright-core` (pinned in tests/dashboard/package-lock.json; it downloads no browser)
//! is installed with `npm ci` into tests/dashboard/node_modules when missing, which needs Node.js
//! 20 or newer. Either failing stops the test with a message saying what to install.
//! Screenshots land in `target/tmp/dashboard/`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::TestDb;

/// The bearer token the server is started with.
pub const TOKEN: &str = "dashboard-test-token-0123456789";
/// A browser script's own limit; each needs a few seconds.
const BROWSER_TIMEOUT: Duration = Duration::from_secs(60);

fn dashboard_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/dashboard")
}

fn is_root() -> bool {
    nix::unistd::Uid::effective().is_root()
}

/// Runs a set-up command; its combined output on failure.
fn run_setup(cmd: &mut Command) -> Result<(), String> {
    let out = cmd.stdin(Stdio::null()).output().map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    let mut text = String::from_utf8_lossy(&out.stdout).to_string();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    let tail: String = text.lines().rev().take(15).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n");
    Err(format!("{cmd:?} failed ({}):\n{tail}", out.status))
}

/// The Chromium binary, installed from Debian's packages when missing.
pub fn chromium() -> PathBuf {
    let path = PathBuf::from(std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into()));
    if path.exists() {
        return path;
    }
    assert!(
        is_root(),
        "the dashboard test needs Chromium at {}: install it with `apt-get install chromium` \
         (as root), or point CHROMIUM at a Chromium binary",
        path.display()
    );
    eprintln!("dashboard test: installing Chromium from Debian's packages (apt-get), once");
    let installed =
        run_setup(Command::new("apt-get").arg("update").env("DEBIAN_FRONTEND", "noninteractive")).and_then(|()| {
            run_setup(
                Command::new("apt-get").args(["install", "-y", "chromium"]).env("DEBIAN_FRONTEND", "noninteractive"),
            )
        });
    if let Err(e) = installed {
        panic!("the dashboard test could not install Chromium: {e}");
    }
    assert!(path.exists(), "`apt-get install chromium` ran but {} is still missing", path.display());
    path
}

/// tests/dashboard with playwright-core installed (`npm ci` from the committed lock when missing).
pub fn playwright() -> PathBuf {
    let dir = dashboard_dir();
    let node_ok = Command::new("node")
        .args(["-e", "process.exit(Number(process.versions.node.split('.')[0]) >= 20 ? 0 : 1)"])
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(node_ok, "the dashboard test needs Node.js 20 or newer (`node` on PATH) to drive Chromium");
    if !dir.join("node_modules/playwright-core/package.json").exists() {
        eprintln!("dashboard test: installing playwright-core with npm ci, once");
        if let Err(e) =
            run_setup(Command::new("npm").args(["ci", "--no-audit", "--no-fund", "--loglevel=error"]).current_dir(&dir))
        {
            panic!("the dashboard test could not install playwright-core into {}: {e}", dir.display());
        }
    }
    dir
}

/// `asyncflow serve` on a free port; killed when dropped, also when an assertion fails.
pub struct Server {
    child: std::process::Child,
    /// http://127.0.0.1:<port>
    pub base: String,
}

impl Server {
    /// Starts the server against the test's database and waits until it is ready.
    pub async fn start(db: &TestDb) -> Server {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let child = Command::new(env!("CARGO_BIN_EXE_asyncflow"))
            .args(["serve", "--listen", &format!("127.0.0.1:{port}"), "--token", TOKEN])
            .env("DATABASE_URL", &db.url)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start asyncflow serve");
        let server = Server { child, base: format!("http://127.0.0.1:{port}") };
        let client = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let ready = client.get(format!("{}/readyz", server.base)).send().await;
            if ready.map(|r| r.status().is_success()).unwrap_or(false) {
                return server;
            }
            assert!(Instant::now() < deadline, "asyncflow serve did not become ready");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One set-up at a time in the test binary: the browser tests run in parallel, and two
/// `apt-get install` or `npm ci` at once fail on each other's locks.
static SETUP: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Chromium and the folder of the scripts, set up once per test.
pub async fn setup() -> (PathBuf, PathBuf) {
    tokio::task::spawn_blocking(|| {
        // a set-up that panicked leaves the lock poisoned; the next one checks again from scratch
        let _one = SETUP.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        (chromium(), playwright())
    })
    .await
    .expect("browser set-up")
}

/// Runs `tests/dashboard/<script>` with the server's URL, the token, Chromium, the screenshot
/// folder and `env`; the JSON object it printed.
pub async fn browse(script: &str, base: &str, env: &[(&str, &str)], chromium: &Path, dir: &Path) -> Value {
    let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("dashboard");
    let mut cmd = tokio::process::Command::new("node");
    cmd.arg(dir.join(script))
        .current_dir(dir)
        .env("DASHBOARD_URL", base)
        .env("DASHBOARD_TOKEN", TOKEN)
        .env("CHROMIUM", chromium)
        .env("DASHBOARD_SCREENSHOTS", &shots)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let child = cmd.spawn().expect("run node");
    let out = tokio::time::timeout(BROWSER_TIMEOUT, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("{script} did not finish in {BROWSER_TIMEOUT:?}"))
        .expect("browser script output");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{script} failed ({}):\n{stderr}", out.status);
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("{script}'s answer is not JSON ({e}): {stdout}\n{stderr}"))
}
