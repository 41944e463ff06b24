#!/usr/bin/env python3
"""Tests of tools/check_refs.py: it catches a commit hash in the manual, a tracker number
in the code, a plugin command its help leaves out and an RBAC table that is not the
manifest's, and lets the rest pass.

    python3 tools/check_refs_test.py
"""

import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import check_refs  # noqa: E402  (found through the path above)

PLUGIN = """pub enum PluginCommand {
    /// Show it.
    Status {
        name: String,
    },
    History {
        name: String,
    },
    Switchover {
        name: String,
    },
    SkipFinalBackup {
        name: String,
    },
}
"""


class Repo:
    """A throwaway git repository with one commit; `files` are written after it."""

    def __init__(self, files):
        self.dir = tempfile.TemporaryDirectory()
        self.root = Path(self.dir.name)
        git = ["git", "-C", str(self.root), "-c", "user.name=t", "-c", "user.email=t@t"]
        subprocess.run(git[:3] + ["init", "-q"], check=True)
        (self.root / "seed").write_text("seed\n")
        subprocess.run(git + ["add", "seed"], check=True)
        subprocess.run(git + ["commit", "-qm", "seed"], check=True)
        self.commit = subprocess.run(
            git[:3] + ["rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        for name, text in files.items():
            path = self.root / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text.replace("COMMIT", self.commit[:7]), encoding="utf-8")

    def close(self):
        self.dir.cleanup()


class CheckRefs(unittest.TestCase):
    def repo(self, files):
        repo = Repo(files)
        self.addCleanup(repo.close)
        return repo.root

    def test_a_commit_hash_in_the_manual_is_caught(self):
        root = self.repo({"docs/a.md": "# A\n\nMeasured at COMMIT.\n"})
        problems = check_refs.hashes(root)
        self.assertEqual(len(problems), 1, problems)
        self.assertTrue(problems[0].startswith("docs/a.md:3: "), problems)

    def test_a_commit_hash_in_the_history_passes(self):
        root = self.repo({"docs/history.md": "# History\n\nAt COMMIT: 44 min.\n"})
        self.assertEqual(check_refs.hashes(root), [])

    def test_hex_strings_that_are_no_commit_pass(self):
        text = "# A\n\nLSN 0/3000148, Job orders-backup-c6647a99, uid 1a2b3c4d5e6f7a8b.\n"
        root = self.repo({"README.md": text, "docs/a.md": text})
        self.assertEqual(check_refs.hashes(root), [])

    def test_a_tracker_number_in_the_code_is_caught(self):
        root = self.repo(
            {
                "src/a.rs": "// fixed (issue" + " 21)\nfn a() {}\n",  # split: the repo holds no such text
                "tests/b.py": "# Finding" + " 4 of the review\n",
                "tools/c.sh": "# the pre-issue" + "-27 setup\n",
            }
        )
        problems = check_refs.tracker_numbers(root)
        self.assertEqual(len(problems), 3, problems)
        self.assertTrue(problems[0].startswith("src/a.rs:1: "), problems)

    def test_a_tracker_number_broken_onto_the_next_comment_line_is_caught_once(self):
        root = self.repo(
            {
                "src/a.rs": "//! never lost (issue\n//! " + "22), on the real plane\n",
                "tests/b.py": "# see finding\n# " + "4 of the review\n",
            }
        )
        problems = check_refs.tracker_numbers(root)
        self.assertEqual(len(problems), 2, problems)
        self.assertTrue(problems[0].startswith("src/a.rs:1: "), problems)

    def test_words_without_a_number_pass(self):
        root = self.repo({"src/a.rs": "// a known issue; the finding; stop the server\n"})
        self.assertEqual(check_refs.tracker_numbers(root), [])

    def test_a_command_the_help_omits_is_caught(self):
        main = "enum C {\n    /// The plugin: status, history, switchover.\n    Kubectl(KubectlArgs),\n}\n"
        root = self.repo(
            {
                "src/ops/plugin/mod.rs": "//! | `status` | s |\n" + PLUGIN,
                "src/main.rs": main,
                "docs/README.md": "The plugin: `status`, `history`, `switchover`,\n"
                "`skip-final-backup`.\n",
            }
        )
        problems = check_refs.plugin_help(root)
        self.assertIn("src/main.rs:2: the Kubectl command's help omits skip-final-backup", problems)
        self.assertIn(
            "src/ops/plugin/mod.rs:1: the module doc's table omits history, switchover, "
            "skip-final-backup",
            problems,
        )
        self.assertEqual(len(problems), 2, problems)

    def test_variants_are_named_as_clap_names_them(self):
        self.assertEqual(
            check_refs.subcommands(PLUGIN), ["status", "history", "switchover", "skip-final-backup"]
        )

    def test_the_rbac_table_agrees_with_the_manifest_rule_for_rule(self):
        root = self.repo({"examples/deploy/rbac.yaml": RBAC, "docs/operating.md": TABLE})
        self.assertEqual(check_refs.rbac_table(root), [])

    def test_a_verb_the_table_leaves_out_and_a_rule_it_invents_are_caught(self):
        table = TABLE.replace("| list, watch, patch, delete |", "| list, watch, patch |")
        table += "| `secrets` | get | never granted |\n"
        root = self.repo({"examples/deploy/rbac.yaml": RBAC, "docs/operating.md": table})
        problems = check_refs.rbac_table(root)
        self.assertIn(
            "docs/operating.md:5: pods (list, patch, watch): no such rule in examples/deploy/rbac.yaml",
            problems,
        )
        self.assertIn(
            "docs/operating.md:8: secrets (get): no such rule in examples/deploy/rbac.yaml", problems
        )
        self.assertIn(
            "examples/deploy/rbac.yaml:1: pods (delete, list, patch, watch): not in the table "
            "of docs/operating.md",
            problems,
        )
        self.assertEqual(len(problems), 3, problems)


RBAC = """kind: ServiceAccount
---
kind: ClusterRole
rules:
  - apiGroups: [""]
    resources: ["pods"]
    verbs: ["list", "watch", "patch", "delete"]
  - apiGroups: ["lockstep.dev"]
    resources: ["distributeddbs/status", "postgresclusters/status"]
    verbs: ["patch"]
---
kind: Role
rules:
  - apiGroups: ["coordination.k8s.io"]
    resources: ["leases"]
    resourceNames: ["lockstep-leader"]
    verbs: ["get", "patch"]
"""

TABLE = """## RBAC

| resources | verbs | why |
| --- | --- | --- |
| `pods` | list, watch, patch, delete | upgrades |
| `distributeddbs/status`, `postgresclusters/status` | patch | status |
| `leases` named `lockstep-leader` | get, patch | leader election |
"""


if __name__ == "__main__":
    unittest.main()
