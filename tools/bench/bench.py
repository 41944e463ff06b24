#!/usr/bin/env python3
"""`make bench`: Lockstep at scale on the local control plane, and one upgrade against
the floor. See tools/bench/README.md for what is measured and how to read it.

Standard library only. Every wait is on a watch, with a deadline.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from kube import Api, ApiError, Cluster, Store, condition, free_port  # noqa: E402
from proxy import CountingProxy, is_write  # noqa: E402

NS = "default"
DDB_PATH = f"/apis/lockstep.dev/v1alpha1/namespaces/{NS}/distributeddbs"
STS_PATH = f"/apis/apps/v1/namespaces/{NS}/statefulsets"
POD_PATH = f"/api/v1/namespaces/{NS}/pods"
IMAGE_FROM = "registry.example/distributeddb:1.4"
IMAGE_TO = "registry.example/distributeddb:1.5"
TICKS = os.sysconf("SC_CLK_TCK")
PODS_PER_NODE = 250


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------ /proc


def cpu_seconds(pid: Optional[int]) -> float:
    """utime + stime of a live process, in seconds (0 if it is gone)."""
    if pid is None:
        return 0.0
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    # After "pid (comm)": state is field 3, utime 14, stime 15 (1-based).
    return (int(fields[11]) + int(fields[12])) / TICKS


def status_kib(pid: int, key: str) -> Optional[int]:
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


class Sampler:
    """Samples the operator's VmRSS every `period` s; tracks the peak since `reset`."""

    def __init__(self, period: float = 0.25):
        self.period = period
        self.pid: Optional[int] = None
        self.peak = 0
        self.lock = threading.Lock()
        threading.Thread(target=self._run, name="rss sampler", daemon=True).start()

    def _run(self) -> None:
        while True:
            pid = self.pid
            if pid is not None:
                rss = status_kib(pid, "VmRSS")
                if rss is not None:
                    with self.lock:
                        self.peak = max(self.peak, rss)
            time.sleep(self.period)

    def reset(self) -> None:
        with self.lock:
            self.peak = 0

    def take_peak(self) -> int:
        with self.lock:
            return self.peak


# ------------------------------------------------------------------ the operator


class Operator:
    """`lockstep run --machines distributeddb` as a child process, through the proxy."""

    def __init__(self, binary: str, kubeconfig: str, log_path: str, resync: int):
        self.binary = binary
        self.kubeconfig = kubeconfig
        self.log_path = log_path
        self.resync = resync
        self.proc: Optional[subprocess.Popen] = None
        self.metrics_port = 0

    def start(self) -> None:
        self.metrics_port = free_port()
        logf = open(self.log_path, "ab")
        env = dict(os.environ)
        env.pop("KUBECONFIG", None)
        self.proc = subprocess.Popen(
            [
                self.binary,
                "run",
                "--machines",
                "distributeddb",
                "--kubeconfig",
                self.kubeconfig,
                "--metrics-addr",
                f"127.0.0.1:{self.metrics_port}",
                "--resync-period",
                str(self.resync),
            ],
            stdout=logf,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
        )
        logf.close()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the operator exited ({self.proc.returncode}); see {self.log_path}")
            if self.metrics() is not None:
                return
            time.sleep(0.2)
        raise RuntimeError(f"the operator's /metrics did not answer in 60 s; see {self.log_path}")

    @property
    def pid(self) -> Optional[int]:
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None

    def metrics(self) -> Optional[dict[str, float]]:
        """The operator's /metrics, as `series -> value` (None if it does not answer)."""
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5
            ) as r:
                text = r.read().decode()
        except OSError:
            return None
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                series, _, value = line.rpartition(" ")
                try:
                    out[series] = float(value)
                except ValueError:
                    pass
        return out

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)


def metric_sum(metrics: Optional[dict[str, float]], prefix: str) -> float:
    return sum(v for k, v in (metrics or {}).items() if k.startswith(prefix))


def reconciles(m: Optional[dict[str, float]]) -> float:
    return metric_sum(m, "lockstep_reconciles_total{")


def transitions(m: Optional[dict[str, float]]) -> float:
    return metric_sum(m, "lockstep_transitions_total{")


TRIGGER_SERIES = "lockstep_reconcile_triggers_total{"


def by_trigger(m: Optional[dict[str, float]]) -> dict[str, float]:
    """Reconciles by what woke them (`lockstep_reconcile_triggers_total`, one per
    reconcile, under the first trigger since the previous one): `object`, an owned kind
    (`pod`, `statefulset`, ...), `requeue`, `retry`, `resync`. Empty for an operator
    without the metric (older operators)."""
    out: dict[str, float] = {}
    for series, value in (m or {}).items():
        if series.startswith(TRIGGER_SERIES):
            found = re.search(r'trigger="([^"]*)"', series)
            if found:
                out[found.group(1)] = out.get(found.group(1), 0.0) + value
    return out


# ------------------------------------------------------------------ the cluster


class ControlPlane:
    """tools/cluster/up.sh and down.sh on a state dir of the benchmark's own."""

    def __init__(self, repo: str, cluster_dir: str, nodes: int):
        self.repo = repo
        self.dir = cluster_dir
        self.nodes = nodes

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["LOCKSTEP_CLUSTER_DIR"] = self.dir
        env["LOCKSTEP_KWOK_NODES"] = str(self.nodes)
        # Scale runs on KWOK nodes only; the real node (on by default) costs memory and
        # CPU the operator's figures must not share.
        env.setdefault("LOCKSTEP_REAL_NODE", "0")
        return env

    def up(self) -> Cluster:
        log(f"control plane up: {self.nodes} KWOK nodes in {self.dir}")
        subprocess.run([f"{self.repo}/tools/cluster/up.sh"], env=self.env(), check=True)
        cluster = Cluster(self.dir)
        kubectl = os.path.join(self.dir, "bin", "kubectl")
        subprocess.run(
            [kubectl, f"--kubeconfig={self.dir}/kubeconfig", "apply", "--server-side",
             "-f", f"{self.repo}/crds/distributeddbs.lockstep.dev.yaml"],
            check=True, stdout=subprocess.DEVNULL,
        )
        subprocess.run(
            [kubectl, f"--kubeconfig={self.dir}/kubeconfig", "wait", "--for=condition=Established",
             "--timeout=60s", "crd/distributeddbs.lockstep.dev"],
            check=True, stdout=subprocess.DEVNULL,
        )
        return cluster

    def down(self) -> None:
        subprocess.run([f"{self.repo}/tools/cluster/down.sh"], env=self.env(), check=False)


# ------------------------------------------------------------------ objects


def ddb(name: str, image: str, annotations: Optional[dict] = None) -> dict:
    spec: dict[str, Any] = {"replicas": 3, "image": image, "storage": {"size": "1Gi"}}
    if annotations:
        spec["podAnnotations"] = annotations
    return {
        "apiVersion": "lockstep.dev/v1alpha1",
        "kind": "DistributedDB",
        "metadata": {"name": name},
        "spec": spec,
    }


def ddb_summary(obj: dict) -> tuple:
    """(Ready=True, status.version, observedGeneration == generation)."""
    status = obj.get("status") or {}
    return (
        condition(obj, "Ready") == "True",
        status.get("version"),
        status.get("observedGeneration") == obj["metadata"].get("generation"),
    )


def ready_at(image: str):
    return lambda s: s[0] and s[1] == image and s[2]


def count(items: dict, pred) -> int:
    return sum(1 for s in items.values() if pred(s))


def floor_sts(name: str, image: str, annotations: dict) -> dict:
    """A plain OnDelete StatefulSet shaped like the one Lockstep renders."""
    labels = {"bench.lockstep.dev/floor": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": 3,
            "serviceName": name,
            "podManagementPolicy": "Parallel",
            "updateStrategy": {"type": "OnDelete"},
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels, "annotations": annotations},
                "spec": {
                    "containers": [
                        {
                            "name": "db",
                            "image": image,
                            "volumeMounts": [{"name": "data", "mountPath": "/var/lib/data"}],
                        }
                    ]
                },
            },
            "volumeClaimTemplates": [
                {
                    "metadata": {"name": "data"},
                    "spec": {
                        "accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": "1Gi"}},
                    },
                }
            ],
        },
    }


def pod_summary(obj: dict) -> tuple:
    """(uid, image of container db, Ready=True, terminating)."""
    spec = obj.get("spec") or {}
    image = next((c.get("image") for c in spec.get("containers") or [] if c.get("name") == "db"), None)
    return (
        obj["metadata"].get("uid"),
        image,
        condition(obj, "Ready") == "True",
        obj["metadata"].get("deletionTimestamp") is not None,
    )


class Downtime:
    """The most pods of one set (`<prefix>-0..2`) seen not serving at once, while armed."""

    def __init__(self):
        self.prefix: Optional[str] = None
        self.ready: dict[str, bool] = {}
        self.max_down = 0

    def arm(self, prefix: str, pods: dict) -> None:
        self.prefix = prefix
        self.ready = {
            n: (s[2] and not s[3]) for n, s in pods.items() if n.rsplit("-", 1)[0] == prefix
        }
        self.max_down = 3 - sum(self.ready.values())

    def disarm(self) -> int:
        self.prefix = None
        return self.max_down

    def on_event(self, obj: dict) -> None:
        name = obj["metadata"]["name"]
        if self.prefix is None or name.rsplit("-", 1)[0] != self.prefix:
            return
        s = pod_summary(obj)
        gone = obj["metadata"].get("deletionTimestamp") is not None
        self.ready[name] = s[2] and not gone
        self.max_down = max(self.max_down, 3 - sum(self.ready.values()))


class StatusBudget:
    """The status-write budget, per phase: the operator's status writes
    against its transitions and the readiness changes the status must follow.

    A readiness change is a change, for one DistributedDB, of (pods not terminating,
    of those Ready): what `status.replicas` and `status.readyReplicas` follow in every
    state. It is counted from a pod watch as `tests/e2e/budget.rs` counts it; the bound
    is status writes <= first writes (one per object created) + transitions +
    readiness changes. Pods relisted after a broken watch are not compared (rare)."""

    def __init__(self):
        self.pods: dict[str, tuple[bool, bool]] = {}
        self.last: dict[str, tuple[int, int]] = {}
        self.changes = 0
        self.store: Optional[Store] = None

    def watch(self, cluster: Cluster) -> "StatusBudget":
        self.store = Store(cluster, POD_PATH, pod_summary, on_event=self.on_event)
        self.store.synced.wait(30)
        return self

    def on_event(self, obj: dict) -> None:
        # Called by the store's thread with its lock held, after it applied the event.
        name = obj["metadata"]["name"]
        db = name.rsplit("-", 1)[0]
        if self.store is not None and name not in self.store.items:
            self.pods.pop(name, None)
        else:
            live = obj["metadata"].get("deletionTimestamp") is None
            self.pods[name] = (live, live and condition(obj, "Ready") == "True")
        of_db = [v for n, v in self.pods.items() if n.rsplit("-", 1)[0] == db]
        now = (sum(1 for live, _ in of_db if live), sum(1 for _, ready in of_db if ready))
        if now != self.last.get(db, (0, 0)):
            self.changes += 1
        self.last[db] = now

    def begin(self) -> int:
        if self.store is None:
            return 0
        with self.store.cv:
            return self.changes

    def end(self, start: int, reqs: Counter, transitions: int, first_writes: int, n: int) -> dict:
        """The phase's figures, for its result: status writes, the changes since
        `start`, and the bound they are held to."""
        if self.store is None:
            return {}
        with self.store.cv:
            changes = self.changes - start
        writes = sum(
            c for (verb, resource), c in reqs.items()
            if resource == "distributeddbs/status" and is_write(verb)
        )
        bound = first_writes + transitions + changes
        return {
            "status_writes": writes,
            "readiness_changes": changes,
            "status_write_bound": bound,
            "status_writes_per_cluster": round(writes / n, 2),
            "status_write_bound_per_cluster": round(bound / n, 2),
            "status_write_bound_holds": writes <= bound,
        }

    def stop(self) -> None:
        if self.store is not None:
            self.store.stop()


# ------------------------------------------------------------------ the floor


def floor_trials(args, cluster: Cluster, api: Api, operator: Operator) -> dict:
    """Interleaved: the floor (this script replacing pods of a plain OnDelete
    StatefulSet, one at a time, each as soon as the previous is Ready) and Lockstep (an
    image change of a DistributedDB), each on fresh objects."""
    annotations = {
        "lockstep.dev/kwok-ready-delay-ms": str(args.ready_delay_ms),
        "lockstep.dev/kwok-ready-jitter-ms": "0",
    }
    downtime = Downtime()
    pods = Store(cluster, POD_PATH, pod_summary, downtime.on_event)
    ddbs = Store(cluster, DDB_PATH, ddb_summary)
    stss = Store(
        cluster,
        STS_PATH,
        lambda o: (
            (o.get("status") or {}).get("observedGeneration") == o["metadata"].get("generation"),
            (o.get("status") or {}).get("updateRevision"),
            (o.get("status") or {}).get("currentRevision"),
        ),
    )
    for s in (pods, ddbs, stss):
        s.synced.wait(30)
    deadline = 120 + 10 * args.ready_delay_ms / 1000
    floor_s, lockstep_s, floor_down, lockstep_down = [], [], [], []

    def pods_ready(prefix: str, image: str):
        def pred(items: dict) -> bool:
            return all(
                (s := items.get(f"{prefix}-{i}")) is not None and s[1] == image and s[2] and not s[3]
                for i in range(3)
            )
        return pred

    for trial in range(args.floor_trials):
        # ---- the floor
        name = f"floor-{trial}"
        api.request("POST", STS_PATH, floor_sts(name, IMAGE_FROM, annotations))
        if not pods.wait(pods_ready(name, IMAGE_FROM), deadline):
            raise RuntimeError(f"{name}: pods not Ready at {IMAGE_FROM} within {deadline}s")
        downtime.arm(name, pods.snapshot())
        t0 = time.monotonic()
        api.request(
            "PATCH",
            f"{STS_PATH}/{name}",
            {"spec": {"template": {"spec": {"containers": [{"name": "db", "image": IMAGE_TO}]}}}},
            content_type="application/strategic-merge-patch+json",
        )
        # A pod deleted before the controller has seen the new template comes back old.
        if not stss.wait(
            lambda items: (s := items.get(name)) is not None and s[0] and s[1] != s[2], deadline
        ):
            raise RuntimeError(f"{name}: the StatefulSet controller did not see the new template")
        for ordinal in (2, 1, 0):
            pod = f"{name}-{ordinal}"
            uid = pods.snapshot()[pod][0]
            api.request(
                "DELETE",
                f"{POD_PATH}/{pod}",
                {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": uid}},
            )
            if not pods.wait(
                lambda items: (s := items.get(pod)) is not None
                and s[0] != uid and s[1] == IMAGE_TO and s[2] and not s[3],
                deadline,
            ):
                raise RuntimeError(f"{pod}: not replaced and Ready within {deadline}s")
        floor_s.append(time.monotonic() - t0)
        floor_down.append(downtime.disarm())
        log(f"floor trial {trial}: {floor_s[-1]:.2f} s, at most {floor_down[-1]} pod(s) down")
        api.request("DELETE", f"{STS_PATH}/{name}", ok=(200, 202, 404))

        # ---- Lockstep
        name = f"lockstep-{trial}"
        api.request("POST", DDB_PATH, ddb(name, IMAGE_FROM, annotations))
        if not ddbs.wait(lambda items: name in items and ready_at(IMAGE_FROM)(items[name]), deadline):
            raise RuntimeError(f"{name}: not Ready at {IMAGE_FROM} within {deadline}s")
        # Ready is written by the operator once the pods are; wait for the pods too, so
        # that both runs start from three serving pods.
        pods.wait(pods_ready(name, IMAGE_FROM), deadline)
        downtime.arm(name, pods.snapshot())
        t0 = time.monotonic()
        api.request(
            "PATCH", f"{DDB_PATH}/{name}", {"spec": {"image": IMAGE_TO}},
            content_type="application/merge-patch+json",
        )
        if not ddbs.wait(lambda items: name in items and ready_at(IMAGE_TO)(items[name]), deadline):
            raise RuntimeError(f"{name}: not Ready at {IMAGE_TO} within {deadline}s")
        lockstep_s.append(time.monotonic() - t0)
        lockstep_down.append(downtime.disarm())
        log(f"lockstep trial {trial}: {lockstep_s[-1]:.2f} s, at most {lockstep_down[-1]} pod(s) down")
        api.request("DELETE", f"{DDB_PATH}/{name}", ok=(200, 202, 404))
    ddbs.wait(lambda items: not items, deadline)
    for s in (pods, ddbs, stss):
        s.stop()
    floor_median = statistics.median(floor_s)
    lockstep_median = statistics.median(lockstep_s)
    return {
        "ready_delay_ms": args.ready_delay_ms,
        "trials": args.floor_trials,
        "floor_seconds": floor_s,
        "lockstep_seconds": lockstep_s,
        "floor_median_s": floor_median,
        "lockstep_median_s": lockstep_median,
        "ratio": lockstep_median / floor_median,
        "floor_max_pods_down": max(floor_down),
        "lockstep_max_pods_down": max(lockstep_down),
    }


# ------------------------------------------------------------------ scale


class Phases:
    """Measures one phase at a time: wall time, operator RSS (peak, end), operator and
    API server CPU-seconds, the operator's requests by verb and resource, transitions."""

    def __init__(self, operator: Operator, proxy: CountingProxy, sampler: Sampler, cluster: Cluster, n: int):
        self.operator = operator
        self.proxy = proxy
        self.sampler = sampler
        self.cluster = cluster
        self.n = n
        self.results: list[dict] = []
        self.budget = StatusBudget()

    def begin(self) -> dict:
        self.sampler.pid = self.operator.pid
        self.sampler.reset()
        m = self.operator.metrics()
        return {
            "t": time.monotonic(),
            "cpu": cpu_seconds(self.operator.pid),
            "api_cpu": cpu_seconds(self.cluster.pid("apiserver")),
            "harness_cpu": cpu_seconds(os.getpid()),
            "requests": self.proxy.snapshot(),
            "errors": self.proxy.error_snapshot(),
            "transitions": transitions(m),
            "reconciles": reconciles(m),
            "budget": self.budget.begin(),
            "by_trigger": by_trigger(m),
        }

    def at_done(self) -> dict:
        """The operator's CPU-seconds and metrics at the moment a phase is done (all
        Ready), taken at once: the method of docs/benchmarks.md stops the clock there."""
        return {"cpu": cpu_seconds(self.operator.pid), "metrics": self.operator.metrics()}

    def end(
        self,
        name: str,
        start: dict,
        complete: bool,
        detail: str = "",
        cpu_from_zero: bool = False,
        done_at: Optional[float] = None,
        done: Optional[dict] = None,
    ) -> dict:
        """Close a phase that was done at `done_at` (default: now). Before the counters
        are read the operator is let settle (no request and no reconcile for 1 s, at most
        15 s), so that the Event and metric of the last transition are counted in the
        phase that caused them; the settling is not in the phase's time.

        With `done` (from [`Phases.at_done`], taken when the phase was done), CPU and
        reconciles are counted from the phase's start to that moment ("from
        the first apply until all are Ready"); the settling's are reported apart."""
        seconds = (done_at or time.monotonic()) - start["t"]
        wait_quiet(self.operator, self.proxy, 0, 15.0, quiet=1.0)
        pid = self.operator.pid
        m = self.operator.metrics()
        cpu_settled = cpu_seconds(pid) - (0.0 if cpu_from_zero else start["cpu"])
        cpu = cpu_settled
        m_done = m
        if done is not None:
            cpu = done["cpu"] - (0.0 if cpu_from_zero else start["cpu"])
            m_done = done["metrics"] or m
        rss_end = status_kib(pid, "VmRSS") if pid else None
        peak = max(self.sampler.take_peak(), rss_end or 0)
        reqs = self.proxy.snapshot() - start["requests"]
        errs = self.proxy.error_snapshot() - start["errors"]
        trans = transitions(m) - (0.0 if cpu_from_zero else start["transitions"])
        recs = reconciles(m_done) - (0.0 if cpu_from_zero else start["reconciles"])
        recs_settled = reconciles(m) - (0.0 if cpu_from_zero else start["reconciles"])
        triggers_before = {} if cpu_from_zero else start["by_trigger"]
        triggers = {
            k: round((v - triggers_before.get(k, 0.0)) / self.n, 2)
            for k, v in sorted(by_trigger(m_done).items())
            if v - triggers_before.get(k, 0.0) > 0
        }
        writes = sum(v for (verb, _), v in reqs.items() if is_write(verb))
        result = {
            "phase": name,
            "complete": complete,
            "detail": detail,
            "seconds": round(seconds, 2),
            "rss_peak_mib": round(peak / 1024, 1),
            "rss_end_mib": round((rss_end or 0) / 1024, 1),
            "vm_hwm_mib": round((status_kib(pid, "VmHWM") or 0) / 1024, 1) if pid else None,
            # VmRSS = RssAnon (heap, stacks) + RssFile (the binary's code and data
            # mapped from the file, and shared libraries).
            "rss_anon_end_mib": round((status_kib(pid, "RssAnon") or 0) / 1024, 1) if pid else None,
            "rss_file_end_mib": round((status_kib(pid, "RssFile") or 0) / 1024, 1) if pid else None,
            "cpu_s": round(cpu, 3),
            "cpu_ms_per_cluster": round(1000 * cpu / self.n, 2),
            "transitions": int(trans),
            "cpu_ms_per_transition": round(1000 * cpu / trans, 2) if trans else None,
            "reconciles": int(recs),
            "reconciles_per_cluster": round(recs / self.n, 2),
            # Per cluster, by what woke the reconcile (the first trigger since the last).
            "reconciles_per_cluster_by_trigger": triggers,
            # Until the operator settled after the phase was done (the older method's figure).
            "cpu_s_settled": round(cpu_settled, 3),
            "cpu_ms_per_cluster_settled": round(1000 * cpu_settled / self.n, 2),
            "reconciles_settled": int(recs_settled),
            "apiserver_cpu_s": round(cpu_seconds(self.cluster.pid("apiserver")) - start["api_cpu"], 2),
            # This script: the counting proxy, the watches, the clients.
            "harness_cpu_s": round(cpu_seconds(os.getpid()) - start["harness_cpu"], 2),
            "requests": {f"{v} {r}": c for (v, r), c in sorted(reqs.items())},
            "request_errors": {f"{v} {r} {s}": c for (v, r, s), c in sorted(errs.items())},
            "writes": writes,
            "writes_per_cluster": round(writes / self.n, 2),
        }
        first_writes = self.n if name == "create" else 0
        result.update(self.budget.end(start["budget"], reqs, int(trans), first_writes, self.n))
        self.results.append(result)
        log(
            f"N={self.n} {name}: {seconds:.1f} s{'' if complete else ' (INCOMPLETE: ' + detail + ')'}, "
            f"RSS peak {result['rss_peak_mib']} MiB end {result['rss_end_mib']} MiB "
            f"(anon {result['rss_anon_end_mib']}, file {result['rss_file_end_mib']}), "
            f"CPU {cpu:.2f} s ({cpu_settled:.2f} s settled), {int(trans)} transitions, "
            f"{int(recs)} reconciles {triggers}, {writes} writes"
        )
        return result


def wait_quiet(
    operator: Operator, proxy: CountingProxy, need: int, timeout: float, quiet: float = 3.0
) -> tuple[bool, float]:
    """Until the operator has run at least `need` reconciles (after a restart: every
    object once) and then neither reconciles nor requests moved for `quiet` seconds.
    Returns whether that happened in time, and when they last moved."""
    deadline = time.monotonic() + timeout
    last = None
    since = time.monotonic()
    while time.monotonic() < deadline:
        m = operator.metrics()
        now = (reconciles(m), sum(proxy.snapshot().values()))
        if now != last:
            last, since = now, time.monotonic()
        elif now[0] >= need and time.monotonic() - since >= quiet:
            return True, since
        time.sleep(0.25)
    return False, since


def scale_run(args, n: int, out_dir: str) -> dict:
    nodes = max(3, math.ceil(3 * n / PODS_PER_NODE) + 1)
    plane = ControlPlane(args.repo, os.path.join(out_dir, f"cluster-{n}"), nodes)
    operator = None
    proxy = None
    phases = None
    try:
        cluster = plane.up()
        api = Api(cluster)
        proxy = CountingProxy(cluster, tls=args.proxy_tls).start()
        kubeconfig = os.path.join(out_dir, f"operator-{n}.kubeconfig")
        with open(kubeconfig, "w", encoding="utf-8") as f:
            f.write(proxy.kubeconfig())
        operator = Operator(args.lockstep, kubeconfig, os.path.join(out_dir, f"operator-{n}.log"), args.resync_period)
        sampler = Sampler()
        ddbs = Store(cluster, DDB_PATH, ddb_summary)
        ddbs.synced.wait(30)
        phases = Phases(operator, proxy, sampler, cluster, n)
        phases.budget.watch(cluster)
        deadline = args.deadline_base + args.deadline_per_cluster * n
        names = [f"db-{i:04d}" for i in range(n)]
        pool = ThreadPoolExecutor(max_workers=4)

        # ---- start: the operator starts and runs at 0 clusters for a while
        start = phases.begin()
        operator.start()
        sampler.pid = operator.pid
        time.sleep(args.settle)
        phases.end("start (0 clusters)", start, True, cpu_from_zero=True)

        # ---- create
        start = phases.begin()
        list(pool.map(lambda nm: api.request("POST", DDB_PATH, ddb(nm, IMAGE_FROM)), names))
        ok = ddbs.wait(lambda items: count(items, ready_at(IMAGE_FROM)) >= n, deadline)
        done_at = time.monotonic()
        done = phases.at_done()
        ready = count(ddbs.snapshot(), ready_at(IMAGE_FROM))
        phases.end("create", start, ok, f"{ready}/{n} Ready", done_at=done_at, done=done)

        # ---- idle
        if "idle" in args.phases:
            start = phases.begin()
            time.sleep(args.idle)
            phases.end("idle", start, True, f"{args.idle:.0f} s")

        # ---- forced resync: a restart (a fresh process lists everything and reconciles
        # every object once)
        if "resync" in args.phases:
            operator.stop()
            start = phases.begin()
            operator.start()
            sampler.pid = operator.pid
            ok, last = wait_quiet(operator, proxy, n, deadline)
            phases.end(
                "resync (restart)", start, ok, "" if ok else "reconciles did not settle",
                cpu_from_zero=True, done_at=last,
            )

        if "upgrade" not in args.phases:
            pool.shutdown()
            ddbs.stop()
            return {"n": n, "nodes": nodes, "phases": phases.results}

        # ---- upgrade
        start = phases.begin()
        list(
            pool.map(
                lambda nm: api.request(
                    "PATCH", f"{DDB_PATH}/{nm}", {"spec": {"image": IMAGE_TO}},
                    content_type="application/merge-patch+json",
                ),
                names,
            )
        )
        ok = ddbs.wait(lambda items: count(items, ready_at(IMAGE_TO)) >= n, deadline)
        done_at = time.monotonic()
        at_done = phases.at_done()
        done = count(ddbs.snapshot(), ready_at(IMAGE_TO))
        phases.end("upgrade", start, ok, f"{done}/{n} upgraded", done_at=done_at, done=at_done)
        if "delete" not in args.phases:
            pool.shutdown()
            ddbs.stop()
            return {"n": n, "nodes": nodes, "phases": phases.results}

        # ---- delete
        start = phases.begin()
        list(pool.map(lambda nm: api.request("DELETE", f"{DDB_PATH}/{nm}", ok=(200, 202, 404)), names))
        ok = ddbs.wait(lambda items: not items, deadline)
        done_at = time.monotonic()
        left = len(ddbs.snapshot())
        phases.end("delete", start, ok, f"{left} left", done_at=done_at)
        ddbs.stop()
        pool.shutdown()
        return {"n": n, "nodes": nodes, "phases": phases.results}
    finally:
        if phases is not None:
            phases.budget.stop()
        if operator is not None:
            operator.stop()
        if proxy is not None:
            proxy.shutdown()
        if not args.keep_cluster:
            plane.down()


def floor_run(args, out_dir: str) -> dict:
    plane = ControlPlane(args.repo, os.path.join(out_dir, "cluster-floor"), 3)
    operator = None
    proxy = None
    try:
        cluster = plane.up()
        api = Api(cluster)
        proxy = CountingProxy(cluster, tls=args.proxy_tls).start()
        kubeconfig = os.path.join(out_dir, "operator-floor.kubeconfig")
        with open(kubeconfig, "w", encoding="utf-8") as f:
            f.write(proxy.kubeconfig())
        operator = Operator(args.lockstep, kubeconfig, os.path.join(out_dir, "operator-floor.log"), args.resync_period)
        operator.start()
        return floor_trials(args, cluster, api, operator)
    finally:
        if operator is not None:
            operator.stop()
        if proxy is not None:
            proxy.shutdown()
        if not args.keep_cluster:
            plane.down()


# ------------------------------------------------------------------ criterion


def criterion_results(target: str) -> dict:
    """Mean and median (ns) of every criterion benchmark under target/criterion."""
    out = {}
    root = os.path.join(target, "criterion")
    for dirpath, _, files in os.walk(root):
        if "estimates.json" in files and os.path.basename(dirpath) == "new":
            with open(os.path.join(dirpath, "benchmark.json"), encoding="utf-8") as f:
                meta = json.load(f)
            with open(os.path.join(dirpath, "estimates.json"), encoding="utf-8") as f:
                est = json.load(f)
            out[meta.get("full_id") or meta.get("title")] = {
                "mean_ns": round(est["mean"]["point_estimate"], 1),
                "median_ns": round(est["median"]["point_estimate"], 1),
            }
    return dict(sorted(out.items()))


# ------------------------------------------------------------------ report


def fmt(v: Any) -> str:
    return "-" if v is None else str(v)


def top_requests(reqs: dict, k: int = 4) -> str:
    return ", ".join(f"{key} {c}" for key, c in Counter(reqs).most_common(k))


def print_report(report: dict) -> None:
    out = sys.stdout
    print(f"\nLockstep bench  commit {report['commit']}  {report['date']}  "
          f"({report['machine']['cpus']} CPUs, load {report['machine']['loadavg']})", file=out)
    floor = report.get("floor")
    if floor:
        print(f"\n3-pod upgrade, KWOK ready delay {floor['ready_delay_ms']} ms, {floor['trials']} interleaved trials each", file=out)
        print(f"  floor (plain OnDelete StatefulSet): median {floor['floor_median_s']:.2f} s  "
              f"{[round(x, 2) for x in floor['floor_seconds']]}  max pods down {floor['floor_max_pods_down']}", file=out)
        print(f"  Lockstep:                           median {floor['lockstep_median_s']:.2f} s  "
              f"{[round(x, 2) for x in floor['lockstep_seconds']]}  max pods down {floor['lockstep_max_pods_down']}", file=out)
        print(f"  ratio Lockstep / floor: {floor['ratio']:.3f}", file=out)
    for run in report.get("scale", []):
        n = run["n"]
        print(f"\nN = {n} DistributedDBs x 3 pods, {run['nodes']} KWOK nodes", file=out)
        head = ("phase", "time s", "ok", "RSS peak", "RSS end", "CPU s", "ms/cluster", "rec/cluster", "trans", "ms/trans",
                "writes", "w/cluster", "apisrv CPU s", "harness CPU s")
        rows = [head]
        for p in run["phases"]:
            rows.append((
                p["phase"], f"{p['seconds']:.1f}", "yes" if p["complete"] else "NO",
                f"{p['rss_peak_mib']}", f"{p['rss_end_mib']}", f"{p['cpu_s']:.2f}",
                fmt(p["cpu_ms_per_cluster"]), fmt(p.get("reconciles_per_cluster")),
                str(p["transitions"]), fmt(p["cpu_ms_per_transition"]),
                str(p["writes"]), f"{p['writes_per_cluster']}", f"{p['apiserver_cpu_s']}",
                f"{p.get('harness_cpu_s', '-')}",
            ))
        widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
        for r in rows:
            print("  " + "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))), file=out)
        print("  CPU and reconciles: from the phase's start until done (all Ready); "
              "ms/cluster once settled in brackets. Reconciles per cluster by trigger:", file=out)
        for p in run["phases"]:
            if p.get("reconciles_per_cluster_by_trigger") or "cpu_ms_per_cluster_settled" in p:
                print(f"    {p['phase']}: {p.get('reconciles_per_cluster_by_trigger') or '-'}  "
                      f"[{fmt(p.get('cpu_ms_per_cluster_settled'))} ms/cluster settled]", file=out)
        print("  requests (verb resource: count), per phase:", file=out)
        for p in run["phases"]:
            print(f"    {p['phase']}: {top_requests(p['requests'], 40) or 'none'}", file=out)
            if p["request_errors"]:
                print(f"      errors: {p['request_errors']}", file=out)
        print("  status writes <= first writes + transitions + readiness changes, per cluster:", file=out)
        for p in run["phases"]:
            if "status_writes" in p:
                print(f"    {p['phase']}: {p['status_writes_per_cluster']} <= "
                      f"{p['status_write_bound_per_cluster']} ({p['status_writes']} writes, "
                      f"{p['transitions']} transitions, {p['readiness_changes']} readiness changes)"
                      f"{'' if p['status_write_bound_holds'] else '  EXCEEDED'}", file=out)
    crit = report.get("micro")
    if crit:
        print("\ncriterion micro-benchmarks (median):", file=out)
        for name, est in crit.items():
            ns = est["median_ns"]
            shown = f"{ns / 1000:.2f} us" if ns >= 1000 else f"{ns:.0f} ns"
            print(f"  {name:<60} {shown:>12}", file=out)


def compare(old_path: str, new_path: str) -> None:
    """Print the key figures of two reports side by side (old → new)."""
    with open(old_path, encoding="utf-8") as f:
        old = json.load(f)
    with open(new_path, encoding="utf-8") as f:
        new = json.load(f)
    print(f"old: {old['commit']} {old['date']}   new: {new['commit']} {new['date']}")
    keys = ("seconds", "rss_end_mib", "cpu_ms_per_cluster", "reconciles_per_cluster", "cpu_ms_per_transition",
            "writes_per_cluster")

    def cell(a: Any, b: Any) -> str:
        if a is None or b is None:
            return f"{fmt(a)} → {fmt(b)}"
        change = f" ({(b - a) / a * 100:+.0f}%)" if a else ""
        return f"{a} → {b}{change}"

    if old.get("floor") and new.get("floor"):
        print(f"floor ratio: {cell(round(old['floor']['ratio'], 3), round(new['floor']['ratio'], 3))}")
    olds = {r["n"]: r for r in old.get("scale", [])}
    for run in new.get("scale", []):
        before = olds.get(run["n"])
        if before is None:
            continue
        print(f"N = {run['n']}")
        phases = {p["phase"]: p for p in before["phases"]}
        for p in run["phases"]:
            b = phases.get(p["phase"])
            if b is None:
                continue
            print(f"  {p['phase']:<20} " + "  ".join(f"{k}: {cell(b.get(k), p.get(k))}" for k in keys))
    micro_old, micro_new = old.get("micro") or {}, new.get("micro") or {}
    for name, est in micro_new.items():
        if name in micro_old:
            print(f"  {name:<45} median ns: {cell(micro_old[name]['median_ns'], est['median_ns'])}")


def git_commit(repo: str) -> str:
    try:
        rev = subprocess.run(["git", "-C", repo, "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", repo, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
        return rev + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main() -> int:
    quick = os.environ.get("BENCH_QUICK") == "1"
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--repo", default=os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
    p.add_argument("--lockstep", default="", help="the release-built lockstep binary")
    p.add_argument("--sizes", default=os.environ.get("BENCH_SIZES", "100 500 1000"),
                   help="cluster counts, space-separated (BENCH_SIZES); empty: no scale runs")
    p.add_argument("--idle", type=float, default=float(os.environ.get("BENCH_IDLE", "20" if quick else "300")),
                   help="seconds of the idle phase (BENCH_IDLE)")
    p.add_argument("--phases", default=os.environ.get("BENCH_PHASES", "create idle resync upgrade delete"),
                   help="the scale phases to run, space-separated (BENCH_PHASES; create always runs, "
                        "upgrade before delete)")
    p.add_argument("--settle", type=float, default=float(os.environ.get("BENCH_SETTLE", "5")),
                   help="seconds the operator runs at 0 clusters before create (BENCH_SETTLE)")
    p.add_argument("--floor-trials", type=int, default=int(os.environ.get("BENCH_FLOOR_TRIALS", "3")),
                   help="interleaved floor / Lockstep upgrade trials each (BENCH_FLOOR_TRIALS); 0: skip")
    p.add_argument("--ready-delay-ms", type=int, default=int(os.environ.get("BENCH_READY_DELAY_MS", "2000")))
    p.add_argument("--resync-period", type=int, default=int(os.environ.get("BENCH_RESYNC_PERIOD", "0")),
                   help="the operator's --resync-period (0: none, so that phases are not disturbed)")
    p.add_argument("--proxy-tls", type=int, default=int(os.environ.get("BENCH_PROXY_TLS", "1")),
                   help="1: the operator speaks TLS to the counting proxy, as to an API server "
                        "(BENCH_PROXY_TLS; 0: plain HTTP, the older setup)")
    p.add_argument("--deadline-base", type=float, default=180.0)
    p.add_argument("--deadline-per-cluster", type=float, default=2.0)
    p.add_argument("--micro", action="store_true", help="include target/criterion results in the report")
    p.add_argument("--keep-cluster", action="store_true")
    p.add_argument("--out", default=None, help="the JSON file (default target/bench/<timestamp>.json)")
    p.add_argument("--compare", nargs=2, metavar=("OLD", "NEW"), help="compare two reports and exit")
    args = p.parse_args()
    args.phases = args.phases.split()
    if args.compare:
        compare(*args.compare)
        return 0

    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    bench_dir = os.path.join(args.repo, "target", "bench")
    out_dir = os.path.join(bench_dir, stamp)
    os.makedirs(out_dir, exist_ok=True)
    report: dict[str, Any] = {
        "commit": git_commit(args.repo),
        "date": stamp,
        "machine": {
            "cpus": os.cpu_count(),
            "loadavg": " ".join(f"{x:.2f}" for x in os.getloadavg()),
            "kernel": platform.release(),
        },
        "config": {
            "sizes": args.sizes,
            "idle_s": args.idle,
            "phases": args.phases,
            "ready_delay_ms": args.ready_delay_ms,
            "floor_trials": args.floor_trials,
            "resync_period": args.resync_period,
            "pods_per_node": PODS_PER_NODE,
            "requests_counted_by": "counting proxy in front of the operator (tools/bench/proxy.py)",
            "operator_speaks_tls": bool(args.proxy_tls),
            "cpu_counted": "operator utime+stime from the first apply until all Ready",
        },
    }
    if args.micro:
        report["micro"] = criterion_results(os.path.join(args.repo, "target"))
    # `timeout` (run.sh) stops us with SIGTERM: unwind, so that every control plane and
    # operator started so far is stopped by the `finally` blocks.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    failures = []
    if args.floor_trials > 0:
        try:
            report["floor"] = floor_run(args, out_dir)
        except (RuntimeError, ApiError, OSError, subprocess.CalledProcessError) as e:
            failures.append(f"floor: {e}")
            log(f"floor comparison failed: {e}")
    report["scale"] = []
    for n in [int(x) for x in args.sizes.split()]:
        try:
            report["scale"].append(scale_run(args, n, out_dir))
        except (RuntimeError, ApiError, OSError, subprocess.CalledProcessError) as e:
            failures.append(f"N={n}: {e}")
            log(f"N={n} failed: {e}")
        report["machine"]["loadavg_end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    report["failures"] = failures
    path = args.out or os.path.join(bench_dir, f"{stamp}.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(report, f, indent=2)
    print_report(report)
    print(f"\nJSON: {path}\nlogs: {out_dir}")
    incomplete = [
        f"N={r['n']} {ph['phase']}" for r in report["scale"] for ph in r["phases"] if not ph["complete"]
    ]
    if incomplete or failures:
        log("incomplete phases: " + ", ".join(incomplete + failures))
        return 1
    exceeded = [
        f"N={r['n']} {ph['phase']}" for r in report["scale"] for ph in r["phases"]
        if ph.get("status_write_bound_holds") is False
    ]
    if exceeded:
        log("status writes above first writes + transitions + readiness changes: " + ", ".join(exceeded))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
