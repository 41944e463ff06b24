//! The per-object series, read from the objects' persisted status.
//!
//! While this process leads, the driver's own watch of each machine's custom resources
//! hands every event to a [`Tracker`] (through [`super::hooks::MetricsHooks`]; there is
//! no second watch), which keeps, for each object:
//! - `lockstep_object_state{machine,namespace,name,state}` = 1 for `status.phase`,
//!   removed when the object is deleted;
//! - `lockstep_stuck_objects{machine}`: objects whose `Degraded` condition says
//!   `ProgressDeadlineExceeded`;
//! - `lockstep_transitions_total{machine,from,to}`: one per new entry of
//!   `status.machine.history` (not the first record's `Initialized`);
//! - `lockstep_state_duration_seconds{machine,state}`: for each new entry of
//!   `status.machine.history`, the time since the entry before it (that is, since the
//!   state it leaves was entered, its `enteredAt`).
//!
//! # Guarantees
//! - For each object, the transition counter and the time-in-state histogram are
//!   updated before the state series, under one event: whoever reads
//!   `lockstep_object_state` at a state also reads the transition into it.
//! - History entries present when an object is first seen (at start or after a
//!   takeover) are not observed again: each transition is timed at most once per process.
//! - An object that disappears, including while the watch was down (missing from the
//!   relist), leaves no series.
//! - It reads only status fields; nothing of a spec or a Secret.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::metrics::{Metrics, ObjectKey};
use crate::driver::hooks::ResourceEvent;
use crate::engine::conditions::{self, reason, status};

/// The reason that marks a stuck object on its `Degraded` condition.
const STUCK: &str = reason::PROGRESS_DEADLINE_EXCEEDED;

/// The bookkeeping of the per-object series, without I/O.
#[derive(Debug)]
pub struct Tracker {
    machine: &'static str,
    metrics: Metrics,
    /// Per object, the history entries already counted, as hashes of [`Entry`] (a
    /// history holds up to ten; four strings each, kept for 1,000 objects, were ~1 KiB
    /// per object).
    objects: HashMap<ObjectKey, HashSet<u64>>,
    relisted: Option<HashSet<ObjectKey>>,
}

/// A history entry's identity: `(at, from, to, reason)`.
type Entry = (String, String, String, String);

impl Tracker {
    /// A tracker recording `machine`'s objects into `metrics`.
    pub fn new(machine: &'static str, metrics: Metrics) -> Self {
        Self {
            machine,
            metrics,
            objects: HashMap::new(),
            relisted: None,
        }
    }

    /// Take one event of the custom resources' watch into account.
    pub fn event(&mut self, event: &ResourceEvent<'_>) {
        match *event {
            ResourceEvent::Relisting => self.relisted = Some(HashSet::new()),
            ResourceEvent::Seen {
                namespace,
                name,
                status,
            } => {
                let key = ObjectKey::new(self.machine, namespace.to_owned(), name.to_owned());
                if let Some(listed) = &mut self.relisted {
                    listed.insert(key.clone());
                }
                self.apply(key, status);
            }
            ResourceEvent::Deleted { namespace, name } => {
                let key = ObjectKey::new(self.machine, namespace.to_owned(), name.to_owned());
                self.objects.remove(&key);
                self.metrics.forget(&key);
            }
            ResourceEvent::Listed => {
                if let Some(listed) = self.relisted.take() {
                    let gone: Vec<ObjectKey> = self
                        .objects
                        .keys()
                        .filter(|k| !listed.contains(*k))
                        .cloned()
                        .collect();
                    for key in gone {
                        self.objects.remove(&key);
                        self.metrics.forget(&key);
                    }
                }
            }
        }
    }

    fn apply(&mut self, key: ObjectKey, status: &Value) {
        let history: Vec<&Value> = status
            .get("machine")
            .and_then(|m| m.get("history"))
            .and_then(Value::as_array)
            .map(|h| h.iter().collect())
            .unwrap_or_default();
        let entries: Vec<Entry> = history.iter().map(|e| entry(e)).collect();
        if let Some(seen) = self.objects.get(&key) {
            for (i, now) in entries.iter().enumerate() {
                if seen.contains(&fingerprint(now)) || now.1.is_empty() {
                    continue;
                }
                // Counted here, before the state below is set: a scrape that shows the
                // new state also shows the transition into it.
                self.metrics
                    .on_transition(self.machine, kind_of(&now.1), kind_of(&now.2));
                if i == 0 {
                    continue;
                }
                let (Some(left), Some(entered)) = (time(&now.0), time(&entries[i - 1].0)) else {
                    continue;
                };
                let spent = (left - entered).to_std().unwrap_or_default();
                self.metrics
                    .on_time_in_state(self.machine, kind_of(&now.1), spent);
            }
        }
        self.objects
            .insert(key.clone(), entries.iter().map(fingerprint).collect());

        let phase = status.get("phase").and_then(Value::as_str);
        let Some(phase) = phase else {
            return;
        };
        let stuck = status
            .get("conditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .any(|c| {
                c.get("type").and_then(Value::as_str) == Some(conditions::DEGRADED)
                    && c.get("status").and_then(Value::as_str) == Some(status::TRUE)
                    && c.get("reason").and_then(Value::as_str) == Some(STUCK)
            });
        self.metrics.set_state(&key, phase, stuck);
    }
}

fn entry(value: &Value) -> Entry {
    let field = |k: &str| {
        value
            .get(k)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    (field("at"), field("from"), field("to"), field("reason"))
}

/// An entry's identity, as kept between events.
fn fingerprint(entry: &Entry) -> u64 {
    let mut hasher = std::hash::DefaultHasher::new();
    std::hash::Hash::hash(entry, &mut hasher);
    std::hash::Hasher::finish(&hasher)
}

fn time(at: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(at)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

/// The kind part of a described state (`Upgrading 2/PreHook` → `Upgrading`).
pub fn kind_of(described: &str) -> &str {
    described.split_whitespace().next().unwrap_or(described)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    struct Object {
        name: String,
        status: Value,
    }

    fn apply(t: &mut Tracker, o: Object) {
        t.event(&ResourceEvent::Seen {
            namespace: "ns",
            name: &o.name,
            status: &o.status,
        });
    }

    fn object(name: &str, phase: &str, history: Value, stuck: bool) -> Object {
        let degraded = if stuck {
            json!({"type": "Degraded", "status": "True", "reason": STUCK})
        } else {
            json!({"type": "Degraded", "status": "False", "reason": "AsExpected"})
        };
        Object {
            name: name.to_owned(),
            status: json!({"phase": phase, "conditions": [degraded], "machine": {"history": history}}),
        }
    }

    fn e(from: &str, to: &str, at: &str) -> Value {
        json!({"from": from, "to": to, "reason": "R", "message": "", "at": at})
    }

    #[test]
    fn times_new_transitions_only_and_forgets_deleted_objects() {
        let metrics = Metrics::new();
        let mut t = Tracker::new("distributeddb", metrics.clone());
        let h1 = json!([
            e("", "Creating", "2026-01-01T10:00:00Z"),
            e("Creating", "Ready", "2026-01-01T10:00:30Z")
        ]);
        apply(&mut t, object("db", "Ready", h1, false));
        let text = metrics.encode();
        assert!(!text.contains("state_duration_seconds_count"), "{text}");
        assert!(
            text.contains("lockstep_object_state{machine=\"distributeddb\",namespace=\"ns\",name=\"db\",state=\"Ready\"} 1"),
            "{text}"
        );

        let h2 = json!([
            e("", "Creating", "2026-01-01T10:00:00Z"),
            e("Creating", "Ready", "2026-01-01T10:00:30Z"),
            e("Ready", "Upgrading 1/PreHook", "2026-01-01T10:10:30Z")
        ]);
        apply(&mut t, object("db", "Upgrading", h2, true));
        let text = metrics.encode();
        assert!(
            text.contains("lockstep_state_duration_seconds_sum{machine=\"distributeddb\",state=\"Ready\"} 600.0"),
            "{text}"
        );
        assert!(
            text.contains("lockstep_stuck_objects{machine=\"distributeddb\"} 1"),
            "{text}"
        );
        assert!(
            !text.contains("lockstep_object_state{machine=\"distributeddb\",namespace=\"ns\",name=\"db\",state=\"Ready\"}"),
            "{text}"
        );

        t.event(&ResourceEvent::Deleted {
            namespace: "ns",
            name: &object("db", "Upgrading", json!([]), true).name,
        });
        let text = metrics.encode();
        assert!(!text.contains("name=\"db\""), "{text}");
        assert!(
            text.contains("lockstep_stuck_objects{machine=\"distributeddb\"} 0"),
            "{text}"
        );
    }

    #[test]
    fn a_transition_is_counted_in_the_same_event_that_shows_its_state_and_only_once() {
        let metrics = Metrics::new();
        let mut t = Tracker::new("distributeddb", metrics.clone());
        let created = json!([e("", "Creating", "2026-01-01T10:00:00Z")]);
        apply(&mut t, object("db", "Creating", created, false));
        let ready = json!([
            e("", "Creating", "2026-01-01T10:00:00Z"),
            e("Creating", "Ready", "2026-01-01T10:00:30Z")
        ]);
        for _ in 0..2 {
            apply(&mut t, object("db", "Ready", ready.clone(), false));
        }
        let text = metrics.encode();
        assert!(
            text.contains("lockstep_object_state{machine=\"distributeddb\",namespace=\"ns\",name=\"db\",state=\"Ready\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("lockstep_transitions_total{machine=\"distributeddb\",from=\"Creating\",to=\"Ready\"} 1"),
            "{text}"
        );
        assert!(
            !text.contains("to=\"Creating\""),
            "Initialized is no transition: {text}"
        );
    }

    #[test]
    fn a_relist_forgets_objects_gone_meanwhile() {
        let metrics = Metrics::new();
        let mut t = Tracker::new("distributeddb", metrics.clone());
        apply(&mut t, object("a", "Ready", json!([]), false));
        apply(&mut t, object("b", "Ready", json!([]), false));
        t.event(&ResourceEvent::Relisting);
        apply(&mut t, object("a", "Ready", json!([]), false));
        t.event(&ResourceEvent::Listed);
        let text = metrics.encode();
        assert!(text.contains("name=\"a\""), "{text}");
        assert!(!text.contains("name=\"b\""), "{text}");
    }
}
