#!/usr/bin/env python3
"""Check that every relative link and every #anchor in the manual resolves.

    tools/check_links.py [--root DIR] [FILE.md ...]

Without files it checks README.md, docs/**/*.md, machines/*.md and the READMEs under
tools/ and src/, under the root (the repository by default). A link resolves when its
path (relative to the file, never outside the root) exists and, if it has an #anchor
into a Markdown file, that file has a heading whose GitHub slug is the anchor (or an
explicit `<a name=…>`/`id=…`). Anchors
into other files may only be GitHub's line anchors (#L12, #L12-L20). External links
(http:, https:, mailto:, …) are not fetched. Links inside code (fenced blocks and
`code spans`) are not links.

GitHub's slug rules: the heading's text (inline code and links reduced to their text)
in lower case, with every character that is not a letter, a digit, a space, `-` or `_`
removed, and each space turned into `-`; the second heading with the same slug gets
`-1`, the third `-2`, and so on.

Exit status: 0 when everything resolves, 1 when something does not (each broken link is
printed as FILE:LINE: TARGET: why), 2 on bad usage.
"""

import argparse
import os
import re
import sys
import unicodedata
from pathlib import Path

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)[ \t]*#*[ \t]*$")
SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
# [text](target) and ![alt](target), with an optional "title"; the text may hold one
# level of brackets ([`x`][y] is not an inline link).
INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$")
HTML_ANCHOR = re.compile(r"<a\s[^>]*?(?:name|id)=\"([^\"]+)\"", re.IGNORECASE)
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")
LINE_ANCHOR = re.compile(r"^L\d+(-L\d+)?$")


def slug(text):
    """GitHub's anchor for a heading whose Markdown text is `text`."""
    text = CODE_SPAN.sub(lambda m: m.group(2), text)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # links: their text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.strip().lower()
    kept = []
    for ch in text:
        category = unicodedata.category(ch)
        if ch in " -_" or category[0] in "LN" or category == "Mn":
            kept.append("-" if ch == " " else ch)
    return "".join(kept)


def prose_lines(text):
    """The lines of a Markdown text outside fenced code blocks, as (number, line)."""
    fence = None
    for number, line in enumerate(text.splitlines(), 1):
        match = FENCE.match(line)
        if fence is None and match:
            fence = match.group(1)
            continue
        if fence is not None:
            if match and match.group(1)[0] == fence[0] and len(match.group(1)) >= len(fence):
                fence = None
            continue
        yield number, line


def anchors(text):
    """Every anchor a Markdown text defines: its headings' slugs and its HTML anchors."""
    found, seen = set(), {}
    previous = ""
    for _, line in prose_lines(text):
        heading = HEADING.match(line)
        title = heading.group(2) if heading else None
        if title is None and SETEXT.match(line) and previous.strip() and not HEADING.match(previous):
            title = previous.strip()
        if title is not None:
            base = slug(title)
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
        found.update(HTML_ANCHOR.findall(line))
        previous = line
    return found


def links(text):
    """Every link target of a Markdown text outside code, as (line number, target)."""
    for number, line in prose_lines(text):
        line = CODE_SPAN.sub("", line)
        reference = REFERENCE.match(line)
        if reference:
            yield number, reference.group(1)
            continue
        for match in INLINE.finditer(line):
            yield number, match.group(1)


class Checker:
    """Resolves links against the files under `root`, reading each Markdown file once."""

    def __init__(self, root):
        self.root = Path(root).resolve()
        self.cache = {}
        self.checked = 0
        self.anchored = 0

    def anchors_of(self, path):
        if path not in self.cache:
            self.cache[path] = anchors(path.read_text(encoding="utf-8"))
        return self.cache[path]

    def problem(self, source, target):
        """Why `target`, linked from the file `source`, does not resolve (None if it does)."""
        if not target or SCHEME.match(target) or target.startswith("//"):
            return None
        path, _, anchor = target.partition("#")
        path = path.split("?", 1)[0]
        if path.startswith("/"):
            return "absolute paths do not resolve on GitHub and locally alike; use a relative link"
        resolved = (source.parent / path).resolve() if path else source
        if resolved != self.root and self.root not in resolved.parents:
            return "points outside the repository"
        if not resolved.exists():
            return f"no such file or directory: {os.path.relpath(resolved, self.root)}"
        if not anchor:
            return None
        self.anchored += 1
        if resolved.is_dir():
            return "an anchor into a directory"
        if resolved.suffix.lower() != ".md":
            if LINE_ANCHOR.match(anchor):
                return None
            return f"only line anchors (#L12) resolve in {resolved.name}"
        if anchor not in self.anchors_of(resolved):
            return f"no such heading in {os.path.relpath(resolved, self.root)}"
        return None

    def check(self, path):
        """The broken links of the Markdown file `path`, as printable lines."""
        path = Path(path).resolve()
        broken = []
        for number, target in links(path.read_text(encoding="utf-8")):
            self.checked += 1
            why = self.problem(path, target)
            if why:
                broken.append(f"{os.path.relpath(path, self.root)}:{number}: {target}: {why}")
        return broken


def default_files(root):
    """README.md, docs/**/*.md, machines/*.md, tools/*/README.md and src/**/README.md
    under `root`."""
    root = Path(root)
    files = [root / "README.md"]
    files += sorted((root / "docs").rglob("*.md"))
    files += sorted((root / "machines").glob("*.md"))
    files += sorted((root / "tools").glob("*/README.md"))
    files += sorted((root / "src").rglob("README.md"))
    return [f for f in files if f.is_file()]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=Path(__file__).resolve().parent.parent)
    parser.add_argument("files", nargs="*")
    args = parser.parse_args(argv)
    checker = Checker(args.root)
    files = [Path(f) for f in args.files] or default_files(args.root)
    if not files:
        print("no Markdown files to check", file=sys.stderr)
        return 2
    broken = []
    for f in files:
        broken += checker.check(f)
    for line in broken:
        print(line)
    print(
        f"{len(files)} files, {checker.checked} links ({checker.anchored} with an anchor): "
        + (f"{len(broken)} broken" if broken else "all resolve"),
        file=sys.stderr if broken else sys.stdout,
    )
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
