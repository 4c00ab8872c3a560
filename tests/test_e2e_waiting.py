"""make e2e's report on a step that differs (e2e/waiting.py): who has not settled, and the
reason each controller gave, a line each."""

from __future__ import annotations

from e2e.waiting import waiting


class Cluster:
    def __init__(self, **kinds):
        self.kinds = kinds

    def list(self, kind):
        return self.kinds.get(kind, [])


def meta(name: str, namespace: str = "default") -> dict:
    return {"name": name, "namespace": namespace}


UNSCHEDULABLE = {
    "type": "PodScheduled",
    "status": "False",
    "reason": "Unschedulable",
    "message": "0/5 nodes are available: 5 node(s) didn't match Pod's node affinity/selector.",
}


def test_what_waits_is_named_with_its_controllers_reason():
    cluster = Cluster(
        Instance=[
            {"metadata": meta("ready"), "status": {"phase": "Ready"}},
            {
                "metadata": meta("custom-demo"),
                "status": {"phase": "Pending", "phaseMessage": "waiting for Kueue"},
            },
        ],
        Pod=[
            {"metadata": meta("running"), "status": {"phase": "Running"}},
            {"metadata": meta("agent", "kube-system"), "status": {"phase": "Pending"}},
            {
                "metadata": meta("custom-demo"),
                "spec": {"schedulingGates": [{"name": "kueue.x-k8s.io/admission"}]},
                "status": {"phase": "Pending"},
            },
            {
                "metadata": meta("pinned-demo"),
                "status": {"phase": "Pending", "conditions": [UNSCHEDULABLE]},
            },
        ],
        Workload=[
            {
                "metadata": meta("pod-custom-demo"),
                "status": {
                    "conditions": [
                        {
                            "type": "QuotaReserved",
                            "status": "False",
                            "reason": "Pending",
                            "message": "insufficient quota",
                        }
                    ]
                },
            },
            {
                "metadata": meta("pod-pinned-demo"),
                "status": {"conditions": [{"type": "Admitted", "status": "True"}]},
            },
        ],
    )
    assert waiting(cluster) == [
        "instance default/custom-demo: Pending waiting for Kueue",
        "pod default/custom-demo: Pending gated by kueue.x-k8s.io/admission",
        "pod default/pinned-demo: Pending PodScheduled=Unschedulable: 0/5 nodes are available: "
        "5 node(s) didn't match Pod's node affinity/selector.",
        "workload default/pod-custom-demo: not admitted QuotaReserved=Pending: insufficient quota",
    ]


def test_a_cluster_that_cannot_be_read_is_said_not_raised():
    class Down:
        def list(self, kind):
            raise ConnectionError("connection refused")

    assert waiting(Down()) == [
        "(what waits could not be read: ConnectionError: connection refused)"
    ]
