//! Planted bugs: a machine that is another machine except for one decision, for a model
//! check to show that its invariants catch that mistake. Public with the `check` feature,
//! so that machines outside this crate can plant their own.
//!
//! ```ignore
//! struct TrustTheLease;
//! impl Bug<Postgres> for TrustTheLease {
//!     const NAME: &'static str = "postgrescluster-trust-the-lease";
//!     fn distort(state: &PgState, world: &World<Observed>) -> Option<World<Observed>> {
//!         /* the world as the buggy decision sees it */
//!     }
//! }
//! check_scenario::<Planted<Postgres, TrustTheLease>, Cluster>(&config, world, &events)
//!     .expect_err("the planted bug is found");
//! ```

use std::marker::PhantomData;

use super::machine::{Decision, Edge, Machine, World};

/// One decision machine `M` gets wrong, planted: the world that decision is shown
/// instead of the one observed ([`Bug::distort`]), or the decision itself changed
/// ([`Bug::alter`]). Each defaults to the correct machine's.
pub trait Bug<M: Machine>: 'static {
    /// The planted machine's name.
    const NAME: &'static str;
    /// The world as the buggy decision in `state` sees it (`None`: this state decides
    /// correctly).
    fn distort(state: &M::State, world: &World<M::Observed>) -> Option<World<M::Observed>> {
        let _ = (state, world);
        None
    }
    /// The decision the buggy machine makes in `state`, given the one `M` made (for a
    /// mistake in what is decided rather than in what is seen: a verdict not recorded,
    /// an action forgotten).
    fn alter(
        state: &M::State,
        decision: Decision<M::State, M::Action>,
    ) -> Decision<M::State, M::Action> {
        let _ = state;
        decision
    }
}

/// `M` with bug `B` planted: everything but the distorted decision is `M`'s own.
pub struct Planted<M, B>(PhantomData<(M, B)>);

impl<M: Machine, B: Bug<M>> Machine for Planted<M, B> {
    const NAME: &'static str = B::NAME;
    const STATE_VERSION: u32 = M::STATE_VERSION;
    const DELETION_WAY_OUT: Option<&'static str> = M::DELETION_WAY_OUT;

    type Spec = M::Spec;
    type State = M::State;
    type Kind = M::Kind;
    type Observed = M::Observed;
    type Action = M::Action;

    fn initial() -> M::State {
        M::initial()
    }

    fn table() -> &'static [Edge<M::Kind>] {
        M::table()
    }

    fn decide(
        spec: &M::Spec,
        state: &M::State,
        world: &World<M::Observed>,
    ) -> Decision<M::State, M::Action> {
        let decision = match B::distort(state, world) {
            Some(lying) => M::decide(spec, state, &lying),
            None => M::decide(spec, state, world),
        };
        B::alter(state, decision)
    }

    fn is_ready(state: &M::State) -> bool {
        M::is_ready(state)
    }

    fn rests(state: &M::State) -> bool {
        M::rests(state)
    }

    fn deadline(state: &M::State) -> crate::engine::Deadline {
        M::deadline(state)
    }

    fn finalized(state: &M::State) -> bool {
        M::finalized(state)
    }

    fn acks(state: &M::State) -> Vec<(&'static str, String)> {
        M::acks(state)
    }

    fn holds_data(observed: &M::Observed) -> bool {
        M::holds_data(observed)
    }

    fn step_label(state: &M::State) -> Option<String> {
        M::step_label(state)
    }
}
