"""`gpustack-fn render`: the classic `crossplane render` stream, from the real server on loopback."""

from __future__ import annotations

import yaml
from click.testing import CliRunner

from functions.cli import main
from tests.support.schemas import ROOT

WALKTHROUGH = ROOT / "examples" / "walkthrough"
PIPELINES = ROOT / "compositions" / "pipelines"


def render(*args: str):
    result = CliRunner().invoke(main, ["render", *map(str, args)])
    return result, [
        doc for doc in yaml.safe_load_all(result.output) if doc
    ] if result.exit_code == 0 else []


def test_render_the_catalog_against_the_walkthrough_nodes():
    result, stream = render(
        WALKTHROUGH / "catalog.yaml",
        PIPELINES / "catalog.yaml",
        WALKTHROUGH / "functions.yaml",
        "-e",
        WALKTHROUGH / "summaries.yaml",
    )
    assert result.exit_code == 0, result.output
    composite, composed = stream[0], stream[1:]
    assert composite["kind"] == "Catalog"
    assert {k: composite["status"][k] for k in ("nodes", "flavors", "pools", "accelerators")} == {
        "nodes": 4,
        "flavors": 7,
        "pools": 3,
        "accelerators": 6,
    }
    names = [
        doc["metadata"]["annotations"]["crossplane.io/composition-resource-name"]
        for doc in composed
    ]
    assert names == sorted(names) and len(names) == 13
    assert [d["kind"] for d in composed].count("ResourceFlavor") == 7
    for doc in composed:
        assert doc["metadata"]["labels"]["crossplane.io/composite"] == "default"
        assert doc["metadata"]["ownerReferences"][0]["kind"] == "Catalog"
    assert result.output.startswith("---\napiVersion: worker.gpustack.ai/v1alpha1\nkind: Catalog\n")


def test_results_are_printed_with_r_and_a_refusal_is_a_warning():
    result, stream = render(
        WALKTHROUGH / "instance-sliced-demo.yaml",
        PIPELINES / "instance.yaml",
        "-r",
        "-e",
        WALKTHROUGH / "catalog.yaml",
    )
    assert result.exit_code == 0, result.output
    assert stream[0]["status"]["phase"] == "Refused"
    assert stream[-1] == {
        "apiVersion": "render.crossplane.io/v1beta1",
        "kind": "Result",
        "step": "instance",
        "severity": "SEVERITY_WARNING",
        "message": "spec.type: instance type gpustack--nvidia-a10g-linux-amd64 not found: pick one from "
        "`kubectl get instancetypes`",
    }


def test_a_fatal_result_stops_the_render(tmp_path):
    broken = yaml.safe_load_all((WALKTHROUGH / "devices.yaml").read_text())
    node = next(doc for doc in broken if doc["metadata"]["name"] == "node-a10g")
    del node["spec"]["accelerators"][0]["devices"][0]["memoryMiB"]
    (tmp_path / "node.yaml").write_text(yaml.safe_dump(node))
    result, _ = render(tmp_path / "node.yaml", PIPELINES / "devices.yaml")
    assert result.exit_code == 2  # bad input: the pipeline refused it
    assert (
        "pipeline step 'devices' returned a fatal result: spec.accelerators[0].devices[0].memoryMiB: "
        "is required; the node agent writes this field" in result.output
    )


def test_a_composition_for_another_kind_is_refused_before_anything_runs():
    result, _ = render(WALKTHROUGH / "catalog.yaml", PIPELINES / "devices.yaml")
    assert result.exit_code == 2  # bad input: the pipeline refused it
    assert "do not match the XR's (worker.gpustack.ai/v1alpha1, Catalog)" in result.output


def test_observed_resources_feed_the_status(tmp_path):
    """-o: an observed ClusterQueue that Kueue marked Active makes the InstanceType Active."""
    from gpustack_sim import world_from

    world = world_from(
        [WALKTHROUGH / n for n in ("devices.yaml", "nodes.yaml", "namespaces.yaml", "catalog.yaml")]
    )
    world.reconcile()
    queue = world.get("ClusterQueue", "gpustack--nvidia-a10g-linux-amd64")
    (tmp_path / "observed.yaml").write_text(yaml.safe_dump(queue))
    (tmp_path / "xr.yaml").write_text(
        yaml.safe_dump(world.get("InstanceType", "gpustack--nvidia-a10g-linux-amd64"))
    )
    (tmp_path / "required.yaml").write_text(
        yaml.safe_dump_all(
            [*world.list("ConfigMap"), *world.list("Namespace"), world.get("Catalog", "default")]
        )
    )
    result, stream = render(
        tmp_path / "xr.yaml",
        PIPELINES / "instancetype.yaml",
        "-o",
        tmp_path / "observed.yaml",
        "-e",
        tmp_path / "required.yaml",
    )
    assert result.exit_code == 0, result.output
    status = stream[0]["status"]
    assert (status["phase"], status["display"]["accelerator"]) == ("Active", "1/1 1/10 100/100 0/0")
    kinds = [doc["kind"] for doc in stream[1:]]
    assert kinds == ["ClusterQueue", "LocalQueue", "LocalQueue"]


def test_render_against_a_running_server_by_address_or_the_development_target(tmp_path):
    """`--function-address HOST:PORT`, or `--development-target` for the address the functions
    file's Development runtime annotation names (as `crossplane render` calls it): the same
    stream as from the server render starts itself."""
    import grpc

    from tests.support.grpc_server import function_server, wait_ready

    functions = yaml.safe_load((WALKTHROUGH / "functions.yaml").read_text())
    inputs = [WALKTHROUGH / "catalog.yaml", PIPELINES / "catalog.yaml"]
    with function_server("--insecure") as address, grpc.insecure_channel(address) as channel:
        wait_ready(channel)  # until it answers: render's own wait is a user's, a short one
        annotations = functions["metadata"]["annotations"]
        annotations["render.crossplane.io/runtime-development-target"] = address
        (tmp_path / "functions.yaml").write_text(yaml.safe_dump(functions))
        by_address, _ = render(*inputs, "-e", WALKTHROUGH / "summaries.yaml", "-a", address)
        by_target, _ = render(
            *inputs, tmp_path / "functions.yaml", "-e", WALKTHROUGH / "summaries.yaml",
            "--development-target",
        )  # fmt: skip
    assert by_address.exit_code == 0, by_address.output
    assert by_target.output == by_address.output
    assert by_address.output.startswith(
        "---\napiVersion: worker.gpustack.ai/v1alpha1\nkind: Catalog"
    )
    assert by_address.output.count("crossplane.io/composition-resource-name") == 13


def test_the_development_target_needs_a_function_in_the_development_runtime(tmp_path):
    functions = yaml.safe_load((WALKTHROUGH / "functions.yaml").read_text())
    del functions["metadata"]["annotations"]
    (tmp_path / "functions.yaml").write_text(yaml.safe_dump(functions))
    result, _ = render(
        WALKTHROUGH / "catalog.yaml", PIPELINES / "catalog.yaml", tmp_path / "functions.yaml",
        "--development-target",
    )  # fmt: skip
    assert result.exit_code == 2
    assert "no Function in the Development runtime" in result.output
