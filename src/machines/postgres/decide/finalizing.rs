//! Deletion: a final backup before the finalizer goes (the shared protocol is
//! [`crate::machines::common::finalize`]).

use super::D;
use crate::engine::World;
use crate::machines::common::backup::BackupKind;
use crate::machines::common::finalize;
use crate::machines::postgres::actions::PgAction;
use crate::machines::postgres::api::PostgresClusterSpec;
use crate::machines::postgres::observe::Observed;
use crate::machines::postgres::state::PgState;

pub(crate) fn begin_finalizing(spec: &PostgresClusterSpec, o: &Observed) -> D {
    finalize::begin(
        spec.backup.is_some(),
        o.requests.skip_final_backup,
        || PgState::Finalized,
        |attempt| PgState::Finalizing { attempt },
    )
}

pub(crate) fn finalizing(spec: &PostgresClusterSpec, attempt: u32, world: &World<Observed>) -> D {
    let o = &world.observed;
    let key = finalize::key(attempt);
    let verdict = finalize::step(finalize::Facts {
        configured: spec.backup.is_some(),
        skip: o.requests.skip_final_backup,
        attempt,
        job: o.job(&key).map(|j| &j.outcome),
        now: world.now,
    });
    finalize::decision(
        verdict,
        || PgState::Finalized,
        |attempt| PgState::Finalizing { attempt },
        |key| PgAction::RunBackup {
            key,
            kind: BackupKind::Final,
        },
    )
    .with_actions(
        finalize::stale(attempt, &o.jobs)
            .into_iter()
            .map(|j| PgAction::DeleteJob {
                name: j.name.clone(),
                uid: j.uid.clone(),
            }),
    )
}
