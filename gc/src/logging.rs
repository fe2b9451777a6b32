//! What the binaries' logs look like: colour only for a person at a terminal.

use std::ffi::OsStr;
use std::io::IsTerminal;

/// Whether text logs on stderr get ANSI colours: only when stderr is a terminal and `NO_COLOR`
/// is unset or empty (<https://no-color.org>). Files, pipes and journald get plain text.
pub fn stderr_colour() -> bool {
    colour(
        std::io::stderr().is_terminal(),
        std::env::var_os("NO_COLOR").as_deref(),
    )
}

/// The rule of [`stderr_colour`], for given facts.
pub fn colour(is_terminal: bool, no_color: Option<&OsStr>) -> bool {
    is_terminal && no_color.is_none_or(OsStr::is_empty)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_only_at_a_terminal_without_no_color() {
        assert!(colour(true, None));
        assert!(
            colour(true, Some(OsStr::new(""))),
            "an empty NO_COLOR is unset"
        );
        assert!(!colour(true, Some(OsStr::new("1"))));
        assert!(!colour(false, None), "a file, a pipe or journald");
        assert!(!colour(false, Some(OsStr::new("1"))));
    }
}
