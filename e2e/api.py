"""The control plane through Kubernetes' Python client, by kind, as plain dicts: what the
simulated node (e2e/node.py) and the stand-in device plugins read (`get`, `list`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import NotFoundError, ResourceNotFoundError


def configuration(kubeconfig: Path) -> kubernetes.client.Configuration:
    config = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(config_file=str(kubeconfig), client_configuration=config)
    return config


class Api:
    def __init__(self, kubeconfig: Path):
        self.config = configuration(kubeconfig)
        self.client = kubernetes.client.ApiClient(self.config)
        self.dynamic = DynamicClient(self.client)
        self.core = kubernetes.client.CoreV1Api(self.client)

    def resource(self, kind: str) -> Any:
        return self.dynamic.resources.get(kind=kind)

    def get(self, kind: str, name: str, namespace: str = "") -> dict[str, Any] | None:
        try:
            found = self.resource(kind).get(name=name, namespace=namespace or None)
        except (NotFoundError, ResourceNotFoundError):
            return None
        return found.to_dict()

    def list(self, kind: str) -> list[dict[str, Any]]:
        try:
            found = self.resource(kind).get()
        except ResourceNotFoundError:  # the kind's CRD is not installed
            return []
        return [item.to_dict() for item in found.items]

    def patch_status(self, kind: str, name: str, namespace: str, status: dict[str, Any]) -> None:
        self.resource(kind).status.patch(
            name=name,
            namespace=namespace or None,
            body={"status": status},
            content_type="application/merge-patch+json",
        )

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        kind = obj["kind"]
        namespace = obj["metadata"].get("namespace")
        return self.resource(kind).create(body=obj, namespace=namespace).to_dict()
