//! SwitchingOver: the primary role moves (for an upgrade, a scale-down or a failover):
//! intent, demote, fence, survey (a failover), promote, elect.

use super::PROMOTE_RETRY_LIMIT;
use super::fencing::recreate_lease;
use super::fencing::{By, Fence, fence, hand_gated, hatch, lease_seconds, stamp, wait_for};
use super::old_primary_role;
use super::survey::{Choice, Reach, answered, describe, furthest_unready, most_advanced};
use super::{D, choose_target, label_moves, objects, promoting_moves, stay};
use crate::engine::{Decision, World};
use crate::machines::common::annotations::RETRY_PROMOTE;
use crate::machines::common::retry::RetryBudget;
use crate::machines::postgres::actions::{DeleteCause, LsnGate, PgAction, Role, survey_key};
use crate::machines::postgres::api::PostgresClusterSpec;
use crate::machines::postgres::observe::{Observed, RELEASED_LSN, SWITCHOVER, holder_identity};
use crate::machines::postgres::state::{
    PgState, PodRef, Surveyed, SwitchCause, SwitchStep, Switchover, Topology,
};
use crate::machines::postgres::status;
use crate::machines::postgres::table::reason::*;
use crate::machines::postgres::terms::{self, Quorum};

/// How long past `L + S` a switchover may wait for the Lease holder to be fenced before
/// it reports Degraded (the holder keeps renewing: its server is alive and writable).
pub(crate) const FENCE_GRACE_SECONDS: i64 = 30;

pub(crate) fn begin_switchover(
    cluster: &Topology,
    target: PodRef,
    cause: SwitchCause,
    request: Option<String>,
    o: &Observed,
    reason: &'static str,
    message: String,
) -> D {
    Decision::go(
        PgState::SwitchingOver(Switchover {
            cluster: cluster.clone(),
            old_uid: o.pods.get(&cluster.primary).map(|p| p.uid.clone()),
            target,
            step: SwitchStep::Demote,
            attempt: 1,
            cause,
            budget: RetryBudget::begin(o.own.requests.retry_promote.clone()),
            survey_attempt: None,
            surveyed: None,
            request,
        }),
        reason,
        message,
    )
}

pub(crate) fn switching_over(
    spec: &PostgresClusterSpec,
    s: &Switchover,
    world: &World<Observed>,
) -> D {
    let o = &world.observed;
    let cluster = &s.cluster;
    let old = cluster.primary;
    let t = s.target.ordinal;
    let what = match s.cause {
        SwitchCause::Failover => "failover",
        SwitchCause::Upgrade | SwitchCause::Scale | SwitchCause::Requested => "switchover",
    };
    // A request for the pod that is already primary moves nothing: it is served (its
    // token recorded as this state began) and done.
    if s.cause == SwitchCause::Requested && t == old {
        return Decision::go(
            PgState::Ready {
                cluster: cluster.clone(),
            },
            ALREADY_PRIMARY,
            format!(
                "{SWITCHOVER}={}: {} is already the primary; nothing moved",
                s.request.as_deref().unwrap_or_default(),
                o.pod_name(old)
            ),
        );
    }
    // Mid-switchover nobody is labelled primary until the target holds the Lease, and
    // only the target's own pod: a pod that replaced it at its ordinal waits for a
    // Lease naming it, so it starts as a standby meanwhile (and may be chosen again).
    let mut actions = objects(spec, &cluster.image, cluster.replicas, o);
    let target_seen = o.pods.get(&t).is_some_and(|p| p.uid == s.target.uid);
    actions.extend(match s.step {
        // Not while the old primary is unseen: it may still carry the label. The target
        // keeps the label it has meanwhile: demoted while it holds the Lease, its agent
        // would stop the server it is promoting (found by the model check at 6,000
        // cases: the old primary evicted mid-promotion, and nobody left to promote).
        SwitchStep::Promote if target_seen && lease_holds_target(s, o).is_ok() => {
            if o.pods.contains_key(&old) {
                promoting_moves(o, t)
            } else {
                label_moves(o, None)
                    .into_iter()
                    .filter(|a| !matches!(a, PgAction::Label { ordinal, .. } if *ordinal == t))
                    .collect()
            }
        }
        _ => label_moves(o, None),
    });
    match s.step {
        SwitchStep::Demote => {
            let mut demote = vec![];
            if let Some(pod) = o.pods.get(&old) {
                // Still running as a writable primary until it restarts: served by
                // neither Service (`replica` would put it behind `-ro`).
                demote.push(pod.label(old, old_primary_role(s, pod)));
                if s.cause == SwitchCause::Failover
                    && !pod.terminating
                    && s.old_uid.as_deref() == Some(pod.uid.as_str())
                {
                    demote.push(PgAction::DeletePod {
                        ordinal: old,
                        uid: pod.uid.clone(),
                        cause: DeleteCause::Fence,
                    });
                }
            }
            let demoted_as: &str = match demote.first() {
                Some(PgAction::Label { role, .. }) => (*role).into(),
                _ => "demoted",
            };
            let fenced = if demote.len() > 1 {
                " and deleted, so that it restarts as a standby"
            } else {
                ""
            };
            Decision::go(
                PgState::SwitchingOver(Switchover {
                    step: SwitchStep::Fence,
                    ..s.clone()
                }),
                OLD_PRIMARY_DEMOTED,
                format!(
                    "{what}: {} labelled {}{fenced}; {} is promoted once it is certainly fenced",
                    o.pod_name(old),
                    demoted_as,
                    o.pod_name(t)
                ),
            )
            .with_actions(demote)
        }
        SwitchStep::Fence => hand_over(spec, s, world, what, actions),
        SwitchStep::Survey => survey(spec, s, world, what, actions),
        SwitchStep::Promote => match lease_holds_target(s, o) {
            Ok(()) => promote(spec, s, world, what, actions),
            Err(why) => Decision::go(
                PgState::SwitchingOver(Switchover {
                    step: SwitchStep::Fence,
                    ..s.clone()
                }),
                LEASE_LOST,
                format!(
                    "{what}: {why}; {} is promoted once the Lease is handed to it again",
                    o.pod_name(t)
                ),
            ),
        },
    }
}

/// Survey (a failover, or a planned switchover whose old primary released no
/// position): ask every other member below `below` (a scale-down's targets) for its
/// WAL positions through the Lease ([`crate::machines::postgres::answers`]), wait up to
/// [`SURVEY_WAIT_SECONDS`] for them all to answer, and record the most advanced Ready
/// standby that answered as the target, with the positions (intent first), before the
/// Lease is handed to it.
fn survey(
    spec: &PostgresClusterSpec,
    s: &Switchover,
    world: &World<Observed>,
    what: &str,
    actions: Vec<PgAction>,
) -> D {
    let below = target_bound(spec, s);
    let o = &world.observed;
    let old = s.cluster.primary;
    let attempt = s.survey_attempt.unwrap_or(1);
    let Some(lease) = o.own.lease.as_ref() else {
        // Deleted since the old primary was fenced: created anew naming nobody (the
        // hand-over then waits for it to expire, as for any Lease it did not see
        // renewed), and the survey asks through it.
        return stay(
            SURVEYING,
            format!(
                "{what}: the Lease was deleted; it is created anew, naming nobody, and the survey asks the standbys through it"
            ),
            actions,
        )
        .with_actions([recreate_lease(spec, o, world.now)]);
    };
    let token = survey_key(
        s.old_uid.as_deref().unwrap_or_default(),
        lease.transitions,
        attempt,
    );
    let hosts = members(s, below);
    if lease.survey.as_deref() != Some(token.as_str()) {
        return stay(
            SURVEYING,
            format!(
                "{what}: asking {} for their WAL positions (survey {token})",
                o.pod_names(&hosts)
            ),
            actions,
        )
        .with_actions([PgAction::AskSurvey {
            token,
            uid: lease.uid.clone(),
            version: lease.version.clone(),
        }]);
    }
    let surveyed = answered(o, &token);
    let silent: Vec<i32> = hosts
        .iter()
        .copied()
        .filter(|k| surveyed.iter().all(|x| x.ordinal != *k))
        .collect();
    // The survey was asked as this step began; its answers are read at most
    // SURVEY_WAIT_SECONDS later, sooner once every live member answered.
    let finished = world.entered_at + chrono::Duration::seconds(SURVEY_WAIT_SECONDS);
    if !silent.is_empty() && world.now < finished {
        return stay(
            SURVEYING,
            format!(
                "{what}: survey {token}: waiting up to {SURVEY_WAIT_SECONDS} s for {} to answer ({})",
                o.pod_names(&silent),
                describe(o, &surveyed)
            ),
            actions,
        )
        .requeue((finished - world.now).to_std().unwrap_or_default());
    }
    let finished = Some(finished);
    if let Some(unread) = quorum_unread(spec, s, world, (&token, finished), &surveyed, what) {
        // The old primary, back on its volume, has every acknowledged commit: a
        // quorum that stays unmet goes back to it rather than wait without end.
        let (wait, dead_end) = match unread {
            Unread::Wait(wait) => (wait, false),
            Unread::DeadEnd(wait) => (wait, true),
        };
        if (dead_end || attempt >= SURVEYS_FOR_EVERY_MEMBER)
            && let Some(back) = abandon(s, o, &unpromotable(o, what, &surveyed))
        {
            return back;
        }
        return wait.with_actions(actions);
    }
    let read = (token.as_str(), finished, surveyed.as_slice());
    let skipped = match members_unread(s, world, read, below, what) {
        Ok(skipped) => skipped,
        Err(wait) => return (*wait).with_actions(actions),
    };
    let choice = Choice {
        old,
        below,
        excluded: None,
        within: Reach::of(spec.synchronous.as_ref()),
    };
    match most_advanced(o, &surveyed, choice) {
        Some(target) => {
            let message = format!(
                "{what}: {} is the most advanced Ready standby ({}){}",
                o.pod_name(target.ordinal),
                describe(o, &surveyed),
                skipped.map(|x| format!("; {x}")).unwrap_or_default(),
            );
            Decision::go(
                PgState::SwitchingOver(Switchover {
                    target,
                    step: SwitchStep::Fence,
                    surveyed: Some(surveyed),
                    ..s.clone()
                }),
                MOST_ADVANCED_CHOSEN,
                message,
            )
        }
        None => {
            let message = no_target_message(o, (&token, &surveyed), choice, what);
            // A standby may be restarting: ask them again before giving up.
            if attempt < SURVEYS_FOR_EVERY_MEMBER {
                let again = format!(
                    "{message}; surveying again (survey {} of at most {SURVEYS_FOR_EVERY_MEMBER})",
                    attempt.saturating_add(1)
                );
                return resurvey(s, world, finished, NO_PROMOTION_TARGET, again, true)
                    .with_actions(actions);
            }
            abandon(s, o, &unpromotable(o, what, &surveyed)).unwrap_or_else(|| {
                stay(NO_PROMOTION_TARGET, message, actions)
                    .degraded()
                    .requeue(std::time::Duration::from_secs(10))
            })
        }
    }
}

/// A failover or switchover whose surveys read no standby that can be promoted goes
/// back to the old primary when that is safe and possible: its ordinal has a live pod
/// (for a failover, not the failed one: recreated, on its volume; a switchover's old
/// primary stopped on purpose) whose manager does not report an empty volume
/// ([`crate::machines::postgres::volume`]: recreated on a lost claim, it holds no WAL;
/// found from seed 7 of the vanished-pod test's generator, two volumes lost in a
/// synchronous cluster, going back to it and round again for ever), no survey chose a
/// target yet, and the Lease names nobody
/// or that ordinal, so no other server was writable since and the old primary's WAL is
/// the newest. Back in `PrimaryLost` it is labelled primary and given the Lease once
/// any failed pod's expired (found by the model check from seeds 0 and 1: the only
/// standby's volume was lost mid-failover, or mid-switchover, and the machine waited
/// for a standby that could never exist; and from seed 7: a requested switchover's
/// target was recreated on a lost volume, and the machine waited for a Ready replica
/// that could never come). `why` says why no standby can be promoted. `None`: keep
/// waiting for a standby.
fn abandon(s: &Switchover, o: &Observed, why: &str) -> Option<D> {
    let old = s.cluster.primary;
    // A pod whose manager reports an empty volume holds no WAL at all.
    let pod = o
        .live(old)
        .filter(|p| !p.terminating && !o.own.empty.contains(&old))?;
    let ours = format!("{}/", o.pod_name(old));
    let never_left = o.own.lease.as_ref().is_some_and(|l| {
        l.holder.as_deref().is_none_or(|h| h.starts_with(&ours))
            && l.released_by
                .as_deref()
                .is_none_or(|h| h.starts_with(&ours))
    });
    let failed = s.cause == SwitchCause::Failover;
    let recreated = s.old_uid.as_deref() != Some(pod.uid.as_str());
    // No survey chose a target yet: a surveyed switchover hands the Lease only to one
    // chosen.
    let unchosen = s.surveyed.is_none();
    (unchosen && never_left && (recreated || !failed)).then(|| {
        Decision::go(
            PgState::PrimaryLost {
                cluster: s.cluster.clone(),
            },
            BACK_TO_OLD_PRIMARY,
            format!(
                "{why}; {} is back on its volume and the Lease never left it, so it has the newest WAL: it is the primary again",
                o.pod_name(old)
            ),
        )
    })
}

/// Why a failover or switchover goes back to its old primary after its surveys:
/// no standby they read can be promoted.
fn unpromotable(o: &Observed, what: &str, surveyed: &[Surveyed]) -> String {
    format!(
        "{what}: no standby the survey read can be promoted ({})",
        describe(o, surveyed)
    )
}

/// Why a survey (its `token` and what it read) has no standby to promote: none that
/// answered is a Ready replica, or, under `Required` ([`Reach::Furthest`]), the members
/// that reached furthest are not, and promoting a Ready one below them would lose the
/// acknowledged commits only they may have (named, with the way out).
fn no_target_message(
    o: &Observed,
    (token, surveyed): (&str, &[Surveyed]),
    choice: Choice<'_>,
    what: &str,
) -> String {
    let ahead = furthest_unready(o, surveyed, choice.old);
    let behind = most_advanced(
        o,
        surveyed,
        Choice {
            within: Reach::AnyReady,
            ..choice
        },
    );
    match behind {
        Some(ready) if choice.within == Reach::Furthest && !ahead.is_empty() => format!(
            "{what}: survey {token} read {} furthest ({}), but not as a Ready replica: \
             with spec.synchronous.dataDurability Required an acknowledged commit may be \
             on them alone, so {} is not promoted below them. Waiting for them to be \
             Ready; to promote {} instead, losing what only they have, set \
             spec.synchronous.dataDurability to Preferred",
            o.pod_names(&ahead),
            describe(o, surveyed),
            o.pod_name(ready.ordinal),
            o.pod_name(ready.ordinal),
        ),
        _ => format!(
            "{what}: no standby that answered survey {token} is a Ready replica ({})",
            describe(o, surveyed)
        ),
    }
}

/// How long a survey waits for every live member to answer before it reads what was
/// answered: a standby's manager answers at its next round (every `R` seconds, 2 by
/// default), once its server answers it.
pub(crate) const SURVEY_WAIT_SECONDS: i64 = 5;

/// How long a survey that read too few members (for synchronous replication's quorum,
/// or not every live member) waits after its answers were read before it surveys
/// again.
pub(crate) const RESURVEY_SECONDS: i64 = 10;

/// How many surveys a failover runs ([`RESURVEY_SECONDS`] apart) while a live member
/// does not answer, before it chooses among the members that did: a member that holds
/// newer WAL but is slow (its server restarting, its node loaded) is waited for, up to
/// `3 × SURVEY_WAIT_SECONDS + 2 × RESURVEY_SECONDS` (35 s), never without end.
pub(crate) const SURVEYS_FOR_EVERY_MEMBER: u32 = 3;

/// The members a survey asks and waits for: every ordinal of the cluster but the old
/// primary's, below `below` (a scale-down's bound), whether or not its pod is there now.
/// A member whose pod is being deleted or recreated keeps its volume, and once back may
/// hold newer WAL than every member that answered (found by the model check: a standby
/// force-deleted as the survey ran, back and Ready by the time the member chosen
/// without it was promoted, with a commit the promoted one lacked).
fn members(s: &Switchover, below: i32) -> Vec<i32> {
    (0..s.cluster.replicas.min(below))
        .filter(|k| *k != s.cluster.primary)
        .collect()
}

/// Every member other than the old primary ([`members`]) may hold newer WAL than those
/// the survey read, so a survey that read fewer waits and surveys again, up to
/// [`SURVEYS_FOR_EVERY_MEMBER`] surveys. `Ok(None)`: every live member
/// answered; `Ok(Some(note))`: the last survey still missed some, named in the note
/// the transition's message carries into the history; `Err`: wait or survey again.
fn members_unread(
    s: &Switchover,
    world: &World<Observed>,
    (token, finished, surveyed): (&str, Option<chrono::DateTime<chrono::Utc>>, &[Surveyed]),
    below: i32,
    what: &str,
) -> Result<Option<String>, Box<D>> {
    let o = &world.observed;
    let unread: Vec<i32> = members(s, below)
        .into_iter()
        .filter(|k| surveyed.iter().all(|x| x.ordinal != *k))
        .collect();
    if unread.is_empty() {
        return Ok(None);
    }
    let attempt = s.survey_attempt.unwrap_or(1);
    let names = o.pod_names(&unread);
    if attempt >= SURVEYS_FOR_EVERY_MEMBER {
        return Ok(Some(format!(
            "{names} did not answer {attempt} surveys and {} skipped",
            if unread.len() == 1 { "was" } else { "were" }
        )));
    }
    let message = format!(
        "{what}: survey {token} read {} ({}), not {names}, which may hold newer \
         WAL; surveying again (survey {} of at most {SURVEYS_FOR_EVERY_MEMBER})",
        surveyed.len(),
        describe(o, surveyed),
        attempt.saturating_add(1),
    );
    Err(Box::new(resurvey(
        s, world, finished, SURVEYING, message, false,
    )))
}

/// Stay (`reason`, Degraded if `degraded`) until [`RESURVEY_SECONDS`] after the
/// survey's answers were read at `finished`, then go to the next survey
/// (`SurveyRetried`).
fn resurvey(
    s: &Switchover,
    world: &World<Observed>,
    finished: Option<chrono::DateTime<chrono::Utc>>,
    reason: &'static str,
    message: String,
    degraded: bool,
) -> D {
    let again_at = finished.map(|at| at + chrono::Duration::seconds(RESURVEY_SECONDS));
    match again_at {
        Some(at) if world.now < at => {
            let wait = stay(reason, message, vec![])
                .requeue((at - world.now).to_std().unwrap_or_default());
            if degraded { wait.degraded() } else { wait }
        }
        _ => Decision::go(
            PgState::SwitchingOver(Switchover {
                survey_attempt: Some(s.survey_attempt.unwrap_or(1).saturating_add(1)),
                ..s.clone()
            }),
            SURVEY_RETRIED,
            message,
        ),
    }
}

/// With `spec.synchronous` Required, every acknowledged commit is on `number` of the
/// other members, so a failover must read `others - number + 1` of them to be sure the
/// most advanced one read has them all; `number` and the members are the strictest of
/// the terms commits may have been acknowledged under ([`strictest`]: the fewest
/// standbys, the most members, a member a scale-down removed included). A survey that read
/// fewer: wait (Degraded, naming who and the way out) until [`RESURVEY_SECONDS`]
/// after its answers were read (`survey`: its token and when), then survey again;
/// unless every member it did not read reports an empty volume
/// ([`crate::machines::postgres::volume`]): then wait, Degraded, for a person (or the
/// old primary) without surveying again. `None`: the survey read enough, or there is no
/// quorum to meet.
fn quorum_unread(
    spec: &PostgresClusterSpec,
    s: &Switchover,
    world: &World<Observed>,
    (token, finished): (&str, Option<chrono::DateTime<chrono::Utc>>),
    surveyed: &[Surveyed],
    what: &str,
) -> Option<Unread> {
    let o = &world.observed;
    let old = s.cluster.primary;
    let q = strictest(spec, o)?;
    let q = Quorum {
        members: q.members.max(s.cluster.replicas),
        ..q
    };
    // Every member the terms name, a member a scale-down removed included: it may hold
    // a commit no other has, and is never counted as read once it is gone.
    let others: Vec<i32> = (0..q.members).filter(|k| *k != old).collect();
    let needed = q.needed();
    if needed == 0 {
        return None;
    }
    let read: Vec<i32> = others
        .iter()
        .copied()
        .filter(|k| surveyed.iter().any(|x| x.ordinal == *k))
        .collect();
    if read.len() >= needed {
        return None;
    }
    let unread: Vec<i32> = others
        .iter()
        .copied()
        .filter(|k| !read.contains(k))
        .collect();
    let number = q.number;
    // Members whose managers report an empty volume lost what they held: no answer of
    // theirs can bring it back, so surveying them again is a wait without end.
    let dead_end = unread.iter().all(|k| o.own.empty.contains(k));
    let waiting = if dead_end {
        format!(
            "{} lost their data (their volumes hold no database), so no survey can read what they had",
            o.pod_names(&unread)
        )
    } else {
        format!("waiting for {} to answer", o.pod_names(&unread))
    };
    let message = format!(
        "{what}: every acknowledged commit is on {number} of the {} other members \
         (the strictest synchronous terms commits may have been acknowledged under, \
         status.synchronousTerms), so {needed} must be read to promote one that has them all; \
         survey {token} read {} ({}); {waiting}. To promote the most advanced \
         member read instead, losing the commits only the others may hold, set \
         spec.synchronous.dataDurability to Preferred",
        others.len(),
        read.len(),
        describe(o, surveyed),
    );
    Some(if dead_end {
        Unread::DeadEnd(stay(NO_PROMOTION_TARGET, message, vec![]).degraded())
    } else {
        Unread::Wait(resurvey(
            s,
            world,
            finished,
            NO_PROMOTION_TARGET,
            message,
            true,
        ))
    })
}

/// The quorum a failover under `Required` reads: the strictest of the synchronous terms
/// commits may have been acknowledged under ([`terms::quorum`]), as the status will
/// record them from this observation ([`status::synchronous_terms`]); `None` when the
/// spec is not `Required`.
pub(crate) fn strictest(spec: &PostgresClusterSpec, o: &Observed) -> Option<Quorum> {
    let recorded = status::synchronous_terms(spec, o, o.own.synchronous_terms.as_deref());
    terms::quorum(spec.synchronous.as_ref(), &recorded)
}

/// A quorum the survey did not read ([`quorum_unread`]).
enum Unread {
    /// Survey again after a while: the members not read may yet answer.
    Wait(D),
    /// Every member not read lost its data: only the old primary, or a person, can end
    /// the wait.
    DeadEnd(D),
}

/// Whether the Lease names the target (the pod the intent recorded), or why not.
fn lease_holds_target(s: &Switchover, o: &Observed) -> Result<(), String> {
    let t = s.target.ordinal;
    let want = holder_identity(&o.pod_name(t), &s.target.uid);
    match o.own.lease.as_ref().and_then(|l| l.holder.as_deref()) {
        Some(h) if h == want => Ok(()),
        Some(h) => Err(format!("the Lease names {h}, not {want}")),
        None => Err(format!("the Lease names nobody, not {want}")),
    }
}

/// The switchover's target: its ordinal and its pod's name.
fn target_pod(s: &Switchover, o: &Observed) -> (i32, String) {
    (s.target.ordinal, o.pod_name(s.target.ordinal))
}

/// Fence: wait until whoever holds the Lease is certainly no longer writable, then hand
/// it to the target (the hand-over is fenced on the Lease as observed) and promote.
fn hand_over(
    spec: &PostgresClusterSpec,
    s: &Switchover,
    world: &World<Observed>,
    what: &str,
    actions: Vec<PgAction>,
) -> D {
    let o = &world.observed;
    let (t, name) = target_pod(s, o);
    let target = holder_identity(&name, &s.target.uid);
    // A failover chooses its target only once the old primary is fenced (the survey).
    let surveying = s.cause == SwitchCause::Failover && s.surveyed.is_none();
    let promote = |actions: Vec<PgAction>, why: String| {
        Decision::go(
            PgState::SwitchingOver(Switchover {
                step: SwitchStep::Promote,
                ..s.clone()
            }),
            LEASE_HANDED_OVER,
            format!("{what}: {why}; the Lease is handed to {name}, which is promoted next"),
        )
        .with_actions(actions)
    };
    let old_id = s
        .old_uid
        .as_deref()
        .map(|uid| holder_identity(&o.pod_name(s.cluster.primary), uid));
    let Some(lease) = &o.own.lease else {
        // Whoever held a Lease that vanished stops by its last renewal + T + R + 1: a
        // Lease naming nobody, renewed now, expires after all of them.
        return stay(
            WAITING_FOR_FENCE,
            format!(
                "{what}: the primary Lease is missing (deleted); it is created naming nobody, and the old primary counts as fenced once it expires ({} if its node is known to be down)",
                hatch(old_id.as_deref())
            ),
            actions,
        )
        .degraded()
        .with_actions([recreate_lease(spec, o, world.now)]);
    };
    // After the Lease is there again (a Lease deleted by hand is made anew first, so
    // that going back to the old primary can tell nobody else held it since).
    let gone = match o.pods.get(&t) {
        _ if surveying => None,
        Some(p) if p.uid == s.target.uid && p.serving() => None,
        Some(p) if p.uid == s.target.uid => Some(format!("{name} is not Ready")),
        _ => Some(format!("{name} was replaced")),
    };
    if let Some(why) = gone {
        return retarget(spec, s, o, what, why, actions);
    }
    if !surveying && lease.holder.as_deref() == Some(target.as_str()) {
        return promote(Vec::new(), format!("{target} holds the Lease"));
    }
    let planned = s.cause != SwitchCause::Failover;
    match fence(spec, lease, o, world.now) {
        Fence::Fenced { why, .. } if surveying => Decision::go(
            PgState::SwitchingOver(Switchover {
                step: SwitchStep::Survey,
                ..s.clone()
            }),
            OLD_PRIMARY_FENCED,
            format!(
                "{what}: {why}; the standbys' WAL positions are surveyed to choose the most advanced"
            ),
        ),
        // A planned switchover promises that no acknowledged commit is lost: only the
        // old primary's release says up to where the target must have received. A Lease
        // that merely expired while it still names the old primary (hung, cut off, or
        // crashed while it stopped) proves it is fenced, not what it acknowledged: the
        // switchover waits for its release, or for a person (`docs/decisions/0002-zero-loss.md`).
        // A Lease that names nobody was cleared or deleted by hand (only Lockstep and
        // the holder's agent write it: an assumption), and one that names another pod
        // was handed over since, after the release: its expiry suffices.
        Fence::Fenced { by: By::Expiry, why }
            if planned
                && lease.released_lsn.is_none()
                && old_id.is_some()
                && lease.holder == old_id =>
        {
            stay(
                WAITING_FOR_RELEASE,
                format!(
                    "{what}: {why}, but {} never released it with its last WAL position ({RELEASED_LSN}): promoting {name} now could lose commits it acknowledged. Waiting for its release; set {} once its node is known to be down ({name} is then promoted without that position: what only the old primary had is lost)",
                    lease.holder.as_deref().unwrap_or("the old primary"),
                    hatch(old_id.as_deref())
                ),
                actions,
            )
            .degraded()
            .requeue(std::time::Duration::from_secs(10))
        }
        // A failover waives the old primary's released position: it promises the most
        // advanced standby, and a position nobody received (the old primary came back
        // after a crash, wrote, and stopped before a standby reconnected) would hold the
        // promotion back forever.
        Fence::Fenced { why, .. } if !planned => {
            // Under `Required` a commit is acknowledged only once a standby has it, and the
            // quorum rule made sure the survey read one that does.
            let lost = match strictest(spec, o) {
                Some(q) if q.promised => {
                    "WAL only the old primary had was never acknowledged (synchronous replication, dataDurability: Required): no acknowledged commit is lost"
                }
                Some(_) => {
                    "commits only the old primary had are lost if it acknowledged them under earlier synchronous terms that did not wait for a standby (status.synchronousTerms)"
                }
                None => "commits only the old primary had are lost",
            };
            let why = match &lease.released_lsn {
                Some(lsn) => format!(
                    "{why}; its released position {lsn} is not waited for (a failover promotes the most advanced standby: {lost})"
                ),
                None => why,
            };
            promote(
                vec![hand_gated(lease, Some(target), LsnGate::Waive, world.now)],
                why,
            )
        }
        Fence::Fenced { why, by }
            if planned && s.surveyed.is_none() && lease.released_lsn.is_none() =>
        {
            unreleased_position(spec, s, world, (by, why), what, actions)
        }
        Fence::Fenced { why, .. } => promote(
            vec![hand_gated(lease, Some(target), LsnGate::Keep, world.now)],
            why,
        ),
        Fence::Alive { until } => {
            let holder = lease.holder.as_deref().unwrap_or("its last holder");
            let grace = lease_seconds(spec, lease, o)
                .saturating_add(spec.fencing.clock_skew_seconds)
                .saturating_add(FENCE_GRACE_SECONDS)
                .max(0);
            let waited = world.in_state_for().as_secs();
            let d = stay(
                WAITING_FOR_FENCE,
                format!(
                    "{what}: {holder} may still be writable (it holds the primary Lease); {} once it releases the Lease or the Lease expires ({} asserts it is down)",
                    if surveying {
                        "a replica is promoted".to_owned()
                    } else {
                        format!("{name} is promoted")
                    },
                    hatch(lease.holder.as_deref())
                ),
                actions,
            )
            .with_actions(stamp(lease, world.now));
            let grace = u64::try_from(grace).unwrap_or(u64::MAX);
            let mut wake = wait_for(until, world.now);
            // A Lease naming nobody that nobody released was cleared or recreated by
            // hand: said at once, with the escape hatch.
            let d = if waited > grace || lease.holder.is_none() {
                d.degraded()
            } else {
                // Look again when the report turns Degraded, if nothing else comes first.
                let left = std::time::Duration::from_secs(grace - waited + 1);
                wake = Some(wake.map_or(left, |w| w.min(left)));
                d
            };
            d.requeue_if_any(wake)
        }
    }
}

/// A planned switchover whose old primary is fenced without a released position (its
/// clean stop escalated or its server crashed mid-stop, and its restarted container
/// released the Lease with none; a person asserted it down; or the Lease names nobody)
/// knows neither what it acknowledged nor which standby has the most of it: the
/// pre-chosen target may lack commits another standby received, or that only the old
/// primary has.
/// - Released by the old primary itself, without `Required` durability: back to the old
///   primary when it is back on its volume and the Lease never left it (it has every
///   commit it acknowledged: [`abandon`]); otherwise wait, Degraded, for a person, whose
///   `lockstep.dev/fenced=<old primary>/<uid>` accepts the loss of what only it had.
/// - Otherwise (a person's word, a Lease naming nobody, or `Required`, whose survey
///   quorum reads a member with every acknowledged commit), survey first, as a failover
///   does (found by the model check with switchovers on demand).
fn unreleased_position(
    spec: &PostgresClusterSpec,
    s: &Switchover,
    world: &World<Observed>,
    (by, why): (By, String),
    what: &str,
    actions: Vec<PgAction>,
) -> D {
    let o = &world.observed;
    let name = o.pod_name(s.target.ordinal);
    let released_by = o.own.lease.as_ref().and_then(|l| l.released_by.clone());
    let accepted = released_by.is_some() && o.own.requests.fenced == released_by;
    let required = Reach::of(spec.synchronous.as_ref()) == Reach::Furthest;
    if by == By::Release && !required && !accepted {
        let old = released_by.as_deref().unwrap_or("the old primary");
        let message = format!(
            "{what}: {why}, but without its last WAL position ({RELEASED_LSN}): its stop did not end cleanly, so no standby is known to have every commit it acknowledged"
        );
        if let Some(back) = abandon(s, o, &message) {
            return back;
        }
        return stay(
            WAITING_FOR_RELEASE,
            format!(
                "{message}. Waiting for {old} to come back on its volume (it has them all) to make it the primary again; set {} to promote the most advanced standby instead, losing what only {old} had",
                hatch(Some(old))
            ),
            actions,
        )
        .degraded()
        .requeue(std::time::Duration::from_secs(10));
    }
    Decision::go(
        PgState::SwitchingOver(Switchover {
            step: SwitchStep::Survey,
            ..s.clone()
        }),
        OLD_PRIMARY_FENCED,
        format!(
            "{what}: {why}, but it released no last WAL position: the standbys' positions are surveyed so that the most advanced is promoted (not necessarily {name})"
        ),
    )
}

/// The ordinals a switchover may promote: below `spec.replicas` when it makes room for a
/// scale-down, any otherwise.
pub(crate) fn target_bound(spec: &PostgresClusterSpec, s: &Switchover) -> i32 {
    match s.cause {
        SwitchCause::Scale => spec.replicas.min(s.cluster.replicas),
        SwitchCause::Upgrade | SwitchCause::Failover | SwitchCause::Requested => s.cluster.replicas,
    }
}

/// The target cannot be promoted (`why`): choose another, the most advanced its survey
/// read (under `Required` only one that reached as far as any member read), or, for a
/// planned switchover, the next by [`choose_target`]; with none, survey again, go back
/// to the old primary, or wait (Degraded).
pub(crate) fn retarget(
    spec: &PostgresClusterSpec,
    s: &Switchover,
    o: &Observed,
    what: &str,
    why: String,
    actions: Vec<PgAction>,
) -> D {
    let cluster = &s.cluster;
    let below = target_bound(spec, s);
    let image = (s.cause == SwitchCause::Upgrade).then_some(cluster.image.as_str());
    // A failover chooses among the standbys its survey read, the most advanced first.
    // Under `Required` never below the furthest member the survey read (the target
    // included, Ready or not): it may hold acknowledged commits no other has.
    let candidate = match &s.surveyed {
        Some(surveyed) => most_advanced(
            o,
            surveyed,
            Choice {
                old: cluster.primary,
                below,
                excluded: Some(&s.target),
                within: Reach::of(spec.synchronous.as_ref()),
            },
        ),
        None => choose_target(o, cluster, below, image)
            .filter(|c| c.ordinal != s.target.ordinal || c.uid != s.target.uid),
    };
    match candidate {
        Some(next) => {
            let message = format!("{why}; promoting {} instead", o.pod_name(next.ordinal));
            Decision::go(
                PgState::SwitchingOver(Switchover {
                    target: next,
                    // The Lease may name the previous target: it is fenced first.
                    step: SwitchStep::Fence,
                    attempt: 1,
                    budget: s.budget.restart(),
                    ..s.clone()
                }),
                TARGET_CHANGED,
                message,
            )
        }
        None => {
            let message = format!("{what}: {why}, and no other Ready replica can be promoted");
            // A target replaced on a lost volume never becomes a promotable replica
            // again; a target that is merely not Ready may, and is waited for.
            let replaced = o
                .pods
                .get(&s.target.ordinal)
                .is_none_or(|p| p.uid != s.target.uid);
            if let Some(back) = replaced.then(|| abandon(s, o, &message)).flatten() {
                return back;
            }
            // A failover whose survey has no candidate left asks the members as they are
            // now, if one it did not read is there (a member cloned anew, the old
            // primary's pod remade, one that was not Ready then; not one labelled
            // `demoted`, which is never promoted): it answers, and the survey's rules
            // choose again. With nobody else to ask, the target is waited for: a new survey would demote it
            // while it holds the Lease, and leave nobody to promote (found by the model
            // check at 6,000 cases: a requested switchover whose target was not Ready for
            // a moment as it promoted).
            let unread = |read: &Vec<crate::machines::postgres::state::Surveyed>| {
                (0..cluster.replicas)
                    .filter(|k| *k != s.target.ordinal)
                    .filter(|k| {
                        o.live(*k).is_some_and(|p| {
                            p.role != Some(crate::machines::postgres::actions::Role::Demoted)
                        })
                    })
                    .any(|k| !read.iter().any(|r| r.ordinal == k))
            };
            if s.surveyed.as_ref().is_some_and(unread) {
                return Decision::go(
                    PgState::SwitchingOver(Switchover {
                        step: SwitchStep::Survey,
                        surveyed: None,
                        survey_attempt: Some(s.survey_attempt.unwrap_or(1).saturating_add(1)),
                        ..s.clone()
                    }),
                    SURVEY_RETRIED,
                    format!("{message} among those its survey read: surveying again"),
                );
            }
            stay(NO_PROMOTION_TARGET, message, actions).degraded()
        }
    }
}

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
        None => return retarget(spec, s, o, what, format!("{name} was replaced"), actions),
        Some(p) if !p.serving() => {
            return retarget(spec, s, o, what, format!("{name} is not Ready"), actions);
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
