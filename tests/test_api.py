"""The API as Kubernetes and Crossplane would take it: every package and composition file
validates against its upstream schema; every example validates against the CRD its XRD
generates; the CEL rules accept and reject what they should, with their messages."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import yaml

from tests.support import schemas
from tests.support.schemas import ROOT, documents, validate_xr
from tools import legacy

API_FILES = [p for p in schemas.yaml_files("package", "compositions")]
# Scenario files drive `gpustack-fn simulate`; every other example file holds API objects.
EXAMPLES = [p for p in schemas.yaml_files("examples") if not p.name.startswith("scenario")]


def _id(path: Path) -> str:
    return str(path.relative_to(ROOT))


# Files that hold no API object, so no API server reads them; each says who does.
NOT_API_OBJECTS = {
    "config.kueue.x-k8s.io/v1beta2 Configuration": "kueue-manager reads it from its ConfigMap",
    # (make e2e's real kube-scheduler loads it, strictly: e2e/environment.py)
    "kubescheduler.config.k8s.io/v1 KubeSchedulerConfiguration": "kube-scheduler's --config file",
}


@pytest.mark.parametrize("path", API_FILES, ids=_id)
def test_package_and_composition_files_validate_against_their_upstream_schema(path):
    schemas.require_schemas()
    for doc in documents(path):
        if f"{doc['apiVersion']} {doc['kind']}" in NOT_API_OBJECTS:
            continue
        if doc["apiVersion"].startswith("meta.pkg.crossplane.io/"):
            errors = validate_function_meta(doc)
        else:
            errors = schemas.errors_of(doc)
        assert errors == [], f"{doc['kind']} {doc['metadata']['name']}"


# meta.pkg.crossplane.io has no CRD upstream (package metadata is not an API object); this is
# its shape from crossplane's apis/pkg/meta/v1 types.
FUNCTION_META = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "meta.pkg.crossplane.io/v1"},
        "kind": {"const": "Function"},
        "metadata": {
            "type": "object",
            "required": ["name"],
            "properties": {
                "name": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"},
                "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
            },
        },
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "crossplane": {"type": "object", "properties": {"version": {"type": "string"}}},
                "dependsOn": {"type": "array"},
                "capabilities": {"type": "array", "items": {"type": "string"}},
            },
        },
    },
}


def validate_function_meta(doc: dict) -> list[str]:
    import jsonschema

    return [e.message for e in jsonschema.Draft7Validator(FUNCTION_META).iter_errors(doc)]


def test_the_function_meta_declares_composition_and_the_conventional_annotations():
    meta = documents(ROOT / "package" / "crossplane.yaml")[0]
    assert meta["spec"]["capabilities"] == ["composition"]
    for key in ("maintainer", "source", "license", "description", "readme"):
        assert meta["metadata"]["annotations"][f"meta.crossplane.io/{key}"]


def test_every_kind_has_a_composition_whose_input_names_a_served_handler():
    from functions.handlers import HANDLERS  # noqa: F401  (the registry the server dispatches with)

    input_crd = documents(ROOT / "package" / "input" / "fn.gpustack.ai_inputs.yaml")[0]
    handlers = input_crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"][
        "handler"
    ]["enum"]
    kinds = {
        doc["spec"]["names"]["kind"]
        for path in (ROOT / "compositions" / "xrds").glob("*.yaml")
        for doc in documents(path)
    }
    composed = {}
    for path in (ROOT / "compositions" / "pipelines").glob("*.yaml"):
        composition = documents(path)[0]
        step = composition["spec"]["pipeline"][0]
        assert step["functionRef"]["name"] == "function-gpustack"
        assert step["input"]["handler"] in handlers
        composed[composition["spec"]["compositeTypeRef"]["kind"]] = step["input"]["handler"]
    assert set(composed) == kinds


def test_the_legacy_set_is_what_tools_legacy_writes():
    for path, text in legacy.render().items():
        assert path.read_text() == text, f"{_id(path)} is stale: run `make legacy`"


def test_legacy_tenant_kinds_are_claims():
    instance = documents(ROOT / "compositions" / "legacy" / "xrds" / "instance.yaml")[0]
    assert "scope" not in instance["spec"]  # 1.x has none; 2.x defaults a v1 XRD to LegacyCluster
    assert instance["spec"]["names"]["kind"] == "XInstance"
    assert instance["spec"]["claimNames"] == {
        "kind": "Instance",
        "plural": "instances",
        "shortNames": ["inst"],
    }
    catalog = documents(ROOT / "compositions" / "legacy" / "xrds" / "catalog.yaml")[0]
    assert catalog["spec"]["names"]["kind"] == "Catalog" and "claimNames" not in catalog["spec"]


# Kinds whose CRDs sit in a subfolder of the schema directory, which the simulated API server
# does not read: the GPU Operator's ClusterPolicy is validated in tests/test_install.py.
UNVALIDATED = {("nvidia.com/v1", "ClusterPolicy")}  # the GPU Operator's


@pytest.mark.parametrize("path", EXAMPLES, ids=_id)
def test_every_example_validates(path):
    schemas.require_schemas()
    for doc in documents(path):
        if (doc["apiVersion"], doc["kind"]) in UNVALIDATED:
            continue
        assert schemas.errors_of(doc) == [], f"{doc['kind']} {doc['metadata']['name']}"
        if doc["kind"] in ("Instance", "InstancePersistentVolume"):  # and as a legacy claim
            assert schemas.errors_of(doc, legacy=True) == []


def test_instance_type_printer_columns_are_the_walkthroughs():
    xrd = documents(ROOT / "compositions" / "xrds" / "instancetype.yaml")[0]
    columns = [c["name"] for c in xrd["spec"]["versions"][0]["additionalPrinterColumns"]]
    assert ["NAME", *columns] == [
        "NAME",
        "ENTRANCE",
        "UNIT(CPU/RAM)/STORAGE",
        "ACCELERATOR(EX/SH/SL/PT)",
        "CPU",
        "PHASE",
    ]
    flavor = documents(ROOT / "compositions" / "xrds" / "instancetypeflavor.yaml")[0]
    columns = [c["name"] for c in flavor["spec"]["versions"][0]["additionalPrinterColumns"]]
    assert columns == [
        "GENERALGROUP",
        "ACCELERATORGROUP",
        "ACCELERATABLE",
        "MANUFACTURER",
        "PRODUCT",
        "MEMORY",
        "CORES",
        "SLICEABLE",
    ]


# --- CEL: InstanceType ------------------------------------------------------------------------
# Messages are the API server's: `field: Invalid value: "<type of the rule's level>": message`.

CUSTOM = yaml.safe_load(
    (ROOT / "examples" / "walkthrough" / "instancetype-a10g-12c128g.yaml").read_text()
)


def changed(obj: dict, **spec) -> dict:
    obj = copy.deepcopy(obj)
    for key, value in spec.items():
        if value is None:
            obj["spec"].pop(key, None)
        else:
            obj["spec"][key] = value
    return obj


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        (
            {"acceleratorGroup": None},
            'spec.acceleratorGroup: Invalid value: "object": acceleratorGroup must be specified when acceleratable is true',
        ),
        (
            {"unitResources": {"cpu": "12c", "ram": "128Gi"}},
            'spec.unitResources.cpu: Invalid value: "object": must be a positive integer with no unit suffix',
        ),
        (
            {"unitResources": {"cpu": "12", "ram": "128gi"}},
            'spec.unitResources.ram: Invalid value: "string": must be a positive integer with a case-sensitive "Gi" suffix, e.g. 64Gi',
        ),
        (
            {"localStorage": "200G"},
            'spec.localStorage: Invalid value: "string": must be a positive integer with a case-sensitive "Gi" suffix, e.g. 100Gi',
        ),
        (
            {"acceleratable": False, "acceleratorGroup": None},
            'spec.unitResources.cpu: Invalid value: "object": must be 1 when acceleratable is false',
        ),
    ],
)
def test_instance_type_create_rules(spec, error):
    assert validate_xr(changed(CUSTOM, **spec)) == [error]


def test_instance_type_is_immutable_except_display_name_description_and_inactive():
    assert (
        validate_xr(
            changed(CUSTOM, displayName="A10G large", description="x", inactive=True), old=CUSTOM
        )
        == []
    )
    assert validate_xr(
        changed(CUSTOM, unitResources={"cpu": "16", "ram": "128Gi"}), old=CUSTOM
    ) == [
        'spec: Invalid value: "object": spec is immutable except displayName, description and inactive; create a new InstanceType instead'
    ]
    assert validate_xr(changed(CUSTOM, generalGroup="amd-epyc-7r32"), old=CUSTOM) != []


# --- CEL: Instance ---------------------------------------------------------------------------

PINNED = yaml.safe_load(
    (ROOT / "examples" / "walkthrough" / "instance-pinned-demo.yaml").read_text()
)
CUSTOM_DEMO = yaml.safe_load(
    (ROOT / "examples" / "walkthrough" / "instance-custom-demo.yaml").read_text()
)
REPOINTED_TYPE = "gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64"  # walkthrough §5
TYPE_WHILE_RUNNING = 'spec.type: Invalid value: "object": type is immutable while the Instance runs: set spec.stop to true, wait for Stopped, then change it'


def with_phase(obj: dict, phase: str) -> dict:
    return {**copy.deepcopy(obj), "status": {"phase": phase}}


def test_instance_volume_is_exactly_one_of_ephemeral_or_persistent():
    both = changed(
        CUSTOM_DEMO, volume={"ephemeral": {"capacity": "1Gi"}, "persistent": {"name": "d"}}
    )
    assert validate_xr(both) == [
        'spec.volume: Invalid value: "object": cannot specify both ephemeral and persistent of volume'
    ]
    assert validate_xr(changed(CUSTOM_DEMO, volume=None)) == [
        'spec.volume: Invalid value: "object": either ephemeral or persistent of volume should be specified'
    ]


def test_a_running_instance_refuses_changes_that_need_a_restart():
    running = with_phase(CUSTOM_DEMO, "Running")
    assert validate_xr(changed(running, type=REPOINTED_TYPE), old=running) == [TYPE_WHILE_RUNNING]
    assert validate_xr(changed(running, resources={"accelerator": "2"}), old=running) == [
        'spec.resources: Invalid value: "object": resources is immutable while the Instance runs: set spec.stop to true, wait for Stopped, then change it'
    ]
    assert validate_xr(changed(running, command=None), old=running)[0].startswith(
        'spec.command: Invalid value: "object": command is immutable'
    )
    # Free fields change at any time; stopping is allowed.
    assert validate_xr(changed(running, displayName="demo", stop=True), old=running) == []


def test_a_stopped_instance_can_be_repointed_and_started_in_one_patch():
    stopped = changed(CUSTOM_DEMO, stop=True)
    repointed = changed(CUSTOM_DEMO, type=REPOINTED_TYPE, stop=False)
    assert validate_xr(repointed, old=stopped) == []


def test_a_drained_instance_is_stopped_by_its_phase_and_can_be_repointed():
    # A drain records status.phase Stopped and never writes spec.stop (docs/decisions.md).
    drained = with_phase(CUSTOM_DEMO, "Stopped")
    repointed = changed(drained, type=REPOINTED_TYPE, stop=False)
    assert validate_xr(repointed, old=drained) == []
    # The phase unlocks only the type: the other fields still need spec.stop.
    assert validate_xr(changed(drained, image="ubuntu:26.04"), old=drained)[0].startswith(
        'spec.image: Invalid value: "object": image is immutable while the Instance runs'
    )


def test_legacy_claims_lose_the_type_rule_on_crossplane_1():
    # Crossplane 1.x copies only spec's and status's rules into the CRD; the type rule sits at
    # the root, so a legacy cluster does not guard the type (Crossplane copies root rules from
    # v2.2.0 on, crossplane PR #7018).
    running = with_phase(CUSTOM_DEMO, "Running")
    repointed = changed(running, type=REPOINTED_TYPE)
    assert validate_xr(repointed, old=running) == [TYPE_WHILE_RUNNING]
    assert validate_xr(repointed, old=running, legacy=True) == []


def test_the_volume_is_immutable_even_when_stopped():
    stopped = changed(CUSTOM_DEMO, stop=True)
    resized = changed(stopped, volume={"ephemeral": {"capacity": "2Gi"}})
    assert validate_xr(resized, old=stopped) == [
        'spec.volume: Invalid value: "object": volume is immutable'
    ]


def test_additional_volumes_need_one_source_and_an_absolute_path():
    volumes = copy.deepcopy(PINNED["spec"]["additionalVolumes"])
    volumes[0]["configMap"] = {"name": "also"}
    volumes[1]["mountPath"] = "etc/model"
    assert validate_xr(changed(PINNED, additionalVolumes=volumes)) == [
        'spec.additionalVolumes[0]: Invalid value: "object": exactly one of persistent, configMap, secret or hostPath must be set',
        'spec.additionalVolumes[1].mountPath: Invalid value: "string": mountPath must be an absolute path',
    ]
    volumes = copy.deepcopy(PINNED["spec"]["additionalVolumes"])
    volumes[2]["hostPath"]["type"] = "Bogus"
    assert (
        len(validate_xr(changed(PINNED, additionalVolumes=volumes))) == 2
    )  # enum, rules unchecked


def test_vm_gpu_entries():
    vm = changed(
        CUSTOM_DEMO, runtime="VirtualMachine", gpus=[{"className": "example-whole-gpu", "count": 2}]
    )
    assert validate_xr(vm) == []
    mixed = changed(
        vm, gpus=[{"className": "example-whole-gpu"}, {"name": "example.com/whole-gpu"}]
    )
    assert validate_xr(mixed) == [
        'spec.gpus: Invalid value: "array": a gpus list contains either class entries or raw name entries, never both'
    ]
    raw_with_count = changed(vm, gpus=[{"name": "example.com/whole-gpu", "count": 1}])
    assert validate_xr(raw_with_count) == [
        'spec.gpus[0]: Invalid value: "object": count belongs to class entries only'
    ]


# --- CEL: GPUClass ---------------------------------------------------------------------------

CLASSES = {
    doc["metadata"]["name"]: doc
    for doc in documents(ROOT / "examples" / "gpuclass" / "classes.yaml")
}


def test_gpuclass_mode_rules():
    whole, licensed = CLASSES["example-whole-gpu"], CLASSES["example-licensed-vgpu"]
    assert validate_xr(changed(licensed, profile=None)) == [
        'spec.profile: Invalid value: "object": a vgpu class requires profile'
    ]
    assert validate_xr(changed(whole, profile="p")) == [
        'spec: Invalid value: "object": a passthrough class permits neither profile nor license'
    ]
    assert validate_xr(changed(whole, maxCount=0)) == [
        "spec.maxCount: Invalid value: 0: spec.maxCount in body should be greater than or equal to 1"
    ]
    assert validate_xr(changed(licensed, license={"secretName": "s", "featureType": 2})) != []


def test_gpuclass_identity_is_immutable_but_the_source_may_change():
    whole = CLASSES["example-whole-gpu"]
    moved = changed(
        whole, source={"devicePlugin": {"resourceName": "example.com/other"}}, displayName="x"
    )
    assert validate_xr(moved, old=whole) == []
    assert validate_xr(changed(whole, model="other-model"), old=whole) == [
        'spec: Invalid value: "object": vendor, model, mode, profile and memory identify the offer and are immutable; create a new class to change them'
    ]


def test_gpuclass_tolerations():
    whole = CLASSES["example-whole-gpu"]
    tolerations = [
        {"key": "gpu", "operator": "Exists", "value": "yes"},
        {"key": "gpu", "value": "yes", "effect": "NoSchedule", "tolerationSeconds": 5},
    ]
    assert validate_xr(changed(whole, tolerations=tolerations)) == [
        'spec.tolerations[0]: Invalid value: "object": an Exists toleration has no value; drop it, or use Equal',
        'spec.tolerations[1]: Invalid value: "object": tolerationSeconds applies only with effect NoExecute',
    ]


def test_dockerfile_python_matches_the_runtime_image():
    dockerfile = (ROOT / "Dockerfile").read_text()
    build = re.search(r"^FROM debian:(\d+)-slim AS build", dockerfile, re.M)
    runtime = re.search(r"^FROM gcr\.io/distroless/python3-debian(\d+)(:\S+)?$", dockerfile, re.M)
    assert build and runtime, (
        "the Dockerfile must build on debian:N-slim and run on distroless python3-debianN"
    )
    assert build[1] == runtime[1], (
        "the venv's Python must be the runtime's: use the same Debian release"
    )
    assert "EXPOSE 9443" in dockerfile
    assert re.search(r'ENTRYPOINT \["/venv/bin/function"\]', dockerfile)
    assert re.search(r"^USER nonroot", dockerfile, re.M)
