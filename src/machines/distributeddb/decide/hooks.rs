//! One hook attempt, of an upgrade or of a scaling step: start, wait, back off, retry,
//! or wait for a human. [`Hooked`] is what the two states share.

use super::{D, stay};
use crate::engine::{Decision, World};
use crate::machines::common::annotations::{self, RETRY_HOOK, SKIP_HOOK};
use crate::machines::common::jobs::{self, JobView};
use crate::machines::common::retry::{JobStep, RetryBudget, backoff_stay, run_once_step};
use crate::machines::distributeddb::actions::DdbAction;
use crate::machines::distributeddb::actions::HookPhase;
use crate::machines::distributeddb::api::Hook;
use crate::machines::distributeddb::observe::Observed;
use crate::machines::distributeddb::state::{DdbState, ScaleHook, Upgrade};
use crate::machines::distributeddb::table::reason::*;

/// A state in which a hook runs: its attempts, budget and acknowledged skip token, and
/// the state it becomes on a retry.
pub(crate) trait Hooked: Clone {
    /// The member the hook is about.
    fn ordinal(&self) -> i32;
    /// The attempt running.
    fn attempt(&self) -> u32;
    /// The retry budget.
    fn budget(&self) -> &RetryBudget;
    /// The last `skip-hook` token acted on.
    fn skip_ack(&self) -> Option<&str>;
    /// This state at `attempt` with `budget`.
    fn retried(&self, attempt: u32, budget: RetryBudget) -> DdbState;
    /// This state with the `skip-hook` token `ack` acknowledged.
    fn acked(&self, ack: Option<String>) -> Self;
    /// The images the hook's Job is told of (from, to).
    fn images(&self) -> (String, String);
}

impl Hooked for Upgrade {
    fn ordinal(&self) -> i32 {
        self.ordinal
    }
    fn attempt(&self) -> u32 {
        self.attempt
    }
    fn budget(&self) -> &RetryBudget {
        &self.budget
    }
    fn skip_ack(&self) -> Option<&str> {
        self.skip_ack.as_deref()
    }
    fn retried(&self, attempt: u32, budget: RetryBudget) -> DdbState {
        DdbState::Upgrading(Upgrade {
            attempt,
            budget,
            ..self.clone()
        })
    }
    fn acked(&self, ack: Option<String>) -> Self {
        Upgrade {
            skip_ack: ack,
            ..self.clone()
        }
    }
    fn images(&self) -> (String, String) {
        (self.from.clone(), self.to.clone())
    }
}

/// A scaling step with its hook due.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HookedScale {
    /// The image every pod runs.
    pub version: String,
    /// The replicas before scaling began.
    pub from_replicas: i32,
    /// The replicas the StatefulSet holds.
    pub replicas: i32,
    /// The hook.
    pub hook: ScaleHook,
}

impl HookedScale {
    /// The state, with `hook` due (or none).
    pub fn state(&self, replicas: i32, hook: Option<ScaleHook>) -> DdbState {
        DdbState::Scaling {
            version: self.version.clone(),
            from_replicas: self.from_replicas,
            replicas,
            hook,
        }
    }
}

impl Hooked for HookedScale {
    fn ordinal(&self) -> i32 {
        self.hook.ordinal
    }
    fn attempt(&self) -> u32 {
        self.hook.attempt
    }
    fn budget(&self) -> &RetryBudget {
        &self.hook.budget
    }
    fn skip_ack(&self) -> Option<&str> {
        self.hook.skip_ack.as_deref()
    }
    fn retried(&self, attempt: u32, budget: RetryBudget) -> DdbState {
        let hook = ScaleHook {
            attempt,
            budget,
            ..self.hook.clone()
        };
        self.state(self.replicas, Some(hook))
    }
    fn acked(&self, ack: Option<String>) -> Self {
        let mut acked = self.clone();
        acked.hook.skip_ack = ack;
        acked
    }
    fn images(&self) -> (String, String) {
        (self.version.clone(), self.version.clone())
    }
}

/// Drive one hook attempt; `on_success` decides what follows the hook (given the
/// state with any skip token acknowledged).
#[allow(clippy::too_many_arguments)] // one call site per hook phase; a struct would only rename them
pub(crate) fn hook_step<H: Hooked>(
    u: &H,
    world: &World<Observed>,
    phase: HookPhase,
    hook: &Hook,
    key: String,
    job: Option<&JobView>,
    actions: Vec<DdbAction>,
    on_success: impl FnOnce(&H, String, Vec<DdbAction>) -> D,
) -> D {
    let o = &world.observed;
    let name = o.pod_name(u.ordinal());
    let what = phase.describe();
    let attempts = u.budget().attempts(
        u.attempt(),
        Some(u32::try_from(hook.retry_limit).unwrap_or(0)),
    );
    let (step, job_name) = run_once_step(job, &key, attempts, world.now);
    // The same words while the Job is created and while it runs (the Job's name is a
    // function of its key), so Progressing is written once for the wait.
    let waiting = || {
        format!(
            "waiting for the {what} of {name} to finish: Job {} ({})",
            jobs::job_name(&o.name, &key),
            attempts.describe()
        )
    };
    match step {
        JobStep::Start => {
            let (from, to) = u.images();
            stay(HOOK_RUNNING, waiting(), actions).with_actions([DdbAction::RunHook {
                phase,
                ordinal: u.ordinal(),
                key,
                from,
                to,
            }])
        }
        JobStep::Running => stay(HOOK_RUNNING, waiting(), actions),
        JobStep::Succeeded => on_success(u, format!("the {what} of {name} succeeded"), actions),
        JobStep::Backoff { failure, at, wait } => backoff_stay(
            HOOK_FAILED,
            format!(
                "the {what} of {name} {failure} in Job {job_name} ({})",
                attempts.describe()
            ),
            at,
            wait,
            actions,
        ),
        JobStep::Retry { failure } => Decision::go(
            u.retried(u.attempt().saturating_add(1), u.budget().clone()),
            HOOK_RETRIED,
            format!("the {what} of {name} {failure}; trying again"),
        ),
        JobStep::Exhausted { failure } => {
            let r = &o.own.requests;
            if let Some((attempt, budget)) =
                u.budget().renewed(u.attempt(), r.retry_hook.as_deref())
            {
                return Decision::go(
                    u.retried(attempt, budget),
                    HOOK_RETRY_REQUESTED,
                    format!("running the {what} of {name} again ({RETRY_HOOK} set)"),
                );
            }
            if annotations::is_new_token(r.skip_hook.as_deref(), u.skip_ack()) {
                let acked = u.acked(r.skip_hook.clone());
                let skipped = format!("the {what} of {name} skipped ({SKIP_HOOK} set)");
                // The token is acknowledged only by the transition that acts on it; while
                // what follows cannot start yet, this stays and asks again.
                return match on_success(&acked, skipped, actions) {
                    Decision::Go {
                        to,
                        message,
                        actions,
                        ..
                    } => Decision::Go {
                        to,
                        reason: HOOK_SKIPPED,
                        message,
                        actions,
                    },
                    stay @ Decision::Stay { .. } => stay,
                };
            }
            stay(
                HOOK_FAILED,
                format!(
                    "the {what} of {name} {failure} in Job {job_name} ({}, no retries left); it waits: set the annotation {RETRY_HOOK} or {SKIP_HOOK} to a new value to run it again or go on without it",
                    attempts.describe()
                ),
                actions,
            )
            .degraded()
        }
    }
}
