//! Transport security (`spec.tls`): the certificates, where the pods find them, and when
//! they are issued and renewed.

use super::*;
use crate::machines::common::testing::{cached, der, verifies};
use crate::machines::common::tls::{CA_CERT, CA_KEY, CaMaterial, CertificatesView};
use crate::machines::distributeddb::api::DdbTls;
use crate::machines::distributeddb::render;
use crate::machines::distributeddb::tls::*;

fn with_tls(mut s: DistributedDBSpec, secret_name: Option<&str>) -> DistributedDBSpec {
    s.tls = Some(DdbTls {
        secret_name: secret_name.map(str::to_owned),
    });
    s
}

fn db(spec: DistributedDBSpec) -> DistributedDB {
    let mut db = DistributedDB::new("etcd", spec);
    db.metadata.namespace = Some("ns".to_owned());
    db.metadata.uid = Some("uid-db".to_owned());
    db
}

fn shape() -> Shape {
    Shape {
        image: "db:1".to_owned(),
        replicas: 3,
        claim_size: "1Gi".to_owned(),
    }
}

#[test]
fn the_member_certificate_serves_and_authenticates_every_member_and_the_client_certificate_authenticates()
 {
    let data = secret(&db(with_tls(spec("db:1"), None)))
        .expect("issued")
        .string_data
        .expect("data");
    for usage in [
        webpki::KeyUsage::server_auth(),
        webpki::KeyUsage::client_auth(),
    ] {
        verifies(&data[CA_CERT], &data[MEMBER_CERT], usage).expect("the member certificate");
    }
    let member = der(&data[MEMBER_CERT]);
    let cert = webpki::EndEntityCert::try_from(&member).expect("a certificate");
    for name in ["etcd-2.etcd.ns.svc", "etcd.ns.svc", "localhost"] {
        let name = rustls_pki_types::ServerName::try_from(name).expect("a name");
        cert.verify_is_valid_for_subject_name(&name)
            .unwrap_or_else(|e| panic!("names {name:?}: {e}"));
    }
    verifies(
        &data[CA_CERT],
        &data[CLIENT_CERT],
        webpki::KeyUsage::client_auth(),
    )
    .expect("the client certificate");
}

/// The keys a Secret volume of `pod` projects, and whether the pod may start without it.
fn projected(pod: &k8s_openapi::api::core::v1::PodSpec) -> (Vec<String>, Option<bool>) {
    let volume = pod
        .volumes
        .iter()
        .flatten()
        .find_map(|v| v.secret.clone())
        .expect("a Secret volume");
    let keys = volume.items.into_iter().flatten().map(|i| i.key).collect();
    (keys, volume.optional)
}

#[test]
fn members_wait_for_their_certificates_and_jobs_get_only_the_client_certificate() {
    let db = db(with_tls(with_hooks(with_backups(spec("db:1")), 1), None));
    let sts = render::statefulset(&db, &shape()).expect("renders");
    let pod = sts.spec.template.spec.expect("pod");
    let (keys, optional) = projected(&pod);
    assert_eq!(
        keys,
        [CA_CERT, MEMBER_CERT, MEMBER_KEY, CLIENT_CERT, CLIENT_KEY]
    );
    assert_eq!(optional, Some(false), "a member never starts without TLS");
    testing::assert_env(&pod.containers[0], &[(TLS_DIR_ENV, TLS_PATH)]);

    let hook = render::hook_job(&db, HookPhase::Pre, 2, "k", "db:1", "db:2")
        .expect("renders")
        .expect("a hook");
    let backup = render::backup_job(&db, "b", BackupKind::OnDemand)
        .expect("renders")
        .expect("a backup");
    for job in [hook, backup] {
        let pod = testing::job_pod(&job);
        let (keys, _) = projected(&pod);
        assert_eq!(
            keys,
            [CA_CERT, CLIENT_CERT, CLIENT_KEY],
            "{:?}",
            job.metadata.name
        );
        assert!(!keys.contains(&CA_KEY.to_owned()));
        testing::assert_env(&pod.containers[0], &[(TLS_DIR_ENV, TLS_PATH)]);
    }
}

#[test]
fn a_secret_of_ones_own_is_mounted_and_nothing_is_issued() {
    let spec = with_tls(spec("db:1"), Some("mine"));
    let sts = render::statefulset(&db(spec.clone()), &shape()).expect("renders");
    let pod = sts.spec.template.spec.expect("pod");
    let secret = pod.volumes.iter().flatten().find_map(|v| v.secret.clone());
    assert_eq!(secret.and_then(|s| s.secret_name).as_deref(), Some("mine"));
    let o = Observed {
        name: "db".to_owned(),
        ..Observed::default()
    };
    let d = decide(&spec, &DdbState::Creating, o);
    assert!(!has_action(&d, |a| matches!(
        a,
        DdbAction::CreateCertificates
    )));
}

#[test]
fn without_tls_nothing_is_mounted() {
    let sts = render::statefulset(&db(spec("db:1")), &shape()).expect("renders");
    let pod = sts.spec.template.spec.expect("pod");
    assert!(pod.volumes.is_none());
}

#[test]
fn the_certificates_are_issued_before_the_statefulset_once() {
    let spec = with_tls(spec("db:1"), None);
    let o = Observed {
        name: "db".to_owned(),
        ..Observed::default()
    };
    let d = decide(&spec, &DdbState::Creating, o.clone());
    assert_eq!(d.actions().first(), Some(&DdbAction::CreateCertificates));
    assert!(matches!(
        d.actions().last(),
        Some(DdbAction::EnsureStatefulSet(_))
    ));
    let mut issued = o;
    issued.own.certificates = Some(view(None));
    let d = decide(&spec, &DdbState::Creating, issued);
    assert!(!has_action(&d, |a| matches!(
        a,
        DdbAction::CreateCertificates
    )));
}

/// The view of `issued` as the operator's cache holds it, due at `renew_at`.
fn view_of(issued: &k8s_openapi::api::core::v1::Secret, renew_at: Option<i64>) -> CertificatesView {
    CertificatesView {
        uid: "tls-uid".to_owned(),
        version: "7".to_owned(),
        renew_at: renew_at.map(t),
        ca: CaMaterial::of(&cached(issued)),
    }
}

fn view(renew_at: Option<i64>) -> CertificatesView {
    view_of(
        &secret(&db(with_tls(spec("db:1"), None))).expect("issued"),
        renew_at,
    )
}

#[test]
fn the_certificates_are_renewed_at_rest_once_due_with_the_same_ca() {
    let spec = with_tls(spec("db:1"), None);
    let etcd = db(spec.clone());
    let issued = secret(&etcd).expect("issued");
    let renews = |o: Observed| {
        let d = decide(&spec, &ready("db:1"), o);
        assert!(target(&d).is_none(), "a renewal is no transition");
        picked!(d.actions(), DdbAction::RenewCertificates(r) => r.clone())
    };
    let mut o = at_rest("db:1");
    o.own.certificates = Some(view_of(&issued, Some(2000)));
    assert!(renews(o.clone()).is_empty(), "not yet due");
    o.own.certificates = Some(view_of(&issued, Some(999)));
    let due = renews(o);
    assert_eq!(due.len(), 1);
    assert_eq!(due[0].version, "7", "on the Secret as read");
    let patch = renewal(&etcd, &due[0].ca).expect("renewed");
    let pem = |key: &str| -> String {
        let b64: k8s_openapi::ByteString =
            serde_json::from_value(patch["data"][key].clone()).expect("base64");
        String::from_utf8(b64.0).expect("PEM")
    };
    let ca = &issued.string_data.as_ref().expect("data")[CA_CERT];
    for usage in [
        webpki::KeyUsage::server_auth(),
        webpki::KeyUsage::client_auth(),
    ] {
        verifies(ca, &pem(MEMBER_CERT), usage).expect("the renewed member certificate");
    }
    verifies(ca, &pem(CLIENT_CERT), webpki::KeyUsage::client_auth()).expect("the client's");
    assert!(patch["data"].get(CA_CERT).is_none() && patch["data"].get(CA_KEY).is_none());
}
