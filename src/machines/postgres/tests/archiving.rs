//! Continuous WAL archiving (`spec.backup.walArchive`): what the instances are given,
//! and what the cluster makes of what its primary reports.

use super::rendering::object;
use super::*;
use crate::machines::common::testing::{assert_env, assert_secret_env};
use crate::machines::postgres::api::WalArchiveSpec;

fn archiving(ca_secret: Option<&str>) -> PostgresClusterSpec {
    let mut s = spec("16.3");
    s.backup = Some(BackupSpec {
        wal_archive: Some(WalArchiveSpec {
            s3_endpoint: Some("https://s3.lockstep-s3.svc:8443".to_owned()),
            ca_secret: ca_secret.map(str::to_owned),
        }),
        ..backup()
    });
    s
}

fn postgres_container(pg: &PostgresCluster) -> (Container, Vec<String>) {
    let sts = render::statefulset(pg, V1, 3).expect("renders");
    let pod = sts.spec.template.spec.expect("a pod");
    let volumes = pod
        .volumes
        .iter()
        .flatten()
        .map(|v| v.name.clone())
        .collect();
    let c = pod
        .containers
        .into_iter()
        .find(|c| c.name == "postgres")
        .expect("the postgres container");
    (c, volumes)
}

#[test]
fn an_archiving_cluster_gives_each_instance_pgbackrest_s_options_and_the_ca_bundle() {
    let (c, volumes) = postgres_container(&object(archiving(Some("s3-ca"))));
    assert_env(
        &c,
        &[
            ("LOCKSTEP_WAL_ARCHIVE", "pgbackrest"),
            ("PGBACKREST_STANZA", "pg"),
            ("PGBACKREST_REPO1_TYPE", "s3"),
            ("PGBACKREST_REPO1_PATH", "/prod/pg"),
            ("PGBACKREST_REPO1_S3_BUCKET", "backups"),
            ("PGBACKREST_REPO1_S3_ENDPOINT", "s3.lockstep-s3.svc"),
            ("PGBACKREST_REPO1_STORAGE_PORT", "8443"),
            ("PGBACKREST_REPO1_S3_URI_STYLE", "path"),
            (
                "PGBACKREST_REPO1_STORAGE_CA_FILE",
                "/etc/lockstep/wal-archive-ca/ca.crt",
            ),
        ],
    );
    assert_secret_env(
        &c,
        &[
            ("PGBACKREST_REPO1_S3_KEY", ("s3", "accessKey")),
            ("PGBACKREST_REPO1_S3_KEY_SECRET", ("s3", "secretKey")),
        ],
    );
    assert!(
        volumes.contains(&"wal-archive-ca".to_owned()),
        "{volumes:?}"
    );
}

#[test]
fn a_cluster_that_does_not_archive_gives_no_archiving_options() {
    let mut s = spec("16.3");
    s.backup = Some(backup());
    let (c, volumes) = postgres_container(&object(s));
    let env = crate::machines::common::testing::plain_env(&c);
    assert!(
        !env.keys()
            .any(|k| k.starts_with("PGBACKREST_") || k == "LOCKSTEP_WAL_ARCHIVE"),
        "{env:?}"
    );
    assert!(!volumes.contains(&"wal-archive-ca".to_owned()));
}

#[test]
fn a_primary_whose_archiving_fails_makes_the_cluster_degraded_naming_it_and_a_replicas_old_report_does_not()
 {
    let s = archiving(None);
    let mut o = at_rest(V1, 0);
    o.own.archiving = BTreeMap::from([
        (
            0,
            (true, "pgBackRest archives this primary's WAL".to_owned()),
        ),
        // What pg-1 said while it was the primary, before a switchover: nobody reads it.
        (
            1,
            (
                false,
                "archive_command fails for WAL file 0000000100000000000000A1".to_owned(),
            ),
        ),
    ]);
    let d = decide(&s, &ready(V1, 0), o.clone());
    assert!(
        matches!(&d, Decision::Stay { reason, .. } if *reason == SERVING),
        "{d:?}"
    );

    o.own.archiving.insert(
        0,
        (
            false,
            "archive_command fails for WAL file 000000020000000000000007".to_owned(),
        ),
    );
    match decide(&s, &ready(V1, 0), o) {
        Decision::Stay {
            reason,
            message,
            health,
            ..
        } => {
            assert_eq!(reason, ARCHIVE_FAILING);
            assert_eq!(health, crate::engine::Health::Degraded);
            assert!(
                message.contains("primary pg-0 reports WAL archiving failing")
                    && message.contains("000000020000000000000007"),
                "{message}"
            );
        }
        other => panic!("a degraded stay, got {other:?}"),
    }
}

#[test]
fn the_status_shows_the_newest_wal_file_archived_and_never_goes_back_to_an_older_report() {
    use crate::driver::Operator;
    use crate::machines::postgres::api::{LastArchived, PostgresClusterStatus};
    let s = archiving(None);
    let pg = object(s.clone());
    let status = testing::status_in(&ready(V1, 0));
    let archived = |wal: &str, secs: i64, pod: &str| {
        let (_, _, message) = LastArchived::condition(wal, t(secs));
        LastArchived::parse(pod, &message).expect("read back")
    };
    let mut o = at_rest(V1, 0);
    // pg-1's report is what it archived while it was the primary, before a switchover.
    o.own.archived = BTreeMap::from([
        (0, archived("000000020000000000000007", 300, "pg-0")),
        (1, archived("000000010000000000000009", 200, "pg-1")),
    ]);
    let shown = Postgres::status(&pg, status.clone(), Some(&ready(V1, 0)), &o, t(310));
    assert_eq!(
        shown["lastArchived"],
        serde_json::json!({
            "wal": "000000020000000000000007",
            "time": t(300),
            "pod": "pg-0",
        })
    );

    // A new primary that has archived nothing yet reports nothing: the status keeps it.
    let mut pg = pg;
    pg.status = Some(PostgresClusterStatus {
        last_archived: Some(archived("000000020000000000000008", 400, "pg-0")),
        ..PostgresClusterStatus::default()
    });
    o.own.archived.remove(&0);
    let shown = Postgres::status(&pg, status, Some(&ready(V1, 1)), &o, t(410));
    assert_eq!(shown["lastArchived"]["wal"], "000000020000000000000008");
}

#[test]
fn a_recovery_names_the_source_repository_and_the_target_for_pgbackrest() {
    use crate::machines::postgres::api::{BootstrapSpec, RecoverySpec, RecoveryTarget};
    let mut spec = super::spec("16.3");
    let mut backup = super::backup();
    backup.prefix = Some("wal".to_owned());
    spec.backup = Some(backup);
    let at = |target: Option<RecoveryTarget>| {
        let mut spec = spec.clone();
        spec.bootstrap = Some(BootstrapSpec {
            recovery: Some(RecoverySpec {
                source: "orders".to_owned(),
                target,
            }),
        });
        crate::machines::postgres::render::archive::recovery_env(&super::rendering::object(spec))
            .into_iter()
            .map(|e| (e.name, e.value.unwrap_or_default()))
            .collect::<Vec<_>>()
    };
    let pair = |k: &str, v: &str| (k.to_owned(), v.to_owned());
    assert_eq!(
        at(None),
        vec![
            pair(
                crate::machines::postgres::render::archive::recovery::SOURCE,
                "orders"
            ),
            pair(
                crate::machines::postgres::render::archive::recovery::REPO_PATH,
                "/wal/orders"
            ),
            pair(
                crate::machines::postgres::render::archive::recovery::TARGET_TYPE,
                "default"
            ),
        ]
    );
    let time = "2026-12-03T06:30:00Z".parse().ok();
    let timed = at(Some(RecoveryTarget {
        time,
        ..RecoveryTarget::default()
    }));
    assert!(timed.contains(&pair(
        crate::machines::postgres::render::archive::recovery::TARGET_TYPE,
        "time"
    )));
    assert!(timed.contains(&pair(
        crate::machines::postgres::render::archive::recovery::TARGET,
        "2026-12-03 06:30:00+00"
    )));
    let immediate = at(Some(RecoveryTarget {
        immediate: Some(true),
        ..RecoveryTarget::default()
    }));
    assert!(immediate.contains(&pair(
        crate::machines::postgres::render::archive::recovery::TARGET_TYPE,
        "immediate"
    )));
    assert!(
        at(None)
            .iter()
            .all(|(k, _)| k != crate::machines::postgres::render::archive::recovery::TARGET)
    );
    let mut plain = spec.clone();
    plain.bootstrap = None;
    assert!(
        crate::machines::postgres::render::archive::recovery_env(&super::rendering::object(plain))
            .is_empty()
    );
}
