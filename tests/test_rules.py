"""Handler rules on plain dicts, table by table: no protobuf, no simulated cluster.

The scenario tests show the walkthrough; these pin each rule's cases — a Pod's phase, the Pod
laid out for a plan, a pin's flavor steering, readiness by kind, the Catalog's settings — with
whole expected values.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import pytest
import yaml
from google.protobuf import struct_pb2

from functions.core.modes import Claim, Mode
from functions.core.quantity import GIB
from functions.core.requests import InstanceTypeFacts, Plan, plan
from functions.core.settings import DEFAULTS, Settings, SettingsError
from functions.handlers import instancetype, readiness
from functions.handlers.base import Request
from functions.handlers.instance import pin
from functions.handlers.instance.container import pod_phase
from functions.handlers.instance.pod import PodInputs, render_pod
from functions.views import DictView, View, view_of
from tests.support.schemas import ROOT
from tests.test_status import FIXTURES

# --- a Pod's phase, mirrored into the Instance (reference §1.4) --------------------------------


def pod(phase: str = "Pending", message: str = "", **conditions: tuple[str, str, str]) -> dict:
    return {
        "status": {
            "phase": phase,
            "message": message,
            "conditions": [
                {"type": t, "status": s, "reason": r, "message": m}
                for t, (s, r, m) in conditions.items()
            ],
        }
    }


@dataclass(frozen=True)
class PhaseCase:
    name: str
    pod: dict | None
    phase: tuple[str, str]


PHASES = [
    PhaseCase("no Pod yet", None, ("Starting", "composing the Pod")),
    PhaseCase("gated by Kueue", pod(), ("Scheduling", "")),
    PhaseCase(
        "unschedulable",
        pod(PodScheduled=("False", "Unschedulable", "0/4 nodes are available")),
        ("Pending", "0/4 nodes are available"),
    ),
    PhaseCase(
        "pulling its image",
        pod(PodScheduled=("True", "", ""), Initialized=("False", "", "pulling")),
        ("Initializing", "pulling"),
    ),
    PhaseCase(
        "containers starting",
        pod(PodScheduled=("True", "", ""), Ready=("False", "ContainersNotReady", "not yet")),
        ("Starting", "not yet"),
    ),
    PhaseCase(
        "ready",
        pod("Running", PodScheduled=("True", "", ""), Ready=("True", "", "")),
        ("Ready", ""),
    ),
    PhaseCase(
        "was ready, now failing its probe",
        pod("Running", PodScheduled=("True", "", ""), Ready=("False", "Probe", "probe failed")),
        ("NotReady", "probe failed"),
    ),
    PhaseCase("finished", pod("Succeeded", "done"), ("Succeeded", "done")),
    PhaseCase("failed after it ran", pod("Failed", "exit code 1"), ("Failed", "exit code 1")),
]


@pytest.mark.parametrize("case", PHASES, ids=[c.name for c in PHASES])
def test_an_instance_mirrors_its_pods_phase(case):
    observed = DictView(case.pod) if case.pod is not None else None
    assert pod_phase(observed) == case.phase


# --- the Pod laid out for a plan (reference §5.2–5.3) ------------------------------------------

A10G = InstanceTypeFacts(
    name="gpustack--nvidia-a10g-linux-amd64",
    acceleratable=True,
    unit_cpu=8,
    unit_ram=64 * GIB,
    local_storage=100 * GIB,
    accelerator_group="nvidia-a10g",
    manufacturer="nvidia",
    card_memory_mib=24576,
    modes=frozenset({Mode.EXCLUSIVE, Mode.SHARED, Mode.SLICED}),
    largest_node_cards=4,
    entrance="gpustack-fnv64-c4680bb149644f1c",
)
SPEC = {
    "image": "ubuntu:24.04",
    "command": ["sleep", "86400"],
    "volume": {"ephemeral": {"capacity": "1Gi"}},
}


def planned(resources: dict) -> Plan:
    result = plan(resources, A10G)
    assert isinstance(result, Plan)
    return result


def test_a_whole_card_pod_is_laid_out_as_the_reference_renders_it():
    inputs = PodInputs(
        "demo", "default", A10G.entrance, planned({"accelerator": "1"}), "nvidia", "nvidia-a10g"
    )
    assert render_pod(DictView(SPEC), inputs) == {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "demo",
            "namespace": "default",
            "labels": {
                "kueue.x-k8s.io/queue-name": "gpustack-fnv64-c4680bb149644f1c",
                "worker.gpustack.ai/instance": "demo",
            },
        },
        "spec": {
            "hostIPC": True,
            "shareProcessNamespace": True,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "containers": [
                {
                    "name": "main",
                    "image": "ubuntu:24.04",
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sleep", "86400"],
                    "securityContext": {"runAsUser": 0, "privileged": False},
                    "resources": {
                        "requests": {
                            "cpu": "800m",
                            "memory": "8Gi",
                            "ephemeral-storage": "1920Mi",
                            "nvidia.com/gpu": "1",
                        },
                        "limits": {
                            "cpu": "8",
                            "memory": "64Gi",
                            "ephemeral-storage": "15Gi",
                            "nvidia.com/gpu": "1",
                        },
                    },
                    "volumeMounts": [{"name": "workspace", "mountPath": "/workspace"}],
                }
            ],
            "volumes": [{"name": "workspace", "emptyDir": {"sizeLimit": "1Gi"}}],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [WHOLE_CARD_FREE]}]
                    }
                }
            },
        },
    }


@dataclass(frozen=True)
class AffinityCase:
    name: str
    resources: dict
    expressions: list[dict[str, Any]]
    fit_affinity: bool = True
    pin: tuple[dict, ...] = ()


COUNT = "acceleratable.feature.gpustack.ai/nvidia-a10g.count"
WHOLE_CARDS_FREE = "exclusive-free-cards.fit.gpustack.ai/nvidia-a10g"
WHOLE_CARD_FREE = {"key": WHOLE_CARDS_FREE, "operator": "Gt", "values": ["0"]}
AFFINITIES = [
    AffinityCase(
        "one whole card needs a node with a wholly free card",
        {"accelerator": "1"},
        [WHOLE_CARD_FREE],
    ),
    AffinityCase(
        "two whole cards need a node with two, both wholly free",
        {"accelerator": "2"},
        [
            {"key": COUNT, "operator": "Gt", "values": ["1"]},
            {"key": WHOLE_CARDS_FREE, "operator": "Gt", "values": ["1"]},
        ],
    ),
    AffinityCase(
        "without fit affinity a whole card carries only its card count",
        {"accelerator": "2"},
        [{"key": COUNT, "operator": "Gt", "values": ["1"]}],
        fit_affinity=False,
    ),
    AffinityCase(
        "a share on three cards needs three cards with a free share, on a node with three",
        {"acceleratorShared": 3},
        [
            {"key": COUNT, "operator": "Gt", "values": ["2"]},
            {
                "key": "shared-free-cards.fit.gpustack.ai/nvidia-a10g",
                "operator": "Gt",
                "values": ["2"],
            },
        ],
    ),
    AffinityCase(
        "a 20 % slice needs a card with 320,000 units free",
        {"acceleratorSlicedMemoryPercentage": 20},
        [
            {
                "key": "sliced-max-free-units.fit.gpustack.ai/nvidia-a10g",
                "operator": "Gt",
                "values": ["319999"],
            }
        ],
    ),
    AffinityCase(
        "without fit affinity a slice carries no fit label",
        {"acceleratorSlicedMemoryPercentage": 20},
        [],
        fit_affinity=False,
    ),
    AffinityCase(
        "a pin's flavor steering comes first",
        {"accelerator": "1"},
        [{"key": COUNT, "operator": "NotIn", "values": ["1"]}, WHOLE_CARD_FREE],
        pin=({"key": COUNT, "operator": "NotIn", "values": ["1"]},),
    ),
]


@pytest.mark.parametrize("case", AFFINITIES, ids=[c.name for c in AFFINITIES])
def test_the_pods_required_node_affinity(case):
    inputs = PodInputs(
        "demo",
        "default",
        A10G.entrance,
        planned(case.resources),
        "nvidia",
        "nvidia-a10g",
        fit_affinity=case.fit_affinity,
        pin_expressions=case.pin,
    )
    affinity = render_pod(DictView(SPEC), inputs)["spec"].get("affinity")
    if not case.expressions:
        assert affinity is None
        return
    terms = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms == {"nodeSelectorTerms": [{"matchExpressions": case.expressions}]}


# --- a pin steers Kueue to the pinned node's flavor ---------------------------------------------


def flavor(count: str, g_key: str = "intel-xeon-platinum-8259cl") -> DictView:
    return DictView(
        {
            "spec": {
                "nodeLabels": {
                    "kubernetes.io/os": "linux",
                    f"general.feature.gpustack.ai/{g_key}": "true",
                    "acceleratable.feature.gpustack.ai/nvidia-tesla-t4": "true",
                    "acceleratable.feature.gpustack.ai/nvidia-tesla-t4.count": count,
                }
            }
        }
    )


NODE_T4_B = {
    "kubernetes.io/os": "linux",
    "kubernetes.io/hostname": "node-t4-b",
    "general.feature.gpustack.ai/intel-xeon-platinum-8259cl": "true",
    "acceleratable.feature.gpustack.ai/nvidia-tesla-t4": "true",
    "acceleratable.feature.gpustack.ai/nvidia-tesla-t4.count": "4",
}


def test_a_pin_rules_out_every_other_flavor_on_a_key_kueue_judges_it_by():
    expressions = pin.flavor_expressions(
        NODE_T4_B, [flavor("1"), flavor("4"), flavor("4", "amd-epyc-7r32")]
    )
    assert expressions == [
        {
            "key": "acceleratable.feature.gpustack.ai/nvidia-tesla-t4.count",
            "operator": "NotIn",
            "values": ["1"],
        },
        {"key": "general.feature.gpustack.ai/amd-epyc-7r32", "operator": "DoesNotExist"},
    ]


def test_card_count_expressions_only_for_several_whole_cards_or_shares():
    assert pin.card_count_expressions(Claim(Mode.EXCLUSIVE, 1), "nvidia-a10g") == []
    assert pin.card_count_expressions(Claim(Mode.SLICED, 1, units=1), "nvidia-a10g") == []
    assert pin.card_count_expressions(Claim(Mode.SHARED, 2), "nvidia-a10g") == [
        {"key": COUNT, "operator": "Gt", "values": ["1"]}
    ]


# --- readiness, by kind ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ReadyCase:
    name: str
    obj: dict
    observed: dict | None
    ready: bool
    extra: dict = field(default_factory=dict)


def active(status: str) -> dict:
    return {"status": {"conditions": [{"type": "Active", "status": status}]}}


READINESS = [
    ReadyCase(
        "a ResourceFlavor, at once (it has no status)",
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor"},
        None,
        True,
    ),
    ReadyCase(
        "a ClusterQueue Kueue made Active",
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue"},
        active("True"),
        True,
    ),
    ReadyCase(
        "a ClusterQueue not Active",
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue"},
        active("False"),
        False,
    ),
    ReadyCase(
        "a derived InstanceType whose queue is Active",
        {"apiVersion": "worker.gpustack.ai/v1alpha1", "kind": "InstanceType"},
        {"status": {"phase": "Active"}},
        True,
    ),
    ReadyCase(
        "a bound claim",
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim"},
        {"status": {"phase": "Bound"}},
        True,
    ),
    ReadyCase("a Service, once it exists", {"apiVersion": "v1", "kind": "Service"}, {}, True),
    ReadyCase("a Service not made yet", {"apiVersion": "v1", "kind": "Service"}, None, False),
]


@pytest.mark.parametrize("case", READINESS, ids=[c.name for c in READINESS])
def test_readiness_is_one_table_by_kind(case):
    observed = DictView(case.observed) if case.observed is not None else None
    assert readiness.of(case.obj, observed) is case.ready


NODE_CONDITIONS = [
    {"type": "MemoryPressure", "status": "False"},
    {"type": 7, "status": "True"},  # not a string: never a match
    "not an object",
    {"type": "Ready", "status": "True"},
    {"type": "Ready", "status": "False"},  # a repeat: the first counts
]


def node_view(conditions: list, as_struct: bool) -> View:
    """A Node with these conditions, read from a Struct (as Crossplane sends it) or a dict."""
    node = {"status": {"conditions": conditions}}
    if not as_struct:
        return DictView(node)
    struct = struct_pb2.Struct()
    struct.update(node)
    return view_of(struct)


@pytest.mark.parametrize("as_struct", [False, True], ids=["dict", "Struct"])
def test_a_condition_is_found_by_its_type_in_dicts_and_structs_alike(as_struct):
    found = node_view(NODE_CONDITIONS, as_struct)
    assert readiness.condition(found, "Ready") == "True"
    assert readiness.condition(found, "DiskPressure") == "Unknown"
    assert readiness.condition(DictView({}), "Ready") == "Unknown"
    assert readiness.condition(None, "Ready") == "Unknown"


@pytest.mark.parametrize("as_struct", [False, True], ids=["dict", "Struct"])
def test_an_empty_type_matches_only_an_empty_string(as_struct):
    """A Struct's Value reads "" for a member it does not hold: a number or a missing key is
    still not the empty string."""
    conditions = [{"type": 0, "status": "Zero"}, {"status": "None"}, {"type": "", "status": "Odd"}]
    found = node_view(conditions, as_struct)
    assert readiness.condition(found, "") == "Odd"
    assert readiness.condition(found, "0") == "Unknown"  # a number is not its text


def test_an_object_reads_back_as_the_same_plain_data_from_a_struct_or_a_dict():
    """What a handler converts (a Devices spec, an observed Pod) is the same data whether it
    came as a Struct or a dict: whole numbers as ints, the rest as they were."""
    data = {
        "n": 8,
        "x": 1.5,
        "ok": True,
        "none": None,
        "s": "text",
        "cards": [{"memoryMiB": 81559, "profiles": [["1g.10gb", 7]]}, "x", [], {}],
    }
    struct = struct_pb2.Struct()
    struct.update(data)
    assert view_of(struct).to_dict() == DictView(data).to_dict() == data
    assert type(view_of(struct).to_dict()["n"]) is int
    assert view_of(struct).list("cards").to_list() == data["cards"]


@pytest.mark.parametrize("as_struct", [False, True], ids=["dict", "Struct"])
def test_a_path_through_anything_but_an_object_reads_as_missing(as_struct):
    """A Struct's Value reads as an empty object when it holds something else: a path on
    through a string, a number, a list, true or null finds nothing, as it does in a dict."""
    data = {"s": "x", "n": 1, "l": [{"k": "v"}], "b": True, "z": None, "o": {"k": {"k": "v"}}}
    if as_struct:
        struct = struct_pb2.Struct()
        struct.update(data)
        view = view_of(struct)
    else:
        view = DictView(data)
    for key in ("s", "n", "l", "b", "z", "missing"):
        assert view.get(key, "k") is None and view.get(key, "k", "k", default=0) == 0
    assert view.get("o", "k", "k") == "v" and view.str("o", "k", "k") == "v"
    assert view.to_dict() == data  # reading changed nothing


# --- the Catalog's settings -------------------------------------------------------------------------


def test_settings_keep_their_defaults_and_refuse_a_wrong_type_by_field():
    assert Settings.from_spec({"instanceTypeAwareCpuManufacturer": None}) == Settings()
    with pytest.raises(SettingsError) as error:
        Settings.from_spec({"instanceHostPathVolumeAllowed": "true"})
    assert error.value.field == "spec.instanceHostPathVolumeAllowed"
    with pytest.raises(SettingsError) as error:
        Settings.from_spec({"systemNamespace": "Not_A_Label"})
    assert error.value.field == "spec.systemNamespace"


@pytest.mark.parametrize(
    ("selector", "field", "message"),
    [
        (
            {"gpu nodes": "true"},
            "spec.vmNodeSelector",
            "a label key is an optional DNS subdomain and '/', then at most 63 letters, digits, "
            "'-', '_' or '.', starting and ending with a letter or digit (got 'gpu nodes'); fix "
            "the Catalog default",
        ),
        (
            {"pool": "vm nodes"},
            "spec.vmNodeSelector.pool",
            "a label value is empty or at most 63 letters, digits, '-', '_' or '.', starting and "
            "ending with a letter or digit (got 'vm nodes'); fix the Catalog default",
        ),
        (
            {"pool": True},
            "spec.vmNodeSelector.pool",
            "input should be a valid string, got True; fix the Catalog default",
        ),
        (
            ["nvidia.com/gpu.deploy.sandbox-device-plugin"],
            "spec.vmNodeSelector",
            "input should be a valid dictionary, got ['nvidia.com/gpu.deploy.sandbox-device-plugin']"
            "; fix the Catalog default",
        ),
    ],
)
def test_the_vm_node_selector_is_refused_by_field_unless_it_is_labels(selector, field, message):
    with pytest.raises(SettingsError) as error:
        Settings.from_spec({"vmNodeSelector": selector})
    assert (error.value.field, error.value.message) == (field, message)


def test_the_vm_nodes_are_the_selector_and_kubevirts_own_label():
    sandbox = {"nvidia.com/gpu.deploy.sandbox-device-plugin": "true"}
    assert Settings().vm_nodes == {"kubevirt.io/schedulable": "true"}
    assert Settings.from_spec({"vmNodeSelector": sandbox}).vm_nodes == {
        **sandbox,
        "kubevirt.io/schedulable": "true",
    }


def test_the_catalog_xrd_names_every_setting_with_the_handlers_default():
    xrd = yaml.safe_load((ROOT / "compositions" / "xrds" / "catalog.yaml").read_text())
    schema = xrd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    properties = schema["properties"]["spec"]["properties"]
    fields = {f.alias: getattr(DEFAULTS, name) for name, f in Settings.model_fields.items()}
    assert set(properties) == set(fields)
    for alias, default in fields.items():
        assert properties[alias].get("default", default) == default, alias


TOLERATED = [
    (
        [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}],
        [{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}],
    ),
    (
        [{"key": "example.com/gpu-pool", "operator": "Exists"}],
        [{"key": "example.com/gpu-pool", "operator": "Exists"}],
    ),
    ([{"key": "sku", "operator": "Equal"}], [{"key": "sku", "operator": "Equal", "value": ""}]),
]


@pytest.mark.parametrize(("given", "tolerations"), TOLERATED)
def test_flavor_tolerations_are_read_as_a_pod_spells_them(given, tolerations):
    settings = Settings.from_spec({"acceleratedFlavorTolerations": given})
    assert [t.toleration() for t in settings.accelerated_flavor_tolerations] == tolerations


@pytest.mark.parametrize(
    ("given", "field", "message"),
    [
        (
            [{"key": "node.kubernetes.io/not-ready", "operator": "Exists"}],
            "spec.acceleratedFlavorTolerations[0].key",
            "the node lifecycle's taints (node.kubernetes.io/..., "
            "node.cloudprovider.kubernetes.io/...) are never tolerated: a Pod on a lost or "
            "cordoned node must be evicted and placed again (got 'node.kubernetes.io/not-ready'); "
            "fix the Catalog default",
        ),
        (
            [{"key": "dedicated"}, {"key": "gpu", "operator": "Exists", "value": "yes"}],
            "spec.acceleratedFlavorTolerations[1]",
            "an Exists toleration has no value; drop it, or use Equal (got {'key': 'gpu', "
            "'operator': 'Exists', 'value': 'yes'}); fix the Catalog default",
        ),
        (
            [{"operator": "Exists"}],
            "spec.acceleratedFlavorTolerations[0].key",
            "field required (got {'operator': 'Exists'}); fix the Catalog default",
        ),
        (
            [{"key": "dedicated", "effect": ""}],
            "spec.acceleratedFlavorTolerations[0].effect",
            "input should be 'NoSchedule', 'PreferNoSchedule' or 'NoExecute' (got ''); fix the "
            "Catalog default",
        ),
        (
            [{"key": f"k{i}"} for i in range(8)],
            "spec.acceleratedFlavorTolerations",
            "list should have at most 7 items after validation, not 8 (got "
            + repr([{"key": f"k{i}"} for i in range(8)])
            + "); fix the Catalog default",
        ),
    ],
)
def test_flavor_tolerations_are_refused_by_field(given, field, message):
    with pytest.raises(SettingsError) as error:
        Settings.from_spec({"acceleratedFlavorTolerations": given})
    assert (error.value.field, error.value.message) == (field, message)


# --- one unreadable node summary never stops a pool ---------------------------------------------


def test_an_unreadable_node_summary_is_skipped_and_named_while_the_pool_composes():
    from tests.test_scale import pool_type, summary_of

    good = summary_of(yaml.safe_load((FIXTURES / "devices-node-a10g-0.1.0.yaml").read_text()))
    broken = copy.deepcopy(good)
    broken["metadata"]["name"] = "node-a10g-2-gpustack-summary"
    broken["data"]["summary"] = (
        good["data"]["summary"]
        .replace('"node":"node-a10g"', '"node":"node-a10g-2"')
        .replace("[1,1,0", '[1,1,"many"')
    )
    request = Request.of(
        pool_type(), required={"catalog": [], "summaries": [good, broken], "namespaces": []}
    )
    desired = instancetype.compose(request)
    assert [(r.severity.value, r.reason, r.message) for r in desired.results] == [
        (
            "Warning",
            "UnreadableObject",
            "ConfigMap gpustack-system/node-a10g-2-gpustack-summary: data.summary: "
            "groups.nvidia-a10g[2] must be a whole number, got 'many'; it is left out until it "
            "is fixed",
        )
    ]
    readable = next(c for c in desired.conditions if c.type == "InputsReadable")
    assert (readable.status, readable.message) == (
        False,
        "left out unreadable node summaries: gpustack-system/node-a10g-2-gpustack-summary "
        "(see the Warning events)",
    )
    # The pool composes from the node it can read: node-a10g's 20 % slice.
    assert "clusterqueue" in desired.resources
    assert desired.status["display"]["accelerator"] == "0/0 0/0 80/80 0/0"
