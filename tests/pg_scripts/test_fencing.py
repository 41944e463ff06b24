"""The pod side of fencing (issue 12, src/machines/postgres/scripts/README.md
"Fencing"): entrypoint.sh supervises postgres, renews the coordination Lease
while its server is writable, fences itself, starts as a primary only while
holding the Lease, releases it on a clean demotion; survey.sh; the liveness
command. Real PostgreSQL servers; the Lease endpoints of the API server are a
small local HTTP stand-in (LeaseServer) with the API server's semantics for
what the script uses: GET, and PUT with a resourceVersion precondition (409 on
a stale one), a bearer token. The same code runs against the real API server in
tests/e2e/postgres_real.rs."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from pg_harness import SUPER_PASSWORD, Env, wait_until

TOKEN = "test-token-not-a-secret-0123456789"
NS = "ns1"
LEASE = "pg-primary"
UID0 = "uid-0000"
UID1 = "uid-1111"


class LeaseServer:
    """The Lease endpoints of an API server, on loopback, in a thread."""

    def __init__(self):
        self.lock = threading.Lock()
        self.lease = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": LEASE, "namespace": NS, "resourceVersion": "1", "annotations": {}},
            "spec": {"holderIdentity": "", "leaseDurationSeconds": 15},
        }
        self.down = False  # requests hang until the client gives up
        self.requests: list[tuple[str, int]] = []
        self.renewals = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):  # quiet
                pass

            def _reply(self, code, obj):
                body = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _check(self):
                if server.down:
                    time.sleep(3)
                    return False
                if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                    self._reply(401, {"kind": "Status", "code": 401})
                    return False
                # kube-rs (lockstep instance) adds a query string to its writes.
                if self.path.split("?")[0] != f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/{LEASE}":
                    self._reply(404, {"kind": "Status", "code": 404})
                    return False
                return True

            def do_GET(self):
                ok = self._check()
                server.requests.append(("GET", 200 if ok else 0))
                if ok:
                    with server.lock:
                        self._reply(200, server.lease)

            def do_PUT(self):
                ok = self._check()
                if not ok:
                    server.requests.append(("PUT", 0))
                    return
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    if body["metadata"].get("resourceVersion") != server.lease["metadata"]["resourceVersion"]:
                        server.requests.append(("PUT", 409))
                        self._reply(409, {"kind": "Status", "code": 409, "reason": "Conflict"})
                        return
                    body["metadata"]["resourceVersion"] = str(int(body["metadata"]["resourceVersion"]) + 1)
                    if body["spec"].get("renewTime") != server.lease["spec"].get("renewTime"):
                        server.renewals += 1
                    server.lease = body
                    server.requests.append(("PUT", 200))
                    self._reply(200, server.lease)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def set_holder(self, holder: str):
        """What the operator does at a hand-over (a write that bumps the version)."""
        with self.lock:
            self.lease["spec"]["holderIdentity"] = holder
            self.lease["spec"]["renewTime"] = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
            rv = int(self.lease["metadata"]["resourceVersion"]) + 1
            self.lease["metadata"]["resourceVersion"] = str(rv)

    def drop_annotation(self, key: str):
        """What `kubectl annotate lease <name> <key>-` does."""
        with self.lock:
            self.lease["metadata"].setdefault("annotations", {}).pop(key, None)
            rv = int(self.lease["metadata"]["resourceVersion"]) + 1
            self.lease["metadata"]["resourceVersion"] = str(rv)

    def get(self) -> dict:
        with self.lock:
            return json.loads(json.dumps(self.lease))

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def lease():
    s = LeaseServer()
    yield s
    s.close()


def lease_env(env: Env, lease: LeaseServer, uid: str, **over) -> dict:
    token = env.base / "token"
    if not token.exists():
        token.write_text(TOKEN)
        token.chmod(0o644)
    e = dict(
        LOCKSTEP_LEASE_NAME=LEASE, POD_NAMESPACE=NS, POD_UID=uid, LOCKSTEP_API_URL=lease.url,
        LOCKSTEP_TOKEN_FILE=str(token), LOCKSTEP_LEASE_SECONDS="6", LOCKSTEP_FENCE_SECONDS="3",
        LOCKSTEP_RENEW_SECONDS="1",
    )
    e.update(over)
    return e


def set_role(pod, role: str):
    pod.set_role(role)


def writable(pod) -> bool:
    return pod.try_sql("SELECT NOT pg_is_in_recovery()") == "t"


def test_the_supervisor_forwards_sigterm_and_exits_with_postgres_code(env):
    p = env.pod("pg-0").start("primary")
    assert "postgres running (pid" in p.log_text()
    p.proc.send_signal(signal.SIGTERM)  # smart shutdown: no clients, so it stops
    assert p.wait_exit(timeout=60) == 0
    assert "received SIGTERM: forwarding it to postgres" in p.log_text()
    assert p.try_sql("SELECT 1") is None


def test_a_killed_postmaster_ends_the_container(env):
    p = env.pod("pg-0").start("primary")
    pid = int((p.pgdata / "postmaster.pid").read_text().splitlines()[0])
    os.kill(pid, signal.SIGKILL)
    code = p.wait_exit(timeout=30)
    assert code == 128 + signal.SIGKILL, p.log_tail()
    assert "postgres exited with code 137" in p.log_text()


def test_primary_waits_for_the_lease_before_it_starts_writable(env, lease):
    p = env.pod("pg-0")
    p.start("primary", wait=False, **lease_env(env, lease, UID0))
    wait_until(lambda: "is held by ''" in p.log_text(), timeout=30, what="waiting for the lease")
    # Not started: nothing listens, nothing was initialized.
    assert p.try_sql("SELECT 1") is None
    assert not (p.pgdata / "PG_VERSION").exists()
    lease.set_holder(f"pg-0/{UID0}")
    p.wait_ready()
    assert writable(p)
    assert "lease pg-primary held and renewed: starting as the primary" in p.log_text()
    # It keeps renewing while writable (renewTime changes, resourceVersion precondition holds).
    n = lease.renewals
    wait_until(lambda: lease.renewals >= n + 2, timeout=20, what="renewals")
    assert lease.get()["spec"]["holderIdentity"] == f"pg-0/{UID0}"


def test_a_pod_waiting_for_the_lease_rejoins_as_a_standby_when_relabelled(env, lease):
    primary = env.pod("pg-0")
    lease.set_holder(f"pg-0/{UID0}")
    primary.start("primary", **lease_env(env, lease, UID0))
    other = env.pod("pg-1")
    other.start("primary", primary=primary, wait=False, **lease_env(env, lease, UID1))
    wait_until(lambda: f"is held by 'pg-0/{UID0}'" in other.log_text(), timeout=30, what="waiting")
    assert other.try_sql("SELECT 1") is None
    set_role(other, "replica")
    other.wait_ready()
    assert other.in_recovery() is True
    assert "starting as a standby" in other.log_text()


def test_fences_when_the_lease_names_another_holder(env, lease):
    lease.set_holder(f"pg-0/{UID0}")
    p = env.pod("pg-0").start("primary", **lease_env(env, lease, UID0))
    assert writable(p)
    lease.set_holder(f"pg-1/{UID1}")
    t0 = time.monotonic()
    assert p.wait_exit(timeout=30) == 5
    took = time.monotonic() - t0
    assert took < 1 + 1 + 5, f"fencing took {took:.1f}s"  # R + a request + the stop
    log = p.log_text()
    assert f"FENCING: lease pg-primary is held by 'pg-1/{UID1}'" in log
    assert p.try_sql("SELECT 1") is None


def test_fences_within_t_when_the_api_server_is_unreachable(env, lease):
    lease.set_holder(f"pg-0/{UID0}")
    p = env.pod("pg-0").start("primary", **lease_env(env, lease, UID0))
    wait_until(lambda: lease.renewals >= 2, timeout=20, what="renewals")
    last_ok = time.monotonic()
    lease.down = True
    assert p.wait_exit(timeout=30) == 5
    took = time.monotonic() - last_ok
    # T = 3, R = 1, requests bounded to 1 s: fenced by T + R + 1 (+ the stop).
    assert took <= 3 + 1 + 1 + 5, f"fencing took {took:.1f}s after the last renewal"
    assert "FENCING: no lease renewal for more than 3s" in p.log_text()
    assert p.try_sql("SELECT 1") is None


def test_a_fenced_server_with_a_busy_backend_is_killed_with_its_children(env, lease):
    lease.set_holder(f"pg-0/{UID0}")
    p = env.pod("pg-0").start("primary", **lease_env(env, lease, UID0))
    p.sql("CREATE TABLE t (v int)")
    client = subprocess.Popen(
        [f"{os.environ.get('LOCKSTEP_PG_BIN', '') or p.env.base_env()['PG_BIN']}/psql", "-X", "-h", "127.0.0.1",
         "-p", str(p.port), "-U", "postgres", "-d", "postgres", "-c", "SELECT pg_sleep(60)"],
        env=dict(os.environ, PGPASSWORD=SUPER_PASSWORD), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        lease.set_holder("")
        assert p.wait_exit(timeout=30) == 5
        assert "FENCING: lease pg-primary is held by ''" in p.log_text()
        assert client.wait(timeout=15) != 0  # its session is gone
    finally:
        if client.poll() is None:
            client.kill()


def test_demotion_stops_cleanly_and_releases_the_lease(env, lease):
    lease.set_holder(f"pg-0/{UID0}")
    old = env.pod("pg-0").start("primary", **lease_env(env, lease, UID0))
    replica = env.pod("pg-1").start("replica", primary=old)
    old.sql("CREATE TABLE items (v text)")
    for i in range(50):
        old.sql(f"INSERT INTO items VALUES ('row-{i}')")
    set_role(old, "demoted")
    assert old.wait_exit(timeout=60) == 0
    log = old.log_text()
    assert "labelled demoted while writable: stopping cleanly" in log
    assert f"lease pg-primary released (lockstep.dev/released-by=pg-0/{UID0}, lockstep.dev/released-lsn=" in log
    got = lease.get()
    assert got["spec"]["holderIdentity"] == ""
    assert got["metadata"]["annotations"]["lockstep.dev/released-by"] == f"pg-0/{UID0}"
    # Its last WAL position (the shutdown checkpoint), for whoever promotes next.
    assert re.fullmatch(r"[0-9A-F]+/[0-9A-F]+", got["metadata"]["annotations"]["lockstep.dev/released-lsn"])
    # The clean stop sent every acknowledged commit to the standby.
    wait_until(lambda: replica.try_sql("SELECT count(*) FROM items") == "50", timeout=30, what="rows on the standby")


def test_a_standby_labelled_primary_promotes_itself_once_it_holds_the_lease(env, lease):
    lease.set_holder(f"pg-0/{UID0}")
    old = env.pod("pg-0").start("primary", **lease_env(env, lease, UID0))
    new = env.pod("pg-1").start("replica", primary=old, **lease_env(env, lease, UID1))
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
    assert "holding lease pg-primary: promoting this standby" in new.log_text()
    wait_until(lambda: lease.renewals >= n + 3, timeout=20, what="renewals by the promoted standby")
    assert new.proc.poll() is None and writable(new)
    assert new.sql("SELECT count(*) FROM items") == "1"
    # Past the old primary's last WAL, the new primary drops the annotation.
    assert "lockstep.dev/released-lsn" not in lease.get()["metadata"]["annotations"]


def missed_the_last_commit(env, lease):
    """A primary and a standby (both with the Lease agent); the standby is stopped (it
    misses what follows), the primary commits a row and is demoted: it stops cleanly and
    releases the Lease with its last position. Returns (old, new, that position)."""
    lease.set_holder(f"pg-0/{UID0}")
    old = env.pod("pg-0").start("primary", **lease_env(env, lease, UID0))
    new = env.pod("pg-1").start("replica", primary=old, **lease_env(env, lease, UID1))
    old.sql("CREATE TABLE items (v text)")
    wait_until(lambda: new.try_sql("SELECT count(*) FROM items") == "0", timeout=30, what="the table on the standby")
    new.stop()
    old.sql("INSERT INTO items VALUES ('acknowledged')")
    set_role(old, "demoted")
    assert old.wait_exit(timeout=60) == 0
    return old, new, lease.get()["metadata"]["annotations"]["lockstep.dev/released-lsn"]


def test_a_target_that_missed_the_old_primarys_last_wal_does_not_promote(env, lease):
    old, new, lsn = missed_the_last_commit(env, lease)
    new.start("replica", primary=old, **lease_env(env, lease, UID1))  # nobody to catch up from
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
    new.start("primary", primary=old, **lease_env(env, lease, UID1))
    assert new.in_recovery() is True
    assert "starting as a standby, promoted once it has received it" in new.log_text()
    assert lease.get()["spec"]["holderIdentity"] == f"pg-1/{UID1}"
    lease.drop_annotation("lockstep.dev/released-lsn")
    wait_until(lambda: writable(new), timeout=30, what="the promotion without it")


def test_a_standby_labelled_primary_does_not_promote_while_it_cannot_renew(env, lease):
    primary = env.pod("pg-0").start("primary")  # without a Lease of its own
    standby = env.pod("pg-1").start("replica", primary=primary, **lease_env(env, lease, UID1))
    lease.set_holder(f"pg-1/{UID1}")
    lease.down = True  # the pod is cut off from the API server
    set_role(standby, "primary")
    time.sleep(4)
    assert standby.in_recovery() is True and standby.proc.poll() is None
    assert "promoting this standby" not in standby.log_text()
    lease.down = False
    wait_until(lambda: writable(standby), timeout=30, what="the promotion once it can renew")


def test_a_standby_promoted_from_outside_while_cut_off_is_fenced_at_once(env, lease):
    # A late pg_promote (someone else's) reaches a standby that cannot read the Lease:
    # its agent never renewed for a writable server, so it fences it at its next round
    # instead of allowing it T seconds.
    primary = env.pod("pg-0").start("primary")
    rogue = env.pod("pg-1").start("replica", primary=primary, **lease_env(env, lease, UID1))
    lease.set_holder(f"pg-1/{UID1}")  # it was chosen once; the Lease may have moved since
    lease.down = True
    t0 = time.monotonic()
    assert rogue.sql("SELECT pg_promote(true, 30)") == "t"
    assert rogue.wait_exit(timeout=30) == 5
    took = time.monotonic() - t0
    assert took < 1 + 1 + 5, f"fencing took {took:.1f}s"  # R + a request + the stop
    assert "FENCING: writable without a lease renewal by this pod" in rogue.log_text()
    assert rogue.try_sql("SELECT 1") is None


def test_a_standby_promoted_without_the_lease_is_fenced(env, lease):
    lease.set_holder(f"pg-0/{UID0}")
    primary = env.pod("pg-0").start("primary", **lease_env(env, lease, UID0))
    rogue = env.pod("pg-1").start("replica", primary=primary, **lease_env(env, lease, UID1))
    assert rogue.sql("SELECT pg_promote(true, 30)") == "t"
    assert rogue.wait_exit(timeout=30) == 5
    assert f"FENCING: lease pg-primary is held by 'pg-0/{UID0}'" in rogue.log_text()
    assert primary.proc.poll() is None and writable(primary)


def test_liveness_succeeds_while_preparing_then_follows_pg_isready(env, lease):
    p = env.pod("pg-0")
    envs = lease_env(env, lease, UID0)

    def live():
        e = p.script_env("primary", None, **envs)
        return subprocess.run(["bash", str(env.scripts / "entrypoint.sh"), "--liveness"], env=e,
                              capture_output=True, text=True, timeout=30).returncode

    p.start("primary", wait=False, **envs)
    wait_until(lambda: "is held by ''" in p.log_text(), timeout=30, what="waiting for the lease")
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
        os.kill(pid, signal.SIGCONT)


def test_survey_reports_positions_and_omits_the_unreachable(env):
    primary = env.pod("pg-0").start("primary")
    a = env.pod("pg-1").start("replica", primary=primary)
    b = env.pod("pg-2").start("replica", primary=primary)
    primary.sql("CREATE TABLE items (v int)")
    primary.sql("INSERT INTO items SELECT generate_series(1, 1000)")
    wait_until(lambda: a.try_sql("SELECT count(*) FROM items") == "1000", what="replay on pg-1")
    wait_until(lambda: b.try_sql("SELECT count(*) FROM items") == "1000", what="replay on pg-2")
    b.sql("SELECT pg_wal_replay_pause()")
    primary.sql("INSERT INTO items SELECT generate_series(1, 1000)")
    wait_until(lambda: a.try_sql("SELECT count(*) FROM items") == "2000", what="replay on pg-1")
    term = env.sockets / "termination-log"  # writable by the postgres user
    hosts = f"pg-0=127.0.0.1:{primary.port} pg-1=127.0.0.1:{a.port} pg-2=127.0.0.1:{b.port} pg-9=127.0.0.9:1"
    r = env.run_script("survey.sh", SURVEY_HOSTS=hosts, POSTGRES_PASSWORD=SUPER_PASSWORD,
                       CONNECT_TIMEOUT_SECONDS=2, TERMINATION_LOG=str(term))
    assert r.returncode == 0, r.stderr
    assert SUPER_PASSWORD not in r.stdout + r.stderr
    out = json.loads(r.stdout.strip())
    assert len(r.stdout.strip().splitlines()) == 1
    assert json.loads(term.read_text()) == out
    assert sorted(out) == ["pg-0", "pg-1", "pg-2"]  # pg-9 did not answer: omitted
    assert out["pg-0"]["inRecovery"] is False and out["pg-0"]["receive"] == out["pg-0"]["replay"]
    assert out["pg-1"]["inRecovery"] is True and out["pg-2"]["inRecovery"] is True
    one, two = out["pg-1"], out["pg-2"]

    def lsn(s):
        hi, lo = s.split("/")
        return (int(hi, 16) << 32) + int(lo, 16)

    # pg-2's replay is paused: it replayed less than pg-1, while having received WAL.
    assert lsn(two["replay"]) < lsn(one["replay"])
    assert lsn(two["receive"]) > lsn(two["replay"])
    # Only the primary answering: no standby, exit 1 (the line is still printed).
    r = env.run_script("survey.sh", SURVEY_HOSTS=f"pg-0=127.0.0.1:{primary.port}",
                       POSTGRES_PASSWORD=SUPER_PASSWORD, TERMINATION_LOG=str(term))
    assert r.returncode == 1 and list(json.loads(r.stdout.strip())) == ["pg-0"]


def test_a_promote_target_labelled_demoted_keeps_running_an_old_primary_stops(env):
    # Without a Lease (fencing off): a server promoted from outside while labelled
    # demoted keeps running; only one that served as the primary stops on `demoted`.
    old = env.pod("pg-0").start("primary")
    new = env.pod("pg-1").start("replica", primary=old)
    set_role(new, "demoted")
    set_role(old, "demoted")
    assert old.wait_exit(timeout=60) == 0
    assert "labelled demoted while writable: stopping cleanly" in old.log_text()
    assert new.sql("SELECT pg_promote(true, 30)") == "t"
    time.sleep(3)  # several agent periods (R = 2 s): it must still be running
    assert new.proc.poll() is None and writable(new), new.log_tail()
    set_role(new, "primary")
    wait_until(lambda: "serving as the primary" in new.log_text(), timeout=30, what="the agent to see it")
    set_role(new, "demoted")  # now it served as the primary: a demotion
    assert new.wait_exit(timeout=60) == 0


def test_a_fenced_pod_restarting_as_a_standby_releases_the_lease(env, lease):
    lease.set_holder(f"pg-0/{UID0}")
    primary = env.pod("pg-0").start("primary", **lease_env(env, lease, UID0))
    standby = env.pod("pg-1").start("replica", primary=primary)
    lease.down = True
    assert primary.wait_exit(timeout=30) == 5
    lease.down = False
    # The operator meanwhile promoted pg-1 (the lease still names pg-0: it never
    # released it) and labelled pg-0 demoted.
    assert standby.sql("SELECT pg_promote(true, 30)") == "t"
    primary.start("demoted", primary=standby, **lease_env(env, lease, UID0))
    got = lease.get()
    assert got["metadata"]["annotations"]["lockstep.dev/released-by"] == f"pg-0/{UID0}"
    assert got["spec"]["holderIdentity"] == ""
    assert primary.in_recovery() is True
