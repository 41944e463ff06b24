//! The files of `machines::common` import each other without a cycle, so they read
//! bottom-up: `meta` and `jobs` below `backup`, `backup` below `observe`, `observe` below
//! `replace` and `actions`, and the sub-machines (`finalize`, `on_demand`) on top.
//!
//! The check reads the sources: a file depends on a sibling it names as `super::x`,
//! `super::{x, …}` or `crate::machines::common::x` in its code (not in comments, and not
//! in its `#[cfg(test)] mod tests`, whose fixtures may use anything).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Each module and the sibling modules it imports.
type Graph = BTreeMap<String, BTreeSet<String>>;

/// The paths by which a file names a sibling module.
const PREFIXES: [&str; 2] = ["crate::machines::common::", "super::"];

/// The code of `source` that counts: without its tests module and its comment lines.
fn code(source: &str) -> String {
    let end = source
        .find("#[cfg(test)]\nmod tests")
        .unwrap_or(source.len());
    source[..end]
        .lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The first segment of each path in `text`, which follows a prefix: `x` of `x::Y`, and
/// `x`, `y` of `{x, y::Z}`.
fn first_segments(text: &str) -> Vec<String> {
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    match text.strip_prefix('{') {
        Some(group) => group
            .split('}')
            .next()
            .unwrap_or_default()
            .split(',')
            .map(|item| ident(item.trim()))
            .collect(),
        None => vec![ident(text)],
    }
}

/// The modules among `siblings` that `source` (the file of `module`) imports.
fn imports(module: &str, source: &str, siblings: &BTreeSet<String>) -> BTreeSet<String> {
    let code = code(source);
    PREFIXES
        .iter()
        .flat_map(|prefix| code.match_indices(prefix).map(|(at, p)| at + p.len()))
        .flat_map(|at| first_segments(&code[at..]))
        .filter(|name| name != module && siblings.contains(name))
        .collect()
}

/// The import graph of the modules whose sources are `files` (module name, source).
fn graph<'a>(files: impl IntoIterator<Item = (&'a str, &'a str)> + Clone) -> Graph {
    let siblings: BTreeSet<String> = files
        .clone()
        .into_iter()
        .map(|(m, _)| m.to_owned())
        .collect();
    files
        .into_iter()
        .map(|(module, source)| (module.to_owned(), imports(module, source, &siblings)))
        .collect()
}

/// A cycle of `graph`, as the modules along it with the first repeated at the end, if
/// there is one.
fn cycle(graph: &Graph) -> Option<Vec<String>> {
    fn visit(
        module: &str,
        graph: &Graph,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(start) = path.iter().position(|m| m == module) {
            let mut cycle = path[start..].to_vec();
            cycle.push(module.to_owned());
            return Some(cycle);
        }
        if done.contains(module) {
            return None;
        }
        path.push(module.to_owned());
        for next in graph.get(module).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(module.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|module| visit(module, graph, &mut Vec::new(), &mut done))
}

/// The sources of `machines::common`, by module name (`mod.rs` is the parent, not a
/// sibling).
fn common_sources() -> Vec<(String, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/machines/common");
    let mut files: Vec<(String, String)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "rs"))
        .filter(|path| path.file_stem().is_some_and(|s| s != "mod"))
        .map(|path| {
            let module = path
                .file_stem()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
            let source = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
            (module, source)
        })
        .collect();
    files.sort();
    files
}

#[test]
fn the_shared_modules_import_each_other_without_a_cycle() {
    let sources = common_sources();
    let graph = graph(sources.iter().map(|(m, s)| (m.as_str(), s.as_str())));
    assert!(graph.len() > 10, "too few modules read: {graph:?}");
    if let Some(cycle) = cycle(&graph) {
        panic!(
            "machines::common has an import cycle: {}; move what they share to the module \
             it belongs to (the imports: {graph:?})",
            cycle.join(" -> ")
        );
    }
}

#[test]
fn a_cycle_through_any_form_of_import_is_found() {
    let files = [
        ("a", "use super::b::Thing;\n"),
        ("b", "use super::{c, meta};\n"),
        ("c", "fn f() { crate::machines::common::a::g() }\n"),
        ("meta", "use super::Error;\n"),
    ];
    assert_eq!(
        cycle(&graph(files)),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
}

#[test]
fn imports_in_comments_and_tests_do_not_count() {
    let files = [
        ("a", "//! See [`super::b`].\nuse super::b::X;\n"),
        (
            "b",
            "/// Unlike [`super::a`].\npub struct X;\n#[cfg(test)]\nmod tests {\n    use super::super::a;\n    use crate::machines::common::a::Y;\n}\n",
        ),
    ];
    let graph = graph(files);
    assert_eq!(graph["a"], BTreeSet::from(["b".to_owned()]));
    assert!(graph["b"].is_empty(), "{graph:?}");
    assert_eq!(cycle(&graph), None);
}
