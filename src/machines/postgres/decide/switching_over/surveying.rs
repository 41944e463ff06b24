//! Which member is promoted: the survey of a failover (or of a planned switchover whose
//! old primary released no position), which members it asks and waits for, when it reads
//! again, which quorum it must reach; another target when the chosen one cannot be
//! promoted; and when it gives up and goes back to the old primary.

#[allow(clippy::wildcard_imports)] // the switchover's vocabulary, imported once in its parent
use super::*;
use crate::machines::postgres::decide::primary_lost::adoption_requested;
use crate::machines::postgres::observe::ADOPT_PRIMARY;

/// Survey (a failover, or a planned switchover whose old primary released no
/// position): ask every other member below `below` (a scale-down's targets) for its
/// WAL positions through the Lease ([`crate::pod::answers`]), wait up to
/// [`SURVEY_WAIT_SECONDS`] for them all to answer, and record the most advanced Ready
/// standby that answered as the target, with the positions (intent first), before the
/// Lease is handed to it.
pub(super) fn survey(
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
        if dead_end || attempt >= SURVEYS_FOR_EVERY_MEMBER {
            // Nothing to go back to either: a person who knows where the data is may
            // name it, as when no standby can be promoted (found by the model check: a
            // member a scale-down removed stayed unread for ever, and the old primary's
            // volume was lost).
            let quorum = format!("{what}: the synchronous quorum cannot be read");
            if let Some(out) = back_or_adopted(s, o, (what, &surveyed), &quorum) {
                return out;
            }
        }
        return wait.with_actions(actions);
    }
    let read = (token.as_str(), finished, surveyed.as_slice());
    let skipped = match members_unread(s, world, read, below, what) {
        Ok(skipped) => skipped,
        Err(wait) => return (*wait).with_actions(actions),
    };
    let choice = Choice::of(spec.synchronous.as_ref(), old, below);
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
            // Nothing to go back to: a person who knows where the data is names it.
            back_or_adopted(s, o, (what, &surveyed), &message)
                .unwrap_or_else(|| for_a_person(&message, actions))
        }
    }
}

/// No member can be promoted and the old primary cannot be taken back (`message`): a
/// Degraded wait, looked at every 10 s, naming the way out.
fn for_a_person(message: &str, actions: Vec<PgAction>) -> D {
    let message = format!(
        "{message}; if a member holds the data but cannot start as a standby (no primary to follow), set {ADOPT_PRIMARY}=<pod> to make it the primary"
    );
    stay(NO_PROMOTION_TARGET, message, actions)
        .degraded()
        .requeue(std::time::Duration::from_secs(10))
}

/// No standby can be promoted (`what`, with what the surveys read): back to the old
/// primary when [`abandon`] may, else the member a person names with
/// `lockstep.dev/adopt-primary` (`message` says why in its history); `None`: neither.
fn back_or_adopted(
    s: &Switchover,
    o: &Observed,
    (what, surveyed): (&str, &[Surveyed]),
    message: &str,
) -> Option<D> {
    abandon(s, o, &unpromotable(o, what, surveyed)).or_else(|| adoption_requested(o, None, message))
}

/// A failover or switchover whose surveys read no standby that can be promoted goes
/// back to the old primary when that is safe and possible: its ordinal has a live pod
/// (for a failover, not the failed one: recreated, on its volume; a switchover's old
/// primary stopped on purpose) whose manager does not report an empty volume
/// ([`crate::pod::volume`]: recreated on a lost claim, it holds no WAL;
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
pub(super) fn abandon(s: &Switchover, o: &Observed, why: &str) -> Option<D> {
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
pub(super) fn unpromotable(o: &Observed, what: &str, surveyed: &[Surveyed]) -> String {
    format!(
        "{what}: no standby the survey read can be promoted ({})",
        describe(o, surveyed)
    )
}

/// Why a survey (its `token` and what it read) has no standby to promote: none that
/// answered is a Ready replica, or, under `Required` ([`Reach::Furthest`]), the members
/// that reached furthest are not, and promoting a Ready one below them would lose the
/// acknowledged commits only they may have (named, with the way out).
pub(super) fn no_target_message(
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

/// While the step is younger than [`TARGET_RETURN_SECONDS`], a target its survey read
/// further than `next` (the member [`retarget`] would take instead), whose volume is not
/// reported empty, is waited for: its pod is only restarting or recreated on its volume
/// (a node drained, a pod deleted), and promoting `next` would lose the WAL only the
/// target has, or fork a history the target then rewinds away. Found by the model check:
/// a failover's chosen member deleted just after the survey, and a member behind it
/// promoted under `Preferred` while it came back Ready seconds later. `None`: go on
/// (the target is no further, lost its volume, or was waited for long enough); else
/// the message and how much longer it is waited for.
fn target_returning(
    s: &Switchover,
    world: &World<Observed>,
    next: &PodRef,
    why: &str,
) -> Option<(String, std::time::Duration)> {
    let o = &world.observed;
    let surveyed = s.surveyed.as_ref()?;
    let at = |k: i32| surveyed.iter().find(|r| r.ordinal == k).map(reach);
    let (t, n) = (s.target.ordinal, next.ordinal);
    let further = at(t)? > at(n).unwrap_or_default();
    let waited = world.in_state_for();
    let bound = std::time::Duration::from_secs(TARGET_RETURN_SECONDS);
    (further && !o.own.empty.contains(&t) && waited < bound).then(|| {
        let message = format!(
            "{why}; waiting up to {TARGET_RETURN_SECONDS}s for it to come back on its volume, since its survey read it further than {} (promoting that one would lose what only {} has)",
            o.pod_name(n),
            o.pod_name(t)
        );
        (message, bound - waited)
    })
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
pub(super) fn members(s: &Switchover, below: i32) -> Vec<i32> {
    (0..s.cluster.replicas.min(below))
        .filter(|k| *k != s.cluster.primary)
        .collect()
}

/// Every member other than the old primary ([`members`]) may hold newer WAL than those
/// the survey read, so a survey that read fewer waits and surveys again, up to
/// [`SURVEYS_FOR_EVERY_MEMBER`] surveys. `Ok(None)`: every live member
/// answered; `Ok(Some(note))`: the last survey still missed some, named in the note
/// the transition's message carries into the history; `Err`: wait or survey again.
pub(super) fn members_unread(
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
pub(super) fn resurvey(
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
/// ([`crate::pod::volume`]): then wait, Degraded, for a person (or the
/// old primary) without surveying again. `None`: the survey read enough, or there is no
/// quorum to meet.
pub(super) fn quorum_unread(
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
         spec.synchronous.dataDurability to Preferred, or set {ADOPT_PRIMARY}=<pod> \
         to make a member that holds the data the primary",
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
pub(super) enum Unread {
    /// Survey again after a while: the members not read may yet answer.
    Wait(D),
    /// Every member not read lost its data: only the old primary, or a person, can end
    /// the wait.
    DeadEnd(D),
}

/// Members that answered the survey after its choice was read (a manager's round just
/// after the operator's), weighed again before the Lease is handed: one more advanced
/// than the chosen target becomes the target (found by the model check: a member
/// evicted through two surveys answered the third just after the operator read it, and
/// the Lease went to a member below it). `None`: no answer since, or the choice stands.
/// A member that answers only after the hand-over is skipped, as one that never
/// answered is.
pub(super) fn answered_since(
    spec: &PostgresClusterSpec,
    s: &Switchover,
    o: &Observed,
    what: &str,
) -> Option<D> {
    let read = s.surveyed.as_ref()?;
    let token = o.own.lease.as_ref()?.survey.as_deref()?;
    let late: Vec<Surveyed> = answered(o, token)
        .into_iter()
        .filter(|a| !read.contains(a))
        .collect();
    if late.is_empty() {
        return None;
    }
    let merged: Vec<Surveyed> = read
        .iter()
        .filter(|x| late.iter().all(|l| l.ordinal != x.ordinal))
        .chain(&late)
        .cloned()
        .collect();
    let choice = Choice::of(
        spec.synchronous.as_ref(),
        s.cluster.primary,
        target_bound(spec, s),
    );
    let target = most_advanced(o, &merged, choice)?;
    let at = |k: i32| merged.iter().find(|m| m.ordinal == k).map(reach);
    if target.ordinal == s.target.ordinal || at(target.ordinal) <= at(s.target.ordinal) {
        return None;
    }
    let message = format!(
        "{what}: {} answered survey {token} after the choice was read; {} is the most advanced Ready standby ({}), not {}",
        o.pod_names(&late.iter().map(|l| l.ordinal).collect::<Vec<_>>()),
        o.pod_name(target.ordinal),
        describe(o, &merged),
        o.pod_name(s.target.ordinal),
    );
    Some(Decision::go(
        PgState::SwitchingOver(Switchover {
            target,
            step: SwitchStep::Fence,
            surveyed: Some(merged),
            ..s.clone()
        }),
        MOST_ADVANCED_CHOSEN,
        message,
    ))
}

/// How long a target its survey found further than every other candidate is waited for
/// while it is not Ready (its pod restarting, or recreated on its volume), from when the
/// switchover's step began, before a member behind it is promoted.
pub(crate) const TARGET_RETURN_SECONDS: u64 = 60;

/// The target cannot be promoted (`why`): choose another, the most advanced its survey
/// read (under `Required` only one that reached as far as any member read), or, for a
/// planned switchover, the next by [`choose_target`]; with none, survey again, go back
/// to the old primary, or wait (Degraded). A target further than the other choice is
/// waited for first ([`target_returning`]).
pub(crate) fn retarget(
    spec: &PostgresClusterSpec,
    s: &Switchover,
    world: &World<Observed>,
    what: &str,
    why: String,
    actions: Vec<PgAction>,
) -> D {
    let o = &world.observed;
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
            Choice::of(spec.synchronous.as_ref(), cluster.primary, below).excluding(&s.target),
        ),
        None => choose_target(o, cluster, below, image)
            .filter(|c| c.ordinal != s.target.ordinal || c.uid != s.target.uid),
    };
    if let Some(next) = &candidate
        && let Some((wait, left)) = target_returning(s, world, next, &why)
    {
        return stay(TARGET_RETURNING, wait, actions).requeue(left);
    }
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
                        o.live(*k)
                            .is_some_and(|p| p.role != Some(crate::pod::Role::Demoted))
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
            not_ready_for_long(s, world, &message, actions)
        }
    }
}

/// The target is merely not Ready (`message`), and no other can be promoted: it is
/// waited for up to [`TARGET_RETURN_SECONDS`] in this step, Degraded; then the old primary
/// is taken back when [`abandon`] may (it has every commit, and the role is moved again
/// from `Ready`), or the member a person names is adopted; else the wait goes on, looked
/// at again every 10 s. Found by the deep model check: an upgrade's target promoted by
/// hand forked its history and was fenced by its agent, and the demoted old primary and
/// it each waited for the other to become the primary to rewind against.
fn not_ready_for_long(
    s: &Switchover,
    world: &World<Observed>,
    message: &str,
    actions: Vec<PgAction>,
) -> D {
    let o = &world.observed;
    let old = o.pod_name(s.cluster.primary);
    let left = std::time::Duration::from_secs(TARGET_RETURN_SECONDS)
        .checked_sub(world.in_state_for())
        .filter(|left| !left.is_zero());
    if let Some(left) = left {
        let message = format!(
            "{message}; waiting up to {TARGET_RETURN_SECONDS}s for it, then going back to {old} if the Lease never left it"
        );
        return stay(NO_PROMOTION_TARGET, message, actions)
            .degraded()
            .requeue(left);
    }
    abandon(s, o, message)
        .or_else(|| adoption_requested(o, None, message))
        .unwrap_or_else(|| for_a_person(message, actions))
}
