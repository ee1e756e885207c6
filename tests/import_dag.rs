//! The files of `retry-core/src` (and of the engines' `retry-sqlite/src`, `retry-postgres/src`)
//! form a DAG of imports: no file uses, directly or through other
//! files, a file that uses it back. A cycle means neither file can be read, changed or tested
//! without the other; the failure names each cycle's files and the names on each of its edges,
//! so whoever breaks it sees where to cut.
//!
//! The scanner is hand-written over the source text (std only). What it counts as an edge from a
//! file to the file that *defines* a name (re-exports are followed to the definer):
//! - a private `use` (a `pub use`, `pub(crate) use`, .. only hands a name on: no edge by itself);
//! - a path written in code (`crate::a::f()`, `super::X`, `self::x::Y`, `$crate::..`, or a path
//!   that starts at a child module or at a name the file imports);
//! - a bare name the file uses in code that reaches it through a glob (`use super::*`) or a
//!   re-export of its own (a `pub use x::Thing;` whose `Thing` the file also uses).
//!
//! Not counted: comments, doc comments, string and char literals, attributes, `#[cfg(test)]`
//! items (tests may import anything), `mod x;` declarations, external crates, and edges from a
//! file to itself. Limits: names are not scoped inside a file (a local variable named like an
//! imported item counts as a use of it), a name a glob brings in is found by its spelling, and an
//! item made by a macro (`pin_project! { pub struct X .. }`) is taken to be its module file's.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

// ---------------------------------------------------------------------------------------------
// Tokens: identifiers and punctuation only; comments, literals and lifetimes are dropped (a
// string's text is kept only for `#[path = ".."]`).

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String),
    Punct(char),
    PathSep,
    Str(String),
}

fn tokenize(src: &str) -> Vec<Tok> {
    let s: Vec<char> = src.chars().collect();
    let at = |i: usize| s.get(i).copied().unwrap_or('\0');
    let (mut out, mut i) = (Vec::new(), 0);
    while i < s.len() {
        let c = s[i];
        if c.is_whitespace() {
            i += 1;
        } else if c == '/' && at(i + 1) == '/' {
            while i < s.len() && s[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && at(i + 1) == '*' {
            i = skip_block_comment(&s, i);
        } else if c == '"' {
            let (end, text) = quoted(&s, i + 1);
            out.push(Tok::Str(text));
            i = end;
        } else if c == '\'' {
            i = char_or_lifetime(&s, i);
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while at(i).is_alphanumeric() || at(i) == '_' {
                i += 1;
            }
            let word: String = s[start..i].iter().collect();
            i = word_or_literal(&s, i, word, &mut out);
        } else if c.is_ascii_digit() {
            while at(i).is_alphanumeric() || at(i) == '_' {
                i += 1;
            }
        } else if c == ':' && at(i + 1) == ':' {
            out.push(Tok::PathSep);
            i += 2;
        } else {
            out.push(Tok::Punct(c));
            i += 1;
        }
    }
    out
}

/// Block comments nest in Rust.
fn skip_block_comment(s: &[char], mut i: usize) -> usize {
    let mut depth = 0;
    while i < s.len() {
        if s[i] == '/' && s.get(i + 1) == Some(&'*') {
            depth += 1;
            i += 2;
        } else if s[i] == '*' && s.get(i + 1) == Some(&'/') {
            depth -= 1;
            i += 2;
            if depth == 0 {
                break;
            }
        } else {
            i += 1;
        }
    }
    i
}

/// A `"..."` body from just after its opening quote: the index after the closing one, the text.
fn quoted(s: &[char], mut i: usize) -> (usize, String) {
    let start = i;
    while i < s.len() && s[i] != '"' {
        i += if s[i] == '\\' { 2 } else { 1 };
    }
    (i + 1, s[start..i.min(s.len())].iter().collect())
}

/// `'x'`, `'\n'`, `'\u{..}'` are char literals; `'a` and `'static` are lifetimes or labels.
fn char_or_lifetime(s: &[char], i: usize) -> usize {
    if s.get(i + 1) == Some(&'\\') {
        let mut j = i + 3;
        while j < s.len() && s[j] != '\'' {
            j += 1;
        }
        j + 1
    } else if s.get(i + 2) == Some(&'\'') {
        i + 3
    } else {
        let mut j = i + 1;
        while j < s.len() && (s[j].is_alphanumeric() || s[j] == '_') {
            j += 1;
        }
        j
    }
}

/// After a word: a literal it prefixes (`b"..", b'x', r#".."#, br"..", c".."`), a raw identifier
/// (`r#type`), or the word itself.
fn word_or_literal(s: &[char], i: usize, word: String, out: &mut Vec<Tok>) -> usize {
    let next = s.get(i).copied().unwrap_or('\0');
    let raw = matches!(word.as_str(), "r" | "br" | "cr");
    if matches!(word.as_str(), "b" | "c") && next == '"' {
        return quoted(s, i + 1).0;
    }
    if word == "b" && next == '\'' {
        return char_or_lifetime(s, i);
    }
    if raw && (next == '"' || next == '#') {
        let hashes = s[i..].iter().take_while(|&&c| c == '#').count();
        if s.get(i + hashes) == Some(&'"') {
            let mut j = i + hashes + 1;
            while j < s.len()
                && !(s[j] == '"'
                    && s[j + 1..]
                        .iter()
                        .take(hashes)
                        .filter(|&&c| c == '#')
                        .count()
                        == hashes)
            {
                j += 1;
            }
            return j + 1 + hashes;
        }
        if word == "r" && hashes == 1 {
            let mut j = i + 1;
            while j < s.len() && (s[j].is_alphanumeric() || s[j] == '_') {
                j += 1;
            }
            out.push(Tok::Ident(s[i + 1..j].iter().collect()));
            return j;
        }
    }
    out.push(Tok::Ident(word));
    i
}

// ---------------------------------------------------------------------------------------------
// One file's scan: its items, `use` declarations and the paths and names written in its code.

/// One name a `use` declaration binds (`name: None` for a glob), in the inline module `scope`.
#[derive(Clone, Debug, PartialEq)]
struct Use {
    path: Vec<String>,
    name: Option<String>,
    public: bool,
    top: bool,
    scope: Vec<String>,
}

#[derive(Debug, Default)]
struct Scan {
    /// `mod x;` with its `#[path]`, and the ones under `#[cfg(test)]` (files of tests).
    children: Vec<(String, Option<String>)>,
    test_children: Vec<(String, Option<String>)>,
    /// Items at the file's top level; `all_defs` also those of its inline modules.
    defs: BTreeSet<String>,
    all_defs: BTreeSet<String>,
    exported_macros: BTreeSet<String>,
    uses: Vec<Use>,
    /// Paths in code, each with the inline module it is written in.
    paths: Vec<(Vec<String>, Vec<String>)>,
    idents: BTreeSet<String>,
}

fn ident(t: Option<&Tok>) -> Option<&str> {
    match t {
        Some(Tok::Ident(w)) => Some(w),
        _ => None,
    }
}

fn scan(t: &[Tok]) -> Scan {
    let mut f = Scan::default();
    let (mut depth, mut inline) = (0usize, Vec::<(String, usize)>::new());
    let (mut test, mut path_attr, mut export) = (false, None, false);
    let mut i = 0;
    while i < t.len() {
        // Only the file's own top level is what other files can name (`crate::a::Item`); an
        // inline module's items shadow names too, but not an `impl`'s methods.
        let top = depth == 0;
        let item_level = depth == inline.len();
        let scope: Vec<String> = inline.iter().map(|(n, _)| n.clone()).collect();
        if t[i] == Tok::Punct('#')
            && let Some((end, attr)) = attribute(t, i)
        {
            test |= attr == ["cfg", "(", "test", ")"];
            export |= attr == ["macro_export"];
            if let [p, eq, s] = &attr[..]
                && p == "path"
                && eq == "="
            {
                path_attr = Some(s.clone());
            }
            i = end;
            continue;
        }
        if test {
            // The item under `#[cfg(test)]`: up to its `;` or its closing brace.
            if ident(t.get(i)) == Some("mod") && t.get(i + 2) == Some(&Tok::Punct(';')) {
                let name = ident(t.get(i + 1)).unwrap_or_default().to_owned();
                f.test_children.push((name, path_attr.take()));
            }
            i = skip_item(t, i);
            test = false;
            continue;
        }
        let next = ident(t.get(i + 1)).map(str::to_owned);
        match &t[i] {
            Tok::Punct('{') => depth += 1,
            Tok::Punct('}') => {
                depth = depth.saturating_sub(1);
                if inline.last().is_some_and(|(_, d)| *d > depth) {
                    inline.pop();
                }
            }
            Tok::PathSep => {
                // `::std::..`: an external crate, and none of its segments are names of ours.
                while matches!(t.get(i + 1), Some(Tok::Ident(_)))
                    && t.get(i + 2) == Some(&Tok::PathSep)
                {
                    i += 2;
                }
                i += 1;
            }
            Tok::Ident(w) if w == "use" => {
                let mut trees = Vec::new();
                let end = use_tree(t, i + 1, Vec::new(), &mut trees);
                let public = is_public(t, i);
                f.uses.extend(trees.into_iter().map(|(path, name)| Use {
                    path,
                    name,
                    public,
                    top,
                    scope: scope.clone(),
                }));
                i = end;
                continue;
            }
            Tok::Ident(w) if w == "mod" && next.is_some() => {
                let name = next.unwrap_or_default();
                if t.get(i + 2) == Some(&Tok::Punct(';')) {
                    f.children.push((name, path_attr.take()));
                } else {
                    inline.push((name.clone(), depth + 1));
                    define(&mut f, top, item_level, name);
                }
                i += 2;
                continue;
            }
            Tok::Ident(w) if w == "macro_rules" && t.get(i + 1) == Some(&Tok::Punct('!')) => {
                let name = ident(t.get(i + 2)).unwrap_or_default().to_owned();
                if export {
                    f.exported_macros.insert(name.clone());
                }
                define(&mut f, top, item_level, name);
                i += 3;
                continue;
            }
            Tok::Ident(w) if defines(w, next.as_deref(), t.get(i + 2)) => {
                let skip = usize::from(next.as_deref() == Some("mut"));
                let name = ident(t.get(i + 1 + skip)).unwrap_or_default().to_owned();
                define(&mut f, top, item_level, name);
                i += 2 + skip;
                continue;
            }
            Tok::Ident(_) => {
                i = code_path(t, i, &scope, &mut f);
                continue;
            }
            _ => {}
        }
        if matches!(t[i], Tok::Punct(';' | '{' | '}')) {
            (path_attr, export) = (None, false);
        }
        i += 1;
    }
    f
}

fn define(f: &mut Scan, top: bool, item_level: bool, name: String) {
    if top {
        f.defs.insert(name.clone());
    }
    if item_level {
        f.all_defs.insert(name);
    }
}

/// Whether keyword `w` followed by `next` (then `after`) names a new item (`const fn f` names it
/// at `fn`; `union` is a keyword only before a name and a body or generics).
fn defines(w: &str, next: Option<&str>, after: Option<&Tok>) -> bool {
    match w {
        "fn" | "struct" | "enum" | "trait" | "type" | "static" => next.is_some(),
        "const" => next.is_some_and(|n| !matches!(n, "fn" | "unsafe" | "async" | "extern")),
        "union" => next.is_some() && matches!(after, Some(Tok::Punct('{' | '<'))),
        _ => false,
    }
}

/// `#[..]` or `#![..]` at `i`: the index after it and its tokens as text.
fn attribute(t: &[Tok], i: usize) -> Option<(usize, Vec<String>)> {
    let open = if t.get(i + 1) == Some(&Tok::Punct('!')) {
        i + 2
    } else {
        i + 1
    };
    if t.get(open) != Some(&Tok::Punct('[')) {
        return None;
    }
    let end = group_end(t, open);
    let text = t[open + 1..end - 1].iter().map(|tok| match tok {
        Tok::Ident(s) | Tok::Str(s) => s.clone(),
        Tok::Punct(c) => c.to_string(),
        Tok::PathSep => "::".to_owned(),
    });
    Some((end, text.collect()))
}

/// The index after the bracket group opening at `open`.
fn group_end(t: &[Tok], open: usize) -> usize {
    let mut depth = 0i32;
    for (j, tok) in t.iter().enumerate().skip(open) {
        match tok {
            Tok::Punct('(' | '[' | '{') => depth += 1,
            Tok::Punct(')' | ']' | '}') => depth -= 1,
            _ => {}
        }
        if depth == 0 {
            return j + 1;
        }
    }
    t.len()
}

/// The index after the item starting at `i`: its `;`, or the end of its first `{..}` body.
fn skip_item(t: &[Tok], mut i: usize) -> usize {
    while i < t.len() {
        match t[i] {
            Tok::Punct(';') => return i + 1,
            Tok::Punct('{') => return group_end(t, i),
            Tok::Punct('(' | '[') => i = group_end(t, i),
            _ => i += 1,
        }
    }
    i
}

/// Whether the `use` at `i` is `pub`, `pub(crate)`, `pub(super)` or `pub(in ..)`.
fn is_public(t: &[Tok], i: usize) -> bool {
    let mut j = i;
    if j > 0 && t[j - 1] == Tok::Punct(')') {
        while j > 0 && t[j - 1] != Tok::Punct('(') {
            j -= 1;
        }
        j = j.saturating_sub(1);
    }
    j > 0 && ident(t.get(j - 1)) == Some("pub")
}

/// Expands the use tree at `i` under `prefix` into (path, bound name) pairs, `None` for a glob:
/// `use a::{b::{C, D as E}, f::*, self as g}`. Returns the index after the tree.
fn use_tree(
    t: &[Tok],
    mut i: usize,
    mut prefix: Vec<String>,
    out: &mut Vec<(Vec<String>, Option<String>)>,
) -> usize {
    if t.get(i) == Some(&Tok::PathSep) {
        prefix.push("::".to_owned());
        i += 1;
    }
    loop {
        match t.get(i) {
            Some(Tok::Punct('*')) => {
                out.push((prefix, None));
                return i + 1;
            }
            Some(Tok::Punct('{')) => {
                i += 1;
                while !matches!(t.get(i), Some(Tok::Punct('}')) | None) {
                    i = use_tree(t, i, prefix.clone(), out);
                    if t.get(i) == Some(&Tok::Punct(',')) {
                        i += 1;
                    }
                }
                return i + 1;
            }
            Some(Tok::Ident(seg)) if t.get(i + 1) == Some(&Tok::PathSep) => {
                prefix.push(seg.clone());
                i += 2;
            }
            Some(Tok::Ident(seg)) => {
                let alias = (ident(t.get(i + 1)) == Some("as"))
                    .then(|| ident(t.get(i + 2)).unwrap_or("_").to_owned());
                let end = if alias.is_some() { i + 3 } else { i + 1 };
                // `a::{self}` binds `a` itself.
                let path = if seg == "self" && !prefix.is_empty() {
                    prefix.clone()
                } else {
                    [prefix, vec![seg.clone()]].concat()
                };
                let name = alias.unwrap_or_else(|| path.last().cloned().unwrap_or_default());
                out.push((path, Some(name)));
                return end;
            }
            _ => return i + 1,
        }
    }
}

/// A path (`a::b::c`) or a bare name in code at `i`: recorded, and the index after it.
fn code_path(t: &[Tok], i: usize, scope: &[String], f: &mut Scan) -> usize {
    let Some(first) = ident(t.get(i)) else {
        return i + 1;
    };
    let prev = i.checked_sub(1).and_then(|p| t.get(p));
    let metavar = prev == Some(&Tok::Punct('$')) && first != "crate";
    let mut path = vec![first.to_owned()];
    let mut j = i + 1;
    while t.get(j) == Some(&Tok::PathSep)
        && let Some(seg) = ident(t.get(j + 1))
    {
        path.push(seg.to_owned());
        j += 2;
    }
    // `pub(in crate::a)` names a module it is visible in, not one it uses.
    let visibility =
        ident(prev) == Some("in") && t.get(i.saturating_sub(2)) == Some(&Tok::Punct('('));
    if metavar || visibility || prev == Some(&Tok::Punct('.')) {
        return j;
    }
    if path.len() > 1 {
        f.paths.push((scope.to_vec(), path));
    } else if t.get(j) != Some(&Tok::Punct(':')) {
        // `name:` is a field, a binding's type or a bound, never a use of an item.
        f.idents.insert(path.remove(0));
    }
    j
}

// ---------------------------------------------------------------------------------------------
// The crate: its modules, and what a path names in it.

#[derive(Debug)]
struct Module {
    file: String,
    path: Vec<String>,
    scan: Scan,
    children: BTreeMap<String, usize>,
}

#[derive(Debug)]
struct Crate {
    modules: Vec<Module>,
    /// Files under `#[cfg(test)] mod x;`, whose imports do not count.
    test_files: BTreeSet<String>,
    exported_macros: BTreeMap<String, usize>,
}

/// What a path names: a module (its file), an item defined in a file, or (`Guess`) a name the
/// scanner could not find in the module it reached (a macro-made item): that module's file.
#[derive(Clone, Debug, PartialEq)]
enum Target {
    Module(usize),
    Item(usize, String),
    Guess(usize, String),
}

/// A file to read: its path, its module path, and the module and name that declare it.
type Pending = (String, Vec<String>, Option<(usize, String)>);

/// How deep a chain of re-exports and globs is followed.
const MAX_DEPTH: u32 = 12;

impl Crate {
    /// Builds the module tree from `lib.rs`, following `mod x;` to `x.rs`, `x/mod.rs` or the
    /// `#[path]` given; `sources` maps paths relative to `src/` to their text.
    fn new(sources: &BTreeMap<String, String>) -> Crate {
        let mut krate = Crate {
            modules: Vec::new(),
            test_files: BTreeSet::new(),
            exported_macros: BTreeMap::new(),
        };
        let mut queue: Vec<Pending> = vec![("lib.rs".to_owned(), Vec::new(), None)];
        while let Some((file, path, parent)) = queue.pop() {
            let text = sources
                .get(&file)
                .unwrap_or_else(|| panic!("no file {file} among {:?}", sources.keys()));
            let scan = scan(&tokenize(text));
            let id = krate.modules.len();
            if let Some((parent, name)) = parent {
                krate.modules[parent].children.insert(name, id);
            }
            for name in &scan.exported_macros {
                krate.exported_macros.insert(name.clone(), id);
            }
            for (name, attr) in &scan.test_children {
                krate
                    .test_files
                    .insert(child_file(sources, &file, name, attr.as_deref()));
            }
            for (name, attr) in &scan.children {
                let child = child_file(sources, &file, name, attr.as_deref());
                queue.push((
                    child,
                    [path.clone(), vec![name.clone()]].concat(),
                    Some((id, name.clone())),
                ));
            }
            krate.modules.push(Module {
                file,
                path,
                scan,
                children: BTreeMap::new(),
            });
        }
        krate
    }

    /// What `name` is in module `m`: a child module, an item, or what a `use` or glob binds
    /// (`own`: as seen from inside the file, where nested items and local imports count too).
    fn lookup(&self, m: usize, name: &str, own: bool, depth: u32) -> Option<Target> {
        let module = &self.modules[m];
        let defs = if own {
            &module.scan.all_defs
        } else {
            &module.scan.defs
        };
        if depth > MAX_DEPTH {
            return None;
        }
        if let Some(&child) = module.children.get(name) {
            return Some(Target::Module(child));
        }
        if defs.contains(name) {
            return Some(Target::Item(m, name.to_owned()));
        }
        if let Some(&definer) = self.exported_macros.get(name).filter(|_| m == 0) {
            return Some(Target::Item(definer, name.to_owned()));
        }
        let visible = module.scan.uses.iter().filter(|u| own || u.top);
        for u in visible.clone().filter(|u| u.name.as_deref() == Some(name)) {
            if let Some(target) = self.resolve(m, &u.scope, &u.path, depth + 1) {
                return Some(target);
            }
        }
        // A glob provides the name only if the name is really there: no guesses.
        visible.filter(|u| u.name.is_none()).find_map(|u| {
            let path = [u.path.clone(), vec![name.to_owned()]].concat();
            self.resolve(m, &u.scope, &path, depth + 1)
                .filter(|t| !matches!(t, Target::Guess(..)))
        })
    }

    /// What `path`, written in module `m` inside its inline modules `scope`, names; `None` for
    /// an external crate's path or a local name.
    fn resolve(&self, m: usize, scope: &[String], path: &[String], depth: u32) -> Option<Target> {
        let (first, rest) = path.split_first()?;
        let here = || [self.modules[m].path.clone(), scope.to_vec()].concat();
        let start = match first.as_str() {
            "::" => return None,
            "crate" => return self.walk(Target::Module(0), rest, depth),
            "self" => here(),
            "super" => {
                let supers = path.iter().take_while(|s| *s == "super").count();
                let mut base = here();
                base.truncate(base.len().checked_sub(supers)?);
                return self.walk(
                    Target::Module(0),
                    &[base, path[supers..].to_vec()].concat(),
                    depth,
                );
            }
            _ => return self.walk(self.lookup(m, first, true, depth)?, rest, depth),
        };
        self.walk(Target::Module(0), &[start, rest.to_vec()].concat(), depth)
    }

    /// From `from`, down the segments of `rest`; past an item the rest is inside it (variants,
    /// associated items, an inline module's items).
    fn walk(&self, from: Target, rest: &[String], depth: u32) -> Option<Target> {
        if depth >= MAX_DEPTH {
            return None;
        }
        let mut at = from;
        for seg in rest {
            let Target::Module(m) = at else { break };
            at = self
                .lookup(m, seg, false, depth + 1)
                .unwrap_or_else(|| Target::Guess(m, seg.clone()));
        }
        Some(at)
    }

    /// Every edge between two files, with the names that tie them.
    fn edges(&self) -> BTreeMap<(usize, usize), BTreeSet<String>> {
        let mut edges: BTreeMap<(usize, usize), BTreeSet<String>> = BTreeMap::new();
        for (m, module) in self.modules.iter().enumerate() {
            let s = &module.scan;
            let private_uses = s.uses.iter().filter(|u| !u.public && u.name.is_some());
            let uses = private_uses.map(|u| self.resolve(m, &u.scope, &u.path, 0));
            let paths = s
                .paths
                .iter()
                .map(|(scope, path)| self.resolve(m, scope, path, 0));
            let names = s
                .idents
                .iter()
                .filter(|n| !s.all_defs.contains(*n))
                .map(|n| self.lookup(m, n, true, 0));
            for target in uses.chain(paths).chain(names).flatten() {
                if let Target::Item(file, name) | Target::Guess(file, name) = target
                    && file != m
                {
                    edges.entry((m, file)).or_default().insert(name);
                }
            }
        }
        edges
    }

    /// The cycles: the strongly connected components of more than one file (the files each
    /// reachable from every other), found by plain reachability: there are only ~100 files.
    fn cycles(&self, edges: &BTreeMap<(usize, usize), BTreeSet<String>>) -> Vec<Vec<usize>> {
        let n = self.modules.len();
        let reach: Vec<BTreeSet<usize>> = (0..n)
            .map(|from| {
                let (mut seen, mut todo) = (BTreeSet::new(), vec![from]);
                while let Some(v) = todo.pop() {
                    for &(_, w) in edges.keys().filter(|(a, _)| *a == v) {
                        if seen.insert(w) {
                            todo.push(w);
                        }
                    }
                }
                seen
            })
            .collect();
        let mut cycles: Vec<Vec<usize>> = Vec::new();
        for v in (0..n).filter(|v| reach[*v].contains(v)) {
            if !cycles.iter().any(|c| c.contains(&v)) {
                cycles.push(
                    (0..n)
                        .filter(|w| reach[v].contains(w) && reach[*w].contains(&v))
                        .collect(),
                );
            }
        }
        cycles
    }

    /// `None` for a DAG; else every cycle, its files and the names on each of its edges.
    fn report(&self, src: &str) -> Option<String> {
        let edges = self.edges();
        let file = |m: usize| format!("{src}/{}", self.modules[m].file);
        let mut cycles = self.cycles(&edges);
        cycles.sort_by_key(|cycle| cycle.iter().map(|&m| file(m)).min());
        let mut out = String::new();
        for (n, cycle) in cycles.iter().enumerate() {
            let mut files: Vec<String> = cycle.iter().map(|&m| file(m)).collect();
            files.sort();
            out += &format!("cycle {}: {}\n", n + 1, files.join(", "));
            let mut inside: Vec<String> = edges
                .iter()
                .filter(|((a, b), _)| cycle.contains(a) && cycle.contains(b))
                .map(|((a, b), names)| {
                    format!(
                        "  {} -> {}: {}\n",
                        file(*a),
                        file(*b),
                        names.iter().cloned().collect::<Vec<_>>().join(", ")
                    )
                })
                .collect();
            inside.sort();
            out.extend(inside);
        }
        (!cycles.is_empty()).then_some(out)
    }
}

/// The file `mod name;` in `parent` loads: `#[path]` is relative to the parent's directory; else
/// `name.rs` or `name/mod.rs` beside `lib.rs`/`mod.rs`, or under `a/` for `a.rs`.
fn child_file(
    sources: &BTreeMap<String, String>,
    parent: &str,
    name: &str,
    attr: Option<&str>,
) -> String {
    let (dir, stem) = match parent.rsplit_once('/') {
        Some((dir, file)) => (format!("{dir}/"), file.trim_end_matches(".rs")),
        None => (String::new(), parent.trim_end_matches(".rs")),
    };
    if let Some(attr) = attr {
        return format!("{dir}{}", attr.trim_start_matches("./"));
    }
    let base = if matches!(stem, "lib" | "mod") {
        dir
    } else {
        format!("{dir}{stem}/")
    };
    let flat = format!("{base}{name}.rs");
    if sources.contains_key(&flat) {
        flat
    } else {
        format!("{base}{name}/mod.rs")
    }
}

/// Every `.rs` file under `dir`, by its path relative to `root`.
fn read_sources(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            read_sources(root, &path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let relative = path
                .strip_prefix(root)
                .expect("under src")
                .to_string_lossy()
                .replace('\\', "/");
            out.insert(
                relative,
                std::fs::read_to_string(&path).expect("a readable source file"),
            );
        }
    }
}

/// Checks that the files of `src` (a crate's `src`, relative to the workspace) form a DAG.
fn assert_dag(src: &str) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(src);
    let mut sources = BTreeMap::new();
    read_sources(&dir, &dir, &mut sources);
    let krate = Crate::new(&sources);

    // Every file is a module of the crate or a test module's file: none escaped the scanner.
    let reached: BTreeSet<&String> = krate
        .modules
        .iter()
        .map(|m| &m.file)
        .chain(&krate.test_files)
        .collect();
    let missed: Vec<&String> = sources.keys().filter(|f| !reached.contains(f)).collect();
    assert!(
        missed.is_empty(),
        "{src}: files no `mod` declaration reaches: {missed:?}"
    );

    if let Some(report) = krate.report(src) {
        panic!(
            "{src}'s files import each other in cycles (each a group of files that all \
             reach one another, with the edges inside it and the names on them):\n{report}"
        );
    }
}

#[test]
fn retry_core_src_files_form_a_dag_of_imports() {
    assert_dag("retry-core/src");
}

/// The engines are held to the kernel's rule too.
#[test]
fn retry_sqlite_src_files_form_a_dag_of_imports() {
    assert_dag("retry-sqlite/src");
}

#[test]
fn retry_postgres_src_files_form_a_dag_of_imports() {
    assert_dag("retry-postgres/src");
}

// ---------------------------------------------------------------------------------------------
// The scanner's own tests, on small made-up crates.

fn crate_of(files: &[(&str, &str)]) -> Crate {
    Crate::new(
        &files
            .iter()
            .map(|(f, s)| ((*f).to_owned(), (*s).to_owned()))
            .collect(),
    )
}

/// Every edge, as `from -> to: names`.
fn edges_of(files: &[(&str, &str)]) -> Vec<String> {
    let krate = crate_of(files);
    let file = |m: usize| krate.modules[m].file.clone();
    let mut edges: Vec<String> = krate
        .edges()
        .iter()
        .map(|((a, b), names)| {
            format!(
                "{} -> {}: {}",
                file(*a),
                file(*b),
                names.iter().cloned().collect::<Vec<_>>().join(", ")
            )
        })
        .collect();
    edges.sort();
    edges
}

#[test]
fn a_use_tree_expands_its_braces_renames_and_globs() {
    let uses = scan(&tokenize(
        "pub(crate) use crate::{a::{B, C as D}, e::*, f::{self, g as _}};",
    ))
    .uses;
    let got: Vec<(String, Option<String>)> = uses
        .iter()
        .map(|u| (u.path.join("::"), u.name.clone()))
        .collect();
    let expected = [
        ("crate::a::B", Some("B")),
        ("crate::a::C", Some("D")),
        ("crate::e", None),
        ("crate::f", Some("f")),
        ("crate::f::g", Some("_")),
    ];
    let expected: Vec<(String, Option<String>)> = expected
        .iter()
        .map(|(p, n)| ((*p).to_owned(), n.map(str::to_owned)))
        .collect();
    assert_eq!(got, expected);
    assert!(uses.iter().all(|u| u.public && u.top));
}

#[test]
fn strings_comments_docs_and_tests_give_no_edge() {
    let a = r###"
        //! Uses [`crate::b::X`].
        // crate::b::X
        /* crate::b::X /* nested */ crate::b::X */
        /// crate::b::X
        const S: &str = "crate::b::X \" crate::b::X";
        const R: &str = r#"crate::b::X " crate::b::X"#;
        fn quote<'a>(s: &'a str) -> (char, char) { ('"', '\'') }
        fn real() -> crate::c::Y { todo!() }
        #[cfg(test)]
        mod tests { use crate::b::X; fn f() { let _ = "}"; } }
    "###;
    let files = [
        ("lib.rs", "mod a; mod b; mod c;"),
        ("a.rs", a),
        ("b.rs", "pub struct X;"),
        ("c.rs", "pub struct Y;"),
    ];
    assert_eq!(edges_of(&files), ["a.rs -> c.rs: Y"]);
}

#[test]
fn super_is_the_parent_of_the_files_module() {
    let files = [
        ("lib.rs", "mod a; pub struct Root;"),
        (
            "a/mod.rs",
            "mod b; pub struct A; fn f() -> super::Root { todo!() }",
        ),
        (
            "a/b.rs",
            "use super::A; use self::inner::I; mod inner { pub struct I; use super::super::super::Root; }",
        ),
    ];
    assert_eq!(
        edges_of(&files),
        [
            "a/b.rs -> a/mod.rs: A",
            "a/b.rs -> lib.rs: Root",
            "a/mod.rs -> lib.rs: Root"
        ]
    );
}

#[test]
fn a_reexport_is_followed_to_its_definer_and_is_no_edge_itself() {
    let files = [
        (
            "lib.rs",
            "mod a; mod b; mod c; pub use a::Thing; pub(crate) use c::helper as assist;",
        ),
        ("a.rs", "pub struct Thing;"),
        ("b.rs", "use crate::Thing; fn f() { crate::assist(); }"),
        ("c.rs", "pub(crate) async fn helper() {}"),
    ];
    assert_eq!(
        edges_of(&files),
        ["b.rs -> a.rs: Thing", "b.rs -> c.rs: helper"]
    );
}

#[test]
fn a_method_does_not_hide_an_imported_module() {
    let files = [
        ("lib.rs", "mod a; mod b;"),
        (
            "a.rs",
            "use crate::b; struct S; impl S { fn b(&self) { b::f() } }",
        ),
        ("b.rs", "pub fn f() {}"),
    ];
    assert_eq!(edges_of(&files), ["a.rs -> b.rs: f"]);
}

#[test]
fn globs_and_child_modules_resolve_by_name() {
    let files = [
        ("lib.rs", "mod p;"),
        (
            "p/mod.rs",
            "mod q; mod r; use q::*; pub struct P; fn f() -> Q { todo!() }",
        ),
        (
            "p/q.rs",
            "use super::*; pub struct Q; fn g() -> P { todo!() }",
        ),
        ("p/r.rs", "fn h() { super::q::helper!(); }"),
    ];
    assert!(edges_of(&files).contains(&"p/mod.rs -> p/q.rs: Q".to_owned()));
    assert!(edges_of(&files).contains(&"p/q.rs -> p/mod.rs: P".to_owned()));
    // A name the scanner cannot find (here a macro another macro made) is taken to be its module's.
    assert!(edges_of(&files).contains(&"p/r.rs -> p/q.rs: helper".to_owned()));
}

#[test]
fn a_two_file_cycle_is_reported_with_its_names_and_a_dag_passes() {
    let cycle = [
        ("lib.rs", "mod a; mod b;"),
        ("a.rs", "use crate::b::to_line; pub fn parse() {}"),
        ("b.rs", "pub fn to_line() { crate::a::parse() }"),
    ];
    let report = crate_of(&cycle).report("retry-core/src").expect("a cycle");
    assert!(
        report.contains("retry-core/src/a.rs -> retry-core/src/b.rs: to_line"),
        "{report}"
    );
    assert!(
        report.contains("retry-core/src/b.rs -> retry-core/src/a.rs: parse"),
        "{report}"
    );
    let dag = [
        ("lib.rs", "mod a; mod b; pub use a::parse;"),
        ("a.rs", "use crate::b::to_line; pub fn parse() {}"),
        ("b.rs", "pub fn to_line() {}"),
    ];
    assert_eq!(crate_of(&dag).report("retry-core/src"), None);
}
