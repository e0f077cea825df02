//! The library's modules import each other in one direction only, at
//! every level: among the top-level modules of `src/`, and among the
//! sub-modules of every folder (a name re-exported by a module counts as
//! the module that defines it). A cycle is what makes a change in one
//! place ripple everywhere. A module may use its parent's items and its
//! own sub-modules; only siblings are held to one direction.
//!
//! The consumer wing in particular has three parts that each decide one
//! thing: `discovery` (where work is), `flow` (how much to take) and
//! `life` (a delivery from pop to settle). `life` uses the other two;
//! they use neither each other nor `life`.
#![allow(clippy::unwrap_used)]

#[path = "layering/modules.rs"]
mod modules;

use std::collections::BTreeSet;
use std::path::Path;

use modules::{Graph, Modules};

fn library() -> Modules {
    Modules::read(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"))
}

fn path(p: &str) -> Vec<String> {
    p.split('/')
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

/// A cycle through `at`, if any (depth-first search).
fn cycle(
    g: &Graph,
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

fn first_cycle(g: &Graph) -> Option<Vec<String>> {
    let mut done = BTreeSet::new();
    g.keys()
        .find_map(|m| cycle(g, m, &mut Vec::new(), &mut done))
}

#[test]
fn the_library_modules_import_each_other_in_one_direction() {
    let g = library().graph_below(&[]);
    // The graph is read at all: the consumer uses the group (serial mode).
    assert!(g["consumer"].contains("group"), "{g:?}");
    if let Some(c) = first_cycle(&g) {
        panic!("import cycle: {}", c.join(" -> "));
    }
}

#[test]
fn every_folders_modules_import_each_other_in_one_direction() {
    let lib = library();
    let parents = lib.parents();
    // Sub-modules are read at all, through re-exports too: a delivery's
    // end goes through its settler, and the fetch loop hands out
    // `Delivery`s, which it names through `consumer::life`.
    assert!(
        parents.contains(&path("consumer/life/delivery")),
        "{parents:?}"
    );
    let life = lib.graph_below(&path("consumer/life"));
    assert!(life["fetcher"].contains("delivery"), "{life:?}");
    let mut cycles = Vec::new();
    for parent in &parents {
        if let Some(c) = first_cycle(&lib.graph_below(parent)) {
            cycles.push(format!("{}: {}", parent.join("/"), c.join(" -> ")));
        }
    }
    assert!(cycles.is_empty(), "import cycles:\n{}", cycles.join("\n"));
}

#[test]
fn the_consumer_finds_work_and_meters_it_apart_from_a_deliverys_life() {
    let g = library().graph_below(&path("consumer"));
    let wing = |w: &str| -> BTreeSet<&str> {
        g[w].iter()
            .map(String::as_str)
            .filter(|m| ["discovery", "flow", "life"].contains(m))
            .collect()
    };
    assert_eq!(
        wing("discovery"),
        BTreeSet::new(),
        "discovery imports {g:?}"
    );
    assert_eq!(wing("flow"), BTreeSet::new(), "flow imports {g:?}");
    assert_eq!(wing("life"), BTreeSet::from(["discovery", "flow"]), "{g:?}");
}
