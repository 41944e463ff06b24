//! (h) Continuous WAL archiving and base backups with pgBackRest, on real
//! PostgreSQL: the primary archives into an S3 server over TLS; the store turning
//! unreachable makes the cluster `Degraded` (`ArchiveFailing`) within a minute with no
//! WAL file due (the primary's check of the repository), then names the file that
//! could not be archived; and once
//! it is back the WAL written meanwhile reaches it with no gap (`pgbackrest check`).
//! Then `backup-now` takes base backups into the same repository, and a retention of
//! one prunes the older; a request to the primary's manager without the cluster's
//! endpoint token is refused (`401`) and takes nothing; a new cluster recovers from them to a moment between two
//! inserts and holds exactly the rows committed before it; a target beyond the archive
//! leaves a cluster Creating, Degraded with `RecoveryFailed`; and after a failover, a
//! recovery to a moment on the new timeline holds exactly the rows committed before it
//! on either timeline. Last, the cluster is rewound in place under a writer
//! ([`super::restore`]).
//!
//! The store is this test's own S3 server (versitygw, the image `tools/node/s3.sh`
//! loads) behind the Service `store`, with a certificate for `store.<ns>.svc` from a CA
//! the test makes with openssl. "Unreachable" is the Service selecting no pod: the
//! server keeps its data, and no other test's S3 is touched.

use std::process::Command;

use super::*;

/// The store's certificate and its CA, made in a directory of this namespace's own.
pub(super) fn make_tls(ns: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("lockstep-{ns}-tls"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let run = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(&dir)
            .output()
            .expect("run openssl");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=store-ca",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
    ]);
    run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=store",
        "-keyout",
        "tls.key",
        "-out",
        "tls.csr",
    ]);
    std::fs::write(
        dir.join("ext"),
        format!("subjectAltName=DNS:store.{ns}.svc,DNS:store.{ns}.svc.cluster.local\n"),
    )
    .expect("write the extension");
    run(&[
        "x509",
        "-req",
        "-in",
        "tls.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        "ext",
        "-out",
        "tls.crt",
    ]);
    dir
}

/// The store: versitygw over TLS on `/data` (its bucket `archive` made by an init
/// container), behind the Service `store` on 443.
pub(super) fn deploy_store(real: &Real, tls: &std::path::Path) {
    let file = |name: &str| tls.join(name).display().to_string();
    for (secret, files) in [
        ("store-tls", vec![file("tls.crt"), file("tls.key")]),
        ("store-ca", vec![file("ca.crt")]),
    ] {
        let mut args = vec!["create", "secret", "generic", secret];
        let from: Vec<String> = files.iter().map(|f| format!("--from-file={f}")).collect();
        args.extend(from.iter().map(String::as_str));
        let (ok, out) = real.kubectl(&args);
        assert!(ok, "{out}");
    }
    let (ok, out) = real.kubectl(&[
        "create",
        "secret",
        "generic",
        "store-credentials",
        "--from-literal=accessKey=archiver",
        "--from-literal=secretKey=archiver-secret",
    ]);
    assert!(ok, "{out}");
    let manifest = format!(
        r#"
apiVersion: apps/v1
kind: Deployment
metadata: {{name: store}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: store}}}}
  template:
    metadata: {{labels: {{app: store}}}}
    spec:
      # `restricted`, as the namespace enforces: the gateway runs as a non-root user,
      # whose group the store's volume is.
      securityContext:
        runAsNonRoot: true
        runAsUser: 65532
        runAsGroup: 65532
        fsGroup: 65532
        seccompProfile: {{type: RuntimeDefault}}
      initContainers:
      - name: bucket
        image: {IMAGE}
        command: [mkdir, -p, /data/archive]
        volumeMounts: [{{name: data, mountPath: /data}}]
        securityContext: {{allowPrivilegeEscalation: false, capabilities: {{drop: [ALL]}}}}
      containers:
      - name: s3
        image: lockstep.local/s3:v1.8.0
        args: [--port, ":7443", --cert, /tls/tls.crt, --key, /tls/tls.key, posix, /data]
        securityContext: {{allowPrivilegeEscalation: false, capabilities: {{drop: [ALL]}}}}
        env:
        - {{name: ROOT_ACCESS_KEY, valueFrom: {{secretKeyRef: {{name: store-credentials, key: accessKey}}}}}}
        - {{name: ROOT_SECRET_KEY, valueFrom: {{secretKeyRef: {{name: store-credentials, key: secretKey}}}}}}
        readinessProbe: {{tcpSocket: {{port: 7443}}, periodSeconds: 1}}
        volumeMounts: [{{name: data, mountPath: /data}}, {{name: tls, mountPath: /tls, readOnly: true}}]
      volumes: [{{name: data, emptyDir: {{}}}}, {{name: tls, secret: {{secretName: store-tls}}}}]
---
apiVersion: v1
kind: Service
metadata: {{name: store}}
spec:
  selector: {{app: store}}
  ports: [{{name: s3, port: 443, targetPort: 7443}}]
"#
    );
    let path = tls.join("store.yaml");
    std::fs::write(&path, manifest).expect("write the manifest");
    let (ok, out) = real.kubectl(&["apply", "-f", &path.display().to_string()]);
    assert!(ok, "{out}");
    let (ok, out) = real.kubectl(&["rollout", "status", "deployment/store", "--timeout=180s"]);
    assert!(ok, "the store never became ready: {out}");
}

/// `spec.backup` archiving into the store of [`deploy_store`] (its CA, its credentials).
pub(super) fn archiving_to_the_store(real: &Real) -> serde_json::Value {
    json!({
        "s3Endpoint": format!("https://store.{}.svc", real.ns()),
        "bucket": "archive",
        "prefix": "wal",
        "credentialsSecret": "store-credentials",
        "image": TOOLS_IMAGE,
        "walArchive": {"caSecret": "store-ca"}
    })
}

/// Point the Service `store` at the server (`true`) or at no pod (`false`).
fn store_reachable(real: &Real, reachable: bool) {
    let app = if reachable { "store" } else { "nobody" };
    let patch = format!(r#"{{"spec":{{"selector":{{"app":"{app}"}}}}}}"#);
    let (ok, out) = real.kubectl(&["patch", "service", "store", "-p", &patch]);
    assert!(ok, "{out}");
}

/// The cluster's condition `type_`, if it has one: `(status, reason, message)`.
pub(super) fn cluster_condition(
    pg: &PostgresCluster,
    type_: &str,
) -> Option<(String, String, String)> {
    pg.status
        .as_ref()?
        .engine
        .condition(type_)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// `pgbackrest <args>` in the primary's container (its `PGBACKREST_*` environment).
pub(super) fn pgbackrest(real: &Real, pod: &str, args: &[&str]) -> (bool, String) {
    let mut all = vec!["exec", pod, "-c", "postgres", "--", "pgbackrest"];
    all.extend_from_slice(args);
    real.kubectl(&all)
}

/// Ask for a base backup with the token `token`, wait until a backup other than
/// `before` finished: the Job that took it (asserted to have succeeded).
pub(super) async fn base_backup(
    real: &Real,
    name: &str,
    token: &str,
    before: Option<&str>,
) -> String {
    let (ok, out) = real.kubectl(&[
        "annotate",
        "--overwrite",
        "postgrescluster",
        name,
        &format!("lockstep.dev/backup-now={token}"),
    ]);
    assert!(ok, "{out}");
    let before = before.map(str::to_owned);
    let pg = real
        .cluster_until(
            name,
            &format!("the base backup {token} finished"),
            move |pg| {
                pg.status.as_ref().is_some_and(|s| {
                    s.engine.phase.as_deref() == Some("Ready")
                        && s.last_backup
                            .as_ref()
                            .is_some_and(|b| Some(&b.job) != before.as_ref())
                })
            },
        )
        .await;
    let last = pg
        .status
        .and_then(|s| s.last_backup)
        .expect("a last backup");
    assert_eq!(last.outcome, "Succeeded", "{last:?}");
    last.job
}

/// `POST path` to the instance manager on `pod`'s port 9187 from this machine (the pod
/// network is routed here), with `authorization` if any: the status line and the body.
fn post_to_manager(real: &Real, pod: &str, path: &str, authorization: Option<&str>) -> String {
    use std::io::{Read, Write};
    let (ok, ip) = real.kubectl(&["get", "pod", pod, "-o", "jsonpath={.status.podIP}"]);
    assert!(ok, "{ip}");
    let addr = format!("{}:9187", ip.trim())
        .parse()
        .expect("a pod address");
    let mut stream = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(3))
        .expect("connect to the manager");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("a read timeout");
    let header = authorization.map_or_else(String::new, |a| format!("Authorization: {a}\r\n"));
    stream
        .write_all(format!("POST {path} HTTP/1.0\r\n{header}Content-Length: 0\r\n\r\n").as_bytes())
        .expect("send the request");
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .expect("read the answer");
    response
}

/// The tokens of the repository's backups, oldest first (`pgbackrest info`).
fn backup_tokens(real: &Real, pod: &str) -> Vec<String> {
    let (ok, info) = pgbackrest(real, pod, &["info", "--output=json"]);
    assert!(ok, "{info}");
    let info: serde_json::Value = serde_json::from_str(&info).expect("pgbackrest info as JSON");
    info[0]["backup"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|b| {
            b["annotation"]["lockstep-token"]
                .as_str()
                .map(str::to_owned)
        })
        .collect()
}

#[tokio::test]
async fn the_primary_archives_its_wal_with_pgbackrest_and_an_unreachable_store_is_degraded_until_it_is_back()
 {
    if !real_node() {
        return;
    }
    // The S3 image: loaded with the shared server (this test runs its own).
    let _ = s3_env();
    let real = Real::new("pg-archive").await;
    let tls = make_tls(real.ns());
    deploy_store(&real, &tls);
    let name = "archived";
    real.cluster(
        name,
        2,
        json!({"backup": archiving_to_the_store(&real), "failoverDelaySeconds": 0}),
    )
    .await;
    let primary = format!("{name}-0");

    // The primary creates the stanza and reports archiving; a completed WAL file
    // reaches the store.
    real.cluster_until(name, "ContinuousArchiving True", |pg| {
        cluster_condition(pg, "ContinuousArchiving").is_some_and(|(s, _, _)| s == "True")
    })
    .await;
    let (ok, out) = real.psql_on(
        &primary,
        "CREATE TABLE t (i int); INSERT INTO t VALUES (1); SELECT pg_switch_wal()",
    );
    assert!(ok, "{out}");
    real.shows(
        &primary,
        "SELECT archived_count > 0 FROM pg_stat_archiver",
        "t",
    )
    .await;
    let (ok, info) = pgbackrest(&real, &primary, &["info", "--output=json"]);
    assert!(ok, "{info}");
    let info: serde_json::Value = serde_json::from_str(&info).expect("pgbackrest info as JSON");
    let max = |info: &serde_json::Value| -> String {
        info[0]["archive"][0]["max"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    let archived_before = max(&info);
    assert!(!archived_before.is_empty(), "no WAL in the store: {info}");
    // The status names it, and the primary that archived it, within a report's interval.
    real.cluster_until(
        name,
        &format!("status.lastArchived {archived_before} by {primary}"),
        {
            let (wal, pod) = (archived_before.clone(), primary.clone());
            move |pg| {
                pg.status
                    .as_ref()
                    .and_then(|s| s.last_archived.as_ref())
                    .is_some_and(|a| a.wal >= wal && a.pod == pod)
            }
        },
    )
    .await;

    // The store turns unreachable. With no WAL file due, the primary's check of the
    // repository says so within a minute.
    store_reachable(&real, false);
    let cut = std::time::Instant::now();
    let unanswered = real
        .cluster_until(
            name,
            "Degraded: ArchiveFailing, the repository unanswered",
            |pg| {
                cluster_condition(pg, "Degraded").is_some_and(|(s, reason, message)| {
                    s == "True" && reason == "ArchiveFailing" && message.contains("does not answer")
                })
            },
        )
        .await;
    let took = cut.elapsed();
    eprintln!(
        "(h) the unreachable store reported after {:.1}s",
        took.as_secs_f64()
    );
    assert!(
        took < std::time::Duration::from_secs(60),
        "reported {took:?} after the cut: {:?}",
        cluster_condition(&unanswered, "Degraded")
    );
    // The next WAL file cannot be archived, and the cluster names the primary and the
    // file.
    let (ok, out) = real.psql_on(&primary, "INSERT INTO t VALUES (2); SELECT pg_switch_wal()");
    assert!(ok, "{out}");
    let degraded = real
        .cluster_until(name, "Degraded: ArchiveFailing for a WAL file", |pg| {
            cluster_condition(pg, "Degraded").is_some_and(|(s, reason, message)| {
                s == "True" && reason == "ArchiveFailing" && message.contains("fails for WAL file")
            })
        })
        .await;
    let (_, _, message) = cluster_condition(&degraded, "Degraded").unwrap_or_default();
    assert!(
        message.contains(&format!("primary {primary} reports WAL archiving failing"))
            && message.contains("fails for WAL file"),
        "{message}"
    );
    assert!(
        cluster_condition(&degraded, "ContinuousArchiving")
            .is_some_and(|(s, reason, _)| s == "False" && reason == "ArchiveFailing"),
        "{:?}",
        degraded.status
    );
    // The primary's /metrics says the same.
    real.metrics_say(
        &primary,
        &["lockstep_instance_wal_archive_report{reason=\"ArchiveFailing\"} 1"],
    )
    .await;
    // The Warning is published after the status write that made the cluster Degraded.
    let events: Api<Event> = real.pg.env.api();
    wait_for_all_within(
        &events,
        "",
        "the ArchiveFailing Warning",
        SLOW,
        |all: &[Event]| {
            all.iter().any(|e| {
                e.type_.as_deref() == Some("Warning")
                    && e.reason.as_deref() == Some("ArchiveFailing")
            })
        },
    )
    .await;

    // Back: what PostgreSQL kept is archived, the cluster is no longer Degraded, and
    // `pgbackrest check` (a new WAL file, archived and found in the store) passes.
    store_reachable(&real, true);
    real.cluster_until(name, "ContinuousArchiving True again, not Degraded", |pg| {
        cluster_condition(pg, "ContinuousArchiving").is_some_and(|(s, _, _)| s == "True")
            && cluster_condition(pg, "Degraded").is_some_and(|(s, _, _)| s == "False")
    })
    .await;
    let (ok, out) = pgbackrest(&real, &primary, &["check"]);
    assert!(ok, "pgbackrest check: {out}");
    real.metrics_say(
        &primary,
        &["lockstep_instance_wal_archive_report{reason=\"Archiving\"} 1"],
    )
    .await;
    let (ok, info) = pgbackrest(&real, &primary, &["info", "--output=json"]);
    assert!(ok, "{info}");
    let info: serde_json::Value = serde_json::from_str(&info).expect("pgbackrest info as JSON");
    assert!(
        max(&info) > archived_before,
        "nothing archived after the store came back: {info}"
    );
    // `kubectl lockstep status` shows the primary's archive from its /metrics (read
    // through the pod proxy within 3 s, or dashes: polled with a deadline).
    let deadline = std::time::Instant::now() + SLOW;
    loop {
        let (code, out) =
            crate::postgres::plugin(&["status", name, "-n", real.ns(), "-o", "json"]).await;
        assert_eq!(code, 0, "{out}");
        let view: serde_json::Value = serde_json::from_str(&out).expect("status as JSON");
        let archived = view["instances"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|i| i["pod"] == primary.as_str())
            .and_then(|i| i["server"]["archive"]["archived"].as_u64());
        if archived.is_some_and(|n| n > 0) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the plugin never showed the primary's archive:\n{out}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // Base backups (the default method with an archive): `backup-now` runs a Job that
    // asks the primary's manager, which runs `pgbackrest backup` into the same
    // repository; the backup carries the Job's name. A second one with a retention of
    // one leaves only itself, and the status says from when the repository can recover.
    let first = base_backup(&real, name, "base-1", None).await;
    assert_eq!(backup_tokens(&real, &primary), vec![first.clone()]);
    // Only the bearer of the cluster's endpoint token may ask: a request from anywhere
    // else naming its own token and a retention of one is refused before anything is
    // asked of pgBackRest, and the repository holds what it held. The Job's own
    // request (the second backup, next) still succeeds.
    let (ok, secret) = real.kubectl(&[
        "get",
        "secret",
        &format!("{name}-endpoint-token"),
        "-o",
        "jsonpath={.data.token}|{.metadata.ownerReferences}",
    ]);
    assert!(ok, "the endpoint token Secret: {secret}");
    assert!(
        secret.trim().ends_with('|') && secret.len() > 10,
        "one key, kept (no owner): {secret}"
    );
    for authorization in [None, Some("Bearer not-the-endpoint-token")] {
        let answer = post_to_manager(
            &real,
            &primary,
            "/backup?token=intruder&retention-count=1",
            authorization,
        );
        eprintln!(
            "unauthenticated POST /backup to {primary}:9187 ({authorization:?}): {}",
            answer.lines().next().unwrap_or_default()
        );
        assert_eq!(answer.split_whitespace().nth(1), Some("401"), "{answer}");
        assert!(answer.contains("unauthorized "), "{answer}");
    }
    assert_eq!(backup_tokens(&real, &primary), vec![first.clone()]);
    let (ok, out) = real.kubectl(&[
        "patch",
        "postgrescluster",
        name,
        "--type=merge",
        "-p",
        r#"{"spec":{"backup":{"retention":{"count":1}}}}"#,
    ]);
    assert!(ok, "{out}");
    let second = base_backup(&real, name, "base-2", Some(&first)).await;
    assert_ne!(first, second);
    assert_eq!(backup_tokens(&real, &primary), vec![second]);

    // Point-in-time recovery into a new cluster: rows 1-10, a moment, rows 11-20, all
    // archived; `copy` (2 instances) recovers to the moment and holds exactly rows 1-10
    // on both, writable, with no recovery target left for a standby to inherit.
    // pgBackRest records a backup's end in whole seconds, and restores to a time only from
    // a backup that ended before it: the moment comes after that second.
    let (ok, info) = pgbackrest(&real, &primary, &["info", "--output=json"]);
    assert!(ok, "{info}");
    let info: serde_json::Value = serde_json::from_str(&info).expect("pgbackrest info as JSON");
    let stop = info[0]["backup"]
        .as_array()
        .and_then(|b| b.last())
        .and_then(|b| b["timestamp"]["stop"].as_i64())
        .expect("the last backup's end");
    // The status names the first recoverable point: the end of the one backup kept.
    let point = chrono::DateTime::from_timestamp(stop, 0).expect("a time");
    real.cluster_until(
        name,
        "status.firstRecoverabilityPoint is the kept backup's end",
        move |pg| {
            pg.status
                .as_ref()
                .and_then(|s| s.first_recoverability_point)
                == Some(point)
        },
    )
    .await;
    real.shows(
        &primary,
        &format!(
            "SELECT extract(epoch FROM clock_timestamp()) > {}",
            stop + 1
        ),
        "t",
    )
    .await;
    let (ok, out) = real.psql_on(
        &primary,
        "CREATE TABLE pitr (id int PRIMARY KEY, at timestamptz NOT NULL DEFAULT clock_timestamp()); \
         INSERT INTO pitr (id) SELECT generate_series(1, 10)",
    );
    assert!(ok, "{out}");
    // Read after the first insert's commit returned, before the second begins: strictly
    // between the two commits (one server clock, microseconds).
    let between = real.server_now(&primary);
    let (ok, out) = real.psql_on(
        &primary,
        "INSERT INTO pitr (id) SELECT generate_series(11, 20)",
    );
    assert!(ok, "{out}");
    // Its own statement: `psql -c` runs one string as one transaction, and the insert's
    // commit record must be in the file switched out, or the archive would not hold a
    // commit after the target until archive_timeout.
    real.archive_now(&primary).await;
    let store = |recovery: serde_json::Value| json!({"backup": archiving_to_the_store(&real), "bootstrap": {"recovery": recovery}});
    real.cluster(
        "copy",
        2,
        store(json!({"source": name, "target": {"time": between.trim()}})),
    )
    .await;
    for pod in ["copy-0", "copy-1"] {
        real.shows(pod, "SELECT count(*), max(id) FROM pitr", "10|10")
            .await;
        real.shows(pod, "SHOW recovery_target_time", "").await;
    }
    let (ok, out) = real.psql_on("copy-0", "INSERT INTO pitr (id) VALUES (100)");
    assert!(ok, "the recovered primary is writable: {out}");

    // A target beyond the archive: the cluster stays Creating, Degraded (RecoveryFailed)
    // naming the pod and PostgreSQL's reason, and never serves.
    let (ok, ahead) = real.psql_on(
        &primary,
        "SELECT to_char((clock_timestamp() + interval '1 hour') AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')",
    );
    assert!(ok, "{ahead}");
    let object = PostgresCluster::new(
        "ahead",
        serde_json::from_value({
            let mut spec = json!({
                "version": "15", "image": IMAGE, "replicas": 1, "storageSize": "1Gi",
                "storageClassName": crate::postgres_real::STORAGE_CLASS,
            });
            crate::support::merge_json(
                &mut spec,
                store(json!({"source": name, "target": {"time": ahead.trim()}})),
            );
            spec
        })
        .expect("a valid spec"),
    );
    real.pg.create_object(&object).await;
    let stuck = real
        .cluster_until("ahead", "Degraded: RecoveryFailed", |pg| {
            cluster_condition(pg, "Degraded")
                .is_some_and(|(s, reason, _)| s == "True" && reason == "RecoveryFailed")
        })
        .await;
    let (_, _, message) = cluster_condition(&stuck, "Degraded").unwrap_or_default();
    assert!(
        message.contains("ahead-0 could not bootstrap from backups")
            && message.contains("the server stopped before recovery reached the target"),
        "{message}"
    );
    assert_eq!(
        stuck
            .status
            .as_ref()
            .and_then(|s| s.engine.phase.as_deref()),
        Some("Creating")
    );

    // After a failover: the new primary archives on its new timeline (with the
    // timeline's history file), and a recovery to a moment on that timeline crosses
    // the switch: rows 21-30 committed on it before the moment are there, 31-40 after
    // it are not. The base backup is the one from before the failover.
    let promoted = primary_of(&real.kill_primary(name, &primary).await);
    let (ok, timeline) = real.psql_on(
        &promoted,
        "SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int",
    );
    assert!(ok, "{timeline}");
    assert!(
        timeline.trim().parse::<u32>().is_ok_and(|t| t >= 2),
        "{promoted} writes on timeline {timeline}"
    );
    let (ok, out) = real.psql_on(
        &promoted,
        "INSERT INTO pitr (id) SELECT generate_series(21, 30)",
    );
    assert!(ok, "{out}");
    let between = real.server_now(&promoted);
    let (ok, out) = real.psql_on(
        &promoted,
        "INSERT INTO pitr (id) SELECT generate_series(31, 40)",
    );
    assert!(ok, "{out}");
    real.archive_now(&promoted).await;
    real.cluster(
        "later",
        1,
        store(json!({"source": name, "target": {"time": between.trim()}})),
    )
    .await;
    real.shows("later-0", "SELECT count(*), max(id) FROM pitr", "30|30")
        .await;
    let (ok, out) = real.psql_on("later-0", "INSERT INTO pitr (id) VALUES (100)");
    assert!(
        ok,
        "the primary recovered past the failover is writable: {out}"
    );

    // Rewound in place, under a writer (`restore.rs`).
    super::restore::in_place_restore_under_a_writer(&real, name, &promoted).await;

    let _ = std::fs::remove_dir_all(&tls);
    real.finish().await;
}
