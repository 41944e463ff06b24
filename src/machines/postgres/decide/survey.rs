//! Failover's survey: which standby is the most advanced, by the timelines and WAL
//! positions each standby's instance manager answered to the survey's token
//! ([`crate::machines::postgres::answers`]).
//!
//! Positions are compared only on one history: a standby on an older timeline than
//! another holds nothing past the newer timeline's fork that the cluster still has (it
//! either has not switched yet, and stops at or before the fork, or it received WAL
//! the old timeline's primary wrote after the fork, which no newer member has and a
//! rewind discards). So the newest timeline ranks first, then the positions.

use std::cmp::Reverse;

use crate::machines::postgres::actions::Role;
use crate::machines::postgres::observe::Observed;
use crate::machines::postgres::state::{PodRef, Surveyed};

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

/// The most advanced standby of `surveyed` that is a Ready replica now (not `old`, not
/// `demoted`, not `excluded`): the newest timeline, then the highest receive LSN, then
/// the highest replay LSN, then the lowest ordinal. A pod the survey did not reach is
/// never chosen.
pub(crate) fn most_advanced(
    o: &Observed,
    surveyed: &[Surveyed],
    old: i32,
    excluded: Option<&PodRef>,
) -> Option<PodRef> {
    surveyed
        .iter()
        .filter(|s| s.ordinal != old)
        .filter_map(|s| {
            let p = o.pods.get(&s.ordinal)?;
            let usable = p.serving()
                && p.role != Some(Role::Demoted)
                && excluded.is_none_or(|e| e.ordinal != s.ordinal || e.uid != p.uid);
            usable.then_some((s, p))
        })
        .max_by_key(|(s, _)| {
            (
                s.timeline.unwrap_or(0),
                lsn(&s.receive)
                    .unwrap_or(0)
                    .max(lsn(&s.replay).unwrap_or(0)),
                lsn(&s.replay).unwrap_or(0),
                Reverse(s.ordinal),
            )
        })
        .map(|(s, p)| PodRef {
            ordinal: s.ordinal,
            uid: p.uid.clone(),
        })
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
