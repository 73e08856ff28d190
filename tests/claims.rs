//! What the docs name exists. README.md, the guide, the benchmarks page, build.md, relink-cat's
//! manual, docs/design.md and the crate docs name repository paths (`src/...`, `tests/...`,
//! `.ci/run`), cargo targets (`--test X`, `--bench X`, `--example X`, `--features X`), public
//! types and methods (`Link::send_batch`, `Builder::heartbeat`, `Redelivery::Report`) and the
//! calls of the API (`send_timeout(f, t)`): each is checked against the repository as it is.
//! A failure lists every claim that names nothing, with the file and line that makes it.
//!
//! The same holds for the flags the docs give a bench (`--quick`, `--links 4500`) and
//! relink-cat's options in its manual, for the commands CI runs (build.md's list and README's
//! test command are the ones `.ci/run` runs), and for the rule that the core names nothing of
//! the IO side.

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

#[path = "util/source.rs"]
mod source;
use source::{read, root, rust_files};

/// The documents whose claims are checked, as (path from the root, text). For a Rust file,
/// its `//!` lines only (the crate docs).
fn documents() -> Vec<(String, String)> {
    let mut docs = Vec::new();
    for path in [
        "README.md",
        "docs/guide.md",
        "docs/benchmarks.md",
        "docs/design.md",
        "build.md",
        "cli/README.md",
    ] {
        docs.push((path.to_string(), read(&root().join(path))));
    }
    let crate_docs: String = read(&root().join("src/lib.rs"))
        .lines()
        .map(|l| match l.trim_start().strip_prefix("//!") {
            Some(doc) => format!("{doc}\n"),
            None => "\n".to_string(),
        })
        .collect();
    docs.push(("src/lib.rs".to_string(), crate_docs));
    docs
}

/// The library's source, all of it.
fn library_source() -> String {
    rust_files(&root().join("src"))
        .iter()
        .map(|f| read(f))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The spans between backticks on each line: (line number, span).
fn code_spans(text: &str) -> Vec<(usize, String)> {
    let mut spans = Vec::new();
    let mut fenced = false;
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut parts = line.split('`');
        parts.next();
        while let (Some(span), Some(_)) = (parts.next(), parts.next()) {
            spans.push((i + 1, span.to_string()));
        }
    }
    spans
}

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The leading identifier of `s`.
fn ident(s: &str) -> &str {
    let end = s.find(|c: char| !is_ident_char(c)).unwrap_or(s.len());
    &s[..end]
}

// --- paths ----------------------------------------------------------------------------------

/// Where the repository's own paths start.
const PATH_ROOTS: [&str; 7] = [
    "src/",
    "tests/",
    "benches/",
    "examples/",
    "docs/",
    "cli/",
    ".ci/",
];

/// The docs.rs addresses of the files of the crates' sources, and the folder of each crate:
/// what follows the address is a path in that folder.
const SOURCE_URLS: [(&str, &str); 2] = [
    ("https://docs.rs/crate/relink/latest/source/", ""),
    ("https://docs.rs/crate/relink-cat/latest/source/", "cli/"),
];

/// The repository paths a document names: words that start with one of [`PATH_ROOTS`], the
/// files behind [`SOURCE_URLS`], and the targets of its relative Markdown links (resolved
/// from the document's folder). Paths with a pattern in them (`*`, `<`, `{`) are not paths.
fn paths_named(doc: &str, text: &str) -> Vec<(usize, String)> {
    let path_char = |c: char| is_ident_char(c) || matches!(c, '/' | '.' | '-');
    let mut found = Vec::new();
    let dir = Path::new(doc).parent().unwrap_or(Path::new(""));
    for (n, line) in text.lines().enumerate() {
        let n = n + 1;
        for (i, _) in line.char_indices() {
            let rest = &line[i..];
            let before = line[..i].chars().next_back();
            if let Some((dir, after)) = SOURCE_URLS
                .iter()
                .find_map(|(url, dir)| rest.strip_prefix(url).map(|after| (dir, after)))
            {
                let end = after.find(|c: char| !path_char(c)).unwrap_or(after.len());
                found.push((n, format!("{dir}{}", after[..end].trim_end_matches('.'))));
                continue;
            }
            // A path starts a word (not inside another path, a URL or an identifier).
            if before.is_some_and(path_char) || before == Some(':') {
                continue;
            }
            if !PATH_ROOTS.iter().any(|r| rest.starts_with(r)) {
                continue;
            }
            let end = rest.find(|c: char| !path_char(c)).unwrap_or(rest.len());
            let next = rest[end..].chars().next();
            if matches!(next, Some('*' | '<' | '{')) {
                continue;
            }
            let path = rest[..end].trim_end_matches(['.', ',']);
            found.push((n, path.to_string()));
        }
        // Relative Markdown links: `](target)`.
        for (i, _) in line.match_indices("](") {
            let target = &line[i + 2..];
            let end = target.find(')').unwrap_or(target.len());
            let target = target[..end].split('#').next().unwrap_or("");
            // A file, not an address or an intra-doc link (`framing::Lines`).
            if !target.contains(['.', '/']) || target.contains("://") || target.contains("::") {
                continue;
            }
            let joined = dir.join(target);
            found.push((n, normalize(&joined)));
        }
    }
    found
}

/// `a/b/../c` → `a/c`, without touching the file system.
fn normalize(path: &Path) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.iter().filter_map(|p| p.to_str()) {
        match part {
            "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    parts.join("/")
}

/// True for a path of another project that a document quotes (libzmq's C++ sources).
fn foreign(path: &str) -> bool {
    [".cpp", ".hpp", ".h", ".c"]
        .iter()
        .any(|ext| path.ends_with(ext))
}

#[test]
fn every_path_the_docs_name_exists() {
    let mut missing = Vec::new();
    let mut checked = 0;
    for (doc, text) in documents() {
        for (line, path) in paths_named(&doc, &text) {
            if foreign(&path) {
                continue;
            }
            checked += 1;
            if !root().join(&path).exists() {
                missing.push(format!("{doc}:{line}: {path}"));
            }
        }
    }
    assert!(
        checked > 50,
        "only {checked} paths found: the scan looks broken"
    );
    assert!(
        missing.is_empty(),
        "paths the docs name that do not exist:\n  {}",
        missing.join("\n  ")
    );
}

// --- cargo targets and features ---------------------------------------------------------------

/// The names of the targets of one kind (`test`, `bench`, `example`): the files of its folder
/// (`tests/X.rs`, `tests/X/main.rs`; relink-cat's `cli/tests/X.rs` too, as `cargo test` at the
/// top runs them) and the `[[kind]]` entries of the manifests.
fn targets(kind: &str) -> BTreeSet<String> {
    let dirs: &[&str] = match kind {
        "test" => &["tests", "cli/tests"],
        "bench" => &["benches"],
        "example" => &["examples"],
        other => panic!("no target kind {other}"),
    };
    let mut names = BTreeSet::new();
    for dir in dirs {
        for entry in fs::read_dir(root().join(dir)).expect("a target folder") {
            let path = entry.expect("a directory entry").path();
            let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
            if path.extension().is_some_and(|x| x == "rs") || path.join("main.rs").exists() {
                names.insert(stem.to_string());
            }
        }
    }
    for manifest in ["Cargo.toml", "cli/Cargo.toml"] {
        let text = read(&root().join(manifest));
        let mut inside = false;
        for line in text.lines() {
            let line = line.trim();
            if line.starts_with('[') {
                inside = line == format!("[[{kind}]]");
            } else if inside {
                if let Some(name) = line.strip_prefix("name = ") {
                    names.insert(name.trim_matches('"').to_string());
                }
            }
        }
    }
    names
}

/// The features of the library's manifest.
fn features() -> BTreeSet<String> {
    let text = read(&root().join("Cargo.toml"));
    let mut names = BTreeSet::new();
    let mut inside = false;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            inside = line == "[features]";
        } else if inside && !line.starts_with('#') {
            if let Some((name, _)) = line.split_once('=') {
                names.insert(name.trim().to_string());
            }
        }
    }
    names
}

/// The `--flag VALUE` pairs of cargo commands a document names, as (line, flag, value), for
/// the flags that name a target or a feature.
fn cargo_flags(text: &str) -> Vec<(usize, &'static str, String)> {
    let mut found = Vec::new();
    for (n, line) in text.lines().enumerate() {
        for flag in ["--test", "--bench", "--example", "--features"] {
            for (i, _) in line.match_indices(flag) {
                let rest = &line[i + flag.len()..];
                // `--test` inside `--tests`, or a flag at the end of a wrapped line.
                let Some(value) = rest.strip_prefix(' ') else {
                    continue;
                };
                let value = value
                    .trim_start_matches('"')
                    .split(|c: char| !(is_ident_char(c) || c == '-' || c == ','))
                    .next()
                    .unwrap_or("");
                // A placeholder (`NAME`, `X`) or a shell variable is not a name.
                if value.is_empty() || value.chars().all(|c| c.is_ascii_uppercase()) {
                    continue;
                }
                found.push((n + 1, flag, value.to_string()));
            }
        }
    }
    found
}

#[test]
fn every_cargo_target_and_feature_the_docs_name_exists() {
    let tests = targets("test");
    let benches = targets("bench");
    let examples = targets("example");
    let features = features();
    assert!(tests.contains("claims") && benches.contains("throughput"));
    assert!(examples.contains("demo") && features.contains("metrics"));
    let mut missing = Vec::new();
    let mut checked = 0;
    for (doc, text) in documents() {
        for (line, flag, value) in cargo_flags(&text) {
            checked += 1;
            let known = match flag {
                "--test" => tests.contains(&value),
                "--bench" => benches.contains(&value),
                "--example" => examples.contains(&value),
                _ => value.split(',').all(|f| features.contains(f)),
            };
            if !known {
                missing.push(format!("{doc}:{line}: {flag} {value}"));
            }
        }
    }
    assert!(
        checked > 20,
        "only {checked} targets found: the scan looks broken"
    );
    assert!(
        missing.is_empty(),
        "cargo targets and features the docs name that do not exist:\n  {}",
        missing.join("\n  ")
    );
}

/// The bench commands a document names, with the flags given to the bench after `--`, as
/// (line, bench, flags): `cargo bench --bench links -- --quick --links 4500` gives
/// `("links", ["quick", "links"])`. A command may wrap onto the next line; it ends at a
/// closing backtick, a parenthesis or a blank line.
fn bench_commands(text: &str) -> Vec<(usize, String, Vec<String>)> {
    let mut found = Vec::new();
    for (i, _) in text.match_indices("cargo bench") {
        let line = text[..i].matches('\n').count() + 1;
        let rest = &text[i..];
        let end = rest
            .find(['`', ')', ';'])
            .into_iter()
            .chain(rest.find("\n\n"))
            .min()
            .unwrap_or(rest.len());
        let words: Vec<&str> = rest[..end].split_whitespace().collect();
        let Some(at) = words.iter().position(|w| *w == "--bench") else {
            continue;
        };
        let Some(bench) = words.get(at + 1) else {
            continue;
        };
        let Some(dashes) = words.iter().position(|w| *w == "--") else {
            found.push((line, bench.to_string(), Vec::new()));
            continue;
        };
        let flags = words[dashes + 1..]
            .iter()
            .filter_map(|w| w.strip_prefix("--"))
            .map(|w| {
                w.split('=')
                    .next()
                    .unwrap_or("")
                    .trim_end_matches(['.', ','])
            })
            .filter(|w| !w.is_empty())
            .map(str::to_string)
            .collect();
        found.push((line, bench.to_string(), flags));
    }
    found
}

#[test]
fn every_flag_the_docs_give_a_bench_is_one_it_reads() {
    let mut support = String::new();
    for file in rust_files(&root().join("benches/support")) {
        support.push_str(&read(&file));
    }
    let mut missing = Vec::new();
    let mut checked = 0;
    for (doc, text) in documents() {
        for (line, bench, flags) in bench_commands(&text) {
            let path = root().join(format!("benches/{bench}.rs"));
            // A missing bench is the targets test's to report.
            let Ok(source) = fs::read_to_string(&path) else {
                continue;
            };
            for flag in flags {
                checked += 1;
                // `arg("links")`, `flag("quick")`, clap's `#[arg(long)] max_attempts`.
                let read = [&source, &support].iter().any(|s| {
                    s.contains(&format!("\"{flag}"))
                        || s.contains(&format!("\"--{flag}"))
                        || has_word(s, &flag.replace('-', "_"))
                });
                if !read {
                    missing.push(format!(
                        "{doc}:{line}: cargo bench --bench {bench} -- --{flag}"
                    ));
                }
            }
        }
    }
    assert!(
        checked > 15,
        "only {checked} bench flags found: the scan looks broken"
    );
    assert!(
        missing.is_empty(),
        "bench flags the docs give that the bench does not read:\n  {}",
        missing.join("\n  ")
    );
}

#[test]
fn every_option_relink_cats_manual_names_is_one_it_takes() {
    let manual = read(&root().join("cli/README.md"));
    let main = read(&root().join("cli/src/main.rs"));
    let mut missing = Vec::new();
    let mut checked = 0;
    for (n, line) in manual.lines().enumerate() {
        // Other programs' options: cargo's, redis-server's.
        if line.contains("cargo ") || line.contains("redis-server --") {
            continue;
        }
        for (i, _) in line.match_indices("--") {
            if line[..i].chars().next_back().is_some_and(is_ident_char) {
                continue;
            }
            let option = ident_with_dashes(&line[i + 2..]);
            if option.is_empty() || ["help", "version"].contains(&option) {
                continue;
            }
            checked += 1;
            // clap's `#[arg(long)] give_up_after` or an alias `"eof-wait"`.
            if !has_word(&main, &option.replace('-', "_"))
                && !main.contains(&format!("\"{option}\""))
            {
                missing.push(format!("cli/README.md:{}: --{option}", n + 1));
            }
        }
    }
    assert!(
        checked > 15,
        "only {checked} options found: the scan looks broken"
    );
    assert!(
        missing.is_empty(),
        "options relink-cat's manual names that relink-cat does not take:\n  {}",
        missing.join("\n  ")
    );
}

/// The leading `word-with-dashes` of `s`.
fn ident_with_dashes(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'))
        .unwrap_or(s.len());
    s[..end].trim_end_matches('-')
}

/// True when `word` occurs in `text` with no identifier character on either side.
fn has_word(text: &str, word: &str) -> bool {
    text.match_indices(word).any(|(i, _)| {
        let before = text[..i].chars().next_back();
        let after = text[i + word.len()..].chars().next();
        !before.is_some_and(is_ident_char) && !after.is_some_and(is_ident_char)
    })
}

// --- types, methods, variants --------------------------------------------------------------

/// The names the library defines: types (`struct`, `enum`, `trait`, `type`, public or not:
/// design.md names the internal ones), functions (`fn name`), fields (`name: Type`), and enum
/// variants and constants (an item line that starts with a capitalised name, `const NAME`).
struct Defined {
    types: BTreeSet<String>,
    fns: BTreeSet<String>,
    fields: BTreeSet<String>,
    capitalised: BTreeSet<String>,
}

fn defined() -> Defined {
    let source = library_source();
    let mut d = Defined {
        types: BTreeSet::new(),
        fns: BTreeSet::new(),
        fields: BTreeSet::new(),
        capitalised: BTreeSet::new(),
    };
    for line in source.lines() {
        let t = line.trim_start();
        if t.starts_with("//") {
            continue;
        }
        // The item's visibility, then its kind.
        let item = match t.strip_prefix("pub") {
            Some(rest) if rest.starts_with('(') => rest.split_once(") ").map_or("", |(_, r)| r),
            Some(rest) => rest.trim_start(),
            None => t,
        };
        for kind in ["struct ", "enum ", "trait ", "type ", "unsafe trait "] {
            if let Some(rest) = item.strip_prefix(kind) {
                d.types.insert(ident(rest).to_string());
            }
        }
        if let Some(rest) = item.strip_prefix("const ") {
            d.capitalised.insert(ident(rest).to_string());
        }
        let field = ident(item);
        if !field.is_empty() && item[field.len()..].starts_with(": ") {
            d.fields.insert(field.to_string());
        }
        for (i, _) in t.match_indices("fn ") {
            if !t[..i].chars().next_back().is_some_and(is_ident_char) {
                d.fns.insert(ident(&t[i + 3..]).to_string());
            }
        }
        let t = t.strip_prefix("pub const ").unwrap_or(t);
        let name = ident(t);
        if name.starts_with(|c: char| c.is_ascii_uppercase()) {
            d.capitalised.insert(name.to_string());
        }
    }
    d
}

/// Names of other crates' and the standard library's items that the docs use beside relink's
/// (`Instant::now`, `zmq::SocketEvent::from_raw`): a path whose first segment is one of these
/// is not a claim about relink.
const FOREIGN: [&str; 26] = [
    "std",
    "core",
    "zmq",
    "zmq_sys",
    "libc",
    "bytes",
    "tokio",
    "tokio_util",
    "futures",
    "futures_core",
    "futures_util",
    "rustls",
    "crossbeam",
    "crossbeam_channel",
    "Instant",
    "Duration",
    "Arc",
    "Mutex",
    "Vec",
    "Option",
    "Result",
    "Bytes",
    "BytesMut",
    "StreamExt",
    // zmq's `PollItem::from_fd`, rustls's `Reader::fill_buf`.
    "PollItem",
    "Reader",
];

/// The `Type::member` paths in a document's code spans (`Link::send_batch`,
/// `relink::framing::Lines`, `Overflow::Block(t)`), as (line, segments).
fn rust_paths(text: &str) -> Vec<(usize, Vec<String>)> {
    let mut found = Vec::new();
    for (line, span) in code_spans(text) {
        // Only spans that are a path, maybe called: `A::b`, `A::b(x)`, `a.b::<T>` is not.
        let head = span.split(['(', ' ', '<', '{', '[']).next().unwrap_or("");
        if !head.contains("::") || head.contains('.') || head.contains('"') {
            continue;
        }
        let segments: Vec<String> = head.split("::").map(str::to_string).collect();
        if segments
            .iter()
            .any(|s| s.is_empty() || !s.chars().all(is_ident_char))
        {
            continue;
        }
        found.push((line, segments));
    }
    found
}

#[test]
fn every_type_method_and_variant_the_docs_name_exists() {
    let d = defined();
    assert!(d.types.contains("Link") && d.fns.contains("send_batch"));
    assert!(d.capitalised.contains("Report"));
    let mut missing = Vec::new();
    let mut checked = 0;
    for (doc, text) in documents() {
        for (line, segments) in rust_paths(&text) {
            let mut segments: Vec<&str> = segments.iter().map(String::as_str).collect();
            if segments[0] == "crate" || segments[0] == "relink" {
                segments.remove(0);
            }
            let Some(first) = segments.first() else {
                continue;
            };
            if FOREIGN.contains(first) {
                continue;
            }
            // The modules of the path (`framing`, `error`, `pool`), then the type.
            let Some(ty) = segments
                .iter()
                .position(|s| s.starts_with(|c: char| c.is_ascii_uppercase()))
            else {
                continue;
            };
            checked += 1;
            let mut wrong = Vec::new();
            // `defaults::BATCH_BYTES`: a module's constant, not a type.
            let constant = segments[ty].chars().all(|c| !c.is_ascii_lowercase());
            if constant && !d.capitalised.contains(segments[ty]) {
                wrong.push(format!("constant {}", segments[ty]));
            } else if !constant && !d.types.contains(segments[ty]) {
                wrong.push(format!("type {}", segments[ty]));
            }
            for member in &segments[ty + 1..] {
                let known = if member.starts_with(|c: char| c.is_ascii_uppercase()) {
                    d.capitalised.contains(*member) || d.types.contains(*member)
                } else {
                    d.fns.contains(*member) || d.fields.contains(*member)
                };
                if !known {
                    wrong.push(format!("member {member}"));
                }
            }
            if !wrong.is_empty() {
                missing.push(format!(
                    "{doc}:{line}: {} ({})",
                    segments.join("::"),
                    wrong.join(", ")
                ));
            }
        }
    }
    assert!(
        checked > 100,
        "only {checked} paths found: the scan looks broken"
    );
    assert!(
        missing.is_empty(),
        "types, methods and variants the docs name that do not exist:\n  {}",
        missing.join("\n  ")
    );
}

/// The calls of the API the docs name without their type: a code span that is one snake_case
/// name, called (`send_timeout(f, t)`) or bare (`send_with_async`), whose name starts like
/// one of the link's own calls.
const API_VERBS: [&str; 8] = [
    "send",
    "try_send",
    "request",
    "recv",
    "try_recv",
    "close",
    "flush",
    "reconnect",
];

#[test]
fn every_send_request_and_receive_call_the_docs_name_exists() {
    let d = defined();
    let mut missing = Vec::new();
    let mut checked = 0;
    for (doc, text) in documents() {
        for (line, span) in code_spans(&text) {
            let span = span.trim_start_matches('.');
            let name = ident(span);
            let rest = &span[name.len()..];
            if name.is_empty() || !(rest.is_empty() || rest.starts_with('(')) {
                continue;
            }
            if !API_VERBS
                .iter()
                .any(|v| name == *v || name.starts_with(&format!("{v}_")))
            {
                continue;
            }
            checked += 1;
            if !d.fns.contains(name) {
                missing.push(format!("{doc}:{line}: {span}"));
            }
        }
    }
    assert!(
        checked > 30,
        "only {checked} calls found: the scan looks broken"
    );
    assert!(
        missing.is_empty(),
        "calls the docs name that do not exist:\n  {}",
        missing.join("\n  ")
    );
}

// --- CI and the core rule ------------------------------------------------------------------

#[test]
fn the_test_command_readme_gives_is_the_one_ci_runs_last() {
    let readme = read(&root().join("README.md"));
    let ci = read(&root().join(".ci/run"));
    let quick = &readme[readme.find("## Quick start").expect("a quick start")..];
    let block = &quick[quick.find("```sh").expect("its commands")..];
    let block = &block[..block[3..].find("```").expect("the end of its commands") + 3];
    let commands: Vec<&str> = block
        .lines()
        .skip(1)
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
        .collect();
    assert_eq!(commands.len(), 2, "two commands: {commands:?}");
    let test = commands
        .iter()
        .find(|c| c.starts_with("cargo test"))
        .expect("a test command");
    let last_step = ci
        .lines()
        .rfind(|l| l.starts_with("step "))
        .expect("a step in .ci/run");
    assert!(
        last_step.contains(&format!("\"{test} 2>&1")),
        "README's test command {test:?} is not .ci/run's last step: {last_step}"
    );
    let demo = commands
        .iter()
        .find(|c| c.starts_with("cargo run --example "))
        .expect("a demo command");
    let example = demo.trim_start_matches("cargo run --example ");
    assert!(root().join(format!("examples/{example}.rs")).exists());
}

#[test]
fn every_cargo_command_build_md_lists_for_ci_is_in_ci_run() {
    let build = read(&root().join("build.md"));
    let ci = read(&root().join(".ci/run"));
    let section = &build[build.find("## How CI builds").expect("the CI section")..];
    let mut missing = Vec::new();
    let mut checked = 0;
    for (line, span) in code_spans(section) {
        if !span.starts_with("cargo ") || span.contains("NAME") {
            continue;
        }
        checked += 1;
        if !ci.contains(&span) {
            missing.push(format!("build.md, CI section line {line}: {span}"));
        }
    }
    assert!(checked >= 6, "only {checked} commands found");
    assert!(
        missing.is_empty(),
        "commands build.md says CI runs that .ci/run does not:\n  {}",
        missing.join("\n  ")
    );
}

/// The core's non-test code: each file under `src/core` but the test files, up to a
/// `#[cfg(test)]` item that is not a one-line `mod x;`, without comment lines.
fn core_code() -> Vec<(String, usize, String)> {
    let mut lines = Vec::new();
    for file in rust_files(&root().join("src/core")) {
        let name = file
            .strip_prefix(root())
            .expect("under the root")
            .display()
            .to_string();
        if name.contains("tests") {
            continue;
        }
        let text = read(&file);
        let mut skip_next = false;
        for (n, line) in text.lines().enumerate() {
            if skip_next {
                skip_next = false;
                if line.trim_end().ends_with(';') {
                    continue;
                }
                break;
            }
            if line.starts_with("#[cfg(test)]") {
                skip_next = true;
                continue;
            }
            if line.trim_start().starts_with("//") {
                continue;
            }
            lines.push((name.clone(), n + 1, line.to_string()));
        }
    }
    lines
}

#[test]
fn the_core_names_nothing_of_the_io_side_and_reads_no_clock() {
    let code = core_code();
    assert!(code.len() > 1000, "{} lines of core code", code.len());
    let banned = [
        "crate::io",
        "crate::link",
        "crate::builder",
        "crate::ffi",
        "zmq",
        "Instant::now",
        "thread_rng",
    ];
    let found: Vec<String> = code
        .iter()
        .filter(|(_, _, l)| banned.iter().any(|b| l.contains(b)))
        .map(|(f, n, l)| format!("{f}:{n}: {}", l.trim()))
        .collect();
    assert!(
        found.is_empty(),
        "the core names the IO side or reads the clock:\n  {}",
        found.join("\n  ")
    );
}

// --- the scanners themselves ------------------------------------------------------------

#[test]
fn the_scanners_find_what_a_claim_looks_like() {
    let text = "See `tests/faults.rs` and src/core/window.rs, [g](guide.md#x), not src/*.rs, \
                https://docs.rs/crate/relink-cat/latest/source/README.md.\n\
                Run `cargo test --test faults` or `cargo bench --bench NAME`.\n\
                `Link::send_with_ttl` and `send_timeout(f, t)`; `Instant::now()`.";
    let paths: Vec<String> = paths_named("docs/x.md", text)
        .into_iter()
        .map(|(_, p)| p)
        .collect();
    assert_eq!(
        paths,
        [
            "tests/faults.rs",
            "src/core/window.rs",
            "cli/README.md",
            "docs/guide.md"
        ]
    );
    let flags: Vec<String> = cargo_flags(text)
        .into_iter()
        .map(|(_, f, v)| format!("{f} {v}"))
        .collect();
    assert_eq!(flags, ["--test faults"]);
    let benches = bench_commands(
        "`cargo bench --bench links -- --quick\n--links 4500` and (`cargo bench --bench cpu`)",
    );
    assert_eq!(
        benches,
        [
            (
                1,
                "links".to_string(),
                vec!["quick".to_string(), "links".to_string()]
            ),
            (2, "cpu".to_string(), vec![])
        ]
    );
    let calls: Vec<Vec<String>> = rust_paths(text).into_iter().map(|(_, p)| p).collect();
    assert_eq!(
        calls,
        [vec!["Link", "send_with_ttl"], vec!["Instant", "now"]]
    );
    assert_eq!(code_spans(text).len(), 6);
}

/// The builder's own page lists its settings in groups: every public setter is in that table,
/// and every name in it is a setter.
#[test]
fn the_builders_table_of_groups_names_every_setter_once() {
    let source = read(&root().join("src/builder.rs"));
    let start = source
        .find("/// The settings:")
        .expect("the table of groups");
    let end = start + source[start..].find("/// # Examples").expect("its end");
    let table = &source[start..end];
    let mut listed = Vec::new();
    let table = table.replace("](crate::Builder::", "](Builder::");
    for piece in table.split("](Builder::").skip(1) {
        listed.push(ident(piece).to_string());
    }
    let setters: BTreeSet<String> = source
        .split("\n    pub fn ")
        .skip(1)
        .map(|rest| ident(rest).to_string())
        .collect();
    let unique: BTreeSet<String> = listed.iter().cloned().collect();
    assert_eq!(
        unique.len(),
        listed.len(),
        "a setter listed twice: {listed:?}"
    );
    let missing: Vec<_> = setters.difference(&unique).collect();
    let unknown: Vec<_> = unique.difference(&setters).collect();
    assert!(
        missing.is_empty(),
        "setters missing from the table: {missing:?}"
    );
    assert!(
        unknown.is_empty(),
        "names in the table that are no setter: {unknown:?}"
    );
}

/// The names `src/lib.rs` makes public at the crate root: `pub mod` and `pub use`.
fn crate_root_names() -> BTreeSet<String> {
    let lib = read(&root().join("src/lib.rs"));
    let mut names = BTreeSet::new();
    let mut statement = String::new();
    // Only the root's own items start at the line's first column (not a module's inside).
    // An item behind `#[cfg(feature = "test-hooks")]` is no name of the API.
    let mut hooks = false;
    for raw in lib.lines() {
        let line = raw.trim();
        if raw.starts_with("#[cfg(feature = \"test-hooks\")]") {
            hooks = true;
            continue;
        }
        if let Some(module) = raw.strip_prefix("pub mod ") {
            if !std::mem::take(&mut hooks) {
                names.insert(ident(module).to_string());
            }
            continue;
        }
        if statement.is_empty() && !raw.starts_with("pub use ") {
            continue;
        }
        statement.push_str(line);
        if !line.ends_with(';') {
            continue;
        }
        let used = statement
            .trim_start_matches("pub use ")
            .trim_end_matches(';');
        match used.split_once('{') {
            Some((_, list)) => names.extend(
                list.trim_end_matches('}')
                    .split(',')
                    .map(str::trim)
                    .filter(|n| !n.is_empty())
                    .map(String::from),
            ),
            None => {
                names.insert(used.rsplit("::").next().unwrap_or(used).to_string());
            }
        }
        statement.clear();
    }
    names
}

#[test]
fn the_designs_count_and_list_of_the_crate_roots_names_match_lib_rs() {
    let names = crate_root_names();
    let design = read(&root().join("docs/design.md"));
    let (at, _) = design
        .match_indices(" names at the crate root")
        .next()
        .expect("design.md counts the crate root's names");
    let count: usize = design[..at]
        .rsplit(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|n| n.parse().ok())
        .expect("a number before 'names at the crate root'");
    assert_eq!(
        count,
        names.len(),
        "design.md's count; lib.rs has {names:?}"
    );
    let section = &design[at..];
    let section = &section[..section.find("\n\n").unwrap_or(section.len())];
    let missing: Vec<_> = names
        .iter()
        .filter(|n| !section.contains(&format!("`{n}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "design.md's list leaves out {missing:?}"
    );
}

/// The module map in `src/lib.rs` names every module file of `src/` (test modules aside), and
/// every file it names exists.
#[test]
fn the_module_map_names_every_module_and_only_those() {
    let lib = read(&root().join("src/lib.rs"));
    let start = lib
        .find("//! The source tree shows the layers")
        .expect("the map");
    let end = start
        + lib[start..]
            .find("//! ```\n//! A few words")
            .expect("its end");
    let map = &lib[start..end];
    // Names in the map: `dir/file.rs`, and bare `file.rs` after a `dir/` on the same line
    // or in the line's continuation.
    let mut named = BTreeSet::new();
    let mut dir = String::new();
    for line in map.lines() {
        let body = line.trim_start_matches("//!");
        let continued = body.starts_with("     ");
        let words: Vec<&str> = body
            .split(|c: char| c.is_whitespace() || c == ',' || c == '(' || c == ')')
            .filter(|w| w.ends_with(".rs"))
            .collect();
        if !continued {
            dir = match words.first().and_then(|w| w.rsplit_once('/')) {
                Some((d, _)) => d.to_string(),
                None => String::new(),
            };
        }
        for word in words {
            named.insert(match (word.contains('/'), dir.is_empty()) {
                (true, _) | (false, true) => word.to_string(),
                (false, false) => format!("{dir}/{word}"),
            });
        }
    }
    let mut files = BTreeSet::new();
    let src = root().join("src");
    let mut stack = vec![src.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                if p.file_name().is_some_and(|n| n != "tests") {
                    stack.push(p);
                }
            } else if p.extension().is_some_and(|x| x == "rs")
                && p.file_name().is_some_and(|n| n != "tests.rs")
            {
                let rel = p.strip_prefix(&src).unwrap().to_string_lossy().into_owned();
                files.insert(rel);
            }
        }
    }
    let missing: Vec<_> = files.difference(&named).collect();
    let stale: Vec<_> = named.difference(&files).collect();
    assert!(
        missing.is_empty(),
        "modules the map leaves out: {missing:?}"
    );
    assert!(
        stale.is_empty(),
        "files the map names that do not exist: {stale:?}"
    );
}

/// Each folder's `mod.rs` lists every module it declares, with what it is for.
#[test]
fn each_folders_mod_rs_lists_every_module_it_declares() {
    for file in ["src/core/mod.rs", "src/io/mod.rs"] {
        let text = read(&root().join(file));
        let docs: String = text
            .lines()
            .filter(|l| l.starts_with("//!"))
            .collect::<Vec<_>>()
            .join("\n");
        let declared: Vec<&str> = text
            .lines()
            .filter_map(|l| {
                let l = l
                    .trim_start_matches("pub(crate) ")
                    .trim_start_matches("pub ");
                l.strip_prefix("mod ")?.strip_suffix(';')
            })
            .collect();
        assert!(
            declared.len() > 10,
            "{file}: the modules read look cut short"
        );
        let unlisted: Vec<_> = declared
            .iter()
            .filter(|m| !docs.contains(&format!("[`{m}`]")))
            .collect();
        assert!(unlisted.is_empty(), "{file} leaves out {unlisted:?}");
    }
}
