//! Reads the library's module tree and who imports whom, from the source
//! text: enough of Rust's path rules to follow `use` trees and paths that
//! start with `crate::`, `super::` or `self::`, through the names a module
//! re-exports, down to the module that defines them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module's path below the crate root (`[]` is `lib.rs`).
pub type ModPath = Vec<String>;

/// The crate's modules, what each file refers to, and what each module
/// re-exports.
pub struct Modules {
    /// Every module, with the files that make it (its own file, or its
    /// `mod.rs`).
    modules: BTreeSet<ModPath>,
    /// Each file's module and the paths its code names.
    files: Vec<(ModPath, Vec<ModPath>)>,
    /// Names a module imports, each to the absolute path it stands for.
    imports: BTreeMap<(ModPath, String), ModPath>,
}

/// Edges between the sub-modules of one module: `a -> b` when code in `a`
/// (or below it) names something defined in `b` (or below it).
pub type Graph = BTreeMap<String, BTreeSet<String>>;

impl Modules {
    /// Reads the crate whose `lib.rs` is in `src`.
    pub fn read(src: &Path) -> Modules {
        let mut found = Vec::new();
        walk(src, &mut Vec::new(), &mut found);
        let modules = found.iter().map(|(m, _)| m.clone()).collect();
        let mut files = Vec::new();
        let mut uses = Vec::new();
        for (module, path) in &found {
            let text = code(path);
            let named = named_paths(&text);
            files.push((module.clone(), named));
            uses.push((module.clone(), use_trees(&text)));
        }
        let mut me = Modules {
            modules,
            files: Vec::new(),
            imports: BTreeMap::new(),
        };
        for (module, trees) in uses {
            for (path, name) in trees {
                if let Some(abs) = me.absolute(&module, &path, true) {
                    me.imports.insert((module.clone(), name), abs);
                }
            }
        }
        for (module, named) in files {
            let resolved = named
                .iter()
                .filter_map(|p| me.absolute(&module, p, false))
                .map(|p| me.defining_module(&p, 0))
                .collect();
            me.files.push((module, resolved));
        }
        me
    }

    /// The graph among the sub-modules of `parent`.
    pub fn graph_below(&self, parent: &[String]) -> Graph {
        let mut g: Graph = self
            .children(parent)
            .into_iter()
            .map(|c| (c, BTreeSet::new()))
            .collect();
        let depth = parent.len();
        for (module, targets) in &self.files {
            if module.len() <= depth || module[..depth] != *parent {
                continue;
            }
            for t in targets {
                if t.len() <= depth || t[..depth] != *parent || t[depth] == module[depth] {
                    continue;
                }
                if let Some(deps) = g.get_mut(&module[depth]) {
                    deps.insert(t[depth].clone());
                }
            }
        }
        g
    }

    /// Every module that has sub-modules.
    pub fn parents(&self) -> Vec<ModPath> {
        self.modules
            .iter()
            .filter(|m| !self.children(m).is_empty())
            .cloned()
            .collect()
    }

    fn children(&self, parent: &[String]) -> Vec<String> {
        self.modules
            .iter()
            .filter(|m| m.len() == parent.len() + 1 && m[..parent.len()] == *parent)
            .map(|m| m[parent.len()].clone())
            .collect()
    }

    /// `path` (as written in `module`) from the crate root; None for a
    /// path outside the crate. In a `use`, a first segment that names a
    /// sub-module is relative to `module`.
    fn absolute(&self, module: &[String], path: &[String], in_use: bool) -> Option<ModPath> {
        let first = path.first()?;
        let (mut base, rest): (ModPath, &[String]) = match first.as_str() {
            "crate" => (Vec::new(), &path[1..]),
            "self" | "super" => {
                let mut base = module.to_vec();
                let mut i = 0;
                while let Some(seg) = path.get(i) {
                    match seg.as_str() {
                        "super" => {
                            base.pop();
                        }
                        "self" => {}
                        _ => break,
                    }
                    i += 1;
                }
                (base, &path[i..])
            }
            _ if in_use => {
                let mut child = module.to_vec();
                child.push(first.clone());
                if !self.modules.contains(&child) {
                    return None;
                }
                (module.to_vec(), path)
            }
            _ => return None,
        };
        base.extend(rest.iter().cloned());
        Some(base)
    }

    /// The module that defines what `path` names: its longest prefix that
    /// is a module, followed through that module's imports when the next
    /// segment is a name it imported.
    fn defining_module(&self, path: &[String], depth: usize) -> ModPath {
        let mut module = Vec::new();
        for seg in path {
            let mut next = module.clone();
            next.push(seg.clone());
            if self.modules.contains(&next) {
                module = next;
                continue;
            }
            if depth < 16 {
                if let Some(target) = self.imports.get(&(module.clone(), seg.clone())) {
                    if target.as_slice() != path {
                        return self.defining_module(target, depth + 1);
                    }
                }
            }
            break;
        }
        module
    }
}

/// Every `.rs` file below `dir` with its module path.
fn walk(dir: &Path, at: &mut ModPath, out: &mut Vec<(ModPath, PathBuf)>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        let stem = p.file_stem().unwrap().to_string_lossy().into_owned();
        if p.is_dir() {
            at.push(stem);
            walk(&p, at, out);
            at.pop();
        } else if p.extension().is_some_and(|e| e == "rs") {
            let mut module = at.clone();
            if stem != "mod" && stem != "lib" {
                module.push(stem);
            }
            out.push((module, p));
        }
    }
}

/// Code without comments and without its `#[cfg(test)]` items (each cut
/// from the attribute to the end of the item's braces, wherever it is in
/// the file: code after a test module still counts).
pub fn code(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    let text: String = text
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    let mut out = String::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let item = &rest[at..];
        let mut depth = 0usize;
        let mut end = item.len();
        for (i, c) in item.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        end = i + 1;
                        break;
                    }
                }
                ';' if depth == 0 => {
                    end = i + 1;
                    break;
                }
                _ => {}
            }
        }
        rest = &item[end..];
    }
    out.push_str(rest);
    out
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Paths in the code that start with `crate`, `super` or `self` (in `use`
/// trees too: the part before a brace).
fn named_paths(text: &str) -> Vec<ModPath> {
    let mut out = Vec::new();
    let bytes: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < bytes.len() {
        let starts_word = i == 0 || !is_ident(bytes[i - 1]);
        if !starts_word || !is_ident(bytes[i]) {
            i += 1;
            continue;
        }
        let mut segs = Vec::new();
        let mut j = i;
        loop {
            let start = j;
            while j < bytes.len() && is_ident(bytes[j]) {
                j += 1;
            }
            if start == j {
                break;
            }
            segs.push(bytes[start..j].iter().collect::<String>());
            if bytes.get(j) == Some(&':') && bytes.get(j + 1) == Some(&':') {
                j += 2;
            } else {
                break;
            }
        }
        if matches!(segs[0].as_str(), "crate" | "super" | "self") {
            out.push(segs);
        }
        i = j.max(i + 1);
    }
    out
}

/// Every `use` statement's paths, each with the name it brings in (its
/// last segment, or its alias); globs are skipped.
fn use_trees(text: &str) -> Vec<(ModPath, String)> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("use ") {
        // A statement: only a visibility before it on its line.
        let line_start = rest[..at].rfind('\n').map_or(0, |i| i + 1);
        let lead = rest[line_start..at].trim();
        let after = &rest[at + 4..];
        rest = after;
        if !(lead.is_empty() || lead.starts_with("pub")) {
            continue;
        }
        let Some(end) = after.find(';') else { break };
        let tree: String = after[..end]
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        let path_like = tree
            .chars()
            .all(|c| is_ident(c) || matches!(c, ':' | '{' | '}' | ',' | ' ' | '*'));
        if path_like {
            expand(&tree, &mut Vec::new(), &mut out);
        }
    }
    out
}

/// Expands a `use` tree (`a::{b, c::{d as e}}`) into its leaves.
fn expand(tree: &str, prefix: &mut ModPath, out: &mut Vec<(ModPath, String)>) {
    let tree = tree.trim();
    if let Some(open) = tree.find('{') {
        let head = tree[..open].trim_end_matches("::");
        let n = push_segments(head, prefix);
        let close = tree.rfind('}').filter(|&c| c > open).unwrap_or(tree.len());
        let inner = &tree[open + 1..close];
        let mut depth = 0;
        let mut start = 0;
        for (i, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    expand(&inner[start..i], prefix, out);
                    start = i + 1;
                }
                _ => {}
            }
        }
        expand(&inner[start..], prefix, out);
        prefix.truncate(prefix.len() - n);
        return;
    }
    if tree.is_empty() || tree.ends_with('*') {
        return;
    }
    let (path, alias) = match tree.split_once(" as ") {
        Some((p, a)) => (p.trim(), Some(a.trim())),
        None => (tree, None),
    };
    let n = push_segments(path, prefix);
    let name = alias
        .map(str::to_string)
        .or_else(|| prefix.last().cloned())
        .unwrap_or_default();
    // `use a::b::{self}` brings in `b`.
    if name == "self" {
        prefix.pop();
        let module = prefix.last().cloned().unwrap_or_default();
        out.push((prefix.clone(), module));
        prefix.push("self".into());
    } else if name != "_" {
        out.push((prefix.clone(), name));
    }
    prefix.truncate(prefix.len() - n);
}

fn push_segments(path: &str, prefix: &mut ModPath) -> usize {
    let segs: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
    prefix.extend(segs.iter().map(|s| s.to_string()));
    segs.len()
}
