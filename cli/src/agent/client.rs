//! `banklease agent …`: the owner operations of a command run by `banklease run`, sent to its
//! agent over the Unix socket named by `BANKLEASE_AGENT`.
//!
//! Exit codes: 0 done; 1 refused (the lease is not valid or lost, or the GC collected the
//! checkpoint); 2 error (no agent, bad input, store failure).
//!
//! Invariant: **a refusal always reaches the caller.** The agent answers a refused upload (a
//! bad name, a completed checkpoint, `not_valid`, `fenced`, `closing`) as soon as it refuses,
//! without reading the rest of the body, and closes; this client (`AnswerFirst`) drops its
//! writes from the first broken pipe and reads the answer, so the job gets the reason and a
//! non-zero exit however large and fast its body is. Success is never made up: the agent
//! answers 2xx only after the whole body.

use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::task::{Context as TaskContext, Poll};

use anyhow::{anyhow, Context, Result};
use bytes::Bytes;
use clap::Subcommand;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::UnixStream;
use tokio_util::io::ReaderStream;

use super::api::{
    CheckpointBody, CompleteBody, CreateBody, DataBody, ErrorBody, StatusBody, ValidBody,
    AGENT_ENV, REFUSED_KINDS,
};
use crate::{human, out_json, out_line, Outcome};

/// `banklease agent …`
#[derive(Debug, clap::Args)]
pub struct AgentArgs {
    /// The agent's socket [default: `$BANKLEASE_AGENT`, set by `banklease run`].
    #[arg(long, value_name = "PATH", env = AGENT_ENV)]
    socket: Option<PathBuf>,

    #[command(subcommand)]
    command: AgentCommand,
}

#[derive(Debug, Subcommand)]
enum AgentCommand {
    /// Exit 0 if a write sent now would be accepted, 1 if not. Sends no store request.
    Valid,
    /// The lease's state, time left and the checkpoints created through the agent.
    Status,
    /// Create, write and complete checkpoints under the agent's lease.
    #[command(subcommand)]
    Checkpoint(CheckpointCommand),
}

#[derive(Debug, Subcommand)]
enum CheckpointCommand {
    /// Create checkpoint ID as `protecting`, owned by the agent's owner.
    Create {
        /// The checkpoint id.
        id: String,
    },
    /// Write data object NAME of checkpoint ID from FILE, or stdin when FILE is `-` or absent.
    /// Large data goes as a multipart upload; the lease is checked before every part.
    Put {
        /// The checkpoint id.
        id: String,
        /// The data object's name.
        name: String,
        /// The file to send; `-` or absent for stdin.
        file: Option<PathBuf>,
    },
    /// Complete checkpoint ID as `available` or `error`. Refused (exit 1) if the lease is not
    /// valid or the GC collected it: then it must not be reported as available.
    Complete {
        /// The checkpoint id.
        id: String,
        /// `available` or `error`.
        #[arg(value_parser = ["available", "error"])]
        status: String,
    },
}

/// Run one `banklease agent` command.
pub async fn run(args: AgentArgs, json: bool) -> Result<Outcome> {
    let socket = args.socket.ok_or_else(|| {
        anyhow!(
            "no agent: `{AGENT_ENV}` is not set; run this from a command started by \
             `banklease run -- COMMAND`, or pass --socket"
        )
    })?;
    let client = Client { socket };
    match args.command {
        AgentCommand::Valid => {
            let answer = client.send(Method::GET, "/v1/valid", empty()).await?;
            match answer.decode::<ValidBody>()? {
                Ok(v) => {
                    if json {
                        out_json(&v)?;
                    } else {
                        out_line(&format!(
                            "valid: {} left",
                            human(std::time::Duration::from_millis(v.remaining_ms))
                        ))?;
                    }
                    Ok(Outcome::Yes)
                }
                Err(e) => answer.refused_or_failed(e, json),
            }
        }
        AgentCommand::Status => {
            let answer = client.send(Method::GET, "/v1/status", empty()).await?;
            match answer.decode::<StatusBody>()? {
                Ok(s) if json => {
                    out_json(&s)?;
                    Ok(Outcome::Yes)
                }
                Ok(s) => {
                    print_status(&s)?;
                    Ok(Outcome::Yes)
                }
                Err(e) => answer.refused_or_failed(e, json),
            }
        }
        AgentCommand::Checkpoint(CheckpointCommand::Create { id }) => {
            let body = serde_json::to_vec(&CreateBody { id })?;
            let answer = client
                .send(Method::POST, "/v1/checkpoints", full(body))
                .await?;
            answer.report::<CheckpointBody>(json, |c| format!("created {} (protecting)", c.id))
        }
        AgentCommand::Checkpoint(CheckpointCommand::Put { id, name, file }) => {
            let body = match file.as_deref() {
                None => stream(tokio::io::stdin()),
                Some(p) if p == Path::new("-") => stream(tokio::io::stdin()),
                Some(p) => {
                    let f = tokio::fs::File::open(p)
                        .await
                        .with_context(|| format!("cannot open file=`{}`", p.display()))?;
                    stream(f)
                }
            };
            let path = format!("/v1/checkpoints/{}/data/{}", segment(&id), segment(&name));
            let answer = client.send(Method::PUT, &path, body).await?;
            answer.report::<DataBody>(json, |d| {
                format!("wrote {}/{} ({} bytes)", d.id, d.name, d.bytes)
            })
        }
        AgentCommand::Checkpoint(CheckpointCommand::Complete { id, status }) => {
            let body = serde_json::to_vec(&CompleteBody { status })?;
            let path = format!("/v1/checkpoints/{}/complete", segment(&id));
            let answer = client.send(Method::POST, &path, full(body)).await?;
            answer.report::<CheckpointBody>(json, |c| format!("completed {} as {}", c.id, c.status))
        }
    }
}

fn print_status(s: &StatusBody) -> Result<()> {
    out_line(&format!("owner_id:  {}", s.owner_id))?;
    out_line(&format!("bank:      {}", s.bank))?;
    let left = human(std::time::Duration::from_millis(s.remaining_ms));
    let state = match &s.reason {
        Some(r) => format!("{} ({r})", s.state),
        None if s.valid => format!("{}, valid, {left} left", s.state),
        None => format!("{}, not valid, {left} left", s.state),
    };
    out_line(&format!("state:     {state}"))?;
    for c in &s.checkpoints {
        out_line(&format!(
            "checkpoint {} {} ({} objects, {} bytes)",
            c.id, c.status, c.data_objects, c.data_bytes
        ))?;
    }
    Ok(())
}

/// Ids are validated by the agent; a path segment only needs its reserved bytes escaped.
fn segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

type Body = BoxBody<Bytes, std::io::Error>;

fn empty() -> Body {
    full(Vec::new())
}

fn full(bytes: Vec<u8>) -> Body {
    Full::new(Bytes::from(bytes))
        .map_err(|never| match never {})
        .boxed()
}

fn stream<R: tokio::io::AsyncRead + Send + Sync + 'static>(reader: R) -> Body {
    use futures::TryStreamExt;
    BodyExt::boxed(StreamBody::new(
        ReaderStream::with_capacity(reader, 1 << 20).map_ok(Frame::data),
    ))
}

struct Client {
    socket: PathBuf,
}

struct Answer {
    status: StatusCode,
    body: Bytes,
}

impl Client {
    async fn send(&self, method: Method, path: &str, body: Body) -> Result<Answer> {
        let socket = self.socket.display();
        let stream = UnixStream::connect(&self.socket).await.with_context(|| {
            format!(
                "cannot reach the agent at {AGENT_ENV}=`{socket}`; is `banklease run` still \
                 running?"
            )
        })?;
        let io = TokioIo::new(AnswerFirst {
            inner: stream,
            stopped_reading: false,
        });
        let (mut sender, connection) = hyper::client::conn::http1::handshake(io)
            .await
            .with_context(|| format!("cannot talk HTTP to the agent at `{socket}`"))?;
        let connection = tokio::spawn(connection);
        let request = Request::builder()
            .method(method)
            .uri(path)
            .header(hyper::header::HOST, "agent")
            .body(body)
            .context("cannot build the request")?;
        let response = sender.send_request(request).await.with_context(|| {
            format!("the agent at `{socket}` did not answer (did it exit, or the lease end?)")
        })?;
        let status = response.status();
        // Whatever is left of our body is not sent once the answer is read: `connection` is
        // aborted below (a refused upload does not wait for a slow producer's end).
        let body = response
            .into_body()
            .collect()
            .await
            .with_context(|| format!("the agent at `{socket}` cut its answer short"))?
            .to_bytes();
        connection.abort();
        Ok(Answer { status, body })
    }
}

/// The agent's socket, read and written as usual, except that the agent may answer before it
/// has read our whole body — a refusal — and close its end: writing the rest then fails with
/// EPIPE (or ECONNRESET), which must not hide the answer waiting in the socket. From the first
/// such failure, writes are dropped; reads go on, so hyper reads the answer (or the end of the
/// stream, when the agent died without one: an error). Success is never made up: the agent
/// answers 2xx only after it read the whole body.
struct AnswerFirst {
    inner: UnixStream,
    stopped_reading: bool,
}

fn peer_stopped_reading(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
    )
}

impl AsyncRead for AnswerFirst {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AnswerFirst {
    /// Run one write-side call unless the agent stopped reading; once it has (now or before),
    /// report `done` instead of the failure.
    fn write_side<T>(
        &mut self,
        done: T,
        call: impl FnOnce(Pin<&mut UnixStream>) -> Poll<std::io::Result<T>>,
    ) -> Poll<std::io::Result<T>> {
        if self.stopped_reading {
            return Poll::Ready(Ok(done));
        }
        match call(Pin::new(&mut self.inner)) {
            Poll::Ready(Err(e)) if peer_stopped_reading(&e) => {
                self.stopped_reading = true;
                Poll::Ready(Ok(done))
            }
            other => other,
        }
    }
}

impl AsyncWrite for AnswerFirst {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.write_side(buf.len(), |inner| inner.poll_write(cx, buf))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<std::io::Result<()>> {
        self.write_side((), |inner| inner.poll_flush(cx))
    }

    fn poll_shutdown(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
    ) -> Poll<std::io::Result<()>> {
        self.write_side((), |inner| inner.poll_shutdown(cx))
    }
}

impl Answer {
    /// The success body, or the error body of a failed request.
    fn decode<T: serde::de::DeserializeOwned>(&self) -> Result<Result<T, ErrorBody>> {
        let text = String::from_utf8_lossy(&self.body);
        if self.status.is_success() {
            serde_json::from_slice(&self.body)
                .map(Ok)
                .with_context(|| format!("the agent's answer is not understood: {text}"))
        } else {
            serde_json::from_slice(&self.body)
                .map(Err)
                .with_context(|| format!("the agent failed with {}: {text}", self.status))
        }
    }

    fn refused_or_failed(&self, e: ErrorBody, json: bool) -> Result<Outcome> {
        if json {
            out_json(&e)?;
        }
        eprintln!("error: {}", e.error);
        Ok(if REFUSED_KINDS.contains(&e.kind.as_str()) {
            Outcome::No
        } else {
            Outcome::Failed
        })
    }

    fn report<T>(&self, json: bool, text: impl Fn(&T) -> String) -> Result<Outcome>
    where
        T: serde::de::DeserializeOwned + serde::Serialize,
    {
        match self.decode::<T>()? {
            Ok(v) => {
                if json {
                    out_json(&v)?;
                } else {
                    out_line(&text(&v))?;
                }
                Ok(Outcome::Yes)
            }
            Err(e) => self.refused_or_failed(e, json),
        }
    }
}
