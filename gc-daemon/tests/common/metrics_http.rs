//! A daemon's metrics endpoint, as the tests read it: a plain HTTP/1.1 GET on 127.0.0.1 and one
//! unlabelled sample of the OpenMetrics text.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// A minimal HTTP/1.1 GET on 127.0.0.1: the status code and the body.
pub fn http_get(port: u16, path: &str) -> std::io::Result<(u16, String)> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(500))?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    stream.set_write_timeout(Some(Duration::from_secs(2)))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let bad = |what: &str| std::io::Error::other(format!("{what} in response: {response:?}"));
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or_else(|| bad("no end of headers"))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad("no status code"))?;
    Ok((status, body.to_owned()))
}

/// The value of the unlabelled sample `name` in OpenMetrics text.
pub fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}
