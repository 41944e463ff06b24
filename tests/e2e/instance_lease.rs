//! `lockstep instance`'s Lease client (`instance::run::lease`) against the real API
//! server: a renewal publishes the holder's L on the version it read, a write made since
//! the read wins (409), nobody renews a Lease that names someone else, and a release
//! clears the holder and records who released it at which position.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use kube::api::{ObjectMeta, PostParams};
use lockstep::instance::run::lease::{LeaseClient, LeaseError};
use lockstep::machines::postgres::observe::{RELEASED_BY, RELEASED_LSN};

use crate::support::Env;

const ME: &str = "pg-0/uid-0";

type Api = kube::Api<Lease>;

async fn lease_named(env: &Env, holder: &str) -> Api {
    let api = env.api::<Lease>();
    let lease = Lease {
        metadata: ObjectMeta {
            name: Some("pg-primary".to_owned()),
            annotations: Some([(RELEASED_LSN.to_owned(), "0/3000060".to_owned())].into()),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(holder.to_owned()),
            lease_duration_seconds: Some(120),
            ..LeaseSpec::default()
        }),
    };
    api.create(&PostParams::default(), &lease)
        .await
        .expect("creates the Lease");
    api
}

fn client(env: &Env) -> LeaseClient {
    LeaseClient::new(
        env.client.clone(),
        env.namespace(),
        "pg-primary",
        ME,
        15,
        Duration::from_secs(5),
    )
}

#[tokio::test]
async fn a_renewal_publishes_the_holders_l_and_a_write_since_the_read_wins() {
    let env = Env::new("instance-lease").await;
    let api = lease_named(&env, ME).await;
    let leases = client(&env);

    let renewed = leases.renew(false, false).await.expect("renews");
    let spec = renewed.lease.spec.clone().unwrap_or_default();
    assert_eq!(
        spec.lease_duration_seconds,
        Some(15),
        "the L its fence runs with"
    );
    assert!(spec.renew_time.is_some());
    assert_eq!(
        renewed.released_lsn(),
        Some("0/3000060"),
        "kept until writable past it"
    );

    // A writable server past the released position drops it; a renewal with data marks
    // the cluster initialized, through the API server.
    let renewed = leases.renew(true, true).await.expect("renews");
    assert_eq!(renewed.released_lsn(), None);
    let marked = api.get("pg-primary").await.expect("reads");
    assert_eq!(
        marked
            .metadata
            .annotations
            .unwrap_or_default()
            .get("lockstep.dev/initialized")
            .map(String::as_str),
        Some("true")
    );

    // A stale read loses: replacing the version read before another write is a 409.
    let stale = leases.read().await.expect("reads");
    leases.renew(false, false).await.expect("renews");
    let err = api
        .replace("pg-primary", &PostParams::default(), &stale.lease)
        .await
        .expect_err("a stale resourceVersion is refused");
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 409),
        "{err}"
    );
}

#[tokio::test]
async fn nobody_renews_a_lease_naming_someone_else_and_a_release_says_who_and_where() {
    let env = Env::new("instance-lease").await;
    lease_named(&env, "pg-1/uid-1").await;
    let leases = client(&env);
    assert!(matches!(
        leases.renew(false, true).await,
        Err(LeaseError::NotHolder { holder: Some(ref h) }) if h == "pg-1/uid-1"
    ));
    assert!(
        !leases.release(Some("0/5000028")).await.expect("reads"),
        "not ours to release"
    );

    let env = Env::new("instance-lease").await;
    lease_named(&env, ME).await;
    let leases = client(&env);
    assert!(leases.release(Some("0/5000028")).await.expect("releases"));
    let seen = leases.read().await.expect("reads");
    assert_eq!(seen.holder(), None);
    let annotations = seen.lease.metadata.annotations.unwrap_or_default();
    assert_eq!(annotations.get(RELEASED_BY).map(String::as_str), Some(ME));
    assert_eq!(
        annotations.get(RELEASED_LSN).map(String::as_str),
        Some("0/5000028")
    );
}
