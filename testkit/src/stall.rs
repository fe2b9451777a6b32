//! A loopback TCP proxy that can stop forwarding: a store that seems to hang (connections
//! open, no answer) for as long as a test says, for tests of deadlines and retry budgets on real
//! servers.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};

/// A proxy to one upstream `host:port`, forwarding both ways until [`stall`](Self::stall)ed.
#[derive(Debug, Clone)]
pub struct StallingProxy {
    addr: SocketAddr,
    stalled: Arc<AtomicBool>,
}

impl StallingProxy {
    /// Listen on 127.0.0.1 (a free port) and forward every connection to `upstream`. Runs on the
    /// calling runtime until it shuts down.
    pub async fn start(upstream: &str) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1");
        let addr = listener.local_addr().expect("a local address");
        let stalled = Arc::new(AtomicBool::new(false));
        let (upstream, flag) = (upstream.to_owned(), stalled.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (upstream, flag) = (upstream.clone(), flag.clone());
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(&upstream).await else {
                        return;
                    };
                    let (cr, cw) = client.into_split();
                    let (sr, sw) = server.into_split();
                    tokio::join!(pipe(cr, sw, flag.clone()), pipe(sr, cw, flag));
                });
            }
        });
        Self { addr, stalled }
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stop forwarding: what is sent is held, not dropped.
    pub fn stall(&self) {
        self.stalled.store(true, Ordering::SeqCst);
    }

    /// Forward again.
    pub fn resume(&self) {
        self.stalled.store(false, Ordering::SeqCst);
    }
}

#[allow(clippy::disallowed_methods)] // real time: it stands in for a real server
async fn pipe(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, stalled: Arc<AtomicBool>) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        // Held while stalled; the test (and its runtime) bounds how long.
        while stalled.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
