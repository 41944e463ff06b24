"""The PostgresCluster pod scripts, run for real against PostgreSQL server
binaries and a moto S3 server on loopback. See pg_harness.py for the harness."""

from __future__ import annotations

import shutil
import signal
import subprocess
import time

import botocore.exceptions
import pytest

from pg_harness import (
    IS_ROOT, REPL_PASSWORD, REPL_USER, SCRIPT_NAMES, SCRIPTS_SRC, SUPER_PASSWORD, Env,
    chown_postgres, instance_binary, wait_until,
)

SECRETS = (SUPER_PASSWORD, REPL_PASSWORD)


def make_table(pod, table="items"):
    pod.sql(f"CREATE TABLE IF NOT EXISTS {table} (id serial PRIMARY KEY, v text UNIQUE)")


def insert(pod, value, table="items"):
    pod.sql(f"INSERT INTO {table} (v) VALUES ('{value}')")


def count(pod, value, table="items"):
    return pod.sql(f"SELECT count(*) FROM {table} WHERE v = '{value}'")


def assert_no_secret_in(text: str, *secrets: str):
    for s in secrets or SECRETS:
        assert s not in text, "a secret leaked into the output"


def primary_and_replica(env: Env):
    primary = env.pod("pg-0").start("primary")
    replica = env.pod("pg-1").start("replica", primary=primary)
    return primary, replica


def promote(pod):
    """A promotion as the operator makes one: the target is labelled primary (these pods
    run without a Lease) and its own manager promotes its server; the operator waits
    for that (the manager's report, here the server itself)."""
    pod.set_role("primary")
    wait_until(lambda: pod.try_sql("SELECT pg_is_in_recovery()") == "f",
               what=f"{pod.name} promoted by its manager")


# --- static checks --------------------------------------------------------------

@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_each_script_is_valid_bash_and_passes_shellcheck(name):
    path = SCRIPTS_SRC / name
    r = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck not installed (setup.sh installs it)")
    r = subprocess.run(["shellcheck", "-x", "-S", "warning", str(path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


# --- the instance manager: roles, bootstrap, streaming ----------------------------

def test_an_unknown_role_read_from_the_labels_file_exits_2_naming_it(env):
    pod = env.pod("pg-0")
    pod.start("observer", wait=False)
    assert pod.wait_exit() == 2
    log = pod.log_text()
    assert 'the role label is "observer": it must be primary, replica or demoted' in log
    assert str(pod.labels) in log, "the error names the labels file it read"
    assert not (pod.pgdata / "PG_VERSION").exists()


def test_a_missing_labels_file_exits_2_at_once_naming_the_file(env):
    pod = env.pod("pg-0")
    missing = pod.dir / "nope"
    pod.start("primary", wait=False, LOCKSTEP_ROLE_FILE=str(missing))
    assert pod.wait_exit(timeout=30) == 2
    assert f"LOCKSTEP_ROLE_FILE={missing} cannot be read" in pod.log_text()
    assert not (pod.pgdata / "PG_VERSION").exists()


def test_an_unlabelled_pod_waits_for_the_operator_to_assign_a_role(env):
    pod = env.pod("pg-0")
    pod.start(None, wait=False)
    wait_until(lambda: "no role label yet: waiting for the operator to label this pod" in pod.log_text(),
               what="the manager to say it waits for a role")
    assert pod.proc.poll() is None
    assert not (pod.pgdata / "PG_VERSION").exists()
    # The operator labels the pod; the kubelet rewrites the downward-API file.
    pod.labels.write_text(pod.labels.read_text() + 'lockstep.dev/role="primary"\n')
    pod.wait_ready()
    assert pod.in_recovery() is False


def test_an_unlabelled_pod_prepares_nothing_and_stops_at_once_when_asked(env):
    # The manager waits for a role as long as it takes (the operator may be down); what
    # must hold meanwhile is that nothing is prepared and a deletion is not held up.
    pod = env.pod("pg-0")
    pod.start(None, wait=False)
    wait_until(lambda: "waiting for the operator to label this pod" in pod.log_text(),
               what="the manager to say it waits for a role")
    pod.proc.send_signal(signal.SIGTERM)
    assert pod.wait_exit(timeout=10) == 0
    assert not (pod.pgdata / "PG_VERSION").exists()


def test_the_manager_refuses_to_run_as_root(env):
    if not IS_ROOT:
        pytest.skip("tests are not running as root")
    pod = env.pod("pg-0")
    r = subprocess.run([instance_binary(), "instance"], env=pod.script_env("primary", None),
                       capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    assert r.returncode == 2
    assert "must not run as root" in r.stderr
    assert not (pod.pgdata / "PG_VERSION").exists()


def test_primary_bootstraps_with_password_auth_and_a_replication_role(env):
    pod = env.pod("pg-0").start("primary", POSTGRES_DB="app")
    assert pod.in_recovery() is False
    assert pod.sql("SHOW wal_level") == "replica"
    assert pod.sql("SHOW wal_log_hints") == "on"
    assert pod.sql("SHOW hot_standby") == "on"
    assert pod.sql("SELECT rolreplication FROM pg_roles WHERE rolname = 'replicator'") == "t"
    assert pod.sql("SELECT 1", db="app") == "1"
    # The replication role logs in over TCP with its password; a wrong one fails.
    assert pod.sql("SELECT current_user", user=REPL_USER, password=REPL_PASSWORD) == REPL_USER
    assert pod.psql("SELECT 1", password="wrong").returncode != 0
    assert_no_secret_in(pod.log_text())


def test_primary_bootstraps_the_application_role_owning_its_database(env):
    app_password = "app'pass word"
    pod = env.pod("pg-0").start(
        "primary", APP_USER="pg-app", APP_PASSWORD=app_password, APP_DATABASE="app"
    )
    attributes = (
        "SELECT rolcanlogin, rolsuper, rolcreatedb, rolcreaterole, rolreplication, rolbypassrls "
        "FROM pg_roles WHERE rolname = 'pg-app'"
    )
    assert pod.sql(attributes) == "t|f|f|f|f|f"
    assert pod.sql("SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = 'app'") == "pg-app"
    assert pod.sql("SELECT rolpassword LIKE 'SCRAM-SHA-256$%' FROM pg_authid WHERE rolname = 'pg-app'") == "t"
    # The role logs in over TCP with its password, creates and writes in its database.
    as_app = {"db": "app", "user": "pg-app", "password": app_password}
    assert pod.sql("CREATE TABLE t (id int); INSERT INTO t VALUES (1); SELECT count(*) FROM t", **as_app) == "1"
    refused = pod.psql("CREATE ROLE intruder", **as_app)
    assert refused.returncode != 0 and "permission denied" in refused.stderr
    assert pod.psql("SELECT 1", db="app", user="pg-app", password="wrong").returncode != 0
    assert_no_secret_in(pod.log_text())
    assert app_password not in pod.log_text()


def test_primary_refuses_to_initdb_over_a_non_empty_foreign_directory(env):
    pod = env.pod("pg-0")
    pod.pgdata.mkdir(mode=0o700)
    (pod.pgdata / "someone-elses-file").write_text("keep me")
    chown_postgres(pod.pgdata)
    pod.start("primary", wait=False)
    assert pod.wait_exit() == 2
    log = pod.log_text()
    assert "holds no PostgreSQL data directory: refusing to write over it" in log
    assert f"pgdata={pod.pgdata}" in log, "the error names the directory"
    assert (pod.pgdata / "someone-elses-file").read_text() == "keep me"


def test_primary_redoes_a_bootstrap_that_was_interrupted(env):
    pod = env.pod("pg-0")
    pod.pgdata.mkdir(mode=0o700)
    (pod.pgdata / "PG_VERSION").write_text("15\n")  # half-written by a killed initdb
    chown_postgres(pod.pgdata)
    marker = pod.dir / "pgdata.lockstep-initdb-in-progress"
    marker.write_text("")
    chown_postgres(marker)
    pod.start("primary")
    assert "previous bootstrap was interrupted" in pod.log_text()
    assert not marker.exists()
    assert pod.sql("SELECT rolreplication FROM pg_roles WHERE rolname = 'replicator'") == "t"


def test_replica_streams_a_row_written_on_the_primary(env):
    primary, replica = primary_and_replica(env)
    assert replica.in_recovery() is True
    make_table(primary)
    insert(primary, "hello")
    replica.wait_for_row("items", "hello")
    assert primary.sql("SELECT application_name FROM pg_stat_replication") == "pg-1"
    # A standby is read-only.
    r = replica.psql("INSERT INTO items (v) VALUES ('nope')")
    assert r.returncode != 0 and "read-only" in r.stderr
    assert_no_secret_in(primary.log_text() + replica.log_text())


def test_replica_waits_for_a_primary_that_starts_late(env):
    primary = env.pod("pg-0")
    replica = env.pod("pg-1").start("replica", primary=primary, wait=False)
    wait_until(lambda: f"for a writable primary at 127.0.0.1:{primary.port}" in replica.log_text(),
               what="replica to report waiting")
    assert not (replica.pgdata / "PG_VERSION").exists()
    primary.start("primary")
    replica.wait_ready()
    make_table(primary)
    insert(primary, "late")
    replica.wait_for_row("items", "late")


def test_replica_gives_up_clearly_when_the_primary_never_appears(env):
    nobody = env.pod("pg-0")  # never started
    replica = env.pod("pg-1").start("replica", primary=nobody, wait=False, PRIMARY_WAIT_SECONDS=3)
    assert replica.wait_exit(timeout=60) == 4  # a preparation (the clone) failed
    log = replica.log_text()
    assert f"no writable primary at 127.0.0.1:{nobody.port} within 3 s (PRIMARY_WAIT_SECONDS)" in log
    assert_no_secret_in(log)


def test_restarted_replica_keeps_streaming(env):
    primary, replica = primary_and_replica(env)
    make_table(primary)
    replica.stop()
    insert(primary, "while-down")
    replica.start("replica", primary=primary)
    replica.wait_for_row("items", "while-down")
    assert replica.in_recovery() is True


# --- promotion and failover -------------------------------------------------------

def test_a_standby_is_promoted_only_by_its_own_manager_once_labelled_primary(env):
    primary, replica = primary_and_replica(env)
    make_table(primary)
    primary.stop()
    time.sleep(3)
    assert replica.in_recovery() is True, "nobody promotes a standby still labelled replica"
    promote(replica)
    assert "labelled primary (no Lease): promoting" in replica.log_text()
    insert(replica, "after-promote")
    assert count(replica, "after-promote") == "1"
    assert_no_secret_in(replica.log_text())


def test_demoted_primary_rewinds_discarding_diverged_writes_and_follows_the_new_primary(env):
    old, new = primary_and_replica(env)
    make_table(old)
    insert(old, "before-failover")
    new.wait_for_row("items", "before-failover")

    # Split brain: the replica is promoted while the old primary keeps running
    # and takes a write the new primary never sees; then the old one crashes.
    promote(new)
    insert(old, "diverged")
    insert(new, "on-new-primary")
    old.stop("immediate")

    old.start("replica", primary=new)
    log = old.log_text()
    assert "rewound: starting as a standby" in log
    assert "Done!" in log, "pg_rewind should have actually rewound the diverged timeline"
    assert old.in_recovery() is True
    old.wait_for_row("items", "on-new-primary")
    assert count(old, "diverged") == "0"
    insert(new, "after-rejoin")
    old.wait_for_row("items", "after-rejoin")
    assert new.sql("SELECT application_name FROM pg_stat_replication") == "pg-0"
    assert_no_secret_in(log)


def test_an_old_primary_labelled_demoted_restarts_in_place_as_a_standby_never_a_primary(env):
    # The operator labels the old primary `demoted` at the demote step; if its
    # container restarts in place (same pod, label still `demoted`), it must come
    # back as a standby of the new primary, never as a second writable primary.
    old, new = primary_and_replica(env)
    make_table(old)
    insert(old, "before-switchover")
    new.wait_for_row("items", "before-switchover")
    promote(new)
    insert(old, "diverged")  # what a client of a still-writable old primary would lose
    insert(new, "on-new-primary")
    old.stop("immediate")

    old.start("demoted", primary=new)
    log = old.log_text()
    assert "labelled demoted: an old primary's data: rewinding it" in log
    assert "rewound: starting as a standby" in log
    assert old.in_recovery() is True
    old.wait_for_row("items", "on-new-primary")
    assert count(old, "diverged") == "0"
    assert_no_secret_in(log)


def test_cleanly_stopped_old_primary_rejoins_without_data_loss(env):
    old, new = primary_and_replica(env)
    make_table(old)
    insert(old, "before")
    new.wait_for_row("items", "before")
    old.stop()  # planned switchover: clean shutdown first
    promote(new)
    insert(new, "after")
    old.start("replica", primary=new)
    old.wait_for_row("items", "after")
    assert count(old, "before") == "1"


def test_existing_standby_follows_the_new_primary_after_a_restart(env):
    a = env.pod("pg-0").start("primary")
    b = env.pod("pg-1").start("replica", primary=a)
    c = env.pod("pg-2").start("replica", primary=a)
    make_table(a)
    insert(a, "one")
    b.wait_for_row("items", "one")
    c.wait_for_row("items", "one")
    a.stop()
    c.stop()
    promote(b)
    c.start("replica", primary=b)  # operator points PRIMARY_HOST at the new primary
    insert(b, "two")
    c.wait_for_row("items", "two")
    assert c.in_recovery() is True


def test_standby_labelled_primary_while_stopped_promotes_itself_on_start(env):
    a, b = primary_and_replica(env)
    make_table(a)
    insert(a, "x")
    b.wait_for_row("items", "x")
    a.stop()
    b.stop()
    b.start("primary")
    assert b.in_recovery() is False
    assert int(b.sql("SELECT timeline_id FROM pg_control_checkpoint()")) >= 2
    insert(b, "y")
    assert count(b, "x") == "1"
    assert "promoting it locally" in b.log_text()
    assert not (b.pgdata / "standby.signal").exists()


def test_unrelated_data_directory_is_recloned_when_pg_rewind_fails(env):
    primary = env.pod("pg-0").start("primary")
    make_table(primary)
    insert(primary, "the-real-data")
    stray = env.pod("pg-1").start("primary")  # a different cluster (own initdb)
    stray.stop()
    stray.start("replica", primary=primary)
    log = stray.log_text()
    assert "pg_rewind FAILED: DISCARDING $PGDATA and cloning the primary again" in log
    stray.wait_for_row("items", "the-real-data")
    assert stray.in_recovery() is True


def test_failed_rewind_exits_instead_of_wiping_when_recloning_is_disabled(env):
    primary = env.pod("pg-0").start("primary")
    stray = env.pod("pg-1").start("primary")
    stray.stop()
    stray.start("replica", primary=primary, wait=False, RECLONE_ON_REWIND_FAILURE="false")
    assert stray.wait_exit() == 4
    assert (stray.pgdata / "PG_VERSION").exists()


# --- backup and restore --------------------------------------------------------------

def backup_env(env, primary, **over):
    e = env.s3_env(CLUSTER_NAME=env.cluster, PRIMARY_HOST="127.0.0.1", PRIMARY_PORT=primary.port,
                   POSTGRES_USER="postgres", POSTGRES_PASSWORD=SUPER_PASSWORD, BACKUP_DATABASE="app")
    e.update(over)
    return e


def restore_env(env, target, **over):
    e = env.s3_env(CLUSTER_NAME=env.cluster, TARGET_HOST="127.0.0.1", TARGET_PORT=target.port,
                   POSTGRES_USER="postgres", POSTGRES_PASSWORD=SUPER_PASSWORD, RESTORE_DATABASE="app")
    e.update(over)
    return e


def test_backup_uploads_a_dump_and_restore_brings_the_row_back(s3env):
    env = s3env
    env.cluster = "pg-backup-1"
    primary = env.pod("pg-0").start("primary", POSTGRES_DB="app")
    primary.sql("CREATE TABLE items (id serial PRIMARY KEY, v text UNIQUE)", db="app")
    primary.sql("INSERT INTO items (v) VALUES ('precious')", db="app")

    r = env.run_script("backup.sh", **backup_env(env, primary))
    assert r.returncode == 0, r.stderr
    last = r.stdout.strip().splitlines()[-1]
    assert last.startswith("lockstep-backup: uploaded s3://lockstep-backups/backups/nightly/pg-backup-1/")
    key = last.split("s3://lockstep-backups/", 1)[1].split(" ")[0]
    assert key.endswith(".dump")
    size = int(last.rsplit("(", 1)[1].split(" ")[0])
    head = env.s3.client.head_object(Bucket=env.s3.bucket, Key=key)
    assert head["ContentLength"] == size > 0
    body = env.s3.client.get_object(Bucket=env.s3.bucket, Key=key)["Body"].read()
    assert body[:5] == b"PGDMP"  # pg_dump custom format
    latest = env.s3.client.get_object(Bucket=env.s3.bucket, Key="backups/nightly/pg-backup-1/latest")
    assert latest["Body"].read().decode().strip() == key
    assert_no_secret_in(r.stdout + r.stderr, SUPER_PASSWORD, env.s3.secret_key)

    # Restore the latest backup into a brand-new instance (no RESTORE_KEY).
    fresh = env.pod("pg-restore-0").start("primary")
    r = env.run_script("restore.sh", **restore_env(env, fresh))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == (
        f"lockstep-restore: restored s3://lockstep-backups/{key} into 127.0.0.1:{fresh.port}/app ({size} bytes)")
    assert fresh.sql("SELECT v FROM items", db="app") == "precious"
    assert_no_secret_in(r.stdout + r.stderr, SUPER_PASSWORD, env.s3.secret_key)

    # Restoring an explicit key over existing data replaces it (--clean).
    fresh.sql("INSERT INTO items (v) VALUES ('added-later')", db="app")
    r = env.run_script("restore.sh", **restore_env(env, fresh, RESTORE_KEY=key))
    assert r.returncode == 0, r.stderr
    assert fresh.sql("SELECT string_agg(v, ',') FROM items", db="app") == "precious"


def test_backup_of_a_missing_database_dumps_the_fallback_and_says_so_or_fails_without_one(s3env):
    env = s3env
    env.cluster = "pg-backup-fallback"
    # A cluster created before its application database: the data is in postgres.
    primary = env.pod("pg-0").start("primary")
    primary.sql("CREATE TABLE items (v text); INSERT INTO items VALUES ('older')")

    r = env.run_script("backup.sh", **backup_env(env, primary, BACKUP_DATABASE="app",
                                                 BACKUP_DATABASE_FALLBACK="postgres"))
    assert r.returncode == 0, r.stderr
    assert "database 'app' does not exist" in r.stderr
    fresh = env.pod("pg-restore-0").start("primary")
    r = env.run_script("restore.sh", **restore_env(env, fresh, RESTORE_DATABASE="postgres"))
    assert r.returncode == 0, r.stderr
    assert fresh.sql("SELECT v FROM items") == "older"

    # Without a fallback, a missing database fails the backup: nothing is uploaded.
    r = env.run_script("backup.sh", **backup_env(env, primary, BACKUP_DATABASE="app"))
    assert r.returncode == 3
    assert "pg_dump of 'app'" in r.stderr


def test_backup_without_s3_endpoint_fails_naming_the_variable_and_hides_the_secret(s3env):
    env = s3env
    primary = env.pod("pg-0").start("primary")
    e = backup_env(env, primary, BACKUP_DATABASE="postgres")
    del e["S3_ENDPOINT"]
    r = env.run_script("backup.sh", **e)
    assert r.returncode == 2
    assert "S3_ENDPOINT" in r.stderr
    assert_no_secret_in(r.stdout + r.stderr, SUPER_PASSWORD, env.s3.secret_key)


def test_backup_with_a_wrong_secret_key_is_rejected_by_s3_and_never_printed(s3env):
    env = s3env
    env.cluster = "pg-backup-badkey"
    primary = env.pod("pg-0").start("primary")
    wrong = "WRONG" + env.s3.secret_key[5:]
    r = env.run_script("backup.sh", **backup_env(env, primary, BACKUP_DATABASE="postgres",
                                                 AWS_SECRET_ACCESS_KEY=wrong))
    assert r.returncode == 4
    assert "HTTP 403" in r.stderr and "SignatureDoesNotMatch" in r.stderr
    assert_no_secret_in(r.stdout + r.stderr, wrong, env.s3.secret_key, SUPER_PASSWORD)
    with pytest.raises(botocore.exceptions.ClientError) as err:
        env.s3.client.head_object(Bucket=env.s3.bucket, Key="backups/nightly/pg-backup-badkey/latest")
    assert err.value.response["Error"]["Code"] == "404"


def test_backup_to_a_missing_bucket_fails(s3env):
    env = s3env
    primary = env.pod("pg-0").start("primary")
    r = env.run_script("backup.sh", **backup_env(env, primary, BACKUP_DATABASE="postgres",
                                                 S3_BUCKET="no-such-bucket"))
    assert r.returncode == 4
    assert "HTTP 404" in r.stderr
    assert_no_secret_in(r.stdout + r.stderr, SUPER_PASSWORD, env.s3.secret_key)


def test_restore_waits_for_a_target_that_is_not_up_yet(s3env):
    # A cluster that has just turned Ready is routed by its -rw Service a moment later.
    env = s3env
    env.cluster = "pg-restore-late"
    primary = env.pod("pg-0").start("primary")
    make_table(primary)
    insert(primary, "kept")
    r = env.run_script("backup.sh", **backup_env(env, primary, BACKUP_DATABASE="postgres"))
    assert r.returncode == 0, r.stderr
    late = env.pod("pg-late-0")
    log = env.base / "restore-late.log"
    restore = env.start_script("restore.sh", log, **restore_env(env, late, RESTORE_DATABASE="postgres"))
    try:
        wait_until(lambda: "waiting up to 300s" in log.read_text(), what="restore to report waiting")
        late.start("primary")
        assert restore.wait(timeout=120) == 0, log.read_text()
    finally:
        if restore.poll() is None:
            restore.kill()
    assert count(late, "kept") == "1"
    assert_no_secret_in(log.read_text(), SUPER_PASSWORD, env.s3.secret_key)


@pytest.mark.parametrize("script,job_env,code,setting", [
    ("backup.sh", backup_env, 3, "BACKUP_WAIT_SECONDS"),
    ("restore.sh", restore_env, 5, "RESTORE_WAIT_SECONDS"),
])
def test_a_job_gives_up_on_an_unreachable_database_at_its_deadline(s3env, script, job_env, code, setting):
    env = s3env
    env.cluster = "pg-unreachable"
    primary = env.pod("pg-0").start("primary")  # a dump for restore.sh to download first
    assert env.run_script("backup.sh", **backup_env(env, primary, BACKUP_DATABASE="postgres")).returncode == 0
    nobody = env.pod("pg-9")  # never started
    r = env.run_script(script, **job_env(env, nobody, **{setting: 3}))
    assert r.returncode == code
    assert f"127.0.0.1:{nobody.port} not writable after 3s ({setting}" in r.stderr
    assert_no_secret_in(r.stdout + r.stderr, SUPER_PASSWORD, env.s3.secret_key)


def test_restore_does_not_wait_out_a_refused_password(s3env):
    env = s3env
    env.cluster = "pg-restore-badpw"
    primary = env.pod("pg-0").start("primary")
    assert env.run_script("backup.sh", **backup_env(env, primary, BACKUP_DATABASE="postgres")).returncode == 0
    r = env.run_script("restore.sh", timeout=60,
                       **restore_env(env, primary, POSTGRES_PASSWORD="not-the-password"))
    assert r.returncode == 5
    assert f"127.0.0.1:{primary.port} refused postgres" in r.stderr
    assert_no_secret_in(r.stdout + r.stderr, SUPER_PASSWORD, "not-the-password", env.s3.secret_key)


def test_restore_of_a_missing_key_fails_clearly(s3env):
    env = s3env
    target = env.pod("pg-0").start("primary")
    r = env.run_script("restore.sh", **restore_env(env, target, RESTORE_KEY="backups/nightly/nope/x.dump"))
    assert r.returncode == 4
    assert "s3://lockstep-backups/backups/nightly/nope/x.dump" in r.stderr and "HTTP 404" in r.stderr
    r = env.run_script("restore.sh", **restore_env(env, target, CLUSTER_NAME="never-backed-up"))
    assert r.returncode == 4
    assert "latest-backup pointer" in r.stderr
    assert_no_secret_in(r.stdout + r.stderr, SUPER_PASSWORD, env.s3.secret_key)
