//! `banklease-gc`: the garbage-collector daemon of a banklease bank.
//!
//! Runs passes on an interval while it holds the bank's single GC lease, standing by otherwise
//! (see `banklease_gc_daemon::daemon`). SIGTERM or SIGINT: no new passes, the pass in flight finishes,
//! the GC lease is released, exit 0. `--once`: one pass with the GC lease (refused, exit 75,
//! while another daemon is active, unless `--beside-daemon`), its report as one JSON line on stdout;
//! exit 0 clean, 1 the pass met errors or was braked, 2 failed.

use std::process::ExitCode;

use banklease_gc_daemon::args::Cli;
use clap::Parser as _;

fn main() -> ExitCode {
    banklease_gc_daemon::command::main(Cli::parse())
}
