//! Creating.

use super::*;

#[test]
fn creating_creates_the_service_the_disruption_budget_and_the_statefulset_first() {
    let o = Observed {
        name: "db".to_owned(),
        ..Observed::default()
    };
    let d = decide(&spec("db:1"), &DdbState::Creating, o);
    assert_eq!(
        d.actions(),
        &[
            DdbAction::EnsureService,
            DdbAction::EnsurePdb,
            DdbAction::EnsureStatefulSet(Shape {
                image: "db:1".to_owned(),
                replicas: 3,
                claim_size: "1Gi".to_owned()
            })
        ]
    );
    assert!(target(&d).is_none());
}

#[test]
fn creating_becomes_ready_when_every_pod_is_ready_at_the_image() {
    let d = decide(&spec("db:1"), &DdbState::Creating, at_rest("db:1"));
    assert_goes(&d, ALL_REPLICAS_READY, &ready("db:1"));
}

#[test]
fn creating_waits_while_a_pod_is_not_ready() {
    let mut o = at_rest("db:1");
    o.pods.insert(1, pod(1, "db:1", false));
    let d = decide(&spec("db:1"), &DdbState::Creating, o);
    assert!(target(&d).is_none());
    assert_eq!(message(&d), "2/3 pods Ready at db:1");
}

#[test]
fn creating_replaces_pods_that_never_came_up_at_an_earlier_image_only_as_read() {
    let mut o = at_rest("db:2");
    o.pods.insert(
        2,
        PodView {
            version: "7".to_owned(),
            ..pod(2, "db:1", false)
        },
    );
    let d = decide(&spec("db:2"), &DdbState::Creating, o);
    assert_eq!(
        d.actions(),
        [DdbAction::DeleteUnstarted {
            ordinal: 2,
            uid: uid(2, "db:1"),
            version: "7".to_owned()
        }]
    );
}

#[test]
fn creating_upgrades_ready_pods_left_at_an_earlier_image() {
    let mut o = at_rest("db:2");
    o.pods.insert(0, pod(0, "db:1", true));
    let d = decide(&spec("db:2"), &DdbState::Creating, o);
    assert_eq!(d.reason(), MIXED_IMAGES);
    assert!(
        matches!(target(&d), Some(DdbState::Upgrading(u)) if u.ordinal == 0 && u.from == "db:1" && u.to == "db:2")
    );
}

#[test]
fn an_adopted_statefulset_with_more_replicas_is_scaled_down_one_at_a_time() {
    // The status was lost (Creating) and spec.replicas is below the live StatefulSet's:
    // one replica fewer at a time, as in Scaling (the model check found two removed at
    // once).
    let mut s = spec("db:1");
    s.replicas = 1;
    let d = decide(&s, &DdbState::Creating, at_rest("db:1"));
    assert!(
        matches!(d.actions(), [DdbAction::EnsureStatefulSet(sh)] if sh.replicas == 2),
        "{d:?}"
    );
    // Not while a pod is down.
    let d = decide(
        &s,
        &DdbState::Creating,
        at_rest("db:1").with_pod(0, "db:1", false),
    );
    assert!(
        !has_action(&d, |a| matches!(a, DdbAction::EnsureStatefulSet(_))),
        "{d:?}"
    );
}
