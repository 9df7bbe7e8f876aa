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
