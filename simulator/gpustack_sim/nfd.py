"""Node Feature Discovery's part: a node's labels are its own plus its NodeFeatures' labels.

NFD owns the labels it put on a node (it lists them in the node's
`nfd.node.kubernetes.io/feature-labels` annotation) and takes back those no NodeFeature asks for
any more; the node's other labels are the kubelet's and stay.
"""

from __future__ import annotations

from gpustack_sim.client import Client

NODE_NAME = "nfd.node.kubernetes.io/node-name"  # the node a NodeFeature targets (NFD's API)
OWNED = "nfd.node.kubernetes.io/feature-labels"


class Nfd:
    def __init__(self, api: Client):
        self.api = api

    def run(self) -> None:
        features = self.api.list("NodeFeature")
        for node in self.api.list("Node"):
            name = node["metadata"]["name"]
            wanted: dict[str, str] = {}
            for feature in sorted(features, key=lambda f: f["metadata"]["name"]):
                if (feature["metadata"].get("labels") or {}).get(NODE_NAME) == name:
                    wanted |= (feature.get("spec") or {}).get("labels") or {}
            metadata = node["metadata"]
            owned = set(filter(None, (metadata.get("annotations") or {}).get(OWNED, "").split(",")))
            current = dict(metadata.get("labels") or {})
            updated = {k: v for k, v in current.items() if k not in owned or k in wanted} | wanted
            annotation = ",".join(sorted(wanted))
            if (
                updated != current
                or (metadata.get("annotations") or {}).get(OWNED, "") != annotation
            ):
                metadata["labels"] = updated
                metadata.setdefault("annotations", {})[OWNED] = annotation
                self.api.apply(node)
