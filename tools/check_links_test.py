#!/usr/bin/env python3
"""Tests of tools/check_links.py: it catches a broken link and a broken anchor, and
accepts what GitHub resolves.

    python3 tools/check_links_test.py
"""

import contextlib
import io
import sys
import tempfile
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import check_links  # noqa: E402  (found through the path above)


class Repo:
    """A throwaway repository: files written from a dict of path -> text."""

    def __init__(self, files):
        self.dir = tempfile.TemporaryDirectory()
        self.root = Path(self.dir.name)
        for name, text in files.items():
            path = self.root / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")

    def broken(self):
        checker = check_links.Checker(self.root)
        return [b for f in check_links.default_files(self.root) for b in checker.check(f)]

    def close(self):
        self.dir.cleanup()


class CheckLinks(unittest.TestCase):
    def check(self, files):
        repo = Repo(files)
        self.addCleanup(repo.close)
        return repo.broken()

    def test_a_link_to_a_missing_file_is_caught(self):
        broken = self.check({"README.md": "# Title\n\nSee [the engine](docs/engine.md).\n"})
        self.assertEqual(len(broken), 1, broken)
        self.assertIn("README.md:3: docs/engine.md: no such file", broken[0])

    def test_an_anchor_with_no_heading_is_caught(self):
        broken = self.check(
            {
                "README.md": "See [fencing](docs/pg.md#fencing-at-most-one-server).\n",
                "docs/pg.md": "# PostgresCluster\n\n## Fencing: at most one writable server\n",
            }
        )
        self.assertEqual(len(broken), 1, broken)
        self.assertIn("#fencing-at-most-one-server: no such heading in docs/pg.md", broken[0])

    def test_an_anchor_within_the_same_file_is_checked(self):
        broken = self.check({"docs/a.md": "# A\n\n[up](#a) [down](#b)\n"})
        self.assertEqual(broken, ["docs/a.md:3: #b: no such heading in docs/a.md"])

    def test_links_and_anchors_that_resolve_pass(self):
        broken = self.check(
            {
                "README.md": "\n".join(
                    [
                        "# Lockstep",
                        "[manual](docs/README.md), [tree](src/), [code](src/lib.rs#L3-L5),",
                        "[site](https://example.com/x#y), [mail](mailto:a@b.c),",
                        "[ref]: docs/README.md#the-engines-contract",
                    ]
                ),
                "docs/README.md": "\n".join(
                    [
                        "# The engine's contract",
                        "## Fencing: at most one writable server",
                        "### Make targets (`cluster.mk`)",
                        "## tools/cluster — a control plane",
                        "## Repeated",
                        "## Repeated",
                        '<a name="custom"></a>',
                        "[a](#fencing-at-most-one-writable-server) [b](#make-targets-clustermk)",
                        "[c](#toolscluster--a-control-plane) [d](#repeated-1) [e](#custom)",
                        "[f](../machines/x.md#the-x-machine)",
                    ]
                ),
                "machines/x.md": "<!-- generated -->\n# The `x` machine\n\n[src](../src/lib.rs)\n",
                "src/lib.rs": "//! a\n",
            }
        )
        self.assertEqual(broken, [])

    def test_links_in_code_are_not_links(self):
        text = "# A\n\n```md\n[x](missing.md)\n# not a heading\n```\n\n`[y](missing.md)`\n[z](#not-a-heading)\n"
        broken = self.check({"README.md": text})
        self.assertEqual(broken, ["README.md:9: #not-a-heading: no such heading in README.md"])

    def test_a_link_out_of_the_repository_or_into_a_source_line_range_is_checked(self):
        broken = self.check(
            {
                "README.md": "[out](../elsewhere.md) [code](src/lib.rs#main)\n",
                "src/lib.rs": "fn main() {}\n",
            }
        )
        self.assertEqual(len(broken), 2, broken)
        self.assertIn("points outside the repository", broken[0])
        self.assertIn("only line anchors", broken[1])

    def test_the_command_fails_on_a_broken_link(self):
        repo = Repo({"README.md": "[gone](docs/gone.md)\n"})
        self.addCleanup(repo.close)
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            self.assertEqual(check_links.main(["--root", str(repo.root)]), 1)
        self.assertIn("README.md:1: docs/gone.md: no such file", out.getvalue())


if __name__ == "__main__":
    unittest.main()
