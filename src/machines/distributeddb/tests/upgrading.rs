//! Upgrading: hooks, the pod-by-pod protocol, retargeting.

use super::*;

/// Every pod still at db:1, the StatefulSet's template already at db:2.
fn mid_upgrade() -> Observed {
    at_rest("db:1").with_template("db:2")
}

/// The upgrade to db:2 of pod `k`, seen at db:1 when it was chosen, at `step`.
fn upgrade_of(k: i32, step: UpgradeStep) -> DdbState {
    upgrading("db:2", k, step, &uid(k, "db:1"))
}

/// The upgrade to db:2 of pod 2 as it runs `image`, at `step`.
fn pod_2_running(image: &str, step: UpgradeStep) -> DdbState {
    upgrading("db:2", 2, step, &uid(2, image))
}

/// `state` once its pod is drained (its pre-hook ran).
fn drained(state: DdbState) -> DdbState {
    match state {
        DdbState::Upgrading(u) => DdbState::Upgrading(Upgrade { drained: true, ..u }),
        other => other,
    }
}

/// The key of pod 2's pre-hook Job (from db:1 to db:2) at `attempt`.
fn pre_hook_key(attempt: u32) -> String {
    hook_key(HookPhase::Pre, 2, "db:2", &uid(2, "db:1"), attempt)
}

/// Pod 2's pre-hook Job at `attempt`, with `outcome`.
fn pre_hook(attempt: u32, outcome: JobOutcome) -> JobView {
    job(&pre_hook_key(attempt), Purpose::Hook, outcome)
}

/// The decision of pod 2's restart on the way to db:2, seeing `o`.
fn restarting(o: Observed) -> Decision<DdbState, DdbAction> {
    decide(&spec("db:2"), &upgrade_of(2, UpgradeStep::Restart), o)
}

/// The upgrade `d` goes to, if it goes to one.
fn next_upgrade(d: &Decision<DdbState, DdbAction>) -> Option<&Upgrade> {
    match target(d) {
        Some(DdbState::Upgrading(u)) => Some(u),
        _ => None,
    }
}

/// Whether `d` moves the StatefulSet's template to `image`.
fn moves_template_to(d: &Decision<DdbState, DdbAction>, image: &str) -> bool {
    has_action(
        d,
        |a| matches!(a, DdbAction::EnsureStatefulSet(s) if s.image == image),
    )
}

/// Whether `d` retargets to db:3 from the top: pod 2, as it runs db:2.
fn retargets_pod_2(d: &Decision<DdbState, DdbAction>) -> bool {
    next_upgrade(d).is_some_and(|u| u.to == "db:3" && u.ordinal == 2 && u.pod_uid == uid(2, "db:2"))
}

#[test]
fn an_image_change_starts_with_the_highest_ordinal_and_records_its_uid() {
    let d = decide(&spec("db:2"), &ready("db:1"), at_rest("db:1"));
    assert_goes(&d, IMAGE_CHANGED, &upgrade_of(2, UpgradeStep::PreHook));
}

#[test]
fn an_upgrade_begun_again_runs_a_pre_hook_that_failed_in_an_earlier_one_anew() {
    // An earlier upgrade to db:2, undone before pod 2 was replaced, left its failed
    // pre-hook Job: this upgrade's first attempt is the next one, with its own retries.
    let s = with_hooks(spec("db:2"), 0);
    let o = at_rest("db:1").with_job(pre_hook(1, failed(0)));
    let d = decide(&s, &ready("db:1"), o.clone());
    let u = next_upgrade(&d).expect("an upgrade begins");
    assert_eq!((u.attempt, u.budget.round_start), (2, 2));
    let d = decide(
        &s,
        target(&d).expect("checked above"),
        o.with_template("db:2"),
    );
    assert!(
        matches!(d.actions(), [DdbAction::RunHook { phase: HookPhase::Pre, key, .. }] if *key == pre_hook_key(2)),
        "{:?}",
        d.actions()
    );
}

#[test]
fn an_upgrade_begun_again_adopts_a_pre_hook_that_still_runs() {
    let o = at_rest("db:1").with_job(pre_hook(1, JobOutcome::Running));
    let d = decide(&with_hooks(spec("db:2"), 0), &ready("db:1"), o);
    assert_eq!(next_upgrade(&d).map(|u| u.attempt), Some(1));
}

#[test]
fn an_upgrade_waits_while_another_pod_is_not_ready() {
    let o = at_rest("db:1")
        .with_pod(0, "db:2", false)
        .with_pod(1, "db:1", false);
    let d = decide(&spec("db:2"), &ready("db:1"), o);
    assert_eq!(d.reason(), UPGRADE_PENDING);
}

#[test]
fn a_pod_that_is_already_down_is_replaced_first() {
    let o = at_rest("db:1").with_pod(0, "db:1", false);
    let d = decide(&spec("db:2"), &ready("db:1"), o);
    assert_eq!(next_upgrade(&d).map(|u| u.ordinal), Some(0));
}

#[test]
fn the_pre_hook_runs_before_the_pod_is_deleted() {
    let s = with_hooks(spec("db:2"), 1);
    let state = upgrade_of(2, UpgradeStep::PreHook);
    let d = decide(&s, &state, mid_upgrade());
    assert!(
        matches!(d.actions(), [DdbAction::RunHook { phase: HookPhase::Pre, ordinal: 2, key, .. }] if *key == pre_hook_key(1))
    );
    assert!(evictions(&d).is_empty());
    let d = decide(&s, &state, mid_upgrade().with_job(pre_hook(1, succeeded())));
    // The pod is drained now: it is replaced next, whatever else goes down.
    let restart = drained(upgrade_of(2, UpgradeStep::Restart));
    assert_goes(&d, PRE_HOOK_SUCCEEDED, &restart);
    assert!(
        d.actions().is_empty(),
        "the delete comes after the uid is persisted"
    );
}

#[test]
fn the_statefulset_template_moves_to_the_target_before_any_pod_goes_down() {
    let d = restarting(at_rest("db:1"));
    assert!(matches!(d.actions(), [DdbAction::EnsureStatefulSet(s)] if s.image == "db:2"));
    assert!(evictions(&d).is_empty());
}

#[test]
fn the_pod_is_deleted_with_its_recorded_uid_only_while_the_others_are_ready() {
    assert_eq!(
        evictions(&restarting(mid_upgrade())),
        vec![(2, uid(2, "db:1"))]
    );
    // Pod 0 is down but already at the target: pod 2 waits for it.
    let d = restarting(mid_upgrade().with_pod(0, "db:2", false));
    assert!(evictions(&d).is_empty());
    assert_eq!(d.reason(), WAITING_FOR_PODS);
}

#[test]
fn a_pod_going_down_or_coming_back_replans_the_upgrade_before_any_delete() {
    let hooked = with_hooks(spec("db:2"), 1);
    let cases = [
        (
            "a pod that goes down while another waits is replaced first",
            spec("db:2"),
            upgrade_of(2, UpgradeStep::Restart),
            mid_upgrade().with_pod(0, "db:1", false),
            upgrade_of(0, UpgradeStep::PreHook),
        ),
        (
            "a down pod that recovers gives the highest ordinal its turn back",
            spec("db:2"),
            upgrade_of(0, UpgradeStep::PreHook),
            mid_upgrade(),
            upgrade_of(2, UpgradeStep::PreHook),
        ),
        (
            // Found by a deeper model-check run: its pre-hook was skipped because it was
            // down; Ready again in Restart, it was deleted without one.
            "a pod chosen while down that is Ready again gets its pre-hook first",
            hooked,
            upgrade_of(2, UpgradeStep::Restart),
            mid_upgrade(),
            upgrade_of(2, UpgradeStep::PreHook),
        ),
    ];
    for (case, s, from, seen, to) in cases {
        let d = decide(&s, &from, seen);
        assert!(evictions(&d).is_empty(), "{case}: {d:?}");
        assert_eq!(d.reason(), REPLANNED, "{case}");
        assert_eq!(target(&d), Some(&to), "{case}");
    }
}

#[test]
fn upgrade_never_deletes_a_pod_twice_after_restart() {
    // The operator restarts after deleting pod 2: whatever it sees of ordinal 2 now —
    // terminating, gone, or recreated — it never deletes anything but the recorded uid.
    let mut terminating = mid_upgrade();
    if let Some(p) = terminating.pods.get_mut(&2) {
        p.terminating = true;
    }
    let gone = mid_upgrade().without_pod(2);
    let recreated = mid_upgrade().with_pod(2, "db:2", false);
    for o in [terminating, gone, recreated] {
        let d = restarting(o);
        assert!(evictions(&d).is_empty(), "{d:?}");
    }
    let d = restarting(mid_upgrade().with_pod(2, "db:2", true));
    assert_goes(
        &d,
        POD_REPLACED,
        &pod_2_running("db:2", UpgradeStep::PostHook),
    );
}

#[test]
fn the_post_hook_runs_before_the_next_pod() {
    let s = with_hooks(spec("db:2"), 1);
    let o = mid_upgrade().with_pod(2, "db:2", true);
    let state = pod_2_running("db:2", UpgradeStep::PostHook);
    let d = decide(&s, &state, o.clone());
    assert!(matches!(
        d.actions(),
        [DdbAction::RunHook {
            phase: HookPhase::Post,
            ordinal: 2,
            ..
        }]
    ));
    let key = hook_key(HookPhase::Post, 2, "db:2", &uid(2, "db:2"), 1);
    let post_hook = |outcome| job(&key, Purpose::Hook, outcome);
    let running = o.clone().with_job(post_hook(JobOutcome::Running));
    assert!(target(&decide(&s, &state, running)).is_none());
    let d = decide(&s, &state, o.with_job(post_hook(succeeded())));
    assert_goes(&d, POD_UPGRADED, &upgrade_of(1, UpgradeStep::PreHook));
}

#[test]
fn the_last_pod_completes_the_upgrade_and_sets_the_version() {
    use crate::machines::distributeddb::version;
    let state = upgrading("db:2", 0, UpgradeStep::PostHook, &uid(0, "db:2"));
    let d = decide(&spec("db:2"), &state, at_rest("db:2").with_template("db:2"));
    assert_goes(&d, UPGRADE_COMPLETED, &ready("db:2"));
    assert_eq!(version(target(&d)), Some("db:2".to_owned()));
    assert_eq!(version(Some(&state)), Some("db:1".to_owned()));
}

#[test]
fn a_failed_hook_is_degraded_naming_the_pod_and_the_hook_then_retried_after_backoff() {
    let s = with_hooks(spec("db:2"), 2);
    let state = upgrade_of(2, UpgradeStep::PreHook);
    let d = decide(&s, &state, mid_upgrade().with_job(pre_hook(1, failed(995))));
    assert_degraded(&d, HOOK_FAILED);
    assert_says(&d, &["pre-upgrade hook of db-2", "BackoffLimitExceeded"]);
    let d = decide(&s, &state, mid_upgrade().with_job(pre_hook(1, failed(900))));
    assert_eq!(d.reason(), HOOK_RETRIED);
    assert_eq!(next_upgrade(&d).map(|u| u.attempt), Some(2));
}

#[test]
fn an_exhausted_hook_waits_for_the_retry_annotation() {
    let s = with_hooks(spec("db:2"), 0);
    let state = upgrade_of(2, UpgradeStep::PreHook);
    let mut o = mid_upgrade().with_job(pre_hook(1, failed(0)));
    let d = decide(&s, &state, o.clone());
    assert!(is_degraded(&d));
    assert_says(&d, &["lockstep.dev/retry-hook"]);
    assert_eq!(wait_of(&d), Some(Wait::Watch));
    o.own.requests.retry_hook = Some("1".to_owned());
    let d = decide(&s, &state, o.clone());
    assert_eq!(d.reason(), HOOK_RETRY_REQUESTED);
    let next = next_upgrade(&d).cloned().unwrap_or_else(|| panic!("{d:?}"));
    assert_eq!((next.attempt, next.budget.round_start), (2, 2));
    // The same token, seen again at the next failure, asks for nothing more.
    let failed_again = o.with_job(pre_hook(2, failed(0)));
    let d = decide(&s, &DdbState::Upgrading(next), failed_again);
    assert_eq!(d.reason(), HOOK_FAILED);
}

#[test]
fn a_stale_retry_token_from_before_the_upgrade_is_not_acted_on() {
    let mut o = at_rest("db:1");
    o.own.requests.retry_hook = Some("old".to_owned());
    let d = decide(&spec("db:2"), &ready("db:1"), o);
    assert!(next_upgrade(&d).is_some_and(|u| u.budget.retry_ack.as_deref() == Some("old")));
}

#[test]
fn the_skip_annotation_moves_an_exhausted_hook_on() {
    let s = with_hooks(spec("db:2"), 0);
    let mut o = mid_upgrade().with_job(pre_hook(1, failed(0)));
    o.own.requests.skip_hook = Some("go".to_owned());
    let d = decide(&s, &upgrade_of(2, UpgradeStep::PreHook), o);
    assert_eq!(d.reason(), HOOK_SKIPPED);
    assert!(
        next_upgrade(&d)
            .is_some_and(|u| u.step == UpgradeStep::Restart && u.skip_ack.as_deref() == Some("go"))
    );
}

#[test]
fn a_new_image_mid_upgrade_retargets_from_the_top_when_no_pod_is_in_flight() {
    let o = mid_upgrade().with_pod(2, "db:2", true);
    let d = decide(&spec("db:3"), &upgrade_of(1, UpgradeStep::PreHook), o);
    assert_eq!(d.reason(), IMAGE_CHANGED);
    assert!(retargets_pod_2(&d), "{d:?}");
}

#[test]
fn a_new_image_waits_while_a_pod_is_in_flight() {
    let state = upgrade_of(2, UpgradeStep::Restart);
    let d = decide(&spec("db:3"), &state, mid_upgrade().without_pod(2));
    assert!(target(&d).is_none());
    // The template keeps the image of the persisted target until the retarget is taken.
    assert!(!moves_template_to(&d, "db:3"));
    // Once the pod is back and has not become Ready within the readiness window (a bad
    // image: the retarget is a rollback), the retarget replaces it first.
    let back = mid_upgrade().with_pod(2, "db:2", false);
    assert!(retargets_pod_2(&decide(&spec("db:3"), &state, back)));
}

#[test]
fn a_retarget_back_to_the_image_a_pod_was_replaced_at_runs_its_post_hook_before_another_goes_down()
{
    // Pod 2 was replaced at db:2, spec.image went to db:3 while its replacement started,
    // and back to db:2 before its pre-hook for db:3 ran: pod 2's post-hook for db:2 (for
    // etcd: the new member caught up) runs before pod 1 goes down.
    let s = with_hooks(spec("db:2"), 1);
    let state = upgrading("db:3", 2, UpgradeStep::PreHook, &uid(2, "db:2"));
    let o = mid_upgrade().with_pod(2, "db:2", false);
    let d = decide(&s, &state, o.clone());
    let post = upgrading("db:2", 2, UpgradeStep::PostHook, &uid(2, "db:2"));
    assert_goes(&d, IMAGE_CHANGED, &post);
    assert_says(&d, &["db-2", "post-hook"]);
    // It waits for pod 2 to be Ready, then runs the hook; nothing else goes down.
    let d = decide(&s, &post, o);
    assert_stays(&d, WAITING_FOR_PODS);
    assert!(evictions(&d).is_empty());
}

#[test]
fn a_pod_recreated_at_a_stale_image_is_replaced_again() {
    let d = restarting(mid_upgrade().with_pod(2, "db:0", true));
    let again = pod_2_running("db:0", UpgradeStep::PreHook);
    assert_goes(&d, RECREATED_AT_STALE_IMAGE, &again);
}

#[test]
fn a_pod_that_is_down_skips_its_pre_hook() {
    let s = with_hooks(spec("db:2"), 1);
    let o = mid_upgrade().with_pod(2, "db:1", false);
    let d = decide(&s, &upgrade_of(2, UpgradeStep::PreHook), o);
    assert_eq!(d.reason(), PRE_HOOK_SKIPPED);
}

#[test]
fn a_replacement_that_does_not_become_ready_is_degraded_after_the_readiness_window() {
    // A pod that never becomes Ready mid-upgrade was reported only as
    // Progressing until the 15-minute step deadline.
    let state = upgrade_of(2, UpgradeStep::Restart);
    let o = mid_upgrade().with_pod(2, "db:2", false);
    let d = decide_after(&spec("db:2"), &state, o.clone(), 60);
    assert!(!is_degraded(&d), "{d:?}");
    assert!(
        matches!(wait_of(&d), Some(Wait::Requeue(_))),
        "it looks again when the window ends: {d:?}"
    );
    let d = decide_after(&spec("db:2"), &state, o, 1000);
    assert!(is_degraded(&d), "{d:?}");
    assert!(target(&d).is_none() && evictions(&d).is_empty());
    assert_says(&d, &["db-2", "Ready"]);
}

#[test]
fn a_new_image_waits_while_the_replacement_starts_at_the_previous_target() {
    // The retarget once was taken as soon as the replacement existed, and the
    // starting pod was deleted without its pre-hook.
    let state = upgrade_of(2, UpgradeStep::Restart);
    let starting = mid_upgrade().with_pod(2, "db:2", false);
    let d = decide_after(&spec("db:3"), &state, starting, 30);
    assert!(target(&d).is_none(), "{d:?}");
    assert!(evictions(&d).is_empty());
    assert!(!moves_template_to(&d, "db:3"));
    // Once it is Ready, the retarget replaces it from its pre-hook.
    let started = mid_upgrade().with_pod(2, "db:2", true);
    let d = decide_after(&spec("db:3"), &state, started, 30);
    let retarget = upgrading("db:3", 2, UpgradeStep::PreHook, &uid(2, "db:2"));
    assert_goes(&d, IMAGE_CHANGED, &retarget);
}

#[test]
fn a_drained_pod_is_not_passed_over_when_another_goes_down() {
    // After pod 2's pre-hook ran, pod 0 went NotReady and was replaced
    // while pod 2 waited drained: two members out of service.
    let s = with_hooks(spec("db:2"), 1);
    let o = mid_upgrade().with_job(pre_hook(1, succeeded()));
    let d = decide(&s, &upgrade_of(2, UpgradeStep::PreHook), o.clone());
    assert_eq!(d.reason(), PRE_HOOK_SUCCEEDED);
    let restart = target(&d).cloned().unwrap_or_else(|| panic!("{d:?}"));
    let d = decide(&s, &restart, o.with_pod(0, "db:1", false));
    assert_stays(&d, WAITING_FOR_PODS);
    assert!(evictions(&d).is_empty());
    assert_says(&d, &["db-0"]);
}

#[test]
fn a_replan_for_a_pod_that_went_down_names_that_pod() {
    // The history once said "db-2 is Ready again" when db-0 had gone down.
    let d = restarting(mid_upgrade().with_pod(0, "db:1", false));
    assert_eq!(d.reason(), REPLANNED);
    assert!(!message(&d).contains("Ready again"), "{}", message(&d));
    assert_says(&d, &["db-0"]);
}

#[test]
fn a_new_image_waits_while_the_pod_is_drained() {
    // A drained pod is in flight: retargeting would drain another pod while it waits.
    let o = mid_upgrade().with_pod(2, "db:2", true);
    let state = drained(upgrade_of(1, UpgradeStep::Restart));
    let d = decide_after(&spec("db:3"), &state, o, 30);
    assert!(target(&d).is_none(), "{d:?}");
    assert_eq!(evictions(&d), vec![(1, uid(1, "db:1"))]);
}

#[test]
fn a_new_image_waits_while_the_pre_hook_runs() {
    let s = with_hooks(spec("db:3"), 1);
    let o = mid_upgrade().with_job(pre_hook(1, JobOutcome::Running));
    let d = decide(&s, &upgrade_of(2, UpgradeStep::PreHook), o);
    assert!(target(&d).is_none(), "{d:?}");
}
