"""A CSI provisioner's part: a claim of an Immediate StorageClass gets a new network volume.

A claim naming no class takes the default one (`storageclass.kubernetes.io/is-default-class`);
a claim of a WaitForFirstConsumer class, or of no class at all, stays Pending.
"""

from __future__ import annotations

from typing import Any

from gpustack_sim.client import Client

DEFAULT_CLASS = "storageclass.kubernetes.io/is-default-class"


class Provisioner:
    def __init__(self, api: Client):
        self.api = api

    def run(self) -> None:
        classes = {c["metadata"]["name"]: c for c in self.api.list("StorageClass")}
        default = next(
            (
                n
                for n, c in classes.items()
                if (c["metadata"].get("annotations") or {}).get(DEFAULT_CLASS) == "true"
            ),
            "",
        )
        for claim in self.api.list("PersistentVolumeClaim"):
            if (claim.get("status") or {}).get("phase") == "Bound":
                continue
            storage_class = classes.get(claim["spec"].get("storageClassName") or default)
            immediate = (
                storage_class is not None
                and storage_class.get("volumeBindingMode", "Immediate") == "Immediate"
            )
            if immediate:
                self.bind(claim, storage_class)
            elif (claim.get("status") or {}).get("phase") != "Pending":
                claim["status"] = {"phase": "Pending"}
                self.api.update_status(claim)

    def bind(self, claim: dict[str, Any], storage_class: dict[str, Any]) -> None:
        namespace, name = claim["metadata"]["namespace"], claim["metadata"]["name"]
        volume = f"pv-{namespace}-{name}"
        self.api.apply(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": volume},
                "spec": {
                    "accessModes": claim["spec"]["accessModes"],
                    "capacity": {"storage": claim["spec"]["resources"]["requests"]["storage"]},
                    "storageClassName": storage_class["metadata"]["name"],
                    "claimRef": {"namespace": namespace, "name": name},
                    "csi": {"driver": storage_class["provisioner"], "volumeHandle": volume},
                },
            }
        )
        claim["spec"]["volumeName"] = volume
        claim = self.api.apply(claim)
        claim["status"] = {"phase": "Bound"}
        self.api.update_status(claim)
