//! What an instance made of `spec.postgresql`, as it tells the operator: the pod
//! condition [`SETTINGS_APPLIED`], written by the instance manager on its own pod
//! (`pods/status`, its Role names only this cluster's pods) whenever what it says
//! changes, and read by the operator through its pod watch.
//!
//! Why a pod condition and not an endpoint the operator polls: it is written only when
//! the outcome changes (a reload refused, a restart pending, both cleared), so an idle
//! cluster costs no request, and the operator wakes on the change instead of on a timer.
//!
//! | status | reason | message |
//! |---|---|---|
//! | `True` | [`reason::APPLIED`] | `every setting of spec.postgresql applied` |
//! | `False` | [`reason::REFUSED`] | `refused: spec.postgresql.parameters.work_mem; pending restart: shared_buffers` |
//! | `False` | [`reason::PENDING_RESTART`] | `pending restart: shared_buffers` |
//!
//! Each message ends with `; judged <digest>`: the digest
//! ([`crate::driver::cache::digest`]) of the settings annotation the report is about
//! ([`super::settings::digest_of`]). A parameter pending a restart is known only after
//! the server reloaded the files, so an instance says it judged a value once it knows
//! both what was refused and what waits for a start. The operator restarts no instance
//! before every instance has judged the spec's settings: a report that arrives late
//! (the kubelet refreshes each pod's annotations file on its own schedule) would
//! otherwise find the role already moved and move it again.
//!
//! A refused entry names the field of the spec that holds it: a parameter
//! (`spec.postgresql.parameters.<name>`) or a rule by its place
//! (`spec.postgresql.pgHba[<i>]`). The server keeps its last accepted value meanwhile.
//!
//! # Guarantees
//! [`SettingsReport::from_condition`] reads back exactly what
//! [`SettingsReport::condition`] wrote (a round trip), whatever the names.

use std::collections::BTreeMap;

/// The pod condition's type.
pub const SETTINGS_APPLIED: &str = "lockstep.dev/SettingsApplied";

/// The condition's reasons.
pub mod reason {
    /// Everything asked for is in effect.
    pub const APPLIED: &str = "Applied";
    /// Some parameter waits for the server's next start.
    pub const PENDING_RESTART: &str = "PendingRestart";
    /// The server refused a parameter or a `pg_hba.conf` rule (and maybe some parameter
    /// also waits for a restart).
    pub const REFUSED: &str = "Refused";
    /// The cluster's condition only: an instance has yet to judge the spec's settings
    /// (its report is about earlier ones).
    pub const APPLYING: &str = "Applying";
}

const REFUSED_PREFIX: &str = "refused: ";
const PENDING_PREFIX: &str = "pending restart: ";
const ALL_APPLIED: &str = "every setting of spec.postgresql applied";
const JUDGED_PREFIX: &str = "judged ";

/// What an instance reports of its settings.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct SettingsReport {
    /// The fields of the spec whose values the server refused, sorted.
    pub refused: Vec<String>,
    /// The parameters written that the server applies only at its next start, sorted.
    pub pending_restart: Vec<String>,
    /// The digest of the settings annotation this report is about
    /// ([`super::settings::digest_of`]); `None` from a manager too old to say, or one
    /// whose server never started on its files.
    pub judged: Option<String>,
}

/// A refused parameter, named by its field.
#[must_use]
pub fn parameter_field(name: &str) -> String {
    format!("spec.postgresql.parameters.{name}")
}

/// A refused `pg_hba.conf` rule, named by its place in the spec.
#[must_use]
pub fn rule_field(index: usize) -> String {
    format!("spec.postgresql.pgHba[{index}]")
}

impl SettingsReport {
    /// Everything asked for is in effect.
    #[must_use]
    pub fn applied(&self) -> bool {
        self.refused.is_empty() && self.pending_restart.is_empty()
    }

    /// The condition's status, reason and message.
    #[must_use]
    pub fn condition(&self) -> (&'static str, &'static str, String) {
        let judged = self
            .judged
            .as_ref()
            .map(|d| format!("; {JUDGED_PREFIX}{d}"))
            .unwrap_or_default();
        if self.applied() {
            return ("True", reason::APPLIED, format!("{ALL_APPLIED}{judged}"));
        }
        let mut parts = Vec::new();
        if !self.refused.is_empty() {
            parts.push(format!("{REFUSED_PREFIX}{}", self.refused.join(", ")));
        }
        if !self.pending_restart.is_empty() {
            parts.push(format!(
                "{PENDING_PREFIX}{}",
                self.pending_restart.join(", ")
            ));
        }
        let why = if self.refused.is_empty() {
            reason::PENDING_RESTART
        } else {
            reason::REFUSED
        };
        ("False", why, format!("{}{judged}", parts.join("; ")))
    }

    /// The report a condition carries; `None` for a message this module did not write.
    #[must_use]
    pub fn from_condition(status: &str, message: &str) -> Option<Self> {
        let mut report = Self::default();
        for part in message.split("; ") {
            let list = |rest: &str| rest.split(", ").map(str::to_owned).collect::<Vec<_>>();
            if let Some(rest) = part.strip_prefix(JUDGED_PREFIX) {
                report.judged = Some(rest.to_owned());
            } else if status == "True" {
                continue;
            } else if let Some(rest) = part.strip_prefix(REFUSED_PREFIX) {
                report.refused = list(rest);
            } else if let Some(rest) = part.strip_prefix(PENDING_PREFIX) {
                report.pending_restart = list(rest);
            } else {
                return None;
            }
        }
        (status == "True" || !report.applied()).then_some(report)
    }
}

/// The reports of a cluster's instances, gathered by what they name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Gathered {
    /// Each refused field, with the ordinals of the instances that refused it.
    pub refused: BTreeMap<String, Vec<i32>>,
    /// Each parameter pending a restart, with the ordinals of the instances it waits on.
    pub pending_restart: BTreeMap<String, Vec<i32>>,
}

impl Gathered {
    /// Gathers `reports` (by ordinal).
    #[must_use]
    pub fn of(reports: &BTreeMap<i32, SettingsReport>) -> Self {
        let mut gathered = Self::default();
        for (k, report) in reports {
            for field in &report.refused {
                gathered.refused.entry(field.clone()).or_default().push(*k);
            }
            for name in &report.pending_restart {
                let on = gathered.pending_restart.entry(name.clone()).or_default();
                on.push(*k);
            }
        }
        gathered
    }

    /// `spec.postgresql.parameters.work_mem (pg-0, pg-1)`, one per refused field.
    #[must_use]
    pub fn refused_text(&self, pod: impl Fn(i32) -> String) -> String {
        listed(&self.refused, pod)
    }

    /// `shared_buffers (pg-0)`, one per parameter pending a restart.
    #[must_use]
    pub fn pending_text(&self, pod: impl Fn(i32) -> String) -> String {
        listed(&self.pending_restart, pod)
    }
}

fn listed(what: &BTreeMap<String, Vec<i32>>, pod: impl Fn(i32) -> String) -> String {
    what.iter()
        .map(|(name, on)| {
            let pods: Vec<String> = on.iter().map(|k| pod(*k)).collect();
            format!("{name} ({})", pods.join(", "))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn gathered_reports_name_each_field_with_the_instances_that_report_it() {
        let report = |refused: &[&str], pending: &[&str]| SettingsReport {
            refused: refused.iter().map(|s| (*s).to_owned()).collect(),
            pending_restart: pending.iter().map(|s| (*s).to_owned()).collect(),
            judged: None,
        };
        let reports = BTreeMap::from([
            (
                0,
                report(
                    &["spec.postgresql.parameters.work_mem"],
                    &["shared_buffers"],
                ),
            ),
            (1, report(&["spec.postgresql.parameters.work_mem"], &[])),
            (2, report(&[], &[])),
        ]);
        let gathered = Gathered::of(&reports);
        let pod = |k| format!("pg-{k}");
        assert_eq!(
            gathered.refused_text(pod),
            "spec.postgresql.parameters.work_mem (pg-0, pg-1)"
        );
        assert_eq!(gathered.pending_text(pod), "shared_buffers (pg-0)");
    }

    #[test]
    fn a_refusal_names_the_field_and_outranks_a_pending_restart() {
        let report = SettingsReport {
            refused: vec![parameter_field("work_mem"), rule_field(1)],
            pending_restart: vec!["shared_buffers".to_owned()],
            judged: Some("0123456789abcdef".to_owned()),
        };
        assert_eq!(
            report.condition(),
            (
                "False",
                reason::REFUSED,
                "refused: spec.postgresql.parameters.work_mem, spec.postgresql.pgHba[1]; pending restart: shared_buffers; judged 0123456789abcdef".to_owned()
            )
        );
    }

    #[test]
    fn nothing_refused_or_pending_is_applied() {
        let (status, why, _) = SettingsReport::default().condition();
        assert_eq!((status, why), ("True", reason::APPLIED));
    }

    #[test]
    fn a_message_it_did_not_write_reads_as_nothing() {
        assert_eq!(
            SettingsReport::from_condition("False", "kubelet says hi"),
            None
        );
    }

    proptest! {
        #[test]
        fn what_is_written_reads_back_the_same(
            refused in proptest::collection::btree_set("[a-z_.\\[\\]0-9]{1,20}", 0..4),
            pending in proptest::collection::btree_set("[a-z_]{1,20}", 0..4),
            judged in proptest::option::of("[0-9a-f]{16}"),
        ) {
            let report = SettingsReport {
                refused: refused.into_iter().collect(),
                pending_restart: pending.into_iter().collect(),
                judged,
            };
            let (status, _, message) = report.condition();
            prop_assert_eq!(SettingsReport::from_condition(status, &message), Some(report));
        }
    }
}
