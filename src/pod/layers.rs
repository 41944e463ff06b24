//! The direction of the imports around the protocol, checked on the source: the
//! operator's machines never import the instance manager, and the instance manager
//! imports of the machines only what has not moved here yet (a list that may only
//! shrink).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The modules of `machines::postgres` the instance manager still imports: the settings
/// annotation's types, the reports not yet moved here, and two rendering constants.
const NOT_MOVED_YET: &[&str] = &[
    "api",
    "applied",
    "archived",
    "in_place",
    "managed",
    "render",
    "settings",
    "synchronous",
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir)
        .expect("a source directory")
        .flatten()
    {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The code lines of `path` (comments and `#[cfg(test)]` modules at its end left out).
fn code(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).expect("a source file");
    let text = text
        .split("#[cfg(test)]\nmod tests")
        .next()
        .unwrap_or_default();
    text.lines()
        .map(str::trim)
        .filter(|l| !l.starts_with("//"))
        .map(str::to_owned)
        .collect()
}

fn files_under(part: &str) -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src").join(part);
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    files
}

#[test]
fn the_operators_machines_never_import_the_instance_manager() {
    let offenders: Vec<String> = files_under("machines")
        .into_iter()
        // The model drives both sides' real decisions; the tests read both sides'
        // reports; the table registry exports every machine's table.
        .filter(|p| {
            let p = p.to_string_lossy();
            !p.contains("/model/") && !p.contains("/tests/") && !p.ends_with("machines/mod.rs")
        })
        .flat_map(|p| {
            code(&p)
                .into_iter()
                .filter(|l| l.contains("crate::instance"))
                .map(move |l| format!("{}: {l}", p.display()))
        })
        .collect();
    assert!(offenders.is_empty(), "{offenders:#?}");
}

#[test]
fn the_instance_manager_imports_of_the_machines_only_what_has_not_moved_to_the_protocol() {
    let prefix = "crate::machines::postgres::";
    let imported: BTreeSet<String> = files_under("instance")
        .into_iter()
        .flat_map(|p| code(&p))
        .flat_map(|l| {
            l.match_indices(prefix)
                .map(|(i, _)| {
                    l[i + prefix.len()..]
                        .split(|c: char| !c.is_alphanumeric() && c != '_')
                        .next()
                        .unwrap_or_default()
                        .to_owned()
                })
                .collect::<Vec<_>>()
        })
        .collect();
    let allowed: BTreeSet<String> = NOT_MOVED_YET.iter().map(|m| (*m).to_owned()).collect();
    let new: Vec<&String> = imported.difference(&allowed).collect();
    assert!(
        new.is_empty(),
        "the instance manager imports {new:?} of the machines: move what it needs to `pod`"
    );
    let moved: Vec<&String> = allowed.difference(&imported).collect();
    assert!(
        moved.is_empty(),
        "{moved:?} moved: take them off NOT_MOVED_YET"
    );
    assert!(
        files_under("instance")
            .iter()
            .flat_map(|p| code(p))
            .all(|l| !l.contains("crate::machines::distributeddb")),
        "the instance manager belongs to PostgresCluster"
    );
}
