//! Declarative restore on the real node: a new DistributedDB whose
//! `spec.bootstrap.fromBackup` names the final backup of the lifecycle's etcd. Every
//! member restores the snapshot (`etcd-restore`, its `restore` init container) before
//! its first start; the new cluster holds every key the writers had acknowledged.

use super::*;

/// The restored DistributedDB's name.
const RESTORED: &str = "etcd-restored";

/// Create `etcd-restored` from `object`'s spec with the backup `key` of the bucket of
/// `examples/etcd.yaml`, wait until it is Ready with three members, and check that it
/// holds every key of `acked`; then delete it without a final backup.
pub(super) async fn restore_into_a_new_cluster(
    db: &Fixture<DistributedDb>,
    object: &DistributedDB,
    ns: &str,
    key: &str,
    acked: &BTreeSet<String>,
) {
    let t = Instant::now();
    let mut restored: DistributedDB = serde_json::from_value(json!({
        "apiVersion": "lockstep.dev/v1alpha1",
        "kind": "DistributedDB",
        "metadata": {"name": RESTORED},
        "spec": object.spec,
    }))
    .expect("a DistributedDB");
    restored.spec.replicas = 3;
    restored.spec.image = TO.to_owned();
    restored.spec.bootstrap = serde_json::from_value(json!({"fromBackup": {
        "key": key,
        "command": ["etcd-restore"],
    }}))
    .expect("a bootstrap");
    db.api
        .create(&PostParams::default(), &restored)
        .await
        .expect("create the restored DistributedDB");
    wait_long(
        &db.api,
        RESTORED,
        "the restored DistributedDB Ready with 3 members",
        STEP,
        scaling::ready_with(3),
    )
    .await;
    let pod = format!("{RESTORED}-0");
    let mut stored = BTreeSet::new();
    for prefix in ["key-", "scale-"] {
        let keys = exec_db(
            ns,
            &pod,
            &format!("etcdctl get --prefix {prefix} --keys-only --consistency=l"),
        )
        .await
        .expect("read the restored keys");
        stored.extend(keys.lines().filter(|l| !l.is_empty()).map(str::to_owned));
    }
    let missing: Vec<&String> = acked.iter().filter(|k| !stored.contains(*k)).collect();
    assert!(
        missing.is_empty(),
        "the cluster restored from s3://{BUCKET}/{key} lacks acknowledged keys: {missing:?}"
    );
    let (members, names) = member_column(ns, &pod, 2).await;
    let names: BTreeSet<&str> = names.iter().map(String::as_str).collect();
    assert_eq!(
        names,
        BTreeSet::from(["etcd-restored-0", "etcd-restored-1", "etcd-restored-2"]),
        "the restored membership: {members}"
    );
    eprintln!(
        "restore: {RESTORED} from s3://{BUCKET}/{key} Ready in {:?} with 3 members and all {} acknowledged keys",
        t.elapsed(),
        acked.len()
    );
    db.merge_patch(
        RESTORED,
        json!({"metadata": {"annotations": {"lockstep.dev/skip-final-backup": "true"}}}),
    )
    .await;
    db.api
        .delete(RESTORED, &DeleteParams::default())
        .await
        .expect("delete the restored DistributedDB");
}
