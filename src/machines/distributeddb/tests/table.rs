//! The table, the schema, the CRD.

use super::*;

#[test]
fn every_edge_reason_is_a_camel_case_constant() {
    for e in TABLE {
        assert!(
            e.reason.chars().next().is_some_and(char::is_uppercase) && !e.reason.contains(' '),
            "{}",
            e.reason
        );
    }
}

#[test]
fn every_state_round_trips_and_fits_the_schema() {
    let states = [
        DdbState::Creating,
        ready("db:1"),
        DdbState::Scaling {
            version: "v".to_owned(),
            from_replicas: 1,
            replicas: 2,
        },
        upgrading("db:2", 1, UpgradeStep::Restart, "u"),
        DdbState::BackingUp {
            version: "v".to_owned(),
            replicas: 3,
            request: "t".to_owned(),
        },
        DdbState::Finalizing { attempt: 2 },
        DdbState::Finalized,
    ];
    let schema = serde_json::to_value(schemars::schema_for!(DdbState)).unwrap_or_default();
    let properties = schema["properties"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    for state in states {
        let json = serde_json::to_value(&state).unwrap_or_default();
        let back: DdbState = serde_json::from_value(json.clone()).unwrap_or(DdbState::Finalized);
        assert_eq!(back, state);
        for key in json
            .as_object()
            .map(|o| o.keys().cloned().collect::<Vec<_>>())
            .unwrap_or_default()
        {
            assert!(
                properties.contains_key(&key),
                "{key} of {json} is not in the schema"
            );
        }
    }
}

#[test]
fn the_crd_validates_fields_by_name() {
    let crd = serde_json::to_string(&DistributedDB::crd()).unwrap_or_default();
    for needle in [
        "storage.size cannot shrink",
        "storage.storageClassName is immutable",
        "backupPolicy.schedule must be a cron expression",
        "\"minimum\":1",
        "isQuantity(self)",
        "\"shortNames\":[\"ddb\"]",
    ] {
        assert!(crd.contains(needle), "the CRD lacks {needle}");
    }
}

#[test]
fn the_cron_pattern_accepts_schedules_and_rejects_nonsense() {
    let re = regex_lite(crate::machines::common::cron::CRON_PATTERN);
    for good in [
        "0 3 * * *",
        "*/15 * * * *",
        "0 0 1,15 * MON-FRI",
        "@daily",
        "5 4 * * sun",
    ] {
        assert!(re(good), "{good}");
    }
    for bad in [
        "every day",
        "61 * * * *",
        "* * * *",
        "0 24 * * *",
        "@often",
        "",
    ] {
        assert!(!re(bad), "{bad}");
    }
}

/// A tiny backtracking matcher for the subset of RE2 the cron pattern uses, so the test
/// needs no regex crate: literals, `.`-free classes, groups, `|`, `?`, `*`, `+`, `{n}`.
fn regex_lite(pattern: &str) -> impl Fn(&str) -> bool + '_ {
    move |text: &str| {
        let p: Vec<char> = pattern.chars().collect();
        let t: Vec<char> = text.chars().collect();
        lite::matches_all(&p, &t)
    }
}

mod lite {
    //! Just enough of a regular-expression engine for `CRON_PATTERN`.

    #[derive(Debug, Clone)]
    enum Node {
        Char(char),
        Class(Vec<(char, char)>),
        Group(Vec<Vec<Node>>),
        Start,
        End,
        Repeat(Box<Node>, usize, Option<usize>),
    }

    fn parse_alt(p: &[char], i: &mut usize) -> Vec<Vec<Node>> {
        let mut alts = vec![Vec::new()];
        while *i < p.len() && p[*i] != ')' {
            let c = p[*i];
            *i += 1;
            let node = match c {
                '|' => {
                    alts.push(Vec::new());
                    continue;
                }
                '(' => {
                    let inner = parse_alt(p, i);
                    *i += 1;
                    Node::Group(inner)
                }
                '[' => {
                    let mut ranges = Vec::new();
                    while p[*i] != ']' {
                        let lo = p[*i];
                        if p[*i + 1] == '-' && p[*i + 2] != ']' {
                            ranges.push((lo, p[*i + 2]));
                            *i += 3;
                        } else {
                            ranges.push((lo, lo));
                            *i += 1;
                        }
                    }
                    *i += 1;
                    Node::Class(ranges)
                }
                '^' => Node::Start,
                '$' => Node::End,
                c => Node::Char(c),
            };
            let node = match p.get(*i) {
                Some('?') => {
                    *i += 1;
                    Node::Repeat(Box::new(node), 0, Some(1))
                }
                Some('*') => {
                    *i += 1;
                    Node::Repeat(Box::new(node), 0, None)
                }
                Some('+') => {
                    *i += 1;
                    Node::Repeat(Box::new(node), 1, None)
                }
                Some('{') => {
                    let close = p[*i..].iter().position(|c| *c == '}').unwrap_or(0) + *i;
                    let n: usize = p[*i + 1..close]
                        .iter()
                        .collect::<String>()
                        .parse()
                        .unwrap_or(0);
                    *i = close + 1;
                    Node::Repeat(Box::new(node), n, Some(n))
                }
                _ => node,
            };
            if let Some(last) = alts.last_mut() {
                last.push(node);
            }
        }
        alts
    }

    /// Every position the sequence `nodes` can end at, starting at `at`.
    fn ends(nodes: &[Node], t: &[char], at: usize) -> Vec<usize> {
        let Some((first, rest)) = nodes.split_first() else {
            return vec![at];
        };
        let mut out = Vec::new();
        for mid in node_ends(first, t, at) {
            out.extend(ends(rest, t, mid));
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    fn node_ends(node: &Node, t: &[char], at: usize) -> Vec<usize> {
        match node {
            Node::Char(c) => (t.get(at) == Some(c))
                .then_some(at + 1)
                .into_iter()
                .collect(),
            Node::Class(r) => t
                .get(at)
                .filter(|c| r.iter().any(|(lo, hi)| lo <= *c && *c <= hi))
                .map(|_| at + 1)
                .into_iter()
                .collect(),
            Node::Start => (at == 0).then_some(at).into_iter().collect(),
            Node::End => (at == t.len()).then_some(at).into_iter().collect(),
            Node::Group(alts) => {
                let mut out: Vec<usize> = alts.iter().flat_map(|a| ends(a, t, at)).collect();
                out.sort_unstable();
                out.dedup();
                out
            }
            Node::Repeat(inner, min, max) => {
                let mut frontier = vec![at];
                let mut out = Vec::new();
                let mut count = 0;
                loop {
                    if count >= *min {
                        out.extend(frontier.iter().copied());
                    }
                    if max.is_some_and(|m| count >= m) || frontier.is_empty() {
                        break;
                    }
                    let mut next: Vec<usize> = frontier
                        .iter()
                        .flat_map(|f| node_ends(inner, t, *f))
                        .filter(|e| !out.contains(e) || count < *min)
                        .collect();
                    next.sort_unstable();
                    next.dedup();
                    if next == frontier {
                        break;
                    }
                    frontier = next;
                    count += 1;
                }
                out.sort_unstable();
                out.dedup();
                out
            }
        }
    }

    pub(super) fn matches_all(p: &[char], t: &[char]) -> bool {
        let mut i = 0;
        let alts = parse_alt(p, &mut i);
        let root = Node::Group(alts);
        node_ends(&root, t, 0).contains(&t.len())
    }
}

#[test]
fn every_edge_is_taken_in_the_file_the_table_names() {
    let checked = crate::machines::common::table_sources::where_taken::<DistributedDb>(
        "src/machines/distributeddb/decide",
    );
    assert_eq!(checked, Ok(()));
}
