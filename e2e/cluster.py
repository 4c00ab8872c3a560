"""A real control plane on loopback: kine, kube-apiserver, kube-controller-manager,
kube-scheduler and KWOK, each an upstream binary built by `e2e/build.sh`, in a temporary folder.

Nothing here reimplements a component: this module only picks free ports, makes certificates
and kubeconfigs, starts the processes with their documented flags, waits until each says it is
ready, and stops them. Every process logs to `<root>/logs/<name>.log`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from e2e import pki
from e2e.binaries import binary

START_TIMEOUT = 600.0  # seconds a component may take to come up on a busy 2-core machine


class StartFailed(RuntimeError):
    """A component did not come up: its name, why, and the end of its log."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(
    what: str,
    ready: Callable[[], bool],
    timeout: float = START_TIMEOUT,
    log: Path | None = None,
    alive: Callable[[], bool] = lambda: True,
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive():
            raise StartFailed(f"{what} exited while starting{_tail(log)}")
        with contextlib.suppress(OSError, ssl.SSLError, ValueError):
            if ready():
                return
        time.sleep(0.25)
    raise StartFailed(f"{what} not ready within {timeout:.0f} s{_tail(log)}")


def _tail(log: Path | None, lines: int = 30) -> str:
    if log is None or not log.exists():
        return ""
    return (
        "; the end of its log ("
        + str(log)
        + "):\n"
        + "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    )


@dataclass
class Process:
    name: str
    args: list[str]
    log: Path
    env: dict[str, str] = field(default_factory=dict)
    popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        out = self.log.open("ab")
        self.popen = subprocess.Popen(
            self.args,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **self.env},
            start_new_session=True,
        )
        out.close()

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def stop(self, grace: float = 10.0) -> None:
        if not self.alive():
            return
        assert self.popen is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGTERM)
        try:
            self.popen.wait(grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait()


def kubeconfig(path: Path, server: str, ca: Path, client: pki.KeyPair, user: str) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {"name": "e2e", "cluster": {"server": server, "certificate-authority": str(ca)}}
                ],
                "users": [
                    {
                        "name": user,
                        "user": {
                            "client-certificate": str(client.cert),
                            "client-key": str(client.key),
                        },
                    }
                ],
                "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": user}}],
                "current-context": "e2e",
            }
        )
    )
    path.chmod(0o600)
    return path


@dataclass(frozen=True)
class Scale:
    """How the control plane is tuned for the number of nodes it holds.

    A scenario's few nodes need no watch cache (it costs memory and start-up time) and renew
    their leases as kubelets do (every 10 s of a 40 s lease). A thousand KWOK nodes on two
    cores would spend the API server's writes on leases alone (100 a second), and every
    controller's lists would go to kine's SQLite: a fleet keeps the watch cache on and renews
    longer leases, the node lifecycle controller's grace period as long as one lease.
    """

    watch_cache: bool = False
    lease_seconds: int = 40


SCENARIO, FLEET = Scale(), Scale(watch_cache=True, lease_seconds=600)


class ControlPlane:
    """kine, kube-apiserver, kube-controller-manager, kube-scheduler and KWOK on loopback."""

    def __init__(
        self,
        root: Path,
        kwok_stages: Sequence[dict[str, Any]],
        scheduler: Mapping[str, Any] | None = None,
        scale: Scale = SCENARIO,
    ):
        """`scheduler`: what kube-scheduler's configuration adds to its defaults (extenders,
        profiles), as a cluster's operator writes it."""
        self.root = root
        self.kwok_stages = list(kwok_stages)
        self.scheduler = dict(scheduler or {})
        self.scale = scale
        self.processes: dict[str, Process] = {}
        self.pki_dir = root / "pki"
        self.pki_dir.mkdir(parents=True, exist_ok=True)
        self.ca = pki.certificate_authority(self.pki_dir, "cluster-ca")
        self.apiserver_port = free_port()
        self.server = f"https://127.0.0.1:{self.apiserver_port}"
        admin = pki.signed(self.pki_dir, "admin", self.ca, "admin", "system:masters")
        self.admin = admin
        self.kubeconfig = kubeconfig(
            root / "admin.kubeconfig", self.server, self.ca.cert, admin, "admin"
        )

    # -- processes ----------------------------------------------------------------------
    def run(self, name: str, args: list[str], env: dict[str, str] | None = None) -> Process:
        process = Process(name, args, self.root / "logs" / f"{name}.log", env or {})
        self.processes[name] = process
        process.start()
        return process

    def start(self) -> None:
        self.start_kine()
        self.start_apiserver()
        self.start_controller_manager()
        self.start_scheduler()
        self.start_kwok()

    def stop(self) -> None:
        for process in reversed(list(self.processes.values())):
            process.stop()

    def healthy(self, port: int, path: str = "/healthz") -> bool:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        context.load_cert_chain(self.admin.cert, self.admin.key)
        with urllib.request.urlopen(
            f"https://127.0.0.1:{port}{path}", context=context, timeout=5
        ) as r:
            return r.status == 200

    def wait_healthy(self, name: str, port: int, path: str = "/healthz") -> None:
        process = self.processes[name]
        wait_until(name, lambda: self.healthy(port, path), log=process.log, alive=process.alive)

    def wait_healthy_http(self, name: str, port: int, path: str = "/healthz") -> None:
        """A probe served over plain HTTP (Kueue's and Crossplane's health ports)."""
        process = self.processes[name]

        def answers() -> bool:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
                return r.status == 200

        wait_until(name, answers, log=process.log, alive=process.alive)

    # -- the components -------------------------------------------------------------------
    def start_kine(self) -> None:
        self.kine_port = free_port()
        data = self.root / "kine"
        data.mkdir(exist_ok=True)
        process = self.run(
            "kine",
            [
                str(binary("kine")),
                f"--endpoint=sqlite://{data}/state.db?_journal=WAL&cache=shared&_busy_timeout=30000",
                f"--listen-address=127.0.0.1:{self.kine_port}",
                "--metrics-bind-address=0",
            ],
        )

        def listening() -> bool:
            with socket.create_connection(("127.0.0.1", self.kine_port), timeout=1):
                return True

        wait_until("kine", listening, log=process.log, alive=process.alive)

    def start_apiserver(self) -> None:
        serving = pki.signed(
            self.pki_dir,
            "apiserver",
            self.ca,
            "kube-apiserver",
            hosts=(
                "127.0.0.1",
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
            ),
        )
        self.service_account = pki.service_account_keys(self.pki_dir)
        self.run(
            "kube-apiserver",
            [
                str(binary("kube-apiserver")),
                f"--etcd-servers=http://127.0.0.1:{self.kine_port}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.apiserver_port}",
                f"--tls-cert-file={serving.cert}",
                f"--tls-private-key-file={serving.key}",
                f"--client-ca-file={self.ca.cert}",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-account-key-file={self.service_account.cert}",
                f"--service-account-signing-key-file={self.service_account.key}",
                "--service-cluster-ip-range=10.96.0.0/16",
                "--authorization-mode=RBAC",
                "--allow-privileged=true",
                # its Endpoints would name 127.0.0.1, which Endpoints may not hold; nothing reads them
                "--endpoint-reconciler-type=none",
                "--profiling=false",
                f"--watch-cache={str(self.scale.watch_cache).lower()}",
            ],
        )
        self.wait_healthy("kube-apiserver", self.apiserver_port, "/readyz")

    def start_component(self, name: str, *flags: str) -> None:
        """kube-controller-manager or kube-scheduler: the flags both take, then its own."""
        port = free_port()
        kubeconfig_path = str(self.kubeconfig)
        self.run(
            name,
            [
                str(binary(name)),
                f"--kubeconfig={kubeconfig_path}",
                f"--authentication-kubeconfig={kubeconfig_path}",
                f"--authorization-kubeconfig={kubeconfig_path}",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                "--leader-elect=false",
                "--profiling=false",
                *flags,
            ],
        )
        self.wait_healthy(name, port)

    def start_controller_manager(self) -> None:
        self.start_component(
            "kube-controller-manager",
            f"--service-account-private-key-file={self.service_account.key}",
            f"--root-ca-file={self.ca.cert}",
            "--use-service-account-credentials=false",
            *self.node_monitor_flags(),
        )

    def node_monitor_flags(self) -> list[str]:
        """A lease longer than the default grace period (50 s) needs a grace period to match,
        or every node would go Unknown between two renewals."""
        if self.scale.lease_seconds <= SCENARIO.lease_seconds:
            return []
        return [f"--node-monitor-grace-period={self.scale.lease_seconds}s"]

    def start_scheduler(self) -> None:
        """kube-scheduler, with a configuration file where the cluster configures it (a
        file's clientConnection and leaderElection replace the flags that say the same)."""
        if not self.scheduler:
            self.start_component("kube-scheduler")
            return
        config = self.root / "kube-scheduler.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "kubescheduler.config.k8s.io/v1",
                    "kind": "KubeSchedulerConfiguration",
                    "clientConnection": {"kubeconfig": str(self.kubeconfig)},
                    "leaderElection": {"leaderElect": False},
                    **self.scheduler,
                }
            )
        )
        self.start_component("kube-scheduler", f"--config={config}")

    def start_kwok(self) -> None:
        port = free_port()
        config = self.root / "kwok.yaml"
        documents = [
            {
                "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
                "kind": "KwokConfiguration",
                # kwok v0.8.0 leaves a config file's options undefaulted: its defaults, spelled out
                "options": {
                    "manageAllNodes": True,
                    "serverAddress": f"127.0.0.1:{port}",
                    "cidr": "10.0.0.0/16",
                    "podPlayStageParallelism": 4,
                    "nodePlayStageParallelism": 4,
                    "nodeLeaseParallelism": 4,
                    "podsOnNodeSyncParallelism": 1,
                    "nodeLeaseDurationSeconds": self.scale.lease_seconds,
                },
            }
        ]
        documents += self.kwok_stages
        config.write_text(yaml.safe_dump_all(documents))
        process = self.run(
            "kwok",
            [
                str(binary("kwok")),
                f"--kubeconfig={self.kubeconfig}",
                f"--config={config}",
            ],
        )

        def serving() -> bool:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as r:
                return r.status == 200

        wait_until("kwok", serving, log=process.log, alive=process.alive)
