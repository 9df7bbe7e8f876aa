//! A private PgBouncer (Debian's `pgbouncer` package) in front of a PostgreSQL server, in
//! transaction mode with its defaults plus `ignore_startup_parameters = extra_float_digits`: the
//! pooler the bench's idle and ephemeral phases and the tests run asyncflow through.
//!
//! ```text
//!   asyncflow --pool-mode transaction ──> 127.0.0.1:<port> PgBouncer ──> the server
//!   [databases] * = host=<server> port=<port> user=<user>   (every database, as that user)
//!   auth_type = any, pool_mode = transaction, max_client_conn = 2000
//! ```
//!
//! Run as root, PgBouncer (which refuses root) switches to `nobody`. The process is killed when
//! the value is dropped.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::str::FromStr;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// Where Debian installs the binary.
pub const BINARY: &str = "/usr/sbin/pgbouncer";

/// A running PgBouncer, stopped when dropped.
pub struct PgBouncer {
    /// The port it listens on (127.0.0.1).
    pub port: u16,
    dir: PathBuf,
    child: Child,
}

/// The binary: `$PGBOUNCER`, [`BINARY`], or `pgbouncer` on the PATH; None when none is there.
pub fn binary() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("PGBOUNCER").map(PathBuf::from).filter(|p| p.is_file()) {
        return Some(p);
    }
    if Path::new(BINARY).is_file() {
        return Some(PathBuf::from(BINARY));
    }
    std::env::var_os("PATH")
        .and_then(|paths| std::env::split_paths(&paths).map(|d| d.join("pgbouncer")).find(|p| p.is_file()))
}

impl PgBouncer {
    /// Starts PgBouncer in front of the server `server_url` names (its first host and port, its
    /// user), with `default_pool_size` server connections per database; waits (10 s at most)
    /// until it accepts connections.
    pub fn start(server_url: &str, default_pool_size: u32) -> Result<PgBouncer> {
        let exe = binary().ok_or_else(|| {
            Error::Config("pgbouncer is not installed (Debian: apt-get install pgbouncer; or set PGBOUNCER)".into())
        })?;
        let pg = tokio_postgres::Config::from_str(server_url)
            .map_err(|e| Error::Config(format!("invalid database URL: {e}")))?;
        let host = match pg.get_hosts().first() {
            Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
            _ => return Err(Error::Config("PgBouncer needs a TCP host in the database URL".into())),
        };
        let server_port = pg.get_ports().first().copied().unwrap_or(5432);
        let user = pg.get_user().unwrap_or("postgres");
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let dir = std::env::temp_dir().join(format!("asyncflow-pgbouncer-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let ini = format!(
            "[databases]\n* = host={host} port={server_port} user={user}\n\n[pgbouncer]\nlisten_addr = 127.0.0.1\n\
             listen_port = {port}\nunix_socket_dir =\nauth_type = any\npool_mode = transaction\n\
             ignore_startup_parameters = extra_float_digits\nmax_client_conn = 2000\n\
             default_pool_size = {default_pool_size}\n"
        );
        let config = dir.join("pgbouncer.ini");
        std::fs::write(&config, ini)?;
        let mut cmd = Command::new(exe);
        if nix::unistd::Uid::effective().is_root() {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))?;
            std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o644))?;
            cmd.args(["-u", "nobody"]);
        }
        let child = cmd
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| Error::Config(format!("starting pgbouncer: {e}")))?;
        let mut bouncer = PgBouncer { port, dir, child };
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Ok(Some(status)) = bouncer.child.try_wait() {
                return Err(Error::Config(format!("pgbouncer exited at start ({status})")));
            }
            if Instant::now() > deadline {
                return Err(Error::Config("pgbouncer did not listen within 10 s".into()));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(bouncer)
    }

    /// The URL of `database` through this PgBouncer (`auth_type = any`: the user is the one of
    /// its `[databases]` line whatever the client says).
    pub fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
