//! Every Rust name that README.md and docs/*.md give in a code span of their prose and tables
//! (outside the fenced blocks, which doctests compile) exists: a path, type, method, field,
//! variant or constant of the public API for README.md and the guide, of the repository's code
//! for the pages about its inside (design, benchmarks, transitions). The names said to be at the
//! crate root ("The API at a glance") are there.
//!
//! The list of names is read from the source itself, every time: `src/lib.rs` and the modules
//! it declares are parsed (items, `pub use` re-exports, fields, variants, methods) and the
//! public paths resolved from the crate root, so the list cannot drift from the code.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

#[path = "util/source.rs"]
mod source;
use source::{read, root, rust_files};

// ---- a small Rust reader ---------------------------------------------------------------------

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String),
    Punct(char),
    Lit,
}

/// The tokens of a Rust file: identifiers, punctuation, and literals (strings, chars, numbers)
/// as one opaque token; comments dropped.
fn tokens(src: &str) -> Vec<Tok> {
    let c: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let ident = |ch: char| ch.is_alphanumeric() || ch == '_';
    while i < c.len() {
        let ch = c[i];
        let next = c.get(i + 1).copied().unwrap_or(' ');
        if ch.is_whitespace() {
            i += 1;
        } else if ch == '/' && next == '/' {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && next == '*' {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if (ch == 'r' || (ch == 'b' && next == 'r'))
            && {
                let mut j = i + if ch == 'b' { 2 } else { 1 };
                while c.get(j) == Some(&'#') {
                    j += 1;
                }
                c.get(j) == Some(&'"')
            }
            && (i == 0 || !ident(c[i - 1]))
        {
            // A raw string: r"..", r#".."#, br"..".
            i += if ch == 'b' { 2 } else { 1 };
            let mut hashes = 0;
            while c[i] == '#' {
                hashes += 1;
                i += 1;
            }
            i += 1;
            loop {
                if i >= c.len() {
                    break;
                }
                if c[i] == '"' && (0..hashes).all(|k| c.get(i + 1 + k) == Some(&'#')) {
                    i += 1 + hashes;
                    break;
                }
                i += 1;
            }
            out.push(Tok::Lit);
        } else if ch == '"' || (ch == 'b' && next == '"' && (i == 0 || !ident(c[i - 1]))) {
            i += if ch == 'b' { 2 } else { 1 };
            while i < c.len() && c[i] != '"' {
                if c[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push(Tok::Lit);
        } else if ch == '\'' || (ch == 'b' && next == '\'' && (i == 0 || !ident(c[i - 1]))) {
            let start = if ch == 'b' { i + 1 } else { i };
            let after = c.get(start + 1).copied().unwrap_or(' ');
            if after == '\\' {
                // An escaped char literal.
                i = start + 2;
                while i < c.len() && c[i] != '\'' {
                    i += 1;
                }
                i += 1;
                out.push(Tok::Lit);
            } else if c.get(start + 2) == Some(&'\'') {
                i = start + 3;
                out.push(Tok::Lit);
            } else {
                // A lifetime: the quote alone, the name follows as an identifier.
                out.push(Tok::Punct('\''));
                i = start + 1;
            }
        } else if ch.is_ascii_digit() {
            while i < c.len()
                && (ident(c[i])
                    || (c[i] == '.' && c.get(i + 1).is_some_and(|d| d.is_ascii_digit())))
            {
                i += 1;
            }
            out.push(Tok::Lit);
        } else if ident(ch) {
            let start = i;
            while i < c.len() && ident(c[i]) {
                i += 1;
            }
            let word: String = c[start..i].iter().collect();
            if word == "r" && c.get(i) == Some(&'#') {
                i += 1; // a raw identifier: r#name
                continue;
            }
            out.push(Tok::Ident(word));
        } else {
            out.push(Tok::Punct(ch));
            i += 1;
        }
    }
    out
}

fn is(t: Option<&Tok>, p: char) -> bool {
    t == Some(&Tok::Punct(p))
}

fn word(t: Option<&Tok>) -> Option<&str> {
    match t {
        Some(Tok::Ident(w)) => Some(w),
        _ => None,
    }
}

/// The index after the group that opens at `i` ((), [] or {}).
fn skip_group(t: &[Tok], mut i: usize) -> usize {
    let mut depth = 0i32;
    while i < t.len() {
        match t[i] {
            Tok::Punct('(' | '[' | '{') => depth += 1,
            Tok::Punct(')' | ']' | '}') => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    i
}

/// The index of the first `{` or `;` at depth 0 from `i` (generics, parentheses and brackets
/// skipped; `->` is no closing angle).
fn header_end(t: &[Tok], mut i: usize) -> usize {
    let mut angle = 0i32;
    while i < t.len() {
        match t[i] {
            Tok::Punct('(' | '[') => {
                i = skip_group(t, i);
                continue;
            }
            Tok::Punct('<') => angle += 1,
            Tok::Punct('>') if !is(t.get(i.wrapping_sub(1)), '-') => angle -= 1,
            Tok::Punct('{' | ';') if angle <= 0 => return i,
            _ => {}
        }
        i += 1;
    }
    i
}

/// Reads an item's visibility and qualifiers from `i` on, leaving `i` at its keyword:
/// `Some(true)` for `pub`, `Some(false)` for `pub(crate)` and the like, `None` for none.
fn visibility(t: &[Tok], i: &mut usize) -> Option<bool> {
    let mut public = None;
    if word(t.get(*i)) == Some("pub") {
        *i += 1;
        if is(t.get(*i), '(') {
            *i = skip_group(t, *i);
            public = Some(false);
        } else {
            public = Some(true);
        }
    }
    let next = |i: usize| word(t.get(i + 1));
    while matches!(word(t.get(*i)), Some("unsafe" | "async" | "extern"))
        || (word(t.get(*i)) == Some("const") && next(*i) == Some("fn"))
        || (word(t.get(*i)) == Some("default") && matches!(next(*i), Some("fn" | "type" | "const")))
        || t.get(*i) == Some(&Tok::Lit)
    {
        *i += 1;
    }
    public
}

/// The index of the `;` that ends a `use`, `const`, `static` or `type` item from `i` (groups
/// skipped; no angles counted, as `<<` may shift).
fn semi_end(t: &[Tok], mut i: usize) -> usize {
    while i < t.len() && !is(t.get(i), ';') {
        i = if matches!(t[i], Tok::Punct('(' | '[' | '{')) {
            skip_group(t, i)
        } else {
            i + 1
        };
    }
    i
}

/// The index after the item that starts at `i`: its `;` or its `{..}` body.
fn item_end(t: &[Tok], i: usize) -> usize {
    let e = header_end(t, i);
    if is(t.get(e), '{') {
        skip_group(t, e)
    } else {
        e + 1
    }
}

// ---- modules, items and members --------------------------------------------------------------

#[derive(Default, Debug)]
struct Module {
    /// Items declared here: name and whether it is `pub` (not `pub(crate)`).
    items: BTreeMap<String, bool>,
    /// `use` declarations: the name they bring in (or `*`), the path, whether `pub`.
    uses: Vec<(String, Vec<String>, bool)>,
    /// Child modules: name and module path.
    children: BTreeMap<String, String>,
}

#[derive(Default, Debug)]
struct Crate {
    modules: BTreeMap<String, Module>,
    /// Type (or trait) name → member (method, field, variant, associated item) → public.
    members: BTreeMap<String, BTreeMap<String, bool>>,
    /// Every name any file declares (items, members, modules), public or not.
    names: BTreeSet<String>,
    /// (type, method) for every method, and ("", name) for every free function.
    fns: BTreeSet<(String, String)>,
}

impl Crate {
    fn member(&mut self, ty: &str, name: &str, public: bool) {
        let entry = self
            .members
            .entry(ty.to_owned())
            .or_default()
            .entry(name.to_owned())
            .or_insert(false);
        *entry |= public;
        self.names.insert(name.to_owned());
    }

    /// Reads a module from its file, and the modules it declares.
    fn load(&mut self, path: &str, file: &Path, dir: &Path) {
        let src = read(file);
        let t = tokens(&src);
        self.modules.entry(path.to_owned()).or_default();
        self.items(path, &t, dir);
    }

    /// Reads the items of one module (a file's tokens or an inline module's body).
    fn items(&mut self, path: &str, t: &[Tok], dir: &Path) {
        let mut i = 0;
        while i < t.len() {
            // Attributes.
            if is(t.get(i), '#') {
                let mut j = i + 1;
                if is(t.get(j), '!') {
                    j += 1;
                }
                if is(t.get(j), '[') {
                    let end = skip_group(t, j);
                    let attr = &t[j..end];
                    if let Some(Tok::Ident(a)) = attr.get(1) {
                        if a == "path" {
                            // `#[path = ".."] mod x;`: a file outside the tree, not the API's.
                            i = end;
                            i = item_end(t, i);
                            continue;
                        }
                    }
                    i = end;
                    continue;
                }
            }
            let public = visibility(t, &mut i).unwrap_or(false);
            let kw = word(t.get(i)).map(str::to_owned);
            let name = word(t.get(i + 1)).map(str::to_owned);
            match (kw.as_deref(), name) {
                (Some("mod"), Some(name)) => {
                    self.names.insert(name.clone());
                    let child = format!("{path}::{name}");
                    let m = self.modules.entry(path.to_owned()).or_default();
                    m.items.insert(name.clone(), public);
                    m.children.insert(name.clone(), child.clone());
                    let child_dir = dir.join(&name);
                    if is(t.get(i + 2), ';') {
                        let file = [dir.join(format!("{name}.rs")), child_dir.join("mod.rs")]
                            .into_iter()
                            .find(|f| f.exists());
                        if let Some(file) = file {
                            self.load(&child, &file, &child_dir);
                        }
                        i += 3;
                    } else {
                        let end = skip_group(t, i + 2);
                        self.modules.entry(child.clone()).or_default();
                        self.items(&child, &t[i + 3..end - 1], &child_dir);
                        i = end;
                    }
                }
                (Some("use"), _) => {
                    let end = semi_end(t, i);
                    let mut uses = Vec::new();
                    use_tree(&t[i + 1..end], &[], &mut uses);
                    let m = self.modules.entry(path.to_owned()).or_default();
                    m.uses.extend(uses.into_iter().map(|(n, p)| (n, p, public)));
                    i = end + 1;
                }
                (Some("struct" | "union"), Some(name)) => {
                    self.declare(path, &name, public);
                    let e = header_end(t, i);
                    if is(t.get(e), '{') {
                        let end = skip_group(t, e);
                        self.fields(&name, &t[e + 1..end - 1], public);
                        i = end;
                    } else {
                        i = e + 1;
                    }
                }
                (Some("enum"), Some(name)) => {
                    self.declare(path, &name, public);
                    let e = header_end(t, i);
                    let end = skip_group(t, e);
                    self.variants(&name, &t[e + 1..end - 1], public);
                    i = end;
                }
                (Some("trait"), Some(name)) => {
                    self.declare(path, &name, public);
                    let e = header_end(t, i);
                    let end = skip_group(t, e);
                    self.body(&name, &t[e + 1..end - 1], public, true);
                    i = end;
                }
                (Some("impl"), _) => {
                    let e = header_end(t, i);
                    let header = &t[i + 1..e];
                    let is_trait = header.iter().any(|x| word(Some(x)) == Some("for"));
                    let ty = impl_type(header);
                    let end = skip_group(t, e);
                    if let Some(ty) = ty {
                        self.body(&ty, &t[e + 1..end - 1], true, is_trait);
                    }
                    i = end;
                }
                (Some("fn"), Some(name)) => {
                    self.declare(path, &name, public);
                    self.fns.insert((String::new(), name.clone()));
                    i = item_end(t, i);
                }
                (Some("const" | "static" | "type"), Some(name)) => {
                    self.declare(path, &name, public);
                    i = semi_end(t, i) + 1;
                }
                (Some("macro_rules"), _) => {
                    if let Some(name) = word(t.get(i + 2)) {
                        self.names.insert(name.to_owned());
                    }
                    i = skip_group(t, i + 3);
                }
                _ => i += 1,
            }
        }
    }

    fn declare(&mut self, path: &str, name: &str, public: bool) {
        self.names.insert(name.to_owned());
        self.modules
            .entry(path.to_owned())
            .or_default()
            .items
            .insert(name.to_owned(), public);
    }

    /// The named fields of a struct body.
    fn fields(&mut self, ty: &str, t: &[Tok], type_public: bool) {
        self.fields_of(ty, t, type_public, false);
    }

    /// Named fields; those of an enum's struct variant are public with their enum.
    fn fields_of(&mut self, ty: &str, t: &[Tok], type_public: bool, variant: bool) {
        let mut i = 0;
        while i < t.len() {
            if is(t.get(i), '#') {
                i = skip_group(t, i + 1);
                continue;
            }
            let public = visibility(t, &mut i).unwrap_or(false);
            if let (Some(name), true) = (word(t.get(i)), is(t.get(i + 1), ':')) {
                let name = name.to_owned();
                self.member(ty, &name, (public || variant) && type_public);
            }
            // To the next comma at depth 0.
            let mut angle = 0;
            while i < t.len() {
                match t[i] {
                    Tok::Punct('(' | '[' | '{') => {
                        i = skip_group(t, i);
                        continue;
                    }
                    Tok::Punct('<') => angle += 1,
                    Tok::Punct('>') if !is(t.get(i.wrapping_sub(1)), '-') => angle -= 1,
                    Tok::Punct(',') if angle == 0 => break,
                    _ => {}
                }
                i += 1;
            }
            i += 1;
        }
    }

    /// The variants of an enum body.
    fn variants(&mut self, ty: &str, t: &[Tok], public: bool) {
        let mut i = 0;
        let mut expect = true;
        while i < t.len() {
            match &t[i] {
                Tok::Punct('#') => {
                    i = skip_group(t, i + 1);
                    continue;
                }
                Tok::Ident(name) if expect => {
                    let name = name.clone();
                    self.member(ty, &name, public);
                    expect = false;
                }
                Tok::Punct('(' | '{' | '[') => {
                    if is(t.get(i), '{') {
                        // A struct variant: its fields are names too.
                        let end = skip_group(t, i);
                        self.fields_of(ty, &t[i + 1..end - 1], public, true);
                        i = end;
                    } else {
                        i = skip_group(t, i);
                    }
                    continue;
                }
                Tok::Punct(',') => expect = true,
                _ => {}
            }
            i += 1;
        }
    }

    /// The functions, constants and types of an impl or trait body.
    fn body(&mut self, ty: &str, t: &[Tok], public: bool, all_public: bool) {
        self.names.insert(ty.to_owned());
        let mut i = 0;
        while i < t.len() {
            if is(t.get(i), '#') {
                i = skip_group(t, i + 1);
                continue;
            }
            let item_public = visibility(t, &mut i).unwrap_or(all_public);
            match (word(t.get(i)), word(t.get(i + 1))) {
                (Some(kw @ ("fn" | "const" | "type")), Some(name)) => {
                    let name = name.to_owned();
                    self.member(ty, &name, item_public && public);
                    if kw == "fn" {
                        self.fns.insert((ty.to_owned(), name.clone()));
                    }
                    i = if kw == "fn" {
                        item_end(t, i)
                    } else {
                        semi_end(t, i) + 1
                    };
                }
                _ => i += 1,
            }
        }
    }

    // ---- the public paths ----

    /// What `path` (a `use` path or a path in prose) names, seen from module `from`.
    fn resolve(&self, from: &str, path: &[String], depth: usize) -> Option<Target> {
        if depth > 16 || path.is_empty() {
            return None;
        }
        let mut at = match path[0].as_str() {
            "crate" => Target::Module("crate".to_owned()),
            "self" => Target::Module(from.to_owned()),
            "super" => Target::Module(from.rsplit_once("::").map(|p| p.0)?.to_owned()),
            first => self.lookup(from, first, depth)?,
        };
        for seg in &path[1..] {
            at = match at {
                Target::Module(m) => self.lookup(&m, seg, depth)?,
                _ => return None,
            };
        }
        Some(at)
    }

    /// A name as module `m` sees it: a child module, an item, or what a `use` brings in.
    fn lookup(&self, m: &str, name: &str, depth: usize) -> Option<Target> {
        let module = self.modules.get(m)?;
        if let Some(child) = module.children.get(name) {
            return Some(Target::Module(child.clone()));
        }
        if module.items.contains_key(name) {
            return Some(Target::Item(m.to_owned(), name.to_owned()));
        }
        for (n, p, _) in &module.uses {
            if n == name {
                return self
                    .resolve(m, p, depth + 1)
                    .or_else(|| Some(Target::External(p.join("::"))));
            }
        }
        for (n, p, _) in &module.uses {
            if n == "*" {
                if let Some(Target::Module(g)) = self.resolve(m, p, depth + 1) {
                    if let Some(found) = self.lookup(&g, name, depth + 1) {
                        return Some(found);
                    }
                }
            }
        }
        None
    }

    /// The names module `m` shows to the outside: its `pub` items and `pub use`s.
    fn exports(&self, m: &str) -> Vec<(String, Target)> {
        let mut out = Vec::new();
        let Some(module) = self.modules.get(m) else {
            return out;
        };
        for (name, &public) in &module.items {
            if public {
                let target = match module.children.get(name) {
                    Some(child) => Target::Module(child.clone()),
                    None => Target::Item(m.to_owned(), name.clone()),
                };
                out.push((name.clone(), target));
            }
        }
        for (name, path, public) in &module.uses {
            if *public && name != "*" {
                let target = self
                    .resolve(m, path, 0)
                    .unwrap_or_else(|| Target::External(path.join("::")));
                out.push((name.clone(), target));
            }
        }
        out
    }

    /// Every public path from the crate root (without `relink::`), with what it names.
    fn public_paths(&self) -> BTreeMap<String, Target> {
        let mut out = BTreeMap::new();
        let mut todo = vec![(String::new(), "crate".to_owned())];
        let mut seen = BTreeSet::new();
        while let Some((prefix, m)) = todo.pop() {
            if !seen.insert(m.clone()) {
                continue;
            }
            for (name, target) in self.exports(&m) {
                let path = if prefix.is_empty() {
                    name
                } else {
                    format!("{prefix}::{name}")
                };
                if let Target::Module(child) = &target {
                    todo.push((path.clone(), child.clone()));
                }
                out.insert(path, target);
            }
        }
        out
    }
}

#[derive(Clone, Debug, PartialEq)]
enum Target {
    Module(String),
    Item(String, String),
    External(String),
}

/// The (name, path) pairs a `use` tree brings in.
fn use_tree(t: &[Tok], prefix: &[String], out: &mut Vec<(String, Vec<String>)>) {
    let mut i = 0;
    let mut path = prefix.to_vec();
    while i < t.len() {
        match &t[i] {
            Tok::Ident(w) if w == "as" => {
                if let Some(alias) = word(t.get(i + 1)) {
                    if let Some(last) = out.last_mut() {
                        last.0 = alias.to_owned();
                    }
                }
                i += 2;
                continue;
            }
            Tok::Ident(w) => {
                path.push(w.clone());
                let ends = !is(t.get(i + 1), ':');
                if ends {
                    let name = if w == "self" {
                        path.pop();
                        path.last().cloned().unwrap_or_default()
                    } else {
                        w.clone()
                    };
                    out.push((name, path.clone()));
                }
            }
            Tok::Punct('*') => out.push(("*".to_owned(), path.clone())),
            Tok::Punct('{') => {
                let end = skip_group(t, i);
                use_tree(&t[i + 1..end - 1], &path, out);
                i = end;
                continue;
            }
            Tok::Punct(',') => path = prefix.to_vec(),
            _ => {}
        }
        i += 1;
    }
}

/// The type an `impl` header is for: after `for` if a trait impl, else the first path.
fn impl_type(header: &[Tok]) -> Option<String> {
    let mut t = header;
    if let Some(p) = t.iter().position(|x| word(Some(x)) == Some("for")) {
        t = &t[p + 1..];
    } else if is(t.first(), '<') {
        // impl<..> Type: skip the generics.
        let mut angle = 0;
        for (k, x) in t.iter().enumerate() {
            match x {
                Tok::Punct('<') => angle += 1,
                Tok::Punct('>') => {
                    angle -= 1;
                    if angle == 0 {
                        t = &t[k + 1..];
                        break;
                    }
                }
                _ => {}
            }
        }
    }
    let mut last = None;
    for x in t {
        match x {
            Tok::Ident(w) if w == "dyn" || w == "where" => {
                if w == "where" {
                    break;
                }
            }
            Tok::Ident(w) => last = Some(w.clone()),
            Tok::Punct(':') => {}
            _ => break,
        }
    }
    last
}

// ---- what the repository declares ------------------------------------------------------------

/// The crate read from `src/lib.rs` down.
fn the_crate() -> Crate {
    let mut krate = Crate::default();
    krate.load("crate", &root().join("src/lib.rs"), &root().join("src"));
    krate
}

/// Every name declared anywhere in the repository's Rust code (src, tests, benches, examples,
/// cli), public or not, with the members of every type: what the pages about relink's inside
/// may name.
fn everything() -> Crate {
    let mut all = the_crate();
    let files = ["src", "tests", "benches", "examples", "cli"]
        .iter()
        .flat_map(|dir| rust_files(&root().join(dir)));
    for f in files {
        let stem = f.file_stem().unwrap().to_string_lossy().into_owned();
        all.names.insert(stem.clone());
        let src = read(&f);
        let t = tokens(&src);
        let dir = PathBuf::from("/nonexistent"); // modules are read by their own files
        all.items(&format!("file::{}", f.display()), &t, &dir);
    }
    all
}

// ---- the names in the docs -------------------------------------------------------------------

/// The code spans of a Markdown text outside its fenced blocks, each with its line number.
fn code_spans(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut fenced = false;
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut rest = line;
        while let Some(a) = rest.find('`') {
            let after = &rest[a + 1..];
            let Some(b) = after.find('`') else { break };
            out.push((n + 1, after[..b].to_owned()));
            rest = &after[b + 1..];
        }
    }
    out
}

/// Names that are not relink's: the standard library's, other crates', the system's and
/// libzmq's, that the docs name beside relink's own.
const FOREIGN: &[&str] = &[
    "std",
    "core",
    "alloc",
    "bytes",
    "zmq",
    "libc",
    "log",
    "futures",
    "futures_core",
    "futures_util",
    "tokio",
    "tokio_util",
    "rustls",
    "rcgen",
    "redis",
    "Bytes",
    "BytesMut",
    "Vec",
    "String",
    "Option",
    "Result",
    "Some",
    "None",
    "Ok",
    "Err",
    "Box",
    "Arc",
    "Clone",
    "Copy",
    "Send",
    "Sync",
    "Default",
    "Display",
    "Debug",
    "Fn",
    "FnMut",
    "Stream",
    "StreamExt",
    "BufWriter",
    "TcpStream",
    "Sender",
    "Receiver",
    "Decoder",
    "Encoder",
    "FramedWrite",
    "LengthDelimitedCodec",
    "StreamOwned",
    "Instant",
    "Duration",
    "PollItem",
    "SocketEvent",
    "Publication",
    "ExclusivePublication",
    "Reader",
    "fill_buf",
    "Future",
    "Waker",
    "Poll",
    "Read",
    "Write",
    "Mutex",
    "Condvar",
    "AtomicU64",
    "Ordering",
    "read_tls",
    "write_tls",
    "process_new_packets",
    "poll_transmit",
    "recv_deadline",
    "partition_point",
    "split_to",
    "freeze",
    "next",
    "as_mut_ptr",
    "set_len",
    "fetch_add",
    "srand",
    "rand",
    "abort",
    "sleep",
    "thread",
    "await",
    "from_raw",
    "from_fd",
];

/// Lowercase words of the README and the guide, in code spans, that are no Rust names: system
/// calls and files, other tools and their options, causes as they are displayed.
const WORDS: &[&str] = &[
    "eventfd",
    "nc",
    "fdatasync",
    "flock",
    "stat",
    "cafile",
    "commonname",
    "cert",
    "key",
    "stage",
    "marks",
    "numbers",
    "rejected",
    "dns",
    "unreachable",
    "top",
    "within",
];

/// Whether a span reads as Rust rather than as a command, a file, a number or a wire frame.
fn rustish(span: &str) -> bool {
    let s = span.trim();
    let first = s.split_whitespace().next().unwrap_or("");
    let command = [
        "cargo",
        "perf",
        "strace",
        "sudo",
        "taskset",
        "redis-server",
        "paced",
        "abort_raw",
        "options",
        "links",
        "links_raw",
        "sleep",
        "update-ca-certificates",
    ];
    !(s.is_empty()
        || command.contains(&first)
        || s.starts_with("--")
        || s.starts_with('-') && s.len() > 1
        || s.starts_with('+')
        || s.starts_with('[')
        || s.starts_with('#')
        || s.starts_with('\\')
        || s.starts_with('/')
        || s.contains('/') && !s.contains('|')
        || s.contains(".rs")
        || s.contains(".cpp")
        || s.contains(".md")
        || s.contains(".seg")
        || s.contains(".h")
        || s.contains("://")
        || s.starts_with(|c: char| c.is_ascii_digit())
        || s.chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == ' ' || c == '_'))
}

/// The names a span gives: its `a::b` paths, its `.method` names, and the span itself when it
/// is one identifier (with or without a call's parentheses).
fn names_in(span: &str) -> Vec<Name> {
    let mut out = Vec::new();
    if !rustish(span) {
        return out;
    }
    let c: Vec<char> = span.chars().collect();
    let ident = |ch: char| ch.is_alphanumeric() || ch == '_';
    let mut i = 0;
    // Skip the contents of closures' parameter lists and string literals: they are the
    // reader's own names.
    while i < c.len() {
        if c[i] == '"' {
            i += 1;
            while i < c.len() && c[i] != '"' {
                i += 1;
            }
            i += 1;
            continue;
        }
        if c[i] == '|' {
            i += 1;
            while i < c.len() && c[i] != '|' {
                i += 1;
            }
            i += 1;
            continue;
        }
        if ident(c[i]) && (i == 0 || !ident(c[i - 1])) {
            let start = i;
            let mut segs = Vec::new();
            loop {
                let s = i;
                while i < c.len() && ident(c[i]) {
                    i += 1;
                }
                segs.push(c[s..i].iter().collect::<String>());
                if i + 2 < c.len() && c[i] == ':' && c[i + 1] == ':' && ident(c[i + 2]) {
                    i += 2;
                } else {
                    break;
                }
            }
            let dotted = start > 0 && c[start - 1] == '.' && (start < 2 || c[start - 2] != '.');
            let lone = start == 0 && {
                // The whole span is this name, maybe with a call's parentheses.
                let rest: String = c[i..].iter().collect();
                rest.is_empty() || rest.starts_with('(') && rest.ends_with(')')
            };
            let numeric = segs[0].starts_with(|ch: char| ch.is_ascii_digit());
            if numeric {
                continue;
            }
            let call = c.get(i) == Some(&'(');
            if segs.len() > 1 {
                out.push(Name::Path(segs));
            } else if dotted {
                out.push(Name::Member(segs.remove(0), call));
            } else if lone {
                out.push(Name::Lone(segs.remove(0), call));
            }
            continue;
        }
        i += 1;
    }
    out
}

#[derive(Debug)]
enum Name {
    /// `a::b::c`
    Path(Vec<String>),
    /// `.method` or `value.field`, and whether it is called.
    Member(String, bool),
    /// The whole span is one identifier, and whether it is called.
    Lone(String, bool),
}

/// What the check reads the docs against.
struct Api {
    krate: Crate,
    paths: BTreeMap<String, Target>,
    /// Every simple name the public API shows: items, modules, public members.
    names: BTreeSet<String>,
    /// The names of its functions and methods.
    fn_names: BTreeSet<String>,
    /// For the pages about relink's inside: every name of the repository's code.
    all: Option<Crate>,
}

impl Api {
    fn new(inside: bool) -> Api {
        let krate = the_crate();
        let paths = krate.public_paths();
        let mut names: BTreeSet<String> = paths
            .keys()
            .map(|p| p.rsplit("::").next().unwrap().to_owned())
            .collect();
        let mut fn_names = BTreeSet::new();
        for (ty, members) in &krate.members {
            if names.contains(ty) {
                for (m, _) in members.iter().filter(|m| *m.1) {
                    names.insert(m.clone());
                    if krate.fns.contains(&(ty.clone(), m.clone())) {
                        fn_names.insert(m.clone());
                    }
                }
            }
        }
        for (_, f) in &krate.fns {
            if paths.keys().any(|p| p.rsplit("::").next() == Some(f)) {
                fn_names.insert(f.clone());
            }
        }
        Api {
            krate,
            paths,
            names,
            fn_names,
            all: inside.then(everything),
        }
        .with_examples()
    }

    /// The examples' names (`demo`, the `Nats` protocol), which the pages show too.
    fn with_examples(mut self) -> Api {
        let files = rust_files(&root().join("examples"));
        let mut examples = Crate::default();
        for f in files {
            self.names
                .insert(f.file_stem().unwrap().to_string_lossy().into_owned());
            let t = tokens(&read(&f));
            examples.items("examples", &t, Path::new("/nonexistent"));
        }
        self.names.extend(examples.names);
        self
    }

    /// The public type a path names: an exported path, or one ending with it.
    fn public_type(&self, path: &[String]) -> Option<String> {
        let joined = path.join("::");
        let hit = self
            .paths
            .iter()
            .find(|(p, _)| **p == joined || p.ends_with(&format!("::{joined}")));
        match hit {
            Some((_, Target::Item(_, name))) => Some(name.clone()),
            _ => None,
        }
    }

    fn public_path(&self, path: &[String]) -> bool {
        let joined = path.join("::");
        self.paths
            .keys()
            .any(|p| *p == joined || p.ends_with(&format!("::{joined}")))
    }

    fn public_member(&self, ty: &str, member: &str) -> bool {
        self.krate
            .members
            .get(ty)
            .is_some_and(|m| m.get(member) == Some(&true))
    }

    /// Why a name does not exist, or None if it does.
    fn check(&self, name: &Name) -> Option<String> {
        let foreign = |w: &str| FOREIGN.contains(&w);
        match name {
            Name::Path(segs) => {
                let segs: Vec<String> = match segs.first().map(String::as_str) {
                    Some("relink" | "crate") => segs[1..].to_vec(),
                    _ => segs.clone(),
                };
                // Another crate's (a re-exported one too) or libzmq's (`session_base_t::…`).
                let external = matches!(self.paths.get(&segs[0]), Some(Target::External(_)));
                if segs.is_empty()
                    || external
                    || segs[0].ends_with("_t")
                    || foreign(&segs[0]) && !self.public_path(&segs[..1])
                {
                    return None;
                }
                if self.public_path(&segs) {
                    return None;
                }
                let (ty, member) = segs.split_at(segs.len() - 1);
                if let Some(t) = self.public_type(ty) {
                    if self.public_member(&t, &member[0]) {
                        return None;
                    }
                    if self.inside(ty, &member[0]) {
                        return None;
                    }
                    return Some(format!("`{}` has no public `{}`", ty.join("::"), member[0]));
                }
                if self.inside(ty, &member[0]) {
                    return None;
                }
                Some(format!("no public path `{}`", segs.join("::")))
            }
            Name::Member(m, call) | Name::Lone(m, call) => {
                if let (Name::Member(..), Some(_)) = (name, &self.all) {
                    return None;
                }
                if foreign(m)
                    || m.starts_with('_')
                    || m.starts_with("zmq_")
                    || m.len() == 1
                    || WORDS.contains(&m.as_str())
                {
                    return None;
                }
                let lower = m.starts_with(|ch: char| ch.is_ascii_lowercase());
                if *call && lower && self.all.is_none() {
                    // Called: a function or method, not a field of the same name.
                    if self.fn_names.contains(m) {
                        return None;
                    }
                    let field = self.names.contains(m);
                    return Some(if field {
                        format!("`{m}` is a field, not a function or method")
                    } else {
                        format!("no public function or method `{m}`")
                    });
                }
                if self.names.contains(m) {
                    return None;
                }
                if let Some(all) = &self.all {
                    if all.names.contains(m) {
                        return None;
                    }
                }
                if let Name::Lone(w, _) = name {
                    // The pages about the inside name C and kernel functions as often as
                    // relink's own: there, only paths and type names are held to the code.
                    let upper = w.starts_with(|ch: char| ch.is_ascii_uppercase());
                    if self.all.is_some() && !upper {
                        return None;
                    }
                    // A constant's shape (`TCP_INFO`, `ZMQ_IMMEDIATE`) is the system's as
                    // often as relink's.
                    if w.chars().all(|ch| !ch.is_ascii_lowercase()) {
                        return None;
                    }
                }
                Some(format!("no public name `{m}`"))
            }
        }
    }

    /// For the pages about the inside: `ty::member` or a module path in the repository's code.
    fn inside(&self, ty: &[String], member: &str) -> bool {
        let Some(all) = &self.all else { return false };
        let last = ty.last().map(String::as_str).unwrap_or("");
        if all
            .members
            .get(last)
            .is_some_and(|m| m.contains_key(member))
        {
            return true;
        }
        ty.iter()
            .all(|s| all.names.contains(s) || FOREIGN.contains(&s.as_str()))
            && all.names.contains(member)
    }
}

/// The pages and whether they are about relink's inside (internal names allowed there).
const PAGES: &[(&str, bool)] = &[
    ("README.md", false),
    ("docs/guide.md", false),
    ("docs/design.md", true),
    ("docs/benchmarks.md", true),
    ("docs/transitions.md", true),
];

/// Every name the pages give that does not exist, as `file:line: span: why`.
fn findings() -> Vec<String> {
    let public = Api::new(false);
    let inside = Api::new(true);
    let mut out = Vec::new();
    for (page, internal) in PAGES {
        let text = read(&root().join(page));
        let api = if *internal { &inside } else { &public };
        for (line, span) in code_spans(&text) {
            for name in names_in(&span) {
                if let Some(why) = api.check(&name) {
                    out.push(format!("{page}:{line}: `{span}`: {why}"));
                }
            }
        }
    }
    out
}

/// The lists of fields written `value.{a, b, c}`: every public field of the type they belong to
/// (the public struct whose fields include them all), each once.
fn field_lists() -> Vec<String> {
    let api = Api::new(false);
    let mut out = Vec::new();
    for (page, _) in PAGES {
        let text = read(&root().join(page));
        for (line, span) in code_spans(&text) {
            let Some(open) = span.find(".{") else {
                continue;
            };
            let listed: BTreeSet<String> = span[open + 2..]
                .trim_end_matches('}')
                .split(',')
                .map(|f| f.trim().to_owned())
                .collect();
            let owner = api.krate.members.iter().find(|(ty, members)| {
                api.names.contains(*ty) && listed.iter().all(|f| members.get(f) == Some(&true))
            });
            let Some((ty, members)) = owner else {
                out.push(format!(
                    "{page}:{line}: `{span}`: no public type has all these fields"
                ));
                continue;
            };
            let missing: Vec<&String> = members
                .iter()
                .filter(|(m, public)| **public && !listed.contains(*m))
                .filter(|(m, _)| !api.krate.fns.contains(&((*ty).clone(), (*m).clone())))
                .map(|(m, _)| m)
                .collect();
            if !missing.is_empty() {
                out.push(format!(
                    "{page}:{line}: `{span}`: leaves out {ty}'s {missing:?}"
                ));
            }
        }
    }
    out
}

#[test]
fn every_list_of_fields_names_them_all() {
    let found = field_lists();
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn every_name_in_the_prose_of_the_docs_exists() {
    let found = findings();
    assert!(
        found.is_empty(),
        "{} names in the docs that do not exist:\n{}",
        found.len(),
        found.join("\n")
    );
}

/// The names "The API at a glance" lists, per module (`""` for the crate root).
fn at_a_glance() -> Vec<(String, Vec<String>)> {
    let guide = read(&root().join("docs/guide.md"));
    let start = guide
        .find("## The API at a glance")
        .expect("the guide has \"The API at a glance\"");
    let section = &guide[start..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |e| e + 3)];
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    let mut module = String::new();
    for line in section.lines() {
        if line.starts_with("```") {
            break;
        }
        if let Some(item) = line.strip_prefix("- ") {
            module = item
                .strip_prefix("`relink::")
                .and_then(|r| r.split('`').next())
                .unwrap_or("")
                .to_owned();
        }
        if !line.starts_with("- ") && !line.starts_with("  ") {
            continue;
        }
        let names = code_spans(line)
            .into_iter()
            .map(|(_, s)| s)
            .filter(|s| s.chars().all(|ch| ch.is_alphanumeric() || ch == '_'))
            .filter(|s| s.starts_with(|ch: char| ch.is_ascii_uppercase()) || s == "defaults");
        match out.last_mut() {
            Some((m, list)) if *m == module => list.extend(names),
            _ => out.push((module.clone(), names.collect())),
        }
    }
    out
}

#[test]
fn every_name_the_guide_puts_in_a_module_is_there() {
    let api = Api::new(false);
    let glance = at_a_glance();
    assert!(
        glance.iter().any(|(m, l)| m.is_empty() && l.len() > 20),
        "the root's list is read: {glance:?}"
    );
    let mut wrong = Vec::new();
    for (module, names) in &glance {
        for name in names {
            let path = if module.is_empty() {
                name.clone()
            } else {
                format!("{module}::{name}")
            };
            if !api.paths.contains_key(&path) {
                let real: Vec<&String> = api
                    .paths
                    .keys()
                    .filter(|p| p.rsplit("::").next() == Some(name))
                    .collect();
                wrong.push(format!(
                    "`{name}` listed under `relink::{module}`, is at {real:?}"
                ));
            }
        }
    }
    // Every public module (but the hidden test hooks) has its line.
    for (path, target) in &api.paths {
        let module = matches!(target, Target::Module(_)) && !path.contains("::");
        if module && path != "test_hooks" && !glance.iter().any(|(m, _)| m == path) {
            wrong.push(format!("`relink::{path}` is not listed"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The checker itself: it reads the crate's paths right and finds what does not exist.
#[test]
fn the_checker_knows_the_api_and_finds_a_name_that_is_not_in_it() {
    let api = Api::new(false);
    for known in [
        "Link",
        "protocol::Redis",
        "config::defaults::MAX_MISSED",
        "framing::Lines",
        "error::SendError",
        "pool::PoolView",
    ] {
        assert!(
            api.paths.contains_key(known),
            "{known}: {:?}",
            api.paths.keys()
        );
    }
    assert!(!api.paths.contains_key("Redis"), "Redis is not at the root");
    for (span, exists) in [
        ("Builder::heartbeat", true),
        ("protocol::Redis", true),
        ("relink::protocol::Redis", true),
        ("Metrics::frames_refused", true),
        ("Event::Error(LinkError::Decode(..))", true),
        ("Link::request_within", true),
        ("Confirm::reply()", true),
        ("Delivery::frame_ttl", true),
        (
            "keepalive: Some(Keepalive::new(idle).interval(i).count(n))",
            true,
        ),
        ("protocols::Redis", false),
        ("Builder::frame_ttl", false),
        ("tcp_maxrt(d)", false),
        ("hwm", false),
        ("outbox_limits(frames, bytes)", false),
        ("Builder::config_failure_retry", false),
        ("Metrics::no_such_counter", false),
        ("no_such_setter(d)", false),
        ("NoSuchType", false),
    ] {
        let found: Vec<String> = names_in(span).iter().filter_map(|n| api.check(n)).collect();
        assert_eq!(found.is_empty(), exists, "{span}: {found:?}");
    }
}
