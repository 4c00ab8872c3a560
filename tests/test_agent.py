"""The node agent with the fake NVML backend and a fake kubelet on a real Unix socket."""

from __future__ import annotations

import contextlib
import copy
import socket
from dataclasses import dataclass
from functools import partial

import pytest
import yaml

from functions.agent.agent import Agent, NodeFacts
from functions.agent.nvml import FakeNvml
from functions.agent.podresources import list_devices
from functions.core.devices import parse_devices
from tests.support import schemas
from tests.support.fake_kubelet import fake_kubelet
from tests.support.patience import HANG, exited
from tests.support.schemas import ROOT

FIXTURES = ROOT / "tests" / "fixtures"
WALKTHROUGH = {
    doc["metadata"]["name"]: doc
    for doc in schemas.documents(ROOT / "examples" / "walkthrough" / "devices.yaml")
}
NODE_UID = "5c6a8a5e-0000-4000-8000-00000000000a"  # as the API server stamps a Node
CORES = {"node-cpu": 16, "node-a10g": 4, "node-t4-a": 4, "node-t4-b": 48}


class FakeKube:
    def __init__(self, cores: int, pods: list[dict] | None = None):
        self.cores, self.pods, self.applied = cores, pods or [], []
        self.uid = NODE_UID

    def node_facts(self, node: str) -> NodeFacts:
        return NodeFacts(self.uid, self.cores)

    def pods_on(self, node: str) -> list[dict]:
        return self.pods

    def apply_devices(self, devices: dict) -> None:
        self.applied.append(copy.deepcopy(devices))


@pytest.fixture
def kubelet(tmp_path):
    with fake_kubelet(tmp_path) as (fake, socket):
        yield fake, socket


def agent_for(
    node: str, socket: str, nvml: FakeNvml | None = None, kube: FakeKube | None = None
) -> Agent:
    return Agent(
        node,
        nvml or FakeNvml.from_file(FIXTURES / "nvml" / f"{node}.yaml"),
        kube or FakeKube(CORES.get(node, 8)),
        partial(list_devices, socket),
        FIXTURES / "cpuinfo" / f"{node}.txt",
        os="linux",
        arch="amd64",
    )


def normalised(obj: dict) -> str:
    return yaml.safe_dump(
        {"labels": obj["metadata"]["labels"], "spec": obj["spec"]}, sort_keys=True
    )


@pytest.mark.parametrize("node", sorted(WALKTHROUGH))
def test_the_walkthrough_nodes_report_the_devices_the_handlers_use(kubelet, node):
    _, socket = kubelet
    assert normalised(agent_for(node, socket).build()) == normalised(WALKTHROUGH[node])


def test_a_second_poll_with_nothing_changed_writes_nothing(kubelet):
    _, socket = kubelet
    agent = agent_for("node-t4-b", socket)
    assert agent.poll() is True
    assert agent.poll() is False
    assert len(agent.kube.applied) == 1


def test_the_devices_is_owned_by_its_node_so_it_goes_with_the_node(kubelet):
    """The garbage collector deletes a Devices once its Node is gone (a cluster autoscaler
    removing the node): the owner is the Node by its uid, not a controller."""
    _, socket = kubelet
    devices = agent_for("node-t4-b", socket).build()
    assert devices["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": "node-t4-b", "uid": NODE_UID}
    ]


def test_a_node_registered_again_under_its_name_is_the_new_owner_at_once(kubelet):
    """A Node deleted and registered again has a new uid: the garbage collector would delete
    a Devices owned by the old one, so the next poll applies the new owner."""
    _, socket = kubelet
    agent = agent_for("node-t4-b", socket)
    assert agent.poll() is True
    agent.kube.uid = "5c6a8a5e-0000-4000-8000-00000000000b"
    assert agent.poll() is True
    owners = [d["metadata"]["ownerReferences"][0]["uid"] for d in agent.kube.applied]
    assert owners == [NODE_UID, "5c6a8a5e-0000-4000-8000-00000000000b"]


def test_an_unchanged_devices_is_applied_again_once_the_resync_is_due(kubelet):
    """A Devices deleted while the agent runs (by an admin, or by the garbage collector) comes
    back within the resync, though nothing on the node changed; before it, nothing is written."""
    _, socket = kubelet
    now = [1000.0]
    agent = agent_for("node-t4-b", socket)
    agent.clock, agent.resync = (lambda: now[0]), 600
    writes = []
    for seconds in (0, 30, 569, 1, 30, 600):  # at 0, 30, 599, 600, 630 and 1,230 s
        now[0] += seconds
        writes.append(agent.poll())
    assert writes == [True, False, False, True, False, True]
    assert all(applied == agent.kube.applied[0] for applied in agent.kube.applied)


def test_a_new_allocation_makes_exactly_one_write(kubelet):
    fake, socket = kubelet
    pod = {
        "metadata": {"name": "sliced-demo", "namespace": "default", "uid": "uid-1"},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "resources": {
                        "limits": {
                            "nvidia.com/gpu.sliced": "1",
                            "nvidia.com/gpu.sliced.memory-percentage": "20",
                            "nvidia.com/gpu.sliced.cores-percentage": "100",
                        }
                    },
                }
            ]
        },
        "status": {"phase": "Running"},
    }
    kube = FakeKube(4, [pod])
    agent = agent_for("node-a10g", socket, kube=kube)
    agent.poll()
    fake.assign(
        "default",
        "sliced-demo",
        "main",
        "nvidia.com/gpu.sliced",
        "GPU-e0587d2e-127c-4fb8-e2c1-6e517529f575",
    )
    fake.assign(
        "default",
        "sliced-demo",
        "sshd",
        "device.gpustack.ai/nvidia.visibility",
        "GPU-e0587d2e-127c-4fb8-e2c1-6e517529f575",
    )
    assert agent.poll() is True
    assert agent.poll() is False
    assert len(kube.applied) == 2
    assert kube.applied[-1]["spec"]["allocations"] == [
        {
            "pod": "default/sliced-demo",
            "podUID": "uid-1",
            "container": "main",
            "device": "GPU-e0587d2e-127c-4fb8-e2c1-6e517529f575",
            "mode": "Sliced",
            "memoryPercentage": 20,
            "coresPercentage": 100,
        }
    ]
    # The handlers read it as the 20 % slice of the walkthrough's section 3.
    from functions.core.ledger import build_ledger

    card = build_ledger(parse_devices(kube.applied[-1])).groups[0].cards[0]
    assert card.remaining == 1_280_000


def test_a_mig_reconfiguration_makes_exactly_one_write(kubelet, tmp_path):
    _, socket = kubelet
    recording = yaml.safe_load((FIXTURES / "nvml" / "h100-mig.yaml").read_text())
    nvml = FakeNvml(recording)
    agent = agent_for("node-h100", socket, nvml=nvml, kube=FakeKube(224))
    agent.poll()
    mig = agent.kube.applied[0]["spec"]["accelerators"][0]["devices"][0]["mig"]
    assert mig["partitions"] == [
        {
            "profile": "3g.40gb",
            "placement": {"start": 0, "size": 4},
            "uuid": "MIG-5f2a7c1e-0d3b-5e8a-9c4f-1a2b3c4d5e6f",
        }
    ]
    assert [p["name"] for p in mig["profiles"]] == [
        "1g.10gb",
        "1g.20gb",
        "2g.20gb",
        "3g.40gb",
        "4g.40gb",
        "7g.80gb",
    ]
    recording["devices"][0]["instances"].append(
        {"profile": "1g.10gb", "start": 4, "size": 1, "uuid": "MIG-new"}
    )
    assert agent.poll() is False  # read once: held until the next poll reads it too
    assert agent.poll() is True
    assert agent.poll() is False
    assert len(agent.kube.applied) == 2


def test_a_mig_device_resolves_to_its_card_and_placement(kubelet):
    fake, socket = kubelet
    fake.assign(
        "team",
        "infer",
        "main",
        "nvidia.com/gpu.partitioned",
        "MIG-5f2a7c1e-0d3b-5e8a-9c4f-1a2b3c4d5e6f",
    )
    fake.assign(
        "team", "train", "main", "nvidia.com/gpu", "GPU-9c1e2f3a-4b5c-6d7e-8f90-a1b2c3d4e501"
    )
    fake.assign("team", "ghost", "main", "nvidia.com/gpu", "GPU-not-on-this-node")
    agent = agent_for(
        "node-h100",
        socket,
        nvml=FakeNvml.from_file(FIXTURES / "nvml" / "h100-mig.yaml"),
        kube=FakeKube(224),
    )
    rows = agent.build()["spec"]["allocations"]
    assert rows == [
        {
            "pod": "team/ghost",
            "container": "main",
            "device": "GPU-not-on-this-node",
            "mode": "Exclusive",
        },
        {
            "pod": "team/infer",
            "container": "main",
            "device": "GPU-9c1e2f3a-4b5c-6d7e-8f90-a1b2c3d4e500",
            "mode": "Partitioned",
            "profile": "3g.40gb",
            "placement": {"start": 0, "size": 4},
        },
        {
            "pod": "team/train",
            "container": "main",
            "device": "GPU-9c1e2f3a-4b5c-6d7e-8f90-a1b2c3d4e501",
            "mode": "Exclusive",
        },
    ]
    from functions.core.ledger import build_ledger

    ledger = build_ledger(parse_devices(agent.build()))
    assert [c.reason for c in ledger.conflicts] == ["unknown accelerator"]  # reported, not dropped


def test_an_nvml_failure_on_one_gpu_reports_it_unhealthy_and_the_rest_normally(kubelet):
    _, socket = kubelet
    recording = yaml.safe_load((FIXTURES / "nvml" / "node-t4-b.yaml").read_text())
    recording["devices"][2]["fail"] = {"memoryTotalBytes": "NVML_ERROR_GPU_IS_LOST"}
    devices = agent_for("node-t4-b", socket, nvml=FakeNvml(recording)).build()["spec"][
        "accelerators"
    ][0]["devices"]
    assert [d["healthy"] for d in devices] == [True, True, False, True]
    assert devices[2]["uuid"] == "GPU-7a2b9c4d-1e3f-4a5b-8c6d-0e1f2a3b4c03"
    assert devices[2]["unhealthyReason"] == "NVML_ERROR_GPU_IS_LOST"
    assert [d["memoryMiB"] for d in devices] == [16384, 16384, 0, 16384]


def test_uncorrected_ecc_errors_make_a_card_unhealthy(kubelet):
    _, socket = kubelet
    recording = yaml.safe_load((FIXTURES / "nvml" / "h200.yaml").read_text())
    recording["devices"][0]["uncorrectedVolatileEcc"] = 3
    device = agent_for("node-h200", socket, nvml=FakeNvml(recording), kube=FakeKube(192)).build()[
        "spec"
    ]["accelerators"][0]["devices"][0]
    assert (device["healthy"], device["unhealthyReason"]) == (
        False,
        "3 volatile uncorrected ECC errors",
    )
    assert device["memoryMiB"] == 143771  # HBM: no GDDR ECC restore


def test_without_nvml_the_node_reports_no_accelerators_and_keeps_the_cpu(kubelet):
    from structlog.testing import capture_logs

    _, socket = kubelet
    agent = agent_for("node-cpu", socket)
    with capture_logs() as logs:  # the agent logs through structlog, as the server does
        spec = agent.build()["spec"]
        agent.build()  # a problem that lasts is logged once, when it appears
    assert spec["accelerators"] == []
    assert spec["cpu"] == {
        "vendor": "AMD",
        "modelName": "AMD EPYC 7R13 Processor",
        "family": "25",
        "model": "1",
        "cores": 16,
    }
    assert logs == [
        {
            "event": "NVML is not available (NVML Shared Library Not Found): reporting no accelerators",
            "node": "node-cpu",
            "log_level": "warning",
        }
    ]


def test_terminated_pods_release_their_cards(kubelet):
    fake, socket = kubelet
    done = {
        "metadata": {"name": "job", "namespace": "team"},
        "spec": {"containers": []},
        "status": {"phase": "Succeeded"},
    }
    fake.assign("team", "job", "main", "nvidia.com/gpu", "GPU-e0587d2e-127c-4fb8-e2c1-6e517529f575")
    agent = agent_for("node-a10g", socket, kube=FakeKube(4, [done]))
    assert agent.build()["spec"]["allocations"] == []


@pytest.mark.parametrize("fixture", ["h100-mig", "h200", "node-t4-b"])
def test_every_report_validates_as_a_devices_object(kubelet, fixture):
    _, socket = kubelet
    devices = agent_for(
        fixture,
        socket,
        nvml=FakeNvml.from_file(FIXTURES / "nvml" / f"{fixture}.yaml"),
        kube=FakeKube(64),
    ).build()
    assert schemas.validate_xr(devices) == []
    parse_devices(devices)


@pytest.mark.gpu
def test_the_real_nvml_backend_reports_every_gpu_completely(kubelet):
    from functions.agent.nvml import NvmlUnavailable, PynvmlBackend

    backend = PynvmlBackend()
    try:
        backend.start()
        count = backend.device_count()
        backend.stop()
    except NvmlUnavailable as error:
        pytest.skip(f"no NVIDIA GPU here: {error}")
    if count == 0:
        pytest.skip("NVML sees no GPU")
    _, socket = kubelet
    devices = Agent("gpu-node", PynvmlBackend(), FakeKube(8), partial(list_devices, socket)).build()
    cards = devices["spec"]["accelerators"][0]["devices"]
    assert len(cards) == count
    for card in cards:
        assert card["uuid"].startswith("GPU-") and card["product"] and card["memoryMiB"] > 0
        assert card["computeCapability"] and card["pciBusId"] and card["healthy"] in (True, False)
    assert schemas.validate_xr(devices) == []


def test_the_loop_backs_off_on_api_errors_and_recovers(kubelet):
    import threading

    _, socket = kubelet
    stop = threading.Event()

    class FlakyKube(FakeKube):
        calls = 0

        def apply_devices(self, devices):
            FlakyKube.calls += 1
            if FlakyKube.calls == 1:
                raise ConnectionError("API server unavailable")
            super().apply_devices(devices)
            stop.set()

    agent = agent_for("node-a10g", socket, kube=FlakyKube(4))
    waits = []
    original = stop.wait
    stop.wait = lambda seconds=None: waits.append(seconds) or original(0)
    agent.run(period=30, stop=stop)
    assert FlakyKube.calls == 2 and agent.writes == 1
    assert waits[0] == 1.0  # the first retry comes after a one-second back-off, not the period


class StubPynvml:
    """Just enough of nvidia-ml-py's surface to drive the real backend without a GPU."""

    class NVMLError(Exception):
        pass

    class NVMLError_Timeout(NVMLError):
        pass

    NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, NVML_DEVICE_MIG_ENABLE = 1, 0, 1

    def __init__(self, cards):
        self.cards = cards

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        pass

    def nvmlSystemGetDriverVersion(self):
        return b"580.159.03"

    def nvmlSystemGetCudaDriverVersion(self):
        return 13000

    def nvmlDeviceGetCount(self):
        return len(self.cards)

    def nvmlDeviceGetHandleByIndex(self, index):
        return self.cards[index]

    def __getattr__(self, name):
        field = name.removeprefix("nvmlDeviceGet")

        def read(card, *args):
            value = card[field]
            if isinstance(value, Exception):
                raise value
            return value

        return read


def test_the_real_backend_reads_through_nvml_calls_and_isolates_a_lost_gpu():
    from types import SimpleNamespace

    from functions.agent.nvml import PynvmlBackend
    from functions.agent.report import read_accelerators

    def card(uuid, memory):
        return {
            "UUID": uuid.encode(),
            "MinorNumber": 0,
            "Name": b"Tesla T4",
            "MemoryInfo": memory,
            "MemoryBusWidth": 256,
            "EccMode": (1, 1),
            "NumGpuCores": 2560,
            "CudaComputeCapability": (7, 5),
            "PciInfo": SimpleNamespace(busId=b"00000000:00:1E.0"),
            "NumaNodeId": 0,
            "TotalEccErrors": 0,
            "MigMode": StubPynvml.NVMLError("Not Supported"),
        }

    stub = StubPynvml(
        [
            card("GPU-ok", SimpleNamespace(total=15360 << 20)),
            card("GPU-lost", StubPynvml.NVMLError("GPU is lost")),
        ]
    )
    report = read_accelerators(PynvmlBackend(stub))
    devices = report.vendors[0]["devices"]
    assert report.vendors[0]["driverVersion"] == "580.159.03"
    assert report.vendors[0]["runtimeVersion"] == "13.0"
    assert (devices[0]["uuid"], devices[0]["memoryMiB"], devices[0]["healthy"]) == (
        "GPU-ok",
        16384,
        True,
    )
    assert devices[0]["computeCapability"] == "7.5" and devices[0]["mig"] == {"enabled": False}
    assert (devices[1]["uuid"], devices[1]["healthy"]) == ("GPU-lost", False)
    assert devices[1]["unhealthyReason"] == "nvmlDeviceGetMemoryInfo: GPU is lost"


# --- faults: flapping readings, failing calls, hanging peers, stopping ------------------------


@dataclass(frozen=True)
class Flap:
    name: str
    fail: dict  # the readings of card 2 that fail on every other poll


FLAPS = [
    Flap("its UUID cannot be read every other poll", {"uuid": "NVML_ERROR_UNKNOWN"}),
    Flap(
        "its memory reads as lost every other poll", {"memoryTotalBytes": "NVML_ERROR_GPU_IS_LOST"}
    ),
    Flap("its name and PCI bus id fail together", {"name": "NVML_ERROR_TIMEOUT", "pciBusId": "x"}),
    Flap("its MIG mode cannot be read every other poll", {"migEnabled": "NVML_ERROR_UNKNOWN"}),
]


@pytest.mark.parametrize("flap", FLAPS, ids=lambda f: f.name)
def test_a_card_that_flaps_makes_no_write_in_a_hundred_polls(kubelet, flap):
    _, socket = kubelet
    recording = yaml.safe_load((FIXTURES / "nvml" / "node-t4-b.yaml").read_text())
    agent = agent_for("node-t4-b", socket, nvml=FakeNvml(recording))
    writes = []
    for poll in range(100):
        recording["devices"][2]["fail"] = flap.fail if poll % 2 else {}
        writes.append(agent.poll())
    assert writes.count(True) == 1 and writes[0] is True  # the first report, then nothing
    card = agent.kube.applied[-1]["spec"]["accelerators"][0]["devices"][2]
    assert (card["uuid"], card["healthy"]) == ("GPU-7a2b9c4d-1e3f-4a5b-8c6d-0e1f2a3b4c03", True)


def test_a_card_first_read_unreadable_is_named_by_its_first_good_read_and_then_holds(kubelet):
    """Its first UUID read fails, then every other one (issue 35, item 9): it was reported as
    `GPU-unreadable-2`, unhealthy, for good. Now the first good read names it, and the failing
    reads after make no write."""
    _, socket = kubelet
    recording = yaml.safe_load((FIXTURES / "nvml" / "node-t4-b.yaml").read_text())
    agent = agent_for("node-t4-b", socket, nvml=FakeNvml(recording))
    writes, uuids = [], []
    for poll in range(100):
        recording["devices"][2]["fail"] = {"uuid": "NVML_ERROR_UNKNOWN"} if poll % 2 == 0 else {}
        writes.append(agent.poll())
        uuids.append(agent.kube.applied[-1]["spec"]["accelerators"][0]["devices"][2]["uuid"])
    assert uuids[0] == "GPU-unreadable-2"  # the first poll reports what it could read
    assert set(uuids[1:]) == {"GPU-7a2b9c4d-1e3f-4a5b-8c6d-0e1f2a3b4c03"}
    assert writes[:2] == [True, True] and writes[2:].count(True) == 0
    card = agent.kube.applied[-1]["spec"]["accelerators"][0]["devices"][2]
    assert card["healthy"] is True  # as its good read found it; a failing read never confirms


def test_a_card_that_stays_unreadable_is_reported_unhealthy_after_two_polls_as_itself(kubelet):
    _, socket = kubelet
    recording = yaml.safe_load((FIXTURES / "nvml" / "node-t4-b.yaml").read_text())
    agent = agent_for("node-t4-b", socket, nvml=FakeNvml(recording))
    assert agent.poll() is True
    recording["devices"][2]["fail"] = {"uuid": "NVML_ERROR_GPU_IS_LOST", "name": "lost"}
    assert [agent.poll(), agent.poll(), agent.poll()] == [False, True, False]
    cards = agent.kube.applied[-1]["spec"]["accelerators"][0]["devices"]
    assert [c["uuid"] for c in cards] == [c["uuid"] for c in recording["devices"]]
    assert [c["product"] for c in cards] == ["Tesla T4"] * 4  # kept as last read, not "unknown"
    assert [c["healthy"] for c in cards] == [True, True, False, True]
    assert cards[2]["unhealthyReason"] == "NVML_ERROR_GPU_IS_LOST; lost"


class RaisingNvml(FakeNvml):
    """A fake whose card `index` raises something that is not an NVML error."""

    def __init__(self, recording, index: int, error: Exception, opens: bool = True):
        super().__init__(recording)
        self.index, self.error, self.opens = index, error, opens

    def device(self, index):
        device = super().device(index)
        if index != self.index:
            return device
        if not self.opens:
            raise self.error

        class Broken(type(device)):
            def cores(inner):
                raise self.error

        return Broken(device.reading)


@pytest.mark.parametrize(
    "opens", [True, False], ids=["one reading of the card raises", "opening the card raises"]
)
def test_an_unexpected_exception_from_one_card_affects_that_card_only(kubelet, opens):
    _, socket = kubelet
    recording = yaml.safe_load((FIXTURES / "nvml" / "node-t4-b.yaml").read_text())
    agent = agent_for("node-t4-b", socket, nvml=FakeNvml(recording))
    agent.poll()
    agent.nvml = RaisingNvml(recording, 1, ValueError("bad UTF-8 in a name"), opens)
    assert [agent.poll(), agent.poll()] == [False, True]  # no poll failed; the change held
    cards = agent.kube.applied[-1]["spec"]["accelerators"][0]["devices"]
    assert [c["healthy"] for c in cards] == [True, False, True, True]
    assert cards[1]["unhealthyReason"] == "ValueError: bad UTF-8 in a name"
    assert cards[1]["uuid"] == recording["devices"][1]["uuid"]
    assert agent.writes == 2 and agent.last_error is None


def test_nvml_failing_keeps_the_reported_cards_unhealthy_rather_than_dropping_them(kubelet):
    _, socket = kubelet
    recording = yaml.safe_load((FIXTURES / "nvml" / "node-a10g.yaml").read_text())
    agent = agent_for("node-a10g", socket, nvml=FakeNvml(recording))
    agent.poll()
    recording["available"], recording["reason"] = False, "Driver Not Loaded"
    assert [agent.poll(), agent.poll()] == [False, True]
    (card,) = agent.kube.applied[-1]["spec"]["accelerators"][0]["devices"]
    assert card["uuid"] == "GPU-e0587d2e-127c-4fb8-e2c1-6e517529f575" and not card["healthy"]
    assert card["unhealthyReason"] == "NVML is not available (Driver Not Loaded)"


def test_random_read_failures_never_change_a_cards_identity_in_any_write(kubelet):
    import random

    _, socket = kubelet
    recording = yaml.safe_load((FIXTURES / "nvml" / "node-t4-b.yaml").read_text())
    agent = agent_for("node-t4-b", socket, nvml=FakeNvml(recording))
    agent.poll()  # every card read once: from here on each has an identity to keep
    chance = random.Random(13)
    for _ in range(100):
        for card in recording["devices"]:
            card["fail"] = {"uuid": "NVML_ERROR_UNKNOWN"} if chance.random() < 0.3 else {}
        agent.poll()
    uuids = {c["uuid"] for c in recording["devices"]}
    for written in agent.kube.applied:
        assert {c["uuid"] for c in written["spec"]["accelerators"][0]["devices"]} == uuids


@contextlib.contextmanager
def silent_listener(family=socket.AF_INET, address=("127.0.0.1", 0)):
    """A socket that accepts connections and never says a word."""
    with socket.socket(family, socket.SOCK_STREAM) as server:
        server.bind(address)
        server.listen(8)
        yield server.getsockname()


def test_a_silent_api_server_fails_the_call_within_its_timeout():
    import kubernetes

    from functions.agent.agent import KubernetesApi

    with silent_listener() as (host, port):
        api = KubernetesApi(0.3, kubernetes.client.Configuration(host=f"http://{host}:{port}"))
        for call in (
            lambda: api.pods_on("node-a"),
            lambda: api.node_facts("node-a"),
            lambda: api.apply_devices({"metadata": {"name": "node-a"}}),
        ):
            with pytest.raises(Exception) as failed:
                call()
            assert "timed out" in str(failed.value).lower()


def test_the_agent_reads_its_nodes_uid_and_cpu_capacity_from_the_api_server():
    """What the real client makes of a Node as kube-apiserver serves it: its uid, for the
    Devices' owner reference, and its CPU capacity rounded up."""
    import http.server
    import json
    import threading

    import kubernetes

    from functions.agent.agent import KubernetesApi

    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "node-a", "uid": NODE_UID},
        "status": {"capacity": {"cpu": "3500m", "memory": "16Gi"}},
    }

    class ApiServer(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            found = self.path == "/api/v1/nodes/node-a"
            body = json.dumps(node if found else {"kind": "Status", "code": 404}).encode()
            self.send_response(200 if found else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), ApiServer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        host = f"http://127.0.0.1:{server.server_address[1]}"
        api = KubernetesApi(HANG, kubernetes.client.Configuration(host=host))
        assert api.node_facts("node-a") == NodeFacts(NODE_UID, 4)
    finally:
        server.shutdown()


def test_a_silent_kubelet_fails_the_call_within_its_timeout(tmp_path):
    import grpc

    path = str(tmp_path / "kubelet.sock")
    with silent_listener(socket.AF_UNIX, path), pytest.raises(grpc.RpcError) as failed:
        list_devices(path, timeout=0.3)
    assert failed.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED


def test_a_stop_ends_the_agent_while_a_call_hangs(kubelet):
    import threading

    from functions.agent.agent import run_until_stopped

    _, socket_path = kubelet
    hanging = threading.Event()

    class HangingKube(FakeKube):
        def pods_on(self, node):
            hanging.set()
            threading.Event().wait()  # a call that never returns (its timeout far away)

    agent = agent_for("node-a10g", socket_path, kube=HangingKube(4))
    stop = threading.Event()
    threading.Thread(target=lambda: hanging.wait() and stop.set(), daemon=True).start()
    ended = threading.Event()
    runner = threading.Thread(
        target=lambda: (run_until_stopped(agent, 30, stop, grace=0.2), ended.set()), daemon=True
    )
    runner.start()
    assert ended.wait(HANG), f"the agent was still running {HANG:.0f} s after it was stopped"


KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{{name: silent, cluster: {{server: "http://127.0.0.1:{port}"}}}}]
users: [{{name: nobody, user: {{}}}}]
contexts: [{{name: silent, context: {{cluster: silent, user: nobody}}}}]
current-context: silent
"""
API_TIMEOUT = 2 * HANG  # the silent server's call outlasts every wait of the test's


def test_the_agent_ends_on_sigterm_while_its_call_hangs_without_the_interpreters_shutdown(
    tmp_path,
):
    """The real `gpustack-fn agent`, its first call hanging on a silent API server (its
    timeout, `API_TIMEOUT`, beyond anything the test waits): SIGTERM gives the poll
    `JOIN_SECONDS` and ends the process without the interpreter's shutdown, which waited on
    the hung poll (5.8-8.9 s under load; issue 35, item 10). The time is a figure of `make
    soak`; here, the outcome and the budget: the process ends while the call still hangs."""
    import json
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    from functions.agent import agent as module

    assert module.JOIN_SECONDS + module.EXIT_SECONDS <= module.STOP_SECONDS
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        silent.settimeout(HANG)
        (tmp_path / "kubeconfig").write_text(KUBECONFIG.format(port=silent.getsockname()[1]))
        agent = subprocess.Popen(
            [
                str(Path(sys.executable).parent / "gpustack-fn"),
                "agent",
                "--node-name=node-a10g",
                f"--nvml-fixture={FIXTURES / 'nvml' / 'node-a10g.yaml'}",
                f"--cpuinfo={FIXTURES / 'cpuinfo' / 'node-a10g.txt'}",
                f"--pod-resources-socket={tmp_path}/kubelet.sock",
                f"--api-timeout={API_TIMEOUT:.0f}",
            ],
            env={**os.environ, "KUBECONFIG": str(tmp_path / "kubeconfig")},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            connection, _ = silent.accept()  # its first call is under way, and will hang
        except TimeoutError:
            agent.kill()
            agent.wait()
            raise AssertionError(f"the agent made no call in {HANG:.0f} s") from None
        with connection:
            agent.send_signal(signal.SIGTERM)
            output = exited(agent, "the agent to end on SIGTERM")  # its call hangs throughout
    assert agent.returncode == 0, output
    records = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    assert [r["waited"] for r in records if r["msg"] == "stopping mid-poll"] == [
        module.JOIN_SECONDS
    ]
