//! BackingUp: an on-demand backup runs (the shared protocol is
//! [`crate::machines::common::on_demand`]).

use super::primary_lost::{lose_primary, primary_down};
use super::{D, upkeep_at};
use crate::engine::World;
use crate::machines::common::on_demand;
use crate::machines::postgres::api::PostgresClusterSpec;
use crate::machines::postgres::observe::Observed;
use crate::machines::postgres::state::{PgState, Topology};

pub(crate) fn backing_up(
    spec: &PostgresClusterSpec,
    cluster: &Topology,
    request: (&str, &str),
    world: &World<Observed>,
) -> D {
    let o = &world.observed;
    let back = PgState::Ready {
        cluster: cluster.clone(),
    };
    let actions = upkeep_at(spec, cluster, o);
    if let Some(lost) = primary_down(spec, cluster, o, world.now) {
        return lose_primary(cluster, o, &lost);
    }
    let facts = on_demand::Facts::of(world, request, spec.backup.is_some(), "spec.backup");
    on_demand::backing_up(facts, back, actions)
}
