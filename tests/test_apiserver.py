"""The simulated API server refuses what kube-apiserver refuses, in its words, and stores what
it stores: our XRDs' schemas and CEL rules (transition rules included), the upstream CRDs,
core kinds, ObjectMeta; defaults, pruning, the status subresource, generations and patches."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from gpustack_sim import schemas, validation
from gpustack_sim.apiserver import (
    ALREADY_EXISTS,
    BAD_REQUEST,
    INVALID,
    NOT_FOUND,
    ApiServer,
    Refused,
)
from gpustack_sim.client import Client
from gpustack_sim.garbagecollector import GarbageCollector
from gpustack_sim.store import Store
from tests.support.schemas import ROOT, documents, require_schemas

WALKTHROUGH = ROOT / "examples" / "walkthrough"
REPOINTED_TYPE = "gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64"  # walkthrough §5
WALKTHROUGH_5_PATCH = {"spec": {"type": REPOINTED_TYPE, "stop": False}}
RULES_NOT_CHECKED = (
    "<nil>: Invalid value: null: some validation rules were not checked because the object "
    "was invalid; correct the existing errors to complete validation"
)


# --- builders ---------------------------------------------------------------------------------


def example(name: str) -> dict[str, Any]:
    return yaml.safe_load((WALKTHROUGH / name).read_text())


def instance(phase: str = "", **spec: Any) -> dict[str, Any]:
    """The walkthrough's custom-demo Instance; `spec` overrides (None removes); `phase` a status."""
    obj = example("instance-custom-demo.yaml")
    for key, value in spec.items():
        if value is None:
            obj["spec"].pop(key, None)
        else:
            obj["spec"][key] = value
    if phase:
        obj["status"] = {"phase": phase}
    return obj


def instance_type(**spec: Any) -> dict[str, Any]:
    obj = example("instancetype-a10g-12c128g.yaml")
    obj["spec"].update(spec)
    return obj


def gpu_class(**spec: Any) -> dict[str, Any]:
    classes = documents(ROOT / "examples" / "gpuclass" / "classes.yaml")
    obj = copy.deepcopy(next(c for c in classes if c["metadata"]["name"] == "example-whole-gpu"))
    obj["spec"].update(spec)
    return obj


def catalog(**spec: Any) -> dict[str, Any]:
    obj = example("catalog.yaml")
    obj["spec"].update(spec)
    return obj


def cluster_queue(*covered: str) -> dict[str, Any]:
    """A ClusterQueue whose one flavor gives quota for cpu only, covering `covered`."""
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "team-a"},
        "spec": {
            "resourceGroups": [
                {
                    "coveredResources": list(covered),
                    "flavors": [{"name": "f", "resources": [{"name": "cpu", "nominalQuota": 4}]}],
                }
            ]
        },
    }


def pod(container: dict[str, Any], **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web", "namespace": "default", "labels": labels},
        "spec": {"containers": [container]},
    }


def server(*stored: dict[str, Any]) -> ApiServer:
    api = ApiServer(Store())
    for obj in stored:
        api.create(obj)
    return api


def write(api: ApiServer, obj: dict[str, Any]) -> dict[str, Any]:
    return api.apply(obj)


def stored(api: ApiServer, obj: dict[str, Any]) -> dict[str, Any] | None:
    metadata = obj["metadata"]
    return api.store.get(obj["kind"], metadata["name"], metadata.get("namespace", ""))


# --- writes a real API server refuses, and their valid twins ------------------------------------


@dataclass(frozen=True)
class Case:
    name: str
    write: dict[str, Any]  # created, or an update of `stored`
    refused: str  # what follows `Kind.group "name" is invalid: `
    valid: dict[str, Any]  # the write, corrected
    stored: dict[str, Any] | None = None
    valid_stored: dict[str, Any] | None = None  # when the twin differs in what it replaces
    upstream: bool = False  # needs the upstream schemas


LONG_TYPE = "gpustack--intel-xeon-platinum-8259cl--nvidia-tesla-t4-linux-amd64"  # 65 characters

CASES = [
    Case(
        "an InstanceType's unit resources never change; only the display fields do",
        stored=instance_type(),
        write=instance_type(unitResources={"cpu": "16", "ram": "128Gi"}),
        refused='spec: Invalid value: "object": spec is immutable except displayName, description and inactive; create a new InstanceType instead',
        valid=instance_type(displayName="A10G large", inactive=True),
    ),
    Case(
        "a running Instance keeps its type; a drained one (phase Stopped) may be repointed",
        stored=instance(phase="Running"),
        write=instance(type=REPOINTED_TYPE),
        refused='spec.type: Invalid value: "object": type is immutable while the Instance runs: set spec.stop to true, wait for Stopped, then change it',
        valid_stored=instance(phase="Stopped"),
        valid=instance(type=REPOINTED_TYPE),
    ),
    Case(
        "an Instance's volume never changes, even while stopped",
        stored=instance(stop=True),
        write=instance(stop=True, volume={"ephemeral": {"capacity": "2Gi"}}),
        refused='spec.volume: Invalid value: "object": volume is immutable',
        valid=instance(stop=True, image="ubuntu:26.04"),
    ),
    Case(
        "a GPUClass keeps its identity; its device plugin source may move",
        stored=gpu_class(),
        write=gpu_class(model="other-model"),
        refused='spec: Invalid value: "object": vendor, model, mode, profile and memory identify the offer and are immutable; create a new class to change them',
        valid=gpu_class(source={"devicePlugin": {"resourceName": "example.com/other"}}),
    ),
    Case(
        "an Instance names its image",
        write=instance(image=None),
        refused=f"[spec.image: Required value, {RULES_NOT_CHECKED}]",
        valid=instance(),
    ),
    Case(
        "an Instance runs as a Container or a VirtualMachine, and rules wait for a valid object",
        write=instance(runtime="Docker"),
        refused='[spec.runtime: Unsupported value: "Docker": supported values: "Container", "VirtualMachine", '
        + RULES_NOT_CHECKED
        + "]",
        valid=instance(runtime="Container"),
    ),
    Case(
        "a GPUClass display name is at most 128 characters",
        write=gpu_class(displayName="x" * 129),
        refused=f"[spec.displayName: Too long: may not be more than 128 bytes, {RULES_NOT_CHECKED}]",
        valid=gpu_class(displayName="x" * 128),
    ),
    Case(
        "an Instance mounts its volume at an absolute path",
        write=instance(volumeMount="workspace"),
        refused="spec.volumeMount: Invalid value: \"workspace\": spec.volumeMount in body should match '^(/[^/]+)+$'",
        valid=instance(volumeMount="/workspace"),
    ),
    Case(
        "a slice takes at most 100 percent of a card's memory",
        write=instance(resources={"acceleratorSlicedMemoryPercentage": 101}),
        refused="spec.resources.acceleratorSlicedMemoryPercentage: Invalid value: 101: spec.resources.acceleratorSlicedMemoryPercentage in body should be less than or equal to 100",
        valid=instance(resources={"acceleratorSlicedMemoryPercentage": 100}),
    ),
    Case(
        "an Instance sets each environment variable once",
        write=instance(env=[{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]),
        refused='spec.env[1]: Duplicate value: {"name":"A"}',
        valid=instance(env=[{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]),
    ),
    Case(
        "an additional volume has exactly one source",
        write=instance(additionalVolumes=[{"mountPath": "/data"}]),
        refused='spec.additionalVolumes[0]: Invalid value: "object": exactly one of persistent, configMap, secret or hostPath must be set',
        valid=instance(additionalVolumes=[{"mountPath": "/data", "configMap": {"name": "c"}}]),
    ),
    Case(
        "an acceleratable InstanceType names its accelerator group",
        write=instance_type(acceleratorGroup=""),
        refused='spec.acceleratorGroup: Invalid value: "object": acceleratorGroup must be specified when acceleratable is true',
        valid=instance_type(acceleratorGroup="nvidia-a10g"),
    ),
    Case(
        "a composite's name fits a label value: Crossplane's CRD says so, since what it composes "
        "carries the name as one (the real control plane refused the seed's aware T4 pool so)",
        write={**instance_type(), "metadata": {"name": LONG_TYPE}},
        refused=f"[metadata.name: Too long: may not be more than 63 bytes, {RULES_NOT_CHECKED}]",
        valid={**instance_type(), "metadata": {"name": LONG_TYPE[:63]}},
    ),
    Case(
        "the Catalog's vmNodeSelector keys are label keys",
        write=catalog(vmNodeSelector={"gpu nodes": "true"}),
        refused="spec.vmNodeSelector: Invalid value: \"object\": a label key is an optional DNS subdomain and '/', then at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit",
        valid=catalog(vmNodeSelector={"nvidia.com/gpu.deploy.sandbox-device-plugin": "true"}),
    ),
    Case(
        "the Catalog's vmNodeSelector values are label values",
        write=catalog(vmNodeSelector={"pool": "vm nodes"}),
        refused="spec.vmNodeSelector[pool]: Invalid value: \"vm nodes\": spec.vmNodeSelector[pool] in body should match '^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$'",
        valid=catalog(vmNodeSelector={"pool": "vm-nodes", "empty": ""}),
    ),
    Case(
        "the Catalog's flavor tolerations never tolerate the node lifecycle's taints",
        write=catalog(
            acceleratedFlavorTolerations=[
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists"}
            ]
        ),
        refused='spec.acceleratedFlavorTolerations[0]: Invalid value: "object": the node lifecycle\'s taints (node.kubernetes.io/..., node.cloudprovider.kubernetes.io/...) are never tolerated: a Pod on a lost or cordoned node must be evicted and placed again',
        valid=catalog(acceleratedFlavorTolerations=[{"key": "dedicated", "operator": "Exists"}]),
    ),
    Case(
        "an Exists flavor toleration has no value",
        write=catalog(
            acceleratedFlavorTolerations=[
                {"key": "dedicated", "operator": "Exists", "value": "gpu"}
            ]
        ),
        refused='spec.acceleratedFlavorTolerations[0]: Invalid value: "object": an Exists toleration has no value; drop it, or use Equal',
        valid=catalog(acceleratedFlavorTolerations=[{"key": "dedicated", "value": "gpu"}]),
    ),
    Case(
        "a flavor toleration's key is a label key",
        write=catalog(acceleratedFlavorTolerations=[{"key": "gpu nodes"}]),
        refused="spec.acceleratedFlavorTolerations[0]: Invalid value: \"object\": a label key is an optional DNS subdomain and '/', then at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit",
        valid=catalog(acceleratedFlavorTolerations=[{"key": "example.com/gpu-nodes"}]),
    ),
    Case(
        "a flavor toleration's effect is a taint's",
        write=catalog(acceleratedFlavorTolerations=[{"key": "dedicated", "effect": "NoEntry"}]),
        refused='[spec.acceleratedFlavorTolerations[0].effect: Unsupported value: "NoEntry": supported values: "NoSchedule", "PreferNoSchedule", "NoExecute", <nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation]',
        valid=catalog(acceleratedFlavorTolerations=[{"key": "dedicated", "effect": "NoSchedule"}]),
    ),
    Case(
        "a flavor takes at most seven tolerations of the Catalog's (Kueue allows it eight)",
        write=catalog(acceleratedFlavorTolerations=[{"key": f"k{i}"} for i in range(8)]),
        refused=f"[spec.acceleratedFlavorTolerations: Too many: 8: must have at most 7 items, {RULES_NOT_CHECKED}]",
        valid=catalog(acceleratedFlavorTolerations=[{"key": f"k{i}"} for i in range(7)]),
    ),
    Case(
        "a ClusterQueue's flavors give quota for every covered resource (Kueue's rule)",
        write=cluster_queue("cpu", "memory"),
        refused='spec.resourceGroups[0]: Invalid value: "object": flavors must have the same number of resources as the coveredResources',
        valid=cluster_queue("cpu"),
        upstream=True,
    ),
    Case(
        "a Pod's containers are named",
        write=pod({"image": "busybox"}),
        refused="spec.containers[0].name: Required value",
        valid=pod({"name": "main", "image": "busybox"}),
    ),
    Case(
        "a label value is at most 63 characters",
        write=pod({"name": "main", "image": "busybox"}, app="x" * 64),
        refused='metadata.labels: Invalid value: "'
        + "x" * 64
        + '": must be no more than 63 characters',
        valid=pod({"name": "main", "image": "busybox"}, app="x" * 63),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_a_write_a_real_api_server_refuses(case: Case):
    if case.upstream:
        require_schemas()
    api = server(case.stored) if case.stored else server()
    before = copy.deepcopy(stored(api, case.write))
    with pytest.raises(Refused) as refused:
        write(api, case.write)
    kind = api.schemas.lookup(case.write["apiVersion"], case.write["kind"])
    name = case.write["metadata"]["name"]
    assert str(refused.value) == f'{kind.qualified_kind} "{name}" is invalid: {case.refused}'
    assert refused.value.reason == INVALID
    assert stored(api, case.write) == before  # untouched
    twin = server(case.valid_stored or case.stored) if case.stored else server()
    write(twin, case.valid)


# --- what is stored ---------------------------------------------------------------------------


def test_defaults_are_applied():
    spec = server().create(instance(runtime=None))["spec"]
    assert (spec["runtime"], spec["volumeMount"], spec["stop"]) == (
        "Container",
        "/workspace",
        False,
    )
    ports = server().create(instance(ports=[{"port": 8080}]))["spec"]["ports"]
    assert ports == [{"port": 8080, "protocol": "TCP"}]


def test_unknown_fields_are_pruned_with_the_api_servers_warning():
    api = server()
    created = api.create(instance(bogus="x", resources={"accelerator": "1", "gpu": 1}))
    assert "bogus" not in created["spec"] and created["spec"]["resources"] == {"accelerator": "1"}
    assert sorted(api.warnings) == [
        'unknown field "spec.bogus"',
        'unknown field "spec.resources.gpu"',
    ]


def test_a_write_of_the_main_resource_keeps_the_stored_status():
    api = server(instance(phase="Running"))
    updated = api.apply(instance(displayName="demo", phase="Failed"))
    assert updated["status"] == {"phase": "Running"}
    assert updated["spec"]["displayName"] == "demo"


def test_the_status_write_stores_only_the_status_and_validates_it():
    api = server(instance())
    updated = api.update_status(instance(image="ignored", phase="Stopped"))
    assert updated["status"] == {"phase": "Stopped"}
    assert updated["spec"]["image"] == "ubuntu:24.04"
    assert updated["metadata"]["generation"] == 1
    with pytest.raises(Refused) as refused:
        api.update_status({**instance(), "status": {"stoppedGeneration": "two"}})
    assert str(refused.value) == (
        'Instance.worker.gpustack.ai "custom-demo" is invalid: [status.stoppedGeneration: '
        'Invalid value: "string": stoppedGeneration in body must be of type integer: "string", '
        f"{RULES_NOT_CHECKED}]"
    )


def test_the_generation_starts_at_one_and_moves_when_the_spec_changes():
    api = server()
    assert api.create(instance())["metadata"]["generation"] == 1
    assert api.apply(instance(displayName="demo"))["metadata"]["generation"] == 2
    relabeled = instance(displayName="demo")
    relabeled["metadata"]["labels"] = {"team": "a"}
    assert api.apply(relabeled)["metadata"]["generation"] == 2
    assert api.update_status(instance(phase="Running"))["metadata"]["generation"] == 2
    assert api.apply(instance(displayName="demo"))["metadata"]["generation"] == 2  # unchanged


def test_create_of_an_existing_object_and_updates_of_a_missing_one_are_refused():
    api = server(instance())
    cases = [
        (lambda: api.create(instance()), ALREADY_EXISTS, "already exists"),
        (lambda: api.merge_patch("Instance", "nope", {}, "default"), NOT_FOUND, "not found"),
        (lambda: server().update(instance()), NOT_FOUND, "not found"),
        (lambda: server().update_status(instance()), NOT_FOUND, "not found"),
    ]
    for call, reason, words in cases:
        with pytest.raises(Refused) as refused:
            call()
        assert refused.value.reason == reason
        assert str(refused.value).startswith("instances.worker.gpustack.ai ")
        assert str(refused.value).endswith(words)


# --- patches ------------------------------------------------------------------------------------


def test_the_walkthrough_5_repoint_is_accepted_on_a_drained_instance():
    api = server(instance(phase="Stopped"))
    patched = api.merge_patch("Instance", "custom-demo", WALKTHROUGH_5_PATCH, "default")
    assert (patched["spec"]["type"], patched["spec"]["stop"]) == (REPOINTED_TYPE, False)
    assert patched["metadata"]["generation"] == 2


def test_the_walkthrough_5_repoint_is_refused_on_a_running_instance():
    api = server(instance(phase="Running"))
    with pytest.raises(Refused) as refused:
        api.merge_patch("Instance", "custom-demo", WALKTHROUGH_5_PATCH, "default")
    assert str(refused.value) == (
        'Instance.worker.gpustack.ai "custom-demo" is invalid: spec.type: Invalid value: "object": '
        "type is immutable while the Instance runs: set spec.stop to true, wait for Stopped, then change it"
    )
    assert api.store.get("Instance", "custom-demo", "default")["spec"]["type"] == "a10g-12c128g"


def test_a_merge_patch_deletes_with_null_and_replaces_lists():
    api = server(instance(stop=True, displayName="demo", command=["sleep", "1"]))
    patch = {
        "metadata": {"labels": {"team": "a", "gone": None}},  # a null inside a new map, too
        "spec": {"displayName": None, "command": ["true"]},
    }
    patched = api.merge_patch("Instance", "custom-demo", patch, "default")
    assert patched["metadata"]["labels"] == {"team": "a"}
    assert "displayName" not in patched["spec"] and patched["spec"]["command"] == ["true"]


def test_a_json_patch_with_a_failing_test_is_refused_and_changes_nothing():
    api = server(instance())
    operations = [
        {"op": "replace", "path": "/spec/image", "value": "ubuntu:26.04"},
        {"op": "test", "path": "/spec/stop", "value": True},
    ]
    with pytest.raises(Refused) as refused:
        api.json_patch("Instance", "custom-demo", operations, "default")
    assert refused.value.reason == BAD_REQUEST
    assert str(refused.value) == (
        'Instance.worker.gpustack.ai "custom-demo": JSON patch operation 1 (test /spec/stop) '
        "failed: the value is false, not true"
    )
    assert api.store.get("Instance", "custom-demo", "default")["spec"]["image"] == "ubuntu:24.04"


def test_a_json_patch_applies_every_operation_in_order():
    api = server(instance(stop=True, command=["sleep", "1"]))
    operations = [
        {"op": "test", "path": "/spec/stop", "value": True},
        {"op": "add", "path": "/spec/command/-", "value": "2"},
        {"op": "add", "path": "/spec/command/0", "value": "exec"},
        {"op": "remove", "path": "/spec/command/1"},
        {"op": "copy", "from": "/spec/image", "path": "/spec/displayName"},
        {"op": "move", "from": "/spec/displayName", "path": "/spec/description"},
        {"op": "replace", "path": "/spec/stop", "value": False},
    ]
    spec = api.json_patch("Instance", "custom-demo", operations, "default")["spec"]
    assert spec["command"] == ["exec", "1", "2"]
    assert (spec["description"], spec["stop"]) == ("ubuntu:24.04", False)
    assert "displayName" not in spec


def test_a_patch_cannot_rename_the_object():
    api = server(instance())
    with pytest.raises(Refused) as refused:
        api.merge_patch("Instance", "custom-demo", {"metadata": {"name": "other"}}, "default")
    assert refused.value.reason == BAD_REQUEST
    assert api.store.get("Instance", "other", "default") is None


def test_a_json_patch_on_the_status_subresource():
    api = server(instance(phase="Running"))
    operations = [{"op": "replace", "path": "/status/phase", "value": "Stopped"}]
    patched = api.json_patch("Instance", "custom-demo", operations, "default", subresource="status")
    assert patched["status"] == {"phase": "Stopped"}


# --- where the schemas come from --------------------------------------------------------------


def test_without_upstream_schemas_upstream_kinds_pass_unvalidated_and_it_is_said_once():
    api = ApiServer(Store(), schemas.Schemas(None))
    assert api.notices == [schemas.SCHEMAS_MISSING]
    api.create(cluster_queue("cpu", "memory"))  # invalid, but nothing can judge it
    with pytest.raises(Refused):  # core kinds and our XRDs still are judged
        api.create(pod({"image": "busybox"}))
    assert api.notices == [schemas.SCHEMAS_MISSING]


def test_a_kind_none_of_the_schemas_knows_is_stored_as_is():
    api = server()
    obj = {"apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": "g"}, "x": 1}
    stored = api.create(obj)
    assert {k: v for k, v in stored.items() if k != "metadata"} == {
        k: v for k, v in obj.items() if k != "metadata"
    }
    assert stored["metadata"]["generation"] == 1


def test_every_cel_rule_of_our_xrds_and_the_upstream_crds_compiles():
    require_schemas()
    folders = [ROOT / "compositions" / "xrds", ROOT / "compositions" / "legacy" / "xrds"]
    paths = [p for folder in folders for p in folder.glob("*.yaml")]
    rules = [r for path in [*paths, *require_schemas().glob("*.yaml")] for r in _rules(path)]
    assert len(rules) > 100
    for rule in rules:
        validation._compiled(rule)


def _rules(path) -> list[str]:
    found = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            found.extend(r["rule"] for r in node.get("x-kubernetes-validations", ()))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for doc in documents(path):
        walk(doc)
    return found


# --- CEL features our schemas do not use yet ----------------------------------------------------

WIDGET = schemas.KindSchema(
    "Widget",
    "example.com",
    "widgets",
    {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "properties": {"size": {"type": "integer"}},
                "x-kubernetes-validations": [
                    {
                        "rule": "!oldSelf.hasValue() || self.size >= oldSelf.value().size",
                        "optionalOldSelf": True,
                        "messageExpression": "'size may only grow, from ' + string(oldSelf.value().size)",
                    },
                    {
                        "rule": "self.size != 13",
                        "reason": "FieldValueForbidden",
                        "fieldPath": ".size",
                    },
                ],
            }
        },
    },
    structural=True,
    status_subresource=True,
)


def widget(size: int) -> dict[str, Any]:
    return {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w"},
        "spec": {"size": size},
    }


def test_optional_old_self_rules_run_on_create_and_message_expressions_word_the_error():
    assert validation.check(WIDGET, widget(2)).errors == ()
    errors = validation.check(WIDGET, widget(1), widget(2)).errors
    assert [str(e) for e in errors] == ['spec: Invalid value: "object": size may only grow, from 2']


def test_a_rule_reason_picks_the_error_type():
    errors = validation.check(WIDGET, widget(13)).errors
    assert [str(e) for e in errors] == ["spec.size: Forbidden: failed rule: self.size != 13"]


# --- Pods: what an update may change, the binding, mutating admission -----------------------


def running_pod(**spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "containers": [{"name": "main", "image": "ubuntu:24.04", "command": ["sleep", "1"]}],
        "tolerations": [{"key": "a", "operator": "Exists"}],
    }
    base.update(spec)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default"},
        "spec": base,
    }


REQUIRED_B = {
    "requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "b", "operator": "In", "values": ["2"]}]}
        ]
    }
}
GATED = {"schedulingGates": [{"name": "kueue.x-k8s.io/admission"}], "nodeSelector": {"a": "1"}}
FORBIDDEN_CHANGE = (
    'Pod "p" is invalid: spec: Forbidden: pod updates may not change fields other than '
    "`spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,"
    "`spec.tolerations` (only additions to existing tolerations),"
    "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)"
)


def replaced(spec: dict[str, Any], **changes: Any) -> dict[str, Any]:
    found = copy.deepcopy(spec)
    found.update(changes)
    return found


@pytest.mark.parametrize(
    ("before", "change", "refusal"),
    [
        ({}, lambda s: s["containers"][0].update(image="ubuntu:25.04"), None),
        ({}, lambda s: s["tolerations"].append({"key": "b", "operator": "Exists"}), None),
        ({}, lambda s: s.update(activeDeadlineSeconds=60), None),
        ({}, lambda s: s["containers"][0].update(command=["sleep", "2"]), FORBIDDEN_CHANGE),
        (
            {},
            lambda s: s["containers"][0].update(resources={"limits": {"cpu": "1"}}),
            FORBIDDEN_CHANGE,
        ),
        ({}, lambda s: s.update(nodeSelector={"b": "2"}), FORBIDDEN_CHANGE),
        ({}, lambda s: s.update(nodeName="node-a"), FORBIDDEN_CHANGE),
        (
            {},
            lambda s: s.update(tolerations=[]),
            'Pod "p" is invalid: spec.tolerations[0]: Forbidden: existing toleration can not be '
            "modified except its tolerationSeconds",
        ),
        (
            {},
            lambda s: s["containers"].append({"name": "side", "image": "x"}),
            'Pod "p" is invalid: spec.containers: Forbidden: pod updates may not add or remove '
            "containers",
        ),
        (
            {},
            lambda s: s.update(schedulingGates=[{"name": "g"}]),
            'Pod "p" is invalid: spec.schedulingGates: Forbidden: only deletion is allowed, but '
            "found new scheduling gate 'g'",
        ),
        (GATED, lambda s: (s.pop("schedulingGates"), s["nodeSelector"].update(b="2")), None),
        (GATED, lambda s: s.update(affinity={"nodeAffinity": REQUIRED_B}), None),
        (
            GATED,
            lambda s: s["nodeSelector"].update(a="2"),
            'Pod "p" is invalid: spec.nodeSelector[a]: Invalid value: "2": only additions to '
            "spec.nodeSelector are allowed (no mutations or deletions)",
        ),
    ],
    ids=[
        "an image",
        "a toleration added",
        "activeDeadlineSeconds",
        "the command",
        "the resources",
        "a nodeSelector once ungated",
        "nodeName, but through the binding",
        "a toleration removed",
        "a container added",
        "a scheduling gate added",
        "gated: the gate removed and a nodeSelector key added (Kueue's admission)",
        "gated: a node affinity where there was none",
        "gated: a nodeSelector value changed",
    ],
)
def test_a_pod_update_changes_only_what_kube_apiserver_lets_it(before, change, refusal):
    require_schemas()
    api = ApiServer(Store())
    stored = api.create(running_pod(**before))
    updated = copy.deepcopy(stored)
    change(updated["spec"])
    if refusal is None:
        assert api.update(updated)["spec"] == updated["spec"]
        return
    with pytest.raises(Refused) as refused:
        api.update(updated)
    assert (str(refused.value), refused.value.reason) == (refusal, INVALID)
    assert api.store.get("Pod", "p", "default")["spec"] == stored["spec"]


def test_a_pod_is_bound_once_through_the_binding_subresource():
    api = ApiServer(Store())
    api.create(running_pod())
    assert api.bind("p", "default", "node-a")["spec"]["nodeName"] == "node-a"
    with pytest.raises(Refused, match='pod p is already assigned to node "node-a"'):
        api.bind("p", "default", "node-b")


def test_mutating_admission_changes_new_objects_of_its_kind_before_validation():
    from gpustack_sim.apiserver import Mutator

    api = ApiServer(Store())
    gate = {"name": "kueue.x-k8s.io/admission"}
    api.mutators.append(Mutator("gate", "Pod", lambda p: p["spec"].update(schedulingGates=[gate])))
    assert api.create(running_pod())["spec"]["schedulingGates"] == [gate]
    stored = api.store.get("Pod", "p", "default")
    assert api.update(stored)["spec"]["schedulingGates"] == [gate]  # updates are not mutated


def test_the_api_server_stamps_the_system_fields_and_keeps_them():
    api = ApiServer(Store())
    api.clock = lambda: "2026-01-01T00:05:00Z"
    sent = running_pod()
    sent["metadata"] |= {"uid": "mine", "creationTimestamp": "1999-01-01T00:00:00Z"}
    created = copy.deepcopy(api.create(sent))
    first = {k: created["metadata"][k] for k in ("uid", "creationTimestamp", "resourceVersion")}
    assert first["uid"] != "mine" and first["creationTimestamp"] == "2026-01-01T00:05:00Z"
    unchanged = api.update({**created, "metadata": {"name": "p", "namespace": "default"}})
    assert {k: unchanged["metadata"][k] for k in first} == first  # nothing changed: no write
    changed = copy.deepcopy(unchanged)
    changed["spec"]["containers"][0]["image"] = "ubuntu:25.04"
    updated = api.update(changed)["metadata"]
    assert (updated["uid"], updated["creationTimestamp"]) == (
        first["uid"],
        first["creationTimestamp"],
    )
    assert int(updated["resourceVersion"]) > int(first["resourceVersion"])
    api.delete("Pod", "p", "default")
    assert api.create(running_pod())["metadata"]["uid"] != first["uid"]  # a new object


# --- the garbage collector -----------------------------------------------------------------------


def owned_by(*owners: dict[str, Any]) -> list[dict[str, str]]:
    return [
        {"apiVersion": o["apiVersion"], "kind": o["kind"], "name": o["metadata"]["name"]}
        | {"uid": o["metadata"]["uid"]}
        for o in owners
    ]


def config_map(name: str, namespace: str = "default", owners: list | None = None) -> dict[str, Any]:
    metadata = {"name": name, "namespace": namespace, "ownerReferences": owners or []}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": {}}


def node(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}


def test_the_garbage_collector_deletes_what_lost_every_owner_and_only_that():
    """An owner is gone when no object of its kind and name exists, or one with another uid
    (a Node registered again); a dependent keeps the owners still there."""
    api = ApiServer(Store())
    collect = GarbageCollector(Client(api)).run
    a, b = api.create(node("a")), api.create(node("b"))
    api.create(config_map("of-a", owners=owned_by(a)))  # namespaced, a cluster-scoped owner
    api.create(config_map("of-both", owners=owned_by(a, b)))
    api.create(config_map("of-none"))
    api.delete("Node", "a")
    api.create(node("a"))  # the same name, another object
    collect()
    assert sorted(cm["metadata"]["name"] for cm in api.store.list("ConfigMap")) == [
        "of-both",
        "of-none",
    ]
    kept = api.store.get("ConfigMap", "of-both", "default")["metadata"]["ownerReferences"]
    assert kept == owned_by(b)  # the reference to the old Node is dropped
    api.delete("Node", "b")
    collect()
    assert [cm["metadata"]["name"] for cm in api.store.list("ConfigMap")] == ["of-none"]


def test_an_object_has_one_controller_at_most():
    """`ValidateOwnerReferences`: what Crossplane's server-side apply meets when another
    composite of the same name still controls the object it composes."""
    api = ApiServer(Store())
    old, new = (
        {"apiVersion": "v1", "kind": "Node", "name": "a", "uid": uid, "controller": True}
        for uid in ("1", "2")
    )
    api.create(config_map("c", owners=[old]))
    with pytest.raises(Refused) as refused:
        api.update(config_map("c", owners=[old, new]))
    assert refused.value.reason == INVALID
    assert (
        'metadata.ownerReferences: Invalid value: [{"apiVersion":"v1","kind":"Node","name":"a",'
        '"uid":"1","controller":true},{"apiVersion":"v1","kind":"Node","name":"a","uid":"2",'
        '"controller":true}]: Only one reference can have Controller set to true. Found "true" '
        "in references for Node/a and Node/a"
    ) in str(refused.value)
