//! The synchronous terms commits may have been acknowledged under: `number`,
//! `dataDurability` and how many members they name, as each instance was told them
//! ([`crate::pod::synchronous::SyncStandbys`]). They are recorded in the status
//! (`status.synchronousTerms`), not the Lease: they are the operator's knowledge of what
//! it told the instances, like `status.longestLeaseSeconds`, and the Lease is the
//! instances' own record of tenure, which they rewrite at every renewal.
//!
//! Why: a failover reads enough members to be sure one has every acknowledged commit
//! ([`crate::pod::synchronous::survey_quorum`]), and that count depends on the terms the
//! commits were acknowledged under, not on the spec as it is now. Each instance applies
//! a change of `spec.synchronous` or `spec.replicas` at its own next reading of its
//! settings, so for a while the primary may still acknowledge under the old terms:
//! after `number` was raised, a commit may still be on one standby alone; after
//! `Preferred` became `Required`, it may be on none; after a scale-down, it may be on a
//! member that is being removed.
//!
//! # Guarantees
//! - **Recorded before relaxed**: the record holds every distinct terms the spec asked
//!   for since every member last ran the same ones ([`record`]); it goes back to the
//!   spec's alone only once every member runs them (each instance reported, on its
//!   pod, that it judged the spec's settings, [`crate::pod::applied`]). A decision computes
//!   the record from the status it read and the spec, so terms the spec asks for count
//!   from the first reconcile that sees them, whether or not that reconcile's status
//!   write lands.
//! - **The stricter of old and new** ([`quorum`]): a failover under `Required` reads
//!   enough members for the fewest standbys any recorded terms waited for, among the
//!   most members any of them named (a member a scale-down removed included: it is
//!   never counted as read, and a survey that needs it waits). It says that no
//!   acknowledged commit is lost only when every recorded terms were `Required`.
//! - A spec that is not `Required` (`Preferred`, or no `spec.synchronous`) asks for no
//!   quorum at once: it is the documented way for a person to promote a member without
//!   the others, accepting the loss of what only they had, and a wait for every member
//!   to apply it would never end while the old primary is down.
//!
//! # Assumptions
//! - An instance that reports it judged a settings annotation runs its
//!   `synchronous_standby_names` (the manager reloads the server before it reports).
//! - A status that lost its record (restored from a backup of the object, or written by
//!   an operator before this one): until every member runs the spec's terms, the
//!   failover assumes the weakest terms a cluster can run (one standby, not promised,
//!   over every member observed).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::pod::synchronous::{DataDurability, SynchronousSpec};

/// Terms a primary may acknowledge commits under.
#[derive(JsonSchema, Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Terms {
    /// How many standbys a commit waits for; 0: none (no `spec.synchronous`).
    pub number: i32,
    /// Whether a commit waits for them even when too few stream.
    pub data_durability: DataDurability,
    /// How many members the terms name (the pods of ordinals `0..members`).
    pub members: i32,
}

impl Terms {
    /// The terms `spec` asks for, in a cluster of `replicas` members.
    #[must_use]
    pub fn of(spec: Option<&SynchronousSpec>, replicas: i32) -> Self {
        match spec {
            Some(s) => Terms {
                number: s.number,
                data_durability: s.data_durability,
                members: replicas,
            },
            None => Terms {
                number: 0,
                data_durability: DataDurability::Preferred,
                members: replicas,
            },
        }
    }

    /// The weakest terms any cluster of `members` runs: in place of a lost record.
    #[must_use]
    pub fn unknown(members: i32) -> Self {
        Terms {
            number: 1,
            data_durability: DataDurability::Preferred,
            members,
        }
    }

    /// A commit acknowledged under these terms is on `number` standbys.
    fn promised(self) -> bool {
        self.data_durability == DataDurability::Required && self.number > 0
    }
}

/// Whether every member runs the spec's terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// Every member reported it judged the spec's settings.
    Everywhere,
    /// Some member has not (or is not there to say).
    NotYet,
}

/// `status.synchronousTerms`: `spec`'s terms alone once they are [`Applied::Everywhere`];
/// otherwise what the status said `before` with `spec`'s added (each terms once, in the
/// order first seen). A status that said nothing (`before` is `None`) is taken for one
/// that held [`Terms::unknown`] over `widest` members.
#[must_use]
pub fn record(spec: Terms, before: Option<&[Terms]>, applied: Applied, widest: i32) -> Vec<Terms> {
    if applied == Applied::Everywhere {
        return vec![spec];
    }
    let mut terms = match before {
        Some(before) if !before.is_empty() => before.to_vec(),
        _ => vec![Terms::unknown(widest.max(spec.members))],
    };
    if !terms.contains(&spec) {
        terms.push(spec);
    }
    terms
}

/// What a failover under `Required` must read: the stricter of every recorded terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quorum {
    /// The fewest standbys any recorded terms waited for.
    pub number: i32,
    /// The most members any recorded terms named.
    pub members: i32,
    /// Every recorded terms were `Required`: every acknowledged commit is on `number`
    /// of the other members.
    pub promised: bool,
}

impl Quorum {
    /// How many of the other members (every member named, the old primary aside) a
    /// failover must read so that one of them has every acknowledged commit.
    #[must_use]
    pub fn needed(self) -> usize {
        let others = usize::try_from(self.members.saturating_sub(1)).unwrap_or(0);
        let number = usize::try_from(self.number).unwrap_or(0).min(others);
        if number == 0 {
            return 0;
        }
        others - number + 1
    }
}

/// The quorum a failover reads under `spec` (`None`: not `Required`, no quorum) with
/// `recorded` terms ([`record`]): the fewest standbys and the most members of them all.
#[must_use]
pub fn quorum(spec: Option<&SynchronousSpec>, recorded: &[Terms]) -> Option<Quorum> {
    let spec = spec.filter(|s| s.data_durability == DataDurability::Required && s.number > 0)?;
    let waited = recorded.iter().filter(|t| t.number > 0);
    Some(Quorum {
        number: waited.map(|t| t.number).fold(spec.number, i32::min),
        members: recorded.iter().map(|t| t.members).max().unwrap_or(0),
        promised: recorded.iter().all(|t| t.promised()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pod::synchronous::SyncMethod;

    fn required(number: i32) -> SynchronousSpec {
        SynchronousSpec {
            number,
            method: SyncMethod::Any,
            data_durability: DataDurability::Required,
        }
    }

    #[test]
    fn raised_terms_are_added_to_the_old_ones_until_every_member_runs_them() {
        let old = Terms::of(Some(&required(1)), 3);
        let new = Terms::of(Some(&required(2)), 3);
        let kept = record(new, Some(&[old]), Applied::NotYet, 3);
        assert_eq!(kept, vec![old, new]);
        assert_eq!(record(new, Some(&kept), Applied::Everywhere, 3), vec![new]);
    }

    #[test]
    fn the_quorum_takes_the_fewest_standbys_and_the_most_members_recorded() {
        let terms = [
            Terms::of(Some(&required(1)), 3),
            Terms::of(Some(&required(2)), 2),
        ];
        let q = quorum(Some(&required(2)), &terms).expect("Required asks for a quorum");
        assert_eq!((q.number, q.members, q.promised), (1, 3, true));
        // Both other members of three: one standby of two may alone have a commit.
        assert_eq!(q.needed(), 2);
    }

    #[test]
    fn terms_that_were_not_required_leave_nothing_promised_but_the_quorum_stands() {
        let preferred = SynchronousSpec {
            data_durability: DataDurability::Preferred,
            ..required(1)
        };
        let terms = [Terms::of(Some(&preferred), 3), Terms::of(None, 3)];
        let q = quorum(Some(&required(1)), &terms).expect("Required asks for a quorum");
        assert!(!q.promised);
        assert_eq!(q.needed(), 2);
        assert_eq!(quorum(Some(&preferred), &terms), None);
        assert_eq!(quorum(None, &terms), None);
    }

    #[test]
    fn a_lost_record_is_taken_for_the_weakest_terms_over_every_member_seen() {
        let spec = Terms::of(Some(&required(2)), 3);
        let terms = record(spec, None, Applied::NotYet, 4);
        assert_eq!(terms, vec![Terms::unknown(4), spec]);
        let q = quorum(Some(&required(2)), &terms).expect("Required asks for a quorum");
        assert_eq!((q.number, q.members, q.promised), (1, 4, false));
    }
}
