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

/// The shortest a generated id is cut to in a table.
const SHORT_ID: usize = 12;

/// Ids as a table shows them: each generated id (32 or more hex digits and dashes: the
/// `host-start` scheme's hashes, uuids) cut to the shortest
/// prefix of at least 12 that no other id of the column shares, as git shows commits; other ids
/// whole. `--json` keeps full ids, and `lease show` takes a unique prefix.
pub(crate) fn short_ids(ids: &[String]) -> Vec<String> {
    let generated =
        |id: &str| id.len() >= 32 && id.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-');
    let mut distinct: Vec<&str> = ids
        .iter()
        .map(String::as_str)
        .filter(|i| generated(i))
        .collect();
    distinct.sort_unstable();
    distinct.dedup();
    // Sorted: the longest prefix two ids share is between neighbours.
    let shared = distinct
        .windows(2)
        .map(|w| {
            w[0].bytes()
                .zip(w[1].bytes())
                .take_while(|(a, b)| a == b)
                .count()
        })
        .max()
        .unwrap_or(0);
    let len = SHORT_ID.max(shared + 1);
    ids.iter()
        .map(|id| match id.get(..len) {
            Some(prefix) if generated(id) && len < id.len() => prefix.to_owned(),
            _ => id.clone(),
        })
        .collect()
}

/// An RFC 3339 time as a table shows it: to the second, `Z` for UTC
/// (`2026-11-25T18:51:57.689320698+00:00` is `2026-11-25T18:51:57Z`); `--json` keeps it whole.
pub(crate) fn to_second(time: &str) -> String {
    let Some((head, rest)) = time.split_at_checked(19) else {
        return time.to_owned();
    };
    let offset = rest
        .strip_prefix('.')
        .map_or(rest, |r| r.trim_start_matches(|c: char| c.is_ascii_digit()));
    match offset {
        "+00:00" | "Z" | "z" => format!("{head}Z"),
        _ => format!("{head}{offset}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_ids_are_cut_to_their_shortest_unique_prefix() {
        let a = "7c90914e68c9c00df0c52c9c9063c79fe502c684a3dcbd840c29890fab2bec07".to_owned();
        let b = "7c90914e68c9c00ff0c52c9c9063c79fe502c684a3dcbd840c29890fab2bec07".to_owned();
        let c = "b3958cbb52e7d4c1a41da1dd146667f3dd74c8a8bbe3f5003a4689cdd0454a55".to_owned();
        let named = "svc-2".to_owned();
        let shown = short_ids(&[a.clone(), c.clone(), named.clone()]);
        assert_eq!(shown, ["7c90914e68c9", "b3958cbb52e7", "svc-2"]);
        // Two that share 15 characters are told apart by 16.
        let shown = short_ids(&[a, b, c]);
        assert_eq!(
            shown,
            ["7c90914e68c9c00d", "7c90914e68c9c00f", "b3958cbb52e7d4c1"]
        );
    }

    #[test]
    fn times_are_shown_to_the_second() {
        assert_eq!(
            to_second("2026-11-25T18:51:57.689320698+00:00"),
            "2026-11-25T18:51:57Z"
        );
        assert_eq!(to_second("2026-11-25T18:51:57Z"), "2026-11-25T18:51:57Z");
        assert_eq!(
            to_second("2026-11-25T18:51:57.5+02:00"),
            "2026-11-25T18:51:57+02:00"
        );
        assert_eq!(to_second("-"), "-");
    }
}
