//! The library's modules import each other in one direction only: the
//! graph of `crate::<module>` references between the top-level modules of
//! `src/` (a name re-exported by `lib.rs` counts as its module) has no
//! cycle. A cycle is what makes a change in one place ripple everywhere.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The `.rs` files of a top-level module (a file, or a folder).
fn files_of(path: &Path) -> Vec<PathBuf> {
    if path.is_dir() {
        let mut out = Vec::new();
        for e in std::fs::read_dir(path).unwrap() {
            out.extend(files_of(&e.unwrap().path()));
        }
        out
    } else if path.extension().is_some_and(|e| e == "rs") {
        vec![path.to_path_buf()]
    } else {
        Vec::new()
    }
}

/// Code without comments and without its `#[cfg(test)]` items (each cut
/// from the attribute to the end of the item's braces, wherever it is in
/// the file: code after a test module still counts).
fn code(path: &Path) -> String {
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
        // Skip to the end of the item: its braces balanced, or its `;`.
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

/// Names re-exported at the crate root (`pub use module::{A, B}` in lib.rs).
fn root_names(modules: &BTreeSet<String>) -> BTreeMap<String, String> {
    let lib = code(&src().join("lib.rs"));
    let mut out = BTreeMap::new();
    for stmt in lib.split("pub use ").skip(1) {
        let stmt = stmt.split(';').next().unwrap_or_default();
        let Some((module, rest)) = stmt.split_once("::") else {
            continue;
        };
        if !modules.contains(module) {
            continue;
        }
        for name in rest.split(|c: char| !(c.is_alphanumeric() || c == '_')) {
            if !name.is_empty() {
                out.insert(name.to_string(), module.to_string());
            }
        }
    }
    out
}

fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let mut modules = BTreeMap::new();
    for e in std::fs::read_dir(src()).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_stem().unwrap().to_string_lossy().into_owned();
        if name != "lib" && (p.is_dir() || p.extension().is_some_and(|e| e == "rs")) {
            modules.insert(name, p);
        }
    }
    let names: BTreeSet<String> = modules.keys().cloned().collect();
    let root = root_names(&names);
    let mut graph = BTreeMap::new();
    for (module, path) in &modules {
        let mut deps = BTreeSet::new();
        for file in files_of(path) {
            let text = code(&file);
            for part in text.split("crate::").skip(1) {
                let first: String = part
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                let target = if names.contains(&first) {
                    Some(first)
                } else {
                    root.get(&first).cloned()
                };
                if let Some(t) = target.filter(|t| t != module) {
                    deps.insert(t);
                }
            }
        }
        graph.insert(module.clone(), deps);
    }
    graph
}

/// A cycle through `at`, if any (depth-first search).
fn cycle(
    g: &BTreeMap<String, BTreeSet<String>>,
    at: &str,
    path: &mut Vec<String>,
    done: &mut BTreeSet<String>,
) -> Option<Vec<String>> {
    if let Some(i) = path.iter().position(|m| m == at) {
        let mut c = path[i..].to_vec();
        c.push(at.to_string());
        return Some(c);
    }
    if done.contains(at) {
        return None;
    }
    path.push(at.to_string());
    for next in g.get(at).into_iter().flatten() {
        if let Some(c) = cycle(g, next, path, done) {
            return Some(c);
        }
    }
    path.pop();
    done.insert(at.to_string());
    None
}

#[test]
fn the_library_modules_import_each_other_in_one_direction() {
    let g = graph();
    // The graph is read at all: the consumer uses the group (serial mode).
    assert!(g["consumer"].contains("group"), "{g:?}");
    let mut done = BTreeSet::new();
    for m in g.keys() {
        if let Some(c) = cycle(&g, m, &mut Vec::new(), &mut done) {
            panic!("import cycle: {}", c.join(" -> "));
        }
    }
}
