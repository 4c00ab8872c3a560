"""The least an unchanged Devices' answer can cost: a bound on the devices handler's floor ratio.

On a TTL reconcile of a node whose readings did not change, the devices handler answers with
what it last composed: the observed status, and each observed composed object less what the
API server and Crossplane added. `answer` builds that same response — byte for byte what our
handler returns, which `make bench` checks before it times anything — with protobuf copies
alone: no view, no handler, no Python per value. It checks none of the inputs the handler must
check before it may answer so (the spec, the Catalog's settings, the Node), so it costs less
than any correct handler that answers from the parsed request, as ours and every SDK function
do: what it measures against the floor bounds theirs from below.
"""

from __future__ import annotations

from typing import Any

from crossplane.function import response
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from functions.core import apis, names
from functions.handlers import devices
from functions.handlers.inputs import CROSSPLANE_KEYS

KEPT_METADATA = frozenset({"name", "namespace", "labels", "annotations"})


def answer(payload: bytes) -> bytes:
    """The devices handler's answer to an unchanged Devices (every composed object observed,
    and ready: NodeFeatures and ConfigMaps are ready once they exist)."""
    req = fnv1.RunFunctionRequest.FromString(payload)
    rsp = response.to(req, devices.TTL)
    status = rsp.desired.composite.resource.fields["status"].struct_value
    status.CopyFrom(req.observed.composite.resource.fields["status"].struct_value)
    if "conditions" in status.fields:  # Crossplane's own
        del status.fields["conditions"]
    for name, observed in req.observed.resources.items():
        composed = rsp.desired.resources[name]
        composed.resource.CopyFrom(observed.resource)
        _as_desired(composed.resource.fields)
        composed.ready = fnv1.READY_TRUE
    node = req.observed.composite.resource.fields["metadata"].struct_value.fields["name"]
    for key, api_version, kind, name in (
        ("catalog", apis.WORKER, "Catalog", names.CATALOG),
        ("node", apis.CORE, "Node", node.string_value),
    ):
        selector = rsp.requirements.resources[key]
        selector.api_version, selector.kind, selector.match_name = api_version, kind, name
    return rsp.SerializeToString(deterministic=True)


def _as_desired(fields: Any) -> None:
    """An observed object's fields (a Struct's map) as it was desired, as `inputs.as_desired`
    makes it: no status, only its name, namespace, labels and annotations of its metadata, and
    none of Crossplane's keys among those."""
    if "status" in fields:
        del fields["status"]
    metadata = fields["metadata"].struct_value.fields
    for key in [key for key in metadata if key not in KEPT_METADATA]:
        del metadata[key]
    for key in ("labels", "annotations"):
        if key in metadata:
            values = metadata[key].struct_value.fields
            for stamped in [k for k in values if k.startswith(CROSSPLANE_KEYS)]:
                del values[stamped]
            if not values:
                del metadata[key]
