//! One simulated run: the custom resource as the API server holds it, the world
//! model beside it, the caches that may serve older views of both, and each event
//! applied in turn through the real [`step`](crate::engine::step::step).

use super::oracle::*;
use super::*;

/// The custom resource as the API server holds it.
#[derive(Debug, Clone)]
pub(super) struct Object {
    /// `.status`, as JSON text.
    status: String,
    resource_version: u64,
    generation: i64,
    deleting: bool,
}

/// One simulated run.
pub(super) struct Sim<'c, M: Machine, W: WorldModel<M>> {
    config: &'c CheckConfig,
    world: W,
    object: Object,
    /// The finalizer was released: the object no longer exists.
    gone: bool,
    now: DateTime<Utc>,
    /// `(object, world)` after each event; the last one is the present.
    snapshots: Vec<(Object, W)>,
    /// The newest snapshot each cache of the running process has served.
    object_floor: usize,
    world_floor: usize,
    pub(super) trace: Option<Vec<String>>,
    pub(super) report: CheckReport,
    _machine: PhantomData<M>,
}

impl<'c, M: Machine, W: WorldModel<M>> Sim<'c, M, W> {
    pub(super) fn new(config: &'c CheckConfig, world: W, trace: bool) -> Self {
        let object = Object {
            status: serde_json::to_string(&EngineStatus::<M::State>::default())
                .unwrap_or_else(|_| "{}".to_owned()),
            resource_version: 1,
            generation: 1,
            deleting: false,
        };
        let mut sim = Self {
            config,
            world,
            object,
            gone: false,
            // A fixed epoch keeps runs reproducible.
            now: Utc
                .with_ymd_and_hms(2026, 1, 1, 0, 0, 0)
                .single()
                .unwrap_or_default(),
            snapshots: Vec::new(),
            object_floor: 0,
            world_floor: 0,
            trace: trace.then(Vec::new),
            report: CheckReport::default(),
            _machine: PhantomData,
        };
        sim.world.clock(sim.now);
        sim.snapshot();
        sim
    }

    pub(super) fn log(&mut self, line: impl FnOnce() -> String) {
        if let Some(trace) = &mut self.trace {
            trace.push(line());
        }
    }

    pub(super) fn log_world(&mut self, prefix: &str) {
        if let Some(trace) = &mut self.trace {
            trace.push(format!("    {prefix}{:?}", self.world));
        }
    }

    pub(super) fn snapshot(&mut self) {
        self.snapshots
            .push((self.object.clone(), self.world.clone()));
    }

    /// The snapshot a cache `lag` events behind serves, never older than `floor` (what
    /// this process already saw) nor than the staleness window.
    pub(super) fn pick(&self, lag: u8, floor: usize) -> usize {
        let latest = self.snapshots.len() - 1;
        let window = latest.saturating_sub(usize::from(self.config.max_staleness));
        latest
            .saturating_sub(usize::from(lag))
            .max(floor)
            .max(window)
    }

    pub(super) fn run(&mut self, events: &[Event<W::Move, W::Edit>]) -> Result<(), String> {
        for (i, event) in events.iter().enumerate() {
            self.report.events += 1;
            self.log(|| format!("{:>2}. {event:?}", i + 1));
            let checked = self.event(event).and_then(|()| {
                self.snapshot();
                self.check_invariants()
            });
            self.failed(checked)?;
        }
        let live = self.liveness();
        self.failed(live)
    }

    /// Note a failure at the end of the trace.
    pub(super) fn failed(&mut self, result: Result<(), String>) -> Result<(), String> {
        if let Err(why) = &result {
            self.log(|| format!("    FAILED: {why}"));
        }
        result
    }

    pub(super) fn event(&mut self, event: &Event<W::Move, W::Edit>) -> Result<(), String> {
        match event {
            Event::Reconcile(r) => self.reconcile(r).map(drop),
            Event::Restart => {
                self.restart();
                Ok(())
            }
            Event::Env(mv) => {
                self.world.step_environment(mv);
                self.log_world("world: ");
                Ok(())
            }
            Event::Edit(edit) => {
                if !self.gone {
                    self.world.edit_spec(edit);
                    self.object.generation += 1;
                    self.object.resource_version += 1;
                }
                Ok(())
            }
            Event::Delete => {
                if !self.gone && !self.object.deleting {
                    self.object.deleting = true;
                    self.world.deleted();
                    self.object.resource_version += 1;
                }
                Ok(())
            }
            Event::Tick(secs) => {
                self.now += chrono::Duration::seconds(i64::from(*secs));
                self.world.clock(self.now);
                Ok(())
            }
        }
    }

    pub(super) fn restart(&mut self) {
        self.object_floor = 0;
        self.world_floor = 0;
    }

    pub(super) fn persisted(&self) -> Result<EngineStatus<M::State>, String> {
        serde_json::from_str(&self.object.status)
            .map_err(|e| format!("the persisted status does not parse: {e}"))
    }

    pub(super) fn persisted_state(&self) -> Result<Option<M::State>, String> {
        let record = step::decode::<M>(&self.persisted()?)
            .map_err(|e| format!("the persisted record does not decode: {e}"))?;
        Ok(record.map(|r| r.state))
    }

    pub(super) fn check_invariants(&self) -> Result<(), String> {
        match self.persisted_state()? {
            Some(state) => self
                .world
                .invariants(&state)
                .map_err(|e| format!("invariant violated in {state:?}: {e}")),
            None => Ok(()),
        }
    }

    /// One reconcile. `None` when the object is gone.
    pub(super) fn reconcile(&mut self, r: &Reconcile) -> Result<Option<Outcome<M>>, String> {
        if self.gone {
            self.log(|| "    the object is gone; nothing to reconcile".to_owned());
            return Ok(None);
        }
        self.report.reconciles += 1;
        let oi = self.pick(r.object_lag, self.object_floor);
        let wi = self.pick(r.world_lag, self.world_floor);
        self.object_floor = oi;
        self.world_floor = wi;
        let object = self.snapshots[oi].0.clone();
        let spec = self.snapshots[oi].1.spec();
        let observed = self.snapshots[wi].1.observe();
        let latest = self.snapshots.len() - 1;
        if oi < latest || wi < latest {
            self.log(|| {
                format!(
                    "    reads the custom resource as of {} event(s) ago, owned objects as of {}",
                    latest - oi,
                    latest - wi
                )
            });
        }

        let read: EngineStatus<M::State> = serde_json::from_str(&object.status)
            .map_err(|e| format!("the persisted status does not parse: {e}"))?;
        let input = || Input::<M> {
            spec: &spec,
            status: &read,
            observed: observed.clone(),
            generation: object.generation,
            deleting: object.deleting,
            now: self.now,
        };
        let out = step::step::<M>(input());
        same_outcome(&out, &step::step::<M>(input()))?;
        check_outcome::<M>(&read, object.deleting, self.now, &out)?;
        self.log(|| describe_outcome(&out));

        let planned = out.actions.len();
        let executed = match r.fault {
            Fault::Crash { after } | Fault::ActionFails { after } => {
                usize::from(after).min(planned)
            }
            Fault::None | Fault::Conflict | Fault::ServerError | Fault::CrashAfterWrite => planned,
        };
        for action in &out.actions[..executed] {
            self.world.apply(action);
        }
        self.report.actions += executed;
        if executed > 0 {
            self.log_world(&format!("executed {executed} action(s); world: "));
        }

        match r.fault {
            Fault::Crash { .. } => {
                self.log(|| format!("    crashed after {executed} action(s); nothing written"));
                self.lost(out.changed);
                self.restart();
            }
            Fault::ActionFails { .. } if executed < planned => {
                let error = format!("injected failure of action #{}", executed + 1);
                self.log(|| format!("    {error}; lastError is recorded"));
                if let Some(next) = step::with_error::<M>(&read, &error) {
                    self.write(object.resource_version, &next)?;
                }
            }
            Fault::CrashAfterWrite => {
                let landed = !out.changed || self.write(object.resource_version, &out.status)?;
                if landed {
                    self.count_transition(&out);
                }
                self.log(|| "    crashed after the status write, before anything else".to_owned());
                self.restart();
            }
            Fault::Conflict => {
                // Another writer changed the object between our read and our write.
                self.object.resource_version += 1;
                self.log(|| "    status write: 409 Conflict".to_owned());
                self.lost(out.changed);
            }
            Fault::ServerError => {
                self.log(|| "    status write: 500".to_owned());
                self.lost(out.changed);
            }
            Fault::None | Fault::ActionFails { .. } => {
                let fenced_ok = if out.changed {
                    self.write(object.resource_version, &out.status)?
                } else {
                    object.resource_version == self.object.resource_version
                };
                if fenced_ok {
                    self.count_transition(&out);
                }
                if fenced_ok && out.release_finalizer {
                    self.release()?;
                }
            }
        }
        Ok(Some(out))
    }

    pub(super) fn count_transition(&mut self, out: &Outcome<M>) {
        if let Some(t) = &out.taken {
            *self
                .report
                .transitions
                .entry(edge_name(t.from, t.to, t.reason))
                .or_default() += 1;
        }
    }

    pub(super) fn lost(&mut self, changed: bool) {
        if changed {
            self.report.lost_writes += 1;
        }
    }

    /// A status write fenced on the resourceVersion read. Whether it landed.
    pub(super) fn write(
        &mut self,
        read_version: u64,
        next: &EngineStatus<M::State>,
    ) -> Result<bool, String> {
        if read_version != self.object.resource_version {
            self.log(|| "    status write: 409 Conflict (read a stale resourceVersion)".to_owned());
            self.report.lost_writes += 1;
            return Ok(false);
        }
        let before = self.persisted()?;
        if next.observed_generation < before.observed_generation {
            return Err(format!(
                "observedGeneration went back from {:?} to {:?}",
                before.observed_generation, next.observed_generation
            ));
        }
        if next.observed_generation > Some(self.object.generation) {
            return Err(format!(
                "observedGeneration {:?} is ahead of generation {}",
                next.observed_generation, self.object.generation
            ));
        }
        self.object.status = serde_json::to_string(next)
            .map_err(|e| format!("the status does not serialize: {e}"))?;
        self.object.resource_version += 1;
        self.report.writes += 1;
        self.log(|| "    status written".to_owned());
        Ok(true)
    }

    /// The driver removes the finalizer; the object is gone.
    pub(super) fn release(&mut self) -> Result<(), String> {
        if !self.object.deleting {
            return Err("the finalizer was released although the object is not deleting".into());
        }
        if let Some(state) = self.persisted_state()?
            && !M::finalized(&state)
        {
            return Err(format!(
                "the finalizer was released while the persisted state {state:?} is not finalized"
            ));
        }
        self.gone = true;
        self.log(|| "    finalizer released; the object is gone".to_owned());
        Ok(())
    }

    /// Faults off: settle, reconcile until converged, then quiet reconciles (at most one
    /// status-only refresh, then none).
    pub(super) fn liveness(&mut self) -> Result<(), String> {
        self.log(|| "-- faults stop; the world settles before each reconcile --".to_owned());
        self.restart();
        let bound = self.config.liveness_reconciles;
        for used in 0..=bound {
            if self.gone {
                self.report.liveness_max = self.report.liveness_max.max(used);
                return Ok(());
            }
            self.world.settle();
            self.log_world("settled: ");
            self.snapshot();
            self.check_invariants()?;
            if !self.object.deleting
                && self.persisted()?.observed_generation == Some(self.object.generation)
                && let Some(state) = self.persisted_state()?
                && self.world.converged(&state)
            {
                self.report.liveness_max = self.report.liveness_max.max(used);
                return self.quiet(&state);
            }
            if used == bound {
                break;
            }
            let out = self.reconcile(&Reconcile::FRESH)?;
            self.snapshot();
            self.check_invariants()?;
            let Some(out) = out else { continue };
            if self.gone {
                // This reconcile released the finalizer: done (checked at the loop's top).
                continue;
            }
            if !out.changed && out.actions.is_empty() {
                // Idle in a settled world: only time can move it on.
                match out.requeue {
                    Some(after) if after > Duration::ZERO => {
                        self.now += chrono::Duration::from_std(after)
                            .map_err(|e| format!("requeue out of range: {e}"))?;
                        self.world.clock(self.now);
                        self.log(|| {
                            format!("    idle; clock +{}s to the requeue", after.as_secs())
                        });
                    }
                    Some(_) => {
                        return Err(format!(
                            "idle reconcile in {:?} asks to requeue at once (a hot loop)",
                            out.state
                        ));
                    }
                    None => {
                        return Err(format!(
                            "stuck in {:?}: an idle reconcile in a settled world waits for a watch event that never comes (world {:?})",
                            out.state, self.world
                        ));
                    }
                }
            }
        }
        Err(format!(
            "did not converge within {bound} reconciles once faults stopped: persisted state {:?}, deleting {}, world {:?}",
            self.persisted_state()?,
            self.object.deleting,
            self.world
        ))
    }

    pub(super) fn quiet(&mut self, state: &M::State) -> Result<(), String> {
        self.log(|| format!("    converged in {state:?}; the reconciles after it must be quiet"));
        // The first reconcile in the settled world may still refresh what status projects
        // from it (a Degraded condition whose cause settling removed): a status write with
        // no action and no transition. The one after that must write nothing.
        for refresh_allowed in [true, false] {
            match self.reconcile(&Reconcile::FRESH)? {
                Some(out) if !out.actions.is_empty() || out.taken.is_some() => {
                    return Err(format!(
                        "converged in {state:?} but the next reconcile acts: taken {:?}, actions {:?}",
                        out.taken, out.actions
                    ));
                }
                Some(out) if out.changed && refresh_allowed => {
                    self.log(|| "    status projection refreshed once".to_owned());
                    self.snapshot();
                    self.check_invariants()?;
                }
                Some(out) if out.changed => {
                    return Err(format!(
                        "converged in {state:?} but status is written on every reconcile: {:?}",
                        out.status.conditions
                    ));
                }
                _ => return self.check_invariants(),
            }
        }
        self.check_invariants()
    }
}
