//! The direction of the imports around the protocol, checked on the source: the
//! operator's machines and the instance manager never import each other, only the
//! protocol (the model check, which drives both sides' real decisions, and the tests
//! that read one side's reports with the other's parser are the exceptions).

use std::path::{Path, PathBuf};

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
fn the_instance_manager_never_imports_the_operators_machines() {
    let offenders: Vec<String> = files_under("instance")
        .into_iter()
        .filter(|p| !p.to_string_lossy().contains("/tests/"))
        .flat_map(|p| {
            code(&p)
                .into_iter()
                .filter(|l| {
                    l.contains("crate::machines::postgres")
                        || l.contains("crate::machines::distributeddb")
                })
                .map(move |l| format!("{}: {l}", p.display()))
        })
        .collect();
    assert!(
        offenders.is_empty(),
        "move what it needs to `pod`: {offenders:#?}"
    );
}
