"""Instances through the instance handler, in the simulated cluster (seed 000 §3–§6).

Kueue admits by credits, the scheduler and device plugin place on cards the core ledger says
can take the request, and the agent reports the allocation back into Devices — so the
InstanceType rows move exactly as the walkthrough's do."""

from __future__ import annotations

import copy

import pytest

from functions.handlers import instance as instance_handler
from functions.handlers.base import Request
from gpustack_sim import World, load_documents, world_from
from gpustack_sim.apiserver import Refused
from tests.support import schemas
from tests.support.schemas import ROOT

WALKTHROUGH = ROOT / "examples" / "walkthrough"
A10G, T4 = "gpustack--nvidia-a10g-linux-amd64", "gpustack--nvidia-tesla-t4-linux-amd64"
AWARE_A10G = "gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64"
A10G_ENTRANCE = "gpustack-fnv64-c4680bb149644f1c"
INITIAL_A10G, INITIAL_T4 = "1/1 1/10 100/100 0/0", "4/5 4/50 100/500 0/0"
HOST_PATH_MESSAGE = (
    "spec.additionalVolumes[2].hostPath: mounting a host path is not allowed: enable the Catalog's "
    '"instanceHostPathVolumeAllowed" setting to allow it'
)


def example(name: str) -> dict:
    return load_documents(WALKTHROUGH / name)[0]


@pytest.fixture
def world() -> World:
    world = world_from(
        [
            WALKTHROUGH / "devices.yaml",
            WALKTHROUGH / "nodes.yaml",
            WALKTHROUGH / "namespaces.yaml",
            WALKTHROUGH / "storage.yaml",
            WALKTHROUGH / "catalog.yaml",
            WALKTHROUGH / "instancepersistentvolume-datasets.yaml",
        ]
    )
    world.reconcile()
    return world


def accelerators(world: World, pool: str) -> str:
    return world.get("InstanceType", pool)["status"]["display"]["accelerator"]


def instance(world: World, name: str) -> dict:
    return world.get("Instance", name, "default")


def condition(obj: dict, type_: str) -> dict:
    return next(c for c in obj["status"]["conditions"] if c["type"] == type_)


def run(world: World, *instances: dict) -> None:
    world.apply(*instances)
    world.reconcile()


def test_section_3_the_sliced_demo_pod_and_the_a10g_row(world):
    run(world, example("instance-sliced-demo.yaml"))
    pod = world.get("Pod", "sliced-demo", "default")
    assert (
        pod["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "gpustack-fnv64-c4680bb149644f1c"
    )
    main = pod["spec"]["containers"][0]
    assert main["name"] == "main" and main["command"] == ["sleep", "86400"]
    for shape in ("requests", "limits"):
        keys = {k: v for k, v in main["resources"][shape].items() if k.startswith("nvidia.com/")}
        assert keys == {
            "nvidia.com/gpu.sliced": "1",
            "nvidia.com/gpu.sliced.memory-percentage": "20",
            "nvidia.com/gpu.sliced.cores-percentage": "100",
            "nvidia.com/gpu.sliced.units": "320k",  # what the reference's Pod webhook adds
        }
    assert main["resources"]["limits"]["cpu"] == "1"
    assert pod["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ] == {
        "nodeSelectorTerms": [
            {
                "matchExpressions": [
                    {
                        "key": "sliced-max-free-units.fit.gpustack.ai/nvidia-a10g",
                        "operator": "Gt",
                        "values": ["319999"],
                    }
                ]
            }
        ]
    }
    # No pin: the only node selector is the one Kueue gives the Pod on admission, its flavor's.
    flavor = world.get("ResourceFlavor", "gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64-1d")
    assert pod["spec"]["nodeSelector"] == flavor["spec"]["nodeLabels"]
    assert pod["spec"]["volumes"] == [{"name": "workspace", "emptyDir": {"sizeLimit": "1Gi"}}]
    assert instance(world, "sliced-demo")["status"]["phase"] == "Ready"
    assert accelerators(world, A10G) == "0/0 0/0 80/80 0/0"
    world.delete("Instance", "sliced-demo", "default")
    world.reconcile()
    assert world.get("Pod", "sliced-demo", "default") is None
    assert accelerators(world, A10G) == INITIAL_A10G


def test_section_4_a_whole_card_on_the_custom_type_then_the_type_is_deleted(world):
    run(world, example("instancetype-a10g-12c128g.yaml"), example("instance-custom-demo.yaml"))
    pod = world.get("Pod", "custom-demo", "default")
    assert (
        pod["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "gpustack-fnv64-d4c0e6cd72686015"
    )
    limits = pod["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {
        "cpu": "12",
        "memory": "128Gi",
        "ephemeral-storage": "15Gi",
        "nvidia.com/gpu": "1",
    }
    assert instance(world, "custom-demo")["status"]["phase"] == "Ready"
    assert accelerators(world, "a10g-12c128g") == accelerators(world, A10G) == "0/0 0/0 0/0 0/0"

    world.delete("InstanceType", "a10g-12c128g")
    world.reconcile()
    status = instance(world, "custom-demo")["status"]
    assert status["phase"] == "Stopped"
    assert status["stoppedGeneration"] == 1
    assert status["phaseMessage"].startswith(
        "instance type a10g-12c128g was deleted: the Instance stopped at generation 1"
    )
    assert world.get("Pod", "custom-demo", "default") is None
    assert accelerators(world, A10G) == INITIAL_A10G
    world.reconcile()  # it stays stopped
    assert instance(world, "custom-demo")["status"]["phase"] == "Stopped"


def test_an_instance_whose_pool_drains_stops_at_its_generation(world):
    """Kueue evicts the drained queue's Workloads and stops their Pods at once, clearing the
    reservation in the same step, so the InstanceType may never read Draining; the Pod, stopped
    with Kueue's TerminationTarget condition, says it, and the Instance stops there."""
    run(world, example("instance-sliced-demo.yaml"))
    assert instance(world, "sliced-demo")["status"]["phase"] == "Ready"
    world.patch("Devices", "node-a10g", {"managed": False})  # the pool loses its only node
    world.reconcile()
    status = instance(world, "sliced-demo")["status"]
    assert (status["phase"], status["stoppedGeneration"]) == ("Stopped", 1)
    assert status["phaseMessage"].startswith(
        f"instance type {A10G} drained its queue (Kueue stopped the Pod): the Instance stopped "
        "at generation 1"
    )
    assert world.get("Pod", "sliced-demo", "default") is None
    world.patch("Devices", "node-a10g", {"managed": True})
    world.reconcile()  # it stays stopped until its spec changes
    assert instance(world, "sliced-demo")["status"]["phase"] == "Stopped"


def test_section_5_repointing_a_stopped_instance_starts_it_on_the_aware_pool(world):
    run(world, example("instancetype-a10g-12c128g.yaml"), example("instance-custom-demo.yaml"))
    world.delete("InstanceType", "a10g-12c128g")
    world.reconcile()
    world.patch("Catalog", "default", {"instanceTypeAwareCpuManufacturer": True})
    world.reconcile()
    world.patch("Instance", "custom-demo", {"type": AWARE_A10G, "stop": False}, "default")
    world.reconcile()
    assert instance(world, "custom-demo")["status"]["phase"] == "Ready"
    assert world.get("Pod", "custom-demo", "default")["metadata"]["labels"][
        "kueue.x-k8s.io/queue-name"
    ] == ("gpustack-fnv64-029fd9550e0c70bd")
    assert accelerators(world, AWARE_A10G) == accelerators(world, A10G) == "0/0 0/0 0/0 0/0"


def test_section_6_pinned_demo_is_refused_until_host_paths_are_allowed(world):
    run(world, example("instance-pinned-demo.yaml"))
    refused = instance(world, "pinned-demo")
    assert world.get("Pod", "pinned-demo", "default") is None
    assert refused["status"]["phase"] == "Refused"
    assert refused["status"]["phaseMessage"] == HOST_PATH_MESSAGE
    admitted = condition(refused, "Admitted")
    assert (admitted["status"], admitted["reason"], admitted["message"]) == (
        "False",
        "HostPathNotAllowed",
        HOST_PATH_MESSAGE,
    )
    assert condition(refused, "Ready")["status"] == "False"
    assert [r.message for r in world.results[("Instance", "default", "pinned-demo")]] == [
        HOST_PATH_MESSAGE
    ]

    world.patch("Catalog", "default", {"instanceHostPathVolumeAllowed": True})
    world.reconcile()
    pod = world.get("Pod", "pinned-demo", "default")
    # The pin, and Kueue's flavor: node-t4-b's (4 cards), steered there by the pin's affinity.
    assert pod["spec"]["nodeSelector"]["kubernetes.io/hostname"] == "node-t4-b"
    assert (
        pod["spec"]["nodeSelector"]["acceleratable.feature.gpustack.ai/nvidia-tesla-t4.count"]
        == "4"
    )
    assert pod["spec"]["nodeName"] == "node-t4-b"  # set by the scheduler, never by the handler
    main = pod["spec"]["containers"][0]
    assert main["volumeMounts"] == [
        {"name": "workspace", "mountPath": "/workspace"},
        {"name": "additional-0", "mountPath": "/mnt/datasets"},
        {
            "name": "additional-1",
            "mountPath": "/etc/model/config.json",
            "readOnly": True,
            "subPath": "config.json",
        },
        {"name": "additional-2", "mountPath": "/mnt/host-cache", "readOnly": True},
    ]
    assert pod["spec"]["volumes"][1:] == [
        {"name": "additional-0", "persistentVolumeClaim": {"claimName": "datasets"}},
        {"name": "additional-1", "configMap": {"name": "model-config"}},
        {
            "name": "additional-2",
            "hostPath": {"path": "/var/lib/gpustack-cache", "type": "DirectoryOrCreate"},
        },
    ]
    assert len(pod["spec"]["containers"]) == 1
    assert instance(world, "pinned-demo")["status"]["nodeName"] == "node-t4-b"
    assert accelerators(world, T4) == "3/4 3/40 100/400 0/0"

    # Turning the gate off again strands nothing: the running Pod already holds the mount.
    world.patch("Catalog", "default", {"instanceHostPathVolumeAllowed": False})
    world.reconcile()
    assert world.get("Pod", "pinned-demo", "default") == pod
    assert instance(world, "pinned-demo")["status"]["phase"] == "Ready"


def test_privileged_is_a_separate_gate_judged_only_when_taken(world):
    privileged = copy.deepcopy(example("instance-sliced-demo.yaml"))
    privileged["spec"]["privileged"] = True
    world.patch("Catalog", "default", {"instanceHostPathVolumeAllowed": True})
    run(world, privileged)
    assert instance(world, "sliced-demo")["status"]["phaseMessage"] == (
        'spec.privileged: privileged mode is not allowed: enable the Catalog\'s "instancePrivilegedAllowed" setting to allow it'
    )
    world.patch("Catalog", "default", {"instancePrivilegedAllowed": True})
    world.reconcile()
    assert (
        world.get("Pod", "sliced-demo", "default")["spec"]["containers"][0]["securityContext"][
            "privileged"
        ]
        is True
    )
    world.patch("Catalog", "default", {"instancePrivilegedAllowed": False})
    world.reconcile()
    assert world.get("Pod", "sliced-demo", "default") is not None
    assert instance(world, "sliced-demo")["status"]["phase"] == "Ready"


def test_stop_removes_the_pod_and_clearing_it_starts_again(world):
    run(world, example("instance-sliced-demo.yaml"))
    world.patch("Instance", "sliced-demo", {"stop": True}, "default")
    world.reconcile()
    assert world.get("Pod", "sliced-demo", "default") is None
    assert instance(world, "sliced-demo")["status"]["phase"] == "Stopped"
    assert accelerators(world, A10G) == INITIAL_A10G
    world.patch("Instance", "sliced-demo", {"stop": False}, "default")
    world.reconcile()
    assert instance(world, "sliced-demo")["status"]["phase"] == "Ready"


def test_ports_get_a_node_port_service(world):
    served = copy.deepcopy(example("instance-custom-demo.yaml"))
    served["spec"].update(
        type=T4,
        ports=[{"port": 8080, "protocol": "TCP"}, {"port": 53, "protocol": "UDP", "name": "dns"}],
    )
    run(world, served)
    pod = world.get("Pod", "custom-demo", "default")
    assert pod["spec"]["containers"][0]["ports"] == [
        {"name": "tcp-8080", "containerPort": 8080, "protocol": "TCP"},
        {"name": "dns", "containerPort": 53, "protocol": "UDP"},
    ]
    service = world.get("Service", "custom-demo", "default")
    assert service["spec"]["type"] == "NodePort"
    assert service["spec"]["selector"] == {"worker.gpustack.ai/instance": "custom-demo"}
    assert [p["name"] for p in service["spec"]["ports"]] == ["tcp-8080", "dns"]


def test_the_runtime_class_is_set_only_when_it_exists(world):
    run(world, example("instance-sliced-demo.yaml"))
    assert "runtimeClassName" not in world.get("Pod", "sliced-demo", "default")["spec"]
    world.delete("Instance", "sliced-demo", "default")
    world.apply(
        {
            "apiVersion": "node.k8s.io/v1",
            "kind": "RuntimeClass",
            "metadata": {"name": "nvidia"},
            "handler": "nvidia",
        }
    )
    run(world, example("instance-sliced-demo.yaml"))
    assert world.get("Pod", "sliced-demo", "default")["spec"]["runtimeClassName"] == "nvidia"


def test_a_node_local_claim_pins_the_pod_and_an_unbound_one_composes_nothing(world):
    local = {
        "apiVersion": "worker.gpustack.ai/v1alpha1",
        "kind": "InstancePersistentVolume",
        "metadata": {"name": "scratch", "namespace": "default"},
        "spec": {"type": "local-path", "capacity": "50Gi"},
    }
    workload = copy.deepcopy(example("instance-custom-demo.yaml"))
    workload["spec"].update(type=T4, volume={"persistent": {"name": "scratch"}})
    run(world, local, workload)
    assert world.get("Pod", "custom-demo", "default") is None
    status = instance(world, "custom-demo")["status"]
    assert status["phase"] == "Starting"
    assert status["phaseMessage"] == (
        "spec.volume.persistent: persistent volume claim scratch is not bound yet; the Instance starts once it is"
    )
    world.apply(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": "local-scratch"},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "capacity": {"storage": "50Gi"},
                "local": {"path": "/mnt/disks/scratch"},
                "nodeAffinity": {
                    "required": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {
                                        "key": "kubernetes.io/hostname",
                                        "operator": "In",
                                        "values": ["node-t4-a"],
                                    }
                                ]
                            }
                        ]
                    }
                },
            },
        }
    )
    claim = world.get("PersistentVolumeClaim", "scratch", "default")
    claim["spec"]["volumeName"], claim["status"] = "local-scratch", {"phase": "Bound"}
    world.reconcile()
    pod = world.get("Pod", "custom-demo", "default")
    assert pod["spec"]["nodeSelector"]["kubernetes.io/hostname"] == "node-t4-a"
    assert pod["spec"]["nodeName"] == "node-t4-a"
    assert world.get("InstancePersistentVolume", "scratch", "default")["status"] == {
        **world.get("InstancePersistentVolume", "scratch", "default")["status"],
        "phase": "Bound",
        "volume": "local-scratch",
    }


def test_a_network_claim_does_not_pin(world):
    shared = copy.deepcopy(example("instance-custom-demo.yaml"))
    shared["spec"].update(
        type=T4, additionalVolumes=[{"mountPath": "/data", "persistent": {"name": "datasets"}}]
    )
    run(world, shared)
    pod = world.get("Pod", "custom-demo", "default")
    assert "kubernetes.io/hostname" not in pod["spec"]["nodeSelector"]  # Kueue's flavor only
    assert world.get("PersistentVolumeClaim", "datasets", "default")["spec"] == {
        "accessModes": ["ReadWriteMany"],
        "resources": {"requests": {"storage": "100Gi"}},
        "volumeName": "pv-default-datasets",
    }


REFUSALS = [
    (
        {"metadata": {"namespace": "gpustack-system"}},
        "ReservedNamespace",
        "metadata.namespace: cannot create instance in reserved namespace gpustack-system: use a tenant namespace",
    ),
    (
        {"spec": {"type": "nope"}},
        "InstanceTypeNotFound",
        "spec.type: instance type nope not found: pick one from `kubectl get instancetypes`",
    ),
    (
        {"spec": {"nodeName": "node-gone"}},
        "NodeNotFound",
        "spec.nodeName: node node-gone not found: pick one from `kubectl get nodes`",
    ),
    (
        {"spec": {"resources": {"accelerator": "2"}}},
        "InvalidResources",
        "spec.resources.accelerator: exceeds the maximum accelerator request 1 of instance type gpustack--nvidia-a10g-linux-amd64",
    ),
    (
        {"spec": {"resources": {"acceleratorPartitionedProfile": "3g.40gb"}}},
        "InvalidResources",
        "spec.resources.acceleratorPartitionedProfile: instance type gpustack--nvidia-a10g-linux-amd64 does not offer hardware partitioning",
    ),
    (
        {"spec": {"additionalVolumes": [{"mountPath": "/workspace", "configMap": {"name": "c"}}]}},
        "InvalidVolume",
        "spec.additionalVolumes[0].mountPath: /workspace is the workspace (spec.volumeMount); mount elsewhere",
    ),
    (
        {
            "spec": {
                "additionalVolumes": [
                    {"mountPath": "/a", "configMap": {"name": "c"}},
                    {"mountPath": "/a", "secret": {"name": "s"}},
                ]
            }
        },
        "InvalidVolume",
        "spec.additionalVolumes[1].mountPath: /a duplicates spec.additionalVolumes[0].mountPath",
    ),
    (
        {
            "spec": {
                "additionalVolumes": [
                    {"mountPath": "/a", "subPath": "../etc", "configMap": {"name": "App_Config"}}
                ]
            }
        },
        "InvalidVolume",
        "spec.additionalVolumes[0].subPath: must be a relative path that stays inside the volume, got '../etc'; "
        "spec.additionalVolumes[0].configMap.name: must be a DNS-1123 name (lowercase letters, digits, '-' and '.'), got 'App_Config'",
    ),
    (
        {"spec": {"runtime": "VirtualMachine"}},
        "InvalidForVirtualMachine",
        "spec.resources.accelerator: a VirtualMachine takes its GPUs through spec.gpus and mounts only its "
        "workspace disk: clear spec.resources.accelerator",
    ),
]


@pytest.mark.parametrize(
    ("change", "reason", "message"), REFUSALS, ids=[r[1] + str(i) for i, r in enumerate(REFUSALS)]
)
def test_refusals_compose_no_pod_and_say_why(world, change, reason, message):
    refused = copy.deepcopy(example("instance-sliced-demo.yaml"))
    if "resources" in change.get("spec", {}):
        del refused["spec"]["resources"]
    for part, values in change.items():
        refused[part].update(values)
    namespace = refused["metadata"]["namespace"]
    run(world, refused)
    assert world.get("Pod", "sliced-demo", namespace) is None
    status = world.get("Instance", "sliced-demo", namespace)["status"]
    assert (status["phase"], status["phaseMessage"]) == ("Refused", message)
    admitted = condition(world.get("Instance", "sliced-demo", namespace), "Admitted")
    assert (admitted["reason"], admitted["message"]) == (reason, message)


# What the Instance XRD's own rules refuse never reaches a handler in a cluster: the API server
# refuses the write. Offline (`gpustack-fn render`) no API server runs, so the handler refuses
# the same spec itself, naming the same field.
SCHEMA_REFUSALS = [
    (
        {"volume": {"ephemeral": {"capacity": "1Gi"}, "persistent": {"name": "datasets"}}},
        'spec.volume: Invalid value: "object": cannot specify both ephemeral and persistent of volume',
        "spec.volume: cannot specify both ephemeral and persistent of volume",
    ),
    (
        {"additionalVolumes": [{"mountPath": "/a"}]},
        'spec.additionalVolumes[0]: Invalid value: "object": exactly one of persistent, configMap, '
        "secret or hostPath must be set",
        "spec.additionalVolumes[0]: exactly one of persistent, configMap, secret or hostPath must "
        "be set, got 0",
    ),
    (
        {"gpus": [{"name": "nvidia.com/NVIDIA_A10-4Q"}]},
        'spec.gpus: Invalid value: "object": gpus are taken by the VirtualMachine runtime only; a '
        "Container takes its accelerators through spec.resources: clear spec.gpus, or set "
        "spec.runtime to VirtualMachine",
        "spec.gpus: gpus are taken by the VirtualMachine runtime only; a Container takes its "
        "accelerators through spec.resources: clear spec.gpus, or set spec.runtime to "
        "VirtualMachine",
    ),
    (
        {"volumeMount": "/workspace/./data"},
        'spec.volumeMount: Invalid value: "string": volumeMount must be a canonical path: no '
        "'.' or '..' segment (/workspace/data, not /workspace/./data)",
        "spec.volumeMount: must be an absolute, canonical path, got '/workspace/./data': write "
        "'/workspace/data'",
    ),
    *[
        (
            {"additionalVolumes": [{"mountPath": path, "configMap": {"name": "c"}}]},
            'spec.additionalVolumes[0].mountPath: Invalid value: "string": mountPath must be a '
            "canonical path: no empty, '.' or '..' segment and no trailing '/' (/mnt/data, not "
            "/mnt/data/, //mnt/data or /mnt/./data)",
            f"spec.additionalVolumes[0].mountPath: must be an absolute, canonical path, got "
            f"{path!r}: write {canonical!r}",
        )
        for path, canonical in [
            ("/mnt/../etc", "/etc"),
            ("/mnt/data/", "/mnt/data"),
            ("//mnt", "/mnt"),
            ("/mnt/./x", "/mnt/x"),
        ]
    ],
    (  # the canonical spelling of another entry's path: both rules say so
        {
            "additionalVolumes": [
                {"mountPath": "/a", "configMap": {"name": "c"}},
                {"mountPath": "/tmp/../a", "secret": {"name": "s"}},
            ]
        },
        'spec.additionalVolumes[1].mountPath: Invalid value: "string": mountPath must be a '
        "canonical path: no empty, '.' or '..' segment and no trailing '/' (/mnt/data, not "
        "/mnt/data/, //mnt/data or /mnt/./data)",
        "spec.additionalVolumes[1].mountPath: must be an absolute, canonical path, got "
        "'/tmp/../a': write '/a'; spec.additionalVolumes[1].mountPath: /a duplicates "
        "spec.additionalVolumes[0].mountPath",
    ),
]


@pytest.mark.parametrize(
    ("change", "by_api_server", "by_handler"), SCHEMA_REFUSALS, ids=[r[2] for r in SCHEMA_REFUSALS]
)
def test_what_the_schema_refuses_the_handler_refuses_too(world, change, by_api_server, by_handler):
    refused = copy.deepcopy(example("instance-sliced-demo.yaml"))
    refused["spec"].update(change)
    with pytest.raises(Refused) as error:
        world.apply(refused)
    assert (
        str(error.value) == f'Instance.worker.gpustack.ai "sliced-demo" is invalid: {by_api_server}'
    )
    request = Request.of(
        refused,
        required={
            "catalog": world.list("Catalog"),
            "instancetype": [world.get("InstanceType", A10G)],
            "runtimeclasses": [],
        },
    )
    desired = instance_handler.compose(request)
    assert desired.status == {"phase": "Refused", "phaseMessage": by_handler}
    assert not desired.resources


def test_every_composed_object_validates_against_the_kubernetes_schemas(world):
    world.patch("Catalog", "default", {"instanceHostPathVolumeAllowed": True})
    served = copy.deepcopy(example("instance-custom-demo.yaml"))
    served["spec"].update(
        type=T4,
        ports=[{"port": 8080}],
        sshPublicKey={"name": "keys"},
        env=[{"name": "A", "value": "b"}],
    )
    run(world, example("instance-sliced-demo.yaml"), example("instance-pinned-demo.yaml"), served)
    checked = 0
    for kind in ("Pod", "Service", "PersistentVolumeClaim"):
        for obj in world.list(kind):
            desired = {k: v for k, v in obj.items() if k != "status"}
            desired["metadata"] = {k: v for k, v in obj["metadata"].items() if k != "generation"}
            assert schemas.validate_core(desired) == [], obj["metadata"]["name"]
            checked += 1
    for obj in world.list("Instance") + world.list("InstancePersistentVolume"):
        assert schemas.validate_xr(obj) == [], obj["metadata"]["name"]
    assert checked >= 5


def test_a_legacy_claim_composes_the_pod_in_the_claims_namespace(world):
    from functions import render
    from functions.server import run_function

    claim = example("instance-sliced-demo.yaml")
    composite = {
        "apiVersion": claim["apiVersion"],
        "kind": "XInstance",
        "metadata": {
            "name": "sliced-demo-x7k2p",
            "labels": {
                "crossplane.io/claim-name": "sliced-demo",
                "crossplane.io/claim-namespace": "default",
            },
        },
        "spec": claim["spec"],
    }
    composition = load_documents(ROOT / "compositions" / "legacy" / "pipelines" / "instance.yaml")[
        0
    ]
    stream = render.render_stream(
        run_function, composite, composition, required=world.store.values()
    )
    pod = next(doc for doc in stream if doc["kind"] == "Pod")
    assert (pod["metadata"]["name"], pod["metadata"]["namespace"]) == ("sliced-demo", "default")
    assert (
        pod["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "gpustack-fnv64-c4680bb149644f1c"
    )
    assert schemas.validate_xr(composite, legacy=True) == []


def test_a_key_no_device_plugin_advertises_leaves_the_pod_pending(world):
    """The scheduler fits Pods against what the device plugin advertises: no MIG card here."""
    partition = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "wants-mig",
            "namespace": "default",
            "labels": {"kueue.x-k8s.io/queue-name": "gpustack-fnv64-c4680bb149644f1c"},
        },
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "x",
                    "resources": {
                        "limits": {
                            "nvidia.com/gpu.partitioned": "1",
                            "nvidia.com/gpu.partitioned.mig-3g.40gb": "1",
                            "nvidia.com/gpu.partitioned.units": "800k",
                        }
                    },
                }
            ]
        },
    }
    run(world, partition)
    pod = world.get("Pod", "wants-mig", "default")
    assert "nodeName" not in pod["spec"]
    scheduled = condition(pod, "PodScheduled")
    assert (scheduled["status"], scheduled["reason"]) == ("False", "Unschedulable")
    assert scheduled["message"] == (  # Kueue's flavor gave it node-a10g's labels
        "0/4 nodes are available: 1 Insufficient nvidia.com/gpu.partitioned, "
        "1 Insufficient nvidia.com/gpu.partitioned.mig-3g.40gb, "
        "1 Insufficient nvidia.com/gpu.partitioned.units, "
        "3 node(s) didn't match Pod's node affinity/selector. "
        "preemption: 0/4 nodes are available: 1 No preemption victims found for incoming pod, "
        "3 Preemption is not helpful for scheduling."
    )


# --- whole cards wait for a whole card; a Pod the kubelet rejects is replaced -----------------


def on_t4(name: str, resources: dict, node_name: str = "") -> dict:
    """An Instance on the T4 pool (node-t4-a's one T4, node-t4-b's four) asking for `resources`."""
    found = copy.deepcopy(example("instance-custom-demo.yaml"))
    found["metadata"]["name"] = name
    found["spec"].update(type=T4, resources=resources)
    if node_name:
        found["spec"]["nodeName"] = node_name
    return found


def rounds(world: World, name: str) -> list[tuple[str, str, str]]:
    """Let the cluster settle round by round (as `reconcile` does), noting after each round the
    Instance's phase and its Admitted condition's reason and message."""
    seen = []
    for _ in range(16):
        before = world.store.snapshot()
        for controller in world.controllers:
            controller.run()
        found = instance(world, name)
        admitted = condition(found, "Admitted") if found.get("status") else {}
        seen.append(
            (
                found.get("status", {}).get("phase", ""),
                admitted.get("reason", ""),
                admitted.get("message", ""),
            )
        )
        if world.store.snapshot() == before:
            return seen
    raise AssertionError(f"the cluster did not settle: {seen}")


UNSCHEDULABLE_WHOLE_CARD = (  # Kueue gave it the 4-card flavor's labels; no node has a free card
    "0/4 nodes are available: 4 node(s) didn't match Pod's node affinity/selector. "
    "preemption: 0/4 nodes are available: 4 Preemption is not helpful for scheduling."
)


def test_a_whole_card_waits_pending_while_no_card_is_whole_and_runs_once_one_is_freed(world):
    """A share on each of node-t4-b's four T4s and a slice of node-t4-a's: the T4 row's EX
    reads 0/0, yet Kueue admits a whole card (the 4-card flavor's credits have room). Its Pod
    waits for a wholly free card, as the fit labels say, instead of being placed on node-t4-b
    and failed by the kubelet."""
    run(world, on_t4("shares", {"acceleratorShared": 4}))
    run(world, on_t4("slice", {"acceleratorSlicedMemoryPercentage": 20}, "node-t4-a"))
    assert accelerators(world, T4) == "0/0 4/36 80/80 0/0"
    run(world, on_t4("whole", {"accelerator": "1"}))
    status = instance(world, "whole")["status"]
    assert (status["phase"], status["phaseMessage"]) == ("Pending", UNSCHEDULABLE_WHOLE_CARD)
    pod = world.get("Pod", "whole", "default")
    assert "nodeName" not in pod["spec"]
    assert {
        "key": "exclusive-free-cards.fit.gpustack.ai/nvidia-tesla-t4",
        "operator": "Gt",
        "values": ["0"],
    } in pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ][0]["matchExpressions"]

    world.delete("Instance", "shares", "default")
    world.reconcile()
    status = instance(world, "whole")["status"]
    assert (status["phase"], status["nodeName"]) == ("Ready", "node-t4-b")
    assert accelerators(world, T4) == "3/3 3/30 100/380 0/0"


def test_a_pod_the_kubelet_rejects_at_admission_is_replaced_and_waits_for_a_whole_card(world):
    """node-t4-b has one wholly free T4 and two whole-card Instances arrive at once: both Pods
    match the fit label before the agent reports the first one's card, so both are placed there
    and the kubelet fails the second (UnexpectedAdmissionError). A failed Pod never starts
    again: the Instance gets a new Pod, says why meanwhile, and the new Pod waits Pending
    until a card is freed."""
    run(
        world,
        on_t4("shares", {"acceleratorShared": 3}),
        on_t4("slice", {"acceleratorSlicedMemoryPercentage": 20}, "node-t4-a"),
    )
    assert accelerators(world, T4) == "1/1 4/37 100/180 0/0"
    world.apply(on_t4("whole-a", {"accelerator": "1"}), on_t4("whole-b", {"accelerator": "1"}))
    seen = rounds(world, "whole-b")
    assert (
        "Starting",
        "ReplacingFailedPod",
        "the Pod never ran: the kubelet on node-t4-b rejected it at admission "
        "(UnexpectedAdmissionError: Allocate failed due to nvidia.com/gpu: 1 whole cards "
        "requested, 0 free, which is unexpected); replacing it with a new Pod",
    ) in seen
    assert seen[-1] == ("Pending", "PodComposed", "")
    assert instance(world, "whole-b")["status"]["phaseMessage"] == UNSCHEDULABLE_WHOLE_CARD
    assert instance(world, "whole-a")["status"]["phase"] == "Ready"
    assert accelerators(world, T4) == "0/0 3/27 80/80 0/0"

    world.delete("Instance", "shares", "default")
    world.reconcile()
    status = instance(world, "whole-b")["status"]
    assert (status["phase"], status["nodeName"]) == ("Ready", "node-t4-b")
    assert accelerators(world, T4) == "2/2 2/20 100/280 0/0"


# --- stop, edit, start before a reconcile: the Pod is always the current spec's ---------------


def test_stop_edit_start_before_a_reconcile_ends_with_a_pod_of_the_new_type(world):
    """Three patches the API server takes one by one (the XRD lets the type change once stop
    was true), with no reconcile between them: the Pod made for the T4 type is not kept under
    the A10G spec; it is replaced by one in the A10G queue, and the A10G row moves."""
    run(world, on_t4("custom-demo", {"accelerator": "1"}))
    assert accelerators(world, T4) == "4/4 4/40 100/400 0/0"
    t4_pod = world.get("Pod", "custom-demo", "default")
    world.patch("Instance", "custom-demo", {"stop": True}, "default")
    world.patch("Instance", "custom-demo", {"type": A10G}, "default")
    world.patch("Instance", "custom-demo", {"stop": False}, "default")
    world.reconcile()
    pod = world.get("Pod", "custom-demo", "default")
    assert pod["metadata"]["uid"] != t4_pod["metadata"]["uid"]
    assert pod["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == A10G_ENTRANCE
    assert pod["spec"]["nodeName"] == "node-a10g"
    status = instance(world, "custom-demo")["status"]
    assert (status["phase"], status["nodeName"]) == ("Ready", "node-a10g")
    assert accelerators(world, A10G) == "0/0 0/0 0/0 0/0"
    assert accelerators(world, T4) == INITIAL_T4
    assert world.results[("Instance", "default", "custom-demo")] == []
