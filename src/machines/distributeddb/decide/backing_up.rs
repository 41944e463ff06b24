//! BackingUp: an on-demand backup runs (the shared protocol is
//! [`crate::machines::common::on_demand`]).

use super::{D, shape_at, upkeep};
use crate::machines::common::on_demand;
use crate::machines::distributeddb::api::DistributedDBSpec;
use crate::machines::distributeddb::observe::Observed;
use crate::machines::distributeddb::state::DdbState;

pub(crate) fn backing_up(
    spec: &DistributedDBSpec,
    version: &str,
    replicas: i32,
    request: &str,
    served: Option<&str>,
    in_state: std::time::Duration,
    o: &Observed,
) -> D {
    let back = DdbState::Ready {
        version: version.to_owned(),
        replicas,
    };
    let shape = shape_at(spec, version, replicas, o);
    let actions = upkeep(spec, &shape, o);
    let facts = on_demand::Facts {
        token: request,
        created: served == Some(request),
        configured: spec.backup_policy.is_some(),
        field: "backupPolicy",
        job: on_demand::job(&o.jobs, request),
        in_state,
    };
    on_demand::backing_up(facts, back, actions)
}
