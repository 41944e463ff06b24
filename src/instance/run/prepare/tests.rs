//! The preparations' unit tests: layout, configuration files, recovery helpers.

use super::*;

fn prepare(pgdata: &str) -> Prepare {
    let argv = vec![
        "lockstep",
        "--pgdata",
        pgdata,
        "--superuser-password",
        "s",
        "--replication-password",
        "r3pl'ic\\ \"ation pw",
        "--primary-host",
        "pg-rw.ns.svc",
        "--pod-name",
        "pg-1",
    ];
    Prepare::new(super::super::args::parsed(&argv[1..]))
}

#[test]
fn a_standby_follows_the_primary_with_a_quoted_password_and_a_primary_does_not() {
    let p = prepare("/tmp/x/pgdata");
    let standby = p.lockstep_conf(true, &PostgresqlSpec::default(), "");
    assert!(standby.contains(
        "primary_conninfo = 'host=''pg-rw.ns.svc'' port=5432 user=''replicator'' password=''r3pl\\\\''ic\\\\\\\\ \"ation pw'' application_name=''pg-1'' connect_timeout=10'"
    ), "{standby}");
    assert!(
        !p.lockstep_conf(false, &PostgresqlSpec::default(), "")
            .contains("primary_conninfo")
    );
}

#[test]
fn the_markers_sit_beside_pgdata_on_the_same_volume() {
    let p = prepare("/tmp/x/pgdata");
    assert_eq!(
        p.layout.initdb_marker(),
        PathBuf::from("/tmp/x/pgdata.lockstep-initdb-in-progress")
    );
    assert_eq!(
        p.layout.clone_marker(),
        PathBuf::from("/tmp/x/pgdata.lockstep-clone-in-progress")
    );
}

#[test]
fn pg_controldata_is_read_for_state_checkpoint_and_timeline() {
    let control = Control::parse(
        "pg_control version number:            1300\n\
         Database cluster state:               shut down in recovery\n\
         Latest checkpoint location:           0/3000060\n\
         Latest checkpoint's TimeLineID:       2\n",
    );
    assert_eq!(
        control,
        Control {
            state: "shut down in recovery".to_owned(),
            checkpoint: Some("0/3000060".to_owned()),
            timeline: Some(2),
        }
    );
}

/// A data directory of its own for the test `name` (under the system's temporary
/// directory, with a `postgresql.conf`), and the directory to remove after.
fn data_directory(name: &str) -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("lockstep-{name}-{}", std::process::id()));
    let pgdata = dir.join("pgdata");
    fs::create_dir_all(&pgdata).unwrap();
    fs::write(pgdata.join("postgresql.conf"), "port = 1\n").unwrap();
    (dir, pgdata)
}

#[test]
fn write_config_makes_a_standby_and_back_and_drops_pg_basebackups_conninfo() {
    let (dir, pgdata) = data_directory("prepare");
    fs::write(
        pgdata.join("postgresql.auto.conf"),
        "primary_conninfo = 'host=old'\nwork_mem = '8MB'\n",
    )
    .unwrap();
    let p = prepare(pgdata.to_str().unwrap());

    p.write_config(true, &PostgresqlSpec::default(), "")
        .unwrap();
    p.write_config(true, &PostgresqlSpec::default(), "")
        .unwrap();
    let conf = fs::read_to_string(pgdata.join("postgresql.conf")).unwrap();
    assert_eq!(
        conf.matches("include_if_exists = 'lockstep.conf'").count(),
        1
    );
    assert_eq!(
        fs::read_to_string(pgdata.join("postgresql.auto.conf")).unwrap(),
        "work_mem = '8MB'\n"
    );
    assert!(p.layout.is_standby());

    p.write_config(false, &PostgresqlSpec::default(), "")
        .unwrap();
    assert!(!p.layout.is_standby());
    let mode = fs::metadata(pgdata.join("lockstep.conf"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "it holds the replication password");
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_data_directory_the_kubelet_opened_to_its_fs_group_is_made_private_before_a_start() {
    let dir = std::env::temp_dir().join(format!("lockstep-fsgroup-{}", std::process::id()));
    let pgdata = dir.join("pgdata");
    fs::create_dir_all(&pgdata).unwrap();
    fs::write(pgdata.join("postgresql.conf"), "port = 1\n").unwrap();
    // What the kubelet leaves after applying fsGroup: group rwx and setgid.
    fs::set_permissions(&pgdata, fs::Permissions::from_mode(0o2770)).unwrap();
    prepare(pgdata.to_str().unwrap())
        .write_config(true, &PostgresqlSpec::default(), "")
        .unwrap();
    let mode = fs::metadata(&pgdata).unwrap().permissions().mode();
    assert_eq!(
        mode & 0o7777,
        0o700,
        "PostgreSQL refuses anything wider than 0750"
    );
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn only_a_connection_that_could_not_be_made_counts_as_never_reaching_the_primary() {
    for made_none in [
        "pg_rewind: error: connection to server at \"pg-rw.ns.svc\" (10.0.0.251), port 5432 failed: FATAL:  terminating connection due to unexpected postmaster exit",
        "pg_rewind: error: connection to server on socket \"/run/pg/.s.PGSQL.5432\" failed: No such file or directory",
        "pg_rewind: fatal: could not connect to server: Connection refused",
    ] {
        assert!(connection_failed(made_none), "{made_none}");
    }
    for lost_later in [
        "pg_rewind: servers diverged at WAL location 0/3000060 on timeline 1\npg_rewind: error: unexpected result while fetching remote files: server closed the connection unexpectedly",
        "pg_rewind: error: could not fetch remote file \"base/1/1259\"",
        "",
    ] {
        assert!(!connection_failed(lost_later), "{lost_later}");
    }
}

#[test]
fn a_persons_parameters_come_before_the_managed_ones_and_their_rules_after_the_local_ones() {
    let p = prepare("/data/pgdata");
    let user = PostgresqlSpec {
        parameters: [("work_mem", "16MB"), ("port", "1")]
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .into(),
        pg_hba: vec!["host all app 10.0.0.0/8 md5".to_owned()],
    };
    let conf = p.lockstep_conf(false, &user, r#"ANY 1 ("pg-1", "pg-2")"#);
    let at = |needle: &str| {
        conf.find(needle)
            .unwrap_or_else(|| panic!("{needle} in {conf}"))
    };
    assert!(at("work_mem = '16MB'") < at("wal_level = replica"));
    // Read later, the managed port wins over one that slipped through.
    assert!(at("port = '1'") < at("port = 5432"));
    at(r#"synchronous_standby_names = 'ANY 1 ("pg-1", "pg-2")'"#);
    let hba = pg_hba(&user, &Transport::Plain, "replicator");
    let line = |needle: &str| {
        hba.find(needle)
            .unwrap_or_else(|| panic!("{needle} in {hba}"))
    };
    assert!(line("local   replication") < line("host all app"));
    assert!(line("host all app") < line("host    all          all   all"));
}

#[test]
fn with_synchronous_standbys_named_commits_wait_for_them_whatever_the_persons_level() {
    let p = prepare("/data/pgdata");
    let with = |level: &str| PostgresqlSpec {
        parameters: [("synchronous_commit".to_owned(), level.to_owned())].into(),
        ..PostgresqlSpec::default()
    };
    let names = r#"ANY 1 ("pg-1", "pg-2")"#;
    for weaker in ["off", "local", "remote_write"] {
        let conf = p.lockstep_conf(false, &with(weaker), names);
        let at = |needle: &str| {
            conf.rfind(needle)
                .unwrap_or_else(|| panic!("{needle} in {conf}"))
        };
        // Read later, the managed level wins.
        assert!(at(&format!("synchronous_commit = '{weaker}'")) < at("synchronous_commit = 'on'"));
    }
    let stronger = p.lockstep_conf(false, &with("remote_apply"), names);
    assert!(
        !stronger.contains("synchronous_commit = 'on'"),
        "{stronger}"
    );
    // Asynchronous: the person's level stands.
    let asynchronous = p.lockstep_conf(false, &with("off"), "");
    assert!(
        !asynchronous.contains("synchronous_commit = 'on'"),
        "{asynchronous}"
    );
}

#[test]
fn alter_system_overrides_no_managed_setting() {
    let (dir, pgdata) = data_directory("alter");
    fs::write(
        pgdata.join("postgresql.auto.conf"),
        "# Do not edit this file manually!\nsynchronous_standby_names = ''\n\
         Synchronous_Commit = 'local'\nwal_level=minimal\nwork_mem = '8MB'\n\
         restore_command = 'pgbackrest archive-get %f %p'\n",
    )
    .unwrap();
    let p = prepare(pgdata.to_str().unwrap());
    p.write_config(false, &PostgresqlSpec::default(), "")
        .unwrap();
    assert_eq!(
        fs::read_to_string(pgdata.join("postgresql.auto.conf")).unwrap(),
        "# Do not edit this file manually!\nwork_mem = '8MB'\n\
         restore_command = 'pgbackrest archive-get %f %p'\n",
        "a restore's recovery keeps its settings until it ends"
    );
    // PostgreSQL 17 and later refuse ALTER SYSTEM; 15 does not know the setting.
    let conf = || fs::read_to_string(pgdata.join("lockstep.conf")).unwrap();
    fs::write(pgdata.join("PG_VERSION"), "15\n").unwrap();
    p.write_config(false, &PostgresqlSpec::default(), "")
        .unwrap();
    assert!(!conf().contains("allow_alter_system"));
    fs::write(pgdata.join("PG_VERSION"), "17\n").unwrap();
    p.write_config(false, &PostgresqlSpec::default(), "")
        .unwrap();
    assert!(conf().contains("allow_alter_system = off"));
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn over_tls_every_remote_rule_of_lockstep_s_wants_tls_and_a_person_s_rule_stays_as_written() {
    let user = PostgresqlSpec {
        pg_hba: vec!["host all app 10.0.0.0/8 scram-sha-256".to_owned()],
        ..PostgresqlSpec::default()
    };
    let t = Transport::Tls {
        dir: "/t".into(),
        server: "/t".into(),
    };
    let hba = pg_hba(&user, &t, "replicator");
    let remote: Vec<&str> = hba
        .lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with("local"))
        .collect();
    assert_eq!(remote.len(), 4, "{hba}");
    assert!(remote[0].starts_with("hostssl replication  \"replicator\""));
    assert!(remote[0].ends_with("cert"));
    assert_eq!(remote[2], "host all app 10.0.0.0/8 scram-sha-256");
    assert!(remote[3].starts_with("hostssl all"));
}

#[test]
fn a_standby_over_tls_streams_with_verify_full_and_its_server_turns_ssl_on() {
    let mut p = prepare("/tmp/x/pgdata");
    p.args.tls_dir = Some("/nonexistent".into());
    assert!(
        !p.lockstep_conf(false, &PostgresqlSpec::default(), "")
            .contains("ssl")
    );
    let dir = std::env::temp_dir().join(format!("lockstep-prepare-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    for f in crate::pod::tls::MOUNTED {
        std::fs::write(dir.join(f), "x").expect("file");
    }
    p.args.tls_dir = Some(dir.clone());
    let conf = p.lockstep_conf(true, &PostgresqlSpec::default(), "");
    assert!(conf.contains("ssl = on\n"), "{conf}");
    let conninfo = conf
        .lines()
        .find(|l| l.starts_with("primary_conninfo"))
        .expect("a standby streams");
    assert!(conninfo.contains("sslmode=verify-full"), "{conninfo}");
    assert!(!conninfo.contains("password"), "{conninfo}");
}
