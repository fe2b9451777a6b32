//! A loopback TCP proxy in front of the S3 server, one per supervisor, that the nemesis can
//! hold: bytes read while it is held are kept until the hold ends (a slow store, not a broken
//! one; the client sees its request or answer late).

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How often an idle thread of the proxy looks whether it is to stop.
const POLL: Duration = Duration::from_millis(50);

#[derive(Debug)]
pub struct Proxy {
    pub addr: SocketAddr,
    state: Arc<State>,
}

#[derive(Debug)]
struct State {
    upstream: SocketAddr,
    held_until: Mutex<Option<Instant>>,
    stop: AtomicBool,
}

impl State {
    fn held(&self) -> bool {
        #[allow(clippy::disallowed_methods)] // real time: the proxy delays real processes
        let now = Instant::now();
        self.held_until
            .lock()
            .unwrap()
            .is_some_and(|until| now < until)
    }
}

impl Proxy {
    /// Listen on 127.0.0.1 (a free port) and forward every connection to `upstream`.
    pub fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(State {
            upstream,
            held_until: Mutex::new(None),
            stop: AtomicBool::new(false),
        });
        let s = state.clone();
        std::thread::spawn(move || accept(listener, s));
        Proxy { addr, state }
    }

    /// Hold all traffic for `d` from now (a hold already longer is kept).
    pub fn hold(&self, d: Duration) {
        #[allow(clippy::disallowed_methods)] // real time
        let until = Instant::now() + d;
        let mut held = self.state.held_until.lock().unwrap();
        *held = Some(held.map_or(until, |h| h.max(until)));
    }
}

impl Drop for Proxy {
    /// Every thread of the proxy ends within [`POLL`] (or once its hold ends).
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::Relaxed);
    }
}

fn accept(listener: TcpListener, state: Arc<State>) {
    while !state.stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((client, _)) => {
                let Ok(server) = TcpStream::connect(state.upstream) else {
                    continue; // the client sees its connection closed: a store error
                };
                for (from, to) in [
                    (client.try_clone(), server.try_clone()),
                    (server.try_clone(), client.try_clone()),
                ] {
                    let (Ok(from), Ok(to)) = (from, to) else {
                        break;
                    };
                    let s = state.clone();
                    std::thread::spawn(move || pump(from, to, &s));
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => std::thread::sleep(POLL),
            Err(_) => std::thread::sleep(POLL),
        }
    }
}

/// Copy `from` to `to`, keeping what was read while the proxy is held; ends on EOF, an error,
/// or the proxy's stop.
fn pump(mut from: TcpStream, mut to: TcpStream, state: &State) {
    let _ = from.set_nonblocking(false);
    let _ = from.set_read_timeout(Some(POLL));
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        if state.stop.load(Ordering::Relaxed) {
            break;
        }
        let n = match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => continue,
            Err(_) => break,
        };
        // Bounded: a hold is a few seconds, and a stopped proxy lets go at once.
        while state.held() && !state.stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(10));
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
    let _ = from.shutdown(Shutdown::Read);
}
