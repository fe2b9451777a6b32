//! Each TLS cause has its own line, through the binary against TLS endpoints on 127.0.0.1
//! made here with `openssl` (a CA, then servers whose certificate is signed by it, for another
//! name, expired), and a plain-HTTP port behind `https://`: the `error:` line names the cause in
//! words and what to do, the unknown issuer every place a CA can be set; a CA file holding the
//! server's own certificate is refused before any request, as a leaf given as the CA.

#![allow(clippy::disallowed_methods)] // real processes

mod common;

use std::io::Write;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::BIN;

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA (`ca.pem`), and leaves it signed: `good` (127.0.0.1), `other` (other.example),
/// `expired` (127.0.0.1, valid in 2020 only); and `pinned`, a self-signed server certificate
/// (CA:FALSE, 127.0.0.1), as MinIO's and Go's generators make them.
fn make_certs(dir: &Path) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "pinned.key",
            "-out",
            "pinned.pem",
            "-days",
            "2",
            "-subj",
            "/CN=pinned",
            "-addext",
            "basicConstraints=critical,CA:FALSE",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ],
    );
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "2",
            "-subj",
            "/CN=banklease test CA",
        ],
    );
    std::fs::write(
        dir.join("ca.cnf"),
        "[ ca ]\ndefault_ca = d\n[ d ]\ndir = .\ndatabase = index.txt\nnew_certs_dir = .\n\
         serial = serial\ndefault_md = sha256\npolicy = p\ncopy_extensions = copy\n\
         [ p ]\ncommonName = supplied\n",
    )
    .unwrap();
    std::fs::write(dir.join("index.txt"), "").unwrap();
    std::fs::write(dir.join("serial"), "1000\n").unwrap();
    for (name, san, dates) in [
        ("good", "IP:127.0.0.1", None),
        ("other", "DNS:other.example", None),
        (
            "expired",
            "IP:127.0.0.1",
            Some(("20200101000000Z", "20200102000000Z")),
        ),
    ] {
        let key = format!("{name}.key");
        let csr = format!("{name}.csr");
        let pem = format!("{name}.pem");
        let ext = format!("{name}.ext");
        std::fs::write(
            dir.join(&ext),
            format!("basicConstraints=CA:FALSE\nsubjectAltName={san}\n"),
        )
        .unwrap();
        openssl(
            dir,
            &[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                &key,
                "-out",
                &csr,
                "-subj",
                &format!("/CN={name}"),
            ],
        );
        let mut args = vec![
            "ca", "-batch", "-config", "ca.cnf", "-cert", "ca.pem", "-keyfile", "ca.key", "-in",
            &csr, "-out", &pem, "-extfile", &ext, "-notext",
        ];
        match dates {
            Some((start, end)) => args.extend(["-startdate", start, "-enddate", end]),
            None => args.extend(["-days", "2"]),
        }
        openssl(dir, &args);
    }
}

/// `openssl s_server` with `name`'s certificate on a free port of 127.0.0.1.
struct Server(Child, u16);

impl Server {
    fn start(dir: &Path, name: &str) -> Self {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new("openssl")
            .args(["s_server", "-quiet", "-www", "-accept"])
            .arg(format!("127.0.0.1:{port}"))
            .args([
                "-cert",
                &format!("{name}.pem"),
                "-key",
                &format!("{name}.key"),
            ])
            .current_dir(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "s_server did not start"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Server(child, port)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `banklease lease list` on an S3 bank at `endpoint`, with `vars`.
fn list(endpoint: &str, vars: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(BIN);
    for (var, _) in std::env::vars_os() {
        let v = var.to_string_lossy();
        if v.starts_with("BANKLEASE_")
            || v.starts_with("AWS_")
            || v == "RUST_LOG"
            || v == "SSL_CERT_FILE"
        {
            cmd.env_remove(&var);
        }
    }
    cmd.args(["--bank", "s3://tls-test/p", "lease", "list"])
        .env("AWS_ENDPOINT", endpoint)
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_REGION", "us-east-1")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("NO_COLOR", "1")
        .envs(vars.iter().copied())
        .output()
        .unwrap()
}

/// The one `error:` line of a command that failed.
fn error_line(out: &Output, case: &str) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_ne!(out.status.code(), Some(0), "{case}: {stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{case}: one line: {stderr}");
    assert!(lines[0].starts_with("error: "), "{case}: {stderr}");
    lines[0].to_owned()
}

#[test]
fn each_tls_cause_has_its_own_line() {
    if Command::new("openssl").arg("version").output().is_err() {
        eprintln!("skipped: no openssl(1)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    make_certs(dir.path());
    let ca = dir.path().join("ca.pem").display().to_string();

    let good = Server::start(dir.path(), "good");
    let endpoint = format!("https://127.0.0.1:{}", good.1);
    let line = error_line(&list(&endpoint, &[]), "no CA");
    for part in [
        "unknown issuer",
        "`[bank] ca_file`",
        "AWS_CA_BUNDLE",
        "OS_CACERT",
        "`cacert`",
        "not retried",
    ] {
        assert!(line.contains(part), "no CA: {part:?} missing: {line}");
    }
    // With its CA the handshake passes: the line (if any) is no TLS one.
    let out = list(&endpoint, &[("AWS_CA_BUNDLE", &ca)]);
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("TLS failed"),
        "{out:?}"
    );
    // The server's own certificate given as the CA: refused before any request.
    let leaf = dir.path().join("good.pem").display().to_string();
    for (var, named) in [
        ("AWS_CA_BUNDLE", "AWS_CA_BUNDLE=`"),
        ("BANKLEASE_BANK__CA_FILE", "bank.ca_file=`"),
    ] {
        let line = error_line(&list(&endpoint, &[(var, &leaf)]), "leaf as CA");
        assert!(
            line.contains(named) && line.contains("a leaf given as the CA"),
            "{line}"
        );
    }
    drop(good);

    // A self-signed server certificate given as its own CA: trusted, not refused as a leaf.
    let pinned = Server::start(dir.path(), "pinned");
    let own = dir.path().join("pinned.pem").display().to_string();
    let out = list(
        &format!("https://127.0.0.1:{}", pinned.1),
        &[("AWS_CA_BUNDLE", &own)],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !err.contains("TLS failed") && !err.contains("leaf given"),
        "{err}"
    );
    drop(pinned);

    // Signed by the trusted CA, but for another name, or expired.
    for (name, says) in [
        ("other", "not valid for the host name"),
        ("expired", "has expired"),
    ] {
        let server = Server::start(dir.path(), name);
        let endpoint = format!("https://127.0.0.1:{}", server.1);
        let line = error_line(&list(&endpoint, &[("AWS_CA_BUNDLE", &ca)]), name);
        assert!(line.contains(says), "{name}: {line}");
    }

    // `https://` to a port that answers plain HTTP.
    let plain = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = plain.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in plain.incoming().take(20) {
            let Ok(mut stream) = stream else { break };
            let _ = stream.write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n");
        }
    });
    let line = error_line(
        &list(&format!("https://127.0.0.1:{port}"), &[]),
        "plain HTTP",
    );
    assert!(line.contains("does not speak TLS"), "{line}");
}
