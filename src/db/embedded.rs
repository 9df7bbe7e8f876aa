//! A private PostgreSQL for when `DATABASE_URL` is unset: the binary's demo and the test suite
//! need no manual step on a fresh machine.
//!
//! ```text
//!   find initdb/postgres (PATH, then /usr/lib/postgresql/<newest>/bin)
//!   initdb -D <dir> -U postgres --auth=trust     (once; as root: as the postgres user)
//!   postgres -D <dir> -p <free port> -c listen_addresses=127.0.0.1 -c unix_socket_directories=''
//!   ... wait until it accepts connections ...
//!   EmbeddedPostgres dropped, or this process gone  ->  the server shuts down
//! ```
//!
//! The server is a child process started from a dedicated thread with a parent-death signal, so it
//! stops even when the owning process is killed.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// How long to wait for the server to accept connections.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// Settings for the private server.
#[derive(Debug, Clone)]
pub struct EmbeddedConfig {
    /// Data directory; created and initialised when missing.
    pub data_dir: PathBuf,
    /// Extra `-c name=value` server settings.
    pub settings: Vec<(String, String)>,
    /// The port to listen on (None: a free one); a restart on the same port keeps its URL.
    pub port: Option<u16>,
}

impl EmbeddedConfig {
    /// Durable defaults for the binary, keeping data in `data_dir`.
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        EmbeddedConfig { data_dir: data_dir.into(), settings: Vec::new(), port: None }
    }

    /// Listens on `port` (a server started again on the data directory keeps its URL).
    pub fn port(mut self, port: u16) -> Self {
        self.port = Some(port);
        self
    }

    /// Adds a server setting.
    pub fn setting(mut self, name: &str, value: &str) -> Self {
        self.settings.push((name.to_string(), value.to_string()));
        self
    }
}

/// A running private server. Dropping it stops the server (fast shutdown).
pub struct EmbeddedPostgres {
    url: String,
    child: Option<Child>,
}

impl EmbeddedPostgres {
    /// Initialises (if needed) and starts the server, waiting until it accepts connections.
    pub async fn start(config: EmbeddedConfig) -> Result<Self> {
        tokio::task::spawn_blocking(move || start_blocking(&config))
            .await
            .map_err(|e| Error::Embedded(format!("start-up task failed: {e}")))?
    }

    /// Connection URL of the server's `postgres` database.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// URL of another database on the same server.
    pub fn url_for(&self, database: &str) -> String {
        match self.url.rfind('/') {
            Some(i) => format!("{}/{database}", &self.url[..i]),
            None => self.url.clone(),
        }
    }
}

impl Drop for EmbeddedPostgres {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SIGINT = fast shutdown: disconnect clients, checkpoint, exit.
            let pid = nix::unistd::Pid::from_raw(child.id() as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT);
            let deadline = Instant::now() + Duration::from_secs(20);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Where the server binaries are: the directory holding both `initdb` and `postgres`.
pub fn find_bin_dir() -> Result<PathBuf> {
    let has_both = |dir: &Path| dir.join("initdb").is_file() && dir.join("postgres").is_file();
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            if has_both(&dir) {
                // /usr/local/bin/initdb may be a link into the real installation, where the
                // other tools (pg_isready, pg_dump) are.
                let real =
                    std::fs::canonicalize(dir.join("initdb")).ok().and_then(|p| p.parent().map(Path::to_path_buf));
                return Ok(real.filter(|r| has_both(r)).unwrap_or(dir));
            }
        }
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_string_lossy().parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            has_both(&bin).then_some((version, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin).ok_or_else(|| {
        Error::Embedded(
            "no PostgreSQL server binaries (initdb, postgres) on PATH or under /usr/lib/postgresql/*/bin. \
             Install them (Debian/Ubuntu: apt-get install postgresql) or set DATABASE_URL to an existing database."
                .into(),
        )
    })
}

/// Makes `data_dir` a standby of the private server listening on `port`: a copy of it taken with
/// `pg_basebackup -R -X stream` (the copy streams the server's WAL once started, as
/// `postgresql.auto.conf` and `standby.signal` say), written as the user the server runs as.
/// Start it with [`EmbeddedPostgres::start`] on the same `data_dir`; `select pg_promote()` on it
/// makes it a primary. The server's `pg_hba.conf` (initdb's) lets local replication in.
pub async fn base_backup(port: u16, data_dir: PathBuf) -> Result<()> {
    tokio::task::spawn_blocking(move || {
        let user = server_user()?;
        let dir = usable_data_dir(&data_dir, &user)?;
        std::fs::create_dir_all(&dir)?;
        // the server starts only on a data directory that is its user's alone
        std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))?;
        chown_to(&dir, &user)?;
        let mut cmd = Command::new(find_bin_dir()?.join("pg_basebackup"));
        cmd.arg("-D").arg(&dir).args(["-R", "-X", "stream", "-c", "fast", "-h", "127.0.0.1", "-U", "postgres"]);
        cmd.arg("-p").arg(port.to_string()).stdin(Stdio::null());
        as_user(&mut cmd, &user);
        let out = cmd.output().map_err(|e| Error::Embedded(format!("running pg_basebackup: {e}")))?;
        if !out.status.success() {
            return Err(Error::Embedded(format!(
                "pg_basebackup into {} failed: {}",
                dir.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(())
    })
    .await
    .map_err(|e| Error::Embedded(format!("base backup task failed: {e}")))?
}

/// When running as root, the server must run as an unprivileged user: `postgres`.
fn server_user() -> Result<Option<nix::unistd::User>> {
    if !nix::unistd::Uid::effective().is_root() {
        return Ok(None);
    }
    match nix::unistd::User::from_name("postgres") {
        Ok(Some(user)) => Ok(Some(user)),
        _ => Err(Error::Embedded(
            "running as root, but there is no 'postgres' user to run the server as; \
             create one (useradd postgres) or set DATABASE_URL"
                .into(),
        )),
    }
}

fn as_user(cmd: &mut Command, user: &Option<nix::unistd::User>) {
    if let Some(u) = user {
        cmd.uid(u.uid.as_raw()).gid(u.gid.as_raw());
    }
}

fn chown_to(path: &Path, user: &Option<nix::unistd::User>) -> Result<()> {
    if let Some(u) = user {
        nix::unistd::chown(path, Some(u.uid), Some(u.gid))
            .map_err(|e| Error::Embedded(format!("chown {}: {e}", path.display())))?;
    }
    Ok(())
}

fn free_port() -> Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

/// Whether every directory above `path` lets `user` through (owner, group or other search bit).
fn reachable_by(path: &Path, user: &nix::unistd::User) -> bool {
    use std::os::unix::fs::MetadataExt;
    path.ancestors().skip(1).all(|dir| match std::fs::metadata(dir) {
        Ok(m) if m.uid() == user.uid.as_raw() => m.mode() & 0o100 != 0,
        Ok(m) if m.gid() == user.gid.as_raw() => m.mode() & 0o010 != 0,
        Ok(m) => m.mode() & 0o001 != 0,
        Err(_) => true, // not created yet: created below by us with default modes
    })
}

/// The data directory to use: the configured one, or, when running as root and the `postgres`
/// user cannot reach it (a checkout under /root, say), one under the system temp directory.
fn usable_data_dir(configured: &Path, user: &Option<nix::unistd::User>) -> Result<PathBuf> {
    let dir = std::path::absolute(configured)?;
    match user {
        Some(u) if !reachable_by(&dir, u) => {
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            std::hash::Hash::hash(&dir, &mut hasher);
            let fallback = std::env::temp_dir()
                .join(format!("asyncflow-pg-{:016x}", std::hash::Hasher::finish(&hasher)))
                .join(dir.file_name().unwrap_or_default());
            tracing::info!(configured = %dir.display(), used = %fallback.display(), "the postgres user cannot reach the data directory; using one under the temp directory");
            if let Some(parent) = fallback.parent() {
                std::fs::create_dir_all(parent)?;
            }
            Ok(fallback)
        }
        _ => Ok(dir),
    }
}

/// The pid and port of a live server on `data_dir`, from its `postmaster.pid` (lines 1 and 4);
/// None when there is none or its process is gone (a stale file, which the server itself
/// replaces).
fn running_server(data_dir: &std::path::Path) -> Option<(i32, u16)> {
    let text = std::fs::read_to_string(data_dir.join("postmaster.pid")).ok()?;
    let mut lines = text.lines();
    let pid: i32 = lines.next()?.trim().parse().ok()?;
    let port: u16 = lines.nth(2)?.trim().parse().ok()?;
    // EPERM: the process exists but belongs to another user (the server's, when this one is not)
    let alive = pid > 0
        && matches!(
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None),
            Ok(()) | Err(nix::errno::Errno::EPERM)
        );
    alive.then_some((pid, port))
}

fn start_blocking(config: &EmbeddedConfig) -> Result<EmbeddedPostgres> {
    let bin = find_bin_dir()?;
    let user = server_user()?;
    let data_dir = usable_data_dir(&config.data_dir, &user)?;
    if !data_dir.join("PG_VERSION").is_file() {
        std::fs::create_dir_all(&data_dir)?;
        chown_to(&data_dir, &user)?;
        let mut initdb = Command::new(bin.join("initdb"));
        initdb
            .arg("-D")
            .arg(&data_dir)
            .args(["-U", "postgres", "--auth=trust", "--encoding=UTF8", "--locale=C.UTF-8", "--no-instructions"])
            .stdin(Stdio::null());
        as_user(&mut initdb, &user);
        let out = initdb.output().map_err(|e| Error::Embedded(format!("running initdb: {e}")))?;
        if !out.status.success() {
            return Err(Error::Embedded(format!(
                "initdb failed in {}: {}",
                data_dir.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
    }
    if let Some((pid, port)) = running_server(&data_dir) {
        return Err(Error::Embedded(format!(
            "the data directory {} is in use by a running server (pid {pid}, port {port}), another asyncflow \
             command's embedded server: set DATABASE_URL=postgres://postgres@127.0.0.1:{port}/postgres to use it \
             too, or stop that command first",
            data_dir.display()
        )));
    }
    let port = match config.port {
        Some(port) => port,
        None => free_port()?,
    };
    let log_path = data_dir.with_extension("log");
    // appended to, never truncated: the log of an earlier run is kept
    let log = std::fs::OpenOptions::new().create(true).append(true).open(&log_path)?;
    chown_to(&log_path, &user)?;

    let mut cmd = Command::new(bin.join("postgres"));
    cmd.arg("-D")
        .arg(&data_dir)
        .arg("-p")
        .arg(port.to_string())
        .args(["-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories="])
        .args(["-c", "max_connections=200"]);
    for (name, value) in &config.settings {
        cmd.arg("-c").arg(format!("{name}={value}"));
    }
    cmd.stdin(Stdio::null()).stdout(log.try_clone()?).stderr(log);
    // A process group of its own: a Ctrl-C at the terminal goes to the command, which shuts down
    // (a worker hands its tasks back through this server) and then stops the server; in the
    // terminal's group the server got the signal too and stopped first.
    cmd.process_group(0);
    as_user(&mut cmd, &user);
    // Stop the server when the thread that started it goes away (it lives as long as the process).
    unsafe {
        cmd.pre_exec(|| {
            nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGINT).map_err(std::io::Error::from)?;
            Ok(())
        });
    }
    let child = spawn_from_lasting_thread(cmd)?;
    let url = format!("postgres://postgres@127.0.0.1:{port}/postgres");
    let mut server = EmbeddedPostgres { url, child: Some(child) };

    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() && accepts_queries(&bin, port) {
            return Ok(server);
        }
        if let Some(child) = server.child.as_mut() {
            if let Ok(Some(status)) = child.try_wait() {
                server.child = None;
                let log = std::fs::read_to_string(&log_path).unwrap_or_default();
                return Err(Error::Embedded(format!(
                    "the server exited at start-up ({status}); its log {}:\n{}",
                    log_path.display(),
                    log.lines().rev().take(10).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n")
                )));
            }
        }
        if Instant::now() > deadline {
            return Err(Error::Embedded(format!(
                "the server did not start within {START_TIMEOUT:?}; see {}",
                log_path.display()
            )));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn accepts_queries(bin: &Path, port: u16) -> bool {
    let isready = bin.join("pg_isready");
    if !isready.is_file() {
        return true;
    }
    Command::new(isready)
        .args(["-q", "-h", "127.0.0.1", "-p", &port.to_string(), "-U", "postgres"])
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// PR_SET_PDEATHSIG fires when the *thread* that forked the child exits, so the child is spawned
/// from a thread that never ends.
fn spawn_from_lasting_thread(mut cmd: Command) -> Result<Child> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new().name("embedded-postgres".into()).spawn(move || {
        let _ = tx.send(cmd.spawn());
        loop {
            std::thread::park();
        }
    })?;
    rx.recv()
        .map_err(|_| Error::Embedded("the start-up thread ended early".into()))?
        .map_err(|e| Error::Embedded(format!("starting postgres: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_live_server_is_found_from_its_pid_file_and_a_stale_one_is_not() {
        let dir = std::env::temp_dir().join(format!("af-emb-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        let pid_file = dir.join("postmaster.pid");
        assert_eq!(running_server(&dir), None, "no file");
        let me = std::process::id();
        std::fs::write(&pid_file, format!("{me}\n{}\n1700000000\n54321\n\n127.0.0.1\n", dir.display())).unwrap();
        assert_eq!(running_server(&dir), Some((me as i32, 54321)), "this process stands in for a live server");
        // a pid no process has (beyond the kernel's default pid_max)
        std::fs::write(&pid_file, "4194304\n/x\n1700000000\n54321\n").unwrap();
        assert_eq!(running_server(&dir), None, "stale");
        std::fs::write(&pid_file, "garbage\n").unwrap();
        assert_eq!(running_server(&dir), None);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
