//! Failover's survey: which standby is the most advanced, by the timelines and WAL
//! positions each standby's instance manager answered to the survey's token
//! ([`crate::pod::answers`]).
//!
//! Positions are compared only on one history: a standby on an older timeline than
//! another holds nothing past the newer timeline's fork that the cluster still has (it
//! either has not switched yet, and stops at or before the fork, or it received WAL
//! the old timeline's primary wrote after the fork, which no newer member has and a
//! rewind discards). So the newest timeline ranks first, then the positions.

use std::cmp::Reverse;

use crate::machines::postgres::observe::Observed;
use crate::machines::postgres::state::{PodRef, Surveyed};
use crate::pod::Role;
use crate::pod::synchronous::{DataDurability, SynchronousSpec};

/// An LSN (`16/B374D848`) as a number; `None` if it is not one.
pub(crate) fn lsn(text: &str) -> Option<u64> {
    let (hi, lo) = text.trim().split_once('/')?;
    let hi = u64::from_str_radix(hi, 16).ok()?;
    let lo = u64::from_str_radix(lo, 16).ok()?;
    (hi <= u64::from(u32::MAX) && lo <= u64::from(u32::MAX)).then_some((hi << 32) | lo)
}

/// The standbys that answered the survey `token`, by ordinal (the observation holds
/// live pods' answers only; an answer to another survey does not count).
pub(crate) fn answered(o: &Observed, token: &str) -> Vec<Surveyed> {
    o.own
        .answers
        .iter()
        .filter(|(_, a)| a.token == token)
        .map(|(k, a)| Surveyed {
            ordinal: *k,
            receive: a.received.to_string(),
            replay: a.replayed.to_string(),
            timeline: Some(a.timeline).filter(|t| *t > 0),
        })
        .collect()
}

/// Which standbys a failover's choice may take ([`most_advanced`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reach {
    /// The most advanced Ready replica read: without `spec.synchronous` `Required`,
    /// commits only a member that is not Ready has may be lost (nothing promised them).
    AnyReady,
    /// Only a Ready replica at the furthest position any member read, Ready or not:
    /// under `Required` an acknowledged commit may be on one member alone, and a member
    /// whose readiness probe fails may still have streamed it (its port blocked from
    /// outside while its manager answers). Promoting one below it would lose it.
    Furthest,
}

impl Reach {
    /// What `spec.synchronous` promises: [`Reach::Furthest`] under `Required` with at
    /// least one synchronous standby, [`Reach::AnyReady`] otherwise.
    pub(crate) fn of(sync: Option<&SynchronousSpec>) -> Reach {
        if sync.is_some_and(|s| s.data_durability == DataDurability::Required && s.number > 0) {
            Reach::Furthest
        } else {
            Reach::AnyReady
        }
    }
}

/// How far a surveyed member reached: its timeline (see the module doc: positions are
/// compared on one history only), then the furthest WAL it received or replayed.
pub(crate) fn reach(s: &Surveyed) -> (u32, u64) {
    let received = lsn(&s.receive).unwrap_or(0);
    let replayed = lsn(&s.replay).unwrap_or(0);
    (s.timeline.unwrap_or(0), received.max(replayed))
}

/// The furthest position any member of `surveyed` reached, `old` (the old primary)
/// aside, whether or not it is Ready now or may be promoted; `None` if none was read.
pub(crate) fn furthest(surveyed: &[Surveyed], old: i32) -> Option<(u32, u64)> {
    surveyed
        .iter()
        .filter(|s| s.ordinal != old)
        .map(reach)
        .max()
}

/// What a failover's choice among the surveyed members excludes, and how far the one
/// it chooses must have reached.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Choice<'a> {
    /// The old primary's ordinal: never chosen, and its own position not weighed.
    pub old: i32,
    /// Only ordinals below this may be chosen (a scale-down's bound).
    pub below: i32,
    /// A pod not to choose again (a target that was replaced or is not Ready).
    pub excluded: Option<&'a PodRef>,
    /// How far the chosen one must have reached.
    pub within: Reach,
}

impl<'a> Choice<'a> {
    /// The choice of a failover from `old` under `synchronous`, among ordinals below
    /// `below`, excluding no one.
    pub(crate) fn of(synchronous: Option<&SynchronousSpec>, old: i32, below: i32) -> Self {
        Choice {
            old,
            below,
            excluded: None,
            within: Reach::of(synchronous),
        }
    }

    /// The same choice, never taking `target` again.
    pub(crate) fn excluding(self, target: &'a PodRef) -> Self {
        Choice {
            excluded: Some(target),
            ..self
        }
    }
}

/// The most advanced standby of `surveyed` that is a Ready replica now (not
/// `choice.old`, not `demoted`, not `choice.excluded`, below `choice.below`): the newest
/// timeline, then the highest receive LSN, then the highest replay LSN, then the lowest
/// ordinal. A pod the survey did not reach is never chosen. With [`Reach::Furthest`]
/// only one at the [`furthest`] position of all of `surveyed` (the excluded, the members
/// not Ready and those beyond the bound included) qualifies: `None` while every member
/// that far is not a Ready replica.
pub(crate) fn most_advanced(
    o: &Observed,
    surveyed: &[Surveyed],
    choice: Choice<'_>,
) -> Option<PodRef> {
    let Choice {
        old,
        below,
        excluded,
        within,
    } = choice;
    let floor = match within {
        Reach::Furthest => furthest(surveyed, old),
        Reach::AnyReady => None,
    };
    surveyed
        .iter()
        .filter(|s| s.ordinal != old && s.ordinal < below)
        .filter(|s| floor.is_none_or(|f| reach(s) >= f))
        .filter_map(|s| {
            let p = o.pods.get(&s.ordinal)?;
            let usable = p.serving()
                && p.role != Some(Role::Demoted)
                && excluded.is_none_or(|e| e.ordinal != s.ordinal || e.uid != p.uid);
            usable.then_some((s, p))
        })
        .max_by_key(|(s, _)| (reach(s), lsn(&s.replay).unwrap_or(0), Reverse(s.ordinal)))
        .map(|(s, p)| PodRef {
            ordinal: s.ordinal,
            uid: p.uid.clone(),
        })
}

/// The members of `surveyed` at the [`furthest`] position (`old` aside) that are not a
/// Ready replica now: under `Required`, the ones a failover waits for.
pub(crate) fn furthest_unready(o: &Observed, surveyed: &[Surveyed], old: i32) -> Vec<i32> {
    let Some(top) = furthest(surveyed, old) else {
        return vec![];
    };
    surveyed
        .iter()
        .filter(|s| s.ordinal != old && reach(s) == top)
        .filter(|s| {
            o.pods
                .get(&s.ordinal)
                .is_none_or(|p| !p.serving() || p.role == Some(Role::Demoted))
        })
        .map(|s| s.ordinal)
        .collect()
}

/// The positions of `surveyed`, for messages: `pg-1 timeline 2 receive 0/3000060
/// replay 0/3000060` (no timeline where the survey read none); `none answered` when
/// nobody did.
pub(crate) fn describe(o: &Observed, surveyed: &[Surveyed]) -> String {
    if surveyed.is_empty() {
        return "none answered".to_owned();
    }
    surveyed
        .iter()
        .map(|s| {
            format!(
                "{}{} receive {} replay {}",
                o.pod_name(s.ordinal),
                s.timeline
                    .map(|t| format!(" timeline {t}"))
                    .unwrap_or_default(),
                if s.receive.is_empty() {
                    "-"
                } else {
                    &s.receive
                },
                s.replay
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}
