//! The endpoint token: its Secret, who reads it, and that it exists before they do.

use super::rendering::object;
use super::*;
use crate::driver::{Op, Operator};
use crate::machines::common::backup::BackupKind;
use crate::machines::common::testing::{assert_env, job_pod};

/// `(kind, name)` of each object `ops` create or apply, in order.
fn written(ops: &[Op]) -> Vec<(String, String, &'static str)> {
    ops.iter()
        .filter_map(|op| match op {
            Op::Create { object, .. } => Some((object, "create")),
            Op::Apply { object, .. } => Some((object, "apply")),
            _ => None,
        })
        .map(|(o, verb)| {
            let kind = o.types.as_ref().map(|t| t.kind.clone()).unwrap_or_default();
            (kind, o.name_any(), verb)
        })
        .collect()
}

fn base_backups(schedule: Option<&str>) -> PostgresClusterSpec {
    let mut s = with_backups(spec("16.3"), schedule);
    if let Some(backup) = s.backup.as_mut() {
        backup.wal_archive = Some(crate::machines::postgres::api::WalArchiveSpec::default());
    }
    s
}

#[test]
fn the_endpoint_token_is_one_random_key_kept_when_the_cluster_goes() {
    let pg = object(spec("16.3"));
    let a = render::endpoint_token_secret(&pg);
    let b = render::endpoint_token_secret(&pg);
    assert_eq!(a.metadata.name.as_deref(), Some("pg-endpoint-token"));
    assert_eq!(a.metadata.namespace.as_deref(), Some("db"));
    assert_eq!(a.type_.as_deref(), Some("Opaque"));
    assert!(
        a.metadata.owner_references.is_none(),
        "kept, like the credentials Secret"
    );
    assert_eq!(
        a.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("app.kubernetes.io/instance"))
            .map(String::as_str),
        Some("pg")
    );
    let (a, b) = (
        a.string_data.unwrap_or_default(),
        b.string_data.unwrap_or_default(),
    );
    assert_eq!(a.keys().collect::<Vec<_>>(), ["token"]);
    let token = &a["token"];
    assert_eq!(token.len(), 32);
    assert!(token.chars().all(|c| c.is_ascii_alphanumeric()));
    assert_ne!(a, b, "drawn at each rendering: created once, never applied");
}

#[test]
fn the_instances_read_the_token_from_a_read_only_file_not_their_environment() {
    let pg = object(spec("16.3"));
    let token = render::endpoint_token_secret(&pg)
        .string_data
        .unwrap_or_default()
        .remove("token")
        .unwrap_or_default();
    let sts = render::statefulset(&pg, V1, 3).expect("renders");
    let pod = sts.spec.template.spec.expect("a pod");
    let c = &pod.containers[0];
    assert_env(
        c,
        &[(
            "LOCKSTEP_ENDPOINT_TOKEN_FILE",
            "/etc/lockstep/endpoint-token/token",
        )],
    );
    assert!(
        c.env.iter().flatten().all(|e| e
            .value_from
            .as_ref()
            .and_then(|v| v.secret_key_ref.as_ref())
            .is_none_or(|r| r.name != "pg-endpoint-token")),
        "never an environment variable of the server's container"
    );
    let mount = c
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| m.mount_path == "/etc/lockstep/endpoint-token")
        .expect("the token's mount");
    assert_eq!(mount.read_only, Some(true));
    let volume = pod
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == mount.name)
        .and_then(|v| v.secret.clone())
        .expect("the token's Secret volume");
    assert_eq!(volume.secret_name.as_deref(), Some("pg-endpoint-token"));
    assert_eq!(volume.default_mode, Some(0o440));
    assert_eq!(
        volume.optional,
        Some(true),
        "a database pod never waits for it: its manager fails closed"
    );
    let items = volume.items.unwrap_or_default();
    assert_eq!(
        items
            .iter()
            .map(|i| (i.key.as_str(), i.path.as_str()))
            .collect::<Vec<_>>(),
        [("token", "token")]
    );
    let text = serde_json::to_string(&pod).unwrap_or_default();
    assert!(!text.contains(&token));
}

#[test]
fn a_base_backup_job_carries_the_token_by_reference() {
    let pg = object(base_backups(Some("0 3 * * *")));
    let job = render::backup_job(&pg, "backup-1", BackupKind::OnDemand)
        .ok()
        .flatten()
        .expect("renders");
    let c = &job_pod(&job).containers[0];
    let from = c
        .env
        .iter()
        .flatten()
        .find(|e| e.name == "LOCKSTEP_ENDPOINT_TOKEN")
        .and_then(|e| e.value_from.as_ref()?.secret_key_ref.clone())
        .expect("the token from its Secret");
    assert_eq!(
        (from.name.as_str(), from.key.as_str(), from.optional),
        ("pg-endpoint-token", "token", Some(true)),
        "optional: basebackup.sh names a missing token at once"
    );
    let cj = render::cronjob(&pg).ok().flatten().expect("renders");
    let text = serde_json::to_string(&cj).unwrap_or_default();
    assert!(text.contains("LOCKSTEP_ENDPOINT_TOKEN") && text.contains("pg-endpoint-token"));
}

#[test]
fn the_token_is_created_before_the_statefulset_and_before_each_backup_job() {
    let pg = object(base_backups(Some("0 3 * * *")));
    let token = (
        "Secret".to_owned(),
        "pg-endpoint-token".to_owned(),
        "create",
    );
    let sts = Postgres::render(
        &pg,
        &PgAction::EnsureStatefulSet {
            image: V1.to_owned(),
            replicas: 3,
        },
    )
    .expect("renders");
    let sts = written(&sts);
    assert_eq!(sts.first(), Some(&token), "{sts:?}");
    assert_eq!(
        sts.last().map(|(kind, _, verb)| (kind.as_str(), *verb)),
        Some(("StatefulSet", "apply"))
    );
    for action in [
        JobAction::RunBackup {
            key: "backup-1".to_owned(),
            kind: BackupKind::OnDemand,
        },
        JobAction::EnsureCronJob,
    ] {
        let ops =
            written(&Postgres::render(&pg, &PgAction::Jobs(action.clone())).expect("renders"));
        assert_eq!(ops.len(), 2, "{action:?}: {ops:?}");
        assert_eq!(ops.first(), Some(&token), "{action:?}: {ops:?}");
    }
    // Nothing to create without spec.backup: no token either.
    let none = object(spec("16.3"));
    let ops = Postgres::render(
        &none,
        &PgAction::Jobs(JobAction::RunBackup {
            key: "backup-1".to_owned(),
            kind: BackupKind::OnDemand,
        }),
    )
    .expect("renders");
    assert!(ops.is_empty(), "{:?}", written(&ops));
}
