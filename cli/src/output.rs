//! Output helpers: lines, JSON objects, aligned tables, durations.

use std::io::Write;
use std::time::Duration;

use anyhow::Result;
use serde::Serialize;

/// Our stdout's reader went away (`banklease lease list | head`): nothing is left to say, and
/// it is not a failure. Only a write to our own stdout is ever this; a broken pipe anywhere
/// else (the agent's socket, a store's connection) is an error like any other.
#[derive(Debug)]
pub(crate) struct StdoutClosed;

impl std::fmt::Display for StdoutClosed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("stdout was closed by its reader")
    }
}

impl std::error::Error for StdoutClosed {}

pub(crate) fn out_line(line: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")
        .and_then(|()| out.flush())
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::BrokenPipe => anyhow::Error::new(StdoutClosed),
            _ => anyhow::Error::new(e).context("cannot write to stdout"),
        })
}

pub(crate) fn out_json<T: Serialize>(value: &T) -> Result<()> {
    out_line(&serde_json::to_string(value)?)
}

pub(crate) fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A duration for humans, to the millisecond (`1s 250ms`).
pub(crate) fn human(d: Duration) -> String {
    humantime::format_duration(Duration::from_millis(ms(d))).to_string()
}

/// Print `rows` as a table with a header, columns padded to their widest cell.
pub(crate) fn out_table(header: &[&str], rows: &[Vec<String>]) -> Result<()> {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut s = String::new();
        for (i, cell) in cells.enumerate() {
            if i > 0 {
                s.push_str("  ");
            }
            s.push_str(&format!("{cell:<width$}", width = widths[i]));
        }
        s.trim_end().to_owned()
    };
    out_line(&line(&mut header.iter().copied()))?;
    for row in rows {
        out_line(&line(&mut row.iter().map(String::as_str)))?;
    }
    Ok(())
}
