//! The planted bug of the in-place restore: a restore that takes "no pod is left" for
//! "nothing writes". A primary force-deleted while its node is partitioned keeps its
//! server running, writable, until its own fence stops it; a restore that goes on
//! without waiting for the Lease it renewed to expire replaces the volumes while that
//! server still writes (the restore's no-writer invariant), and would make the restored
//! primary writable beside it.

use super::planted::{assert_took, found, passes};
use super::scenarios::story::{adopt, expired, r};
use super::*;
use crate::engine::World as Seen;
use crate::engine::planted::{Bug, Planted};
use crate::machines::postgres::state::RestoreStep;

/// While writes stop, the restore reads no Lease: it waits for the pods alone.
struct ForgetTheLeaseWhileStopping;

impl Bug<Postgres> for ForgetTheLeaseWhileStopping {
    const NAME: &'static str = "postgrescluster-restore-without-fence";

    fn distort(state: &PgState, world: &Seen<Observed>) -> Option<Seen<Observed>> {
        let PgState::RestoringInPlace(r) = state else {
            return None;
        };
        (r.restore_step == RestoreStep::StopWrites).then(|| {
            // The bug: whoever the Lease names reads as having released it (a missing
            // Lease is no longer a way to skip the wait: it is recreated and waited out).
            let mut lying = world.clone();
            if let Some(lease) = lying.observed.own.lease.as_mut() {
                lease.released_by = Some(lease.holder.clone().unwrap_or_default());
            }
            lying
        })
    }
}

/// Restore once the pods are gone, whoever may still hold the Lease.
type RestoreWithoutFence = Planted<Postgres, ForgetTheLeaseWhileStopping>;

/// Three pods, pod 0 primary with a commit. Pod 0 is force-deleted while its node is
/// partitioned: its server runs on, writable. A restore to the start is requested; the
/// StatefulSet scales to zero and pods 1 and 2 go; pod 0 comes back alone, restores
/// and starts writable. With `fenced`, the clock first passes the Lease's expiry (the
/// cut-off server's own fence stopped it by then).
fn restore_while_a_force_deleted_primary_runs(fenced: bool) -> (World, Vec<Event<Move, Edit>>) {
    use Move::*;
    let env = Event::Env;
    let mut world = World::fresh(3, true, 0);
    world.running();
    let mut events = [
        adopt(),
        vec![env(Write), env(Replicate(1)), env(Replicate(2))],
        vec![env(ForceDeleted(0)), env(RequestRestore(0)), r(), r()],
        vec![env(ScaledDown), r()],
    ]
    .concat();
    if fenced {
        events.extend([Event::Tick(expired()), r()]);
    }
    events.extend([
        r(),
        r(),
        env(Recreate(0)),
        r(),
        r(),
        r(),
        env(AgentTick(0)),
        env(AgentTick(0)),
        env(AgentTick(0)),
        env(AgentTick(0)),
    ]);
    (world, events)
}

#[test]
fn an_in_place_restore_waits_for_a_force_deleted_primary_to_be_fenced() {
    let report = passes(restore_while_a_force_deleted_primary_runs(true));
    assert_took(
        &report,
        "RestoringInPlace -> RestoringInPlace (WritesStopped)",
    );
    assert_took(&report, "RestoringInPlace -> Ready (RestoreCompleted)");
}

#[test]
fn the_model_check_finds_a_restore_that_does_not_wait_for_the_fence() {
    let failure = found::<RestoreWithoutFence>(restore_while_a_force_deleted_primary_runs(false));
    assert!(
        failure
            .reason
            .contains("pod 0 runs a writable server while restore r1 replaces the volumes"),
        "the restore's no-writer invariant fails:\n{failure}"
    );
}
