//! The cluster's certificates (`render::tls`).

use super::rendering::object;
use super::*;
use crate::machines::common::testing::{cached, der, verifies};
use crate::machines::postgres::render::tls::*;

fn pg() -> PostgresCluster {
    object(spec("16.3"))
}

#[test]
fn one_issuance_holds_the_ca_and_both_certificates_and_the_pods_never_see_the_ca_key() {
    let pg = pg();
    let secret = secret(&pg).expect("issued");
    let data = secret.string_data.expect("data");
    for key in [
        CA_CERT,
        CA_KEY,
        SERVER_CERT,
        SERVER_KEY,
        REPLICATION_CERT,
        REPLICATION_KEY,
    ] {
        assert!(data[key].starts_with("-----BEGIN "), "{key}");
    }
    assert!(
        secret.metadata.owner_references.is_some(),
        "owned by the cluster"
    );
    let (volume, mount) = volume(&pg);
    let projected = volume.secret.expect("a Secret volume");
    assert_eq!(projected.secret_name.as_deref(), Some("pg-tls"));
    let items: Vec<String> = projected
        .items
        .expect("items")
        .into_iter()
        .map(|i| i.key)
        .collect();
    assert!(!items.contains(&CA_KEY.to_owned()));
    assert_eq!(items.len(), MOUNTED.len());
    assert_eq!(mount.mount_path, TLS_PATH);
}

#[test]
fn the_server_certificate_names_every_service_and_every_pod() {
    let names = server_names(&pg());
    for name in [
        "pg-rw",
        "pg-rw.db.svc",
        "pg-ro.db.svc.cluster.local",
        "pg.db.svc",
        "*.pg.db.svc",
    ] {
        assert!(names.contains(&name.to_owned()), "{name} in {names:?}");
    }
}

#[test]
fn the_issued_certificates_verify_against_the_ca_for_their_names_and_purposes() {
    let data = secret(&pg()).expect("issued").string_data.expect("data");
    verifies(
        &data[CA_CERT],
        &data[SERVER_CERT],
        webpki::KeyUsage::server_auth(),
    )
    .expect("server");
    let server = der(&data[SERVER_CERT]);
    let cert = webpki::EndEntityCert::try_from(&server).expect("a certificate");
    let name = rustls_pki_types::ServerName::try_from("pg-rw.db.svc").expect("a name");
    cert.verify_is_valid_for_subject_name(&name)
        .expect("names pg-rw.db.svc");
    verifies(
        &data[CA_CERT],
        &data[REPLICATION_CERT],
        webpki::KeyUsage::client_auth(),
    )
    .expect("replication");
}

#[test]
fn the_cache_keeps_the_ca_of_the_secret_and_nothing_else() {
    let issued = secret(&pg()).expect("issued");
    let kept = cached(&issued);
    let keys: Vec<&String> = kept.data.as_ref().expect("data").keys().collect();
    assert_eq!(keys, [CA_CERT, CA_KEY]);
    // A Secret that names no key (the credentials) keeps no data at all.
    let mut credentials = issued;
    credentials
        .metadata
        .annotations
        .as_mut()
        .expect("annotations")
        .remove(crate::driver::cache::CACHED_KEYS);
    assert!(cached(&credentials).data.is_none());
}

#[test]
fn a_renewal_signs_new_leaves_with_the_same_ca_and_leaves_the_ca_alone() {
    let pg = pg();
    let issued = secret(&pg).expect("issued");
    let data = issued.string_data.clone().expect("data");
    let view = crate::machines::postgres::observe::CertificatesView {
        uid: "tls-uid".to_owned(),
        version: "7".to_owned(),
        renew_at: None,
        ca: CaMaterial::of(&cached(&issued)),
    };
    let ca = view.ca.clone().expect("the cache holds the CA");
    assert_eq!(format!("{ca:?}"), "CaMaterial(..)", "no key in logs");
    let patch = renewal(&pg, &ca).expect("renewed");
    let renewed = |key: &str| -> String {
        let b64: k8s_openapi::ByteString =
            serde_json::from_value(patch["data"][key].clone()).expect("base64");
        String::from_utf8(b64.0).expect("PEM")
    };
    assert_ne!(renewed(SERVER_CERT), data[SERVER_CERT]);
    verifies(
        &data[CA_CERT],
        &renewed(SERVER_CERT),
        webpki::KeyUsage::server_auth(),
    )
    .expect("the renewed server certificate chains to the same CA");
    verifies(
        &data[CA_CERT],
        &renewed(REPLICATION_CERT),
        webpki::KeyUsage::client_auth(),
    )
    .expect("the renewed replication certificate chains to the same CA");
    assert!(patch["data"].get(CA_CERT).is_none() && patch["data"].get(CA_KEY).is_none());
    assert!(patch["metadata"]["annotations"][RENEW_AT].is_string());
}

#[test]
fn certificates_are_renewed_at_rest_once_due_and_only_then() {
    let now = 600;
    let issued = secret(&pg()).expect("issued");
    let mut o = at_rest(V1, 0);
    let mut view = crate::machines::postgres::observe::CertificatesView {
        uid: "tls-uid".to_owned(),
        version: "7".to_owned(),
        renew_at: Some(testing::t(now + 86_400)),
        ca: CaMaterial::of(&cached(&issued)),
    };
    o.own.certificates = Some(view.clone());
    let renews = |d: &Decision<PgState, PgAction>| {
        d.actions()
            .iter()
            .any(|a| matches!(a, PgAction::RenewCertificates(r) if r.uid == "tls-uid"))
    };
    let d = decide_at(&spec("16.3"), &ready(V1, 0), o.clone(), now, 0);
    assert!(!renews(&d), "not yet due");
    view.renew_at = Some(testing::t(now - 1));
    o.own.certificates = Some(view.clone());
    let d = decide_at(&spec("16.3"), &ready(V1, 0), o.clone(), now, 0);
    assert!(renews(&d), "due: {:?}", d.actions());
    assert!(testing::target(&d).is_none(), "a renewal is no transition");
    // A Secret that says nothing of its renewal (made by hand) is left alone.
    view.renew_at = None;
    o.own.certificates = Some(view);
    assert!(!renews(&decide_at(&spec("16.3"), &ready(V1, 0), o, now, 0)));
}

#[test]
fn a_person_s_own_server_certificate_is_mounted_beside_the_cluster_s_and_named_to_the_manager() {
    let pod = |pg: &PostgresCluster| {
        crate::machines::postgres::render::statefulset(pg, V1, 3)
            .expect("rendered")
            .spec
            .template
            .spec
            .expect("a pod")
    };
    let names_dir = |pg: &PostgresCluster| {
        pod(pg).containers[0]
            .env
            .iter()
            .flatten()
            .any(|e| e.name == SERVER_TLS_DIR_ENV)
    };
    let plain = pg();
    assert!(server_volume(&plain).is_none());
    assert!(!names_dir(&plain));
    let mut s = spec("16.3");
    s.certificates = Some(crate::machines::postgres::api::CertificatesSpec {
        server_tls_secret: "orders-cert".to_owned(),
    });
    let own = object(s);
    let (volume, mount) = server_volume(&own).expect("mounted");
    let projected = volume.secret.expect("a Secret volume");
    assert_eq!(projected.secret_name.as_deref(), Some("orders-cert"));
    assert_eq!(projected.optional, Some(true), "a pod never waits for it");
    assert_eq!(mount.mount_path, SERVER_TLS_PATH);
    assert!(names_dir(&own));
    // The cluster's own certificates stay: their CA verifies the replication role.
    let secrets: Vec<String> = pod(&own)
        .volumes
        .iter()
        .flatten()
        .filter_map(|v| v.secret.as_ref()?.secret_name.clone())
        .collect();
    assert!(
        secrets.contains(&"pg-tls".to_owned()) && secrets.contains(&"orders-cert".to_owned()),
        "{secrets:?}"
    );
}
