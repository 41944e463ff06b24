//! One hook attempt of an upgrade: start, wait, back off, retry, or wait for a human.

use super::{D, stay};
use crate::engine::{Decision, World};
use crate::machines::common::annotations::{self, RETRY_HOOK, SKIP_HOOK};
use crate::machines::common::jobs::{self, JobView};
use crate::machines::common::retry::{JobStep, backoff_stay, run_once_step};
use crate::machines::distributeddb::actions::DdbAction;
use crate::machines::distributeddb::actions::HookPhase;
use crate::machines::distributeddb::api::Hook;
use crate::machines::distributeddb::observe::Observed;
use crate::machines::distributeddb::state::{DdbState, Upgrade};
use crate::machines::distributeddb::table::reason::*;

/// Drive one hook attempt; `on_success` decides what follows the hook (given the
/// upgrade with any skip token acknowledged).
#[allow(clippy::too_many_arguments)] // one call site per hook phase; a struct would only rename them
pub(crate) fn hook_step(
    u: &Upgrade,
    world: &World<Observed>,
    phase: HookPhase,
    hook: &Hook,
    key: String,
    job: Option<&JobView>,
    actions: Vec<DdbAction>,
    on_success: impl FnOnce(&Upgrade, String, Vec<DdbAction>) -> D,
) -> D {
    let o = &world.observed;
    let name = o.pod_name(u.ordinal);
    let what = phase.describe();
    let attempts = u.budget.attempts(
        u.attempt,
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
            stay(HOOK_RUNNING, waiting(), actions).with_actions([DdbAction::RunHook {
                phase,
                ordinal: u.ordinal,
                key,
                from: u.from.clone(),
                to: u.to.clone(),
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
            DdbState::Upgrading(Upgrade {
                attempt: u.attempt.saturating_add(1),
                ..u.clone()
            }),
            HOOK_RETRIED,
            format!("the {what} of {name} {failure}; trying again"),
        ),
        JobStep::Exhausted { failure } => {
            let r = &o.own.requests;
            if let Some((attempt, budget)) = u.budget.renewed(u.attempt, r.retry_hook.as_deref()) {
                return Decision::go(
                    DdbState::Upgrading(Upgrade {
                        attempt,
                        budget,
                        ..u.clone()
                    }),
                    HOOK_RETRY_REQUESTED,
                    format!("running the {what} of {name} again ({RETRY_HOOK} set)"),
                );
            }
            if annotations::is_new_token(r.skip_hook.as_deref(), u.skip_ack.as_deref()) {
                let acked = Upgrade {
                    skip_ack: r.skip_hook.clone(),
                    ..u.clone()
                };
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
                    "the {what} of {name} {failure} in Job {job_name} ({}, no retries left); the upgrade waits: set the annotation {RETRY_HOOK} or {SKIP_HOOK} to a new value to run it again or go on without it",
                    attempts.describe()
                ),
                actions,
            )
            .degraded()
        }
    }
}
