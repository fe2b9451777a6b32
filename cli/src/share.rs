//! What an installation needs besides the two binaries: shell completion scripts and man pages,
//! generated from the clap definitions of `banklease` and `banklease-gc` so that they say what
//! `--help` says, in the release they came with.
//!
//! `banklease completions SHELL` prints one script and `banklease man DIR` writes the man pages,
//! for an operator who installed with `cargo install`; the hidden `banklease __share DIR` writes
//! everything, for a package (`etc/package-deb.sh`). Both binaries' commands are passed in by `main`, which owns them.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Command;
use clap_complete::Shell;

use crate::output::out_line;

/// Print `shell`'s completion script for `cmd` on stdout.
pub(crate) fn print_completions(shell: Shell, cmd: Command) -> Result<()> {
    let script = completion_script(shell, &cmd)?;
    out_line(script.trim_end())
}

/// The shells whose scripts a package installs, and where each one's Debian package looks for
/// them (below `/usr/share`): a bash-completion file is named after the command, zsh's after it
/// with a leading `_`, fish's with `.fish`.
const PACKAGED: [(Shell, &str, &str, &str); 3] = [
    (Shell::Bash, "bash-completion/completions", "", ""),
    (Shell::Zsh, "zsh/vendor-completions", "_", ""),
    (Shell::Fish, "fish/vendor_completions.d", "", ".fish"),
];

/// Write, below `dir` (laid out as `/usr/share`), each command's man pages and its bash, zsh and
/// fish completion scripts. `cmds` pairs each command with its manual section: `banklease`'s
/// pages (one per visible subcommand: `man1/banklease-lock-run.1`, ...) go in 1; the daemon's
/// in 8, Debian's section for daemons, which also keeps it apart from `banklease gc`'s page
/// (`man1/banklease-gc.1`). Returns the files written.
pub(crate) fn write_share(dir: &Path, cmds: Vec<(Command, &str)>) -> Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    for (_, sub, _, _) in PACKAGED {
        create_dir(&dir.join(sub))?;
    }
    for (cmd, section) in cmds {
        let name = cmd.get_name().to_owned();
        written.extend(write_section(&cmd, section, &dir.join("man"))?);
        for (shell, sub, prefix, suffix) in PACKAGED {
            let path = dir.join(sub).join(format!("{prefix}{name}{suffix}"));
            let script = completion_script(shell, &cmd)?;
            std::fs::write(&path, script)
                .with_context(|| format!("cannot write `{}`", path.display()))?;
            written.push(path);
        }
    }
    Ok(written)
}

/// Write each command's man pages below `dir` in `man<section>` (`banklease man DIR`, for a
/// MANPATH entry). Returns the files written.
pub(crate) fn write_man(dir: &Path, cmds: Vec<(Command, &str)>) -> Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    for (cmd, section) in cmds {
        written.extend(write_section(&cmd, section, dir)?);
    }
    Ok(written)
}

/// `cmd`'s man pages in `dir/man<section>`, sorted.
fn write_section(cmd: &Command, section: &str, dir: &Path) -> Result<Vec<PathBuf>> {
    let name = cmd.get_name().to_owned();
    let man = dir.join(format!("man{section}"));
    create_dir(&man)?;
    write_man_pages(cmd.clone(), section, &man).with_context(|| {
        format!(
            "cannot write the man pages of {name} to `{}`",
            man.display()
        )
    })?;
    let mut pages: Vec<PathBuf> = std::fs::read_dir(&man)
        .and_then(|entries| entries.map(|e| e.map(|e| e.path())).collect())
        .with_context(|| format!("cannot list `{}`", man.display()))?;
    pages.sort();
    Ok(pages)
}

fn completion_script(shell: Shell, cmd: &Command) -> Result<String> {
    let name = cmd.get_name().to_owned();
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut without_hidden(cmd), name.clone(), &mut script);
    String::from_utf8(script)
        .with_context(|| format!("the {shell} completion script of {name} is not UTF-8"))
}

/// `cmd` without its hidden subcommands (`__guard`, `__share`), which clap_complete would
/// offer: a copy of its name, help, version and arguments with only the visible subcommands.
/// Hidden subcommands are top-level only, so the visible ones are kept whole.
fn without_hidden(cmd: &Command) -> Command {
    let mut visible = Command::new(cmd.get_name().to_owned())
        .args(cmd.get_arguments().cloned())
        .subcommands(cmd.get_subcommands().filter(|s| !s.is_hide_set()).cloned());
    if let Some(about) = cmd.get_about() {
        visible = visible.about(about.clone());
    }
    if let Some(version) = cmd.get_version() {
        visible = visible.version(version.to_owned());
    }
    visible
}

/// `cmd`'s man page and one per visible subcommand (`banklease-lock-run.1`), each naming the
/// release in its footer (clap_mangen's default names the subcommand there instead).
fn write_man_pages(cmd: Command, section: &str, dir: &Path) -> std::io::Result<()> {
    fn write(cmd: Command, section: &str, source: &str, dir: &Path) -> std::io::Result<()> {
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()).cloned() {
            write(sub, section, source, dir)?;
        }
        clap_mangen::Man::new(cmd)
            .section(section)
            .source(source)
            .generate_to(dir)?;
        Ok(())
    }
    let mut cmd = cmd.disable_help_subcommand(true);
    cmd.build();
    let source = format!(
        "{} {}",
        cmd.get_name(),
        cmd.get_version().unwrap_or_default()
    );
    write(cmd, section, &source, dir)
}

fn create_dir(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create `{}`", dir.display()))
}
