"""A stand-in for the Lease endpoints of an API server, and what points `lockstep
instance` at it (a kubeconfig and the Lease settings). Shared by test_fencing.py and
test_instance.py: the API server's semantics for what the manager uses, GET, and PUT
with a resourceVersion precondition (409 on a stale one), a bearer token. The same
code runs against the real API server in tests/e2e/postgres_real.rs."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOKEN = "test-token-not-a-secret-0123456789"
NS = "ns1"
LEASE = "pg-primary"
UID0 = "uid-0000"
UID1 = "uid-1111"
UID2 = "uid-2222"
UID3 = "uid-3333"


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
        self.renewed_at: list[float] = []  # time.monotonic() of each renewal
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
                        server.renewed_at.append(time.monotonic())
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

    def annotate(self, key: str, value: str):
        """What `kubectl annotate lease <name> <key>=<value>` does (the operator asks a
        failover's survey so)."""
        with self.lock:
            self.lease["metadata"].setdefault("annotations", {})[key] = value
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


def instance_env(env, lease: LeaseServer, uid: str, **over) -> dict:
    """The Lease settings, and a kubeconfig naming the stand-in API server and token."""
    kubeconfig = env.base / "kubeconfig"
    if not kubeconfig.exists():
        kubeconfig.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "t",
            "clusters": [{"name": "t", "cluster": {"server": lease.url}}],
            "users": [{"name": "t", "user": {"token": TOKEN}}],
            "contexts": [{"name": "t", "context": {"cluster": "t", "user": "t", "namespace": NS}}],
        }))
        kubeconfig.chmod(0o644)
    e = dict(
        KUBECONFIG=str(kubeconfig), LOCKSTEP_LEASE_NAME=LEASE, POD_NAMESPACE=NS, POD_UID=uid,
        # T - G (the agent's immediate-stop grace, 2 s) leaves room for several rounds of R.
        LOCKSTEP_LEASE_SECONDS="10", LOCKSTEP_FENCE_SECONDS="5", LOCKSTEP_RENEW_SECONDS="1",
    )
    e.update(over)
    return e


def writable(pod) -> bool:
    """Whether the pod's server answers and accepts writes."""
    return pod.try_sql("SELECT NOT pg_is_in_recovery()") == "t"
