#!/usr/bin/env python3
"""Check that the manual is apart from the history, and that what it says of the code is so.

    tools/check_refs.py [--root DIR]

Three rules, each printed as FILE:LINE: why when broken:

1. **No commit hash in the manual.** `README.md` and `docs/**/*.md`, except
   `docs/history.md` (the dated runs, where hashes belong), hold no commit of the
   repository. A hex string of 7 to 40 characters is flagged only when
   `git cat-file` finds a commit by that name, so LSNs, UIDs and Job suffixes pass.
2. **No tracker numbers in the code.** Files under `src/`, `tests/`, `examples/` and
   `tools/` say no "issue N", "finding N" or "stop N" (nor "issue-N"): the tracker
   is not in the repository, so a comment says the reason in a sentence, or points to
   a decision record in `docs/decisions/`.
3. **The plugin's help names every command.** The subcommands are the variants of
   `enum PluginCommand` in `src/ops/plugin/mod.rs` (in kebab case, as clap names
   them); the `Kubectl` command's help in `src/main.rs`, the table of the plugin's
   module doc, the table of `docs/kubectl-plugin.md`, and every paragraph of `README.md`
   and `docs/README.md` that lists the commands as code spans (a paragraph, list item
   or table row naming `` `status` ``, `` `history` `` and `` `switchover` ``) name each
   of them.
4. **The RBAC table is the RBAC.** The table under "RBAC" in `docs/operating.md` has
   one row per rule of the Roles and ClusterRoles in `examples/deploy/rbac.yaml`, and
   no other: the row's resources (code spans; after "named", the resource names) and
   its verbs are the rule's.

Exit status: 0 when every rule holds, 1 when one does not, 2 on bad usage.
"""

import argparse
import re
import subprocess
import sys
from pathlib import Path

HEX = re.compile(r"\b[0-9a-f]{7,40}\b")
COMMENT_LEAD = re.compile(r"^\s*(?://[/!]?|#+|--)\s*")
TRACKER = re.compile(r"\b(?:issues?|findings?|stops?)[ -]#?[0-9]+\b", re.IGNORECASE)
CODE_DIRS = ("src", "tests", "examples", "tools")
# The checker and its test name the rule they enforce.
EXEMPT = {"tools/check_refs.py", "tools/check_refs_test.py"}
HISTORY = "docs/history.md"
PLUGIN = "src/ops/plugin/mod.rs"
MAIN = "src/main.rs"
PLUGIN_DOC = "docs/kubectl-plugin.md"
LISTS = ("README.md", "docs/README.md")
RBAC = "examples/deploy/rbac.yaml"
RBAC_DOC = "docs/operating.md"
FLOW = re.compile(r"^\s*-?\s*(resources|resourceNames|verbs):\s*\[(.*)\]\s*$")


def manual_files(root):
    """The manual's Markdown files that must hold no commit hash."""
    files = [root / "README.md"] if (root / "README.md").is_file() else []
    files += sorted((root / "docs").rglob("*.md"))
    return [f for f in files if f.relative_to(root).as_posix() != HISTORY]


def commits(root, names):
    """The subset of `names` that name a commit of the repository at `root`."""
    names = sorted(set(names))
    if not names:
        return set()
    query = "".join(f"{n}^{{commit}}\n" for n in names)
    out = subprocess.run(
        ["git", "-C", str(root), "cat-file", "--batch-check=%(objecttype)"],
        input=query,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    # One line per query: the type, or "<name> missing" / "<name> ambiguous".
    return {n for n, line in zip(names, out) if line.strip() == "commit"}


def hashes(root):
    """Rule 1: every commit hash in the manual, as FILE:LINE: why."""
    found = []
    for path in manual_files(root):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for name in HEX.findall(line):
                found.append((path.relative_to(root).as_posix(), number, name))
    real = commits(root, [name for _, _, name in found])
    return [
        f"{f}:{n}: {name}: a commit hash in the manual (dated runs go to {HISTORY})"
        for f, n, name in found
        if name in real
    ]


def tracker_numbers(root):
    """Rule 2: every "issue N", "finding N" or "stop N" in the code, as FILE:LINE: why."""
    problems = []
    for top in CODE_DIRS:
        for path in sorted((root / top).rglob("*")):
            name = path.relative_to(root).as_posix()
            if not path.is_file() or name in EXEMPT or "/target/" in f"/{name}":
                continue
            try:
                text = path.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                continue
            lines = text.splitlines()
            for number, line in enumerate(lines, 1):
                # A number broken onto the next comment line ("(issue" / "//! 22)")
                # counts too: the line is read with the next one's comment text.
                following = lines[number] if number < len(lines) else ""
                joined = line + " " + COMMENT_LEAD.sub("", following)
                for match in TRACKER.finditer(joined):
                    if match.start() >= len(line):
                        continue
                    problems.append(
                        f"{name}:{number}: {match.group(0)!r}: a tracker number; "
                        "say the reason, or link a decision in docs/decisions/"
                    )
    return problems


def kebab(camel):
    """clap's name for a variant: `SkipFinalBackup` -> `skip-final-backup`."""
    return re.sub(r"(?<!^)(?=[A-Z])", "-", camel).lower()


def subcommands(text):
    """The variants of `enum PluginCommand` in the plugin's source, in kebab case."""
    body = re.search(r"pub enum PluginCommand \{(.*?)\n\}", text, re.DOTALL)
    if body is None:
        return []
    return [kebab(v) for v in re.findall(r"^    ([A-Z][A-Za-z]*)\b", body.group(1), re.MULTILINE)]


def missing(commands, text):
    """The commands `text` does not name as a word."""
    return [c for c in commands if not re.search(rf"(?<![\w-]){re.escape(c)}(?![\w-])", text)]


def paragraphs(text):
    """The blank-line separated blocks of `text` (a table row and a list item are blocks of
    their own), as
    (first line's number, block)."""
    blocks, start, lines = [], None, []
    for number, line in enumerate(text.splitlines() + [""], 1):
        if re.match(r"\s*[-*] |\s*\d+\. ", line) and lines:  # a list item starts a block
            blocks.append((start, "\n".join(lines)))
            start, lines = None, []
        if line.strip() and not line.startswith("|"):
            start = start or number
            lines.append(line)
            continue
        if lines:
            blocks.append((start, "\n".join(lines)))
        start, lines = None, []
        if line.startswith("|"):
            blocks.append((number, line))
    return blocks


def plugin_help(root):
    """Rule 3: every place that lists the plugin's commands names each, as FILE:LINE: why."""
    source = root / PLUGIN
    if not source.is_file():
        return []
    text = source.read_text(encoding="utf-8")
    commands = subcommands(text)
    if not commands:
        return [f"{PLUGIN}:1: no `enum PluginCommand` variants found"]
    places = []
    # The module doc's table: its `//! | `command …` rows.
    rows = "\n".join(l for l in text.splitlines() if l.startswith("//! | `"))
    places.append((PLUGIN, 1, "the module doc's table", rows))
    main = root / MAIN
    if main.is_file():
        lines = main.read_text(encoding="utf-8").splitlines()
        for number, line in enumerate(lines, 1):
            if line.strip().startswith("Kubectl("):
                doc = []
                back = number - 2
                while back >= 0 and lines[back].strip().startswith("///"):
                    doc.insert(0, lines[back])
                    back -= 1
                places.append((MAIN, back + 2, "the Kubectl command's help", "\n".join(doc)))
    doc = root / PLUGIN_DOC
    if doc.is_file():
        rows = "\n".join(l for l in doc.read_text(encoding="utf-8").splitlines() if l.startswith("| `"))
        places.append((PLUGIN_DOC, 1, "the commands' table", rows))
    for name in LISTS:
        path = root / name
        if not path.is_file():
            continue
        for number, block in paragraphs(path.read_text(encoding="utf-8")):
            if all(f"`{c}`" in block for c in ("status", "history", "switchover")):
                places.append((name, number, "the list of the plugin's commands", block))
    return [
        f"{name}:{number}: {what} omits {', '.join(gone)}"
        for name, number, what, text in places
        if (gone := missing(commands, text))
    ]


def rbac_rules(text):
    """The rules of every Role and ClusterRole in a manifest, as sorted
    (resources, resource names, verbs) tuples of tuples."""
    rules = []
    for document in re.split(r"^---\s*$", text, flags=re.MULTILINE):
        if not re.search(r"^kind:\s*(Cluster)?Role\s*$", document, re.MULTILINE):
            continue
        rule = None
        for line in document.splitlines():
            if re.match(r"^\s*- apiGroups:", line):
                rule = {"resources": (), "resourceNames": (), "verbs": ()}
                rules.append(rule)
            match = FLOW.match(line)
            if match and rule is not None:
                rule[match.group(1)] = tuple(
                    sorted(v.strip().strip('"') for v in match.group(2).split(",") if v.strip())
                )
    return sorted((r["resources"], r["resourceNames"], r["verbs"]) for r in rules)


def rbac_rows(text):
    """The rows of the RBAC table in the operating page, as (line, (resources, names,
    verbs))."""
    rows, inside = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("| resources | verbs |"):
            inside = True
            continue
        if inside and not line.startswith("|"):
            break
        if not inside or line.startswith("| ---"):
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        what, _, names = cells[0].partition(" named ")
        what = what.split(" in `")[0]  # `leases` in `lockstep-system`: a namespace, no resource
        resources = tuple(sorted(re.findall(r"`([^`]+)`", what)))
        named = tuple(sorted(re.findall(r"`([^`]+)`", names)))
        verbs = tuple(sorted(v.strip() for v in cells[1].split(",")))
        rows.append((number, (resources, named, verbs)))
    return rows


def describe(rule):
    """A rule as a person reads it: `leases named lockstep-leader (get, patch)`."""
    resources, names, verbs = rule
    named = f" named {', '.join(names)}" if names else ""
    return f"{', '.join(resources)}{named} ({', '.join(verbs)})"


def rbac_table(root):
    """Rule 4: the RBAC table and the manifest's rules agree, as FILE:LINE: why."""
    manifest, doc = root / RBAC, root / RBAC_DOC
    if not manifest.is_file() or not doc.is_file():
        return []
    rules = rbac_rules(manifest.read_text(encoding="utf-8"))
    rows = rbac_rows(doc.read_text(encoding="utf-8"))
    if not rows:
        return [f"{RBAC_DOC}:1: no RBAC table (a header `| resources | verbs | why |`)"]
    problems, left = [], list(rules)
    for number, row in rows:
        if row in left:
            left.remove(row)
        else:
            problems.append(f"{RBAC_DOC}:{number}: {describe(row)}: no such rule in {RBAC}")
    problems += [f"{RBAC}:1: {describe(rule)}: not in the table of {RBAC_DOC}" for rule in left]
    return problems


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=Path(__file__).resolve().parent.parent, type=Path)
    args = parser.parse_args(argv)
    root = args.root.resolve()
    problems = hashes(root) + tracker_numbers(root) + plugin_help(root) + rbac_table(root)
    for problem in problems:
        print(problem)
    if problems:
        print(f"{len(problems)} problem(s)", file=sys.stderr)
        return 1
    print(
        "no commit hash in the manual, no tracker number in the code, "
        "the plugin's help whole, the RBAC table the manifest's"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
