//! One scenario per PostgreSQL major beyond 15, on the image Lockstep builds for it
//! (`ghcr.io/lockstep-dev/postgres:<major>`, `tools/images/build.sh postgres-<major>`):
//! what differs between majors (defaults of `initdb`, of authentication, of the
//! server's files) shows up here, while the full tier runs on 15.
//!
//! In one cluster of three instances, under synchronous replication (ANY 1) and
//! archiving its WAL with pgBackRest into the archive test's S3 server:
//! - the server reports the major it was asked for (`server_version_num`);
//! - a writer through `<name>-rw` loses no acknowledged commit through a switchover on
//!   demand, then a failover (the new primary's postmaster killed until it fails over),
//!   after which the old primary rejoins as a standby through `pg_rewind`;
//! - after a base backup, a new cluster recovered to a moment between two inserts holds
//!   exactly the rows committed before it.

use super::archive::{
    archiving_to_the_store, base_backup, cluster_condition, deploy_store, make_tls, pgbackrest,
};
use super::*;

/// The image of `major` (`tools/images/build.sh --name postgres-<major>`): the server,
/// `psql`, pgBackRest, and `curl` for the backup Job.
fn image_of(major: u32) -> String {
    format!("ghcr.io/lockstep-dev/postgres:{major}")
}

/// `spec.backup` into the store, with the major's own image for the backup Jobs.
fn backup_of(real: &Real, image: &str) -> serde_json::Value {
    let mut backup = archiving_to_the_store(real);
    backup["image"] = json!(image);
    backup
}

/// The whole scenario on `major`, in a namespace named from `prefix`.
async fn a_cluster_of_the_major_fails_over_archives_and_recovers(major: u32, prefix: &str) {
    let started = std::time::Instant::now();
    let phase = |what: &str| {
        eprintln!(
            "(PostgreSQL {major}) {what} at {:.0} s",
            started.elapsed().as_secs_f64()
        );
    };
    let real = Real::new(prefix).await;
    let tls = make_tls(real.ns());
    deploy_store(&real, &tls);
    let (name, version, image) = ("pg", major.to_string(), image_of(major));
    let pg = real
        .cluster_at(
            name,
            3,
            &version,
            &image,
            // The failover delay is 0 only for the kill (below); elsewhere it is the
            // default 30 s: on a loaded machine a new primary's readiness probe can fail
            // three times running (seen for 10 s and more), which must not fail it over.
            json!({
                "synchronous": {"number": 1},
                "backup": backup_of(&real, &image),
            }),
        )
        .await;
    let first = primary_of(&pg);
    let (ok, number) = real.psql_on(&first, "SHOW server_version_num");
    assert!(ok, "{number}");
    assert_eq!(
        number.trim().parse::<u32>().map(|n| n / 10_000),
        Ok(major),
        "{first} runs server_version_num {number}"
    );
    // Commits wait for the standbys, and ALTER SYSTEM cannot turn that off: PostgreSQL 17
    // and later refuse it (allow_alter_system = off).
    real.shows(&first, "SHOW synchronous_commit", "on").await;
    let (altered, said) = real.psql_on(&first, "ALTER SYSTEM SET synchronous_standby_names = ''");
    assert!(
        !altered && said.contains("ALTER SYSTEM is not allowed"),
        "ALTER SYSTEM on {first}: {said}"
    );
    real.cluster_until(name, "ContinuousArchiving True", |pg| {
        cluster_condition(pg, "ContinuousArchiving").is_some_and(|(s, _, _)| s == "True")
    })
    .await;
    phase("Ready and archiving");

    // A switchover on demand, then a failover, under the writer.
    real.start_client(name).await;
    real.writing(true);
    let before = real.acks_grow(0, 20).await;
    let target = if first == "pg-2" { "pg-1" } else { "pg-2" };
    real.pg
        .merge_patch(
            name,
            json!({"metadata": {"annotations": {"lockstep.dev/switchover": target}}}),
        )
        .await;
    let (wanted, at) = (target.to_owned(), image.clone());
    real.cluster_until(name, "Ready with the requested primary", move |pg| {
        is_ready_at(pg, &at)
            && pg.status.as_ref().and_then(|s| s.primary_pod.as_deref()) == Some(wanted.as_str())
    })
    .await;
    let switched = real.acks_grow(real.acks().len(), 20).await;
    phase("switched over");
    // Every member Ready first: under synchronous replication the failover reads both
    // standbys before it promotes one.
    real.all_ready(name).await;
    real.pg
        .merge_patch(name, json!({"spec": {"failoverDelaySeconds": 0}}))
        .await;
    let killed = primary_of(&real.pg.api.get(name).await.expect("the cluster"));
    let promoted = primary_of(&real.kill_primary(name, &killed).await);
    real.pg
        .merge_patch(name, json!({"spec": {"failoverDelaySeconds": 30}}))
        .await;
    real.all_ready(name).await;
    let failed_over = real.acks_grow(real.acks().len(), 20).await;
    let Tally { acked, rows, lost } = real.tally(name);
    eprintln!(
        "(PostgreSQL {major}) {first} -> {target} (switchover), {killed} killed -> {promoted} (failover): {} acknowledged ({before} before the switchover, {switched} before the failover, {failed_over} after), {} rows, lost {lost:?}",
        acked.len(),
        rows.len()
    );
    assert!(
        lost.is_empty(),
        "PostgreSQL {major}: acknowledged commits lost: {lost:?}"
    );
    phase("failed over");
    rejoined_as_a_replica(&real, name, &killed, &promoted).await;
    let (_, logs) = real.kubectl(&["logs", &killed, "-c", "postgres"]);
    assert!(
        rewound(&logs),
        "{killed} did not rejoin through pg_rewind:\n{logs}"
    );
    phase("the old primary rejoined");

    // A base backup on the new timeline, then a point between two inserts, on the
    // primary of then.
    base_backup(&real, name, "base", None).await;
    let promoted = primary_of(&real.pg.api.get(name).await.expect("the cluster"));
    let (ok, info) = pgbackrest(&real, &promoted, &["info", "--output=json"]);
    assert!(ok, "{info}");
    let info: serde_json::Value = serde_json::from_str(&info).expect("pgbackrest info as JSON");
    let stop = info[0]["backup"]
        .as_array()
        .and_then(|b| b.last())
        .and_then(|b| b["timestamp"]["stop"].as_i64())
        .expect("the backup's end");
    // pgBackRest restores to a time only from a backup that ended before it, in whole
    // seconds: the moment comes after that second.
    real.shows(
        &promoted,
        &format!(
            "SELECT extract(epoch FROM clock_timestamp()) > {}",
            stop + 1
        ),
        "t",
    )
    .await;
    let (ok, out) = real.psql_on(
        &promoted,
        "CREATE TABLE pitr (id int PRIMARY KEY); INSERT INTO pitr SELECT generate_series(1, 10)",
    );
    assert!(ok, "{out}");
    let between = real.server_now(&promoted);
    let (ok, out) = real.psql_on(&promoted, "INSERT INTO pitr SELECT generate_series(11, 20)");
    assert!(ok, "{out}");
    real.archive_now(&promoted).await;
    phase("backed up and archived");
    let mut copy = json!({"backup": backup_of(&real, &image)});
    copy["bootstrap"] = json!({"recovery": {"source": name, "target": {"time": between.trim()}}});
    real.cluster_at("copy", 1, &version, &image, copy).await;
    real.shows("copy-0", "SELECT count(*), max(id) FROM pitr", "10|10")
        .await;
    let (ok, out) = real.psql_on("copy-0", "INSERT INTO pitr VALUES (100)");
    assert!(ok, "the recovered primary is writable: {out}");
    phase("recovered to the point");

    let _ = std::fs::remove_dir_all(&tls);
    real.finish().await;
}

#[tokio::test]
async fn postgresql_17_switches_over_and_fails_over_losing_nothing_and_recovers_to_a_point_in_time()
{
    if !real_node() {
        return;
    }
    a_cluster_of_the_major_fails_over_archives_and_recovers(17, "pg17").await;
}

#[tokio::test]
async fn postgresql_18_switches_over_and_fails_over_losing_nothing_and_recovers_to_a_point_in_time()
{
    if !real_node() {
        return;
    }
    a_cluster_of_the_major_fails_over_archives_and_recovers(18, "pg18").await;
}
