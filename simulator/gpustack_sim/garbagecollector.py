"""The garbage collector's part (kube-controller-manager's garbagecollector): an object whose
owners are all gone is deleted.

As Kubernetes documents it ("Garbage collection", "Owners and dependents"):
- An owner reference names the owner's apiVersion, kind, name and uid. A namespaced dependent's
  owner is in its namespace, or cluster-scoped; a cluster-scoped dependent's owner is
  cluster-scoped.
- An owner is gone when no object of its kind and name exists, or one exists with another uid:
  a Node deleted and registered again under its name is another object, and owns nothing.
- A dependent whose every owner is gone is deleted (background cascading deletion, the
  default: the owner goes first, its dependents after it). One with an owner still there keeps
  it, and loses the references to the owners that are gone.

So deleting a Node deletes the Devices its agent made it own, and deleting a composite deletes
what Crossplane composed for it (Crossplane makes each composed resource's controller reference
its composite). Foreground deletion and `blockOwnerDeletion` are not played: nothing here
deletes in the foreground.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpustack_sim.client import Client


class GarbageCollector:
    def __init__(self, api: Client):
        self.api = api

    def run(self) -> None:
        for dependent in self.api.owned():
            metadata = dependent["metadata"]
            references = metadata["ownerReferences"]
            kept = [ref for ref in references if self.exists(ref, metadata.get("namespace", ""))]
            if not kept:
                self.api.delete(dependent["kind"], metadata["name"], metadata.get("namespace", ""))
            elif len(kept) < len(references):
                self.api.apply({**dependent, "metadata": {**metadata, "ownerReferences": kept}})

    def exists(self, reference: Mapping[str, Any], namespace: str) -> bool:
        """The owner is there: found by kind and name in the dependent's namespace, or at the
        cluster scope, with the uid the reference names."""
        kind, name = reference["kind"], reference["name"]
        for scope in dict.fromkeys((namespace, "")):
            found = self.api.peek(kind, name, scope)
            if found is not None:
                return found["metadata"].get("uid") == reference["uid"]
        return False
