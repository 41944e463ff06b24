//! Micro-benchmarks of the pure core: `engine::step` (decode the persisted record, decide,
//! check the edge, project phase and conditions) and each machine's `decide`, on the
//! worlds a reconcile meets most: at rest (an idle reconcile), a spec change that starts
//! a transition, and the middle of an upgrade.
//!
//! Built only from the public API, like the unit tests' worlds
//! (`src/machines/*/tests.rs`). `make bench` runs them; `cargo bench --bench engine`
//! on its own; `BENCH_QUICK=1` shortens the measurement for a smoke check.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::Duration;

use chrono::{DateTime, Utc};
use criterion::{Criterion, criterion_group, criterion_main};
use lockstep::engine::step::encode;
use lockstep::engine::{
    Decision, EngineStatus, HistoryEntry, Input, Machine, MachineRecord, World, step,
};
use lockstep::machines::common::jobs::{JobOutcome, JobView, Purpose};
use lockstep::machines::common::observe::CronJobView;
use lockstep::machines::distributeddb::DistributedDb;
use lockstep::machines::distributeddb::actions::{HookPhase, hook_key};
use lockstep::machines::distributeddb::api::{
    BackupPolicy, DbPort, DistributedDBSpec, Hook, Storage, UpgradePolicy,
};
use lockstep::machines::distributeddb::observe as ddb;
use lockstep::machines::distributeddb::state::{DdbState, Upgrade, UpgradeStep};
use lockstep::machines::postgres::Postgres;
use lockstep::machines::postgres::actions::Role;
use lockstep::machines::postgres::api::PostgresClusterSpec;
use lockstep::machines::postgres::observe as pg;
use lockstep::machines::postgres::state::{PgState, Topology};

const DB_FROM: &str = "registry.example/distributeddb:1.4";
const DB_TO: &str = "registry.example/distributeddb:1.5";
const PG_FROM: &str = "postgres:16.3";
const PG_TO: &str = "postgres:16.4";

fn t(secs: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(1_800_000_000 + secs, 0).unwrap_or_default()
}

// ------------------------------------------------------------------ DistributedDB

fn hook() -> Hook {
    Hook {
        image: None,
        command: vec!["db-admin".to_owned(), "drain".to_owned()],
        args: Vec::new(),
        env: Vec::new(),
        timeout_seconds: 300,
        retry_limit: 2,
        pod_labels: BTreeMap::new(),
        pod_annotations: BTreeMap::new(),
    }
}

/// A DistributedDB like `examples/distributeddb-full.yaml`: hooks and a backup policy.
fn db_spec(image: &str) -> DistributedDBSpec {
    DistributedDBSpec {
        replicas: 3,
        image: image.to_owned(),
        storage: Storage {
            storage_class_name: None,
            size: "1Gi".to_owned(),
        },
        backup_policy: Some(BackupPolicy {
            schedule: "0 3 * * *".to_owned(),
            suspend: false,
            s3_endpoint: "https://s3.example".to_owned(),
            s3_credentials_secret: "backup-s3".to_owned(),
            bucket: "backups".to_owned(),
            prefix: None,
            retention: Some(7),
            image: "registry.example/db-backup:1".to_owned(),
            command: Vec::new(),
            args: Vec::new(),
            timeout_seconds: 600,
            pod_labels: BTreeMap::new(),
            pod_annotations: BTreeMap::new(),
        }),
        bootstrap: None,
        upgrade: Some(UpgradePolicy {
            pre_hook: Some(hook()),
            post_hook: Some(hook()),
        }),
        scaling: None,
        tls: None,
        resources: None,
        ports: vec![DbPort {
            name: "db".to_owned(),
            port: 8080,
        }],
        env: Vec::new(),
        pod_labels: BTreeMap::new(),
        pod_annotations: BTreeMap::new(),
        placement: None,
        readiness_probe: None,
        liveness_probe: None,
    }
}

fn db_uid(k: i32, image: &str) -> String {
    format!("uid-{k}-{image}")
}

fn db_pod(k: i32, image: &str, ready: bool) -> ddb::PodView {
    ddb::PodView {
        uid: db_uid(k, image),
        image: Some(image.to_owned()),
        ready,
        terminating: false,
        created: Some(t(0)),
        version: String::new(),
        role: (),
    }
}

/// Three pods Ready at `image`, every owned object in place, the backup CronJob there.
fn db_at_rest(image: &str) -> ddb::Observed {
    ddb::Observed {
        name: "inventory".to_owned(),
        statefulset: Some(ddb::StatefulSetView {
            conforms: true,
            image: Some(image.to_owned()),
            replicas: 3,
            caught_up: true,
        }),
        pods: (0..3).map(|k| (k, db_pod(k, image, true))).collect(),
        jobs: Vec::new(),
        cronjob: Some(CronJobView {
            uid: "cron-uid".to_owned(),
            in_sync: true,
        }),
        requests: ddb::Requests::default(),
        own: ddb::Own {
            service_in_sync: true,
            pdb_in_sync: true,
            volumes: ddb::Volumes {
                template_size: Some("1Gi".to_owned()),
                claims: BTreeMap::new(),
            },
            requests: ddb::HookRequests::default(),
            certificates: None,
        },
    }
}

fn db_ready(version: &str) -> DdbState {
    DdbState::Ready {
        version: version.to_owned(),
        replicas: 3,
    }
}

/// Upgrading, ordinal 1 replaced and coming back: pod 2 is at the target, pod 1 is new
/// and not yet Ready, pod 0 is untouched; the hook Jobs of ordinals 2 and 1 are there.
fn db_mid_upgrade() -> (DdbState, ddb::Observed) {
    let state = DdbState::Upgrading(Upgrade {
        from: DB_FROM.to_owned(),
        to: DB_TO.to_owned(),
        replicas: 3,
        ordinal: 1,
        step: UpgradeStep::Restart,
        pod_uid: db_uid(1, DB_FROM),
        attempt: 1,
        budget: lockstep::machines::common::retry::RetryBudget::begin(None),
        skip_ack: None,
        drained: true,
    });
    let mut observed = db_at_rest(DB_FROM);
    if let Some(sts) = observed.statefulset.as_mut() {
        sts.image = Some(DB_TO.to_owned());
    }
    observed.pods.insert(2, db_pod(2, DB_TO, true));
    observed.pods.insert(1, db_pod(1, DB_TO, false));
    let job = |phase: HookPhase, k: i32| {
        let key = hook_key(phase, k, DB_TO, &db_uid(k, DB_FROM), 1);
        JobView {
            name: format!("inventory-{key}"),
            uid: format!("job-{key}"),
            key: Some(key),
            purpose: Some(Purpose::Hook),
            created: Some(t(0)),
            outcome: JobOutcome::Succeeded { at: t(10) },
            held: None,
        }
    };
    observed.jobs = vec![
        job(HookPhase::Pre, 2),
        job(HookPhase::Post, 2),
        job(HookPhase::Pre, 1),
    ];
    (state, observed)
}

// ------------------------------------------------------------------ PostgresCluster

fn pg_spec(version: &str) -> PostgresClusterSpec {
    PostgresClusterSpec {
        bootstrap: None,
        restore: None,
        network_policy: Default::default(),
        hibernate: false,
        version: version.trim_start_matches("postgres:").to_owned(),
        image: None,
        replicas: 3,
        storage_size: "1Gi".to_owned(),
        storage_class_name: None,
        resources: None,
        failover_delay_seconds: 30,
        credentials_secret: Some("pg-creds".to_owned()),
        certificates: None,
        synchronous: None,
        database: Some("app".to_owned()),
        roles: Vec::new(),
        databases: Vec::new(),
        backup_schedule: None,
        backup: None,
        fencing: Default::default(),
        placement: None,
        spread: Default::default(),
        postgresql: Default::default(),
    }
}

fn pg_at_rest(image: &str, primary: i32) -> pg::Observed {
    pg::Observed {
        name: "pg".to_owned(),
        statefulset: Some(pg::StatefulSetView {
            conforms: true,
            image: Some(image.to_owned()),
            replicas: 3,
            caught_up: true,
        }),
        pods: (0..3)
            .map(|k| {
                let role = if k == primary {
                    Role::Primary
                } else {
                    Role::Replica
                };
                (
                    k,
                    pg::PodView {
                        uid: format!("uid-{k}-{image}"),
                        image: Some(image.to_owned()),
                        ready: true,
                        terminating: false,
                        created: None,
                        role: Some(role),
                        version: "1".to_owned(),
                    },
                )
            })
            .collect(),
        jobs: Vec::new(),
        cronjob: None,
        requests: pg::Requests::default(),
        own: pg::Own {
            certificates: None,
            in_sync: pg::InSync::ALL,
            network_policy_uid: None,
            lease: Some(lockstep::machines::postgres::observe::LeaseView {
                holder: Some(format!("pg-{primary}/uid-{primary}-{image}")),
                // Renewed just now: at rest, nothing to do.
                renewed: Some(t(999)),
                renewal_seen: Some(t(999)),
                duration: 15,
                transitions: 0,
                released_by: None,
                released_lsn: None,
                survey: None,
                never_held: false,
                uid: "lease".to_owned(),
                version: "1".to_owned(),
            }),
            job_results: BTreeMap::new(),
            answers: BTreeMap::new(),
            recovery_failed: BTreeMap::new(),
            empty: Default::default(),
            older_managers: Default::default(),
            claims: Default::default(),
            restore_annotated: Default::default(),
            requests: pg::PgRequests::default(),
            lease_seconds: BTreeMap::new(),
            longest_lease_seconds: Some(15),
            unconfigured: Default::default(),
            unjudged: Default::default(),
            judged: (0..3).collect(),
            synchronous_terms: None,
            settings: BTreeMap::new(),
            lagging: Default::default(),
            archiving: Default::default(),
            archived: Default::default(),
            objects: None,
            instances: Default::default(),
            synchronous: Default::default(),
        },
    }
}

fn topology(image: &str) -> Topology {
    Topology {
        image: image.to_owned(),
        replicas: 3,
        primary: 0,
    }
}

// ------------------------------------------------------------------ step inputs

fn world<O>(observed: O) -> World<O> {
    World {
        observed,
        deleting: false,
        now: t(1000),
        entered_at: t(0),
        acks: Default::default(),
        entered_by: String::new(),
    }
}

/// The status an object in `state` carries after a while: a full history, and phase and
/// conditions as the engine projected them (so that an idle step changes nothing).
fn persisted<M: Machine>(
    spec: &M::Spec,
    state: M::State,
    observed: &M::Observed,
) -> EngineStatus<M::State> {
    let record = MachineRecord {
        acks: Default::default(),
        state,
        entered_at: t(0),
        state_version: M::STATE_VERSION,
        history: (0..10)
            .map(|i| HistoryEntry {
                from: "Upgrading".to_owned(),
                to: "Upgrading".to_owned(),
                reason: "PodUpgraded".to_owned(),
                message: format!("pod inventory-{i} runs {DB_FROM} and is Ready"),
                at: t(i),
            })
            .collect(),
        last_error: None,
    };
    let mut status = EngineStatus::default();
    status.machine = Some(encode(&record));
    // One step projects phase, conditions and observedGeneration.
    step::<M>(Input {
        spec,
        status: &status,
        observed: observed.clone(),
        generation: 1,
        deleting: false,
        now: t(1000),
    })
    .status
}

fn bench_step(c: &mut Criterion) {
    let mut group = c.benchmark_group("step");

    let spec = db_spec(DB_FROM);
    let observed = db_at_rest(DB_FROM);
    let status = persisted::<DistributedDb>(&spec, db_ready(DB_FROM), &observed);
    let idle = step::<DistributedDb>(Input {
        spec: &spec,
        status: &status,
        observed: observed.clone(),
        generation: 1,
        deleting: false,
        now: t(1000),
    });
    assert!(!idle.changed, "the idle world must be idle");
    group.bench_function("distributeddb/idle", |b| {
        b.iter(|| {
            step::<DistributedDb>(Input {
                spec: black_box(&spec),
                status: black_box(&status),
                observed: black_box(observed.clone()),
                generation: 1,
                deleting: false,
                now: t(1000),
            })
        });
    });

    let target = db_spec(DB_TO);
    group.bench_function("distributeddb/image_changed", |b| {
        b.iter(|| {
            step::<DistributedDb>(Input {
                spec: black_box(&target),
                status: black_box(&status),
                observed: black_box(observed.clone()),
                generation: 2,
                deleting: false,
                now: t(1000),
            })
        });
    });

    let (state, mid) = db_mid_upgrade();
    let status = persisted::<DistributedDb>(&target, state, &mid);
    group.bench_function("distributeddb/mid_upgrade", |b| {
        b.iter(|| {
            step::<DistributedDb>(Input {
                spec: black_box(&target),
                status: black_box(&status),
                observed: black_box(mid.clone()),
                generation: 2,
                deleting: false,
                now: t(1000),
            })
        });
    });

    let spec = pg_spec(PG_FROM);
    let observed = pg_at_rest(PG_FROM, 0);
    let status = persisted::<Postgres>(
        &spec,
        PgState::Ready {
            cluster: topology(PG_FROM),
        },
        &observed,
    );
    group.bench_function("postgres/idle", |b| {
        b.iter(|| {
            step::<Postgres>(Input {
                spec: black_box(&spec),
                status: black_box(&status),
                observed: black_box(observed.clone()),
                generation: 1,
                deleting: false,
                now: t(1000),
            })
        });
    });
    group.finish();
}

fn bench_decide(c: &mut Criterion) {
    let mut group = c.benchmark_group("decide");

    let spec = db_spec(DB_FROM);
    let state = db_ready(DB_FROM);
    let w = world(db_at_rest(DB_FROM));
    expect(
        "ready_idle",
        &DistributedDb::decide(&spec, &state, &w),
        false,
        "Serving",
    );
    group.bench_function("distributeddb/ready_idle", |b| {
        b.iter(|| DistributedDb::decide(black_box(&spec), black_box(&state), black_box(&w)));
    });
    let target = db_spec(DB_TO);
    expect(
        "image_changed",
        &DistributedDb::decide(&target, &state, &w),
        true,
        "ImageChanged",
    );
    group.bench_function("distributeddb/image_changed", |b| {
        b.iter(|| DistributedDb::decide(black_box(&target), black_box(&state), black_box(&w)));
    });
    let mut creating = db_at_rest(DB_FROM);
    creating.pods.insert(2, db_pod(2, DB_FROM, false));
    let w_creating = world(creating);
    expect(
        "creating_wait",
        &DistributedDb::decide(&spec, &DdbState::Creating, &w_creating),
        false,
        "WaitingForPods",
    );
    group.bench_function("distributeddb/creating_wait", |b| {
        b.iter(|| {
            DistributedDb::decide(
                black_box(&spec),
                black_box(&DdbState::Creating),
                black_box(&w_creating),
            )
        });
    });
    let (mid_state, mid) = db_mid_upgrade();
    let w_mid = world(mid);
    expect(
        "mid_upgrade",
        &DistributedDb::decide(&target, &mid_state, &w_mid),
        false,
        "ReplacingPod",
    );
    group.bench_function("distributeddb/mid_upgrade", |b| {
        b.iter(|| {
            DistributedDb::decide(black_box(&target), black_box(&mid_state), black_box(&w_mid))
        });
    });

    let spec = pg_spec(PG_FROM);
    let ready = PgState::Ready {
        cluster: topology(PG_FROM),
    };
    let w = world(pg_at_rest(PG_FROM, 0));
    expect(
        "pg ready_idle",
        &Postgres::decide(&spec, &ready, &w),
        false,
        "Serving",
    );
    group.bench_function("postgres/ready_idle", |b| {
        b.iter(|| Postgres::decide(black_box(&spec), black_box(&ready), black_box(&w)));
    });
    let mut lost = pg_at_rest(PG_FROM, 0);
    if let Some(p) = lost.pods.get_mut(&0) {
        p.ready = false;
    }
    let w_lost = world(lost);
    expect(
        "primary_not_ready",
        &Postgres::decide(&spec, &ready, &w_lost),
        true,
        "PrimaryNotReady",
    );
    group.bench_function("postgres/primary_not_ready", |b| {
        b.iter(|| Postgres::decide(black_box(&spec), black_box(&ready), black_box(&w_lost)));
    });
    let target = pg_spec(PG_TO);
    let upgrading = PgState::Upgrading {
        cluster: topology(PG_TO),
        pod: None,
    };
    expect(
        "upgrade_start",
        &Postgres::decide(&target, &upgrading, &w),
        false,
        "WaitingForPods",
    );
    group.bench_function("postgres/upgrade_start", |b| {
        b.iter(|| Postgres::decide(black_box(&target), black_box(&upgrading), black_box(&w)));
    });
    group.finish();
}

/// Fail unless `decision` is a transition (`go`) or a stay with `reason`: the worlds
/// must mean what their names say.
fn expect<S, A: std::fmt::Debug>(name: &str, decision: &Decision<S, A>, go: bool, reason: &str) {
    let is_go = matches!(decision, Decision::Go { .. });
    assert!(
        is_go == go && decision.reason() == reason,
        "{name}: expected {} {reason}, got {} {} {:?}",
        if go { "Go" } else { "Stay" },
        if is_go { "Go" } else { "Stay" },
        decision.reason(),
        decision.actions(),
    );
}

fn config() -> Criterion {
    let quick = std::env::var("BENCH_QUICK").is_ok_and(|v| v == "1");
    let (warm_up, measure) = if quick {
        (Duration::from_millis(200), Duration::from_millis(500))
    } else {
        (Duration::from_secs(1), Duration::from_secs(3))
    };
    Criterion::default()
        .warm_up_time(warm_up)
        .measurement_time(measure)
        .sample_size(50)
}

criterion_group! {
    name = benches;
    config = config();
    targets = bench_step, bench_decide
}
criterion_main!(benches);
