//! BackingUp: an on-demand backup runs (the shared protocol is
//! [`crate::machines::common::on_demand`]).

use super::{D, shape_at, upkeep};
use crate::engine::World;
use crate::machines::common::on_demand;
use crate::machines::distributeddb::api::DistributedDBSpec;
use crate::machines::distributeddb::observe::Observed;
use crate::machines::distributeddb::state::DdbState;

pub(crate) fn backing_up(
    spec: &DistributedDBSpec,
    version: &str,
    replicas: i32,
    request: (&str, &str),
    world: &World<Observed>,
) -> D {
    let o = &world.observed;
    let back = DdbState::Ready {
        version: version.to_owned(),
        replicas,
    };
    let shape = shape_at(spec, version, replicas, o);
    let actions = upkeep(spec, &shape, o);
    let facts = on_demand::Facts::of(world, request, spec.backup_policy.is_some(), "backupPolicy");
    on_demand::backing_up(facts, back, actions)
}
