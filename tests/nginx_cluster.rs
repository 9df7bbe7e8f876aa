//! Runs `tests/nginx_cluster.sh` (several servers behind nginx, as docs/http-api.md describes
//! them: three `asyncflow serve` behind nginx, three `asyncflow worker --server` HTTP workers,
//! 10,000 tasks through three stages, one server SIGKILLed mid-run) under `cargo test`, against a
//! private database from the test harness and with the binary cargo built. nginx must be
//! installed, or installable (root with apt-get: the script installs it); otherwise the test
//! fails and says so, it never passes silently.
use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::TestDb;

/// The script's budget for the work (its own default is 150 s): in a full `cargo test` on two
/// cores the suite's other tests take most of the CPU, and 150 s ran out at 17,540 of 30,000
/// stages at load average 10. A liveness bound, not a speed check (that is `asyncflow bench`).
const DEADLINE_SECONDS: &str = "300";
/// Far above the script's budget; covers installing nginx.
const TIMEOUT: Duration = Duration::from_secs(480);

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).any(|dir| dir.join(program).is_file()))
        .unwrap_or(false)
}

fn nginx_available_or_installable() -> Result<(), String> {
    if on_path("nginx") || Path::new("/usr/sbin/nginx").is_file() {
        return Ok(());
    }
    if nix::unistd::Uid::effective().is_root() && on_path("apt-get") {
        return Ok(()); // the script installs it from Debian's packages
    }
    Err("nginx is not installed and cannot be installed here (the script needs root and apt-get for that): \
         install nginx (e.g. `apt-get install nginx`) and run the test again"
        .to_string())
}

#[tokio::test]
async fn three_servers_behind_nginx_and_three_http_workers_finish_10000_tasks_through_a_server_crash() {
    if let Err(why) = nginx_available_or_installable() {
        panic!("{why}");
    }
    let db = TestDb::new().await;
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/nginx_cluster.sh");
    let logs = std::env::temp_dir().join(format!("af-nginx-run-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&logs).unwrap();
    let (out_path, err_path) = (logs.join("stdout"), logs.join("stderr"));
    let url = db.url.clone();
    // Output goes to files, not pipes: nothing a child leaves behind can hold the test open.
    let outcome = tokio::task::spawn_blocking(move || {
        let mut child = Command::new("bash")
            .arg(&script)
            .env("ASYNCFLOW_BIN", env!("CARGO_BIN_EXE_asyncflow"))
            .env("NGINX_CLUSTER_DATABASE_URL", &url)
            .env("DEADLINE_SECONDS", DEADLINE_SECONDS)
            .env_remove("ASYNCFLOW_SERVER")
            .env_remove("ASYNCFLOW_TOKEN")
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out_path).unwrap())
            .stderr(std::fs::File::create(&err_path).unwrap())
            .spawn()
            .expect("run bash tests/nginx_cluster.sh");
        let deadline = Instant::now() + TIMEOUT;
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break Some(status);
            }
            if Instant::now() > deadline {
                // SIGTERM lets the script's trap stop everything it started.
                let pid = nix::unistd::Pid::from_raw(child.id() as i32);
                let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
                let grace = Instant::now() + Duration::from_secs(20);
                while child.try_wait().unwrap().is_none() && Instant::now() < grace {
                    std::thread::sleep(Duration::from_millis(100));
                }
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(200));
        };
        let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
        (status, read(&out_path), read(&err_path))
    })
    .await
    .unwrap();
    let _ = std::fs::remove_dir_all(&logs);
    let (status, stdout, stderr) = outcome;
    println!("{stdout}");
    eprintln!("{stderr}");
    match status {
        None => panic!("tests/nginx_cluster.sh did not finish within {TIMEOUT:?}\n{stdout}\n{stderr}"),
        Some(s) => assert!(s.success(), "tests/nginx_cluster.sh failed ({s}):\n{stdout}\n{stderr}"),
    }
    assert!(stdout.contains("nginx cluster: passed"), "{stdout}");
    drop(db);
}
