"""A counting reverse proxy between the operator and the API server.

The operator's kubeconfig points at `https://127.0.0.1:<port>` (loopback): the proxy
serves TLS with a certificate of the cluster's CA, so the operator encrypts and decrypts
its traffic as it does against a real API server (a plain-HTTP proxy took the
TLS work, a good part of a watching operator's CPU, out of the operator's figure; `tls=False`
gives the old plain `http://`). The proxy forwards every request over TLS with the admin
client certificate and counts it by verb and resource before forwarding. Only the operator connects to it, so the
counts are the operator's requests and nobody else's (the API server's own
`apiserver_request_total` has no client or user-agent label, so it cannot tell the
operator apart from the controller-manager, the scheduler and KWOK).

Verbs follow the API server's audit vocabulary: get, list, watch, create, update,
patch, delete, deletecollection; a server-side apply (`application/apply-patch+yaml`)
is counted as `apply`. Resources carry their subresource (`distributeddbs/status`).
Watches are counted once, when they are opened; their responses are streamed.
"""

from __future__ import annotations

import http.client
import os
import ssl
import subprocess
import tempfile
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Optional
from urllib.parse import parse_qs, urlsplit

from kube import Cluster

HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "host",
    "content-length",
}

WRITE_VERBS = {"create", "update", "patch", "apply", "delete", "deletecollection"}


def classify(method: str, path: str, content_type: str = "") -> tuple[str, str]:
    """(verb, resource[/subresource]) of a request, as the API server would audit it."""
    url = urlsplit(path)
    query = parse_qs(url.query)
    parts = [p for p in url.path.split("/") if p]
    if not parts or parts[0] not in ("api", "apis"):
        return method.lower(), url.path
    # /api/v1/... or /apis/<group>/<version>/...
    rest = parts[2:] if parts[0] == "api" else parts[3:]
    if len(rest) >= 3 and rest[0] == "namespaces":
        rest = rest[2:]
    if not rest:
        return method.lower(), url.path  # discovery
    resource = rest[0]
    named = len(rest) > 1
    if len(rest) > 2:
        resource += "/" + rest[2]
    if method == "GET":
        watching = query.get("watch", [""])[0] in ("true", "1")
        verb = "watch" if watching else ("get" if named else "list")
    elif method == "POST":
        verb = "create"
    elif method == "PUT":
        verb = "update"
    elif method == "PATCH":
        verb = "apply" if "apply-patch" in content_type else "patch"
    elif method == "DELETE":
        verb = "delete" if named else "deletecollection"
    else:
        verb = method.lower()
    return verb, resource


class CountingProxy(ThreadingHTTPServer):
    """Forward to the cluster's API server and count requests by (verb, resource)."""

    daemon_threads = True

    def __init__(self, cluster: Cluster, port: int = 0, tls: bool = True):
        self.cluster = cluster
        self.counts: Counter = Counter()
        self.errors: Counter = Counter()
        self.lock = threading.Lock()
        self.tls: Optional[ssl.SSLContext] = server_context(cluster) if tls else None
        super().__init__(("127.0.0.1", port), Handler)
        self.thread = threading.Thread(target=self.serve_forever, name="proxy", daemon=True)

    def get_request(self):
        sock, addr = super().get_request()
        if self.tls is not None:
            # The handshake happens on the first read, in the connection's own thread.
            sock = self.tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return sock, addr

    def start(self) -> "CountingProxy":
        self.thread.start()
        return self

    @property
    def port(self) -> int:
        return self.server_address[1]

    def count(self, verb: str, resource: str) -> None:
        with self.lock:
            self.counts[(verb, resource)] += 1

    def failed(self, verb: str, resource: str, status: int) -> None:
        with self.lock:
            self.errors[(verb, resource, status)] += 1

    def snapshot(self) -> Counter:
        with self.lock:
            return Counter(self.counts)

    def error_snapshot(self) -> Counter:
        with self.lock:
            return Counter(self.errors)

    def kubeconfig(self) -> str:
        scheme = "https" if self.tls else "http"
        ca = f"    certificate-authority: {self.cluster.ca}\n" if self.tls else ""
        return (
            "apiVersion: v1\n"
            "kind: Config\n"
            "clusters:\n"
            "- name: bench\n"
            "  cluster:\n"
            f"    server: {scheme}://127.0.0.1:{self.port}\n"
            f"{ca}"
            "users:\n"
            "- name: bench\n"
            "  user: {}\n"
            "contexts:\n"
            "- name: bench\n"
            "  context:\n"
            "    cluster: bench\n"
            "    user: bench\n"
            "    namespace: default\n"
            "current-context: bench\n"
        )


class Handler(BaseHTTPRequestHandler):
    """One client connection; one upstream TLS connection, kept alive alongside it."""

    protocol_version = "HTTP/1.1"
    server: CountingProxy
    upstream: Optional[http.client.HTTPSConnection] = None

    def log_message(self, format, *args):  # noqa: A002 - the base class's signature
        pass

    def _read_body(self) -> Optional[bytes]:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    self.rfile.readline()
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else None

    def _forward(self) -> None:
        body = self._read_body()
        verb, resource = classify(self.command, self.path, self.headers.get("Content-Type", ""))
        self.server.count(verb, resource)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
        if body is not None:
            headers["Content-Length"] = str(len(body))
        for attempt in range(2):
            if self.upstream is None:
                self.upstream = self.server.cluster.connect(timeout=None)
            try:
                self.upstream.request(self.command, self.path, body=body, headers=headers)
                resp = self.upstream.getresponse()
                break
            except (OSError, http.client.HTTPException):
                self.upstream.close()
                self.upstream = None
                if attempt == 1:
                    self.send_error(502, "upstream unreachable")
                    self.close_connection = True
                    return
        if resp.status >= 400:
            self.server.failed(verb, resource, resp.status)
        self.send_response_only(resp.status, resp.reason)
        for k, v in resp.getheaders():
            if k.lower() not in HOP_BY_HOP:
                self.send_header(k, v)
        length = resp.getheader("Content-Length")
        try:
            if length is not None and not resp.chunked:
                data = resp.read()
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                self.wfile.flush()
            else:
                # Lists and watches: stream as they come.
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                while True:
                    data = resp.read1(65536)
                    if not data:
                        break
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
        except (OSError, http.client.HTTPException):
            # The operator closed a watch (or the upstream went away): drop both ends.
            if self.upstream is not None:
                self.upstream.close()
                self.upstream = None
            self.close_connection = True

    def finish(self) -> None:
        if self.upstream is not None:
            self.upstream.close()
            self.upstream = None
        super().finish()

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _forward


def server_context(cluster: Cluster) -> ssl.SSLContext:
    """A TLS server context for 127.0.0.1 with a key and certificate signed by the
    cluster's own CA (`pki/ca.key`), made once per control plane."""
    pki = os.path.dirname(cluster.ca)
    key, crt = os.path.join(pki, "bench-proxy.key"), os.path.join(pki, "bench-proxy.crt")
    if not os.path.exists(crt):
        with tempfile.TemporaryDirectory() as tmp:
            csr, ext = os.path.join(tmp, "proxy.csr"), os.path.join(tmp, "ext.cnf")
            with open(ext, "w", encoding="utf-8") as f:
                f.write("subjectAltName=IP:127.0.0.1\n")
            run = lambda *a: subprocess.run(a, check=True, capture_output=True)  # noqa: E731
            run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", csr,
                "-subj", "/CN=bench-proxy")
            run("openssl", "x509", "-req", "-in", csr, "-CA", cluster.ca, "-CAkey",
                os.path.join(pki, "ca.key"), "-CAcreateserial", "-out", crt, "-days", "7",
                "-extfile", ext)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(crt, key)
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx


def is_write(verb: str) -> bool:
    return verb in WRITE_VERBS
