"""Crossplane's side of the contract: its permissions, and both of its protocols.

- RBAC: the simulated Crossplane reaches only what the shipped ClusterRole grants; take a
  permission away and the composite that needs it fails, naming the resource and the verb.
- Protocols: Crossplane 1.x asks and answers through `extra_resources` and ignores namespaces;
  2.2+ through `required_resources`. Every handler composes the same bytes through either,
  except a namespaced match by name, which 1.x cannot serve and which is refused saying so.
"""

from __future__ import annotations

import copy
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from functions import pipeline
from functions.server import run_function
from gpustack_sim import World, load_documents, world_from
from gpustack_sim.store import Key
from tests.support.schemas import ROOT

WALKTHROUGH = ROOT / "examples" / "walkthrough"
CLASSES = ROOT / "examples" / "gpuclass"
CLUSTER = ["devices.yaml", "nodes.yaml", "namespaces.yaml", "storage.yaml", "catalog.yaml"]


def without(tmp_path: Path, group: str, resource: str) -> Path:
    """A copy of the API whose ClusterRole no longer grants `resource` of `group`."""
    api = tmp_path / "compositions"
    shutil.copytree(ROOT / "compositions", api)
    role_file = api / "rbac" / "clusterrole.yaml"
    role = yaml.safe_load(role_file.read_text())
    for rule in role["rules"]:
        if group in rule["apiGroups"]:
            rule["resources"] = [r for r in rule["resources"] if r != resource]
    role["rules"] = [rule for rule in role["rules"] if rule["resources"]]
    role_file.write_text(yaml.safe_dump(role))
    return api


@dataclass(frozen=True)
class Gap:
    name: str
    group: str
    resource: str
    extra: tuple[str, ...]  # walkthrough files that make some composite need it
    failing: tuple[str, str, str]  # (kind, namespace, name) of the composite that fails
    verb: str


GAPS = [
    Gap(
        "a pinned Instance with a volume reads StorageClasses",
        "storage.k8s.io",
        "storageclasses",
        ("instancepersistentvolume-datasets.yaml", "instance-pinned-demo.yaml"),
        ("Instance", "default", "pinned-demo"),
        "list",
    ),
    Gap(
        "a node's Devices composes NodeFeatures",
        "nfd.k8s-sigs.io",
        "nodefeatures",
        (),
        ("Devices", "", "node-a10g"),
        "get",
    ),
    Gap(
        "a node's Devices composes its summary ConfigMap",
        "",
        "configmaps",
        (),
        ("Devices", "", "node-a10g"),
        "get",
    ),
    Gap(
        "the Catalog reads the node summaries",
        "",
        "configmaps",
        (),
        ("Catalog", "", "default"),
        "list",
    ),
    Gap(
        "a pool composes its LocalQueues",
        "kueue.x-k8s.io",
        "localqueues",
        (),
        ("InstanceType", "", "gpustack--nvidia-a10g-linux-amd64"),
        "get",
    ),
    Gap(
        "a pool reads the Namespaces",
        "",
        "namespaces",
        (),
        ("InstanceType", "", "gpustack--nvidia-a10g-linux-amd64"),
        "list",
    ),
    Gap(
        "an Instance composes its Pod",
        "",
        "pods",
        ("instance-sliced-demo.yaml",),
        ("Instance", "default", "sliced-demo"),
        "get",
    ),
]


@pytest.mark.parametrize("gap", GAPS, ids=[g.name for g in GAPS])
def test_a_permission_missing_from_the_cluster_role_fails_the_composite_that_needs_it(
    tmp_path, gap
):
    world = World(api_dir=without(tmp_path, gap.group, gap.resource))
    for name in (*CLUSTER, *gap.extra):
        world.apply(*load_documents(WALKTHROUGH / name))
    world.reconcile()
    kind, namespace, name = gap.failing
    composite = world.get(kind, name, namespace)
    synced = next(c for c in composite["status"]["conditions"] if c["type"] == "Synced")
    where = f'"{gap.group}"' if gap.group else '""'
    assert synced["status"] == "False"
    assert f'cannot {gap.verb} resource "{gap.resource}" in API group {where}' in synced["message"]


def test_the_shipped_cluster_role_lets_every_composite_of_the_walkthrough_sync():
    world = world_from(
        [WALKTHROUGH / n for n in (*CLUSTER, "instancepersistentvolume-datasets.yaml")]
    )
    world.apply(*load_documents(WALKTHROUGH / "instance-sliced-demo.yaml"))
    world.reconcile()
    for kind in world.crossplane.compositions:
        for composite in world.list(kind):
            synced = next(c for c in composite["status"]["conditions"] if c["type"] == "Synced")
            assert synced["status"] == "True", (kind, composite["metadata"]["name"], synced)


# --- both protocols -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def settled() -> World:
    """A cluster with a composite of every kind: the walkthrough, two Instances, GPU classes."""
    files = [WALKTHROUGH / n for n in (*CLUSTER, "instancepersistentvolume-datasets.yaml")]
    world = world_from([*files, CLASSES / "cluster.yaml", CLASSES / "classes.yaml"])
    pinned = load_documents(WALKTHROUGH / "instance-pinned-demo.yaml")[0]
    pinned["spec"]["additionalVolumes"] = pinned["spec"]["additionalVolumes"][:2]
    world.apply(pinned, *load_documents(WALKTHROUGH / "instance-sliced-demo.yaml"))
    world.reconcile()
    return world


def test_every_composed_object_names_its_composite_as_controller_and_goes_with_it():
    """Crossplane makes the composite each composed object's controller (`meta.AsController`),
    so the garbage collector deletes what a deleted composite composed."""
    world = world_from([WALKTHROUGH / n for n in CLUSTER])
    world.apply(*load_documents(WALKTHROUGH / "instance-sliced-demo.yaml"))
    world.reconcile()
    instance = world.get("Instance", "sliced-demo", "default")
    pod = world.get("Pod", "sliced-demo", "default")
    assert pod["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "worker.gpustack.ai/v1alpha1",
            "kind": "Instance",
            "name": "sliced-demo",
            "uid": instance["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    world.delete("Instance", "sliced-demo", "default")
    world.reconcile()
    assert world.get("Pod", "sliced-demo", "default") is None


def composites(world: World) -> list[tuple[str, dict]]:
    return [
        (kind, obj) for kind in sorted(world.crossplane.compositions) for obj in world.list(kind)
    ]


def desired_through(world: World, kind: str, composite: dict, caller: pipeline.Caller):
    crossplane = world.crossplane
    key = (kind, composite["metadata"].get("namespace", ""), composite["metadata"]["name"])
    owned = crossplane.owned.get(key, {})
    observed = {n: world.get(k.kind, k.name, k.namespace) for n, k in owned.items()}
    rsp, _ = pipeline.run_pipeline(
        run_function,
        crossplane.compositions[kind],
        copy.deepcopy(composite),
        {n: o for n, o in observed.items() if o is not None},
        list(world.store.values()),
        caller,
    )
    return rsp


def test_every_handler_composes_the_same_bytes_through_either_protocol(settled):
    compared = set()
    for kind, composite in composites(settled):
        legacy = desired_through(settled, kind, composite, pipeline.CROSSPLANE_1)
        modern = desired_through(settled, kind, composite, pipeline.CROSSPLANE_2)
        fatal = [r for r in legacy.results if r.severity == fnv1.SEVERITY_FATAL]
        if fatal:  # only a namespaced match by name may be refused, and it says why
            assert "cannot fetch Secret" in fatal[0].message, fatal[0].message
            continue
        assert legacy.desired.SerializeToString(deterministic=True) == (
            modern.desired.SerializeToString(deterministic=True)
        ), (kind, composite["metadata"]["name"])
        compared.add(kind)
    assert compared >= {
        "Catalog",
        "Devices",
        "InstanceType",
        "InstanceTypeFlavor",
        "Instance",
        "InstancePersistentVolume",
        "GPUClass",
    }


# --- a composite's conditions, as Crossplane keeps them -------------------------------------------


def test_a_condition_a_function_stops_sending_stays_and_a_fatal_result_makes_it_unknown():
    """Crossplane sets the conditions a function sends on the XR's own and keeps the others;
    after a Fatal result, each condition of the function's reads Unknown (reconciler.go)."""
    mode = {"now": "send"}

    def run(req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
        rsp = run_function(req)
        if mode["now"] == "send":
            rsp.conditions.add(type="Custom", status=fnv1.STATUS_CONDITION_TRUE, reason="Sent")
        elif mode["now"] == "fail":
            rsp.results.add(severity=fnv1.SEVERITY_FATAL, message="the step failed")
        return rsp

    world = world_from([WALKTHROUGH / name for name in CLUSTER], run)

    def custom() -> tuple[str, str, str]:
        found = world.get("Catalog", "default")["status"]["conditions"]
        condition = next(c for c in found if c["type"] == "Custom")
        return condition["status"], condition["reason"], condition["message"]

    world.reconcile()
    assert custom() == ("True", "Sent", "")
    mode["now"] = "quiet"
    world.crossplane.poll()  # nothing in the cluster changed: Crossplane sees it at its poll
    world.reconcile()
    assert custom() == ("True", "Sent", "")  # not sent, not removed
    mode["now"] = "fail"
    world.crossplane.poll()
    world.reconcile()
    assert custom() == (
        "Unknown",
        "FatalError",
        "A fatal error occurred before the status of this condition could be determined.",
    )


def test_a_composed_field_the_schema_lacks_fails_the_apply_not_pruned():
    """Crossplane server-side applies what it composes, and SSA's typed patch has no place for
    a field the kind's schema lacks: that apply fails, where a plain write would prune the
    field with a warning and a product bug would pass unseen. (The derived InstanceTypes: our
    own XRD, so the test needs no upstream schema.)"""

    def run(req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
        rsp = run_function(req)
        for name, composed in rsp.desired.resources.items():
            if name.startswith("instancetype-"):
                composed.resource["spec"]["unitResourcez"] = {"typo": "yes"}
        return rsp

    world = world_from([WALKTHROUGH / name for name in CLUSTER], run)
    world.reconcile()
    catalog = world.get("Catalog", "default")
    synced = next(c for c in catalog["status"]["conditions"] if c["type"] == "Synced")
    owned = world.crossplane.owned[Key.of(catalog)]
    types = sorted(name for name in owned if name.startswith("instancetype-"))
    # Crossplane applies the rest, and says which it could not (crossplane-runtime's
    # StableNAndSomeMore: exactly three read "a, b, and c")
    assert len(types) == 3
    assert (synced["status"], synced["message"]) == (
        "False",
        f"Unsynced resources: {types[0]}, {types[1]}, and {types[2]}",
    )
    assert world.list("InstanceType") == []
    assert world.list("InstanceTypeFlavor") != []
    (first, *_) = world.crossplane.events[Key.of(catalog)]
    assert first.startswith(
        f'Warning ComposeResources: cannot apply composed resource "{types[0]}"'
    )
    assert "spec.unitResourcez: Forbidden: field not declared in schema" in first


def test_a_status_map_a_function_empties_is_stored_as_null_and_refused():
    """Crossplane 2.x server-side applies the composite's status: a map whose fields the
    function set before and sends as `{}` now is stored as null (kubernetes#104694), which a
    non-nullable object refuses. The status stays as it was, whatever the function computed,
    and a Warning says why. The real control plane found our pools' `status.detail` so: a pool
    whose last node left kept showing its card (docs/e2e.md)."""
    empty = {"detail": False}

    def run(req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
        rsp = run_function(req)
        if empty["detail"] and req.observed.composite.resource["kind"] == "InstanceType":
            rsp.desired.composite.resource["status"]["detail"] = {}
            rsp.desired.composite.resource["status"]["phaseMessage"] = "computed, never shown"
        return rsp

    world = world_from([WALKTHROUGH / name for name in CLUSTER], run)
    world.reconcile()
    name = "gpustack--nvidia-a10g-linux-amd64"
    before = world.get("InstanceType", name)["status"]
    assert before["detail"]["product"] == "NVIDIA-A10G"
    empty["detail"] = True
    world.crossplane.poll()
    world.reconcile()
    assert world.get("InstanceType", name)["status"] == before
    assert world.crossplane.events[Key("InstanceType", "", name)][-1] == (
        "Warning ComposeResources: cannot compose resources: cannot apply composite resource "
        f'status: InstanceType.worker.gpustack.ai "{name}" is invalid: [status.detail: Invalid '
        'value: "null": detail in body must be of type object: "null", <nil>: Invalid value: '
        "null: some validation rules were not checked because the object was invalid; correct "
        "the existing errors to complete validation]"
    )


# --- the requirements loop, as Crossplane's FetchingFunctionRunner runs each step ---------------


def config_map(name: str, namespace: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
    }


def scripted(*asks: dict[str, fnv1.ResourceSelector] | None):
    """A function whose n-th call asks for `asks[n]` (None: sets no requirements at all), and
    the requests it was sent."""
    sent: list[fnv1.RunFunctionRequest] = []

    def run(req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
        sent.append(copy.deepcopy(req))
        rsp = fnv1.RunFunctionResponse(context=req.context)
        wanted = asks[min(len(sent), len(asks)) - 1]
        if wanted is not None:
            rsp.requirements.SetInParent()
            for name, selector in wanted.items():
                rsp.requirements.resources[name].CopyFrom(selector)
        return rsp

    return run, sent


BY_LABEL = fnv1.ResourceSelector(api_version="v1", kind="ConfigMap", match_labels={"labels": {}})
BY_NAME = fnv1.ResourceSelector(api_version="v1", kind="ConfigMap", match_name="b", namespace="a")


def step(run, objects=()) -> None:
    pipeline.run_step(
        run, pipeline.request({"kind": "X", "metadata": {"name": "x"}}, {}, {}), objects
    )


def test_a_function_that_asks_for_nothing_is_called_once_with_an_empty_context():
    run, sent = scripted(None)
    step(run)
    assert len(sent) == 1
    assert sent[0].HasField("context") and not sent[0].context.fields


def test_each_call_is_given_what_the_call_before_asked_for_and_no_more():
    run, sent = scripted({"all": BY_LABEL, "one": BY_NAME}, {"one": BY_NAME}, {"one": BY_NAME})
    step(run, [config_map("b", "a"), config_map("x", "a-b")])
    assert [sorted(req.required_resources) for req in sent] == [[], ["all", "one"], ["one"]]
    listed = sent[1].required_resources["all"].items
    # Sorted as Crossplane sorts them: by "namespace/name" ("a-b/x" before "a/b").
    assert [item.resource["metadata"]["namespace"] for item in listed] == ["a-b", "a"]


def test_requirements_that_never_settle_fail_after_six_calls():
    asks = [{f"r{n}": BY_NAME} for n in range(10)]
    run, sent = scripted(*asks)
    with pytest.raises(pipeline.RequirementsUnstable, match=r"maximum number of iterations \(5\)"):
        step(run)
    assert len(sent) == 6
