//! Model checking a machine against a simulated world, with proptest.
//!
//! [`check_machine`] drives the real [`step`](super::step::step) — the same pure function
//! the driver calls — against a machine author's [`WorldModel`], through a randomly
//! generated sequence of [`Event`]s that interleaves reconciles with the faults a
//! controller meets in a cluster. After every event it checks safety properties; after the
//! whole sequence it turns the faults off and checks bounded liveness. A failure is shrunk
//! to a short sequence and reported as a numbered list of events with a trace of the run.
//!
//! # What is checked
//! After every reconcile:
//! - every transition taken is declared in [`Machine::table`] (checked here against the
//!   table, independently of the engine's own check), and the persisted record changes
//!   exactly when a transition is reported;
//! - the machine never *attempts* an undeclared transition (the engine would refuse it and
//!   report `Degraded`; here that is a machine bug) and the record never stops decoding;
//! - `step` is deterministic: the same input twice gives the same outcome;
//! - `changed` is true exactly when the new status differs from the one read;
//! - the status survives a JSON round trip unchanged, and so does the state
//!   (`decode(encode(x)) == x`);
//! - the persisted `observedGeneration` never decreases and never runs ahead of
//!   `metadata.generation`;
//! - the finalizer is released only while deleting and only once the persisted state is
//!   [`Machine::finalized`].
//!
//! After every event: the world model's [`WorldModel::invariants`] hold for the persisted
//! state.
//!
//! After the sequence (faults off): the world is [settled](WorldModel::settle) before each
//! reconcile; within [`CheckConfig::liveness_reconciles`] reconciles the machine reaches a
//! state the world model calls [converged](WorldModel::converged), with `observedGeneration`
//! caught up with the spec (or, once deleted, its finalizer is released); then no
//! reconcile acts or transitions, and after at most one status-only refresh (a condition
//! whose cause the settled world removed) every reconcile writes nothing. Time passes in this phase only
//! when nothing else would trigger a reconcile: after an idle reconcile the clock advances
//! by its requeue, and an idle reconcile with no requeue, or one asking to requeue at
//! once, is a failure (the machine would wait forever, or spin).
//!
//! Every declared edge must be taken: the report lists the edges no generated case took
//! ([`CheckReport::unexercised`]); [`check_scenario`] runs a fixed sequence under the same
//! properties for an edge that generated sequences seldom reach, and
//! [`assert_every_edge_taken`] asserts that generated cases and scenarios together take
//! the whole table.
//!
//! # Fault model
//! Every reconcile starts from the persisted status as JSON (`EngineStatus` deserialized
//! from a string), never from a value kept in memory, so a crash loses nothing the
//! machine could rely on. On top of that the generated events include:
//! - **stale caches**: a reconcile may read the custom resource (status, spec, generation,
//!   deletion) or the owned objects as they were up to [`CheckConfig::max_staleness`]
//!   events ago. Within one operator process each cache only moves forward; after a
//!   restart or crash it may serve an older view again;
//! - **crash**: the operator dies after executing some of a reconcile's actions and before
//!   its status write, or right after the write (before removing the finalizer);
//! - **409 Conflict** on the status write: the actions ran, the write is lost, and another
//!   writer bumped the resourceVersion;
//! - **500** on the status write: the actions ran, the write is lost;
//! - **a failing action**: the driver stops at the failing action and records `lastError`
//!   (through [`with_error`](super::step::with_error)) with a fenced write;
//! - **dropped events**: environment moves happen with no reconcile after them;
//! - **spec edits** (generation bumps), **deletion**, and **clock advances**.
//!
//! Status writes are fenced: a write from a reconcile that read an older resourceVersion
//! fails with 409 and changes nothing.
//!
//! # Plugging a machine in
//! Write a world model for the machine's tests and call the entry point. The world model
//! holds the spec too, so a stale read of the custom resource sees the spec of its moment.
//! Its `Debug` output appears in counterexamples: keep it short. A complete example is the
//! rolling restart in `src/engine/tests/restart.rs`; a machine outside this crate (the
//! canary rollout in `examples/canary/`) enables the `check` feature, which makes this
//! module and [`super::planted`] public.
//!
//! ```ignore
//! use proptest::prelude::*;
//! use crate::engine::check::{self, CheckConfig, WorldModel};
//!
//! #[derive(Clone, Debug)]
//! struct Cluster { replicas: u32, pods: Vec<Option<Pod>>, next_uid: u64 }
//!
//! impl WorldModel<MyMachine> for Cluster {
//!     type Move = ClusterMove;   // e.g. PodReady(u8), JobFails(u8), Recreate(u8)
//!     type Edit = SpecEdit;      // e.g. Scale(u32), Upgrade(String)
//!     fn initial() -> BoxedStrategy<Self> { Just(Cluster::new(3)).boxed() }
//!     fn spec(&self) -> MySpec { MySpec { replicas: self.replicas } }
//!     fn spec_edits() -> BoxedStrategy<SpecEdit> { (1u32..5).prop_map(SpecEdit::Scale).boxed() }
//!     fn edit_spec(&mut self, edit: &SpecEdit) { /* change what spec() returns */ }
//!     fn observe(&self) -> MyObserved { /* what Operator::observe would see */ }
//!     fn apply(&mut self, action: &MyAction) { /* NotFound / failed UID precondition: no-op */ }
//!     fn environment_moves() -> BoxedStrategy<ClusterMove> { /* ... */ }
//!     fn step_environment(&mut self, mv: &ClusterMove) { /* a move that does not apply: no-op */ }
//!     fn invariants(&self, state: &MyState) -> Result<(), String> { /* safety */ }
//!     fn converged(&self, state: &MyState) -> bool { /* at rest and matching the spec */ }
//!     fn settle(&mut self) { /* everything pending happens, failures clear */ }
//! }
//!
//! #[test]
//! fn my_machine_is_safe_and_live_under_faults() {
//!     check::check_machine::<MyMachine, Cluster>(CheckConfig::default());
//! }
//! ```
//!
//! # Guarantees
//! - Deterministic: a seed ([`CheckConfig::seed`]) and case count, no failure
//!   persistence files, no wall-clock reads. [`try_check_machine`] runs exactly its
//!   configuration.
//! - [`check_machine`] also explores: `LOCKSTEP_CHECK_SEED` (a commit hash, as `make
//!   unit` passes it, so that every change explores new runs; 64 hex digits; or a
//!   decimal `u64`) and `LOCKSTEP_CHECK_CASES` name a run of their own, checked first.
//!   The configuration's own run (its seed, its count) is checked as well, unless the
//!   explored run contains it (same seed, as many cases or more). So a safety failure
//!   the explored run finds is a real failure, and what a caller asserts about the
//!   report (every edge taken, writes lost) never depends on the variables: the report
//!   joins both runs, and each of its counts only grows with a second run.
//! - A failure reports a shrunk sequence of events, the initial world, a trace of the
//!   shrunk run, and the variables that run it again
//!   (`LOCKSTEP_CHECK_SEED=<64 hex digits> LOCKSTEP_CHECK_CASES=<n>`);
//!   [`try_check_machine`] returns it instead of panicking. Shrinking is
//!   proptest's, followed by a pass to a fixed point that drops events and simplifies
//!   reconciles (see `minimize`).
//!
//! # Assumptions
//! - The world model is deterministic, and [`WorldModel::settle`] is idempotent.
//! - Moves and edits are generated up front, independently of the world; one that does not
//!   apply when its turn comes must be a no-op.
//! - The driver behaves as modelled: actions in order, then one status write fenced on the
//!   resourceVersion read; finalizer removal is fenced the same way; on a failing action it
//!   stops and records `lastError`.
//! - Invariants are checked once a record has been persisted (no action can run before:
//!   the first reconcile only initializes).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt::{self, Debug};
use std::marker::PhantomData;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
/// The proptest this checker is built on: a [`WorldModel`] returns its strategies, so a
/// machine outside this crate writes them with the same proptest (`use
/// lockstep::engine::check::proptest::prelude::*`), whatever its own dependencies hold.
pub use proptest;
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestError, TestRng, TestRunner};

use super::conditions::{self, reason, status};
use super::machine::{Machine, kind_name};
use super::record::{EngineStatus, MachineRecord};
use super::step::{self, Input, Outcome, Taken};

mod oracle;
mod report;
mod seed;
mod shrink;
mod sim;

use oracle::edge_name;
pub use report::{CheckReport, Counterexample};
use shrink::minimize;
use sim::Sim;

/// A simulated world for machine `M`: the objects it owns and how they behave.
pub trait WorldModel<M: Machine>: Clone + Debug + 'static {
    /// Something the environment does on its own (a pod becomes Ready, a Job fails, the
    /// StatefulSet controller recreates a pod).
    type Move: Clone + Debug + 'static;
    /// A change the user makes to the spec.
    type Edit: Clone + Debug + 'static;

    /// The worlds a check starts from (the custom resource was just created).
    fn initial() -> BoxedStrategy<Self>;

    /// The custom resource's spec, as the machine reads it.
    fn spec(&self) -> M::Spec;

    /// Spec edits to generate; each one bumps `metadata.generation`.
    fn spec_edits() -> BoxedStrategy<Self::Edit>;

    /// Apply a spec edit.
    fn edit_spec(&mut self, edit: &Self::Edit);

    /// What the machine observes (what `Operator::observe` would read from the cache).
    fn observe(&self) -> M::Observed;

    /// Carry out an action as the driver would. What the driver tolerates is a no-op here:
    /// NotFound, AlreadyExists, a failed UID precondition.
    fn apply(&mut self, action: &M::Action);

    /// Environment moves to generate.
    fn environment_moves() -> BoxedStrategy<Self::Move>;

    /// Apply an environment move (a no-op if it does not apply to the world as it is).
    fn step_environment(&mut self, mv: &Self::Move);

    /// Safety properties of the world and the persisted state, checked after every event.
    ///
    /// # Errors
    /// What is violated, for the counterexample.
    fn invariants(&self, state: &M::State) -> Result<(), String>;

    /// Whether the machine is at rest in `state` and the world matches the spec.
    fn converged(&self, state: &M::State) -> bool;

    /// Make everything pending happen and clear failures, so that a correct machine can
    /// finish. Must be idempotent.
    fn settle(&mut self);

    /// The clock the machine reads now says `now`: told before the first event and after
    /// every advance, for worlds whose behaviour depends on time (a server that stops by
    /// a deadline). Others ignore it.
    fn clock(&mut self, now: DateTime<Utc>) {
        let _ = now;
    }

    /// The custom resource was deleted (its finalizer holds it): for worlds whose people
    /// act on it when they settle (a person who must wake a hibernated cluster for its
    /// final backup). Others ignore it.
    fn deleted(&mut self) {}
}

/// How a generated sequence is checked.
#[derive(Debug, Clone)]
pub struct CheckConfig {
    /// Generated sequences.
    pub cases: u32,
    /// The longest sequence of events.
    pub max_events: usize,
    /// How many events a cached view may lag behind.
    pub max_staleness: u8,
    /// The largest single clock advance.
    pub max_tick: Duration,
    /// Reconciles allowed for convergence once faults stop.
    pub liveness_reconciles: usize,
    /// The ChaCha seed of the generator.
    pub seed: [u8; 32],
    /// The bound on shrinking steps.
    pub max_shrink_iters: u32,
}

impl Default for CheckConfig {
    fn default() -> Self {
        Self {
            cases: 256,
            max_events: 40,
            max_staleness: 3,
            max_tick: Duration::from_secs(600),
            liveness_reconciles: 64,
            seed: *b"lockstep/engine/check: seed 0001",
            max_shrink_iters: 4096,
        }
    }
}

impl CheckConfig {
    /// Apply `LOCKSTEP_CHECK_CASES` (a count) and `LOCKSTEP_CHECK_SEED` (see
    /// [`check_machine`]) when set and not empty. Unset, the configuration is unchanged.
    ///
    /// # Panics
    /// A value that names no count or no seed: a mistyped seed is never silently the
    /// fixed one.
    #[must_use]
    pub fn with_env_overrides(mut self) -> Self {
        let var = |name| std::env::var(name).unwrap_or_default();
        match seed::parse_cases(&var(seed::CASES_VAR)) {
            Ok(cases) => self.cases = cases.unwrap_or(self.cases),
            Err(why) => panic!("{why}"),
        }
        match seed::parse(&var(seed::SEED_VAR), self.seed) {
            Ok(seed) => self.seed = seed.unwrap_or(self.seed),
            Err(why) => panic!("{why}"),
        }
        self
    }

    /// The environment variables that run this configuration again through
    /// [`check_machine`]: `LOCKSTEP_CHECK_SEED=<64 hex digits> LOCKSTEP_CHECK_CASES=<n>`.
    #[must_use]
    pub fn reproduce(&self) -> String {
        seed::reproduce(&self.seed, self.cases)
    }
}

/// How the I/O of one reconcile goes wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Nothing goes wrong.
    None,
    /// The status write fails with 409: another writer changed the object.
    Conflict,
    /// The status write fails with 500.
    ServerError,
    /// The operator dies after executing `after` actions, before writing status.
    Crash {
        /// Actions executed before the crash.
        after: u8,
    },
    /// The operator dies right after its status write: no finalizer removal, no event.
    CrashAfterWrite,
    /// Action number `after` (0-based) fails; those before it ran.
    ActionFails {
        /// Actions executed before the failing one.
        after: u8,
    },
}

/// One reconcile, and what goes wrong in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reconcile {
    /// How many events behind the cached custom resource is.
    pub object_lag: u8,
    /// How many events behind the cached owned objects are.
    pub world_lag: u8,
    /// The I/O fault.
    pub fault: Fault,
}

impl Reconcile {
    /// A reconcile on fresh caches with no fault.
    pub const FRESH: Reconcile = Reconcile {
        object_lag: 0,
        world_lag: 0,
        fault: Fault::None,
    };
}

/// One generated event.
#[derive(Clone)]
pub enum Event<Mv, Ed> {
    /// The controller reconciles the object.
    Reconcile(Reconcile),
    /// The operator restarts: its caches are rebuilt and may serve older views.
    Restart,
    /// The environment moves, with no reconcile after it.
    Env(Mv),
    /// The user edits the spec.
    Edit(Ed),
    /// The user deletes the object.
    Delete,
    /// The clock advances by this many seconds.
    Tick(u32),
}

impl<Mv: Debug, Ed: Debug> Debug for Event<Mv, Ed> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Event::Reconcile(r) => {
                f.write_str("reconcile")?;
                if r.object_lag > 0 {
                    write!(f, " [custom resource cache {} behind]", r.object_lag)?;
                }
                if r.world_lag > 0 {
                    write!(f, " [owned-object cache {} behind]", r.world_lag)?;
                }
                match r.fault {
                    Fault::None => Ok(()),
                    Fault::Conflict => f.write_str(", status write 409 Conflict"),
                    Fault::ServerError => f.write_str(", status write 500"),
                    Fault::Crash { after } => {
                        write!(f, ", operator crashes after {after} action(s)")
                    }
                    Fault::ActionFails { after } => write!(f, ", action #{} fails", after + 1),
                    Fault::CrashAfterWrite => {
                        f.write_str(", operator crashes after the status write")
                    }
                }
            }
            Event::Restart => f.write_str("operator restarts"),
            Event::Env(mv) => write!(f, "environment: {mv:?}"),
            Event::Edit(edit) => write!(f, "spec edit: {edit:?}"),
            Event::Delete => f.write_str("object deleted"),
            Event::Tick(secs) => write!(f, "clock +{secs}s"),
        }
    }
}

/// Check `M` against the world model `W`; panic with the shrunk counterexample on failure,
/// print the report otherwise.
///
/// Two runs (see the module's guarantees): the one `LOCKSTEP_CHECK_SEED` and
/// `LOCKSTEP_CHECK_CASES` name ([`CheckConfig::with_env_overrides`]), then `config`'s
/// own, unless the first contains it. The report joins them.
///
/// # Panics
/// On a counterexample (its message says how to run it again), and on a variable that
/// names no seed or no count.
pub fn check_machine<M, W>(config: CheckConfig) -> CheckReport
where
    M: Machine,
    W: WorldModel<M>,
{
    let explored = config.clone().with_env_overrides();
    let contains_pinned = explored.seed == config.seed && explored.cases >= config.cases;
    let mut runs = vec![explored];
    if !contains_pinned {
        runs.push(config);
    }
    let mut joined: Option<CheckReport> = None;
    for run in &runs {
        match try_check_machine::<M, W>(run) {
            Ok(report) => {
                println!("model check of `{}`: {} passed", M::NAME, run.reproduce());
                match &mut joined {
                    Some(joined) => joined.join(&report),
                    None => joined = Some(report),
                }
            }
            Err(counterexample) => panic!("{counterexample}"),
        }
    }
    let report = joined.unwrap_or_default();
    println!("{report}");
    report
}

/// Check `M` against the world model `W`, returning the shrunk counterexample on failure.
///
/// # Errors
/// The shrunk counterexample when a property fails (or the run aborts).
pub fn try_check_machine<M, W>(config: &CheckConfig) -> Result<CheckReport, Box<Counterexample>>
where
    M: Machine,
    W: WorldModel<M>,
{
    let strategy = (
        W::initial(),
        vec(events::<M, W>(config), 0..=config.max_events),
    );
    let proptest_config = Config {
        cases: config.cases,
        failure_persistence: None,
        max_shrink_iters: config.max_shrink_iters,
        max_shrink_time: 0,
        fork: false,
        timeout: 0,
        verbose: 0,
        source_file: None,
        ..Config::default()
    };
    let mut runner = TestRunner::new_with_rng(
        proptest_config,
        TestRng::from_seed(RngAlgorithm::ChaCha, &config.seed),
    );
    let totals = RefCell::new(CheckReport::default());
    let result = runner.run(&strategy, |(world, events)| {
        let mut sim = Sim::<M, W>::new(config, world, false);
        let verdict = sim.run(&events);
        totals.borrow_mut().absorb(&sim.report);
        verdict.map_err(TestCaseError::fail)
    });
    match result {
        Ok(()) => {
            let mut report = totals.into_inner();
            report.machine = M::NAME;
            report.cases = config.cases;
            report.unexercised = M::table()
                .iter()
                .map(|e| edge_name(e.from.into(), e.to.into(), e.reason))
                .filter(|name| !report.transitions.contains_key(name))
                .collect();
            Ok(report)
        }
        Err(TestError::Abort(why)) => Err(Box::new(Counterexample {
            machine: M::NAME,
            reason: format!("proptest aborted: {}", why.message()),
            world: String::new(),
            events: Vec::new(),
            trace: Vec::new(),
            seed: Some(config.reproduce()),
        })),
        Err(TestError::Fail(why, (world, events))) => {
            let events = minimize::<M, W>(config, &world, events);
            // Run the shrunk sequence again, recording what happens.
            let shown = format!("{world:?}");
            let mut sim = Sim::<M, W>::new(config, world, true);
            let rerun = catch_unwind(AssertUnwindSafe(|| sim.run(&events)));
            let reason = match rerun {
                Ok(Err(reason)) => reason,
                Ok(Ok(())) | Err(_) => why.message().to_owned(),
            };
            Err(Box::new(Counterexample {
                machine: M::NAME,
                reason,
                world: shown,
                events: events.iter().map(|e| format!("{e:?}")).collect(),
                trace: sim.trace.take().unwrap_or_default(),
                seed: Some(config.reproduce()),
            }))
        }
    }
}

/// Run one fixed sequence of `events` from `world` under every property a generated run
/// checks (the liveness phase included): a targeted scenario for an edge that generated
/// sequences seldom reach. The report counts the transitions taken and holds the trace.
///
/// # Errors
/// The failure, with the trace of the run (the sequence is not shrunk).
pub fn check_scenario<M, W>(
    config: &CheckConfig,
    world: W,
    events: &[Event<W::Move, W::Edit>],
) -> Result<CheckReport, Box<Counterexample>>
where
    M: Machine,
    W: WorldModel<M>,
{
    let shown = format!("{world:?}");
    let mut sim = Sim::<M, W>::new(config, world, true);
    let run = catch_unwind(AssertUnwindSafe(|| sim.run(events)));
    let trace = sim.trace.take().unwrap_or_default();
    let failure = match run {
        Ok(Ok(())) => None,
        Ok(Err(reason)) => Some(reason),
        Err(_) => Some("the scenario panicked".to_owned()),
    };
    if let Some(reason) = failure {
        return Err(Box::new(Counterexample {
            machine: M::NAME,
            reason,
            world: shown,
            events: events.iter().map(|e| format!("{e:?}")).collect(),
            trace,
            seed: None,
        }));
    }
    let mut report = sim.report;
    report.machine = M::NAME;
    report.cases = 1;
    report.trace = trace;
    Ok(report)
}

/// A scenario that fails for a reason `same` accepts, shrunk: events are dropped, to a
/// fixed point, while the run still fails for such a reason (a planted bug's story
/// keeps its bug, not some other failure a shorter story may have). `Ok` if the
/// scenario passes.
///
/// # Errors
/// The shrunk failure, with the trace of its run.
pub fn shrink_scenario<M, W>(
    config: &CheckConfig,
    world: W,
    events: &[Event<W::Move, W::Edit>],
    same: impl Fn(&str) -> bool,
) -> Result<CheckReport, Box<Counterexample>>
where
    M: Machine,
    W: WorldModel<M>,
{
    let mut failure = match check_scenario::<M, W>(config, world.clone(), events) {
        Ok(report) => return Ok(report),
        Err(failure) => failure,
    };
    let mut events = events.to_vec();
    let mut progress = true;
    while progress {
        progress = false;
        let mut i = 0;
        while i < events.len() {
            let mut candidate = events.clone();
            candidate.remove(i);
            match check_scenario::<M, W>(config, world.clone(), &candidate) {
                Err(shorter) if same(&shorter.reason) => {
                    events = candidate;
                    failure = shorter;
                    progress = true;
                }
                _ => i += 1,
            }
        }
    }
    Err(failure)
}

/// The declared edges of `M` (as `From -> To (Reason)`) that none of `reports` took:
/// empty when the checks together exercise the whole table.
pub fn never_taken<M: Machine>(reports: &[&CheckReport]) -> Vec<String> {
    M::table()
        .iter()
        .map(|e| edge_name(e.from.into(), e.to.into(), e.reason))
        .filter(|name| !reports.iter().any(|r| r.transitions.contains_key(name)))
        .collect()
}

/// A targeted scenario: the edge it is for (`From -> To (Reason)`), the world it starts
/// from and the events that take the edge.
pub type Scenario<W, Mv, Ed> = (&'static str, W, Vec<Event<Mv, Ed>>);

/// Run every scenario ([`check_scenario`]) and assert that each takes the edge it names
/// and that, with the `generated` report, every declared edge of `M` is taken. Panics
/// with the failing scenario's trace otherwise.
pub fn assert_every_edge_taken<M, W>(
    config: &CheckConfig,
    generated: &CheckReport,
    scenarios: Vec<Scenario<W, W::Move, W::Edit>>,
) where
    M: Machine,
    W: WorldModel<M>,
{
    let mut reports = vec![generated.clone()];
    for (edge, world, events) in scenarios {
        match check_scenario::<M, W>(config, world, &events) {
            Ok(report) => {
                assert!(
                    report.transitions.contains_key(edge),
                    "the scenario for {edge} does not take it:\n{}",
                    report.trace.join("\n")
                );
                reports.push(report);
            }
            Err(failure) => panic!("the scenario for {edge} failed:\n{failure}"),
        }
    }
    let missing = never_taken::<M>(&reports.iter().collect::<Vec<_>>());
    assert!(
        missing.is_empty(),
        "declared edges of `{}` that no check takes: {missing:#?}",
        M::NAME
    );
}

/// The event strategy. Alternatives are listed simplest first: proptest shrinks toward
/// earlier alternatives, so shrunk sequences read as plain reconciles where they can.
fn events<M: Machine, W: WorldModel<M>>(
    config: &CheckConfig,
) -> impl Strategy<Value = Event<W::Move, W::Edit>> + use<M, W> {
    let stale = config.max_staleness.max(1);
    let lag = prop_oneof![6 => Just(0u8), 1 => 1..=stale];
    let fault = prop_oneof![
        12 => Just(Fault::None),
        1 => Just(Fault::Conflict),
        1 => Just(Fault::ServerError),
        1 => (0u8..4).prop_map(|after| Fault::Crash { after }),
        1 => (0u8..4).prop_map(|after| Fault::ActionFails { after }),
        1 => Just(Fault::CrashAfterWrite),
    ];
    let reconcile = (lag.clone(), lag, fault).prop_map(|(object_lag, world_lag, fault)| {
        Event::Reconcile(Reconcile {
            object_lag,
            world_lag,
            fault,
        })
    });
    let max_tick = u32::try_from(config.max_tick.as_secs())
        .unwrap_or(u32::MAX)
        .max(1);
    prop_oneof![
        100 => reconcile,
        60 => W::environment_moves().prop_map(Event::Env),
        10 => W::spec_edits().prop_map(Event::Edit),
        8 => (1..=max_tick).prop_map(Event::Tick),
        8 => Just(Event::Restart),
        2 => Just(Event::Delete),
    ]
}
