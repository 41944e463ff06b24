//! Promote and elect: the target's own manager promotes its server once the Lease names
//! it; the operator waits for its report, then labels it the primary.

#[allow(clippy::wildcard_imports)] // the switchover's vocabulary, imported once in its parent
use super::*;

/// How long the target's manager has, in each promote attempt, to report a writable
/// server holding the Lease's current term ([`crate::machines::postgres::instances`])
/// before the attempt counts as failed. The operator promotes nothing itself: the
/// target's own manager promotes its server once the Lease names it, right after a
/// renewal of its own.
pub(crate) const PROMOTE_WAIT_SECONDS: u64 = 120;

/// Promote: the Lease names the target; wait, one attempt of [`PROMOTE_WAIT_SECONDS`] at
/// a time, until its manager reports a writable server holding the Lease's term, then
/// elect it. A report that comes after the attempts ran out still elects it.
pub(crate) fn promote(
    spec: &PostgresClusterSpec,
    s: &Switchover,
    world: &World<Observed>,
    what: &str,
    actions: Vec<PgAction>,
) -> D {
    let o = &world.observed;
    let (t, name) = target_pod(s, o);
    let term = o.own.lease.as_ref().map_or(0, |l| l.transitions);
    let reported = o.own.instances.get(&t).and_then(|r| r.server);
    let pod = o.pods.get(&t).filter(|p| p.uid == s.target.uid);
    // A manager from before Lockstep was upgraded reports no term: a primary is taken
    // at its word (its report may predate the hand-over, and the target, labelled
    // primary and holding the Lease, promotes itself anyway).
    let older = o.own.older_managers.contains(&t);
    let promoted = reported.is_some_and(|r| r.holds(term) || (older && r.primary));
    if pod.is_some() && promoted {
        return elect(s, o, what, actions);
    }
    match pod {
        None => {
            return retarget(
                spec,
                s,
                world,
                what,
                format!("{name} was replaced"),
                actions,
            );
        }
        Some(p) if !p.serving() => {
            return retarget(
                spec,
                s,
                world,
                what,
                format!("{name} is not Ready"),
                actions,
            );
        }
        Some(_) => {}
    }
    let attempts = s.budget.attempts(s.attempt, Some(PROMOTE_RETRY_LIMIT));
    let bound = std::time::Duration::from_secs(PROMOTE_WAIT_SECONDS);
    let waited = world.in_state_for();
    let said = match reported {
        Some(r) if r.primary => format!("it reports a primary not holding term {term}"),
        Some(_) => "it reports a standby".to_owned(),
        None if older => format!(
            "it reports nothing: its instance manager predates this operator and may not report a promotion; if it is writable, delete pod {name} to restart it with this operator's (it holds the Lease and comes back writable)"
        ),
        None => "it reports no running server".to_owned(),
    };
    if waited < bound {
        let waiting = format!(
            "{what}: {name} holds Lease term {term}; waiting for its manager to promote it and report a writable server ({}, {PROMOTE_WAIT_SECONDS}s each)",
            attempts.describe()
        );
        // After an attempt of this round ended unreported, the wait is said, not kept
        // quiet (a retry-promote token starts a quiet round).
        let d = if s.attempt > s.budget.round_start {
            stay(
                PROMOTION_OVERDUE,
                format!("{waiting}; {said} (kubectl logs {name} says why)"),
                actions,
            )
            .degraded()
        } else {
            stay(PROMOTING, waiting, actions)
        };
        return d.requeue(bound - waited);
    }
    let failure = format!(
        "{name} reported no writable server holding Lease term {term} within {PROMOTE_WAIT_SECONDS}s ({said})"
    );
    if s.cause != SwitchCause::Failover
        && s.surveyed.is_none()
        && o.own
            .lease
            .as_ref()
            .is_some_and(|l| l.released_lsn.is_some())
    {
        // The target's manager promotes only once it has the released position. A
        // target that was not streaming when the old primary stopped (restarted just
        // before, by the upgrade itself) never gets it from a stopped primary, while
        // another member may have it: survey, as a failover does.
        return Decision::go(
            PgState::SwitchingOver(Switchover {
                step: SwitchStep::Survey,
                attempt: 1,
                budget: s.budget.restart(),
                ..s.clone()
            }),
            TARGET_SHORT_OF_RELEASED,
            format!(
                "{what}: {failure}: {name} may lack the WAL the old primary released the Lease at (it promotes only once it has it); the members' positions are surveyed and the most advanced is promoted"
            ),
        );
    }
    if attempts.failures_in_round() <= PROMOTE_RETRY_LIMIT {
        return Decision::go(
            PgState::SwitchingOver(Switchover {
                attempt: s.attempt.saturating_add(1),
                ..s.clone()
            }),
            PROMOTION_RETRIED,
            format!("{what}: {failure}; waiting again"),
        );
    }
    match s
        .budget
        .renewed(s.attempt, o.own.requests.retry_promote.as_deref())
    {
        Some((attempt, budget)) => {
            let token = budget.retry_ack.clone().unwrap_or_default();
            Decision::go(
                PgState::SwitchingOver(Switchover {
                    attempt,
                    budget,
                    ..s.clone()
                }),
                PROMOTION_RETRIED,
                format!("{what}: {failure}; waiting again ({RETRY_PROMOTE}={token})"),
            )
        }
        None => stay(
            PROMOTION_EXHAUSTED,
            format!(
                "{what}: {failure} ({}); it is still elected if it reports one. Its manager's log says why (kubectl logs {name}); set {RETRY_PROMOTE}=<new token> to wait again without Degraded (a target whose log says it has not received the old primary's last WAL is promoted without it once {RELEASED_LSN} is removed from the Lease {}-primary)",
                attempts.describe(),
                o.name
            ),
            actions,
        )
        .degraded(),
    }
}

/// The target is promoted: move the primary label in one transition, every other pod
/// that may be a writable primary to `demoted` first (the old primary unconditionally
/// while it is the pod the switchover began with: a cache may not have seen its label
/// yet; a recreated one to `replica`), then the target to `primary`.
pub(crate) fn elect(s: &Switchover, o: &Observed, what: &str, actions: Vec<PgAction>) -> D {
    let cluster = &s.cluster;
    let old = cluster.primary;
    let t = s.target.ordinal;
    if !o.pods.contains_key(&old) {
        return stay(
            WAITING_FOR_OLD_PRIMARY,
            format!(
                "{what}: {} is promoted; waiting to see {} again before labelling it demoted and {} primary",
                o.pod_name(t),
                o.pod_name(old),
                o.pod_name(t)
            ),
            actions,
        );
    }
    // Each move is fenced on the pod as observed; a pod not observed has no label to
    // move (whatever replaces it is labelled when it is seen).
    let mut moves: Vec<PgAction> = o
        .pods
        .get(&old)
        .map(|p| p.label(old, old_primary_role(s, p)))
        .into_iter()
        .collect();
    moves.extend(
        o.pods
            .iter()
            .filter(|(k, p)| **k != old && **k != t && p.role == Some(Role::Primary))
            .map(|(k, p)| p.label(*k, Role::Demoted)),
    );
    moves.extend(o.pods.get(&t).map(|p| p.label(t, Role::Primary)));
    let elected = Topology {
        primary: t,
        ..cluster.clone()
    };
    let (to, reason, message) = match s.cause {
        SwitchCause::Upgrade => (
            PgState::Upgrading {
                cluster: elected,
                pod: None,
            },
            SWITCHOVER_COMPLETED,
            format!(
                "switchover: {} is primary; {} follows it and is upgraded next",
                o.pod_name(t),
                o.pod_name(old)
            ),
        ),
        SwitchCause::Scale => (
            PgState::Ready { cluster: elected },
            SWITCHOVER_COMPLETED,
            format!(
                "switchover: {} is primary; {} follows it",
                o.pod_name(t),
                o.pod_name(old)
            ),
        ),
        SwitchCause::Requested => (
            PgState::Ready { cluster: elected },
            SWITCHOVER_COMPLETED,
            format!(
                "switchover ({SWITCHOVER}={}): {} is primary; {} follows it",
                s.request.as_deref().unwrap_or_default(),
                o.pod_name(t),
                o.pod_name(old)
            ),
        ),
        SwitchCause::Failover => (
            PgState::Ready { cluster: elected },
            FAILOVER_COMPLETED,
            format!(
                "failover: {} is primary in place of {}, which was lost (not Ready, or not renewing the primary Lease) for longer than failoverDelaySeconds; it rejoins as a standby",
                o.pod_name(t),
                o.pod_name(old)
            ),
        ),
    };
    Decision::go(to, reason, message).with_actions(moves)
}
