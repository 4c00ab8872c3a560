"""A VM node's state: what a GPUClass needs from one node, published as one small object per node.

Written by the devices handler, from the Node it requires by name; read by the gpuclass handler.
A class used to require every Node that can run VMs, each about 28 KiB as Crossplane hands it
over (its images, KubeVirt's node labeller's labels, its managedFields), to read a few fields of
each: past about 2,200 such Nodes its request passed the 64 MiB receive limit. Now it requires
one ConfigMap per node holding only those fields (docs/performance.md has the bytes).

The ConfigMap (`<node>-gpustack-vm-node` in the Catalog's systemNamespace) is composed for each
node where KubeVirt runs (the Node carries virt-handler's `kubevirt.io/schedulable`, "true" or
not). It carries, as labels, the Node's values of the labels the Catalog's `vm_nodes` names, so a
class selects these objects as it selected the Nodes; and one key, `state`: compact JSON holding
the node's name, whether it is Ready and cordoned, its NoSchedule/NoExecute taints, its extended
resources' allocatable quantities as the kubelet wrote them (a class parses its own), and the
same labels again (a class checks them from the text alone: functions/wire.py gathers the texts
of thousands of states without parsing the objects).

The state is as fresh as the devices handler's last reconcile of that node: on each write of the
agent, on each change of the Node where Crossplane watches required objects, and at the latest
on the devices handler's TTL (docs/gpuclass.md). Versioned like every published status.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from functions.core.status import StatusError, read_document, read_list, read_object, read_str

VERSION = 1
STATE_KEY = "state"
STATE_AT = f"data.{STATE_KEY}"
RESOURCE_TYPE = "vm-node"  # the value of labels.RESOURCE_TYPE on every VM node state
NAME_SUFFIX = "gpustack-vm-node"
BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")  # the taints that keep a VMI off a node
# A key every state has, quoted and followed by its colon, wherever it stands: a reader that
# gathers every string of many objects at once tells the states apart by it (`states_among`).
# No JSON string value holds it unescaped, and no name, uid or timestamp holds a quote.
_STATE_KEY_MARK = '"allocatable":'


def states_among(strings: Iterable[str]) -> list[str]:
    """The state texts among strings gathered from many objects at once, in their order."""
    return [text for text in strings if _STATE_KEY_MARK in text]


@dataclass(frozen=True)
class VmNode:
    """What a class reads of one node: `taints` only those that block scheduling, each a
    {key, value, effect} mapping; `allocatable` the extended resources (a name with a '/');
    `labels` the Node's values of the labels classes select VM nodes by."""

    node: str
    ready: bool
    unschedulable: bool
    taints: tuple[Mapping[str, str], ...]
    allocatable: Mapping[str, str]
    labels: Mapping[str, str]


def of_node(
    name: str, labels: Mapping[str, str], spec: Mapping[str, Any], status: Mapping[str, Any]
) -> VmNode:
    """The state of the Node `name` from the labels kept, its spec and its status, as plain
    data. Raises StatusError naming a field of the Node that cannot be read (a hand-made Node:
    the API server's schema keeps a real one readable)."""
    ready = False
    for index, condition in enumerate(read_list(status.get("conditions"), "status.conditions")):
        condition = read_object(condition, f"status.conditions[{index}]")
        ready = ready or (condition.get("type") == "Ready" and condition.get("status") == "True")
    taints = []
    for index, taint in enumerate(read_list(spec.get("taints"), "spec.taints")):
        at = f"spec.taints[{index}]"
        taint = read_object(taint, at)
        if taint.get("effect") in BLOCKING_EFFECTS:
            key, value = (read_str(taint.get(part), f"{at}.{part}") for part in ("key", "value"))
            taints.append({"key": key, "value": value, "effect": taint["effect"]})
    allocatable = read_object(status.get("allocatable"), "status.allocatable")
    extended = {
        resource: _quantity(amount, f"status.allocatable[{resource!r}]")
        for resource, amount in sorted(allocatable.items())
        if "/" in resource
    }
    unschedulable = spec.get("unschedulable") is True
    return VmNode(name, ready, unschedulable, tuple(taints), extended, dict(sorted(labels.items())))


def _quantity(amount: Any, at: str) -> str:
    """A quantity as the kubelet writes it (a string); a number, as a hand-made Node may hold
    one, written as a whole number where it is one. Whether it is a quantity is the reader's to
    say: the class names the node whose quantity it cannot count."""
    if isinstance(amount, bool) or not isinstance(amount, str | int | float):
        raise StatusError(at, f"must be a quantity, got {type(amount).__name__}")
    if isinstance(amount, float) and amount.is_integer():
        return str(int(amount))
    return str(amount)


def write(state: VmNode) -> dict[str, str]:
    """The ConfigMap's data: one compact JSON string, keys sorted (same state, same bytes)."""
    document = {
        "allocatable": dict(state.allocatable),
        "labels": dict(state.labels),
        "node": state.node,
        "ready": state.ready,
        "taints": [dict(t) for t in state.taints],
        "unschedulable": state.unschedulable,
        "v": VERSION,
    }
    return {STATE_KEY: json.dumps(document, sort_keys=True, separators=(",", ":"))}


def read(text: Any) -> VmNode:
    """A node's state from its `state` string. Raises StatusError naming what cannot be read.
    A newer version is read by the fields this release knows."""
    document = read_document(text, STATE_AT)
    version = document.get("v")
    if type(version) is not int or version < 1:
        raise StatusError(STATE_AT, f"v must be a version from 1 on, got {version!r}")
    node = read_str(document.get("node"), f"{STATE_AT}.node")
    if not node:
        raise StatusError(f"{STATE_AT}.node", "must name the node")
    allocatable = read_object(document.get("allocatable"), f"{STATE_AT}.allocatable")
    for resource, amount in allocatable.items():
        read_str(amount, f"{STATE_AT}.allocatable[{resource!r}]")
    labels = read_object(document.get("labels"), f"{STATE_AT}.labels")
    for key, value in labels.items():
        read_str(value, f"{STATE_AT}.labels[{key!r}]")
    return VmNode(
        node=node,
        ready=document.get("ready") is True,
        unschedulable=document.get("unschedulable") is True,
        taints=tuple(_taints(document.get("taints"))),
        allocatable=allocatable,
        labels=labels,
    )


def _taints(value: Any) -> Iterable[Mapping[str, str]]:
    for index, taint in enumerate(read_list(value, f"{STATE_AT}.taints")):
        at = f"{STATE_AT}.taints[{index}]"
        taint = read_object(taint, at)
        yield {
            part: read_str(taint.get(part), f"{at}.{part}") for part in ("key", "value", "effect")
        }
