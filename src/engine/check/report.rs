//! What a model check reports: the counts of a passing check, and the shrunk
//! counterexample of a failing one.

use super::*;

/// What a passing check exercised.
#[derive(Debug, Clone, Default)]
pub struct CheckReport {
    /// The machine's name.
    pub machine: &'static str,
    /// Sequences generated.
    pub cases: u32,
    /// Events run.
    pub events: usize,
    /// Reconciles run, liveness included.
    pub reconciles: usize,
    /// Status writes that landed.
    pub writes: usize,
    /// Status writes lost to faults or fencing.
    pub lost_writes: usize,
    /// Actions executed.
    pub actions: usize,
    /// The most reconciles any case needed to converge once faults stopped.
    pub liveness_max: usize,
    /// How often each declared edge was taken (`From -> To (Reason)`).
    pub transitions: BTreeMap<String, usize>,
    /// Declared edges never taken in any case.
    pub unexercised: Vec<String>,
    /// What happened, line by line (scenarios only: [`check_scenario`]).
    pub trace: Vec<String>,
}

impl CheckReport {
    /// Add another run of the same machine: its cases and counts, its edges (an edge
    /// stays unexercised only if neither run took it).
    pub(super) fn join(&mut self, other: &CheckReport) {
        self.absorb(other);
        self.cases += other.cases;
        self.unexercised
            .retain(|edge| other.unexercised.contains(edge));
    }

    pub(super) fn absorb(&mut self, other: &CheckReport) {
        self.events += other.events;
        self.reconciles += other.reconciles;
        self.writes += other.writes;
        self.lost_writes += other.lost_writes;
        self.actions += other.actions;
        self.liveness_max = self.liveness_max.max(other.liveness_max);
        for (edge, n) in &other.transitions {
            *self.transitions.entry(edge.clone()).or_default() += n;
        }
    }
}

impl fmt::Display for CheckReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "model check of `{}`: {} cases, {} events, {} reconciles, {} writes ({} lost), {} actions; converged within {} reconciles once faults stopped",
            self.machine,
            self.cases,
            self.events,
            self.reconciles,
            self.writes,
            self.lost_writes,
            self.actions,
            self.liveness_max
        )?;
        for (edge, n) in &self.transitions {
            writeln!(f, "  {n:>6}  {edge}")?;
        }
        for edge in &self.unexercised {
            writeln!(f, "  never taken: {edge}")?;
        }
        Ok(())
    }
}

/// A shrunk failing sequence.
#[derive(Debug, Clone)]
pub struct Counterexample {
    /// The machine's name.
    pub machine: &'static str,
    /// What failed.
    pub reason: String,
    /// The initial world.
    pub world: String,
    /// The events, in order.
    pub events: Vec<String>,
    /// What happened, line by line, in the shrunk run.
    pub trace: Vec<String>,
    /// For a generated run, the environment variables that run it again through
    /// [`check_machine`] ([`CheckConfig::reproduce`]); `None` for a fixed scenario.
    pub seed: Option<String>,
}

impl fmt::Display for Counterexample {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "model check of `{}` failed: {}",
            self.machine, self.reason
        )?;
        match &self.seed {
            Some(seed) => writeln!(f, "generated run; to run it again: {seed}")?,
            None => writeln!(f, "a fixed scenario (no seed)")?,
        }
        writeln!(f, "initial world: {}", self.world)?;
        writeln!(f, "shrunk events ({}):", self.events.len())?;
        for (i, event) in self.events.iter().enumerate() {
            writeln!(f, "  {:>2}. {event}", i + 1)?;
        }
        writeln!(f, "trace:")?;
        for line in &self.trace {
            writeln!(f, "  {line}")?;
        }
        Ok(())
    }
}
