//! Shrinking a failing sequence further than proptest does, to a fixed point, so a
//! counterexample reads as the few events that matter.

use super::sim::Sim;
use super::*;

/// Whether `events` fail from `world` (a panic counts as a failure).
pub(super) fn fails<M: Machine, W: WorldModel<M>>(
    config: &CheckConfig,
    world: &W,
    events: &[Event<W::Move, W::Edit>],
) -> bool {
    let mut sim = Sim::<M, W>::new(config, world.clone(), false);
    !matches!(
        catch_unwind(AssertUnwindSafe(|| sim.run(events))),
        Ok(Ok(()))
    )
}

/// Shrink further than proptest does. Proptest deletes each element once and then
/// simplifies elements, so an event that only became redundant when another was
/// simplified stays. This repeats, to a fixed point: drop each event; make each
/// reconcile fresh and fault-free, one aspect at a time; shorten each clock advance.
pub(super) fn minimize<M: Machine, W: WorldModel<M>>(
    config: &CheckConfig,
    world: &W,
    mut events: Vec<Event<W::Move, W::Edit>>,
) -> Vec<Event<W::Move, W::Edit>> {
    // Each attempt is one short simulated run; the bound keeps a pathological case finite.
    let mut budget = 20_000_usize;
    let mut progress = true;
    while progress && budget > 0 {
        progress = false;
        let mut i = 0;
        while i < events.len() && budget > 0 {
            budget -= 1;
            let mut candidate = events.clone();
            candidate.remove(i);
            if fails::<M, W>(config, world, &candidate) {
                events = candidate;
                progress = true;
            } else {
                i += 1;
            }
        }
        for i in 0..events.len() {
            let simpler: Vec<Event<W::Move, W::Edit>> = match &events[i] {
                Event::Reconcile(r) => [
                    Reconcile::FRESH,
                    Reconcile {
                        fault: Fault::None,
                        ..*r
                    },
                    Reconcile {
                        object_lag: 0,
                        world_lag: 0,
                        ..*r
                    },
                    Reconcile {
                        object_lag: 0,
                        ..*r
                    },
                    Reconcile { world_lag: 0, ..*r },
                ]
                .into_iter()
                .filter(|s| s != r)
                .map(Event::Reconcile)
                .collect(),
                Event::Tick(secs) if *secs > 1 => vec![Event::Tick(1), Event::Tick(secs / 2)],
                _ => Vec::new(),
            };
            for candidate_event in simpler {
                if budget == 0 {
                    break;
                }
                budget -= 1;
                let mut candidate = events.clone();
                candidate[i] = candidate_event;
                if fails::<M, W>(config, world, &candidate) {
                    events = candidate;
                    progress = true;
                    break;
                }
            }
        }
    }
    events
}
