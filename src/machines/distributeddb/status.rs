//! The DistributedDB's own status fields, projected from the persisted state and the
//! observation (the engine projects the rest).

use super::api::LastBackup;
use super::observe::{Observed, PodView};
use super::state::DdbState;
use crate::machines::common::jobs::JobOutcome;

/// The version a state vouches for: the image every pod ran when it last came to rest.
pub fn version(state: Option<&DdbState>) -> Option<String> {
    match state? {
        DdbState::Ready { version, .. }
        | DdbState::Scaling { version, .. }
        | DdbState::BackingUp { version, .. } => Some(version.clone()),
        DdbState::Upgrading(u) => Some(u.from.clone()),
        DdbState::Creating | DdbState::Finalizing { .. } | DdbState::Finalized => None,
    }
}

/// How many of the observed pods (not terminating) `pick` holds for.
pub fn count(observed: &Observed, pick: impl Fn(&PodView) -> bool) -> i32 {
    let n = observed
        .pods
        .values()
        .filter(|p| !p.terminating && pick(p))
        .count();
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// The most recent finished backup among the observed Jobs, or `before` if that is more
/// recent (Jobs are pruned; the status remembers).
pub fn last_backup(observed: &Observed, before: Option<&LastBackup>) -> Option<LastBackup> {
    let seen = observed
        .jobs
        .iter()
        .filter(|j| j.purpose.is_some_and(|p| p.is_backup()))
        .filter_map(|j| {
            let time = j.outcome.finished_at()?;
            let outcome = match &j.outcome {
                JobOutcome::Succeeded { .. } => "Succeeded".to_owned(),
                other => other.describe(),
            };
            Some(LastBackup {
                time,
                job: j.name.clone(),
                outcome,
            })
        })
        .max_by(|a, b| (a.time, &a.job).cmp(&(b.time, &b.job)));
    match (seen, before) {
        (Some(seen), Some(before)) if before.time > seen.time => Some(before.clone()),
        (None, before) => before.cloned(),
        (seen, _) => seen,
    }
}
