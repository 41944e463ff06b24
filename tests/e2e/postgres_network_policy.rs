//! A PostgresCluster's NetworkPolicy (`spec.networkPolicy`) on the KWOK nodes: the
//! operator applies it when enabled and deletes it when turned off. Whether it is
//! enforced is a matter of the network plugin (`docs/security.md`).

use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use lockstep::machines::common::observe::in_sync;
use lockstep::machines::postgres::{Postgres, PostgresCluster, render};

use crate::support::{Fixture, LeaseAgents, wait_for, wait_gone};

#[tokio::test]
async fn an_enabled_network_policy_is_applied_and_deleted_once_turned_off() {
    let pg = Fixture::<Postgres>::new("pg-netpol").await;
    let _operator = pg.operator();
    let _agents = LeaseAgents::start(&pg.env);
    let spec = serde_json::from_value(json!({"version": "18.1", "replicas": 1,
        "storageSize": "1Gi", "networkPolicy": {"enabled": true}}))
    .expect("a valid spec");
    pg.create_object(&PostgresCluster::new("pg", spec)).await;

    let policies: Api<NetworkPolicy> = pg.env.api();
    let policy = wait_for(
        &policies,
        "pg",
        "the NetworkPolicy",
        |p: Option<&NetworkPolicy>| p.is_some(),
    )
    .await
    .expect("the NetworkPolicy");
    let spec = policy.spec.clone().expect("a spec");
    assert_eq!(spec.policy_types, Some(vec!["Ingress".to_owned()]));
    assert_eq!(spec.ingress.as_ref().map(Vec::len), Some(2), "{spec:?}");
    // What the API server keeps (defaults added) still reads as in sync: the policy is
    // not applied again at every reconcile.
    let clusters: Api<PostgresCluster> = pg.env.api();
    let cluster = clusters.get("pg").await.expect("the cluster");
    assert!(in_sync(
        Some(&policy),
        render::network_policy(&cluster).ok()
    ));

    clusters
        .patch(
            "pg",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"networkPolicy": {"enabled": false}}})),
        )
        .await
        .expect("turned off");
    wait_gone(
        &policies,
        "pg",
        &policy.uid().unwrap_or_default(),
        "the NetworkPolicy deleted",
    )
    .await;
    pg.env.finish().await;
}
