"""The pod side of fencing (docs/instance-manager.md): `lockstep instance`
supervises postgres, renews the coordination Lease while its server is writable,
fences itself, starts as a primary only while holding the Lease, releases it on a
clean demotion; the liveness command. Real PostgreSQL servers; the Lease
endpoints of the API server are the stand-in of lease_stand_in.py, reached through a
kubeconfig."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

from lease_stand_in import UID0, UID1, instance_env, writable
from pg_harness import PG_BIN, SUPER_PASSWORD, chown_postgres, instance_binary, user_kwargs, wait_until


def set_role(pod, role: str):
    pod.set_role(role)


def test_sigterm_stops_a_standby_cleanly_and_the_manager_exits_0(env):
    # (A primary's SIGTERM: test_instance.py.)
    primary = env.pod("pg-0").start("primary")
    p = env.pod("pg-1").start("replica", primary=primary)
    assert "postgres started" in p.log_text()
    p.proc.send_signal(signal.SIGTERM)  # the kubelet's stop
    assert p.wait_exit(timeout=60) == 0
    assert "asked to stop: stopping the standby cleanly" in p.log_text()
    assert "database system is shut down" in p.log_text()
    assert p.try_sql("SELECT 1") is None
    assert primary.proc.poll() is None and writable(primary)


def test_a_killed_postmaster_ends_the_container(env):
    p = env.pod("pg-0").start("primary")
    pid = int((p.pgdata / "postmaster.pid").read_text().splitlines()[0])
    os.kill(pid, signal.SIGKILL)
    code = p.wait_exit(timeout=30)
    assert code == 128 + signal.SIGKILL, p.log_tail()
    assert "the server exited with status 137" in p.log_text()


def test_primary_waits_for_the_lease_before_it_starts_writable(env, lease):
    p = env.pod("pg-0")
    p.start("primary", wait=False, **instance_env(env, lease, UID0))
    wait_until(lambda: "the Lease names nobody: waiting before a writable start" in p.log_text(),
               timeout=30, what="waiting for the lease")
    # Not started: nothing listens, nothing was initialized.
    assert p.try_sql("SELECT 1") is None
    assert not (p.pgdata / "PG_VERSION").exists()
    lease.set_holder(f"pg-0/{UID0}")
    p.wait_ready()
    assert writable(p)
    assert "the Lease is this pod's and was just renewed: starting writable" in p.log_text()
    # It keeps renewing while writable (renewTime changes, resourceVersion precondition holds).
    n = lease.renewals
    wait_until(lambda: lease.renewals >= n + 2, timeout=20, what="renewals")
    assert lease.get()["spec"]["holderIdentity"] == f"pg-0/{UID0}"


def test_a_pod_waiting_for_the_lease_rejoins_as_a_standby_when_relabelled(env, lease):
    primary = env.pod("pg-0")
    lease.set_holder(f"pg-0/{UID0}")
    primary.start("primary", **instance_env(env, lease, UID0))
    other = env.pod("pg-1")
    other.start("primary", primary=primary, wait=False, **instance_env(env, lease, UID1))
    wait_until(lambda: f"the Lease names pg-0/{UID0}: waiting before a writable start" in other.log_text(),
               timeout=30, what="waiting")
    assert other.try_sql("SELECT 1") is None
    set_role(other, "replica")
    other.wait_ready()
    assert other.in_recovery() is True
    assert "starting as a standby" in other.log_text()


def test_fences_when_the_lease_names_another_holder(env, lease):
    lease.set_holder(f"pg-0/{UID0}")
    p = env.pod("pg-0").start("primary", **instance_env(env, lease, UID0))
    assert writable(p)
    lease.set_holder(f"pg-1/{UID1}")
    t0 = time.monotonic()
    assert p.wait_exit(timeout=30) == 5
    took = time.monotonic() - t0
    assert took < 1 + 1 + 5, f"fencing took {took:.1f}s"  # R + a request + the stop
    log = p.log_text()
    assert f"the Lease names pg-1/{UID1}: fencing" in log
    assert p.try_sql("SELECT 1") is None


def test_fences_within_t_when_the_api_server_is_unreachable(env, lease):
    lease.set_holder(f"pg-0/{UID0}")
    p = env.pod("pg-0").start("primary", **instance_env(env, lease, UID0))
    wait_until(lambda: lease.renewals >= 2, timeout=20, what="renewals")
    last_ok = time.monotonic()
    lease.down = True
    assert p.wait_exit(timeout=30) == 5
    took = time.monotonic() - last_ok
    # T = 5, R = 1, requests bounded to 1 s: fenced by T + R + 1 (+ the stop).
    assert took <= 5 + 1 + 1 + 5, f"fencing took {took:.1f}s after the last renewal"
    assert "no renewal of the Lease accepted for 3s (T 5s less G 2s): fencing" in p.log_text()
    assert p.try_sql("SELECT 1") is None


def test_a_primary_whose_server_answers_slowly_keeps_renewing_and_serving(env, lease):
    # Its manager's queries wait (the postmaster is stopped: a new connection hangs until
    # its timeout, 2 s); none may delay a renewal past T - G, or a merely slow primary
    # would fence itself.
    lease.set_holder(f"pg-0/{UID0}")
    p = env.pod("pg-0").start("primary", **instance_env(env, lease, UID0))
    wait_until(lambda: lease.renewals >= 2, timeout=20, what="renewals")
    pid = int((p.pgdata / "postmaster.pid").read_text().splitlines()[0])
    os.kill(pid, signal.SIGSTOP)
    began = time.monotonic()
    time.sleep(10)
    ended = time.monotonic()
    alive = p.proc.poll() is None
    try:
        os.kill(pid, signal.SIGCONT)
    except ProcessLookupError:
        alive = False  # fenced: its fence killed the server
    assert alive, p.log_tail()
    log = p.log_text()
    assert "no renewal of the Lease accepted" not in log, p.log_tail()
    during = [t for t in lease.renewed_at if began - 3 <= t <= ended]
    gaps = [b - a for a, b in zip(during, during[1:])]
    # T = 5, G = 2: each renewal within 3 s of the last (R = 1 s apart when nothing waits).
    assert len(during) >= 5 and max(gaps) < 3, f"renewals {gaps}"
    wait_until(lambda: writable(p), timeout=20, what="writable again")
    assert lease.get()["spec"]["holderIdentity"] == f"pg-0/{UID0}"


def test_a_fenced_server_with_a_busy_backend_is_killed_with_its_children(env, lease):
    lease.set_holder(f"pg-0/{UID0}")
    p = env.pod("pg-0").start("primary", **instance_env(env, lease, UID0))
    p.sql("CREATE TABLE t (v int)")
    client = subprocess.Popen(
        [f"{os.environ.get('LOCKSTEP_PG_BIN', '') or p.env.base_env()['PG_BIN']}/psql", "-X", "-h", "127.0.0.1",
         "-p", str(p.port), "-U", "postgres", "-d", "postgres", "-c", "SELECT pg_sleep(60)"],
        env=dict(os.environ, PGPASSWORD=SUPER_PASSWORD), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        lease.set_holder("")
        assert p.wait_exit(timeout=30) == 5
        assert "the Lease names nobody: fencing" in p.log_text()
        assert client.wait(timeout=15) != 0  # its session is gone
    finally:
        if client.poll() is None:
            client.kill()


def test_in_a_container_the_fence_kills_every_other_process_at_once(env, lease):
    # As PID 1's child (Lockstep's init), the fence kills every process of the container
    # in one call: no backend runs on while the others are listed and killed. The
    # postmaster is stopped (SIGSTOP), so the agent's immediate stop does nothing and
    # its kill, on the fence thread, is what ends the server.
    from test_instance import children, comm
    lease.set_holder(f"pg-0/{UID0}")
    p = env.pod("pg-0").start("primary", pid1=True, **instance_env(env, lease, UID0))
    p.sql("CREATE TABLE t (v int)")
    [init] = wait_until(lambda: children(p.proc.pid), timeout=10, what="the namespace's PID 1")
    [manager] = wait_until(lambda: children(init), timeout=10, what="the manager")
    [postmaster] = [c for c in children(manager) if comm(c) == "postgres"]
    client = subprocess.Popen(
        [f"{PG_BIN}/psql", "-X", "-h", "127.0.0.1", "-p", str(p.port), "-U", "postgres",
         "-d", "postgres", "-c", "SELECT pg_sleep(60)"],
        env=dict(os.environ, PGPASSWORD=SUPER_PASSWORD), stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: len(children(postmaster)) > 5, timeout=10, what="the backends")
        os.kill(postmaster, signal.SIGSTOP)
        lease.set_holder("")
        assert p.wait_exit(timeout=30) == 5, p.log_tail()
        assert "killed every other process of the container at once" in p.log_text(), p.log_tail()
        assert client.wait(timeout=15) != 0  # its session is gone
        assert p.try_sql("SELECT 1") is None
    finally:
        if client.poll() is None:
            client.kill()


def test_demotion_stops_cleanly_and_releases_the_lease(env, lease):
    lease.set_holder(f"pg-0/{UID0}")
    old = env.pod("pg-0").start("primary", **instance_env(env, lease, UID0))
    replica = env.pod("pg-1").start("replica", primary=old)
    old.sql("CREATE TABLE items (v text)")
    for i in range(50):
        old.sql(f"INSERT INTO items VALUES ('row-{i}')")
    set_role(old, "demoted")
    assert old.wait_exit(timeout=60) == 0
    log = old.log_text()
    assert "labelled demoted: stopping cleanly for the hand-over, renewing meanwhile" in log
    assert "the Lease is released: exiting so the container restarts as a standby" in log
    got = lease.get()
    assert got["spec"].get("holderIdentity") in (None, "")
    assert got["metadata"]["annotations"]["lockstep.dev/released-by"] == f"pg-0/{UID0}"
    # Its last WAL position (the shutdown checkpoint), for whoever promotes next.
    assert re.fullmatch(r"[0-9A-F]+/[0-9A-F]+", got["metadata"]["annotations"]["lockstep.dev/released-lsn"])
    # The clean stop sent every acknowledged commit to the standby.
    wait_until(lambda: replica.try_sql("SELECT count(*) FROM items") == "50", timeout=30, what="rows on the standby")


def test_a_standby_labelled_primary_promotes_itself_once_it_holds_the_lease(env, lease):
    lease.set_holder(f"pg-0/{UID0}")
    old = env.pod("pg-0").start("primary", **instance_env(env, lease, UID0))
    new = env.pod("pg-1").start("replica", primary=old, **instance_env(env, lease, UID1))
    old.sql("CREATE TABLE items (v text)")
    old.sql("INSERT INTO items VALUES ('acknowledged')")
    set_role(old, "demoted")
    assert old.wait_exit(timeout=60) == 0
    # Labelled primary while the Lease names nobody (released): it stays a standby.
    set_role(new, "primary")
    time.sleep(3)  # three agent rounds (R = 1 s)
    assert new.in_recovery() is True
    # The operator's hand-over: the agent renews the Lease, then promotes its server.
    n = lease.renewals
    lease.set_holder(f"pg-1/{UID1}")
    wait_until(lambda: writable(new), timeout=30, what="the standby to promote itself")
    assert lease.renewals > n
    assert "labelled primary and holding the Lease: renewed, then promoting" in new.log_text()
    wait_until(lambda: lease.renewals >= n + 3, timeout=20, what="renewals by the promoted standby")
    assert new.proc.poll() is None and writable(new)
    assert new.sql("SELECT count(*) FROM items") == "1"
    # Past the old primary's last WAL, the new primary drops the annotation.
    assert "lockstep.dev/released-lsn" not in lease.get()["metadata"]["annotations"]


def running(pid: int) -> bool:
    """Whether `pid` runs (a zombie has ended)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def slow_promote_bin(env, seconds: int) -> str:
    """PostgreSQL's binaries, except that `pg_ctl promote` returns `seconds` after the
    server promoted: a local promotion whose temporary server, writable, outlasts `T`."""
    real = PG_BIN
    wrapped = env.base / "slow-promote-bin"
    if not wrapped.exists():
        wrapped.mkdir()
        for tool in Path(real).iterdir():
            (wrapped / tool.name).symlink_to(tool)
        (wrapped / "pg_ctl").unlink()
        (wrapped / "pg_ctl").write_text(
            "#!/bin/sh\n"
            f'"{real}/pg_ctl" "$@"; rc=$?\n'
            f'for a in "$@"; do [ "$a" = promote ] && sleep {seconds}; done\n'
            "exit $rc\n")
        (wrapped / "pg_ctl").chmod(0o755)
        wrapped.chmod(0o755)
    return str(wrapped)


def test_a_local_promotion_that_outlasts_its_tenure_is_killed_by_the_fence(env, lease):
    # A standby's data on a pod labelled primary is promoted by a temporary server that
    # writes once promoted (its checkpoint, its WAL to the archive). It is guarded as the
    # server proper: killed at the last renewal plus T, however long the promotion takes.
    lease.set_holder(f"pg-0/{UID0}")
    old = env.pod("pg-0").start("primary", **instance_env(env, lease, UID0))
    new = env.pod("pg-1").start("replica", primary=old, **instance_env(env, lease, UID1))
    old.sql("CREATE TABLE items (v text)")
    old.sql("INSERT INTO items VALUES ('acknowledged')")
    wait_until(lambda: new.try_sql("SELECT count(*) FROM items") == "1", timeout=30, what="the row on the standby")
    set_role(old, "demoted")
    assert old.wait_exit(timeout=60) == 0
    new.stop()
    # The standby has every acknowledged commit; with no released position on the Lease
    # (a person removed it, or the old primary's clean stop never released), the pod
    # labelled primary promotes its standby's data locally before it starts writable.
    lease.drop_annotation("lockstep.dev/released-lsn")
    lease.drop_annotation("lockstep.dev/released-by")
    lease.set_holder(f"pg-1/{UID1}")
    slow = slow_promote_bin(env, 12)
    new.start("primary", wait=False, PG_BIN=slow, PATH=f"{slow}:/usr/bin:/bin",
              **instance_env(env, lease, UID1))
    wait_until(lambda: "promoting it locally" in new.log_text(), timeout=30,
               what=f"the local promotion in {new.log}")
    # The temporary server (local-only) runs, promoted: its new timeline's history file
    # is written. Nothing renews while pg_ctl waits.
    wait_until(lambda: (new.pgdata / "pg_wal" / "00000002.history").exists(), timeout=30,
               what="the temporary server promoted")
    pid = int((new.pgdata / "postmaster.pid").read_text().splitlines()[0])
    last = lease.renewed_at[-1]
    wait_until(lambda: not running(pid), timeout=15, what="the temporary server killed")
    killed = time.monotonic()
    # T = 5 s after the last renewal's start, plus the fence's wake-up and our polling.
    assert killed - last < 5 + 2, f"killed {killed - last:.1f} s after the last renewal"
    assert new.wait_exit(timeout=60) != 0
    log = new.log_text()
    assert "the local promotion failed" in log, new.log_tail()
    # The next container start finds a primary's data and the Lease its own: it serves,
    # with the acknowledged row.
    new.start("primary", **instance_env(env, lease, UID1))
    wait_until(lambda: writable(new), timeout=30, what="writable after the restart")
    assert new.sql("SELECT count(*) FROM items") == "1"


class HungVolume:
    """A small ext4 file system on a loop device, which the test freezes (`fsfreeze`):
    every write to it blocks until it is thawed, as on a hung disk."""

    def __init__(self, base: Path):
        self.image, self.mount = base / "wal.img", base / "wal-volume"
        self.mount.mkdir()
        subprocess.run(["truncate", "-s", "64M", str(self.image)], check=True)
        subprocess.run(["mkfs.ext4", "-q", str(self.image)], check=True)
        subprocess.run(["mount", "-o", "loop", str(self.image), str(self.mount)], check=True)
        chown_postgres(self.mount)
        self.frozen = False

    def freeze(self):
        subprocess.run(["fsfreeze", "-f", str(self.mount)], check=True)
        self.frozen = True

    def close(self):
        if self.frozen:
            subprocess.run(["fsfreeze", "-u", str(self.mount)], check=False)
        subprocess.run(["umount", "-l", str(self.mount)], check=False)


def test_a_primary_whose_wal_volume_hangs_stops_and_gives_the_lease_up(env, lease):
    # It still renews the Lease (the manager's own work) while every commit waits on its
    # WAL: its flush position standing still behind what it wrote for the WAL stall
    # bound (5 s here) stops it, so that a standby can take over.
    volume = HungVolume(env.base)
    client = None
    try:
        lease.set_holder(f"pg-0/{UID0}")
        p = env.pod("pg-0").start(
            "primary",
            INITDB_ARGS=f"--encoding=UTF8 --locale=C --wal-segsize=1 --waldir={volume.mount}/wal",
            LOCKSTEP_WAL_STALL_SECONDS="5",
            **instance_env(env, lease, UID0))
        p.sql("CREATE TABLE items (v text)")
        volume.freeze()
        frozen = time.monotonic()
        client = subprocess.Popen(
            [f"{PG_BIN}/psql", "-X", "-h", "127.0.0.1", "-p", str(p.port), "-U", "postgres",
             "-d", "postgres", "-c", "INSERT INTO items VALUES ('never acknowledged')"],
            env=dict(os.environ, PGPASSWORD=SUPER_PASSWORD),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        wait_until(lambda: "has not been flushed past" in p.log_text(), timeout=30,
                   what="the WAL stall to be seen")
        stopped = time.monotonic()
        # The bound (5 s) plus a round or two (R = 1 s) and the probe's own wait.
        assert stopped - frozen < 5 + 8, f"stopped {stopped - frozen:.1f} s after the freeze"
        # It no longer renews: the Lease is released, or expires.
        wait_until(lambda: lease.get()["spec"].get("holderIdentity") in (None, "")
                   or p.proc.poll() is not None, timeout=30, what="the Lease given up")
        n = lease.renewals
        time.sleep(3)
        assert lease.renewals == n, "it renews no more"
    finally:
        volume.close()
    # Thawed: the commit that waited was never acknowledged.
    out, _ = client.communicate(timeout=30)
    assert "INSERT 0 1" not in out, out
    log = p.log_text()
    assert "WalFlushStalled" in log, p.log_tail()


def missed_the_last_commit(env, lease):
    """A primary and a standby (both with the Lease agent); the standby is stopped (it
    misses what follows), the primary commits a row and is demoted: it stops cleanly and
    releases the Lease with its last position. Returns (old, new, that position)."""
    lease.set_holder(f"pg-0/{UID0}")
    old = env.pod("pg-0").start("primary", **instance_env(env, lease, UID0))
    new = env.pod("pg-1").start("replica", primary=old, **instance_env(env, lease, UID1))
    old.sql("CREATE TABLE items (v text)")
    wait_until(lambda: new.try_sql("SELECT count(*) FROM items") == "0", timeout=30, what="the table on the standby")
    new.stop()
    old.sql("INSERT INTO items VALUES ('acknowledged')")
    set_role(old, "demoted")
    assert old.wait_exit(timeout=60) == 0
    return old, new, lease.get()["metadata"]["annotations"]["lockstep.dev/released-lsn"]


def test_a_target_that_missed_the_old_primarys_last_wal_does_not_promote(env, lease):
    old, new, lsn = missed_the_last_commit(env, lease)
    new.start("replica", primary=old, **instance_env(env, lease, UID1))  # nobody to catch up from
    lease.set_holder(f"pg-1/{UID1}")
    set_role(new, "primary")
    wait_until(lambda: f"has received up to {lsn}" in new.log_text(), timeout=30, what="the agent to hold back")
    time.sleep(3)  # three agent rounds (R = 1 s)
    assert new.in_recovery() is True
    # The escape hatch: a person accepts the loss by removing the annotation.
    lease.drop_annotation("lockstep.dev/released-lsn")
    wait_until(lambda: writable(new), timeout=30, what="the promotion without it")
    assert new.sql("SELECT count(*) FROM items") == "0"


def test_a_target_that_missed_it_and_restarts_labelled_primary_starts_as_a_standby(env, lease):
    old, new, _ = missed_the_last_commit(env, lease)
    lease.set_holder(f"pg-1/{UID1}")
    # Its container starts labelled primary, holding the Lease, with standby data short of
    # the released position: no local promotion, a standby that keeps the Lease.
    new.start("primary", primary=old, **instance_env(env, lease, UID1))
    assert new.in_recovery() is True
    assert "starting as a standby, promoted once it has that position" in new.log_text()
    assert lease.get()["spec"]["holderIdentity"] == f"pg-1/{UID1}"
    lease.drop_annotation("lockstep.dev/released-lsn")
    wait_until(lambda: writable(new), timeout=30, what="the promotion without it")


def test_a_standby_labelled_primary_does_not_promote_while_it_cannot_renew(env, lease):
    primary = env.pod("pg-0").start("primary")  # without a Lease of its own
    standby = env.pod("pg-1").start("replica", primary=primary, **instance_env(env, lease, UID1))
    lease.set_holder(f"pg-1/{UID1}")
    lease.down = True  # the pod is cut off from the API server
    set_role(standby, "primary")
    time.sleep(4)
    assert standby.in_recovery() is True and standby.proc.poll() is None
    assert "renewed, then promoting" not in standby.log_text()
    lease.down = False
    wait_until(lambda: writable(standby), timeout=30, what="the promotion once it can renew")


def test_a_standby_promoted_from_outside_while_cut_off_is_fenced_at_once(env, lease):
    # A late pg_promote (someone else's) reaches a standby that cannot read the Lease:
    # its agent never renewed for a writable server, so it fences it at its next round
    # instead of allowing it T seconds.
    primary = env.pod("pg-0").start("primary")
    rogue = env.pod("pg-1").start("replica", primary=primary, **instance_env(env, lease, UID1))
    lease.set_holder(f"pg-1/{UID1}")  # it was chosen once; the Lease may have moved since
    lease.down = True
    t0 = time.monotonic()
    # Asked without waiting: its agent may fence it between the promotion's end and
    # a waiting pg_promote's next look (every 0.1 s), which would fail this query.
    assert rogue.sql("SELECT pg_promote(wait => false)") == "t"
    assert rogue.wait_exit(timeout=30) == 5
    took = time.monotonic() - t0
    assert took < 1 + 1 + 5, f"fencing took {took:.1f}s"  # R + a request + the stop
    assert "the standby is writable though this agent asked no promotion" in rogue.log_text()
    assert rogue.try_sql("SELECT 1") is None


def test_a_standby_promoted_without_the_lease_is_fenced(env, lease):
    lease.set_holder(f"pg-0/{UID0}")
    primary = env.pod("pg-0").start("primary", **instance_env(env, lease, UID0))
    rogue = env.pod("pg-1").start("replica", primary=primary, **instance_env(env, lease, UID1))
    # Asked without waiting: its agent may fence it between the promotion's end and
    # a waiting pg_promote's next look (every 0.1 s), which would fail this query.
    assert rogue.sql("SELECT pg_promote(wait => false)") == "t"
    assert rogue.wait_exit(timeout=30) == 5
    assert "the standby is writable though this agent asked no promotion" in rogue.log_text()
    assert primary.proc.poll() is None and writable(primary)


def test_liveness_succeeds_while_preparing_then_follows_pg_isready(env, lease):
    p = env.pod("pg-0")
    envs = instance_env(env, lease, UID0)

    def live():
        e = p.process_env(None, **envs)
        return subprocess.run([instance_binary(), "instance", "--liveness"], env=e,
                              capture_output=True, text=True, timeout=30, **user_kwargs()).returncode

    p.start("primary", wait=False, **envs)
    wait_until(lambda: "the Lease names nobody: waiting before a writable start" in p.log_text(),
               timeout=30, what="waiting for the lease")
    assert live() == 0  # waiting on purpose: alive
    lease.set_holder(f"pg-0/{UID0}")
    p.wait_ready()
    wait_until(lambda: (p.env.sockets / f"lockstep-phase.{p.port}").read_text().strip() == "running",
               timeout=20, what="phase running")
    assert live() == 0
    pid = int((p.pgdata / "postmaster.pid").read_text().splitlines()[0])
    os.kill(pid, signal.SIGSTOP)  # hung: pg_isready gets no answer
    try:
        assert live() != 0
    finally:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass  # under load the manager may already have stopped the hung server


def test_without_a_lease_only_a_pod_serving_as_the_primary_stops_on_demoted(env):
    # Without a Lease (fencing off): a standby labelled demoted keeps following; a
    # primary labelled demoted stops cleanly, whether it started writable or was
    # promoted by its agent.
    old = env.pod("pg-0").start("primary")
    new = env.pod("pg-1").start("replica", primary=old)
    set_role(new, "demoted")
    set_role(old, "demoted")
    assert old.wait_exit(timeout=60) == 0
    assert "labelled demoted: stopping cleanly for the hand-over" in old.log_text()
    # A negative is watched for a window: 3 s is several agent rounds (R = 2 s).
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        assert new.proc.poll() is None and new.in_recovery() is True, new.log_tail()
        time.sleep(0.5)
    set_role(new, "primary")
    wait_until(lambda: writable(new), timeout=30, what="the agent to promote it")
    wait_until(lambda: "serving as the primary" in new.log_text(), timeout=30, what="the agent to serve")
    set_role(new, "demoted")  # now it served as the primary: a demotion
    assert new.wait_exit(timeout=60) == 0


def test_a_fenced_pod_restarting_as_a_standby_releases_the_lease(env, lease):
    lease.set_holder(f"pg-0/{UID0}")
    primary = env.pod("pg-0").start("primary", **instance_env(env, lease, UID0))
    standby = env.pod("pg-1").start("replica", primary=primary)  # without a Lease of its own
    lease.down = True
    assert primary.wait_exit(timeout=30) == 5
    lease.down = False
    # The operator meanwhile had pg-1 promoted (the Lease still names pg-0: it never
    # released it) and labelled pg-0 demoted.
    standby.set_role("primary")
    wait_until(lambda: writable(standby), timeout=30, what="pg-1 to be promoted by its agent")
    primary.start("demoted", primary=standby, **instance_env(env, lease, UID0))
    got = lease.get()
    assert got["metadata"]["annotations"]["lockstep.dev/released-by"] == f"pg-0/{UID0}"
    assert got["spec"].get("holderIdentity") in (None, "")
    assert primary.in_recovery() is True
