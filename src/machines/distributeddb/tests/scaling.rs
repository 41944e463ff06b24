//! Scaling: one replica at a time, behind the readiness gate of upgrades.

use super::*;

/// Decide from `state` until Ready, playing the StatefulSet controller (pods added Ready
/// and removed at once); returns the replicas the StatefulSet was asked for, in order.
fn scale(spec: &DistributedDBSpec, mut state: DdbState, mut o: Observed) -> Vec<i32> {
    let mut asked = Vec::new();
    for _ in 0..20 {
        let d = decide(spec, &state, o.clone());
        for a in d.actions() {
            if let DdbAction::EnsureStatefulSet(shape) = a {
                asked.push(shape.replicas);
                if let Some(sts) = &mut o.statefulset {
                    sts.replicas = shape.replicas;
                }
                o.pods.retain(|k, _| *k < shape.replicas);
                for k in 0..shape.replicas {
                    o.pods.entry(k).or_insert_with(|| pod(k, "db:1", true));
                }
            }
        }
        if let Some(to) = target(&d) {
            state = to.clone();
        }
        if matches!(state, DdbState::Ready { replicas, .. } if replicas == spec.replicas) {
            return asked;
        }
    }
    panic!("no Ready at {} replicas: {state:?}", spec.replicas)
}

/// Decide from `state` until Ready, as [`scale`] does, with every hook Job succeeding
/// as soon as it is created; returns what happened, in order: `sts N` for a replicas
/// write, `<hook> K` for the hook of member `K`.
fn scale_with_hooks(spec: &DistributedDBSpec, mut state: DdbState, mut o: Observed) -> Vec<String> {
    let mut story = Vec::new();
    for _ in 0..40 {
        let d = decide(spec, &state, o.clone());
        assert_declared(&state, &d);
        for a in d.actions() {
            match a {
                DdbAction::EnsureStatefulSet(shape) => {
                    story.push(format!("sts {}", shape.replicas));
                    if let Some(sts) = &mut o.statefulset {
                        sts.replicas = shape.replicas;
                    }
                    o.pods.retain(|k, _| *k < shape.replicas);
                    for k in 0..shape.replicas {
                        o.pods.entry(k).or_insert_with(|| pod(k, "db:1", true));
                    }
                }
                DdbAction::RunHook {
                    phase,
                    ordinal,
                    key,
                    ..
                } => {
                    let phase: &str = phase.into();
                    story.push(format!("{phase} {ordinal}"));
                    let done = JobOutcome::Succeeded {
                        at: testing::epoch(),
                    };
                    o.jobs.push(job(key, Purpose::Hook, done));
                }
                _ => {}
            }
        }
        if let Some(to) = target(&d) {
            state = to.clone();
        }
        if matches!(state, DdbState::Ready { replicas, .. } if replicas == spec.replicas) {
            return story;
        }
    }
    panic!("no Ready at {} replicas: {state:?}", spec.replicas)
}

#[test]
fn a_member_is_added_by_its_pre_hook_before_its_pod_and_promoted_by_its_post_hook_after() {
    let mut s = fixtures::with_scaling_hooks(spec("db:1"), 1);
    s.replicas = 5;
    assert_eq!(
        scale_with_hooks(&s, ready("db:1"), at_rest("db:1")),
        [
            "pre-scale-up 3",
            "sts 4",
            "post-scale-up 3",
            "pre-scale-up 4",
            "sts 5",
            "post-scale-up 4"
        ]
    );
}

#[test]
fn a_member_is_removed_by_its_pre_hook_before_its_pod_goes() {
    let mut s = fixtures::with_scaling_hooks(spec("db:1"), 1);
    s.replicas = 1;
    assert_eq!(
        scale_with_hooks(&s, ready("db:1"), at_rest("db:1")),
        [
            "pre-scale-down 2",
            "sts 2",
            "post-scale-down 2",
            "pre-scale-down 1",
            "sts 1",
            "post-scale-down 1"
        ]
    );
}

#[test]
fn scaling_down_removes_one_replica_at_a_time() {
    // A scale 3 -> 1 once removed two pods at once (podManagementPolicy Parallel).
    let mut s = spec("db:1");
    s.replicas = 1;
    assert_eq!(scale(&s, ready("db:1"), at_rest("db:1")), vec![2, 1]);
}

#[test]
fn scaling_up_adds_one_replica_at_a_time() {
    let mut s = spec("db:1");
    s.replicas = 5;
    assert_eq!(scale(&s, ready("db:1"), at_rest("db:1")), vec![4, 5]);
}

#[test]
fn the_next_replica_waits_until_every_pod_is_ready() {
    let mut s = spec("db:1");
    s.replicas = 1;
    // The StatefulSet holds 2 of the way from 3 to 1; pod 0 is not Ready.
    let state = DdbState::Scaling {
        version: "db:1".to_owned(),
        from_replicas: 3,
        replicas: 2,
        hook: None,
    };
    let mut o = at_rest("db:1");
    o.pods.remove(&2);
    if let Some(sts) = &mut o.statefulset {
        sts.replicas = 2;
    }
    o.pods.insert(0, pod(0, "db:1", false));
    let d = decide(&s, &state, o.clone());
    assert!(target(&d).is_none(), "{d:?}");
    assert!(d.actions().is_empty(), "{d:?}");
    assert!(message(&d).contains("db-0"), "{}", message(&d));
    // A pod still going away holds the next step too.
    o.pods.insert(0, pod(0, "db:1", true));
    let mut going = pod(2, "db:1", true);
    going.terminating = true;
    o.pods.insert(2, going);
    let d = decide(&s, &state, o.clone());
    assert!(target(&d).is_none(), "{d:?}");
    o.pods.remove(&2);
    let d = decide(&s, &state, o);
    assert!(
        matches!(target(&d), Some(DdbState::Scaling { replicas: 1, .. })),
        "{d:?}"
    );
    assert_declared(&state, &d);
}

#[test]
fn a_new_replica_that_never_becomes_ready_can_be_scaled_away() {
    // Scaling 3 -> 4, pod 3 does not start; spec.replicas goes back to 3: the pod that
    // never served is removed without waiting for it.
    let s = spec("db:1");
    let state = DdbState::Scaling {
        version: "db:1".to_owned(),
        from_replicas: 3,
        replicas: 4,
        hook: None,
    };
    let mut o = at_rest("db:1");
    if let Some(sts) = &mut o.statefulset {
        sts.replicas = 4;
    }
    o.pods.insert(3, pod(3, "db:1", false));
    let d = decide(&s, &state, o);
    assert!(
        matches!(target(&d), Some(DdbState::Scaling { replicas: 3, .. })),
        "{d:?}"
    );
}

/// The StatefulSet as scaled up by hand to `replicas`, its pods Ready.
fn scaled_by_hand(replicas: i32) -> Observed {
    let mut o = at_rest("db:1");
    if let Some(sts) = &mut o.statefulset {
        sts.replicas = replicas;
    }
    for k in 3..replicas {
        o.pods.insert(k, pod(k, "db:1", true));
    }
    o
}

fn statefulset_replicas_asked(d: &Decision<DdbState, DdbAction>) -> Vec<i32> {
    picked!(d.actions(), DdbAction::EnsureStatefulSet(shape) => shape.replicas)
}

#[test]
fn a_statefulset_scaled_up_by_hand_is_cut_back_one_replica_at_a_time() {
    // A StatefulSet scaled 3 -> 5 by hand was restored to 3 in one apply,
    // removing two members at once.
    let s = spec("db:1");
    let mut o = scaled_by_hand(5);
    let mut asked = Vec::new();
    loop {
        let d = decide(&s, &ready("db:1"), o.clone());
        assert_eq!(target(&d), None, "stays Ready while the drift is restored");
        let [replicas] = statefulset_replicas_asked(&d)[..] else {
            break;
        };
        asked.push(replicas);
        // The StatefulSet controller removes the pods above `replicas`.
        if let Some(sts) = &mut o.statefulset {
            sts.replicas = replicas;
        }
        o.pods.retain(|k, _| *k < replicas);
    }
    assert_eq!(asked, vec![4, 3]);
}

#[test]
fn cutting_back_waits_for_the_removed_pod_to_go_and_the_rest_to_be_ready() {
    let s = spec("db:1");
    // 5 -> 4 was applied; pod 4 is still terminating.
    let mut o = scaled_by_hand(5);
    if let Some(sts) = &mut o.statefulset {
        sts.replicas = 4;
    }
    let d = decide(&s, &ready("db:1"), o.clone());
    assert_eq!(statefulset_replicas_asked(&d), Vec::<i32>::new());
    // Pod 4 is gone but pod 1 is not Ready: still no further cut.
    o.pods.remove(&4);
    o.pods.insert(1, pod(1, "db:1", false));
    let d = decide(&s, &ready("db:1"), o.clone());
    assert_eq!(statefulset_replicas_asked(&d), Vec::<i32>::new());
    // Everyone Ready: the next replica goes.
    o.pods.insert(1, pod(1, "db:1", true));
    let d = decide(&s, &ready("db:1"), o);
    assert_eq!(statefulset_replicas_asked(&d), vec![3]);
}
