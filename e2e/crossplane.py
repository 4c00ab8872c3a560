"""Crossplane from its Helm chart, and this package through Crossplane's package manager.

`helm template` renders the chart of the Crossplane version under test; everything in it is
applied but the two Deployments, whose containers run here as processes with the same
commands and environment, each as its ServiceAccount. The webhooks are off
(`webhooks.enabled=false`, a setting the chart offers): the API server could reach them only
through a Service. The function package is built with the `crossplane` CLI (`xpkg build`),
pushed to a local registry and installed as a `Function`; with the External package runtime
Crossplane runs nothing for it, so the function serves here with a certificate signed by
Crossplane's own CA, and its revision's endpoint names that server.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from e2e import pki
from e2e.binaries import binary, module_dir, versions
from e2e.cluster import ControlPlane, free_port, wait_until
from e2e.kube import Kubectl, documents, eventually

NAMESPACE = "crossplane-system"
REPOSITORY = Path(__file__).resolve().parent.parent
FUNCTION = "function-gpustack"
INIT_ATTEMPTS = 10
TLS_SERVER_SECRET = f"{FUNCTION}-tls-server"  # the runtime's Secret for the function's server


class Crossplane:
    def __init__(self, plane: ControlPlane, kubectl: Kubectl, pin: str = "CROSSPLANE"):
        self.plane = plane
        self.kubectl = kubectl
        self.pin = pin
        self.version = versions()[pin]
        module = "github.com/crossplane/crossplane" + (
            "/v2" if self.version.startswith("v2") else ""
        )
        self.source = module_dir(module, self.version)
        self.binary = str(binary("crossplane", pin))
        self.crank = str(binary("crank", pin))
        self.root = plane.root / "crossplane"
        self.root.mkdir(exist_ok=True)

    @property
    def major(self) -> int:
        return int(self.version[1:].split(".")[0])

    # -- Crossplane itself ----------------------------------------------------------------------
    def chart(self) -> list[dict[str, Any]]:
        chart = self.root / "chart"
        if not chart.exists():
            subprocess.run(
                ["cp", "-r", str(self.source / "cluster" / "charts" / "crossplane"), str(chart)],
                check=True,
            )
            subprocess.run(["chmod", "-R", "u+w", str(chart)], check=True)
        args = [
            str(binary("helm")),
            "template",
            "crossplane",
            str(chart),
            "--namespace",
            NAMESPACE,
            "--set",
            "webhooks.enabled=false",
            "--version",
            self.version,
        ]
        rendered = subprocess.run(args, capture_output=True, text=True, check=True).stdout
        return documents(rendered)

    def install(self) -> None:
        objects = self.chart()
        deployments = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Deployment"}
        self.kubectl("create", "namespace", NAMESPACE)
        self.kubectl.apply([o for o in objects if o["kind"] != "Deployment"])
        core = deployments["crossplane"]["spec"]["template"]["spec"]
        crds = self.source / "cluster" / "crds"
        init = core["initContainers"][0]
        jail = self.init_root(crds) if self.major < 2 else None
        self.run_container(
            "crossplane-init", init, "crossplane", crds_path=crds, once=True, jail=jail
        )
        self.write_client_certs()
        self.run_container("crossplane", core["containers"][0], "crossplane")
        rbac = deployments.get("crossplane-rbac-manager")
        if rbac is not None:
            spec = rbac["spec"]["template"]["spec"]
            self.run_container(
                "crossplane-rbac-manager-init",
                spec["initContainers"][0],
                "rbac-manager",
                crds_path=crds,
                once=True,
            )
            self.run_container("crossplane-rbac-manager", spec["containers"][0], "rbac-manager")

    def init_root(self, crds: Path) -> Path:
        """Crossplane 1.x's `core init` reads its CRDs from /crds, where its image has them
        (2.x takes CRDS_PATH): it runs chrooted into a folder holding its static binary, the
        CRDs (its kubeconfig carries the cluster's CA), rather than writing /crds on this
        machine."""
        jail = self.root / "init-root"
        shutil.copytree(crds, jail / "crds", dirs_exist_ok=True)
        (jail / "bin").mkdir(exist_ok=True)
        shutil.copy2(self.binary, jail / "bin" / "crossplane")
        return jail

    def run_container(
        self,
        name: str,
        container: dict[str, Any],
        account: str,
        crds_path: Path | None = None,
        once: bool = False,
        jail: Path | None = None,
    ) -> None:
        """A container of the chart's Deployments, as a process: its args and plain env;
        chrooted into `jail`, where given (init_root)."""
        env = {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}
        env |= {"POD_NAMESPACE": NAMESPACE, "POD_SERVICE_ACCOUNT": account}
        env |= {"GOMAXPROCS": "2", "LEADER_ELECTION": "false"}
        if jail is not None:  # 1.x's chart says ENABLE_WEBHOOKS=false, which `core start` reads
            env["WEBHOOK_ENABLED"] = "false"  # and its `core init` does not (its name is this)
        ports = {
            "METRICS_PORT": free_port(),
            "HEALTH_PROBE_PORT": free_port(),
            "WEBHOOK_PORT": free_port(),
        }
        env |= {k: str(v) for k, v in ports.items()}
        env |= {
            "XPKG_CACHE_DIR": str(self.root / "xpkg-cache"),
            "XFN_CACHE_DIR": str(self.root / "xfn-cache"),
        }
        for cache in ("xpkg-cache", "xfn-cache"):  # the chart's emptyDir volumes
            (self.root / cache).mkdir(exist_ok=True)
        env["TLS_CLIENT_CERTS_DIR"] = str(self.root / "tls-client")
        env["TLS_SERVER_CERTS_DIR"] = str(self.root / "tls-server")
        if crds_path is not None:
            env["CRDS_PATH"] = str(crds_path)
        kubeconfig = self.kubectl.token_kubeconfig(
            (jail or self.root) / f"{account}.kubeconfig",
            self.plane.server,
            self.plane.ca.cert,
            account,
            NAMESPACE,
        )
        env["KUBECONFIG"] = str(kubeconfig) if jail is None else f"/{kubeconfig.name}"
        args = [self.binary, *container.get("args", [])]
        if jail is not None:
            args = ["chroot", str(jail), "/bin/crossplane", *container.get("args", [])]
        if name == "crossplane":
            # 2.x takes a runtime per package kind; 1.x one for every package
            runtime = "Function=External" if self.major >= 2 else "External"
            args += [f"--package-runtime={runtime}"]
            if os.environ.get("E2E_CROSSPLANE_DEBUG"):  # every reconcile in logs/crossplane.log
                args += ["--debug"]
        process = self.plane.run(name, args, env)
        if once:
            # An init container that fails is restarted by the kubelet: `core init` fails while
            # the CRDs it just applied are not yet served, and succeeds on a later try.
            for _attempt in range(INIT_ATTEMPTS):
                assert process.popen is not None
                code = process.popen.wait(timeout=600)
                if code == 0:
                    return
                time.sleep(2)
                process.start()
            raise RuntimeError(f"{name} exited {code}: {process.log.read_text()[-3000:]}")
        self.plane.wait_healthy_http(
            name, ports["HEALTH_PROBE_PORT"], "/healthz"
        ) if name == "crossplane" else None

    def write_client_certs(self) -> None:
        """What the chart mounts from the `crossplane-tls-client` Secret the init step filled."""
        self.kubectl.mount_secret(
            "crossplane-tls-client",
            NAMESPACE,
            self.root / "tls-client",
            ("ca.crt", "tls.crt", "tls.key"),
        )

    # -- the function package ---------------------------------------------------------------------
    def start_registry(self) -> str:
        port = free_port()
        config = self.root / "registry.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "version": 0.1,
                    "storage": {"filesystem": {"rootdirectory": str(self.root / "registry")}},
                    "http": {"addr": f"127.0.0.1:{port}"},
                    "log": {"level": "warn"},
                }
            )
        )
        process = self.plane.run(
            "registry",
            [str(binary("registry")), "serve", str(config)],
            {"OTEL_TRACES_EXPORTER": "none"},
        )
        import urllib.request

        def serving() -> bool:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=5) as r:
                return r.status == 200

        wait_until("registry", serving, log=process.log, alive=process.alive)
        # 127.0.0.1, not localhost: Function.spec.package must name a registry with a dot, and
        # go-containerregistry speaks plain HTTP to a loopback address
        return f"127.0.0.1:{port}"

    def push_package(self, registry: str) -> str:
        package_file = self.root / "function-gpustack.xpkg"
        subprocess.run(
            [
                self.crank,
                "xpkg",
                "build",
                f"--package-root={REPOSITORY / 'package'}",
                f"--examples-root={REPOSITORY / 'examples' / 'install'}",
                f"--package-file={package_file}",
            ],
            check=True,
            capture_output=True,
            text=True,
        )
        reference = f"{registry}/gpustack/function-gpustack:v0.1.0"
        subprocess.run(
            [self.crank, "xpkg", "push", f"--package-files={package_file}", reference],
            check=True,
            capture_output=True,
            text=True,
        )
        return reference

    def serve_function(self) -> str:
        """The function as a local process, with a serving certificate signed by Crossplane's
        root CA (what Crossplane's Deployment runtime would mount from the function's Secret)."""
        root_ca = self.kubectl.secret("crossplane-root-ca", NAMESPACE)
        folder = self.root / "function-tls"
        folder.mkdir(exist_ok=True)
        ca = pki.KeyPair(folder / "root-ca.crt", folder / "root-ca.key")
        ca.cert.write_bytes(root_ca["tls.crt"])
        ca.key.write_bytes(root_ca["tls.key"])
        pki.signed(  # tls.crt and tls.key, what load_credentials reads
            folder,
            "tls",
            ca,
            FUNCTION,
            hosts=("localhost", f"{FUNCTION}.{NAMESPACE}", f"{FUNCTION}.{NAMESPACE}.svc"),
        )
        (folder / "ca.crt").write_bytes(root_ca["tls.crt"])
        # What the Deployment runtime keeps for a revision, and what its establisher reads
        self.kubectl(
            "create",
            "secret",
            "generic",
            TLS_SERVER_SECRET,
            "-n",
            NAMESPACE,
            *(f"--from-file={key}={folder / key}" for key in ("tls.crt", "tls.key", "ca.crt")),
        )
        port, metrics = free_port(), free_port()
        function = str(Path(sys.executable).parent / "function")
        self.plane.run(
            "function",
            [function, f"--tls-certs-dir={folder}", f"--address=127.0.0.1:{port}",
             f"--metrics-address=127.0.0.1:{metrics}"],
        )  # fmt: skip
        self.metrics_url = f"http://127.0.0.1:{metrics}/metrics"
        return f"dns:///localhost:{port}"

    def install_function(self) -> None:
        registry = self.start_registry()
        reference = self.push_package(registry)
        endpoint = self.serve_function()
        function = yaml.safe_load(
            (REPOSITORY / "examples" / "install" / "function.yaml").read_text()
        )
        function["spec"] = {"package": reference}  # the runtime config is the Deployment runtime's
        self.kubectl.apply([function])
        revision = eventually(
            "the function's revision", lambda: self.kubectl.get("functionrevisions")
        )[0]
        name = revision["metadata"]["name"]
        self.kubectl(
            "patch",
            "functionrevision",
            name,
            "--subresource=status",
            "--type=merge",
            "-p",
            json.dumps(
                {"status": {"endpoint": endpoint, "tlsServerSecretName": TLS_SERVER_SECRET}}
            ),
        )
        # ... and the runtime's verdict on its server, which the Function's Healthy waits for.
        # A JSON patch adds to the conditions Crossplane wrote; before it has written any there
        # is no list to add to, and the API server refuses the patch (once, on 1.20.3).
        eventually(
            "the function revision's first conditions",
            lambda: self.kubectl.get("functionrevision", name)["status"]["conditions"],
        )
        healthy = {"type": "RuntimeHealthy", "status": "True", "reason": "HealthyPackageRevision",
                   "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}  # fmt: skip
        patch = [{"op": "add", "path": "/status/conditions/-", "value": healthy}]
        self.kubectl("patch", "functionrevision", name, "--subresource=status", "--type=json",
                     "-p", json.dumps(patch))  # fmt: skip
        self.kubectl.wait("condition=Healthy", [f"function.pkg.crossplane.io/{FUNCTION}"])
