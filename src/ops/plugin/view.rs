//! What `kubectl lockstep status` and `history` print, read from an object as JSON: any
//! kind whose status embeds the engine's (`phase`, `step`, `conditions`,
//! `machine.history`), with PostgresCluster's roles and DistributedDB's counts when
//! present. Pure: the caller fetches, this formats.

use serde::Serialize;
use serde_json::Value;

/// One condition as `status.conditions` holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ConditionView {
    /// Its type.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// Its reason.
    pub reason: String,
    /// Its message.
    pub message: String,
}

/// One transition of `status.machine.history`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TransitionView {
    /// When (RFC 3339).
    pub at: String,
    /// The state left (empty for the first).
    pub from: String,
    /// The state entered.
    pub to: String,
    /// The edge's declared reason.
    pub reason: String,
    /// What the machine said.
    pub message: String,
}

/// One instance (pod) of the object, as the pods say.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InstanceView {
    /// The pod.
    pub pod: String,
    /// Its `lockstep.dev/role` label, if any.
    pub role: Option<String>,
    /// Whether it is Ready.
    pub ready: bool,
    /// Container restarts.
    pub restarts: i64,
    /// Its node.
    pub node: Option<String>,
    /// What its instance manager reports on `/metrics` (PostgresCluster; none when it
    /// could not be read).
    pub server: Option<ServerView>,
}

/// A PostgreSQL instance as its manager's `/metrics` reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerView {
    /// The timeline it is on.
    pub timeline: Option<u64>,
    /// Its WAL position (written, or received by a standby), as PostgreSQL prints an
    /// LSN.
    pub lsn: Option<String>,
    /// A standby's replay lag behind what it received, in bytes.
    pub lag_bytes: Option<u64>,
    /// Whether a standby's WAL receiver streams.
    pub streaming: Option<bool>,
    /// A primary's archive: WAL files archived and failed attempts since its manager
    /// started (`spec.backup.walArchive`; both 0 without it).
    pub archive: Option<ArchiveView>,
}

/// A primary's WAL archiving, as its manager's `/metrics` counts it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ArchiveView {
    /// WAL files archived.
    pub archived: u64,
    /// Failed archiving attempts.
    pub failed: u64,
    /// When a WAL file was last archived (RFC 3339), if one was since the server
    /// started.
    pub last: Option<String>,
}

/// The unlabelled series `name` of a Prometheus text exposition.
fn series(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| {
            let (n, v) = l.split_once(' ')?;
            (n == name).then(|| v.trim().parse::<f64>().ok())?
        })
        .and_then(|v| (v >= 0.0 && v.is_finite()).then_some(v as u64))
}

/// An instance manager's `/metrics` text as a [`ServerView`].
pub fn server(metrics: &str) -> ServerView {
    let writable = series(metrics, "lockstep_instance_writable") == Some(1);
    ServerView {
        timeline: series(metrics, "lockstep_instance_timeline"),
        lsn: series(metrics, "lockstep_instance_wal_position_bytes")
            .map(|b| format!("{:X}/{:X}", b >> 32, b & 0xFFFF_FFFF)),
        lag_bytes: series(metrics, "lockstep_instance_replay_lag_bytes").filter(|_| !writable),
        streaming: series(metrics, "lockstep_instance_streaming")
            .filter(|_| !writable)
            .map(|v| v == 1),
        archive: writable
            .then(|| {
                Some(ArchiveView {
                    archived: series(metrics, "lockstep_instance_wal_archived_total")?,
                    failed: series(metrics, "lockstep_instance_wal_archive_failures_total")?,
                    last: series(metrics, "lockstep_instance_last_archived_timestamp_seconds")
                        .filter(|t| *t > 0)
                        .and_then(|t| i64::try_from(t).ok())
                        .and_then(|t| chrono::DateTime::from_timestamp(t, 0))
                        .map(|t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string()),
                })
            })
            .flatten(),
    }
}

/// Everything `status` shows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusView {
    /// `Kind namespace/name`.
    pub object: String,
    /// `status.phase`.
    pub phase: Option<String>,
    /// `status.step`.
    pub step: Option<String>,
    /// PostgresCluster's `status.primaryPod`.
    pub primary: Option<String>,
    /// `status.lastBackup`, as `outcome (job, time)`.
    pub last_backup: Option<String>,
    /// The conditions.
    pub conditions: Vec<ConditionView>,
    /// The last transitions, oldest first.
    pub transitions: Vec<TransitionView>,
    /// The instances.
    pub instances: Vec<InstanceView>,
}

fn text(v: &Value, path: &[&str]) -> Option<String> {
    let mut v = v;
    for key in path {
        v = v.get(key)?;
    }
    v.as_str().map(str::to_owned)
}

/// The transitions `object`'s status records, oldest first.
pub fn transitions(object: &Value) -> Vec<TransitionView> {
    object
        .pointer("/status/machine/history")
        .and_then(Value::as_array)
        .map(|entries| {
            entries
                .iter()
                .map(|h| TransitionView {
                    at: text(h, &["at"]).unwrap_or_default(),
                    from: text(h, &["from"]).unwrap_or_default(),
                    to: text(h, &["to"]).unwrap_or_default(),
                    reason: text(h, &["reason"]).unwrap_or_default(),
                    message: text(h, &["message"]).unwrap_or_default(),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The conditions of `object`'s status.
pub fn conditions(object: &Value) -> Vec<ConditionView> {
    object
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .map(|cs| {
            cs.iter()
                .map(|c| ConditionView {
                    type_: text(c, &["type"]).unwrap_or_default(),
                    status: text(c, &["status"]).unwrap_or_default(),
                    reason: text(c, &["reason"]).unwrap_or_default(),
                    message: text(c, &["message"]).unwrap_or_default(),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// A pod as an [`InstanceView`].
pub fn instance(pod: &Value) -> InstanceView {
    let ready = pod
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                text(c, &["type"]).as_deref() == Some("Ready")
                    && text(c, &["status"]).as_deref() == Some("True")
            })
        });
    let restarts = pod
        .pointer("/status/containerStatuses")
        .and_then(Value::as_array)
        .map_or(0, |cs| {
            cs.iter()
                .filter_map(|c| c.get("restartCount").and_then(Value::as_i64))
                .sum()
        });
    InstanceView {
        pod: text(pod, &["metadata", "name"]).unwrap_or_default(),
        role: pod
            .pointer("/metadata/labels/lockstep.dev~1role")
            .and_then(Value::as_str)
            .map(str::to_owned),
        ready,
        restarts,
        node: text(pod, &["spec", "nodeName"]),
        server: None,
    }
}

/// The view of `object` (of `kind`) and its `pods`, with its last `last` transitions.
pub fn status(kind: &str, object: &Value, pods: &[Value], last: usize) -> StatusView {
    let all = transitions(object);
    let skip = all.len().saturating_sub(last);
    let mut instances: Vec<InstanceView> = pods.iter().map(instance).collect();
    instances.sort_by(|a, b| a.pod.cmp(&b.pod));
    StatusView {
        object: format!(
            "{kind} {}/{}",
            text(object, &["metadata", "namespace"]).unwrap_or_default(),
            text(object, &["metadata", "name"]).unwrap_or_default()
        ),
        phase: text(object, &["status", "phase"]),
        step: text(object, &["status", "step"]),
        primary: text(object, &["status", "primaryPod"]),
        last_backup: object.pointer("/status/lastBackup").map(|b| {
            format!(
                "{} ({}, {})",
                text(b, &["outcome"]).unwrap_or_default(),
                text(b, &["job"]).unwrap_or_default(),
                text(b, &["time"]).unwrap_or_default()
            )
        }),
        conditions: conditions(object),
        transitions: all.into_iter().skip(skip).collect(),
        instances,
    }
}

/// `view` as the plain text `status` prints.
pub fn render_status(view: &StatusView) -> String {
    let mut out = String::new();
    let dash = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".to_owned());
    out.push_str(&format!("{}\n", view.object));
    out.push_str(&format!(
        "phase: {}   step: {}\n",
        dash(&view.phase),
        dash(&view.step)
    ));
    if let Some(p) = &view.primary {
        out.push_str(&format!("primary: {p}\n"));
    }
    if let Some(b) = &view.last_backup {
        out.push_str(&format!("last backup: {b}\n"));
    }
    out.push_str("\nconditions:\n");
    for c in &view.conditions {
        out.push_str(&format!(
            "  {:<18} {:<7} {:<28} {}\n",
            c.type_, c.status, c.reason, c.message
        ));
    }
    if !view.instances.is_empty() {
        out.push_str("\ninstances:\n");
        let servers = view.instances.iter().any(|i| i.server.is_some());
        out.push_str(&format!(
            "  {:<24} {:<9} {:<6} {:<9} {:<16}",
            "POD", "ROLE", "READY", "RESTARTS", "NODE"
        ));
        if servers {
            out.push_str(&format!(
                " {:<3} {:<14} {:<10} {:<9} {}",
                "TL", "LSN", "LAG", "STREAMING", "ARCHIVED"
            ));
        }
        out.push('\n');
        for i in &view.instances {
            out.push_str(&format!(
                "  {:<24} {:<9} {:<6} {:<9} {:<16}",
                i.pod,
                i.role.as_deref().unwrap_or("-"),
                i.ready,
                i.restarts,
                i.node.as_deref().unwrap_or("-")
            ));
            if servers {
                let s = i.server.clone().unwrap_or_default();
                let or_dash = |v: Option<String>| v.unwrap_or_else(|| "-".to_owned());
                out.push_str(&format!(
                    " {:<3} {:<14} {:<10} {:<9} {}",
                    or_dash(s.timeline.map(|t| t.to_string())),
                    or_dash(s.lsn.clone()),
                    or_dash(s.lag_bytes.map(|b| format!("{b} B"))),
                    or_dash(s.streaming.map(|b| b.to_string())),
                    or_dash(s.archive.map(|a| match a.last {
                        Some(last) => format!("{} ({} failed), last {last}", a.archived, a.failed),
                        None => format!("{} ({} failed)", a.archived, a.failed),
                    })),
                ));
            }
            out.push('\n');
        }
    }
    out.push_str("\nlast transitions:\n");
    out.push_str(&render_history(&view.transitions));
    out
}

/// The outcome `done` reads from `object`, or why there is none.
pub fn outcome(
    object: &Value,
    done: &impl Fn(&Value) -> Option<Result<String, String>>,
) -> Result<String, String> {
    done(object)
        .unwrap_or_else(|| Err("the object changed again before its outcome was read".to_owned()))
}

/// The reasons of a `Degraded` condition that a retry token answers: a promotion or a
/// hook that used up its retry budget (and, while it still backs off, one that will).
pub const RETRY_WAITS_ON: [&str; 2] = [
    crate::machines::postgres::table::reason::PROMOTION_EXHAUSTED,
    crate::machines::distributeddb::table::reason::HOOK_FAILED,
];

/// What waits for a `retry` token in `object`: the message of its `Degraded` condition
/// when that says a promotion or a hook failed ([`RETRY_WAITS_ON`]); `None` when nothing
/// does, and a token would wait unused.
pub fn retry_waits(object: &Value) -> Option<String> {
    conditions(object)
        .into_iter()
        .find(|c| {
            c.type_ == "Degraded"
                && c.status == "True"
                && RETRY_WAITS_ON.contains(&c.reason.as_str())
        })
        .map(|c| c.message)
}

/// Whether the machine took on retry token `token`: a persisted step's retry budget
/// (`retryAck`, anywhere under `status`) names it.
pub fn retry_taken(object: &Value, token: &str) -> bool {
    fn names(v: &Value, token: &str) -> bool {
        match v {
            Value::Object(map) => map
                .iter()
                .any(|(k, v)| (k == "retryAck" && v.as_str() == Some(token)) || names(v, token)),
            Value::Array(items) => items.iter().any(|v| names(v, token)),
            _ => false,
        }
    }
    object.get("status").is_some_and(|s| names(s, token))
}

/// The last transition's message, if any (what a command that waited prints).
pub fn last_message(object: &Value) -> Option<String> {
    transitions(object)
        .pop()
        .map(|t| format!("{}: {}", t.reason, t.message))
}

/// `transitions` as the plain text `history` prints, one line each.
pub fn render_history(transitions: &[TransitionView]) -> String {
    transitions
        .iter()
        .map(|t| {
            let from = if t.from.is_empty() { "·" } else { &t.from };
            format!(
                "  {}  {from} → {}  {}: {}\n",
                t.at, t.to, t.reason, t.message
            )
        })
        .collect()
}

/// Where `hibernate on|off` ends, once the status is of the current generation: asleep
/// (`on`) or `Ready` (`off`), or `Degraded` while hibernating (its message); `None`
/// while the change goes on.
pub fn hibernation_settled(object: &Value, on: bool) -> Option<Result<String, String>> {
    let at = |p: &str| object.pointer(p).and_then(Value::as_str);
    let generation = object
        .pointer("/metadata/generation")
        .and_then(Value::as_i64);
    let observed = object
        .pointer("/status/observedGeneration")
        .and_then(Value::as_i64);
    if generation.is_none() || observed < generation {
        return None;
    }
    let name = at("/metadata/name").unwrap_or_default();
    let (phase, step) = (at("/status/phase"), at("/status/step"));
    if phase == Some("Hibernating")
        && let Some(degraded) = conditions(object)
            .into_iter()
            .find(|c| c.type_ == "Degraded" && c.status == "True")
    {
        return Some(Err(format!("{}: {}", degraded.reason, degraded.message)));
    }
    match (on, phase, step) {
        (true, Some("Hibernating"), Some("Asleep")) => Some(Ok(format!(
            "{name} is asleep: no instance runs, the volumes are kept"
        ))),
        (false, Some("Ready"), _) => Some(Ok(format!(
            "{name} is Ready, {} primary",
            at("/status/primaryPod").unwrap_or("its")
        ))),
        _ => None,
    }
}

/// The version of the application role's Secret the Ready primary among `pods` says
/// its password follows (the pod condition `lockstep.dev/AppPassword`), if it says one.
pub fn app_password_version(pods: &[Value]) -> Option<String> {
    let primary = pods.iter().find(|p| {
        p.pointer("/metadata/labels/lockstep.dev~1role")
            .and_then(Value::as_str)
            == Some("primary")
    })?;
    primary
        .pointer("/status/conditions")
        .and_then(Value::as_array)?
        .iter()
        .find(|c| text(c, &["type"]).as_deref() == Some(crate::pod::app_password::APP_PASSWORD))
        .and_then(|c| text(c, &["message"]))
        .and_then(|m| crate::pod::app_password::version(&m).map(str::to_owned))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pgc() -> Value {
        json!({
            "metadata": {"name": "orders", "namespace": "db"},
            "status": {
                "phase": "Ready",
                "primaryPod": "orders-1",
                "conditions": [
                    {"type": "Available", "status": "True", "reason": "AllReady", "message": "3 of 3"},
                    {"type": "Degraded", "status": "False", "reason": "AsExpected", "message": ""}
                ],
                "lastBackup": {"time": "2026-12-01T03:00:00Z", "job": "orders-backup-t1", "outcome": "Succeeded"},
                "machine": {"history": [
                    {"from": "", "to": "Creating", "reason": "Initialized", "message": "first", "at": "2026-12-01T00:00:00Z"},
                    {"from": "Creating", "to": "Ready", "reason": "ClusterCreated", "message": "up", "at": "2026-12-01T00:01:00Z"},
                    {"from": "Ready", "to": "SwitchingOver", "reason": "SwitchoverRequested", "message": "to orders-1", "at": "2026-12-01T00:02:00Z"},
                    {"from": "SwitchingOver Promote", "to": "Ready", "reason": "SwitchoverCompleted", "message": "done", "at": "2026-12-01T00:03:00Z"}
                ]}
            }
        })
    }

    fn pod(name: &str, role: &str, ready: bool) -> Value {
        json!({
            "metadata": {"name": name, "labels": {"lockstep.dev/role": role}},
            "spec": {"nodeName": "node-a"},
            "status": {
                "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}],
                "containerStatuses": [{"restartCount": 2}]
            }
        })
    }

    #[test]
    fn the_status_shows_phase_primary_backup_conditions_instances_and_the_last_transitions() {
        let view = status(
            "PostgresCluster",
            &pgc(),
            &[
                pod("orders-1", "primary", true),
                pod("orders-0", "replica", false),
            ],
            2,
        );
        assert_eq!(view.object, "PostgresCluster db/orders");
        assert_eq!(view.primary.as_deref(), Some("orders-1"));
        assert_eq!(view.instances[0].pod, "orders-0", "sorted by pod");
        assert!(!view.instances[0].ready && view.instances[1].ready);
        assert_eq!(view.instances[1].restarts, 2);
        assert_eq!(
            view.transitions
                .iter()
                .map(|t| t.reason.as_str())
                .collect::<Vec<_>>(),
            ["SwitchoverRequested", "SwitchoverCompleted"]
        );
        let text = render_status(&view);
        for want in [
            "phase: Ready",
            "primary: orders-1",
            "last backup: Succeeded (orders-backup-t1",
            "Available",
            "orders-0",
            "SwitchingOver Promote → Ready  SwitchoverCompleted: done",
        ] {
            assert!(text.contains(want), "{want:?} in:\n{text}");
        }
    }

    #[test]
    fn each_instance_shows_its_timeline_lsn_and_a_standbys_lag_from_its_metrics() {
        let primary = "lockstep_instance_writable 1\nlockstep_instance_timeline 2\n\
                       lockstep_instance_wal_position_bytes 50331976\n\
                       lockstep_instance_role{role=\"primary\"} 1\n\
                       lockstep_instance_wal_archived_total 12\n\
                       lockstep_instance_wal_archive_failures_total 3\n\
                       lockstep_instance_last_archived_timestamp_seconds 1764730000.25\n";
        let standby = "lockstep_instance_writable 0\nlockstep_instance_timeline 2\n\
                       lockstep_instance_wal_position_bytes 50331648\n\
                       lockstep_instance_replay_lag_bytes 328\nlockstep_instance_streaming 1\n";
        assert_eq!(
            server(primary),
            ServerView {
                timeline: Some(2),
                lsn: Some("0/3000148".to_owned()),
                lag_bytes: None,
                streaming: None,
                archive: Some(ArchiveView {
                    archived: 12,
                    failed: 3,
                    last: Some("2025-12-03T02:46:40Z".to_owned()),
                }),
            }
        );
        let mut view = status(
            "PostgresCluster",
            &pgc(),
            &[
                pod("orders-1", "primary", true),
                pod("orders-0", "replica", true),
            ],
            2,
        );
        view.instances[0].server = Some(server(standby));
        let text = render_status(&view);
        assert!(text.contains("TL  LSN"), "{text}");
        assert!(
            text.contains("2   0/3000000      328 B      true      -"),
            "{text}"
        );
        view.instances[0].server = Some(server(primary));
        assert!(
            render_status(&view).contains(
                "0/3000148      -          -         12 (3 failed), last 2025-12-03T02:46:40Z"
            ),
            "{}",
            render_status(&view)
        );
        view.instances[0].server = Some(server(standby));
        // orders-1's metrics could not be read: dashes, not a failure.
        assert!(
            text.lines()
                .any(|l| l.contains("orders-1") && l.trim_end().ends_with('-')),
            "{text}"
        );
    }

    #[test]
    fn the_first_transition_comes_from_nowhere_and_a_status_less_object_shows_dashes() {
        let lines = render_history(&transitions(&pgc()));
        assert!(
            lines
                .lines()
                .next()
                .is_some_and(|l| l.contains("· → Creating")),
            "{lines}"
        );
        let view = status("DistributedDB", &json!({"metadata": {"name": "d"}}), &[], 5);
        assert!(render_status(&view).contains("phase: -   step: -"));
        assert!(view.transitions.is_empty() && view.conditions.is_empty());
    }

    #[test]
    fn a_retry_waits_only_on_an_exhausted_promotion_or_a_failed_hook_and_is_taken_when_a_budget_names_it()
     {
        let degraded = |reason: &str| {
            json!({"status": {
                "conditions": [{"type": "Degraded", "status": "True", "reason": reason, "message": "m"}],
                "machine": {"state": {"upgrading": {"budget": {"roundStart": 3, "retryAck": "t2"}}}}
            }})
        };
        assert_eq!(
            retry_waits(&degraded("PromotionExhausted")).as_deref(),
            Some("m")
        );
        assert_eq!(retry_waits(&degraded("HookFailed")).as_deref(), Some("m"));
        assert_eq!(retry_waits(&degraded("SwitchoverRefused")), None);
        assert_eq!(retry_waits(&pgc()), None);
        assert!(retry_taken(&degraded("HookFailed"), "t2"));
        assert!(!retry_taken(&degraded("HookFailed"), "t3"));
        assert!(!retry_taken(&json!({"metadata": {"retryAck": "t2"}}), "t2"));
    }

    #[test]
    fn hibernate_waits_for_the_current_generation_to_be_asleep_or_ready() {
        let object = |generation: i64, phase: &str, step: &str, degraded: bool| {
            serde_json::json!({
                "metadata": {"name": "pg", "generation": generation},
                "status": {
                    "observedGeneration": 2,
                    "phase": phase,
                    "step": step,
                    "primaryPod": "pg-2",
                    "conditions": [{
                        "type": "Degraded",
                        "status": if degraded { "True" } else { "False" },
                        "reason": "PrimaryVolumeEmpty",
                        "message": "waking: primary pg-2 reports that its volume holds no database",
                    }],
                },
            })
        };
        // Ready from before the request: not yet taken on.
        assert_eq!(
            hibernation_settled(&object(3, "Ready", "", false), false),
            None
        );
        assert_eq!(
            hibernation_settled(&object(2, "Hibernating", "Stopping", false), true),
            None
        );
        assert_eq!(
            hibernation_settled(&object(2, "Hibernating", "Asleep", false), true),
            Some(Ok(
                "pg is asleep: no instance runs, the volumes are kept".to_owned()
            ))
        );
        assert_eq!(
            hibernation_settled(&object(2, "Ready", "", false), false),
            Some(Ok("pg is Ready, pg-2 primary".to_owned()))
        );
        assert!(matches!(
            hibernation_settled(&object(2, "Hibernating", "Waking", true), false),
            Some(Err(m)) if m.starts_with("PrimaryVolumeEmpty")
        ));
    }
}
