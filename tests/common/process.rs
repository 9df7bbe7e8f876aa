//! Child processes of the tests (the worker binary): waiting for their exit, signalling them.

use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

/// Waits for the child to exit, killing it and failing the test after `timeout`.
pub fn wait_exit(child: &mut Child, timeout: Duration) -> ExitStatus {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the worker did not exit within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits for the child to exit (see [`wait_exit`]); its status and stdout.
pub async fn wait_child(mut child: Child, timeout: Duration) -> (ExitStatus, String) {
    tokio::task::spawn_blocking(move || {
        let status = wait_exit(&mut child, timeout);
        let mut out = String::new();
        if let Some(mut stdout) = child.stdout.take() {
            use std::io::Read;
            let _ = stdout.read_to_string(&mut out);
        }
        (status, out)
    })
    .await
    .unwrap()
}

/// Sends `sig` to the child.
pub fn signal(child: &Child, sig: nix::sys::signal::Signal) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), sig).unwrap();
}

/// Installs PgBouncer from Debian's packages when it is missing (root only: otherwise the test
/// fails and says so, it never passes silently).
pub fn install_pgbouncer() {
    use asyncflow::bench::pgbouncer;
    use std::process::{Command, Stdio};
    // one install at a time: the tests that need it run side by side, and apt-get takes a lock
    static INSTALL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _once = INSTALL.lock().unwrap_or_else(|p| p.into_inner());
    if pgbouncer::binary().is_some() {
        return;
    }
    assert!(
        nix::unistd::Uid::effective().is_root(),
        "this test needs PgBouncer: install it (`apt-get install pgbouncer`, as root) or set PGBOUNCER"
    );
    eprintln!("pgbouncer test: installing PgBouncer from Debian's packages (apt-get), once");
    for args in [&["update"][..], &["install", "-y", "pgbouncer"][..]] {
        let out = Command::new("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdin(Stdio::null())
            .output()
            .expect("run apt-get");
        assert!(out.status.success(), "apt-get {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    assert!(pgbouncer::binary().is_some(), "apt-get install pgbouncer ran but no pgbouncer binary was found");
}
