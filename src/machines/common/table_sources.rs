//! A check that a machine's declared table and its code agree on where each edge is
//! taken (test only).
//!
//! Every edge records the file whose code takes it ([`Edge::by`]); the generated
//! statechart links to it. [`where_taken`] keeps that true from both sides:
//! - the recorded file exists and names the edge's reason constant (the reason
//!   `PodUpgraded` is the constant `POD_UPGRADED`);
//! - no file of the machine's `decide/` folder names an edge reason constant unless the
//!   table records that file for an edge with that reason.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::engine::{Edge, Machine};

/// The constant a reason is declared as: `PodUpgraded` → `POD_UPGRADED`.
pub(crate) fn constant_name(reason: &str) -> String {
    let mut out = String::new();
    for (i, c) in reason.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}

/// Whether `text` holds `word` delimited by non-identifier characters.
fn names(text: &str, word: &str) -> bool {
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    text.match_indices(word).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + word.len()..].chars().next();
        !before.is_some_and(is_ident) && !after.is_some_and(is_ident)
    })
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Check `M`'s table against the files under `decide_dir` (relative to the crate root).
///
/// # Errors
/// Every disagreement, one line each.
pub(crate) fn where_taken<M: Machine>(decide_dir: &str) -> Result<(), Vec<String>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let table: &[Edge<M::Kind>] = M::table();
    let mut problems = Vec::new();
    for e in table {
        let (from, to): (&str, &str) = (e.from.into(), e.to.into());
        let constant = constant_name(e.reason);
        match std::fs::read_to_string(root.join(e.by)) {
            Ok(text) if names(&text, &constant) => {}
            Ok(_) => problems.push(format!(
                "{from} -> {to} ({}): {} does not name {constant}",
                e.reason, e.by
            )),
            Err(err) => problems.push(format!(
                "{from} -> {to} ({}): cannot read {:?}: {err}",
                e.reason, e.by
            )),
        }
    }
    let reasons: BTreeSet<&str> = table.iter().map(|e| e.reason).collect();
    let mut files = Vec::new();
    rust_files(&root.join(decide_dir), &mut files);
    if files.is_empty() {
        problems.push(format!("no source files under {decide_dir}"));
    }
    for file in files {
        let Ok(text) = std::fs::read_to_string(&file) else {
            problems.push(format!("cannot read {}", file.display()));
            continue;
        };
        let relative = file.strip_prefix(root).unwrap_or(&file).to_string_lossy();
        for reason in &reasons {
            let constant = constant_name(reason);
            let recorded = table
                .iter()
                .any(|e| e.reason == *reason && e.by == relative);
            if names(&text, &constant) && !recorded {
                problems.push(format!(
                    "{relative} names {constant}, but the table records no edge with reason {reason} as taken there"
                ));
            }
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

#[test]
fn constant_names_follow_the_reason() {
    assert_eq!(constant_name("PodUpgraded"), "POD_UPGRADED");
    assert_eq!(constant_name("Replanned"), "REPLANNED");
    assert!(names("x(POD_UPGRADED)", "POD_UPGRADED"));
    assert!(!names("PRE_POD_UPGRADED", "POD_UPGRADED"));
}
