//! The tutorial's code is this crate's code: every listing in
//! `docs/write-your-own-operator.md` is marked with the region it shows,
//!
//! ````markdown
//! <!-- listing: src/state.rs#states -->
//! ```rust
//! ...exactly the lines between `// ANCHOR: states` and `// ANCHOR_END: states`...
//! ```
//! ````
//!
//! (paths relative to `examples/canary/`), and this test fails if a listing differs
//! from its region, names a region that does not exist, or if a region is shown nowhere.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

const TUTORIAL: &str = "../../docs/write-your-own-operator.md";
const MARK: &str = "<!-- listing: ";

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// The lines of `file` between `ANCHOR: name` and `ANCHOR_END: name` (other anchors'
/// lines left out).
fn region(file: &str, name: &str) -> Option<String> {
    let text = read(&crate_dir().join(file));
    let start = format!("// ANCHOR: {name}");
    let end = format!("// ANCHOR_END: {name}");
    let mut lines = text.lines().skip_while(|l| l.trim() != start);
    lines.next()?;
    let mut body = Vec::new();
    for line in lines {
        if line.trim() == end {
            return Some(body.join("\n"));
        }
        if !line.trim_start().starts_with("// ANCHOR") {
            body.push(line);
        }
    }
    None
}

/// Every `(file, region, listing)` of the tutorial.
fn listings() -> Vec<(String, String, String)> {
    let text = read(&crate_dir().join(TUTORIAL));
    let mut out = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let Some(rest) = line.strip_prefix(MARK) else {
            continue;
        };
        let target = rest.trim_end_matches("-->").trim();
        let (file, name) = target
            .split_once('#')
            .unwrap_or_else(|| panic!("a listing mark without #region: {line}"));
        let fence = lines.next().unwrap_or_default();
        assert!(
            fence.starts_with("```"),
            "the listing of {target} must follow its mark"
        );
        let body: Vec<&str> = lines
            .by_ref()
            .take_while(|l| !l.starts_with("```"))
            .collect();
        out.push((file.to_owned(), name.to_owned(), body.join("\n")));
    }
    out
}

/// Every `(file, region)` the sources mark.
fn regions() -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    for dir in ["src", "tests"] {
        let mut files: Vec<PathBuf> = std::fs::read_dir(crate_dir().join(dir))
            .expect("a source directory")
            .filter_map(Result::ok)
            .map(|e| e.path())
            .collect();
        files.sort();
        for path in files {
            let file = format!(
                "{dir}/{}",
                path.file_name().unwrap_or_default().to_string_lossy()
            );
            for line in read(&path).lines() {
                if let Some(name) = line.trim().strip_prefix("// ANCHOR: ") {
                    out.insert((file.clone(), name.to_owned()));
                }
            }
        }
    }
    out
}

#[test]
fn every_listing_of_the_tutorial_is_the_code_it_names() {
    let listings = listings();
    assert!(!listings.is_empty(), "the tutorial has no marked listing");
    for (file, name, listing) in &listings {
        let code = region(file, name)
            .unwrap_or_else(|| panic!("{file} has no region `{name}` (ANCHOR/ANCHOR_END)"));
        assert_eq!(
            listing, &code,
            "the tutorial's listing of {file}#{name} differs from the code"
        );
    }
}

#[test]
fn every_marked_region_of_the_code_is_shown_in_the_tutorial() {
    let shown: BTreeSet<(String, String)> = listings()
        .into_iter()
        .map(|(file, name, _)| (file, name))
        .collect();
    let missing: Vec<_> = regions().difference(&shown).cloned().collect();
    assert!(
        missing.is_empty(),
        "regions the tutorial does not show: {missing:?}"
    );
}
