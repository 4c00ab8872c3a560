"""The control plane through Kubernetes' Python client, by kind, as plain dicts: what the
simulated node (e2e/node.py) and the stand-ins for what cannot run here (the device plugins,
the GPU Operator's node labelling and GPU feature discovery) read and write, with the methods
of the simulator's client they call (simulator/gpustack_sim/client.py)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import kubernetes
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import NotFoundError, ResourceNotFoundError

from functions.core import apis

# Kinds the API server serves in more than one version, by the one read and written here.
API_VERSIONS = {
    **{
        kind: apis.RESOURCE
        for kind in ("DeviceClass", "ResourceClaim", "ResourceClaimTemplate", "ResourceSlice")
    },
    **{kind: apis.KUEUE for kind in ("ClusterQueue", "LocalQueue", "ResourceFlavor", "Workload")},
}


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
        return self.dynamic.resources.get(kind=kind, api_version=API_VERSIONS.get(kind))

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

    # the simulator's read-only reads: here every read is a copy already
    peek = get
    peek_list = list

    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        """An update of the whole object, as client-go's Update: refused (and retried by the
        caller's next pass) when the object changed since it was read; a create where there is
        none yet (a driver publishing its ResourceSlice)."""
        namespace = obj["metadata"].get("namespace")
        try:
            return self.resource(obj["kind"]).replace(body=obj, namespace=namespace).to_dict()
        except NotFoundError:
            return self.create(obj)

    def delete(self, kind: str, name: str, namespace: str = "") -> None:
        with contextlib.suppress(NotFoundError):  # already gone
            self.resource(kind).delete(name=name, namespace=namespace or None)

    def patch_status(self, kind: str, name: str, namespace: str, status: dict[str, Any]) -> None:
        self.resource(kind).status.patch(
            name=name,
            namespace=namespace or None,
            body={"status": status},
            content_type="application/merge-patch+json",
        )

    def bind(self, name: str, namespace: str, node: str) -> None:
        """A Pod's binding (`pods/binding`), as a scheduler writes it."""
        body = kubernetes.client.V1Binding(
            metadata=kubernetes.client.V1ObjectMeta(name=name, namespace=namespace),
            target=kubernetes.client.V1ObjectReference(kind="Node", name=node),
        )
        # the client cannot read the Binding back (kubernetes-client/python#547): left unread
        self.core.create_namespaced_pod_binding(name, namespace, body, _preload_content=False)

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        kind = obj["kind"]
        namespace = obj["metadata"].get("namespace")
        return self.resource(kind).create(body=obj, namespace=namespace).to_dict()
