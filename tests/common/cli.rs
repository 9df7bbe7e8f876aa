//! The real binary in tests: one command's output, and `asyncflow serve` as a child process.

use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

/// `asyncflow ARGS` on the database at `url` (None: DATABASE_URL unset), no server or token from
/// the environment; its output.
pub fn asyncflow(url: Option<&str>, args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_asyncflow"));
    cmd.args(args).env_remove("ASYNCFLOW_SERVER").env_remove("ASYNCFLOW_TOKEN").stdin(Stdio::null());
    match url {
        Some(u) => cmd.env("DATABASE_URL", u),
        None => cmd.env_remove("DATABASE_URL"),
    };
    cmd.output().expect("run asyncflow")
}

/// The stdout of a command that must succeed (its stderr in the panic otherwise).
pub fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// The stderr of a command that must fail.
pub fn refused(out: &Output) -> String {
    assert!(!out.status.success(), "expected a refusal, got: {}", String::from_utf8_lossy(&out.stdout));
    String::from_utf8_lossy(&out.stderr).to_string()
}

/// `asyncflow serve` on a free loopback port, killed when dropped.
pub struct Served {
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    child: Child,
}

impl Served {
    /// Starts `asyncflow serve --token TOKEN` on the database at `url` with `extra` arguments and
    /// waits (30 s at most) until its `/readyz` answers 200.
    pub async fn start(url: &str, token: &str, extra: &[&str]) -> Served {
        let port = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port").local_addr().expect("port").port();
        let child = Command::new(env!("CARGO_BIN_EXE_asyncflow"))
            .args(["serve", "--listen", &format!("127.0.0.1:{port}"), "--token", token])
            .args(extra)
            .env("DATABASE_URL", url)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn asyncflow serve");
        let served = Served { base: format!("http://127.0.0.1:{port}"), child };
        let client = reqwest::Client::new();
        let ready = format!("{}/readyz", served.base);
        super::wait_until(Duration::from_secs(30), "the server to be ready", || async {
            client.get(&ready).send().await.map(|r| r.status().is_success()).unwrap_or(false)
        })
        .await;
        served
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `GET url` with the bearer `token`: the answer's JSON (null when the body is not JSON).
pub async fn get_json(url: &str, token: &str) -> serde_json::Value {
    let r = reqwest::Client::new().get(url).bearer_auth(token).send().await.expect("the server answers");
    r.json().await.unwrap_or(serde_json::Value::Null)
}
