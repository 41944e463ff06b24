//! What the layer holds between requests: the crash plan, the rules of each fault, the
//! versions of each object seen in watches (for stale reads), and what was injected.

use super::*;

pub(super) struct Refusal {
    pub(super) code: u16,
    pub(super) matches: RequestPredicate,
    pub(super) left: usize,
}

pub(super) struct DropRule {
    pub(super) matches: EventPredicate,
}

pub(super) struct Stale {
    pub(super) resource: String,
    pub(super) back: usize,
    pub(super) hold: Duration,
    pub(super) matches: EventPredicate,
    pub(super) fired: bool,
}

/// Where an object lives, for the versions seen: resource, namespace, name.
pub(super) type ObjectKey = (String, Option<String>, String);

/// How many versions of each object are kept for stale reads.
pub(super) const VERSIONS_KEPT: usize = 16;

/// Crash after the `n`-th mutating request that matches.
pub(super) struct CrashOnMatch {
    pub(super) left: usize,
    pub(super) matches: RequestPredicate,
}

#[derive(Default)]
pub(super) struct State {
    pub(super) plan: CrashPlan,
    pub(super) crash_on: Option<CrashOnMatch>,
    pub(super) log: Vec<Record>,
    pub(super) refusals: Vec<Refusal>,
    pub(super) drops: Vec<DropRule>,
    pub(super) stale: Vec<Stale>,
    pub(super) versions: HashMap<ObjectKey, VecDeque<WatchEvent>>,
    pub(super) injected: Vec<Injected>,
}

pub(super) enum Admission {
    Send {
        index: usize,
        mutating: Option<usize>,
    },
    Refuse {
        code: u16,
    },
    Block,
}

impl State {
    pub(super) fn admit(&mut self, request: RequestInfo, body: Option<&Value>) -> Admission {
        let object = request.name.clone().or_else(|| {
            let meta = body?.get("metadata")?;
            match meta.get("name").and_then(Value::as_str) {
                Some(name) => Some(name.to_owned()),
                None => Some(format!("{}*", meta.get("generateName")?.as_str()?)),
            }
        });
        // A delete carries its preconditions at the top; an eviction in its deleteOptions.
        let uid_precondition = body
            .and_then(|b| {
                b.pointer("/preconditions/uid")
                    .or_else(|| b.pointer("/deleteOptions/preconditions/uid"))
            })
            .and_then(Value::as_str)
            .map(str::to_owned);
        let seq = self.log.len() + 1;
        let mut record = Record {
            seq,
            mutating_seq: None,
            request,
            object,
            uid_precondition,
            outcome: Outcome::InFlight,
        };
        let refusal = if self.plan.crashed() {
            None
        } else {
            self.refusals
                .iter_mut()
                .filter(|r| r.left > 0)
                .find_map(|r| (r.matches)(&record.request, body).then_some(r))
        };
        let admission = if let Some(refusal) = refusal {
            refusal.left -= 1;
            record.outcome = Outcome::Refused(refusal.code);
            self.injected.push(Injected::Refused {
                request: record.to_string(),
                code: refusal.code,
            });
            Admission::Refuse { code: refusal.code }
        } else {
            match self.plan.admit(record.request.is_mutating()) {
                Admit::Send(mutating) => {
                    record.mutating_seq = mutating;
                    if let (Some(n), Some(on)) = (mutating, self.crash_on.as_mut())
                        && (on.matches)(&record.request, body)
                    {
                        on.left = on.left.saturating_sub(1);
                        if on.left == 0 {
                            // This is the request to crash after: nothing numbered
                            // above it may leave.
                            self.plan.after = Some(n);
                            self.crash_on = None;
                        }
                    }
                    Admission::Send {
                        index: seq - 1,
                        mutating,
                    }
                }
                Admit::Block => {
                    record.outcome = Outcome::Blocked;
                    Admission::Block
                }
            }
        };
        self.log.push(record);
        admission
    }

    /// The request at `index` was answered with `code`. Returns whether the caller may
    /// see the answer (false once crashed), and whether the crash fires now.
    pub(super) fn answered(
        &mut self,
        index: usize,
        mutating: Option<usize>,
        code: u16,
    ) -> (bool, bool) {
        let fires = mutating.is_some_and(|n| self.plan.answered(n));
        let visible = !self.plan.crashed();
        if let Some(record) = self.log.get_mut(index) {
            record.outcome = if visible {
                Outcome::Answered(code)
            } else {
                Outcome::Swallowed(code)
            };
            if fires {
                let request = record.to_string();
                self.injected.push(Injected::Crash {
                    after: mutating.unwrap_or_default(),
                    request,
                });
            }
        }
        (visible, fires)
    }

    pub(super) fn failed(&mut self, index: usize, mutating: Option<usize>, error: String) -> bool {
        let fires = mutating.is_some_and(|n| self.plan.answered(n));
        if let Some(record) = self.log.get_mut(index) {
            record.outcome = Outcome::Failed(error);
            if fires {
                let request = record.to_string();
                self.injected.push(Injected::Crash {
                    after: mutating.unwrap_or_default(),
                    request,
                });
            }
        }
        fires
    }

    /// What to emit for one line of the watch `request`; stale replays to heal later
    /// are added to `heals`.
    pub(super) fn edit_watch_line(
        &mut self,
        request: &RequestInfo,
        line: Vec<u8>,
        heals: &mut Vec<(Duration, ObjectKey)>,
    ) -> Vec<Vec<u8>> {
        let Some(event) = WatchEvent::parse(&line) else {
            return vec![line];
        };
        let watch = request.to_string();
        for rule in &mut self.drops {
            if (rule.matches)(request, &event) {
                self.injected.push(Injected::Dropped {
                    watch,
                    event: describe_event(&event),
                });
                return Vec::new();
            }
        }
        let Some(name) = event.name().map(str::to_owned) else {
            return vec![line];
        };
        let key: ObjectKey = (
            request.resource.clone(),
            event.namespace().map(str::to_owned),
            name.clone(),
        );
        if !matches!(event.event_type.as_str(), "ADDED" | "MODIFIED" | "DELETED") {
            return vec![line];
        }
        let versions = self.versions.entry(key.clone()).or_default();
        versions.push_back(event.clone());
        while versions.len() > VERSIONS_KEPT {
            versions.pop_front();
        }
        let mut out = vec![line];
        if event.event_type == "DELETED" {
            return out;
        }
        for rule in &mut self.stale {
            if rule.fired || rule.resource != request.resource || !(rule.matches)(request, &event) {
                continue;
            }
            let Some(old) = versions
                .len()
                .checked_sub(rule.back + 1)
                .and_then(|i| versions.get(i))
            else {
                continue;
            };
            rule.fired = true;
            let replay = WatchEvent {
                event_type: "MODIFIED".to_owned(),
                object: old.object.clone(),
            };
            self.injected.push(Injected::Stale {
                watch: watch.clone(),
                name: name.clone(),
                served: old.resource_version().unwrap_or_default().to_owned(),
                current: event.resource_version().unwrap_or_default().to_owned(),
                object: old.object.clone(),
            });
            out.push(replay.to_line());
            heals.push((rule.hold, key.clone()));
        }
        out
    }

    /// The newest version of `key` seen, to re-deliver after a stale replay.
    pub(super) fn heal(&mut self, request: &RequestInfo, key: &ObjectKey) -> Option<Vec<u8>> {
        let newest = self.versions.get(key)?.back()?;
        if newest.event_type == "DELETED" {
            return None;
        }
        let event = WatchEvent {
            event_type: "MODIFIED".to_owned(),
            object: newest.object.clone(),
        };
        self.injected.push(Injected::Healed {
            watch: request.to_string(),
            name: key.2.clone(),
            resource_version: newest.resource_version().unwrap_or_default().to_owned(),
        });
        Some(event.to_line())
    }
}

pub(super) fn describe_event(event: &WatchEvent) -> String {
    format!(
        "{} {}@{}",
        event.event_type,
        event.name().unwrap_or("?"),
        event.resource_version().unwrap_or("?")
    )
}
