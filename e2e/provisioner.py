"""A CSI external-provisioner's part, the one piece of storage that cannot run here: its driver
would need a kubelet. A claim of an Immediate StorageClass gets a PersistentVolume made for it
(pre-bound by `claimRef`, annotated as a provisioner annotates it); kube-controller-manager's
real PersistentVolume controller then binds the two, as it does behind any provisioner.

A claim naming no class takes the default one; one of a WaitForFirstConsumer class, or of a
class that does not exist, stays Pending, as without a provisioner.
"""

from __future__ import annotations

from typing import Any

from e2e.api import Api

DEFAULT_CLASS = "storageclass.kubernetes.io/is-default-class"
PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"


def default_class(classes: dict[str, dict[str, Any]]) -> str:
    for name, found in sorted(classes.items()):
        if (found["metadata"].get("annotations") or {}).get(DEFAULT_CLASS) == "true":
            return name
    return ""


def volume_for(claim: dict[str, Any], storage_class: dict[str, Any]) -> dict[str, Any]:
    """The volume a provisioner makes for `claim`: named after its uid (`pvc-<uid>`)."""
    metadata = claim["metadata"]
    name = f"pvc-{metadata['uid']}"
    provisioner = storage_class["provisioner"]
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name, "annotations": {PROVISIONED_BY: provisioner}},
        "spec": {
            "accessModes": claim["spec"]["accessModes"],
            "capacity": {"storage": claim["spec"]["resources"]["requests"]["storage"]},
            "storageClassName": storage_class["metadata"]["name"],
            "persistentVolumeReclaimPolicy": storage_class.get("reclaimPolicy") or "Delete",
            "claimRef": {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "namespace": metadata["namespace"],
                "name": metadata["name"],
                "uid": metadata["uid"],
            },
            "csi": {"driver": provisioner, "volumeHandle": name},
        },
    }


def provision(api: Api) -> None:
    """One pass: a volume for every Pending claim of an Immediate class that has none yet."""
    classes = {c["metadata"]["name"]: c for c in api.list("StorageClass")}
    default = default_class(classes)
    volumes = {v["metadata"]["name"] for v in api.list("PersistentVolume")}
    for claim in api.list("PersistentVolumeClaim"):
        if (claim.get("status") or {}).get("phase") != "Pending" or claim["spec"].get("volumeName"):
            continue
        storage_class = classes.get(claim["spec"].get("storageClassName") or default)
        if storage_class is None:
            continue
        if storage_class.get("volumeBindingMode", "Immediate") != "Immediate":
            continue
        volume = volume_for(claim, storage_class)
        if volume["metadata"]["name"] not in volumes:
            api.create(volume)
