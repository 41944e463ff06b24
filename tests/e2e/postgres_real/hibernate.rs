//! Hibernation on real PostgreSQL: `kubectl lockstep hibernate on` (`spec.hibernate`)
//! stops every instance cleanly and keeps its volume; `off` brings back the same primary
//! with every row.

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::ListParams;

use super::*;

/// Whether cluster `pg` is hibernating at `step` (its `status.step`).
fn hibernating_at(pg: &PostgresCluster, step: &str) -> bool {
    pg.status.as_ref().is_some_and(|s| {
        s.engine.phase.as_deref() == Some("Hibernating")
            && s.engine.step.as_deref() == Some(step)
            && s.engine.observed_generation == pg.metadata.generation
    })
}

/// Cluster `name` (writer stopped, `rows` rows through `-rw`, `primary` its primary)
/// hibernates: no pod is left, every claim is kept, `Ready` and `Progressing` are
/// False, `PrimaryAvailable` says `Hibernating`, nothing is Degraded. It wakes with
/// `primary` as its primary, every row there, and takes a write again.
pub(super) async fn sleeps_and_wakes_with_its_primary(
    real: &Real,
    name: &str,
    primary: &str,
    rows: usize,
) {
    let clock = std::time::Instant::now();
    let (code, said) =
        crate::postgres::plugin(&["hibernate", name, "on", "-n", real.ns(), "--timeout", "300"])
            .await;
    assert_eq!(code, 0, "kubectl lockstep hibernate {name} on: {said}");
    assert!(said.contains("is asleep"), "{said}");
    let pg = real
        .cluster_until(name, "asleep", |pg| hibernating_at(pg, "Asleep"))
        .await;
    let slept = clock.elapsed().as_secs_f64();
    let selector = format!("app.kubernetes.io/instance={name},lockstep.dev/component=database");
    let pods: Api<Pod> = Api::namespaced(real.pg.env.client.clone(), real.ns());
    let left = pods
        .list(&ListParams::default().labels(&selector))
        .await
        .expect("list the instance pods");
    assert!(
        left.items.is_empty(),
        "asleep, but pods are left: {:?}",
        left.items
            .iter()
            .map(ResourceExt::name_any)
            .collect::<Vec<_>>()
    );
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(real.pg.env.client.clone(), real.ns());
    for k in 0..3 {
        let claim = format!("data-{name}-{k}");
        assert!(
            claims
                .get_opt(&claim)
                .await
                .expect("read a claim")
                .is_some(),
            "hibernation kept no {claim}"
        );
    }
    let holds = |type_: &str| condition_of(&pg, type_).map(|c| (c.status, c.reason));
    assert_eq!(
        holds(conditions::READY).map(|(s, _)| s).as_deref(),
        Some("False")
    );
    assert_eq!(
        holds(conditions::PROGRESSING).map(|(s, _)| s).as_deref(),
        Some("False"),
        "asleep is a rest, not a wait"
    );
    assert_eq!(
        holds(conditions::DEGRADED).map(|(s, _)| s).as_deref(),
        Some("False")
    );
    assert_eq!(
        holds("PrimaryAvailable"),
        Some(("False".to_owned(), "Hibernating".to_owned()))
    );
    let clock = std::time::Instant::now();
    let (code, said) = crate::postgres::plugin(&[
        "hibernate",
        name,
        "off",
        "-n",
        real.ns(),
        "--timeout",
        "300",
    ])
    .await;
    assert_eq!(code, 0, "kubectl lockstep hibernate {name} off: {said}");
    assert!(said.contains(&format!("{primary} primary")), "{said}");
    let want = primary.to_owned();
    let pg = real
        .cluster_until(name, "awake, with the primary it had", move |pg| {
            is_ready_at(pg, IMAGE)
                && pg.status.as_ref().and_then(|s| s.primary_pod.as_deref()) == Some(want.as_str())
        })
        .await;
    let woke = clock.elapsed().as_secs_f64();
    let kept = real.rows(name).len();
    eprintln!(
        "(hibernate) {name} asleep {slept:.1}s after the request, awake {woke:.1}s after the next, {kept}/{rows} rows"
    );
    assert_eq!(kept, rows, "rows lost across hibernation");
    let (ok, out) = real.psql_rw(name, "INSERT INTO acks (id) VALUES (-1)");
    assert!(ok, "a write after waking: {out}");
    let reasons: Vec<String> = history(&pg).into_iter().map(|h| h.reason).collect();
    for reason in [
        "HibernationRequested",
        "InstancesStopped",
        "WakeRequested",
        "ClusterWoken",
    ] {
        assert!(reasons.iter().any(|r| r == reason), "{reason}: {reasons:?}");
    }
}
