//! A PostgresCluster world narrowed to one feature: its own initial worlds, and an
//! environment that leans on the moves that feature needs, beside every other move.
//! Generated runs of a focused world reach a planted bug that needs a particular
//! chain of moves (a commit that reaches one standby, that standby's probe failing,
//! the primary lost) in a few hundred cases, where the whole world's mix would need
//! tens of thousands. Everything else is the [`World`]'s own: its spec, its actions,
//! its invariants, its settling.

use std::fmt::Debug;
use std::marker::PhantomData;

use super::*;

/// What a focused world changes of [`World`].
pub(super) trait Focus: Clone + Debug + 'static {
    /// The worlds a check starts from.
    fn initial() -> BoxedStrategy<World>;

    /// The moves the feature needs, weighted up; the world's own moves are mixed in
    /// beside them by [`Focused`].
    fn moves() -> BoxedStrategy<Move>;

    /// The spec edits to generate: the world's own unless a focus narrows them.
    fn edits() -> BoxedStrategy<Edit> {
        <World as WorldModel<Postgres>>::spec_edits()
    }
}

/// [`World`] narrowed by the focus `F`.
#[derive(Clone, Debug)]
pub(super) struct Focused<F: Focus>(pub(super) World, PhantomData<F>);

impl<F: Focus> Focused<F> {
    /// `world`, focused by `F`.
    pub(super) fn new(world: World) -> Self {
        Focused(world, PhantomData)
    }
}

impl<M, F> WorldModel<M> for Focused<F>
where
    M: Machine<Spec = PostgresClusterSpec, State = PgState, Observed = Observed, Action = PgAction>,
    F: Focus,
{
    type Move = Move;
    type Edit = Edit;

    fn initial() -> BoxedStrategy<Self> {
        F::initial().prop_map(Focused::new).boxed()
    }
    fn spec(&self) -> PostgresClusterSpec {
        <World as WorldModel<M>>::spec(&self.0)
    }
    fn spec_edits() -> BoxedStrategy<Edit> {
        F::edits()
    }
    fn edit_spec(&mut self, edit: &Edit) {
        <World as WorldModel<M>>::edit_spec(&mut self.0, edit);
    }
    fn observe(&self) -> Observed {
        <World as WorldModel<M>>::observe(&self.0)
    }
    fn apply(&mut self, action: &PgAction) {
        <World as WorldModel<M>>::apply(&mut self.0, action);
    }
    fn environment_moves() -> BoxedStrategy<Move> {
        prop_oneof![
            3 => F::moves(),
            1 => <World as WorldModel<M>>::environment_moves(),
        ]
        .boxed()
    }
    fn step_environment(&mut self, mv: &Move) {
        <World as WorldModel<M>>::step_environment(&mut self.0, mv);
    }
    fn invariants(&self, state: &PgState) -> Result<(), String> {
        <World as WorldModel<M>>::invariants(&self.0, state)
    }
    fn converged(&self, state: &PgState) -> bool {
        <World as WorldModel<M>>::converged(&self.0, state)
    }
    fn settle(&mut self) {
        <World as WorldModel<M>>::settle(&mut self.0);
    }
    fn clock(&mut self, now: DateTime<Utc>) {
        <World as WorldModel<M>>::clock(&mut self.0, now);
    }
    fn deleted(&mut self) {
        <World as WorldModel<M>>::deleted(&mut self.0);
    }
}
