"""devices: a node's per-card ledger and summary, and the two NodeFeatures NFD turns into labels.

`<node>-gpustack-worker` carries `gpustack.ai/managed` and the CPU keys; on accelerated nodes
`<node>-gpustack-device-manager` carries the accelerator keys and, with `workloadFitAffinity`,
the per-card fit labels. Both live in the Catalog's systemNamespace and target the node.
"""

from __future__ import annotations

from functions.core import labels
from functions.core.devices import SpecError, parse_devices
from functions.core.ledger import build_ledger
from functions.core.pools import summarize_devices
from functions.core.status import ledger_status, summary_status
from functions.frame import Handler, InputError, Output, Request
from functions.handlers.common import CATALOG, catalog_settings

NODE_NAME_LABEL = "nfd.node.kubernetes.io/node-name"


def node_feature(name: str, namespace: str, node: str, node_labels: dict[str, str]) -> dict:
    return {
        "apiVersion": "nfd.k8s-sigs.io/v1alpha1",
        "kind": "NodeFeature",
        "metadata": {"name": name, "namespace": namespace, "labels": {NODE_NAME_LABEL: node}},
        "spec": {"labels": dict(sorted(node_labels.items()))},
    }


class DevicesHandler(Handler):
    name = "devices"
    kinds = frozenset({"Devices"})

    def requirements(self, request: Request):
        return {"catalog": CATALOG}

    def compose(self, request: Request, out: Output) -> None:
        settings = catalog_settings(request)
        try:
            spec = parse_devices(request.xr.to_dict())
        except SpecError as error:
            raise InputError(
                error.path, f"{error.problem}; the node agent writes this field"
            ) from error
        ledger = build_ledger(spec)
        summary = summarize_devices(spec, settings.node_management_manual, ledger)
        out.status = {
            "groups": ledger_status(ledger),
            "summary": summary_status(summary),
            "conflicts": [
                {"pod": c.pod, "device": c.device, "reason": c.reason} for c in ledger.conflicts
            ],
        }
        for conflict in ledger.conflicts:
            out.warning(
                f"accelerator {conflict.device}: the allocation of pod {conflict.pod} does not fit "
                f"the ledger ({conflict.reason}); it is reported in status.conflicts",
                reason="AllocationConflict",
            )
        namespace, node = settings.system_namespace, spec.node
        out.compose(
            "worker",
            node_feature(
                f"{node}-gpustack-worker",
                namespace,
                node,
                labels.worker_labels(spec, summary.managed),
            ),
            ready=True,
        )
        if spec.groups:
            fit = summary.groups if settings.workload_fit_affinity else None
            out.compose(
                "device-manager",
                node_feature(
                    f"{node}-gpustack-device-manager",
                    namespace,
                    node,
                    labels.device_manager_labels(spec, fit),
                ),
                ready=True,
            )
