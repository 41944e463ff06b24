"""`lockstep instance`, the Rust instance manager (docs/decisions/0001-instance-manager.md), on real PostgreSQL
servers: the fence thread, the Lease through kube-rs (against the LeaseServer
stand-in of lease_stand_in.py, reached through a kubeconfig), demotion that keeps
renewing and releases with the last position, a stray postmaster killed, SIGTERM.
The binary is LOCKSTEP_BIN (default target/debug/lockstep: `cargo build --bin
lockstep` first)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request

from lease_stand_in import UID0, UID1, UID2, UID3, instance_env, writable
from pg_harness import LOCKSTEP_BIN, PG_BIN, SUPER_PASSWORD, Forwarder, free_port, user_kwargs, wait_until

assert os.path.exists(LOCKSTEP_BIN), f"build the manager first: cargo build --bin lockstep ({LOCKSTEP_BIN})"


def test_sigterm_stops_the_server_cleanly_and_the_manager_exits_0(env):
    p = env.pod("pg-0").start("primary")
    assert writable(p)
    p.proc.send_signal(signal.SIGTERM)
    assert p.wait_exit(timeout=60) == 0, p.log_tail()
    assert p.try_sql("SELECT 1") is None
    assert "database system is shut down" in p.log_text()


def test_the_primary_renews_and_publishes_the_l_it_runs_with(env, lease):
    lease.set_holder(f"pg-0/{UID0}")
    lease.lease["spec"]["leaseDurationSeconds"] = 120  # what an older spec wrote
    p = env.pod("pg-0").start("primary", **instance_env(env, lease, UID0))
    assert writable(p)
    n = lease.renewals
    wait_until(lambda: lease.renewals >= n + 2, timeout=20, what="renewals")
    spec = lease.get()["spec"]
    assert spec["holderIdentity"] == f"pg-0/{UID0}"
    assert spec["leaseDurationSeconds"] == 10, "the L this holder's fence runs with (the operator reads the longest L from it)"


def metrics(port: int) -> dict:
    """The manager's /metrics as {series: value} (one sample per line)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    return {line.rsplit(" ", 1)[0]: line.rsplit(" ", 1)[1]
            for line in text.splitlines() if line and not line.startswith("#")}


def test_metrics_say_which_server_is_writable_holds_the_lease_and_how_far_the_standby_lags(env, lease):
    lease.set_holder(f"pg-0/{UID0}")
    pp, sp = free_port(), free_port()
    primary = env.pod("pg-0").start("primary", **instance_env(env, lease, UID0, LOCKSTEP_METRICS_PORT=str(pp)))
    standby = env.pod("pg-1").start("replica", primary=primary,
                                    **instance_env(env, lease, UID1, LOCKSTEP_METRICS_PORT=str(sp)))
    primary.sql("CREATE TABLE items (v int)")
    primary.sql("INSERT INTO items SELECT generate_series(1, 100)")

    def primary_says():
        m = metrics(pp)
        return (m.get("lockstep_instance_writable") == "1"
                and m.get("lockstep_instance_lease_held") == "1"
                and m.get('lockstep_instance_state{state="Primary"}') == "1")

    wait_until(primary_says, timeout=20, what="the primary's metrics")

    def standby_says():
        m = metrics(sp)
        return (m.get("lockstep_instance_writable") == "0"
                and m.get("lockstep_instance_lease_held") == "0"
                and m.get("lockstep_instance_streaming") == "1"
                and "lockstep_instance_replay_lag_bytes" in m
                and int(m.get("lockstep_instance_wal_position_bytes", "0")) > 0)

    wait_until(standby_says, timeout=30, what="the standby's metrics")
    assert standby.in_recovery() is True


def test_the_fence_kills_the_server_within_t_when_the_api_server_hangs(env, lease):
    lease.set_holder(f"pg-0/{UID0}")
    p = env.pod("pg-0").start("primary", **instance_env(env, lease, UID0))
    wait_until(lambda: lease.renewals >= 2, timeout=20, what="renewals")
    last_ok = time.monotonic()
    lease.down = True  # every request hangs (3 s) past its 1 s bound

    def gone():
        return p.try_sql("SELECT 1") is None

    wait_until(gone, timeout=20, interval=0.1, what="the server to be down")
    took = time.monotonic() - last_ok
    # T = 5 s after the start of the last accepted renewal, which began at most R = 1 s
    # before last_ok was taken; the fence thread's kill itself is immediate.
    assert took <= 5 + 1, f"the server answered {took:.1f}s after the last renewal"
    assert p.wait_exit(timeout=30) == 5, p.log_tail()


def test_a_fenced_server_with_a_busy_backend_is_killed_with_its_children(env, lease):
    lease.set_holder(f"pg-0/{UID0}")
    p = env.pod("pg-0").start("primary", **instance_env(env, lease, UID0))
    client = subprocess.Popen(
        [f"{PG_BIN}/psql", "-X", "-h", "127.0.0.1", "-p", str(p.port), "-U", "postgres", "-d", "postgres",
         "-c", "SELECT pg_sleep(60)"],
        env=dict(os.environ, PGPASSWORD=SUPER_PASSWORD),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: p.sql("SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep%'") == "1",
                   timeout=20, what="the busy backend")
        lease.set_holder(f"pg-1/{UID1}")
        assert p.wait_exit(timeout=30) == 5, p.log_tail()
        assert client.wait(timeout=15) != 0  # its session is gone
    finally:
        if client.poll() is None:
            client.kill()
    assert p.try_sql("SELECT 1") is None


def test_demotion_keeps_renewing_stops_cleanly_and_releases_with_the_last_position(env, lease):
    lease.set_holder(f"pg-0/{UID0}")
    old = env.pod("pg-0").start("primary", **instance_env(env, lease, UID0))
    old.sql("CREATE TABLE items (v text)")
    old.sql("INSERT INTO items SELECT 'row-' || g FROM generate_series(1, 50) g")
    old.set_role("demoted")
    assert old.wait_exit(timeout=60) == 0, old.log_tail()
    got = lease.get()
    assert got["spec"].get("holderIdentity") in (None, "")
    annotations = got["metadata"]["annotations"]
    assert annotations["lockstep.dev/released-by"] == f"pg-0/{UID0}"
    control = subprocess.run([f"{PG_BIN}/pg_controldata", "-D", str(old.pgdata)], capture_output=True, text=True,
                             check=True, **user_kwargs()).stdout
    checkpoint = next(l.split(":", 1)[1].strip() for l in control.splitlines()
                      if l.startswith("Latest checkpoint location"))
    assert annotations["lockstep.dev/released-lsn"] == checkpoint


def test_a_postmaster_started_by_hand_is_killed_before_the_manager_starts_its_own(env, lease):
    lease.set_holder(f"pg-0/{UID0}")
    p = env.pod("pg-0").start("primary", **instance_env(env, lease, UID0))
    p.proc.send_signal(signal.SIGTERM)
    assert p.wait_exit(timeout=60) == 0, p.log_tail()
    # `kubectl exec … pg_ctl start` while the manager is not running its own server.
    subprocess.run([f"{PG_BIN}/pg_ctl", "-D", str(p.pgdata), "-w", "-t", "30", "-l", str(p.dir / "stray.log"),
                    "start"], check=True, capture_output=True, cwd=p.dir, **user_kwargs())
    stray = int((p.pgdata / "postmaster.pid").read_text().splitlines()[0])
    assert writable(p), "the stray server runs writable and unsupervised"
    lease.set_holder(f"pg-1/{UID1}")  # not ours: the manager must not start its own
    p.start("primary", wait=False, **instance_env(env, lease, UID0))

    def stray_gone():
        try:
            os.kill(stray, 0)
        except ProcessLookupError:
            return True
        with open(f"/proc/{stray}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"

    wait_until(stray_gone, timeout=20, what="the stray postmaster to be killed")
    assert p.try_sql("SELECT 1") is None
    assert p.proc.poll() is None, "the manager keeps waiting for the Lease"
    p.proc.send_signal(signal.SIGTERM)
    p.wait_exit(timeout=30)


def test_a_switchover_loses_nothing_the_standby_promotes_itself_past_the_released_position(env, lease):
    lease.set_holder(f"pg-0/{UID0}")
    old = env.pod("pg-0").start("primary", **instance_env(env, lease, UID0))
    new = env.pod("pg-1").start("replica", primary=old, **instance_env(env, lease, UID1))
    assert new.in_recovery() is True
    old.sql("CREATE TABLE items (v text)")
    old.sql("INSERT INTO items SELECT 'row-' || g FROM generate_series(1, 500) g")
    old.set_role("demoted")
    assert old.wait_exit(timeout=60) == 0, old.log_tail()
    released = lease.get()["metadata"]["annotations"]["lockstep.dev/released-lsn"]
    # The operator's hand-over: the Lease to the target, then its label.
    lease.set_holder(f"pg-1/{UID1}")
    new.set_role("primary")
    wait_until(lambda: writable(new), timeout=30, what="the target to promote itself")
    assert new.sql("SELECT count(*) FROM items") == "500", "every acknowledged commit is there"
    assert new.sql(f"SELECT pg_current_wal_lsn() >= '{released}'::pg_lsn") == "t"
    n = lease.renewals
    wait_until(lambda: lease.renewals >= n + 2, timeout=20, what="the new primary's renewals")
    assert "lockstep.dev/released-lsn" not in lease.get()["metadata"]["annotations"], (
        "a writable server past the released position drops it")


def test_a_standby_that_has_not_received_the_released_position_does_not_promote(env, lease):
    lease.set_holder(f"pg-0/{UID0}")
    primary = env.pod("pg-0").start("primary", **instance_env(env, lease, UID0))
    standby = env.pod("pg-1").start("replica", primary=primary, **instance_env(env, lease, UID1))
    primary.sql("CREATE TABLE t (v int)")
    primary.stop("immediate")  # gone without a release
    with lease.lock:
        lease.lease["metadata"]["annotations"]["lockstep.dev/released-lsn"] = "FF/0"
    lease.set_holder(f"pg-1/{UID1}")
    standby.set_role("primary")
    # A negative is watched for a window: 8 s is 8 rounds of R, each of which could promote.
    deadline = time.monotonic() + 8
    while time.monotonic() < deadline:
        assert standby.in_recovery() is True, "promoted without the released position"
        time.sleep(0.5)
    lease.drop_annotation("lockstep.dev/released-lsn")  # the person's escape hatch
    wait_until(lambda: writable(standby), timeout=30, what="the promotion once the gate is lifted")



def test_a_standby_past_a_failovers_fork_stops_when_it_cannot_follow_and_its_restart_rewinds(env, lease):
    """pg-1 follows the primary through a forwarder (the `-rw` Service). It receives rows
    that pg-2, stopped, never does; the primary dies, pg-2 is promoted (a new timeline
    forked before those rows) and the forwarder moves to it. pg-1 cannot follow that
    timeline: it stops once it has not streamed for STANDBY_STALL_SECONDS, and its
    restart rewinds it against the new primary, where it streams again."""
    lease.set_holder(f"pg-0/{UID0}")
    old = env.pod("pg-0").start("primary", **instance_env(env, lease, UID0))
    rw = Forwarder(old.port)
    try:
        stalled_env = instance_env(env, lease, UID1, STANDBY_STALL_SECONDS="4", PRIMARY_PORT=str(rw.port))
        ahead = env.pod("pg-1").start("replica", primary=old, **stalled_env)
        behind = env.pod("pg-2").start("replica", primary=old, **instance_env(env, lease, UID2))
        old.sql("CREATE TABLE items (v text)")
        wait_until(lambda: behind.try_sql("SELECT count(*) FROM items") == "0", timeout=30,
                   what="the table on pg-2")
        behind.proc.send_signal(signal.SIGTERM)
        assert behind.wait_exit(timeout=60) == 0, behind.log_tail()
        old.sql("INSERT INTO items VALUES ('only-on-the-old-timeline')")
        ahead.wait_for_row("items", "only-on-the-old-timeline")
        old.stop("immediate")
        # The failover: the Lease and the label to pg-2, the Service's endpoint with them.
        lease.set_holder(f"pg-2/{UID2}")
        behind.start("primary", wait=False, **instance_env(env, lease, UID2))
        wait_until(lambda: writable(behind), timeout=60, what="pg-2 promoted")
        rw.point_at(behind.port)
        assert ahead.wait_exit(timeout=60) == 0, ahead.log_tail()
        assert "has not streamed for" in ahead.log_text(), ahead.log_tail()
        behind.sql("INSERT INTO items VALUES ('after-the-failover')")
        ahead.start("replica", primary=old, **stalled_env)
        wait_until(lambda: ahead.try_sql("SELECT status FROM pg_stat_wal_receiver") == "streaming",
                   timeout=60, what="pg-1 streaming from the new primary")
        ahead.wait_for_row("items", "after-the-failover")
        assert ahead.sql("SELECT count(*) FROM items WHERE v = 'only-on-the-old-timeline'") == "0"
        assert "StandbyMayHaveDiverged" in ahead.log_text(), ahead.log_tail()
    finally:
        rw.close()


def lsn(text: str) -> int:
    hi, lo = text.split("/")
    return (int(hi, 16) << 32) + int(lo, 16)


def test_each_standby_answers_the_survey_with_the_timeline_of_its_wal_once_no_primary_is_left(env, lease):
    """A failover ranks a standby that followed the newest timeline above one holding
    more WAL of an older timeline. pg-1 receives rows on
    timeline 1 after pg-2 and pg-3 stopped; pg-2 is promoted (timeline 2) and pg-3
    follows it. Then pg-2 is gone as well: no WAL receiver runs and no restartpoint has
    recorded timeline 2, and each standby's manager, asked through the Lease, still
    answers its timeline, read from the segment files its WAL receiver wrote; pg-3's
    manager was restarted since, so it holds nothing in memory of the switch."""
    lease.set_holder(f"pg-0/{UID0}")
    old = env.pod("pg-0").start("primary", **instance_env(env, lease, UID0))
    rw = Forwarder(old.port)
    try:
        through_rw = dict(STANDBY_STALL_SECONDS="3600", PRIMARY_PORT=str(rw.port))
        ahead = env.pod("pg-1").start("replica", primary=old, **instance_env(env, lease, UID1, **through_rw))
        promoted = env.pod("pg-2").start("replica", primary=old, **instance_env(env, lease, UID2))
        follower = env.pod("pg-3").start("replica", primary=old, **instance_env(env, lease, UID3, **through_rw))
        old.sql("CREATE TABLE items (v text)")
        for p in (promoted, follower):
            wait_until(lambda: p.try_sql("SELECT count(*) FROM items") == "0", timeout=30,
                       what=f"the table on {p.name}")
            p.proc.send_signal(signal.SIGTERM)
            assert p.wait_exit(timeout=60) == 0, p.log_tail()
        old.sql("INSERT INTO items SELECT 'only-on-timeline-1' FROM generate_series(1, 20000)")
        wait_until(lambda: ahead.try_sql("SELECT count(*) FROM items") == "20000", timeout=60,
                   what="pg-1 to replay the rows of timeline 1")
        old.stop("immediate")
        lease.set_holder(f"pg-2/{UID2}")
        promoted.start("primary", wait=False, **instance_env(env, lease, UID2))
        wait_until(lambda: writable(promoted), timeout=60, what="pg-2 promoted")
        rw.point_at(promoted.port)
        follower.start("replica", primary=old, **instance_env(env, lease, UID3, **through_rw))
        promoted.sql("INSERT INTO items VALUES ('on-timeline-2')")
        follower.wait_for_row("items", "on-timeline-2")
        promoted.stop("immediate")
        wait_until(lambda: follower.try_sql("SELECT count(*) FROM pg_stat_wal_receiver") == "0", timeout=30,
                   what="pg-3's WAL receiver to stop")
        assert follower.sql("SELECT timeline_id FROM pg_control_checkpoint()") == "1", \
            "pg-3's last restartpoint predates timeline 2: the checkpoint alone would say 1"
        token = "survey-test-1"
        lease.annotate("lockstep.dev/survey", token)

        def answered(p):
            lines = [l for l in p.log_text().splitlines() if f"answered survey {token}" in l]
            return lines[-1] if lines else None

        for p in (ahead, follower):
            wait_until(lambda: answered(p) is not None, timeout=30, what=f"{p.name} to answer {token}")
        said = {p.name: answered(p) for p in (ahead, follower)}
        assert "timeline=1" in said["pg-1"] and "timeline=2" in said["pg-3"], said

        def received(line):
            return lsn(line.split("received=")[1].split()[0])

        assert received(said["pg-1"]) > received(said["pg-3"]), \
            f"pg-1 holds more WAL, of the older timeline: {said}"
        # Each token is answered once.
        time.sleep(3)
        assert sum(f"answered survey {token}" in l for l in ahead.log_text().splitlines()) == 1
    finally:
        rw.close()


def test_a_primary_whose_volume_was_lost_never_bootstraps_an_empty_database_in_its_place(env, lease):
    lease.set_holder(f"pg-0/{UID0}")
    primary = env.pod("pg-0").start("primary", **instance_env(env, lease, UID0))
    marked = lambda: lease.get()["metadata"].get("annotations", {}).get("lockstep.dev/initialized") == "true"
    wait_until(marked, timeout=30, what="the first primary to mark the Lease initialized")
    primary.sql("CREATE TABLE items (v int)")
    primary.stop()
    # Its volume is lost: the pod comes back, still labelled primary and named by the
    # Lease, with an empty data directory.
    shutil.rmtree(primary.pgdata)
    lease.set_holder(f"pg-0/{UID0}")  # the operator hands it back (the stop released it)
    primary.start("primary", wait=False, **instance_env(env, lease, UID0))
    # A negative is watched for a window: 8 s is 8 rounds of R, each of which could initdb.
    deadline = time.monotonic() + 8
    while time.monotonic() < deadline:
        assert primary.proc.poll() is None, primary.log_tail()
        assert not (primary.pgdata / "PG_VERSION").exists(), "bootstrapped over the cluster's database"
        time.sleep(0.5)
    assert "AlreadyInitialized" in primary.log_text(), primary.log_tail()
    # The person's way out, to start anew and empty: remove the mark.
    lease.drop_annotation("lockstep.dev/initialized")
    primary.wait_ready()
    assert primary.try_sql("SELECT to_regclass('items') IS NULL") == "t", "a new, empty database"
    wait_until(marked, timeout=30, what="the new primary to mark the Lease again")


def synchronous_annotations(env, durability: str) -> str:
    """The downward-API annotations file of a 2-member cluster with spec.synchronous
    (ANY 1), as the operator renders it."""
    settings = {"synchronous": {"number": 1, "method": "Any", "dataDurability": durability,
                                "members": ["pg-0", "pg-1"]}}
    path = env.base / f"annotations-{durability}"
    path.write_text(f"lockstep.dev/postgresql={json.dumps(json.dumps(settings))}\n")
    path.chmod(0o644)
    return str(path)


def test_preferred_synchronous_replication_waits_for_a_standby_only_while_one_streams(env, lease):
    lease.set_holder(f"pg-0/{UID0}")
    pp = free_port()
    annotations = synchronous_annotations(env, "Preferred")
    primary = env.pod("pg-0").start("primary", **instance_env(
        env, lease, UID0, LOCKSTEP_METRICS_PORT=str(pp), LOCKSTEP_ANNOTATIONS_FILE=annotations))

    def says(names: str, degraded: str):
        return lambda: (primary.sql("SHOW synchronous_standby_names") == names
                        and metrics(pp).get("lockstep_instance_synchronous_degraded") == degraded)

    # Alone: asynchronous (a commit would wait for ever), and it says so.
    wait_until(says("", "1"), timeout=30, what="asynchronous while no standby streams")
    primary.sql("CREATE TABLE items (v int)")
    standby = env.pod("pg-1").start("replica", primary=primary, **instance_env(
        env, lease, UID1, LOCKSTEP_ANNOTATIONS_FILE=annotations))
    wait_until(says('ANY 1 ("pg-1")', "0"), timeout=30, what="synchronous once the standby streams")
    wait_until(lambda: primary.sql("SELECT sync_state FROM pg_stat_replication") == "quorum",
               timeout=20, what="the standby in the quorum")
    primary.sql("INSERT INTO items VALUES (1)")
    wait_until(lambda: standby.sql("SELECT count(*) FROM items") == "1", timeout=20,
               what="the commit on the standby")
    standby.stop()
    wait_until(says("", "1"), timeout=30, what="asynchronous again once it stopped")
    primary.sql("INSERT INTO items VALUES (2)")


def test_required_synchronous_replication_names_the_standby_even_when_none_streams(env, lease):
    lease.set_holder(f"pg-0/{UID0}")
    pp = free_port()
    primary = env.pod("pg-0").start("primary", **instance_env(
        env, lease, UID0, LOCKSTEP_METRICS_PORT=str(pp),
        LOCKSTEP_ANNOTATIONS_FILE=synchronous_annotations(env, "Required")))
    wait_until(lambda: primary.sql("SHOW synchronous_standby_names") == 'ANY 1 ("pg-1")', timeout=30,
               what="the standby named")
    m = metrics(pp)
    assert m.get("lockstep_instance_synchronous_standbys") == "1", m
    assert m.get("lockstep_instance_synchronous_degraded") == "0", m
    # A commit waits for a standby to have it: none streams, so it is never acknowledged
    # (it waits on SyncRep until cancelled; PostgreSQL then says it was not replicated).
    client = subprocess.Popen(
        [f"{PG_BIN}/psql", "-X", "-h", "127.0.0.1", "-p", str(primary.port), "-U", "postgres",
         "-d", "postgres", "-c", "CREATE TABLE items (v int)"],
        env=dict(os.environ, PGPASSWORD=SUPER_PASSWORD), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True)
    try:
        wait_until(lambda: primary.sql("SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'") == "1",
                   timeout=20, what="the commit waiting for a synchronous standby")
        assert client.poll() is None, "the commit was acknowledged without a standby"
        primary.sql("SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE wait_event = 'SyncRep'")
        _, err = client.communicate(timeout=20)
        assert "canceling wait for synchronous replication" in err, err
    finally:
        if client.poll() is None:
            client.kill()


def children(pid: int) -> list[int]:
    """The children of host pid `pid` (all its threads')."""
    out = []
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                out += [int(c) for c in f.read().split()]
        except OSError:
            pass
    return out


def comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def test_as_pid_1_an_orphan_is_reaped_and_sigterm_reaches_the_manager(env):
    p = env.pod("pg-0").start("primary", pid1=True)
    assert writable(p)
    [init] = wait_until(lambda: children(p.proc.pid), timeout=10, what="the namespace's PID 1")
    [manager] = wait_until(lambda: children(init), timeout=10, what="PID 1 forking the manager")
    assert comm(manager) == "lockstep", comm(manager)

    # What `kubectl exec` leaves behind: a shell that exits with a child still running.
    # The child is reparented to PID 1; unreaped, it would stay a zombie in /proc until
    # the container ends.
    subprocess.run(["nsenter", f"--target={init}", "--pid", "--mount", "--",
                    "sh", "-c", "sleep 1 & exit 0"], check=True, timeout=10)
    [orphan] = wait_until(lambda: [c for c in children(init) if comm(c) == "sleep"], timeout=10,
                          what="the orphan reparented to PID 1")
    wait_until(lambda: not os.path.exists(f"/proc/{orphan}"), timeout=15,
               what=f"the orphan {orphan} to be reaped once it exits")
    assert children(init) == [manager] and comm(manager) == "lockstep", p.log_tail()
    assert writable(p)

    # The kubelet's SIGTERM goes to PID 1, which passes it on; the container exits with
    # the manager's code.
    os.kill(init, signal.SIGTERM)
    assert p.wait_exit(timeout=60) == 0, p.log_tail()
    assert p.try_sql("SELECT 1") is None
    assert "database system is shut down" in p.log_text()
    # Everything in the namespace ended with its PID 1; the pid file names a pid of that
    # namespace, which means nothing out here.
    (p.pgdata / "postmaster.pid").unlink(missing_ok=True)
