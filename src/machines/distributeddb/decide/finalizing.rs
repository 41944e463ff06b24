//! Deletion: a final backup before the finalizer goes (the shared protocol is
//! [`crate::machines::common::finalize`]).

use super::D;
use crate::engine::World;
use crate::machines::common::backup::BackupKind;
use crate::machines::common::finalize;
use crate::machines::distributeddb::actions::DdbAction;
use crate::machines::distributeddb::api::DistributedDBSpec;
use crate::machines::distributeddb::observe::Observed;
use crate::machines::distributeddb::state::DdbState;

pub(crate) fn begin_finalizing(spec: &DistributedDBSpec, o: &Observed) -> D {
    finalize::begin(
        spec.backup_policy.is_some(),
        o.requests.skip_final_backup,
        || DdbState::Finalized,
        |attempt| DdbState::Finalizing { attempt },
    )
}

pub(crate) fn finalizing(spec: &DistributedDBSpec, attempt: u32, world: &World<Observed>) -> D {
    let o = &world.observed;
    let key = finalize::key(attempt);
    let verdict = finalize::step_named(
        finalize::Facts {
            configured: spec.backup_policy.is_some(),
            skip: o.requests.skip_final_backup,
            attempt,
            job: o.job(&key).map(|j| &j.outcome),
            now: world.now,
        },
        o.job(&key).map(|j| j.name.as_str()),
    );
    finalize::decision(
        verdict,
        || DdbState::Finalized,
        |attempt| DdbState::Finalizing { attempt },
        |key| DdbAction::RunBackup {
            key,
            kind: BackupKind::Final,
        },
    )
    .with_actions(finalize::stale(attempt, &o.jobs).into_iter().map(|j| {
        DdbAction::DeleteJob {
            name: j.name.clone(),
            uid: j.uid.clone(),
        }
    }))
}
