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
//!
//! Methods, in README.md too (its ```rust blocks included): each `Type::method` — `Type` a
//! `struct`, `enum` or `trait` of the workspace, `method` snake_case — must be a `fn` directly
//! inside an `impl … Type` block (generic or a trait's), or inside a trait `Type` implements; a
//! `let method =`, a free `fn` or a field does not count (write a field as `Type`'s `field`).
//! Where the text cites a file for it, the `fn` must be in that file: right after the name,
//! `(path…)` or ` in path` (names joined by `/` share it); or, in a code map, the name among
//! the first after a path: `path` — `Type::method`, `path` (`A`, `Type::method`), `path`:
//! `Type::method`. Variants (`Error::Corrupt`) and other crates' types are not methods.
use std::collections::HashSet;
use std::fs;
use std::path::Path;

const DOCS: [&str; 3] = ["ARCHITECTURE.md", "RELIABILITY.md", "BENCHMARKS.md"];
const METHOD_DOCS: [&str; 4] = [
    "README.md",
    "ARCHITECTURE.md",
    "RELIABILITY.md",
    "BENCHMARKS.md",
];
const ROOTS: &str = "src gc gc-daemon cli python tests testkit examples etc benches .ci";
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
    files: Vec<String>,               // paths relative to the root
    dirs: HashSet<String>,            // likewise
    words: HashSet<String>,           // identifiers in code
    all_words: HashSet<String>,       // identifiers anywhere, comments included
    defs: HashSet<String>,            // identifiers in a defining position (see above)
    fns: Vec<(String, String)>,       // (file, name of a fn or def)
    code: String,                     // every file's code
    types: HashSet<String>,           // names of the workspace's structs, enums and traits
    methods: Vec<Method>,             // every fn directly inside an impl or trait block
    impls: HashSet<(String, String)>, // (type, trait it implements)
}

/// A `fn` directly inside an `impl` or `trait` block.
#[derive(Debug)]
struct Method {
    file: String,
    of: String, // the type an impl is for, or the trait
    name: String,
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
    if rel.ends_with(".rs") {
        index_impls(s, rel, &lex_rust(text));
    }
}

/// Rust source without its comments, and with the insides of its string and char literals
/// blanked (newlines kept): what is left of braces and keywords is code.
fn lex_rust(text: &str) -> String {
    let c: Vec<char> = text.chars().collect();
    let at = |n: usize| c.get(n).copied().unwrap_or(' ');
    let blank = |ch: char| if ch == '\n' { '\n' } else { ' ' };
    let (mut out, mut i) = (String::with_capacity(text.len()), 0);
    while i < c.len() {
        let word_before = i > 0 && is_ident(c[i - 1]);
        let raw_at = i + usize::from(c[i] == 'b') + 1; // after `r` or `br`
        let hashes = (raw_at..c.len()).take_while(|&j| c[j] == '#').count();
        let raw = !word_before
            && (c[i] == 'r' || (c[i] == 'b' && at(i + 1) == 'r'))
            && at(raw_at + hashes) == '"';
        if c[i] == '/' && at(i + 1) == '/' {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if c[i] == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            while i < c.len() {
                let (open, close) = (
                    c[i] == '/' && at(i + 1) == '*',
                    c[i] == '*' && at(i + 1) == '/',
                );
                depth = depth + usize::from(open) - usize::from(close);
                i += if open || close { 2 } else { 1 };
                if close && depth == 0 {
                    break;
                }
            }
        } else if raw {
            let closes = |j: usize| c[j] == '"' && (1..=hashes).all(|k| at(j + k) == '#');
            out.push('"');
            i = raw_at + hashes + 1;
            while i < c.len() && !closes(i) {
                out.push(blank(c[i]));
                i += 1;
            }
            out.push('"');
            i += 1 + hashes;
        } else if c[i] == '"' {
            out.push('"');
            i += 1;
            while i < c.len() && c[i] != '"' {
                let escaped = c[i] == '\\';
                out.push(blank(c[i]));
                i += 1;
                if escaped && i < c.len() {
                    out.push(blank(c[i]));
                    i += 1;
                }
            }
            out.push('"');
            i += 1;
        } else if c[i] == '\'' && (at(i + 1) == '\\' || at(i + 2) == '\'') {
            // A char literal; a lifetime (`'a`, `'static`) has no closing quote.
            let end = (i + 2..c.len())
                .find(|&j| c[j] == '\'' && j > i + 1 + usize::from(at(i + 1) == '\\'));
            i = end.unwrap_or(c.len()) + 1;
            out.push_str("' '");
        } else {
            out.push(c[i]);
            i += 1;
        }
    }
    out
}

/// The name a type path in an `impl` header stands for: `super::Locks` → `Locks`,
/// `Holding<X>` → `Holding`, `&'a mut Foo` → `Foo`.
fn type_name(path: &str) -> String {
    let path = path.split('<').next().unwrap_or("");
    let path = path.rsplit("::").next().unwrap_or("");
    let mut words = path.split(|c: char| !is_ident(c));
    let name = words.rfind(|w| !w.is_empty() && !one_of("mut dyn", w));
    name.unwrap_or("").to_owned()
}

/// The type an `impl` header (what stands between `impl` and `{`) is for, and the trait when it
/// is a trait's impl: `<X: Clone> Holding<X>`, `Renewable for OwnerLease`.
fn impl_target(header: &str) -> (String, Option<String>) {
    let h = header.replace("->", "  ");
    let mut h = h.trim_start();
    let mut depth = 0i32;
    let mut top_level = |c: char| {
        depth += match c {
            '<' | '(' | '[' => 1,
            '>' | ')' | ']' => -1,
            _ => 0,
        };
        depth == 0
    };
    if h.starts_with('<') {
        let end = h
            .char_indices()
            .find(|&(_, c)| top_level(c))
            .map_or(h.len(), |(i, _)| i + 1);
        h = &h[end..]; // past `impl<…>`'s generics
    }
    let (mut for_at, mut end) = (None, h.len());
    for (i, c) in h.char_indices() {
        let word = |w: &str| {
            h[i..].starts_with(w)
                && !h[..i].ends_with(is_ident)
                && !h[i + w.len()..].starts_with(is_ident)
        };
        let top = top_level(c);
        if top && word("where") {
            end = i;
            break;
        } else if top && word("for") && for_at.is_none() {
            for_at = Some(i);
        }
    }
    match for_at {
        Some(f) => (type_name(&h[f + 3..end]), Some(type_name(&h[..f]))),
        None => (type_name(&h[..end]), None),
    }
}

/// Index the `impl` and `trait` blocks of one lexed Rust file: each `fn` directly inside, the
/// type or trait it belongs to, and which traits each type implements; and every type's name.
fn index_impls(s: &mut Sources, rel: &str, code: &str) {
    let c: Vec<char> = code.chars().collect();
    let (mut i, mut before) = (0, '{'); // `before`: the last non-blank char before the word
    while i < c.len() {
        if !(c[i].is_ascii_alphabetic() || c[i] == '_') || (i > 0 && is_ident(c[i - 1])) {
            if !c[i].is_whitespace() {
                before = c[i];
            }
            i += 1;
            continue;
        }
        let start = i;
        while i < c.len() && is_ident(c[i]) {
            i += 1;
        }
        let word: String = c[start..i].iter().collect();
        let after = || {
            let rest = c[i..].iter().skip_while(|c| c.is_whitespace());
            rest.take_while(|&&c| is_ident(c)).collect::<String>()
        };
        if one_of("struct enum trait union", &word) {
            s.types.insert(after());
        }
        // An item `impl` follows `}`, `;`, `{` or an attribute's `]` (else it is `impl Trait`
        // in a type); `trait` is always an item.
        let item_impl = word == "impl" && "{};]".contains(before);
        // After `unsafe`, an `impl` is an item too: pretend the `unsafe` ended an item.
        let unsafe_impl = word == "unsafe" && after() == "impl";
        before = if unsafe_impl { ';' } else { c[i - 1] };
        if !(item_impl || word == "trait") {
            continue;
        }
        let Some(open) = (i..c.len()).find(|&j| c[j] == '{' || c[j] == ';') else {
            break;
        };
        let header: String = c[i..open].iter().collect();
        let (of, trait_) = match word.as_str() {
            "trait" => (type_name(header.split(':').next().unwrap_or("")), None),
            _ => impl_target(&header),
        };
        if let Some(t) = trait_ {
            s.impls.insert((of.clone(), t));
        }
        let (mut depth, mut j, mut prev) = (0, open, String::new());
        while j < c.len() && c[open] == '{' {
            match c[j] {
                '{' => depth += 1,
                '}' if depth == 1 => break,
                '}' => depth -= 1,
                ch if is_ident(ch) && !is_ident(c[j - 1]) => {
                    let w: String = c[j..].iter().take_while(|&&c| is_ident(c)).collect();
                    if depth == 1 && prev == "fn" {
                        let (file, of, name) = (rel.to_owned(), of.clone(), w.clone());
                        s.methods.push(Method { file, of, name });
                    }
                    j += w.len() - 1;
                    prev = w;
                }
                ch if !ch.is_whitespace() => prev.clear(), // `fn(u8)` is a type
                _ => {}
            }
            j += 1;
        }
    }
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

/// The workspace's sources, read once per test.
fn sources(root: &Path) -> Sources {
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
    s
}

#[test]
fn every_name_the_docs_cite_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let s = sources(root);
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

/// Paths written in prose (outside backticks): `[see gc/src/pass/collect.rs]`. A token that
/// starts with a folder of the workspace and names a file (it has an extension) or a folder
/// (it ends in `/`) must exist; `gc/<name>` without an extension is a key of the bank's layout
/// (`gc/active`), not a path.
#[test]
fn every_path_the_docs_write_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let s = sources(root);
    let (mut problems, mut checked) = (Vec::new(), 0);
    for doc in DOCS.iter().chain(&["README.md"]) {
        let text = fs::read_to_string(root.join(doc)).unwrap();
        for (n, line) in text.lines().enumerate() {
            let prose: String = line.split('`').step_by(2).collect::<Vec<_>>().join(" ");
            let tokens = prose.split(|c: char| c.is_whitespace() || "()[],;\"'*".contains(c));
            for token in tokens {
                let t = token.trim_end_matches(['.', ':']);
                let Some((first, _)) = t.split_once('/') else {
                    continue;
                };
                let file = t.rsplit('/').next().is_some_and(|f| f.contains('.'));
                if !one_of(ROOTS, first)
                    || t.contains(['<', '{', '$'])
                    || !(file || t.ends_with('/'))
                {
                    continue;
                }
                checked += 1;
                let exists =
                    s.files.iter().any(|f| f == t) || s.dirs.contains(t.trim_end_matches('/'));
                if !exists {
                    problems.push(format!("{doc}:{}: {t}: no such file or directory", n + 1));
                }
            }
        }
    }
    assert!(checked > 50, "only {checked} paths: extraction broken?");
    let (n, list) = (problems.len(), problems.join("\n"));
    assert!(n == 0, "{n} paths the docs write do not exist:\n{list}");
}

/// The `Type::method`s a doc span names: `Type` a CamelCase type of the workspace (without its
/// path or generics: `banklease::OwnerLease::acquire`, `FailingStore<T>::heal`), `method`
/// snake_case (a variant, `Error::Corrupt`, is none).
fn method_claims(s: &Sources, span: &str) -> Vec<(String, String)> {
    let mut claims = Vec::new();
    for (p, _) in span.match_indices("::") {
        let mut head = &span[..p];
        if let (true, Some(lt)) = (head.ends_with('>'), head.rfind('<')) {
            head = &head[..lt];
        }
        let n = head.chars().rev().take_while(|&c| is_ident(c)).count();
        let ty = &head[head.len() - n..];
        let method: String = span[p + 2..].chars().take_while(|&c| is_ident(c)).collect();
        let snake = method.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
            && method.chars().all(|c| !c.is_ascii_uppercase());
        if is_camel(ty) && snake && s.types.contains(ty) {
            claims.push((ty.to_owned(), method));
        }
    }
    claims
}

/// The file the text right after a name cites for it — `(path…)` or ` in path` — after any
/// names joined to it by `/` (`Holding::commit_new` / `Holding::commit_renewal` (src/…)).
fn cited_file(after: &str) -> Option<&str> {
    let mut rest = after.trim_start();
    while let Some(r) = rest.strip_prefix('/') {
        rest = r.trim_start();
        if let Some(r) = rest.strip_prefix('`') {
            rest = r.split_once('`').map_or("", |(_, r)| r).trim_start();
        }
    }
    let rest = rest
        .strip_prefix('(')
        .or_else(|| rest.strip_prefix("in "))?;
    let stop = |c: char| c.is_whitespace() || "`):;,".contains(c);
    let path = rest.trim_start_matches('`').split(stop).next()?;
    path.ends_with(".rs").then_some(path)
}

/// The file a code map's entry lists a name under, from the text before it: the name is among
/// the first names after the file's path (`pass.rs` — `Collector::run_pass`, `fence.rs`
/// (`Fence`, `Locks::fenced_put`), `doctor/verdicts.rs`: `Diagnosis::verdicts`).
fn listed_under(before: &str) -> Option<&str> {
    fn last_span(t: &str) -> Option<(&str, &str)> {
        let t = t.trim_end().strip_suffix('`')?;
        t.rfind('`').map(|open| (&t[..open], &t[open + 1..]))
    }
    let mut rest = before.trim_end();
    while let Some(list) = rest.strip_suffix(',') {
        let (r, name) = last_span(list)?;
        if name.ends_with(".rs") {
            return Some(name); // (`auth.rs`, `Session::expiring`)
        }
        rest = r.trim_end();
    }
    let rest = rest.strip_suffix(['—', ':', '('])?;
    let (_, path) = last_span(rest)?;
    path.ends_with(".rs").then_some(path)
}

/// Why `ty::method` is not a method of `ty` (in the file cited, if one is), or None.
fn check_method(s: &Sources, ty: &str, method: &str, cited: Option<&str>) -> Option<String> {
    let named = s.methods.iter().filter(|m| m.name == method);
    let of_ty = |m: &&Method| m.of == ty || s.impls.contains(&(ty.to_owned(), m.of.clone()));
    let found: Vec<&Method> = named.clone().filter(of_ty).collect();
    if found.is_empty() {
        let mut others: Vec<String> = named.map(|m| format!("{} ({})", m.of, m.file)).collect();
        others.sort();
        others.dedup();
        let hint = match others.is_empty() {
            true => String::new(),
            false => format!("; it is a method of {}", others.join(", ")),
        };
        return Some(format!("no fn {method} in an impl of {ty}{hint}"));
    }
    let path = cited?;
    let rooted = one_of(ROOTS, path.split('/').next().unwrap_or(""));
    let is_cited = |f: &str| f == path || (!rooted && f.ends_with(&format!("/{path}")));
    if !s.files.iter().any(|f| is_cited(f)) {
        return Some(format!("cites {path}: no such file"));
    }
    let mut files: Vec<&str> = found.iter().map(|m| m.file.as_str()).collect();
    files.dedup();
    let elsewhere = format!("not in {path} but in {}", files.join(", "));
    why(!files.iter().any(|f| is_cited(f)), &elsewhere)
}

#[test]
fn every_method_the_docs_cite_is_a_method_of_its_type() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let s = sources(root);
    assert!(
        s.methods.len() > 500,
        "only {} methods: indexing broken?",
        s.methods.len()
    );
    let (mut problems, mut checked) = (Vec::new(), 0);
    for doc in METHOD_DOCS {
        let text = fs::read_to_string(root.join(doc)).unwrap();
        let (mut fence, mut start): (Option<String>, usize) = (None, 0);
        for (n, line) in text.split_inclusive('\n').enumerate() {
            let at = format!("{doc}:{}", n + 1);
            let (line_start, trimmed) = (start, line.trim_start());
            start += line.len();
            if let Some(lang) = trimmed.strip_prefix("```") {
                fence = fence.is_none().then(|| lang.trim().to_owned());
                continue;
            }
            // (span, the text before it, the text after it); a line of a ```rust block is one
            // span citing nothing.
            let spans: Vec<(&str, &str, &str)> = match fence.as_deref() {
                None => {
                    let mut from = line_start;
                    let pieces = line.split('`').map(|piece| {
                        let before = &text[..from.saturating_sub(1)];
                        from += piece.len() + 1;
                        (piece, before, text.get(from..).unwrap_or(""))
                    });
                    pieces.skip(1).step_by(2).collect()
                }
                Some(lang) if lang.starts_with("rust") => vec![(line, "", "")],
                Some(_) => vec![],
            };
            for (span, before, after) in spans {
                let cited = cited_file(after).or_else(|| listed_under(before));
                for (ty, method) in method_claims(&s, span) {
                    checked += 1;
                    if let Some(reason) = check_method(&s, &ty, &method, cited) {
                        problems.push(format!("{at}: `{ty}::{method}` — {reason}"));
                    }
                }
            }
        }
    }
    assert!(checked > 100, "only {checked} methods: extraction broken?");
    let (n, list) = (problems.len(), problems.join("\n"));
    assert!(
        n == 0,
        "{n} methods the docs cite are not where they say:\n{list}"
    );
}
