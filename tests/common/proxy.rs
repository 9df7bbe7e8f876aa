//! A TCP proxy in front of the test server that can be told to freeze: it then stops forwarding
//! in both directions without closing any socket, as a network partition does (the peers' TCP
//! keepalive is still answered by this host's kernel). When it thaws, what it held is delivered
//! in the order it was sent, across connections, as a network's queue would.
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// A running proxy; stops when dropped.
pub struct Proxy {
    /// The port it listens on (127.0.0.1).
    pub port: u16,
    state: Arc<State>,
    task: tokio::task::JoinHandle<()>,
}

struct State {
    frozen: watch::Sender<bool>,
    /// Tickets of chunks held while frozen: the next to hand out, and how many were delivered.
    next_ticket: std::sync::atomic::AtomicU64,
    delivered: watch::Sender<u64>,
}

impl Proxy {
    /// A proxy to the server of `url` (host and port of its first host).
    pub async fn start(url: &str) -> Proxy {
        let config: tokio_postgres::Config = url.parse().expect("a database URL");
        let host = match config.get_hosts().first() {
            Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
            _ => "127.0.0.1".to_string(),
        };
        let target = format!("{host}:{}", config.get_ports().first().copied().unwrap_or(5432));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the proxy");
        let port = listener.local_addr().expect("its address").port();
        let state =
            Arc::new(State { frozen: watch::channel(false).0, next_ticket: 0.into(), delivered: watch::channel(0).0 });
        let shared = state.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (state, target) = (shared.clone(), target.clone());
                tokio::spawn(async move {
                    // a partition lets no new connection through either
                    state.until_thawed().await;
                    let Ok(server) = TcpStream::connect(&target).await else { return };
                    let (cr, cw) = client.into_split();
                    let (sr, sw) = server.into_split();
                    tokio::join!(pump(cr, sw, state.clone()), pump(sr, cw, state));
                });
            }
        });
        Proxy { port, state, task }
    }

    /// `url` with this proxy's port.
    pub fn url(&self, url: &str) -> String {
        let mut parsed = url::Url::parse(url).expect("a postgres:// URL");
        parsed.set_port(Some(self.port)).expect("a port");
        parsed.to_string()
    }

    /// Stops forwarding (sockets stay open).
    pub fn freeze(&self) {
        self.state.frozen.send_replace(true);
    }

    /// Forwards again, what was held first, in the order it came.
    pub fn thaw(&self) {
        self.state.frozen.send_replace(false);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl State {
    async fn until_thawed(&self) {
        let mut frozen = self.frozen.subscribe();
        let _ = frozen.wait_for(|f| !f).await;
    }
}

async fn pump(mut from: tokio::net::tcp::OwnedReadHalf, mut to: tokio::net::tcp::OwnedWriteHalf, state: Arc<State>) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => {
                // the sender closed: pass it on once the path is open
                state.until_thawed().await;
                let _ = to.shutdown().await;
                return;
            }
            Ok(n) => n,
        };
        if *state.frozen.borrow() {
            // held: delivered after every chunk held before it
            let ticket = state.next_ticket.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            state.until_thawed().await;
            let mut delivered = state.delivered.subscribe();
            let _ = delivered.wait_for(|d| *d >= ticket).await;
            let ok = to.write_all(&buf[..n]).await.is_ok();
            state.delivered.send_modify(|d| *d += 1);
            if !ok {
                return;
            }
        } else if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
