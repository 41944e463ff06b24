#!/usr/bin/env python3
"""Fail unless two manifests grant the same permissions.

    tools/helm/same_rbac.py [--as-roles] EXPECTED.yaml ACTUAL.yaml

Compares the ClusterRoles' rules and the Roles' rules of the two files as sets of
(apiGroup, resource, verb, resourceName) grants, whatever their order or grouping:
the chart's RBAC must be exactly examples/deploy/rbac.yaml's, which the e2e tests prove
sufficient (tests/e2e/operability.rs). With --as-roles, EXPECTED's ClusterRole rules are
expected in ACTUAL's Roles instead (the chart watching a list of namespaces), and ACTUAL
must have no ClusterRole. Both files write each rule's lists in flow style
(`verbs: ["get", "patch"]`), which is all this reads; no YAML library needed.
"""

import re
import sys

FIELD = re.compile(r"^\s*-?\s*(apiGroups|resources|verbs|resourceNames):\s*\[(.*)\]\s*$")


def grants(path):
    """{kind: set of grants} for the ClusterRole and Role documents of `path`."""
    out = {"ClusterRole": set(), "Role": set()}
    for doc in re.split(r"^---\s*$", open(path, encoding="utf-8").read(), flags=re.M):
        kind = re.search(r"^kind:\s*(\S+)\s*$", doc, flags=re.M)
        if not kind or kind.group(1) not in out:
            continue
        rules, rule = [], None
        for line in doc.splitlines():
            m = FIELD.match(line)
            if not m:
                continue
            if line.lstrip().startswith("-"):
                rule = {}
                rules.append(rule)
            items = [i.strip().strip('"') for i in m.group(2).split(",") if i.strip()]
            rule[m.group(1)] = items
        for r in rules:
            for g in r.get("apiGroups", []):
                for res in r.get("resources", []):
                    for v in r.get("verbs", []):
                        for name in r.get("resourceNames", ["*"]):
                            out[kind.group(1)].add((g, res, v, name))
    return out


def main():
    args = sys.argv[1:]
    as_roles = args[0] == "--as-roles"
    if as_roles:
        args = args[1:]
    expected, actual = grants(args[0]), grants(args[1])
    if as_roles:
        expected = {"ClusterRole": set(), "Role": expected["ClusterRole"] | expected["Role"]}
    ok = True
    for kind in ("ClusterRole", "Role"):
        if not expected[kind] and not (as_roles and kind == "ClusterRole"):
            print(f"{args[0]}: no {kind} rules found", file=sys.stderr)
            ok = False
        for g in sorted(expected[kind] - actual[kind]):
            print(f"{args[1]}: {kind} lacks {g}", file=sys.stderr)
            ok = False
        for g in sorted(actual[kind] - expected[kind]):
            print(f"{args[1]}: {kind} grants more: {g}", file=sys.stderr)
            ok = False
    if ok:
        n = sum(len(v) for v in expected.values())
        print(f"rbac: {args[1]} grants exactly {args[0]}'s {n} permissions")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
