"""GPUClass offers (seed 003): availability over eligible nodes, and the three conditions."""

from __future__ import annotations

import copy

import pytest

from gpustack_sim import World, load_documents, world_from
from gpustack_sim.nodelifecycle import NodeLifecycle
from tests.support.schemas import ROOT

EXAMPLES = ROOT / "examples" / "gpuclass"
TOKEN = "c3ludGhldGljLXRva2Vu"  # base64 of a synthetic token: it must never be echoed


@pytest.fixture
def world() -> World:
    world = world_from([EXAMPLES / "cluster.yaml", EXAMPLES / "classes.yaml"])
    world.reconcile()
    return world


def conditions(world: World, name: str) -> dict[str, tuple[str, str]]:
    status = world.get("GPUClass", name)["status"]
    return {c["type"]: (c["status"], c.get("message", "")) for c in status["conditions"]}


def test_free_counts_only_eligible_nodes(world):
    status = world.get("GPUClass", "example-whole-gpu")["status"]
    # gpu-a: 4 − 1 used by a launcher; gpu-b is tainted and the class has no toleration; gpu-c is cordoned.
    assert (status["free"], status["maxFreePerNode"], status["maxPerNode"]) == (3, 3, 4)
    assert conditions(world, "example-whole-gpu")["ResourceNameNotPermitted"][0] == "False"
    assert conditions(world, "example-whole-gpu")["Ready"][0] == "True"
    assert conditions(world, "example-byol-vgpu")["Ready"][0] == "False"  # not permitted


def test_a_toleration_makes_a_tainted_node_eligible(world):
    world.patch(
        "GPUClass",
        "example-whole-gpu",
        {
            "tolerations": [
                {"key": "gpu", "operator": "Equal", "value": "tenant", "effect": "NoSchedule"}
            ]
        },
    )
    world.reconcile()
    status = world.get("GPUClass", "example-whole-gpu")["status"]
    assert (status["free"], status["maxFreePerNode"], status["maxPerNode"]) == (11, 8, 8)


def test_only_nodes_where_virt_handler_runs_count(world):
    """KubeVirt runs a VMI only where virt-handler's heartbeat labels the node schedulable (every
    launcher selects it): a node virt-handler does not tolerate, or whose heartbeat stopped,
    offers nothing, whatever the class tolerates."""
    tolerate_tenants = [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]
    world.patch("GPUClass", "example-whole-gpu", {"tolerations": tolerate_tenants})
    world.patch("KubeVirt", "kubevirt", {"workloads": None}, "cozy-kubevirt")
    world.reconcile()
    labels = {n["metadata"]["name"]: n["metadata"]["labels"] for n in world.list("Node")}
    assert labels["gpu-b"]["kubevirt.io/schedulable"] == "false"  # virt-handler left gpu-b
    status = world.get("GPUClass", "example-whole-gpu")["status"]
    assert (status["free"], status["maxFreePerNode"], status["maxPerNode"]) == (3, 3, 4)

    gpu_a = world.get("Node", "gpu-a")
    gpu_a["status"]["conditions"] = [{"type": "Ready", "status": "Unknown"}]
    world.api.update_status(gpu_a)  # the node stops answering: its heartbeat stops
    world.reconcile()
    assert world.get("Node", "gpu-a")["metadata"]["labels"]["kubevirt.io/schedulable"] == "false"
    status = world.get("GPUClass", "example-whole-gpu")["status"]
    assert (status["free"], status["maxPerNode"]) == (0, 0)


SCHEDULABLE = {"kubevirt.io/schedulable": "true"}
SANDBOX = {"nvidia.com/gpu.deploy.sandbox-device-plugin": "true"}  # the GPU Operator's VM nodes


@pytest.mark.parametrize(
    ("catalogs", "nodes"),
    [
        # Before the Catalog is read no node is asked for: its vmNodeSelector says which.
        pytest.param(None, None, id="catalog not read yet"),
        pytest.param([], SCHEDULABLE, id="no Catalog: every node virt-handler runs on"),
        pytest.param([{"spec": {}}], SCHEDULABLE, id="no selector set"),
        pytest.param(
            [{"spec": {"vmNodeSelector": SANDBOX}}], {**SANDBOX, **SCHEDULABLE}, id="selector set"
        ),
        pytest.param(
            [{"spec": {"vmNodeSelector": {"kubevirt.io/schedulable": "false"}}}],
            SCHEDULABLE,
            id="KubeVirt's own label cannot be overridden",
        ),
        pytest.param(
            [{"spec": {"vmNodeSelector": {"bad key": "x"}}}],
            SCHEDULABLE,
            id="unreadable selector: the defaults (the Catalog's reconcile refuses it)",
        ),
    ],
)
def test_the_class_requires_only_nodes_that_can_run_vmis(catalogs, nodes):
    from functions.handlers import gpuclass
    from functions.handlers.base import Request

    offer = load_documents(EXAMPLES / "whole-gpu.yaml")[0]
    catalog = [{"metadata": {"name": "default"}, **c} for c in catalogs or ()]
    request = Request.of(offer, required={"catalog": catalog if catalogs is not None else None})
    found = gpuclass.requirements(request).get("states")
    if nodes is None:
        assert found is None
    else:  # the VM node states the devices handler keeps, labelled as their Nodes are
        assert (found.kind, found.namespace) == ("ConfigMap", "gpustack-system")
        assert found.match_labels == {"resource.gpustack.ai/type": "vm-node", **nodes}


def test_the_catalogs_vm_node_selector_counts_the_gpu_operators_vm_nodes(world):
    """With the GPU Operator's sandbox workloads, the operator labels each GPU node by its
    workload config; a Catalog whose vmNodeSelector is the VM nodes' label counts a node only
    while the operator runs it for VMs."""
    policy = {"sandboxWorkloads": {"enabled": True, "defaultWorkload": "container"}}
    world.apply(
        {
            "apiVersion": "nvidia.com/v1",
            "kind": "ClusterPolicy",
            "metadata": {"name": "p"},
            "spec": policy,
        },
        {
            "apiVersion": "worker.gpustack.ai/v1alpha1",
            "kind": "Catalog",
            "metadata": {"name": "default"},
            "spec": {"vmNodeSelector": SANDBOX},
        },
    )

    def label_gpu_a(**labels: str) -> tuple[int, int, int]:
        node = world.get("Node", "gpu-a")
        node["metadata"]["labels"].update(labels)
        world.api.update(node)
        world.reconcile()
        status = world.get("GPUClass", "example-whole-gpu")["status"]
        return status["free"], status["maxFreePerNode"], status["maxPerNode"]

    # NFD finds an NVIDIA device: a GPU node, run for containers by default.
    assert label_gpu_a(**{"feature.node.kubernetes.io/pci-10de.present": "true"}) == (0, 0, 0)
    assert (
        world.get("Node", "gpu-a")["metadata"]["labels"]["nvidia.com/gpu.deploy.device-plugin"]
        == "true"
    )
    # The admin runs it for VMs: the operator moves it to its sandbox device plugin.
    assert label_gpu_a(**{"nvidia.com/gpu.workload.config": "vm-passthrough"}) == (3, 3, 4)
    assert (
        "nvidia.com/gpu.deploy.device-plugin"
        not in world.get("Node", "gpu-a")["metadata"]["labels"]
    )
    # Operands turned off on the node: no plugin, so no VM GPUs counted there.
    assert label_gpu_a(**{"nvidia.com/gpu.deploy.operands": "false"}) == (0, 0, 0)


def node(name: str, allocatable: dict[str, str], labels: dict[str, str] = SCHEDULABLE) -> dict:
    """A Ready Node as its kubelet publishes it, with `allocatable` beside its cores."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "status": {
            "allocatable": {"cpu": "64", **allocatable},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def vm_node(name: str, allocatable: dict[str, str], labels: dict[str, str] = SCHEDULABLE) -> dict:
    """The VM node state the devices handler keeps of such a Node (the Catalog selecting the
    GPU Operator's VM nodes, so that their label is carried too)."""
    from functions.core.settings import Settings
    from functions.handlers import devices
    from functions.handlers.base import Request
    from functions.handlers.desired import Desired

    devices_xr = {"apiVersion": "worker.gpustack.ai/v1alpha1", "kind": "Devices"}
    request = Request.of(
        {**devices_xr, "metadata": {"name": name}},
        required={"node": [node(name, allocatable, labels)]},
    )
    settings = Settings.from_spec({"vmNodeSelector": SANDBOX})
    found = devices.vm_node_config_map(request, settings, Desired())
    assert found is not None
    return found


def fleet(count: int, advertised: dict[str, str]) -> list[dict]:
    """`count` nodes' states, advertising `advertised`; those that advertise anything are VM
    nodes."""
    labels = {**SCHEDULABLE, **(SANDBOX if advertised else {})}
    role = "vm" if advertised else "idle"
    return [vm_node(f"{role}-{i:05d}", advertised, labels) for i in range(count)]


UNSELECTED = (
    "this class reads 1,250 nodes, 1,000 of which advertise no resource KubeVirt permits: set "
    "the Catalog's vmNodeSelector to a label only the VM nodes carry (with the NVIDIA GPU "
    'Operator, nvidia.com/gpu.deploy.sandbox-device-plugin: "true"); every reconcile of a '
    "class carries the state of each node it reads"
)


WHOLE_GPU = {"example.com/whole-gpu": "4"}


@pytest.mark.parametrize(
    ("idle", "vm_nodes", "catalog", "in_conflict", "warned"),
    [
        pytest.param(1000, WHOLE_GPU, {}, False, True, id="1,000 idle Nodes"),
        pytest.param(999, WHOLE_GPU, {}, False, False, id="999 idle Nodes"),
        pytest.param(
            1000, WHOLE_GPU, {"vmNodeSelector": SANDBOX}, False, False, id="a selector is set"
        ),
        pytest.param(
            0,
            {"example.com/licensed-vgpu": "8"},
            {},
            False,
            False,
            id="every Node serves another class",
        ),
        pytest.param(1000, WHOLE_GPU, {}, True, True, id="in conflict with an older class"),
    ],
)
def test_a_class_reading_many_nodes_that_serve_no_vm_says_to_select(
    idle, vm_nodes, catalog, in_conflict, warned
):
    """Nodes that advertise no resource KubeVirt permits can serve no VM, yet each one's state is
    carried by every reconcile: past 1,000 of them, a Warning names the setting that leaves them
    out (counted only while no selector is set). A class in conflict with an older one offers
    no unit, but its request carries the same Nodes."""
    from functions.handlers import gpuclass
    from functions.handlers.base import Request

    offer = load_documents(EXAMPLES / "whole-gpu.yaml")[0]
    older = {**offer, "metadata": {**offer["metadata"], "name": "a-whole-gpu-offer-made-first"}}
    kubevirt = next(d for d in load_documents(EXAMPLES / "cluster.yaml") if d["kind"] == "KubeVirt")
    nodes = fleet(idle, {}) + fleet(250 if idle else 1250, vm_nodes)
    required = {
        "catalog": [{"metadata": {"name": "default"}, "spec": catalog}],
        "classes": [offer, older] if in_conflict else [offer],
        "kubevirt": [kubevirt],
        "states": nodes,
        "launchers": [],
    }
    request = Request.of(offer, required=required)
    desired = gpuclass.compose(request.with_requirements(gpuclass.requirements(request)))
    found = [r.message for r in desired.results if r.reason == "VMNodesUnselected"]
    assert found == ([UNSELECTED] if warned else [])
    offered = "example.com/whole-gpu" in vm_nodes and not in_conflict
    assert desired.status["maxPerNode"] == (4 if offered else 0)


def test_an_unpermitted_resource_is_reported(world):
    message = conditions(world, "example-byol-vgpu")["ResourceNameNotPermitted"]
    assert message == (
        "True",
        "example.com/byol-vgpu is missing from the KubeVirt CR's permittedHostDevices; configure the "
        "VM-facing GPU path and the table before retrying",
    )


def test_a_missing_license_secret_and_then_a_present_one(world):
    assert conditions(world, "example-licensed-vgpu")["LicenseSecretMissing"] == (
        "True",
        "license Secret example-vgpu-license not found in the license namespace; create it through "
        "the hoster's secret management",
    )
    world.apply(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "example-vgpu-license", "namespace": "cozy-system"},
            "data": {"client_configuration_token.tok": TOKEN},
        }
    )
    world.reconcile()
    assert conditions(world, "example-licensed-vgpu")["LicenseSecretMissing"][0] == "False"
    assert world.get("GPUClass", "example-licensed-vgpu")["status"]["free"] == 8
    assert TOKEN not in repr(world.get("GPUClass", "example-licensed-vgpu"))
    assert TOKEN not in repr(world.results)


def test_a_second_class_on_the_same_resource_conflicts(world):
    """The older class keeps the resource: the younger one conflicts, even where its name would
    sort first (the API server stamps each class's creationTimestamp by the cluster's clock)."""
    duplicate = copy.deepcopy(load_documents(EXAMPLES / "classes.yaml")[0])
    duplicate["metadata"] = {"name": "a-whole-gpu-copy"}
    next(c for c in world.controllers if isinstance(c, NodeLifecycle)).sleep(60)
    world.apply(duplicate)
    world.reconcile()
    assert world.get("GPUClass", "a-whole-gpu-copy")["metadata"]["creationTimestamp"] == (
        "2026-01-01T00:01:00Z"
    )
    assert conditions(world, "a-whole-gpu-copy")["ResourceNameConflict"] == (
        "True",
        "class example-whole-gpu already uses example.com/whole-gpu; this offer is not available — "
        "give each offer its own advertised resource",
    )
    assert world.get("GPUClass", "a-whole-gpu-copy")["status"]["free"] == 0
    assert conditions(world, "example-whole-gpu")["ResourceNameConflict"][0] == "False"


def test_a_node_whose_allocatable_cannot_be_read_is_left_out_and_named():
    from functions.handlers import gpuclass
    from functions.handlers.base import Request

    offer = load_documents(EXAMPLES / "whole-gpu.yaml")[0]
    resource = "example.com/whole-gpu"

    # 1e400: found by `make soak`'s fuzzing; a status number is a double, and this one
    # overflowed it, failing the whole reconcile.
    nodes = [
        vm_node(name, {resource: units})
        for name, units in (("gpu-a", "4"), ("gpu-b", "four"), ("gpu-c", "1e400"))
    ]
    desired = gpuclass.compose(Request.of(offer, required={"states": nodes}))
    assert (desired.status["free"], desired.status["maxFreePerNode"]) == (4, 4)
    assert desired.status["maxPerNode"] == 4
    assert [(r.severity.name, r.message) for r in desired.results] == [
        (
            "WARNING",
            "Node gpu-b: status.allocatable['example.com/whole-gpu']: 'four' is not a quantity "
            "(expected e.g. 8, 500m, 64Gi); the node is left out of this class's free units",
        ),
        (
            "WARNING",
            "Node gpu-c: status.allocatable['example.com/whole-gpu']: '1e400' is more devices "
            "than a node can advertise; the node is left out of this class's free units",
        ),
    ]


# --- each node's VM node state: kept by the devices handler from its Node, read by classes -------

STATE_NAME = "gpu-x-gpustack-vm-node"


def devices_of(node_object: dict, catalog_spec: dict | None = None) -> dict:
    """What the devices handler composes for gpu-x's Devices, reading `node_object`."""
    from functions.handlers import devices
    from functions.handlers.base import Request
    from tests.support.vm_nodes import agent_devices

    catalog = [{"metadata": {"name": "default"}, "spec": catalog_spec or {}}]
    request = Request.of(
        agent_devices("gpu-x"), required={"catalog": catalog, "node": [node_object]}
    )
    return devices.compose(request).resources


def tainted(*effects: str) -> dict:
    found = node("gpu-x", WHOLE_GPU)
    found["spec"] = {"taints": [{"key": f"k{i}", "effect": e} for i, e in enumerate(effects)]}
    return found


def cordoned_not_ready() -> dict:
    found = node("gpu-x", WHOLE_GPU)
    found["spec"] = {"unschedulable": True}
    found["status"]["conditions"] = [{"type": "Ready", "status": "Unknown"}]
    return found


VM_NODE_CASES = [
    pytest.param(node("gpu-x", WHOLE_GPU, {}), {}, None, None, id="no virt-handler: no state"),
    pytest.param(
        node("gpu-x", WHOLE_GPU),
        {},
        SCHEDULABLE,
        '{"allocatable":{"example.com/whole-gpu":"4"},'
        '"labels":{"kubevirt.io/schedulable":"true"},"node":"gpu-x","ready":true,"taints":[],'
        '"unschedulable":false,"v":1}',
        id="a Ready VM node: its extended resources, not its cores",
    ),
    pytest.param(
        node("gpu-x", WHOLE_GPU, {"kubevirt.io/schedulable": "false"}),
        {},
        {"kubevirt.io/schedulable": "false"},
        '{"allocatable":{"example.com/whole-gpu":"4"},'
        '"labels":{"kubevirt.io/schedulable":"false"},"node":"gpu-x","ready":true,"taints":[],'
        '"unschedulable":false,"v":1}',
        id="a stopped heartbeat: the label as it is, which no class selects",
    ),
    pytest.param(
        node("gpu-x", WHOLE_GPU, {**SCHEDULABLE, **SANDBOX, "other": "x"}),
        {"vmNodeSelector": SANDBOX},
        {**SANDBOX, **SCHEDULABLE},
        '{"allocatable":{"example.com/whole-gpu":"4"},'
        '"labels":{"kubevirt.io/schedulable":"true","nvidia.com/gpu.deploy.sandbox-device-plugin":"true"},"node":"gpu-x","ready":true,"taints":[],'
        '"unschedulable":false,"v":1}',
        id="the Catalog's vmNodeSelector: its labels carried, no other",
    ),
    pytest.param(
        node("gpu-x", WHOLE_GPU),
        {"vmNodeSelector": SANDBOX},
        SCHEDULABLE,
        '{"allocatable":{"example.com/whole-gpu":"4"},'
        '"labels":{"kubevirt.io/schedulable":"true"},"node":"gpu-x","ready":true,"taints":[],'
        '"unschedulable":false,"v":1}',
        id="a selector label the Node lacks: absent, so no class selects it",
    ),
    pytest.param(
        tainted("NoSchedule", "PreferNoSchedule", "NoExecute"),
        {},
        SCHEDULABLE,
        '{"allocatable":{"example.com/whole-gpu":"4"},'
        '"labels":{"kubevirt.io/schedulable":"true"},"node":"gpu-x","ready":true,"taints":['
        '{"effect":"NoSchedule","key":"k0","value":""},{"effect":"NoExecute","key":"k2",'
        '"value":""}],"unschedulable":false,"v":1}',
        id="the taints that block a VMI, no other",
    ),
    pytest.param(
        cordoned_not_ready(),
        {},
        SCHEDULABLE,
        '{"allocatable":{"example.com/whole-gpu":"4"},'
        '"labels":{"kubevirt.io/schedulable":"true"},"node":"gpu-x","ready":false,"taints":[],'
        '"unschedulable":true,"v":1}',
        id="cordoned, and its kubelet unheard",
    ),
]


@pytest.mark.parametrize(("node_object", "catalog", "state_labels", "state"), VM_NODE_CASES)
def test_the_devices_handler_keeps_the_state_of_a_node_kubevirt_runs_on(
    node_object, catalog, state_labels, state
):
    composed = devices_of(node_object, catalog)
    if state is None:
        assert "vm-node" not in composed
        return
    assert composed["vm-node"] == {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": STATE_NAME,
            "namespace": "gpustack-system",
            "labels": {**state_labels, "resource.gpustack.ai/type": "vm-node"},
        },
        "data": {"state": state},
    }


def test_a_change_of_the_node_alone_is_a_new_state_and_no_change_recomputes_nothing(monkeypatch):
    from functions.handlers import devices
    from functions.handlers.base import Request
    from functions.views import plain
    from tests.support.vm_nodes import agent_devices

    catalog = [{"metadata": {"name": "default"}, "spec": {}}]

    def reconcile(node_object: dict, last: dict | None = None) -> dict:
        """One reconcile reading `node_object`, after `last` (its status and composed objects)."""
        obj, observed = agent_devices("gpu-x"), {}
        if last is not None:
            obj["status"], observed = last["status"], last["resources"]
        request = Request.of(obj, observed, required={"catalog": catalog, "node": [node_object]})
        desired = devices.compose(request)
        return plain({"status": desired.status, "resources": desired.resources})

    first = reconcile(node("gpu-x", WHOLE_GPU))
    recomputed: list[int] = []
    real = devices.build_ledger
    monkeypatch.setattr(devices, "build_ledger", lambda *a: recomputed.append(1) or real(*a))
    again = reconcile(node("gpu-x", WHOLE_GPU), first)
    assert recomputed == [] and again == first
    cordoned = node("gpu-x", WHOLE_GPU)
    cordoned["spec"] = {"unschedulable": True}
    after = reconcile(cordoned, first)
    assert recomputed == [1]
    assert '"unschedulable":true' in after["resources"]["vm-node"]["data"]["state"]
    assert after["status"]["inputs"] != first["status"]["inputs"]


def test_cordoning_a_vm_node_reaches_its_classes_through_its_state(world):
    """gpu-a is the one eligible node (gpu-b is tainted, gpu-c cordoned): cordoned, it offers
    nothing; deleted with its Devices, its state goes too."""
    world.api.merge_patch("Node", "gpu-a", {"spec": {"unschedulable": True}})
    world.reconcile()
    status = world.get("GPUClass", "example-whole-gpu")["status"]
    assert (status["free"], status["maxFreePerNode"], status["maxPerNode"]) == (0, 0, 0)
    world.api.merge_patch("Node", "gpu-a", {"spec": {"unschedulable": False}})
    world.reconcile()
    assert world.get("GPUClass", "example-whole-gpu")["status"]["free"] == 3
    assert world.get("ConfigMap", "gpu-a-gpustack-vm-node", "gpustack-system") is not None
    world.delete("Devices", "gpu-a")
    world.reconcile()
    assert world.get("ConfigMap", "gpu-a-gpustack-vm-node", "gpustack-system") is None
    assert world.get("GPUClass", "example-whole-gpu")["status"]["free"] == 0


UNREADABLE_STATES = [
    ("not a string", 5, "data.state: must be a string"),
    ("missing", None, "data.state: is missing"),
    ("not JSON", "{", "data.state: is not JSON: Expecting property name enclosed in double quotes"),
    ("no version", '{"node":"n"}', "data.state: v must be a version from 1 on, got None"),
    ("no node", '{"v":1}', "data.state.node: must name the node"),
    (
        "a quantity not a string",
        '{"v":1,"node":"n","allocatable":{"a/b":4}}',
        "data.state.allocatable['a/b']: must be a string, got int",
    ),
    (
        "a taint not an object",
        '{"v":1,"node":"n","taints":["k"]}',
        "data.state.taints[0]: must be an object, got str",
    ),
]


@pytest.mark.parametrize(
    ("case", "text", "problem"), UNREADABLE_STATES, ids=[c[0] for c in UNREADABLE_STATES]
)
def test_an_unreadable_state_names_its_field_and_the_class_counts_the_rest(case, text, problem):
    from functions.handlers import gpuclass
    from functions.handlers.base import Request

    offer = load_documents(EXAMPLES / "whole-gpu.yaml")[0]
    broken = vm_node("gpu-b", WHOLE_GPU)
    broken["data"] = {} if text is None else {"state": text}
    desired = gpuclass.compose(
        Request.of(offer, required={"states": [vm_node("gpu-a", WHOLE_GPU), broken]})
    )
    assert desired.status["free"] == 4
    (warning,) = [r.message for r in desired.results if r.reason == "UnreadableObject"]
    assert warning.startswith(f"ConfigMap gpu-b-gpustack-vm-node: {problem}")
    assert warning.endswith("; the node is left out of this class's free units")


def test_a_state_reads_back_as_it_was_written_and_a_newer_version_by_what_it_knows():
    from functions.core.status import vmnode

    state = vmnode.of_node(
        "gpu-x",
        {"kubevirt.io/schedulable": "true"},
        {"unschedulable": True, "taints": [{"key": "k", "value": "v", "effect": "NoExecute"}]},
        {
            "allocatable": {"cpu": "64", "a/b": "2"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    )
    text = vmnode.write(state)["state"]
    assert vmnode.read(text) == state
    newer = text.replace('"v":1', '"v":2,"zones":["a"]')
    assert vmnode.read(newer) == state


def test_right_after_an_upgrade_a_class_without_any_state_keeps_its_counts_and_says_so():
    """Until each Devices is reconciled by this release no VM node state exists: a class whose
    counts the release before wrote keeps them rather than take every offer from new VMs."""
    from functions.handlers import gpuclass
    from functions.handlers.base import Request

    offer = load_documents(EXAMPLES / "whole-gpu.yaml")[0]
    offer["status"] = {"free": 3.0, "maxFreePerNode": 3.0, "maxPerNode": 4.0}
    desired = gpuclass.compose(Request.of(offer, required={"states": []}))
    assert (desired.status["free"], desired.status["maxFreePerNode"]) == (3, 3)
    assert desired.status["maxPerNode"] == 4
    assert [(r.reason, r.message) for r in desired.results if r.reason != "UnreadableObject"] == [
        (
            "VMNodeStatesMissing",
            "no VM node states found (ConfigMaps labelled resource.gpustack.ai/type=vm-node in "
            "namespace gpustack-system): the counts are kept as observed until the devices "
            "handler has kept them — after an upgrade, once each Devices is reconciled",
        )
    ]
    assert "nodes" not in desired.status  # kept until this release counts
    # One state is enough to count from; once this release has counted, none found is none
    # there (a selector that matches none); a class that never counted has nothing to keep.
    found = gpuclass.compose(Request.of(offer, required={"states": [vm_node("gpu-a", WHOLE_GPU)]}))
    assert (found.status["free"], found.status["nodes"]) == (4, 1) and not found.results
    offer["status"] = found.status
    for status in (found.status, None):
        offer["status"] = status
        none = gpuclass.compose(Request.of(offer, required={"states": []}))
        assert (none.status["free"], none.status["nodes"]) == (0, 0) and not none.results


def test_the_vm_node_states_example_is_what_the_devices_handler_composes():
    """examples/gpuclass/vm-node-states.yaml: `render` a class against it.
    GPUSTACK_REGENERATE=1 writes it again."""
    import os

    import yaml

    from functions import pipeline
    from functions.server import run_function
    from functions.views import plain

    cluster = load_documents(EXAMPLES / "cluster.yaml")
    step = {"apiVersion": "fn.gpustack.ai/v1beta1", "kind": "Input", "handler": "devices"}
    states = []
    for devices in (d for d in cluster if d["kind"] == "Devices"):
        rsp = pipeline.run_step(run_function, pipeline.request(devices, {}, step), cluster)
        states.append(plain(rsp.desired.resources["vm-node"].resource))
    path = EXAMPLES / "vm-node-states.yaml"
    header = (
        "# The VM node states the devices handler keeps of cluster.yaml's nodes (see\n"
        "# docs/gpuclass.md): what a GPUClass requires. Regenerate with\n"
        "# GPUSTACK_REGENERATE=1 .venv/bin/python -m pytest tests/test_gpuclass.py\n"
    )
    text = header + yaml.safe_dump_all(states, sort_keys=True, width=1000)
    if os.environ.get("GPUSTACK_REGENERATE"):
        path.write_text(text)
    assert path.read_text() == text


BROKEN_NODES = [
    (
        "a condition not an object",
        ("status", "conditions"),
        ["Ready"],
        "status.conditions[0]: must be an object, got str",
    ),
    ("taints not a list", ("spec", "taints"), "k", "spec.taints: must be a list, got str"),
    (
        "a quantity not a quantity",
        ("status", "allocatable"),
        {"example.com/whole-gpu": {"n": 4}},
        "status.allocatable['example.com/whole-gpu']: must be a quantity, got dict",
    ),
]


@pytest.mark.parametrize(
    ("case", "where", "value", "problem"), BROKEN_NODES, ids=[c[0] for c in BROKEN_NODES]
)
def test_a_node_that_cannot_be_read_keeps_no_state_and_is_named(case, where, value, problem):
    """A hand-made Node (the API server keeps a real one readable): the devices handler keeps
    the rest of the node's objects, no state, and names the field."""
    from functions.handlers import devices
    from functions.handlers.base import Request
    from tests.support.vm_nodes import agent_devices

    broken = node("gpu-x", WHOLE_GPU)
    broken.setdefault(where[0], {})[where[1]] = value
    catalog = [{"metadata": {"name": "default"}, "spec": {}}]
    desired = devices.compose(
        Request.of(agent_devices("gpu-x"), required={"catalog": catalog, "node": [broken]})
    )
    assert set(desired.resources) == {"worker", "summary"}
    assert [(r.reason, r.message) for r in desired.results] == [
        ("UnreadableObject", f"Node gpu-x: {problem}; it is left out until it is fixed")
    ]


def test_a_hand_made_nodes_whole_number_reads_as_the_kubelet_writes_it():
    from functions.core.status import vmnode

    state = vmnode.of_node("n", {}, {}, {"allocatable": {"a/b": 4.0, "c/d": 0.5, "e/f": "2"}})
    assert state.allocatable == {"a/b": "4", "c/d": "0.5", "e/f": "2"}


def test_the_gpuclass_scenario_prints_what_it_recorded():
    """The scenario `make e2e` plays on the real control plane too. After an intended change,
    review the difference and refresh the file with
    `gpustack-fn simulate examples/gpuclass/scenario.yaml > examples/gpuclass/expected.txt`."""
    from click.testing import CliRunner

    from functions.cli import main

    result = CliRunner().invoke(main, ["simulate", str(EXAMPLES / "scenario.yaml")])
    assert result.exit_code == 0, result.output
    assert result.output == (EXAMPLES / "expected.txt").read_text()
    before, after = result.output.split("== ")[1:]
    assert "example-whole-gpu       example   example-model   passthrough   3      3" in before
    assert "example-whole-gpu       example   example-model   passthrough   4      4" in after
