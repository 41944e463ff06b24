//! Upgrading: hooks, the pod-by-pod protocol, retargeting.

use super::*;

#[test]
fn an_image_change_starts_with_the_highest_ordinal_and_records_its_uid() {
    let d = decide(&spec("db:2"), &ready("db:1"), at_rest("db:1"));
    assert_eq!(d.reason(), IMAGE_CHANGED);
    assert_eq!(
        target(&d),
        Some(&upgrading("db:2", 2, UpgradeStep::PreHook, &uid(2, "db:1")))
    );
}

#[test]
fn an_upgrade_waits_while_another_pod_is_not_ready() {
    let mut o = at_rest("db:1");
    o.pods.insert(0, pod(0, "db:2", false));
    o.pods.insert(1, pod(1, "db:1", false));
    let d = decide(&spec("db:2"), &ready("db:1"), o);
    assert_eq!(d.reason(), UPGRADE_PENDING);
}

#[test]
fn a_pod_that_is_already_down_is_replaced_first() {
    let mut o = at_rest("db:1");
    o.pods.insert(0, pod(0, "db:1", false));
    let d = decide(&spec("db:2"), &ready("db:1"), o);
    assert!(matches!(target(&d), Some(DdbState::Upgrading(u)) if u.ordinal == 0));
}

#[test]
fn the_pre_hook_runs_before_the_pod_is_deleted() {
    let s = with_hooks(spec("db:2"), 1);
    let mut o = at_rest("db:1");
    if let Some(sts) = &mut o.statefulset {
        sts.image = Some("db:2".to_owned());
    }
    let state = upgrading("db:2", 2, UpgradeStep::PreHook, &uid(2, "db:1"));
    let d = decide(&s, &state, o.clone());
    let key = hook_key(HookPhase::Pre, 2, "db:2", &uid(2, "db:1"), 1);
    assert!(
        matches!(d.actions(), [DdbAction::RunHook { phase: HookPhase::Pre, ordinal: 2, key: k, .. }] if *k == key)
    );
    assert!(deletes(&d).is_empty());
    o.jobs.push(job(&key, Purpose::Hook, succeeded()));
    let d = decide(&s, &state, o);
    assert_eq!(d.reason(), PRE_HOOK_SUCCEEDED);
    let DdbState::Upgrading(restart) = upgrading("db:2", 2, UpgradeStep::Restart, &uid(2, "db:1"))
    else {
        unreachable!("upgrading() makes an Upgrading state")
    };
    // The pod is drained now: it is replaced next, whatever else goes down.
    assert_eq!(
        target(&d),
        Some(&DdbState::Upgrading(Upgrade {
            drained: true,
            ..restart
        }))
    );
    assert!(
        d.actions().is_empty(),
        "the delete comes after the uid is persisted"
    );
}

#[test]
fn the_statefulset_template_moves_to_the_target_before_any_pod_goes_down() {
    let state = upgrading("db:2", 2, UpgradeStep::Restart, &uid(2, "db:1"));
    let d = decide(&spec("db:2"), &state, at_rest("db:1"));
    assert!(matches!(d.actions(), [DdbAction::EnsureStatefulSet(s)] if s.image == "db:2"));
    assert!(deletes(&d).is_empty());
}

fn template_at(mut o: Observed, image: &str) -> Observed {
    if let Some(sts) = &mut o.statefulset {
        sts.image = Some(image.to_owned());
    }
    o
}

#[test]
fn the_pod_is_deleted_with_its_recorded_uid_only_while_the_others_are_ready() {
    let state = upgrading("db:2", 2, UpgradeStep::Restart, &uid(2, "db:1"));
    let d = decide(&spec("db:2"), &state, template_at(at_rest("db:1"), "db:2"));
    assert_eq!(deletes(&d), vec![(2, uid(2, "db:1"))]);
    // Pod 0 is down but already at the target: pod 2 waits for it.
    let mut o = template_at(at_rest("db:1"), "db:2");
    o.pods.insert(0, pod(0, "db:2", false));
    let d = decide(&spec("db:2"), &state, o);
    assert!(deletes(&d).is_empty());
    assert_eq!(d.reason(), WAITING_FOR_PODS);
}

#[test]
fn a_pod_that_goes_down_while_another_waits_is_replaced_first() {
    let state = upgrading("db:2", 2, UpgradeStep::Restart, &uid(2, "db:1"));
    let mut o = template_at(at_rest("db:1"), "db:2");
    o.pods.insert(0, pod(0, "db:1", false));
    let d = decide(&spec("db:2"), &state, o);
    assert!(deletes(&d).is_empty());
    assert_eq!(d.reason(), REPLANNED);
    assert_eq!(
        target(&d),
        Some(&upgrading("db:2", 0, UpgradeStep::PreHook, &uid(0, "db:1")))
    );
}

#[test]
fn a_down_pod_that_recovers_gives_the_highest_ordinal_its_turn_back() {
    let state = upgrading("db:2", 0, UpgradeStep::PreHook, &uid(0, "db:1"));
    let d = decide(&spec("db:2"), &state, template_at(at_rest("db:1"), "db:2"));
    assert_eq!(d.reason(), REPLANNED);
    assert_eq!(
        target(&d),
        Some(&upgrading("db:2", 2, UpgradeStep::PreHook, &uid(2, "db:1")))
    );
}

#[test]
fn upgrade_never_deletes_a_pod_twice_after_restart() {
    // The operator restarts after deleting pod 2: whatever it sees of ordinal 2 now —
    // terminating, gone, or recreated — it never deletes anything but the recorded uid.
    let state = upgrading("db:2", 2, UpgradeStep::Restart, &uid(2, "db:1"));
    let mut terminating = template_at(at_rest("db:1"), "db:2");
    if let Some(p) = terminating.pods.get_mut(&2) {
        p.terminating = true;
    }
    let mut gone = template_at(at_rest("db:1"), "db:2");
    gone.pods.remove(&2);
    let mut recreated = template_at(at_rest("db:1"), "db:2");
    recreated.pods.insert(2, pod(2, "db:2", false));
    for o in [terminating, gone, recreated.clone()] {
        let d = decide(&spec("db:2"), &state, o);
        assert!(deletes(&d).is_empty(), "{d:?}");
    }
    recreated.pods.insert(2, pod(2, "db:2", true));
    let d = decide(&spec("db:2"), &state, recreated);
    assert_eq!(d.reason(), POD_REPLACED);
    assert_eq!(
        target(&d),
        Some(&upgrading(
            "db:2",
            2,
            UpgradeStep::PostHook,
            &uid(2, "db:2")
        ))
    );
}

#[test]
fn the_post_hook_runs_before_the_next_pod() {
    let s = with_hooks(spec("db:2"), 1);
    let mut o = template_at(at_rest("db:1"), "db:2");
    o.pods.insert(2, pod(2, "db:2", true));
    let state = upgrading("db:2", 2, UpgradeStep::PostHook, &uid(2, "db:2"));
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
    o.jobs.push(job(&key, Purpose::Hook, JobOutcome::Running));
    assert!(target(&decide(&s, &state, o.clone())).is_none());
    o.jobs = vec![job(&key, Purpose::Hook, succeeded())];
    let d = decide(&s, &state, o);
    assert_eq!(d.reason(), POD_UPGRADED);
    assert_eq!(
        target(&d),
        Some(&upgrading("db:2", 1, UpgradeStep::PreHook, &uid(1, "db:1")))
    );
}

#[test]
fn the_last_pod_completes_the_upgrade_and_sets_the_version() {
    let o = template_at(at_rest("db:2"), "db:2");
    let state = upgrading("db:2", 0, UpgradeStep::PostHook, &uid(0, "db:2"));
    let d = decide(&spec("db:2"), &state, o);
    assert_eq!(d.reason(), UPGRADE_COMPLETED);
    assert_eq!(target(&d), Some(&ready("db:2")));
    assert_eq!(
        crate::machines::distributeddb::version(target(&d)),
        Some("db:2".to_owned())
    );
    assert_eq!(
        crate::machines::distributeddb::version(Some(&state)),
        Some("db:1".to_owned())
    );
}

#[test]
fn a_failed_hook_is_degraded_naming_the_pod_and_the_hook_then_retried_after_backoff() {
    let s = with_hooks(spec("db:2"), 2);
    let mut o = template_at(at_rest("db:1"), "db:2");
    let key = hook_key(HookPhase::Pre, 2, "db:2", &uid(2, "db:1"), 1);
    o.jobs.push(job(&key, Purpose::Hook, failed(995)));
    let state = upgrading("db:2", 2, UpgradeStep::PreHook, &uid(2, "db:1"));
    let d = decide(&s, &state, o.clone());
    assert!(is_degraded(&d));
    assert_eq!(d.reason(), HOOK_FAILED);
    assert!(
        message(&d).contains("pre-upgrade hook of db-2"),
        "{}",
        message(&d)
    );
    assert!(message(&d).contains("BackoffLimitExceeded"));
    o.jobs = vec![job(&key, Purpose::Hook, failed(900))];
    let d = decide(&s, &state, o);
    assert_eq!(d.reason(), HOOK_RETRIED);
    assert!(matches!(target(&d), Some(DdbState::Upgrading(u)) if u.attempt == 2));
}

#[test]
fn an_exhausted_hook_waits_for_the_retry_annotation() {
    let s = with_hooks(spec("db:2"), 0);
    let mut o = template_at(at_rest("db:1"), "db:2");
    let key = hook_key(HookPhase::Pre, 2, "db:2", &uid(2, "db:1"), 1);
    o.jobs.push(job(&key, Purpose::Hook, failed(0)));
    let state = upgrading("db:2", 2, UpgradeStep::PreHook, &uid(2, "db:1"));
    let d = decide(&s, &state, o.clone());
    assert!(is_degraded(&d));
    assert!(message(&d).contains("lockstep.dev/retry-hook"));
    assert!(matches!(
        d,
        Decision::Stay {
            wait: crate::engine::Wait::Watch,
            ..
        }
    ));
    o.own.requests.retry_hook = Some("1".to_owned());
    let d = decide(&s, &state, o.clone());
    assert_eq!(d.reason(), HOOK_RETRY_REQUESTED);
    let Some(DdbState::Upgrading(next)) = target(&d) else {
        panic!("{d:?}")
    };
    assert_eq!((next.attempt, next.budget.round_start), (2, 2));
    // The same token, seen again at the next failure, asks for nothing more.
    let key2 = hook_key(HookPhase::Pre, 2, "db:2", &uid(2, "db:1"), 2);
    o.jobs.push(job(&key2, Purpose::Hook, failed(0)));
    let d = decide(&s, &DdbState::Upgrading(next.clone()), o);
    assert_eq!(d.reason(), HOOK_FAILED);
}

#[test]
fn a_stale_retry_token_from_before_the_upgrade_is_not_acted_on() {
    let mut o = at_rest("db:1");
    o.own.requests.retry_hook = Some("old".to_owned());
    let d = decide(&spec("db:2"), &ready("db:1"), o);
    assert!(
        matches!(target(&d), Some(DdbState::Upgrading(u)) if u.budget.retry_ack.as_deref() == Some("old"))
    );
}

#[test]
fn the_skip_annotation_moves_an_exhausted_hook_on() {
    let s = with_hooks(spec("db:2"), 0);
    let mut o = template_at(at_rest("db:1"), "db:2");
    let key = hook_key(HookPhase::Pre, 2, "db:2", &uid(2, "db:1"), 1);
    o.jobs.push(job(&key, Purpose::Hook, failed(0)));
    o.own.requests.skip_hook = Some("go".to_owned());
    let state = upgrading("db:2", 2, UpgradeStep::PreHook, &uid(2, "db:1"));
    let d = decide(&s, &state, o);
    assert_eq!(d.reason(), HOOK_SKIPPED);
    assert!(
        matches!(target(&d), Some(DdbState::Upgrading(u)) if u.step == UpgradeStep::Restart && u.skip_ack.as_deref() == Some("go"))
    );
}

#[test]
fn a_new_image_mid_upgrade_retargets_from_the_top_when_no_pod_is_in_flight() {
    let mut o = template_at(at_rest("db:1"), "db:2");
    o.pods.insert(2, pod(2, "db:2", true));
    let state = upgrading("db:2", 1, UpgradeStep::PreHook, &uid(1, "db:1"));
    let d = decide(&spec("db:3"), &state, o);
    assert_eq!(d.reason(), IMAGE_CHANGED);
    assert!(
        matches!(target(&d), Some(DdbState::Upgrading(u)) if u.to == "db:3" && u.ordinal == 2 && u.pod_uid == uid(2, "db:2"))
    );
}

#[test]
fn a_new_image_waits_while_a_pod_is_in_flight() {
    let mut o = template_at(at_rest("db:1"), "db:2");
    o.pods.remove(&2);
    let state = upgrading("db:2", 2, UpgradeStep::Restart, &uid(2, "db:1"));
    let d = decide(&spec("db:3"), &state, o.clone());
    assert!(target(&d).is_none());
    // The template keeps the image of the persisted target until the retarget is taken.
    assert!(
        !d.actions()
            .iter()
            .any(|a| matches!(a, DdbAction::EnsureStatefulSet(s) if s.image == "db:3"))
    );
    // Once the pod is back and has not become Ready within the readiness window (a bad
    // image: the retarget is a rollback), the retarget replaces it first.
    o.pods.insert(2, pod(2, "db:2", false));
    let d = decide(&spec("db:3"), &state, o);
    assert!(
        matches!(target(&d), Some(DdbState::Upgrading(u)) if u.to == "db:3" && u.ordinal == 2 && u.pod_uid == uid(2, "db:2"))
    );
}

#[test]
fn a_pod_recreated_at_a_stale_image_is_replaced_again() {
    let mut o = template_at(at_rest("db:1"), "db:2");
    o.pods.insert(2, pod(2, "db:0", true));
    let state = upgrading("db:2", 2, UpgradeStep::Restart, &uid(2, "db:1"));
    let d = decide(&spec("db:2"), &state, o);
    assert_eq!(d.reason(), RECREATED_AT_STALE_IMAGE);
    assert_eq!(
        target(&d),
        Some(&upgrading("db:2", 2, UpgradeStep::PreHook, &uid(2, "db:0")))
    );
}

#[test]
fn a_pod_that_is_down_skips_its_pre_hook() {
    let s = with_hooks(spec("db:2"), 1);
    let mut o = template_at(at_rest("db:1"), "db:2");
    o.pods.insert(2, pod(2, "db:1", false));
    let state = upgrading("db:2", 2, UpgradeStep::PreHook, &uid(2, "db:1"));
    let d = decide(&s, &state, o);
    assert_eq!(d.reason(), PRE_HOOK_SKIPPED);
}

#[test]
fn a_replacement_that_does_not_become_ready_is_degraded_after_the_readiness_window() {
    // Issue 11, bug 3: a pod that never becomes Ready mid-upgrade was reported only as
    // Progressing until the 15-minute step deadline.
    let state = upgrading("db:2", 2, UpgradeStep::Restart, &uid(2, "db:1"));
    let mut o = template_at(at_rest("db:1"), "db:2");
    o.pods.insert(2, pod(2, "db:2", false));
    let d = decide_after(&spec("db:2"), &state, o.clone(), 60);
    assert!(!is_degraded(&d), "{d:?}");
    assert!(
        matches!(
            d,
            Decision::Stay {
                wait: crate::engine::Wait::Requeue(_),
                ..
            }
        ),
        "it looks again when the window ends: {d:?}"
    );
    let d = decide_after(&spec("db:2"), &state, o, 1000);
    assert!(is_degraded(&d), "{d:?}");
    assert!(target(&d).is_none() && deletes(&d).is_empty());
    assert!(
        message(&d).contains("db-2") && message(&d).contains("Ready"),
        "{}",
        message(&d)
    );
}

#[test]
fn a_new_image_waits_while_the_replacement_starts_at_the_previous_target() {
    // Issue 11, bug 4: the retarget was taken as soon as the replacement existed, and the
    // starting pod was deleted without its pre-hook.
    let state = upgrading("db:2", 2, UpgradeStep::Restart, &uid(2, "db:1"));
    let mut o = template_at(at_rest("db:1"), "db:2");
    o.pods.insert(2, pod(2, "db:2", false));
    let d = decide_after(&spec("db:3"), &state, o.clone(), 30);
    assert!(target(&d).is_none(), "{d:?}");
    assert!(deletes(&d).is_empty());
    assert!(
        !d.actions()
            .iter()
            .any(|a| matches!(a, DdbAction::EnsureStatefulSet(s) if s.image == "db:3"))
    );
    // Once it is Ready, the retarget replaces it from its pre-hook.
    o.pods.insert(2, pod(2, "db:2", true));
    let d = decide_after(&spec("db:3"), &state, o, 30);
    assert_eq!(d.reason(), IMAGE_CHANGED);
    assert_eq!(
        target(&d),
        Some(&upgrading("db:3", 2, UpgradeStep::PreHook, &uid(2, "db:2")))
    );
}

#[test]
fn a_drained_pod_is_not_passed_over_when_another_goes_down() {
    // Issue 11, bug 5: after pod 2's pre-hook ran, pod 0 went NotReady and was replaced
    // while pod 2 waited drained: two members out of service.
    let s = with_hooks(spec("db:2"), 1);
    let mut o = template_at(at_rest("db:1"), "db:2");
    let key = hook_key(HookPhase::Pre, 2, "db:2", &uid(2, "db:1"), 1);
    o.jobs.push(job(&key, Purpose::Hook, succeeded()));
    let pre = upgrading("db:2", 2, UpgradeStep::PreHook, &uid(2, "db:1"));
    let d = decide(&s, &pre, o.clone());
    assert_eq!(d.reason(), PRE_HOOK_SUCCEEDED);
    let Some(restart) = target(&d).cloned() else {
        panic!("{d:?}")
    };
    o.pods.insert(0, pod(0, "db:1", false));
    let d = decide(&s, &restart, o);
    assert!(target(&d).is_none(), "{d:?}");
    assert!(deletes(&d).is_empty());
    assert_eq!(d.reason(), WAITING_FOR_PODS);
    assert!(message(&d).contains("db-0"), "{}", message(&d));
}

#[test]
fn a_replan_for_a_pod_that_went_down_names_that_pod() {
    // Issue 11, bug 5: the history said "db-2 is Ready again" when db-0 had gone down.
    let state = upgrading("db:2", 2, UpgradeStep::Restart, &uid(2, "db:1"));
    let mut o = template_at(at_rest("db:1"), "db:2");
    o.pods.insert(0, pod(0, "db:1", false));
    let d = decide(&spec("db:2"), &state, o);
    assert_eq!(d.reason(), REPLANNED);
    assert!(
        !message(&d).contains("Ready again") && message(&d).contains("db-0"),
        "{}",
        message(&d)
    );
}

#[test]
fn a_new_image_waits_while_the_pod_is_drained() {
    // A drained pod is in flight: retargeting would drain another pod while it waits.
    let mut o = template_at(at_rest("db:1"), "db:2");
    o.pods.insert(2, pod(2, "db:2", true));
    let DdbState::Upgrading(restart) = upgrading("db:2", 1, UpgradeStep::Restart, &uid(1, "db:1"))
    else {
        unreachable!("upgrading() makes an Upgrading state")
    };
    let drained = DdbState::Upgrading(Upgrade {
        drained: true,
        ..restart
    });
    let d = decide_after(&spec("db:3"), &drained, o, 30);
    assert!(target(&d).is_none(), "{d:?}");
    assert_eq!(deletes(&d), vec![(1, uid(1, "db:1"))]);
}

#[test]
fn a_pod_chosen_while_down_that_is_ready_again_gets_its_pre_hook_first() {
    // Found by a deeper model-check run: its pre-hook was skipped because it was down;
    // Ready again in Restart, it was deleted without one.
    let s = with_hooks(spec("db:2"), 1);
    let state = upgrading("db:2", 2, UpgradeStep::Restart, &uid(2, "db:1"));
    let d = decide(&s, &state, template_at(at_rest("db:1"), "db:2"));
    assert!(deletes(&d).is_empty(), "{d:?}");
    assert_eq!(d.reason(), REPLANNED);
    assert_eq!(
        target(&d),
        Some(&upgrading("db:2", 2, UpgradeStep::PreHook, &uid(2, "db:1")))
    );
}

#[test]
fn a_new_image_waits_while_the_pre_hook_runs() {
    let s = with_hooks(spec("db:3"), 1);
    let mut o = template_at(at_rest("db:1"), "db:2");
    let key = hook_key(HookPhase::Pre, 2, "db:2", &uid(2, "db:1"), 1);
    o.jobs.push(job(&key, Purpose::Hook, JobOutcome::Running));
    let state = upgrading("db:2", 2, UpgradeStep::PreHook, &uid(2, "db:1"));
    let d = decide(&s, &state, o);
    assert!(target(&d).is_none(), "{d:?}");
}
