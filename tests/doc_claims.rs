//! Every name of code that ARCHITECTURE.md, RELIABILITY.md and BENCHMARKS.md cite must exist:
//! a renamed function, a deleted test or a moved file fails this test, which lists each stale
//! name with its document and line.
//!
//! The rule the docs are written to. Read: the `backticked` spans outside fenced blocks, and the
//! command lines (`cargo …`, `$B …`) of ```sh blocks, split at whitespace and ``"';|`` (and `=`:
//! `SIM_SEED=1` names the variable). Checked, against the sources with `//` and `#` comments cut:
//! - a path under `src/ cli/ python/ tests/ testkit/ examples/ etc/ .ci/` must exist (under
//!   `gc/` only with an extension or a final `/`: `gc/active` is a bank key); another path
//!   ending in `.rs .py .pyi .sh .toml` must end some file's path; `x.rs::name` needs a
//!   `fn`/`def name` in that file;
//! - `snake_case`, `name()` and the segments of `a::b` (not `std::`, `tokio::`, …) and `x.y()`:
//!   *defined* — after `fn def mod let struct enum const static class type`, as a field or
//!   keyword (`name:`), assigned (`name =`), called as another crate's method (`.name(`), a
//!   string `"name"`, a file or directory, or the CamelCase variant serde renames; a module
//!   segment need only occur in code; a metric may drop `_total`;
//! - `lease.key`, `gc.key`, `bank.key` (configuration): `key` defined;
//! - `CamelCase`: occurs in code; `UPPER_SNAKE` (env vars, constants): occurs in any source;
//! - `--flag`: the literal `--flag` in code, or a field `flag` (clap derives it), unless it is
//!   cargo's or libtest's; `--test T`/`--bench T`: a file `tests/T.rs`/`benches/T.rs`; `-p P`: a
//!   package; after ` -- ` of `cargo test`: a filter, part of some `fn` name.
//!
//! Not names: plain lowercase words and lone uppercase ones (`put`, `HEAD`, `SIGKILL`), tokens
//! with `<…>` (but `Type<T>`), `#`, `*`, `@`, `://`, or a `-` inside (headers, packages, bank
//! keys), absolute paths, numbers, JSON, dotted words that are no call (`index.json`).
use std::collections::HashSet;
use std::fs;
use std::path::Path;

const DOCS: [&str; 3] = ["ARCHITECTURE.md", "RELIABILITY.md", "BENCHMARKS.md"];
const ROOTS: &str = "src gc cli python tests testkit examples etc .ci";
const EXTERNAL: &str = "std core tokio object_store futures serde hyper axum clap pyo3";
const FOREIGN_FLAGS: &str = "--help --release --test --bench --nocapture --ignored --no-run \
                             --workspace --all-targets --check --doc --exact --lib";
const DEF_KEYWORDS: &str = "fn def mod let mut struct enum const static class type";
const SOURCE_EXT: [&str; 5] = [".rs", ".py", ".pyi", ".sh", ".toml"];

fn one_of(list: &str, word: &str) -> bool {
    list.split_whitespace().any(|w| w == word)
}

fn why(bad: bool, reason: &str) -> Option<String> {
    bad.then(|| reason.to_owned())
}

#[derive(Debug, Default)]
struct Sources {
    files: Vec<String>,         // paths relative to the root
    dirs: HashSet<String>,      // likewise
    words: HashSet<String>,     // identifiers in code
    all_words: HashSet<String>, // identifiers anywhere, comments included
    defs: HashSet<String>,      // identifiers in a defining position (see above)
    fns: Vec<(String, String)>, // (file, name of a fn or def)
    code: String,               // every file's code
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// `text` without its comments: `//` in Rust, `#` after a blank elsewhere (not inside a string).
fn strip_comments(text: &str, rust: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let (b, mut quotes, mut cut) = (line.as_bytes(), 0, line.len());
        for i in 0..b.len() {
            quotes += usize::from(b[i] == b'"' && (i == 0 || b[i - 1] != b'\\'));
            let comment = match rust {
                true => b[i..].starts_with(b"//"),
                false => b[i] == b'#' && (i == 0 || b[i - 1] == b' '),
            };
            if comment && quotes % 2 == 0 {
                cut = i;
                break;
            }
        }
        out.push_str(&line[..cut]);
        out.push('\n');
    }
    out
}

fn index(s: &mut Sources, rel: &str, code: &str) {
    let chars: Vec<char> = code.chars().collect();
    let at = |n: usize| chars.get(n).copied().unwrap_or(' ');
    let (mut i, mut prev) = (0, String::new());
    while i < chars.len() {
        if !(chars[i].is_ascii_alphabetic() || chars[i] == '_') || is_ident(at(i.wrapping_sub(1))) {
            i += 1;
            continue;
        }
        let start = i;
        while is_ident(at(i)) {
            i += 1;
        }
        let word: String = chars[start..i].iter().collect();
        let next = (i..chars.len()).find(|&j| chars[j] != ' ').unwrap_or(i);
        let before = at(start.wrapping_sub(1));
        let defined = one_of(DEF_KEYWORDS, &prev)
            || (before == '"' && at(i) == '"')
            || (before == '.' && at(i) == '(')
            || (at(next) == ':' && at(next + 1) != ':')
            || (at(next) == '=' && at(next + 1) != '=' && at(next + 1) != '>');
        if defined {
            s.defs.insert(word.clone());
        }
        if prev == "fn" || prev == "def" {
            s.fns.push((rel.to_owned(), word.clone()));
        }
        s.words.insert(word.clone());
        prev = word;
    }
}

fn add_file(s: &mut Sources, rel: &str, text: &str) {
    let words = text.split(|c: char| !is_ident(c));
    s.all_words.extend(words.map(str::to_owned));
    let code = strip_comments(text, rel.ends_with(".rs"));
    index(s, rel, &code);
    s.code.push_str(&code);
}

fn walk(root: &Path, dir: &Path, s: &mut Sources) {
    for entry in fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().to_string();
        let rel = path.strip_prefix(root).unwrap().display().to_string();
        let hidden = name.starts_with('.') && name != ".ci";
        if path.is_dir() && !(hidden || name == "target" || name == "__pycache__") {
            s.dirs.insert(rel);
            s.defs.insert(name);
            walk(root, &path, s);
        } else if let (true, Ok(text)) = (rel != "tests/doc_claims.rs", fs::read_to_string(&path)) {
            s.defs.insert(name.split('.').next().unwrap_or("").into());
            add_file(s, &rel, &text);
            s.files.push(rel);
        }
    }
}

fn is_camel(t: &str) -> bool {
    t.starts_with(|c: char| c.is_ascii_uppercase())
        && t.chars().any(|c| c.is_ascii_lowercase())
        && t.chars().all(is_ident)
}

/// Why `token` is not a name of the workspace, or None (it is one, or it is no name).
fn check(s: &Sources, token: &str, last: bool) -> Option<String> {
    let called = token.ends_with("()");
    let mut t = token.trim_end_matches("()");
    match t.find('<') {
        Some(i) if t.ends_with('>') && is_camel(&t[..i]) => t = &t[..i], // `FailingStore<T>`
        _ => {}
    }
    let bare = t.chars().all(is_ident);
    let lower = t.chars().all(|c| !c.is_ascii_uppercase());
    let no_name = t.contains(['#', '*', '@', '<', '>']) || t.contains("://");
    if no_name || !t.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_' || c == '.') {
        None
    } else if bare && t.contains('_') && t.chars().all(|c| !c.is_ascii_lowercase()) {
        why(!s.all_words.contains(t), "no such variable or constant")
    } else if bare && is_camel(t) {
        why(!s.words.contains(t), "no such type or variant")
    } else if bare && lower && (t.contains('_') || called || !last) {
        let cap = |p: &str| p.get(..1).unwrap_or("").to_uppercase() + p.get(1..).unwrap_or("");
        let camel: String = t.split('_').map(cap).collect();
        let defined = s.defs.contains(t)
            || (t.contains('_') && s.words.contains(&camel))
            || s.defs.contains(t.trim_end_matches("_total"))
            || (!last && s.words.contains(t));
        why(!defined, "not defined anywhere")
    } else if t.contains('/') || SOURCE_EXT.iter().any(|e| t.ends_with(e) || t.contains(e)) {
        check_path(s, t)
    } else if t.contains("::") || (t.contains('.') && !t.contains(['-', ':'])) {
        let sep = if t.contains("::") { "::" } else { "." };
        let segs: Vec<&str> = t.split(sep).filter(|x| !x.is_empty()).collect();
        if sep == "." && segs.len() == 2 && one_of("lease gc bank", segs[0]) {
            return why(!s.defs.contains(segs[1]), "no such configuration key");
        } else if segs.is_empty() || one_of(EXTERNAL, segs[0]) {
            return None;
        }
        let n = segs.len();
        segs.iter().enumerate().find_map(|(i, seg)| {
            let call = if called && i + 1 == n { "()" } else { "" };
            check(s, &format!("{seg}{call}"), sep == "." || i + 1 == n)
        })
    } else {
        None
    }
}

fn check_path(s: &Sources, t: &str) -> Option<String> {
    let (path, item) = t.split_once("::").unwrap_or((t, ""));
    let first = path.split('/').next().unwrap_or("");
    let has_ext = path.rsplit('/').next().is_some_and(|f| f.contains('.'));
    let rooted = one_of(ROOTS, first) && (first != "gc" || has_ext || path.ends_with('/'));
    let found: Vec<&String> = if rooted {
        s.files.iter().filter(|f| **f == path).collect()
    } else if SOURCE_EXT.iter().any(|e| path.ends_with(e)) && !path.starts_with('/') {
        let ends = |f: &&String| f.ends_with(&format!("/{path}")) || **f == path;
        s.files.iter().filter(ends).collect()
    } else {
        return None;
    };
    if rooted && !has_ext {
        let dir = s.dirs.contains(path.trim_end_matches('/'));
        return why(!dir && found.is_empty(), "no such file or directory");
    }
    let has_item = item.is_empty() || s.fns.iter().any(|(f, n)| found.contains(&f) && n == item);
    match found.first() {
        None => why(true, "no such file"),
        Some(file) => why(!has_item, &format!("no fn {item} in {file}")),
    }
}

/// Check every token of a command line, or of a backticked span.
fn check_command(s: &Sources, line: &str, problems: &mut Vec<String>, at: &str) {
    let split = |c: char| c.is_whitespace() || "\"';|".contains(c);
    let words: Vec<&str> = line.split(split).filter(|w| !w.is_empty()).collect();
    let dashes = words.iter().position(|w| *w == "--");
    let filters_from = dashes.filter(|_| line.contains("cargo test"));
    for (i, w) in words.iter().enumerate() {
        let prev = if i > 0 { words[i - 1] } else { "" };
        let w = w.trim_start_matches(['(', '[', '{']);
        let w = w.trim_end_matches([',', '.', ':', ';', ']', '}']);
        let unbalanced = w.ends_with(')') && !w.ends_with("()");
        let w = &w[..w.len() - usize::from(unbalanced)];
        let name = w.split('=').next().unwrap_or(w);
        let bad = if prev == "--test" || prev == "--bench" {
            let dir = if prev == "--test" { "tests" } else { "benches" };
            let target = format!("{dir}/{w}.rs");
            let found = s.files.iter().any(|f| f.ends_with(&target));
            why(!found, "no such target")
        } else if prev == "-p" {
            let package = format!("name = \"{w}\"");
            why(!s.code.contains(&package), "no such package")
        } else if name.starts_with("--") && name.len() > 2 && !one_of(FOREIGN_FLAGS, name) {
            let literal = s.code.match_indices(name).any(|(j, _)| {
                let after = s.code[j + name.len()..].chars().next().unwrap_or(' ');
                !(after.is_ascii_alphanumeric() || after == '-')
            });
            let field = name[2..].replace('-', "_");
            why(!literal && !s.defs.contains(&field), "no such flag")
        } else if filters_from.is_some_and(|f| i > f) && !w.starts_with('-') {
            why(!s.fns.iter().any(|(_, n)| n.contains(w)), "matches no test")
        } else {
            check(s, name, true)
        };
        if let Some(reason) = bad {
            problems.push(format!("{at}: `{w}` — {reason}"));
        }
    }
}

#[test]
fn every_name_the_docs_cite_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut s = Sources::default();
    for r in ROOTS.split(' ') {
        s.dirs.insert(r.to_owned());
        walk(root, &root.join(r), &mut s);
    }
    // The root package's benches: read, but not a root of cited paths (`benches/gc_pass.rs`
    // in the docs is the GC crate's).
    walk(root, &root.join("benches"), &mut s);
    for top in ["Cargo.toml", "clippy.toml"] {
        add_file(&mut s, top, &fs::read_to_string(root.join(top)).unwrap());
    }
    let (mut problems, mut checked) = (Vec::new(), 0);
    for doc in DOCS {
        let text = fs::read_to_string(root.join(doc)).unwrap();
        let mut fence: Option<String> = None;
        for (n, line) in text.lines().enumerate() {
            let at = format!("{doc}:{}", n + 1);
            let trimmed = line.trim_start();
            if let Some(lang) = trimmed.strip_prefix("```") {
                fence = fence.is_none().then(|| lang.trim().to_owned());
                continue;
            }
            let command = line.contains("cargo ") || trimmed.starts_with("$B");
            let spans: Vec<&str> = match fence.as_deref() {
                None => line.split('`').skip(1).step_by(2).collect(),
                Some("sh") if command && !trimmed.starts_with('#') => vec![line],
                Some(_) => vec![],
            };
            for span in spans {
                checked += 1;
                check_command(&s, span, &mut problems, &at);
            }
        }
    }
    assert!(checked > 500, "only {checked} spans: extraction broken?");
    let (n, list) = (problems.len(), problems.join("\n"));
    assert!(n == 0, "{n} names the docs cite do not exist:\n{list}");
}
