"""Base backups with pgBackRest (docs/decisions/0003-backups-with-pgbackrest.md): the backup Job's script, basebackup.sh,
asks the primary's `lockstep instance` (POST /backup on its metrics port), which runs
the real `pgbackrest backup` into a repository on a local directory (the same
commands the pods run against S3). The binary is LOCKSTEP_BIN, as in
test_instance.py."""

from __future__ import annotations

from datetime import datetime, timezone
import json
import subprocess
import urllib.error
import urllib.request

from pg_harness import chown_postgres, free_port, user_kwargs, wait_until

# The cluster's endpoint token (the Secret <cluster>-endpoint-token): a file the
# managers read, an environment variable of the Jobs.
TOKEN = "Zq8endpointTokenOfTheCluster0x9"


def token_file(env):
    """The token's file, as the pods mount it (read-only, the postgres group)."""
    path = env.base / "endpoint-token"
    if not path.exists():
        path.write_text(TOKEN + "\n")
        chown_postgres(path)
        path.chmod(0o440)
    return path


def archiving(env, pod, repo, port, stanza="orders") -> dict:
    """The pgBackRest options the operator renders, with a posix repository."""
    return dict(
        LOCKSTEP_WAL_ARCHIVE="pgbackrest",
        LOCKSTEP_METRICS_PORT=str(port),
        LOCKSTEP_ENDPOINT_TOKEN_FILE=str(token_file(env)),
        PGBACKREST_STANZA=stanza,
        PGBACKREST_REPO1_TYPE="posix",
        PGBACKREST_REPO1_PATH=str(repo),
        PGBACKREST_PG1_PATH=str(pod.pgdata),
        PGBACKREST_PG1_PORT=str(pod.port),
        PGBACKREST_PG1_SOCKET_PATH=str(env.sockets),
        PGBACKREST_LOG_LEVEL_FILE="off",
        PGBACKREST_LOG_LEVEL_CONSOLE="warn",
        PGBACKREST_LOCK_PATH=str(env.base / "pgbackrest-lock"),
    )


def backups(env, options: dict) -> list:
    """`pgbackrest info`'s backups, oldest first."""
    out = subprocess.run(["pgbackrest", "info", "--output=json"], env={**env.base_env(), **options},
                         capture_output=True, text=True, timeout=60, check=True, **user_kwargs())
    return json.loads(out.stdout)[0]["backup"]


def ask(env, port, name, **extra):
    extra.setdefault("LOCKSTEP_ENDPOINT_TOKEN", TOKEN)
    return env.run_script("basebackup.sh", MANAGER_URL=f"http://127.0.0.1:{port}", BACKUP_NAME=name,
                          BACKUP_POLL_SECONDS=1, **extra)


def post(port, path, authorization=None):
    """`POST path` to the manager on `port`: (status, body)."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method="POST", data=b"")
    if authorization:
        request.add_header("Authorization", authorization)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_a_backup_job_gets_one_base_backup_per_token_and_retention_prunes_the_older(env):
    repo, lock = env.base / "repo", env.base / "pgbackrest-lock"
    for directory in (repo, lock):
        directory.mkdir()
        chown_postgres(directory)
    port = free_port()
    pod = env.pod("pg-0")
    options = archiving(env, pod, repo, port)
    pod.start("primary", **options)
    pod.sql("CREATE TABLE items (v int); INSERT INTO items VALUES (1)")
    # The primary's manager creates the stanza.
    wait_until(lambda: (repo / "backup" / "orders" / "backup.info").exists(), timeout=60,
               what="the stanza")

    first = ask(env, port, "orders-backup-1")
    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith("lockstep-backup: base backup "), first.stdout
    taken = backups(env, options)
    assert [b["annotation"]["lockstep-token"] for b in taken] == ["orders-backup-1"]
    assert taken[0]["label"] in first.stdout

    # Without the endpoint token nothing is asked of pgBackRest: neither a request
    # without it, nor one with another token, nor a Job given the wrong one.
    for authorization in (None, "Bearer not-the-token", f"Basic {TOKEN}"):
        status, body = post(port, "/backup?token=evil&retention-count=1", authorization)
        assert status == 401 and body.startswith("unauthorized "), (authorization, status, body)
        assert TOKEN not in body
    wrong = ask(env, port, "orders-backup-evil", LOCKSTEP_ENDPOINT_TOKEN="not-the-token")
    assert wrong.returncode == 2, wrong.stderr
    assert "refused this Job's endpoint token" in wrong.stderr, wrong.stderr
    assert [b["annotation"]["lockstep-token"] for b in backups(env, options)] == ["orders-backup-1"]
    # /metrics stays open.
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        assert response.status == 200

    # The same Job asking again (its pod retried) gets the same backup, not another.
    again = ask(env, port, "orders-backup-1")
    assert again.returncode == 0, again.stderr
    assert again.stdout == first.stdout
    assert len(backups(env, options)) == 1

    # Another Job with a retention of one: its backup is kept, the older pruned.
    # Its last line also goes to the termination log, where the operator reads the
    # first recoverable point: the end of the one backup kept.
    job_dir = env.base / "job"
    job_dir.mkdir()
    chown_postgres(job_dir)
    termination_log = job_dir / "termination-log"
    second = ask(env, port, "orders-backup-2", BACKUP_RETENTION="retention-count=1",
                 TERMINATION_LOG=str(termination_log))
    assert second.returncode == 0, second.stderr
    assert "keeps 1 backup(s)" in second.stdout, second.stdout
    kept = backups(env, options)
    assert [b["annotation"]["lockstep-token"] for b in kept] == ["orders-backup-2"]
    assert termination_log.read_text() == second.stdout.splitlines()[-1] + "\n"
    stop = datetime.fromtimestamp(kept[0]["timestamp"]["stop"], tz=timezone.utc)
    assert f"the first recoverable point {stop.isoformat()})" in second.stdout, second.stdout


def test_a_backup_job_that_reaches_no_manager_gives_up_at_its_deadline_naming_why(env):
    out = ask(env, free_port(), "orders-backup-1", BACKUP_WAIT_SECONDS=2)
    assert out.returncode == 3, out.stderr
    assert "no primary took the base backup within 2s: unreachable" in out.stderr


def test_a_malformed_retention_is_refused_before_anything_is_asked(env):
    out = ask(env, free_port(), "orders-backup-1", BACKUP_RETENTION="all")
    assert out.returncode == 2, out.stderr
    assert "BACKUP_RETENTION must be retention-count=N or retention-days=N" in out.stderr


def test_a_job_without_the_endpoint_token_fails_at_once_naming_the_secret(env):
    out = ask(env, free_port(), "orders-backup-1", LOCKSTEP_ENDPOINT_TOKEN="")
    assert out.returncode == 2, out.stderr
    assert "the Secret <cluster>-endpoint-token (key token) is missing" in out.stderr
    out = ask(env, free_port(), "orders-backup-1", LOCKSTEP_ENDPOINT_TOKEN='x" -o /tmp/x')
    assert out.returncode == 2, out.stderr
    assert "LOCKSTEP_ENDPOINT_TOKEN may only contain" in out.stderr
    assert 'x" -o' not in out.stderr + out.stdout


def test_the_endpoint_token_reaches_curl_on_stdin_never_in_its_argv(env):
    """A stand-in curl records its arguments and its stdin and answers a success."""
    bin_dir = env.base / "fake-bin"
    bin_dir.mkdir()
    chown_postgres(bin_dir)
    curl = bin_dir / "curl"
    curl.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" >{bin_dir}/argv\ncat >{bin_dir}/stdin\n'
                    'echo "succeeded 20261206-010000F (stand-in)"\n')
    curl.chmod(0o755)
    out = ask(env, free_port(), "orders-backup-1", PATH=f"{bin_dir}:{env.base_env()['PATH']}")
    assert out.returncode == 0, out.stderr
    argv = (bin_dir / "argv").read_text()
    assert TOKEN not in argv, argv
    assert "-K\n-\n" in argv, argv
    assert (bin_dir / "stdin").read_text() == f'header = "Authorization: Bearer {TOKEN}"\n'
    assert TOKEN not in out.stdout + out.stderr


def archived_source(env):
    """A primary `orders` archiving into repo/orders (the S3 layout: one repository per
    cluster), with a base backup taken: (pod, its options, the repository root)."""
    root, lock = env.base / "repo", env.base / "pgbackrest-lock"
    for directory in (root, root / "orders", lock):
        directory.mkdir()
        chown_postgres(directory)
    port = free_port()
    pod = env.pod("pg-0")
    options = archiving(env, pod, root / "orders", port)
    pod.start("primary", **options)
    wait_until(lambda: (root / "orders" / "backup" / "orders" / "backup.info").exists(), timeout=60,
               what="the stanza")
    pod.sql("CREATE TABLE items (id int PRIMARY KEY, at timestamptz NOT NULL DEFAULT clock_timestamp())")
    taken = ask(env, port, "orders-backup-1")
    assert taken.returncode == 0, taken.stderr
    # pgBackRest records a backup's end in whole seconds, and restores to a time only from
    # a backup that ended before it: the targets here come after that second.
    stop = backups(env, options)[-1]["timestamp"]["stop"]
    wait_until(lambda: float(pod.sql("SELECT extract(epoch FROM clock_timestamp())")) > stop + 1,
               timeout=10, what="the clock past the backup's recorded end")
    return pod, options, root


def restored(env, root, name, target_type, target=None):
    """A new cluster's first primary, bootstrapped from orders' repository."""
    directory = root / name
    directory.mkdir()
    chown_postgres(directory)
    pod = env.pod(name)
    options = archiving(env, pod, directory, free_port(), stanza=name)
    options.update(LOCKSTEP_RECOVERY_SOURCE="orders", LOCKSTEP_RECOVERY_REPO_PATH=str(root / "orders"),
                   LOCKSTEP_RECOVERY_TARGET_TYPE=target_type)
    if target:
        options["LOCKSTEP_RECOVERY_TARGET"] = target
    return pod, options


def test_a_new_cluster_recovers_to_a_time_and_holds_exactly_the_rows_committed_before_it(env):
    source, _, root = archived_source(env)
    source.sql("INSERT INTO items (id) SELECT generate_series(1, 10)")
    # Read after the first insert's commit returned, before the second begins: strictly
    # between the two commits. In the form the operator renders a target time in.
    between = source.sql("SELECT to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US+00')")
    source.sql("INSERT INTO items (id) SELECT generate_series(11, 20)")
    # The WAL of both inserts reaches the archive.
    last = source.sql("SELECT pg_walfile_name(pg_switch_wal())")
    wait_until(lambda: source.sql(f"SELECT last_archived_wal >= '{last}' FROM pg_stat_archiver") == "t",
               timeout=60, what="the WAL archived")

    pod, options = restored(env, root, "copy", "time", between)
    # This cluster's application role, which the source's backup does not have.
    options.update(APP_USER="copy-app", APP_PASSWORD="copy's app pw", APP_DATABASE="app")
    pod.start("primary", **options)
    assert pod.sql("SELECT count(*), max(id) FROM items") == "10|10", pod.log_tail()
    assert pod.sql("SELECT pg_is_in_recovery()") == "f"
    assert pod.sql("SHOW recovery_target_time") == "", "a standby cloned from it would inherit the target"
    assert pod.sql("SHOW restore_command") == ""
    pod.sql("INSERT INTO items (id) VALUES (100)")  # writable
    # The application role exists with this cluster's password and owns its database.
    assert pod.sql("SELECT rolsuper FROM pg_roles WHERE rolname = 'copy-app'") == "f"
    assert pod.sql("SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = 'app'") == "copy-app"
    assert pod.sql("SELECT current_user", db="app", user="copy-app", password="copy's app pw") == "copy-app"


def test_a_target_beyond_the_archive_fails_the_bootstrap_naming_why_and_never_serves(env):
    source, _, root = archived_source(env)
    ahead = source.sql("SELECT to_char((clock_timestamp() + interval '1 hour') AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS+00')")
    pod, options = restored(env, root, "ahead", "time", ahead)
    pod.start("primary", wait=False, **options)
    code = pod.wait_exit(timeout=120)
    assert code != 0
    log = pod.log_text()
    assert f"recovery from backups failed: the server stopped before recovery reached the target (time {ahead})" in log, pod.log_tail()
    assert "recovery ended before configured recovery target was reached" in log, pod.log_tail()
    assert pod.try_sql("SELECT 1") is None


def test_an_in_place_restore_annotation_rewinds_the_clusters_own_repository_to_an_lsn(env):
    """What an in-place restore's pod 0 does (`spec.restore`): its volume is new, its
    pod carries the operator's `lockstep.dev/restore` annotation (the downward-API file),
    and its manager restores the cluster's own repository (its PGBACKREST_* settings) up
    to the target, instead of running initdb."""
    source, options, root = archived_source(env)
    source.sql("INSERT INTO items (id) SELECT generate_series(1, 10)")
    target = source.sql("SELECT pg_current_wal_lsn()")
    source.sql("INSERT INTO items (id) SELECT generate_series(11, 20)")
    last = source.sql("SELECT pg_walfile_name(pg_switch_wal())")
    wait_until(lambda: source.sql(f"SELECT last_archived_wal >= '{last}' FROM pg_stat_archiver") == "t",
               timeout=60, what="the WAL archived")
    timeline = source.sql("SELECT timeline_id FROM pg_control_checkpoint()")
    source.stop()

    pod = env.pod("pg-0-restored")
    annotations = pod.dir / "annotations"
    request = json.dumps({"token": "rewind-1", "target": {"lsn": target}})
    annotations.write_text(f"lockstep.dev/restore={json.dumps(request)}\n")
    annotations.chmod(0o644)
    own = archiving(env, pod, root / "orders", free_port())
    pod.start("primary", LOCKSTEP_ANNOTATIONS_FILE=str(annotations), **own)
    assert pod.sql("SELECT count(*), max(id) FROM items") == "10|10", pod.log_tail()
    assert pod.sql("SELECT pg_is_in_recovery()") == "f"
    assert int(pod.sql("SELECT timeline_id FROM pg_control_checkpoint()")) > int(timeline)
    assert pod.sql("SHOW recovery_target_lsn") == "", "a standby cloned from it would inherit the target"
    pod.sql("INSERT INTO items (id) VALUES (100)")  # writable
    # It archives its new timeline into the same repository.
    switched = pod.sql("SELECT pg_walfile_name(pg_switch_wal())")
    wait_until(lambda: pod.sql(f"SELECT last_archived_wal >= '{switched}' FROM pg_stat_archiver") == "t",
               timeout=60, what="the new timeline archived")
