"""The real kubectl, run against the control plane, and small helpers over its output."""

from __future__ import annotations

import base64
import json
import subprocess
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from e2e.binaries import binary


class KubectlFailed(RuntimeError):
    pass


class Kubectl:
    def __init__(self, kubeconfig: Path):
        self.kubeconfig = kubeconfig
        self.path = str(binary("kubectl"))

    def env(self) -> dict[str, str]:
        # HOME is the run's folder: kubectl keeps its discovery cache under $HOME/.kube
        return {
            "KUBECONFIG": str(self.kubeconfig),
            "PATH": "/usr/bin:/bin",
            "HOME": str(self.kubeconfig.parent),
        }

    def __call__(
        self,
        *args: str,
        stdin: str | None = None,
        cwd: Path | None = None,
        check: bool = True,
        timeout: float = 300,
    ) -> str:
        done = subprocess.run(
            [self.path, *args],
            input=stdin,
            capture_output=True,
            text=True,
            cwd=cwd,
            env=self.env(),
            timeout=timeout,
        )
        if check and done.returncode != 0:
            raise KubectlFailed(f"kubectl {' '.join(args)}: {done.stderr.strip() or done.stdout}")
        return done.stdout

    @staticmethod
    def kustomize(folder: Path) -> str:
        """`kubectl kustomize`: a kustomization rendered as `kustomize build` renders it."""
        done = subprocess.run(
            [str(binary("kubectl")), "kustomize", str(folder)],
            capture_output=True,
            text=True,
            check=True,
            timeout=300,
            env={"HOME": tempfile.gettempdir()},
        )
        return done.stdout

    def apply(self, objects: Iterable[Mapping[str, Any]], server_side: bool = True) -> None:
        text = yaml.safe_dump_all(list(objects))
        args = ["apply", "-f", "-"] + (
            ["--server-side", "--force-conflicts"] if server_side else []
        )
        self(*args, stdin=text)

    def get(self, kind: str, name: str = "", namespace: str = "") -> Any:
        args = ["get", kind] + ([name] if name else []) + ["-o", "json"]
        args += ["-n", namespace] if namespace else (["-A"] if not name else [])
        found = json.loads(self(*args))
        return found if name else found.get("items", [])

    def token_kubeconfig(
        self, path: Path, server: str, ca: Path, account: str, namespace: str
    ) -> Path:
        """A kubeconfig that acts as a ServiceAccount, as the component's Pod would. The CA
        is written in it: one kept in a Secret (provider-kubernetes' credentials) travels
        without the file it would name."""
        token = self("create", "token", account, "-n", namespace, "--duration=48h").strip()
        authority = base64.b64encode(ca.read_bytes()).decode()
        path.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [
                        {
                            "name": "e2e",
                            "cluster": {"server": server, "certificate-authority-data": authority},
                        }
                    ],
                    "users": [{"name": account, "user": {"token": token}}],
                    "contexts": [
                        {
                            "name": "e2e",
                            "context": {"cluster": "e2e", "user": account, "namespace": namespace},
                        }
                    ],
                    "current-context": "e2e",
                }
            )
        )
        path.chmod(0o600)
        return path

    def secret(self, name: str, namespace: str) -> dict[str, bytes]:
        found = json.loads(self("get", "secret", name, "-n", namespace, "-o", "json"))
        return {k: base64.b64decode(v) for k, v in (found.get("data") or {}).items()}

    def mount_secret(self, name: str, namespace: str, folder: Path, keys: Sequence[str]) -> Path:
        """What the kubelet does for a Secret volume: once the Secret holds `keys` (a
        controller fills it after it starts), its files in `folder`."""

        def filled() -> dict[str, bytes] | None:
            data = self.secret(name, namespace)
            return data if all(data.get(key) for key in keys) else None

        data = eventually(f"the Secret {namespace}/{name}", filled)
        folder.mkdir(parents=True, exist_ok=True)
        for key in keys:
            (folder / key).write_bytes(data[key])
        return folder

    def wait(
        self, condition: str, targets: Sequence[str], timeout: int = 600, namespace: str = ""
    ) -> None:
        """`kubectl wait`; when it times out, the error carries the targets' conditions. An
        object read before its controller wrote any status fails kubectl at once (".status.
        conditions accessor error"): that is waited out too."""
        where = ["-n", namespace] if namespace else []
        deadline = time.monotonic() + timeout
        try:
            while True:
                try:
                    self("wait", f"--for={condition}", f"--timeout={timeout}s", *targets, *where,
                         timeout=timeout + 60)  # fmt: skip
                    return
                except KubectlFailed as error:
                    if NO_STATUS_YET not in str(error) or time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
        except KubectlFailed as error:
            found = yaml.safe_load(self("get", *targets, *where, "-o", "yaml", check=False))
            conditions = {
                (item.get("metadata") or {}).get("name"): (item.get("status") or {}).get(
                    "conditions"
                )
                for item in (found or {}).get("items") or [found or {}]
            }
            raise KubectlFailed(f"{error}; their conditions: {json.dumps(conditions)}") from None


NO_STATUS_YET = ".status.conditions accessor error"


def documents(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def eventually(what: str, check, timeout: float = 600.0, interval: float = 0.5):
    """Poll `check` until it returns a truthy value; fail naming `what` and the last answer."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except (KubectlFailed, KeyError, IndexError, TypeError) as error:
            last = error
        else:
            if last:
                return last
        time.sleep(interval)
    raise TimeoutError(f"{what}: not within {timeout:.0f} s (last: {last!r})")
