"""Harness that runs the PostgresCluster pods' agent and Job scripts for real.

Each "pod" is a directory under a per-session temp dir holding the data
directory, a fake downward-API labels file and a log file. `lockstep instance`
(the instance manager, PID 1 of the pod's container) runs in the background as
the `postgres` OS user (PostgreSQL refuses root), with postgres as its child.
The Job scripts (backup, restore) run as the Jobs run them. Everything listens on
127.0.0.1 on free ports. A moto S3 server runs on loopback with SigV4
signature checking switched on (INITIAL_NO_AUTH_ACTION_COUNT), so curl's
request signing is really verified.
"""

from __future__ import annotations

import atexit
import glob
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# A process started with SIGINT and SIGQUIT ignored (a background job of a
# non-interactive shell, `cmd &` in a script) passes that on to its children: the
# harness's "fast" stop (SIGINT) would then never reach a pod, and every stop would wait
# out its timeout. The suite's children get the default dispositions instead.
signal.signal(signal.SIGINT, signal.default_int_handler)
signal.signal(signal.SIGQUIT, signal.SIG_DFL)

SCRIPTS_SRC = REPO / "src" / "machines" / "postgres" / "scripts"
# Every script of the ConfigMap (the Jobs'), lib.sh included (the others source it).
SCRIPT_NAMES = tuple(sorted(p.name for p in SCRIPTS_SRC.glob("*.sh")))

# Passwords with quotes, backslashes and spaces exercise every quoting path
# (SQL literals, conninfo, postgresql.conf, curl config).
SUPERUSER = "postgres"
SUPER_PASSWORD = "s3cr'et\\ \"super pw"
REPL_USER = "replicator"
REPL_PASSWORD = "r3pl'ic\\ \"ation pw"
S3_SECRET_SENTINEL_LEN = 40

DEFAULT_TIMEOUT = 60.0

# `lockstep instance` (the instance manager every pod runs): the binary under test, built by `cargo build --bin lockstep` (LOCKSTEP_BIN overrides).
LOCKSTEP_BIN = os.environ.get("LOCKSTEP_BIN") or str(REPO / "target" / "debug" / "lockstep")
_instance_copy: "str | None" = None


def instance_binary() -> str:
    """LOCKSTEP_BIN copied once to a world-readable place: the `postgres` user may not
    reach the clone (under a 0700 home directory)."""
    global _instance_copy
    if _instance_copy is None:
        d = tempfile.mkdtemp(prefix="lsbin-", dir="/tmp")
        atexit.register(shutil.rmtree, d, ignore_errors=True)
        os.chmod(d, 0o755)
        _instance_copy = os.path.join(d, "lockstep")
        shutil.copy2(LOCKSTEP_BIN, _instance_copy)
        os.chmod(_instance_copy, 0o755)
    return _instance_copy


def find_pg_bin() -> str:
    env = os.environ.get("LOCKSTEP_PG_BIN")
    if env:
        return env
    cands = [d for d in glob.glob("/usr/lib/postgresql/*/bin") if os.path.exists(os.path.join(d, "pg_rewind"))]
    if not cands:
        pytest.exit("no PostgreSQL server binaries found; run tests/pg_scripts/setup.sh", returncode=2)
    return max(cands, key=lambda d: int(d.split("/")[-2]))


PG_BIN = find_pg_bin()
IS_ROOT = os.geteuid() == 0


def free_port() -> int:
    """A port free now. Under pytest-xdist each worker takes only ports that are its own
    (half the port, modulo the number of workers: Linux hands out odd ports to a bind
    of port 0), so two workers never pick the same one between the check and the
    server's bind."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if (port >> 1) % workers == worker:
            return port


class Fatal(Exception):
    """Raised inside a wait_until predicate to stop waiting at once."""


def wait_until(pred, timeout=DEFAULT_TIMEOUT, interval=0.2, what="condition"):
    """Polls pred() until it returns a truthy value or the deadline passes."""
    deadline = time.monotonic() + timeout
    last_exc = None
    while time.monotonic() < deadline:
        try:
            v = pred()
            if v:
                return v
        except Fatal:
            raise
        except Exception as e:  # noqa: BLE001 - report the last failure
            last_exc = e
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last error: {last_exc!r}")


def postgres_ids():
    pw = pwd.getpwnam("postgres")
    return pw.pw_uid, pw.pw_gid


def user_kwargs() -> dict:
    """subprocess kwargs that drop to the postgres user when running as root."""
    if not IS_ROOT:
        return {}
    return {"user": "postgres", "group": "postgres", "extra_groups": []}


def chown_postgres(path: Path):
    if IS_ROOT:
        uid, gid = postgres_ids()
        os.chown(path, uid, gid)


class Pod:
    """One PostgreSQL pod: data dir + labels file + `lockstep instance` process."""

    def __init__(self, env: "Env", name: str):
        self.env = env
        self.name = name
        self.dir = env.base / name
        self.dir.mkdir()
        self.dir.chmod(0o755)
        chown_postgres(self.dir)
        self.pgdata = self.dir / "pgdata"
        self.labels = self.dir / "labels"
        self.log = self.dir / "instance.log"
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    # -- process control ---------------------------------------------------
    def script_env(self, role: "str | None", primary: "Pod | None", **extra) -> dict:
        # role=None: the pod as the StatefulSet makes it, before the operator labels it.
        role_line = "" if role is None else f'lockstep.dev/role="{role}"\n'
        self.labels.write_text(
            'app.kubernetes.io/name="postgres"\n'
            f'lockstep.dev/cluster="{self.env.cluster}"\n'
            + role_line
            + 'statefulset.kubernetes.io/pod-name="x-0"\n'
        )
        self.labels.chmod(0o644)
        return self.process_env(primary, **extra)

    def process_env(self, primary: "Pod | None" = None, **extra) -> dict:
        """The container's environment, without touching its labels file (which a pod's
        running manager reads)."""
        env = self.env.base_env()
        env.update(
            PGDATA=str(self.pgdata),
            PGPORT=str(self.port),
            LOCKSTEP_ROLE_FILE=str(self.labels),
            LISTEN_ADDRESSES="127.0.0.1",
            PG_SOCKET_DIR=str(self.env.sockets),
            POSTGRES_USER=SUPERUSER,
            POSTGRES_PASSWORD=SUPER_PASSWORD,
            REPLICATION_USER=REPL_USER,
            REPLICATION_PASSWORD=REPL_PASSWORD,
            POD_NAME=self.name,
            PRIMARY_WAIT_SECONDS="60",
            RETRY_INTERVAL_SECONDS="1",
            WAL_KEEP_SIZE="64MB",
            # 1 MB WAL segments keep each test instance ~10x smaller on disk.
            INITDB_ARGS="--encoding=UTF8 --locale=C --data-checksums --wal-segsize=1",
        )
        if primary is not None:
            env.update(PRIMARY_HOST="127.0.0.1", PRIMARY_PORT=str(primary.port))
        env.update({k: str(v) for k, v in extra.items()})
        return env

    def start(self, role: "str | None", primary: "Pod | None" = None, wait=True, pid1=False, **extra):
        """Runs `lockstep instance` (LOCKSTEP_BIN), as the pod's container does.

        pid1: as PID 1 of a PID namespace of its own, as in a container (root only):
        `self.proc` is then `unshare`, whose one child is the namespace's PID 1."""
        assert self.proc is None or self.proc.poll() is not None, f"{self.name} already running"
        env = self.script_env(role, primary, **extra)
        command = [instance_binary(), "instance"]
        run_as = user_kwargs()
        if pid1:
            assert IS_ROOT, "a PID namespace of its own needs root (as CI runs these tests)"
            uid, gid = postgres_ids()
            command = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child=SIGKILL",
                       "setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", *command]
            run_as = {}
        with open(self.log, "ab") as logf:
            logf.write(f"\n===== start as {role} =====\n".encode())
            logf.flush()
            self.proc = subprocess.Popen(
                command,
                env=env,
                cwd=self.dir,
                stdin=subprocess.DEVNULL,
                stdout=logf,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                **run_as,
            )
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, timeout=DEFAULT_TIMEOUT * 2):
        def ready():
            if self.proc.poll() is not None:
                raise Fatal(f"{self.name} instance manager exited with {self.proc.returncode}:\n{self.log_tail()}")
            return self.try_sql("SELECT 1") == "1"

        try:
            wait_until(ready, timeout=timeout, what=f"{self.name} to accept connections")
        except (AssertionError, Fatal) as e:
            raise AssertionError(f"{e}\n--- log of {self.name} ---\n{self.log_tail()}") from None

    def wait_exit(self, timeout=DEFAULT_TIMEOUT * 2) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{self.name} did not exit in {timeout}s:\n{self.log_tail()}") from None

    def set_role(self, role: str):
        """What the kubelet does to the downward-API file when the role label changes."""
        text = self.labels.read_text()
        lines = [l for l in text.splitlines() if not l.startswith("lockstep.dev/role=")]
        lines.append(f'lockstep.dev/role="{role}"')
        tmp = self.labels.with_suffix(".tmp")
        tmp.write_text("\n".join(lines) + "\n")
        tmp.chmod(0o644)
        os.replace(tmp, self.labels)

    def stop(self, mode="fast", timeout=DEFAULT_TIMEOUT):
        """fast = SIGINT (clean shutdown), immediate = SIGQUIT (crash-like)."""
        if self.proc is not None and self.proc.poll() is None:
            sig = {"fast": signal.SIGINT, "immediate": signal.SIGQUIT, "smart": signal.SIGTERM}[mode]
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        self._kill_leftover_postmaster()

    def _kill_leftover_postmaster(self):
        pidfile = self.pgdata / "postmaster.pid"
        try:
            pid = int(pidfile.read_text().splitlines()[0])
        except (OSError, ValueError, IndexError):
            return
        try:
            os.kill(pid, 0)
        except OSError:
            return
        subprocess.run(
            [f"{PG_BIN}/pg_ctl", "-D", str(self.pgdata), "-m", "immediate", "-w", "-t", "30", "stop"],
            cwd=self.dir, capture_output=True, timeout=40, **user_kwargs(),
        )

    def log_text(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, n=60) -> str:
        return "\n".join(self.log_text().splitlines()[-n:])

    # -- SQL -------------------------------------------------------------------
    def psql(self, sql: str, db="postgres", user=SUPERUSER, password=SUPER_PASSWORD, timeout=30):
        env = dict(os.environ, PGPASSWORD=password, PGCONNECT_TIMEOUT="5")
        return subprocess.run(
            [f"{PG_BIN}/psql", "-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1",
             "-h", "127.0.0.1", "-p", str(self.port), "-U", user, "-d", db, "-c", sql],
            env=env, capture_output=True, text=True, timeout=timeout,
        )

    def sql(self, sql: str, **kw) -> str:
        r = self.psql(sql, **kw)
        if r.returncode != 0:
            raise RuntimeError(f"psql on {self.name} failed: {r.stderr.strip()}")
        return r.stdout.strip()

    def try_sql(self, sql: str, **kw):
        r = self.psql(sql, **kw)
        return r.stdout.strip() if r.returncode == 0 else None

    def in_recovery(self) -> bool:
        return self.sql("SELECT pg_is_in_recovery()") == "t"

    def wait_for_row(self, table: str, value: str, timeout=DEFAULT_TIMEOUT):
        wait_until(
            lambda: self.try_sql(f"SELECT count(*) FROM {table} WHERE v = '{value}'") == "1",
            timeout=timeout, what=f"row {value!r} on {self.name}",
        )


class Forwarder:
    """A TCP forwarder on a port of its own, in front of one server at a time: what a
    Service (`<cluster>-rw`) is to the pods. `point_at` moves it to another server and
    drops the connections it carries, as a Service's endpoints change in a failover."""

    def __init__(self, port: int):
        self.port = free_port()
        self.target = port
        self.conns: list[socket.socket] = []
        self.lock = threading.Lock()
        self.server = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._accept, daemon=True).start()

    def point_at(self, port: int):
        with self.lock:
            self.target = port
            conns, self.conns = self.conns, []
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            c.close()

    def close(self):
        self.server.close()
        self.point_at(self.target)

    def _accept(self):
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target), timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self.lock:
                self.conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket):
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        for c in (src, dst):
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class Env:
    """Per-test environment: a temp base dir, scripts 'ConfigMap', pods."""

    def __init__(self, base: Path, s3: "MotoS3 | None"):
        self.base = base
        self.s3 = s3
        self.cluster = "pg-test"
        self.scripts = base / "scripts"  # like the mounted ConfigMap
        self.scripts.mkdir()
        for n in SCRIPT_NAMES:
            shutil.copy(SCRIPTS_SRC / n, self.scripts / n)
            (self.scripts / n).chmod(0o755)
        self.sockets = base / "sockets"
        self.sockets.mkdir()
        self.sockets.chmod(0o755)
        chown_postgres(self.sockets)
        self.pods: list[Pod] = []

    def pod(self, name: str) -> Pod:
        p = Pod(self, name)
        self.pods.append(p)
        return p

    def base_env(self) -> dict:
        env = {
            "PATH": f"{PG_BIN}:/usr/local/bin:/usr/bin:/bin",
            "PG_BIN": PG_BIN,
            "HOME": str(self.base),
            "LANG": "C.UTF-8",
            "TMPDIR": str(self.base / "tmp"),
        }
        tmp = self.base / "tmp"
        if not tmp.exists():
            tmp.mkdir()
            tmp.chmod(0o1777)
        return env

    def run_script(self, name: str, timeout=DEFAULT_TIMEOUT * 2, as_postgres=True, **env_vars):
        env = self.base_env()
        env.update({k: str(v) for k, v in env_vars.items() if v is not None})
        kw = user_kwargs() if as_postgres else {}
        return subprocess.run(
            ["bash", str(self.scripts / name)], env=env, cwd=self.base,
            capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, **kw,
        )

    def start_script(self, name: str, log: Path, **env_vars) -> subprocess.Popen:
        """Like run_script, in the background: stdout and stderr go to `log`."""
        env = self.base_env()
        env.update({k: str(v) for k, v in env_vars.items() if v is not None})
        with open(log, "wb") as out:
            return subprocess.Popen(
                ["bash", str(self.scripts / name)], env=env, cwd=self.base,
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, **user_kwargs(),
            )

    def s3_env(self, **over) -> dict:
        env = {
            "S3_ENDPOINT": self.s3.endpoint,
            "S3_BUCKET": self.s3.bucket,
            "S3_PREFIX": "backups/nightly",
            "S3_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": self.s3.access_key,
            "AWS_SECRET_ACCESS_KEY": self.s3.secret_key,
        }
        env.update(over)
        return env

    def close(self):
        for p in reversed(self.pods):
            try:
                p.stop(timeout=30)
            except Exception:  # noqa: BLE001 - best effort cleanup
                if p.proc and p.proc.poll() is None:
                    os.killpg(p.proc.pid, signal.SIGKILL)


class MotoS3:
    """A moto S3 server on loopback with signature checking enforced."""

    def __init__(self, workdir: Path):
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.bucket = "lockstep-backups"
        self.log = open(workdir / "moto.log", "wb")
        env = dict(os.environ)
        # The first 3 requests (IAM setup below) run unauthenticated; every
        # later request must carry a valid SigV4 signature of an IAM key.
        env["INITIAL_NO_AUTH_ACTION_COUNT"] = "3"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
        )

        def up():
            if self.proc.poll() is not None:
                raise Fatal("moto_server exited; see moto.log")
            with urllib.request.urlopen(f"{self.endpoint}/moto-api/", timeout=2) as r:
                return r.status == 200

        wait_until(up, timeout=60, what="moto server")
        import boto3

        kw = dict(endpoint_url=self.endpoint, region_name="us-east-1")
        iam = boto3.client("iam", aws_access_key_id="setup", aws_secret_access_key="setup", **kw)
        iam.create_user(UserName="lockstep-backup")
        iam.put_user_policy(
            UserName="lockstep-backup", PolicyName="s3",
            PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": [
                {"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}),
        )
        key = iam.create_access_key(UserName="lockstep-backup")["AccessKey"]
        self.access_key = key["AccessKeyId"]
        self.secret_key = key["SecretAccessKey"]
        self.client = boto3.client(
            "s3", aws_access_key_id=self.access_key, aws_secret_access_key=self.secret_key, **kw)
        self.client.create_bucket(Bucket=self.bucket)

    def close(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        self.log.close()
