//! Every public type is shown at work somewhere a user reads code: in a doc example (a code
//! block of the crate's docs, of README.md or of docs/guide.md) or in one of the examples. A
//! type that only ever appears in prose is one a user must guess how to reach.

use std::collections::BTreeSet;

#[path = "util/source.rs"]
mod source;
use source::{read, root, rust_files};

/// The names a `pub use` line (or the lines up to its `;`) brings in.
fn used_names(statement: &str) -> Vec<String> {
    let body = statement.trim_end_matches(';');
    let list = match (body.find('{'), body.rfind('}')) {
        (Some(a), Some(b)) => body[a + 1..b].to_string(),
        _ => body.rsplit("::").next().unwrap_or("").to_string(),
    };
    list.split(',')
        .map(|n| {
            n.trim()
                .rsplit(" as ")
                .next()
                .unwrap_or("")
                .trim()
                .to_string()
        })
        .filter(|n| n.chars().next().is_some_and(|c| c.is_ascii_uppercase()))
        .collect()
}

/// The public types: those the crate root, `relink::pool` and `relink::framing` re-export,
/// and those `relink::error` defines.
fn public_types() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for file in ["src/lib.rs", "src/core/framing/mod.rs"] {
        let text = read(&root().join(file));
        let mut statement = String::new();
        for line in text.lines() {
            let line = line.trim();
            if statement.is_empty() && !line.starts_with("pub use ") {
                continue;
            }
            statement.push_str(line);
            statement.push(' ');
            if line.ends_with(';') {
                names.extend(used_names(statement.trim()));
                statement.clear();
            }
        }
    }
    for line in read(&root().join("src/error.rs")).lines() {
        for kind in ["pub struct ", "pub enum ", "pub trait "] {
            if let Some(rest) = line.trim().strip_prefix(kind) {
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                names.insert(name);
            }
        }
    }
    names
}

/// The code of every doc example in `text`: lines inside ``` fences of `///` and `//!`
/// comments (or of a Markdown file, `markdown`).
fn example_code(text: &str, markdown: bool) -> String {
    let mut code = String::new();
    // Within a fence; within a fence of Rust code.
    let mut fenced = false;
    let mut inside = false;
    for line in text.lines() {
        let t = line.trim_start();
        let doc = if markdown {
            Some(t)
        } else {
            t.strip_prefix("///")
                .or_else(|| t.strip_prefix("//!"))
                .map(str::trim_start)
        };
        let Some(doc) = doc else {
            fenced = false;
            inside = false;
            continue;
        };
        if doc.starts_with("```") {
            let lang = doc.trim_start_matches('`').trim();
            fenced = !fenced;
            inside = fenced
                && (lang.is_empty() || lang.starts_with("rust") || !markdown)
                && !(lang.contains("text") || lang.contains("sh") || lang.contains("toml"));
            continue;
        }
        if inside {
            code.push_str(doc.trim_start_matches("# "));
            code.push('\n');
        }
    }
    code
}

fn mentions(code: &str, name: &str) -> bool {
    code.match_indices(name).any(|(i, _)| {
        let before = code[..i].chars().next_back();
        let after = code[i + name.len()..].chars().next();
        let word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
        !word(before) && !word(after)
    })
}

#[test]
fn every_public_type_appears_in_a_doc_example_or_an_example_program() {
    let mut code = String::new();
    for file in rust_files(&root().join("src")) {
        code.push_str(&example_code(&read(&file), false));
    }
    for doc in ["README.md", "docs/guide.md"] {
        code.push_str(&example_code(&read(&root().join(doc)), true));
    }
    for file in rust_files(&root().join("examples")) {
        code.push_str(&read(&file));
    }
    let types = public_types();
    assert!(
        types.len() > 40,
        "the list of public types looks cut short: {types:?}"
    );
    // A builder type is reached through its product's `builder()`.
    let reached = |t: &str| {
        mentions(&code, t)
            || t.strip_suffix("Builder")
                .is_some_and(|of| code.contains(&format!("{of}::builder(")))
    };
    let missing: Vec<&String> = types.iter().filter(|t| !reached(t)).collect();
    assert!(
        missing.is_empty(),
        "public types no example shows at work: {missing:?}"
    );
}

#[test]
fn only_the_code_inside_rust_fences_counts() {
    let text =
        "```sh\nFoo\n```\nBar in prose\n```rust\nlet b: Baz;\n```\nQux\n```text\nQuux\n```\n";
    assert_eq!(example_code(text, true), "let b: Baz;\n");
}

#[test]
fn the_public_type_list_reads_grouped_and_renamed_imports() {
    assert_eq!(
        used_names("pub use crate::a::{Foo, bar, Baz as Qux};"),
        ["Foo", "Qux"]
    );
    assert_eq!(used_names("pub use tls::Tls;"), ["Tls"]);
    assert!(used_names("pub use bytes;").is_empty());
}
