"""instancepersistentvolume: a tenant's volume becomes a PersistentVolumeClaim of the same name.

The claim is ready once Bound; the composite reports the claim's phase and, once bound, its
volume.
"""

from __future__ import annotations

import datetime

from functions.core import apis
from functions.handlers.base import Handler, Request
from functions.handlers.desired import Desired

KINDS = frozenset({"InstancePersistentVolume", "XInstancePersistentVolume"})


def compose(request: Request) -> Desired:
    spec = request.xr.view("spec")
    claim = {
        "apiVersion": apis.CORE,
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": request.name, "namespace": request.namespace},
        "spec": {
            "accessModes": [spec.str("accessMode") or "ReadWriteOnce"],
            "resources": {"requests": {"storage": str(spec.get("capacity") or "20Gi")}},
        },
    }
    if spec.str("type"):
        claim["spec"]["storageClassName"] = spec.str("type")
    desired = Desired()
    observed = request.observed("claim")
    desired.compose("claim", claim, observed)
    phase = observed.str("status", "phase") if observed is not None else ""
    desired.status = {"phase": phase or "Pending"}
    if observed is not None and observed.str("spec", "volumeName"):
        desired.status["volume"] = observed.str("spec", "volumeName")
    return desired


HANDLER = Handler(
    "instancepersistentvolume",
    KINDS,
    compose,
    ttl=datetime.timedelta(minutes=5),  # only the observed claim changes it, and it is watched
)
