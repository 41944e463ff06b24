//! Scaling a real etcd through the DistributedDB's membership hooks
//! (`spec.scaling` of `examples/etcd.yaml`: `etcd-scale-hook`), under a writer: at each
//! size the etcd member list is the pods (every member started, none a learner) and
//! every member is healthy; one member killed at three leaves the cluster writable;
//! no acknowledged write is lost.

use super::*;

/// The writer of this step, and the prefix of its keys (the upgrade's writer wrote
/// `key-N`).
const WRITER: &str = "writer-scale";
const PREFIX: &str = "scale";

/// Scale the running 3-member etcd to 5 and back to 3 under a writer, kill a member,
/// and check the data; the keys the writer had acknowledged.
pub(super) async fn scale_under_a_writer(
    db: &Fixture<DistributedDb>,
    object: &DistributedDB,
    pods: &Api<Pod>,
    ns: &str,
) -> BTreeSet<String> {
    let writer = Writer::start(pods, object, ns, WRITER, PREFIX).await;
    wait_for_log_acks(pods, WRITER, 20).await;
    let started = now();
    for n in [5, 3] {
        let t = Instant::now();
        db.merge_patch(NAME, json!({"spec": {"replicas": n}})).await;
        wait_long(
            &db.api,
            NAME,
            &format!("the etcd DistributedDB Ready with {n} members"),
            STEP,
            ready_with(n),
        )
        .await;
        assert_membership_is_the_pods(pods, ns, n).await;
        eprintln!(
            "scaled to {n} in {:?}: the member list is the pods, every member healthy",
            t.elapsed()
        );
        wait_for_log_acks(pods, WRITER, 10).await;
    }
    let scaled = now();

    // One member killed at three: the other two are a quorum and take writes.
    kubectl(
        &[
            "-n",
            ns,
            "delete",
            "pod",
            &format!("{NAME}-1"),
            "--grace-period=0",
            "--force",
        ],
        None,
    )
    .await;
    let put = exec_db(
        ns,
        &format!("{NAME}-0"),
        &format!("etcdctl --command-timeout=10s put {PREFIX}-probe 1"),
    )
    .await;
    assert!(put.is_some(), "a put failed with {NAME}-1 killed");
    wait_for_log_acks(pods, WRITER, 10).await;
    wait_long(
        &db.api,
        NAME,
        "the etcd DistributedDB Ready again after a member was killed",
        STEP,
        ready_with(3),
    )
    .await;
    assert_membership_is_the_pods(pods, ns, 3).await;

    let tally = writer.stop(ns).await;
    let during = tally
        .acked
        .iter()
        .filter(|(_, t)| *t > started && *t < scaled)
        .count();
    assert!(during > 0, "no write was acknowledged while scaling");
    let stored = exec_db(
        ns,
        &format!("{NAME}-0"),
        &format!("etcdctl get --prefix {PREFIX}- --keys-only --consistency=l"),
    )
    .await
    .expect("read the scaling writer's keys back");
    let stored: BTreeSet<&str> = stored.lines().filter(|l| !l.is_empty()).collect();
    let lost: Vec<u64> = tally
        .acked
        .iter()
        .map(|(n, _)| *n)
        .filter(|n| !stored.contains(format!("{PREFIX}-{n}").as_str()))
        .collect();
    assert!(
        lost.is_empty(),
        "acknowledged writes lost while scaling: {lost:?}"
    );
    eprintln!(
        "scaling writer: {} acknowledged ({during} while scaling 3 -> 5 -> 3), {} failed, 0 lost",
        tally.acked.len(),
        tally.failed.len()
    );
    tally
        .acked
        .iter()
        .map(|(n, _)| format!("{PREFIX}-{n}"))
        .collect()
}

/// Ready, with `n` replicas all Ready, for the current generation.
pub(super) fn ready_with(n: i32) -> impl Fn(Option<&DistributedDB>) -> bool + Send + 'static {
    move |db: Option<&DistributedDB>| {
        db.is_some_and(|db| {
            let status = db.status.as_ref();
            crate::support::at_rest(db)
                && status.and_then(|s| s.replicas) == Some(n)
                && status.and_then(|s| s.ready_replicas) == Some(n)
        })
    }
}

/// `etcdctl member list` names exactly the `n` database pods, every member started and
/// a voter, and `endpoint health --cluster` finds all `n` healthy. Retried under a
/// deadline: a member's pod may be Ready a moment before every member sees it.
async fn assert_membership_is_the_pods(pods: &Api<Pod>, ns: &str, n: i32) {
    let expected: BTreeSet<String> = (0..n).map(|i| format!("{NAME}-{i}")).collect();
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut tick = tokio::time::interval(Duration::from_secs(2));
    let mut last = String::new();
    while Instant::now() < deadline {
        tick.tick().await;
        let names: BTreeSet<String> = pods
            .list(&ListParams::default())
            .await
            .map(|l| l.items.iter().map(ResourceExt::name_any).collect())
            .unwrap_or_default();
        let db_pods: BTreeSet<String> = names
            .into_iter()
            .filter(|p| {
                p.strip_prefix(&format!("{NAME}-"))
                    .is_some_and(|k| k.parse::<u32>().is_ok())
            })
            .collect();
        let list = exec_db(ns, &format!("{NAME}-0"), "etcdctl member list -w simple").await;
        let health = exec_db(
            ns,
            &format!("{NAME}-0"),
            "etcdctl --command-timeout=10s endpoint health --cluster",
        )
        .await;
        let members: Vec<Vec<String>> = list
            .as_deref()
            .unwrap_or_default()
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| l.split(", ").map(str::to_owned).collect())
            .collect();
        let member_names: BTreeSet<String> =
            members.iter().filter_map(|m| m.get(2).cloned()).collect();
        let voters = members.iter().all(|m| {
            m.get(1).is_some_and(|s| s == "started") && m.get(5).is_some_and(|l| l == "false")
        });
        let healthy = health
            .as_deref()
            .map_or(0, |h| h.matches("is healthy").count());
        if db_pods == expected && member_names == expected && voters && healthy == expected.len() {
            return;
        }
        last = format!("pods {db_pods:?}, members {list:?}, health {health:?}");
    }
    panic!("the etcd membership is not the {n} pods within 120s: {last}");
}
