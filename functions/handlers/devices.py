"""devices: a node's per-card ledger and summary, and the two NodeFeatures NFD turns into labels.

`<node>-gpustack-worker` carries `gpustack.ai/managed` and the CPU keys; on accelerated nodes
`<node>-gpustack-device-manager` carries the accelerator keys and, with `workloadFitAffinity`,
the per-card fit labels. Both live in the Catalog's systemNamespace and target the node.
"""

from __future__ import annotations

from functions.core import apis, labels, reasons
from functions.core.devices import SpecError, parse_devices
from functions.core.ledger import build_ledger
from functions.core.pools import summarize_devices
from functions.core.status import devices as devices_status
from functions.handlers.base import Handler, InputError, Request, Requirement
from functions.handlers.desired import Desired
from functions.handlers.inputs import CATALOG, catalog_settings


def node_feature(name: str, namespace: str, node: str, node_labels: dict[str, str]) -> dict:
    return {
        "apiVersion": apis.NFD,
        "kind": "NodeFeature",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {labels.NFD_NODE_NAME: node},
        },
        "spec": {"labels": dict(sorted(node_labels.items()))},
    }


def requirements(request: Request) -> dict[str, Requirement]:
    return {"catalog": CATALOG}


def compose(request: Request) -> Desired:
    desired = Desired()
    settings = catalog_settings(request, desired)
    try:
        spec = parse_devices(request.xr.to_dict())
    except SpecError as error:
        raise InputError(
            error.path, f"{error.problem}; the node agent writes this field"
        ) from error
    ledger = build_ledger(spec, settings.dialect.fixed_partitions)
    summary = summarize_devices(spec, settings.node_management_manual, ledger)
    desired.status = devices_status.write(ledger, summary)
    for conflict in ledger.conflicts:
        desired.warning(
            f"accelerator {conflict.device}: the allocation of pod {conflict.pod} does not fit "
            f"the ledger ({conflict.reason}); it is reported in status.conflicts",
            reasons.ALLOCATION_CONFLICT,
        )
    namespace, node = settings.system_namespace, spec.node
    worker = labels.worker_labels(spec, summary.managed)
    desired.compose(
        "worker",
        node_feature(f"{node}-gpustack-worker", namespace, node, worker),
        request.observed("worker"),
    )
    if spec.groups:
        fit = summary.groups if settings.workload_fit_affinity else None
        device_labels = labels.device_manager_labels(spec, fit)
        desired.compose(
            "device-manager",
            node_feature(f"{node}-gpustack-device-manager", namespace, node, device_labels),
            request.observed("device-manager"),
        )
    return desired


HANDLER = Handler("devices", frozenset({"Devices"}), compose, requirements)
