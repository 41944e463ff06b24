"""A minimal Kubernetes API client for the benchmark (standard library only).

Talks to the local control plane of tools/cluster with the admin client certificate
from `<cluster dir>/pki`, and keeps watched collections in memory (list, then watch
from the list's resourceVersion, relisting on 410 Gone), so that the harness waits on
watch events with deadlines instead of polling.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import socket
import ssl
import threading
import time
from typing import Any, Callable, Optional


class ApiError(Exception):
    """The API server answered with an unexpected status."""

    def __init__(self, method: str, path: str, status: int, body: str):
        super().__init__(f"{method} {path}: HTTP {status}: {body[:300]}")
        self.status = status


class Cluster:
    """Where the cluster listens and how to authenticate as admin."""

    def __init__(self, cluster_dir: str):
        self.dir = cluster_dir
        # The API server's address as the cluster's kubeconfig names it: loopback, or the
        # node network's host address when the cluster has a real node.
        with open(os.path.join(cluster_dir, "kubeconfig"), encoding="utf-8") as f:
            server = re.search(r"server:\s*https://([^:/\s]+):(\d+)", f.read())
        if server is None:
            raise ValueError(f"no https server in {cluster_dir}/kubeconfig")
        self.host = server.group(1)
        self.port = int(server.group(2))
        pki = os.path.join(cluster_dir, "pki")
        self.ca = os.path.join(pki, "ca.crt")
        self.cert = os.path.join(pki, "admin.crt")
        self.key = os.path.join(pki, "admin.key")

    def ssl_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=self.ca)
        ctx.load_cert_chain(self.cert, self.key)
        return ctx

    def connect(self, timeout: Optional[float] = 60) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection(
            self.host, self.port, context=self.ssl_context(), timeout=timeout
        )

    def pid(self, component: str) -> Optional[int]:
        try:
            with open(os.path.join(self.dir, "pids", f"{component}.pid"), encoding="utf-8") as f:
                return int(f.read().strip())
        except (OSError, ValueError):
            return None


class Api:
    """Plain requests, one keep-alive connection per thread."""

    def __init__(self, cluster: Cluster):
        self.cluster = cluster
        self.local = threading.local()

    def _conn(self) -> http.client.HTTPSConnection:
        conn = getattr(self.local, "conn", None)
        if conn is None:
            conn = self.cluster.connect()
            self.local.conn = conn
        return conn

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        content_type: str = "application/json",
        ok: tuple = (200, 201, 202),
    ) -> Any:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = content_type
        for attempt in range(3):
            conn = self._conn()
            try:
                conn.request(method, path, body=data, headers=headers)
                resp = conn.getresponse()
                raw = resp.read()
            except (OSError, http.client.HTTPException):
                conn.close()
                self.local.conn = None
                if attempt == 2:
                    raise
                time.sleep(0.5)
                continue
            if resp.status not in ok:
                raise ApiError(method, path, resp.status, raw.decode(errors="replace"))
            return json.loads(raw) if raw else None
        return None


def condition(obj: dict, type_: str) -> Optional[str]:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == type_:
            return c.get("status")
    return None


class Store:
    """A watched collection kept in memory as `name -> summarize(object)`.

    `wait(pred, timeout)` returns once `pred(items)` holds (checked after every event),
    or False at the deadline.
    """

    def __init__(
        self,
        cluster: Cluster,
        path: str,
        summarize: Callable[[dict], Any],
        on_event: Optional[Callable[[dict], None]] = None,
    ):
        self.cluster = cluster
        self.path = path
        self.summarize = summarize
        self.on_event = on_event
        self.items: dict[str, Any] = {}
        self.cv = threading.Condition()
        self.stopped = False
        self.synced = threading.Event()
        self.error: Optional[str] = None
        self.thread = threading.Thread(target=self._run, name=f"watch {path}", daemon=True)
        self.thread.start()

    def _name(self, obj: dict) -> str:
        return obj["metadata"]["name"]

    def _run(self) -> None:
        rv = None
        while not self.stopped:
            try:
                conn = self.cluster.connect(timeout=None)
                if rv is None:
                    conn.request("GET", self.path, headers={"Accept": "application/json"})
                    resp = conn.getresponse()
                    body = json.loads(resp.read())
                    if resp.status != 200:
                        raise ApiError("GET", self.path, resp.status, json.dumps(body))
                    with self.cv:
                        self.items = {
                            self._name(o): self.summarize(o) for o in body.get("items") or []
                        }
                        self.cv.notify_all()
                    rv = body["metadata"]["resourceVersion"]
                    self.synced.set()
                sep = "&" if "?" in self.path else "?"
                conn.request(
                    "GET",
                    f"{self.path}{sep}watch=true&allowWatchBookmarks=true"
                    f"&timeoutSeconds=240&resourceVersion={rv}",
                    headers={"Accept": "application/json"},
                )
                resp = conn.getresponse()
                if resp.status != 200:
                    resp.read()
                    rv = None
                    continue
                while not self.stopped:
                    line = resp.readline()
                    if not line:
                        break
                    ev = json.loads(line)
                    kind, obj = ev.get("type"), ev.get("object") or {}
                    if kind == "ERROR":
                        rv = None  # 410 Gone or similar: relist
                        break
                    rv = obj.get("metadata", {}).get("resourceVersion", rv)
                    if kind == "BOOKMARK":
                        continue
                    with self.cv:
                        if kind == "DELETED":
                            self.items.pop(self._name(obj), None)
                        else:
                            self.items[self._name(obj)] = self.summarize(obj)
                        if self.on_event is not None:
                            self.on_event(obj)
                        self.cv.notify_all()
                conn.close()
            except (OSError, http.client.HTTPException, ValueError, ApiError) as e:
                self.error = str(e)
                rv = None
                time.sleep(0.5)

    def wait(self, pred: Callable[[dict], bool], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self.cv:
            while not pred(self.items):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.cv.wait(min(left, 1.0))
            return True

    def snapshot(self) -> dict:
        with self.cv:
            return dict(self.items)

    def stop(self) -> None:
        self.stopped = True


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port
