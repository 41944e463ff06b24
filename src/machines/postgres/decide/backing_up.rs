//! BackingUp: an on-demand backup runs (the shared protocol is
//! [`crate::machines::common::on_demand`]).

use super::primary_lost::{lose_primary, primary_down};
use super::{D, upkeep_at};
use crate::machines::common::backup::BackupKind;
use crate::machines::common::on_demand;
use crate::machines::postgres::actions::PgAction;
use crate::machines::postgres::actions::backup_key;
use crate::machines::postgres::api::PostgresClusterSpec;
use crate::machines::postgres::observe::Observed;
use crate::machines::postgres::state::{PgState, Topology};

pub(crate) fn backing_up(
    spec: &PostgresClusterSpec,
    cluster: &Topology,
    request: &str,
    served: Option<&str>,
    in_state: std::time::Duration,
    o: &Observed,
) -> D {
    let back = PgState::Ready {
        cluster: cluster.clone(),
    };
    let actions = upkeep_at(spec, cluster, o);
    if primary_down(cluster, o) {
        return lose_primary(cluster, o);
    }
    let key = backup_key(request);
    let verdict = on_demand::step(on_demand::Facts {
        token: request,
        created: served == Some(request),
        configured: spec.backup.is_some(),
        field: "spec.backup",
        job: o.job(&key).map(|j| (&j.outcome, j.name.as_str())),
        in_state,
    });
    on_demand::decision(
        verdict,
        || back,
        actions,
        |key| PgAction::RunBackup {
            key,
            kind: BackupKind::OnDemand,
        },
    )
}
