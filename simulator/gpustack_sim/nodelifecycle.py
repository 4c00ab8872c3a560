"""Node lifecycle: kube-controller-manager's NodeLifecycle and taint-eviction controllers, the
API server's DefaultTolerationSeconds admission plugin, and the Pod garbage collector's part.

What each does, as Kubernetes documents it (docs/reliability.md, "Node loss"):
- DefaultTolerationSeconds: a Pod created without a toleration for
  `node.kubernetes.io/not-ready` or `node.kubernetes.io/unreachable` (NoExecute, by key or with
  an empty key) gets `{key, operator: Exists, effect: NoExecute, tolerationSeconds: 300}` for
  each, appended at creation — before Kueue appends its flavor's tolerations at admission.
- NodeLifecycle: a node whose Ready condition is False gets `node.kubernetes.io/not-ready`, one
  whose Ready is Unknown (its kubelet stopped posting) `node.kubernetes.io/unreachable`, each
  as a NoSchedule and a NoExecute taint with `timeAdded`; they go when the node is Ready again.
  A cordoned node (`spec.unschedulable`) gets `node.kubernetes.io/unschedulable` as a
  NoSchedule taint until it is uncordoned (TaintNodesByCondition).
  The Pods on a node it finds unreachable (Ready Unknown: the controller writes that itself
  when the kubelet stops posting) are marked not Ready (MarkPodsNotReady, on that change of
  the node's health). A kubelet that posts Ready False still posts its Pods' status: those stay
  Ready. (The controller also marks a Pod that changes while its node is not Ready,
  `processPod`: not played; on the real control plane nothing changes the running Pod.)
- Zone disruption (`handleDisruption`, `ComputeZoneState`): nodes are grouped by zone
  (`topology.kubernetes.io/region` and `zone`; one zone where unlabelled). A zone with no Ready
  node is fully disrupted; one with more than two nodes not Ready, and at least 55 % of its
  nodes (`--unhealthy-zone-threshold`), partially. When every zone is fully disrupted the
  controller assumes it, not the nodes, lost contact: it takes the not-ready and unreachable
  NoExecute taints off every node and adds none ("master disruption mode"). A partially
  disrupted zone of at most 50 nodes (`--large-cluster-size-threshold`) gets no new NoExecute
  taint: its tainting rate is 0 (`ReducedQPSFunc`); those it has stay. Rates otherwise (0.1
  nodes a second, 0.01 in a large disrupted zone) are not played: a node is tainted at once.
  The NoSchedule taints follow the conditions in every state.
- Taint eviction: on a node with NoExecute taints, a Pod is evicted at once if one taint has no
  matching toleration; otherwise after the least `tolerationSeconds` among the tolerations that
  match (the first matching toleration per taint, in the Pod's order); never if none has
  seconds. The time counts from when the Pod was first seen on the tainted node.
- Eviction is a graceful delete: the Pod is marked (`metadata.deletionTimestamp`) and is gone
  once its kubelet confirms. A kubelet that still posts status (Ready True or False) confirms at
  once; an unreachable one never does, and the Pod stays Terminating until the Pod garbage
  collector force-deletes it: when its node is deleted, or carries the
  `node.kubernetes.io/out-of-service` taint while not Ready.
- The Pod garbage collector also deletes a Pod bound to a node that does not exist (a node a
  cluster autoscaler removed), Terminating or not (`gcOrphaned`): once the node has been missing
  for its 40 s quarantine (`quarantineTime`), the Pod is marked Failed and force-deleted.

The simulated cluster has no clock. This stand-in keeps one: it starts at 0 and moves only when
the scenario says time passes (`sleep SECONDS` in a step, `NodeLifecycle.sleep`). Taints are
stamped with it (`timeAdded`, from kube.TRANSITION_TIME); evictions fall due against it. So the
same scenario always evicts the same Pods at the same step. `node-monitor-grace-period` (how
long a silent kubelet takes to read as Unknown) is not played: a scenario sets the condition.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

from gpustack_sim import kube
from gpustack_sim.apiserver import Mutator
from gpustack_sim.client import Client

NOT_READY = "node.kubernetes.io/not-ready"
UNREACHABLE = "node.kubernetes.io/unreachable"
OUT_OF_SERVICE = "node.kubernetes.io/out-of-service"
UNSCHEDULABLE = "node.kubernetes.io/unschedulable"
LIFECYCLE_KEYS = (NOT_READY, UNREACHABLE)
DEFAULT_TOLERATION_SECONDS = (
    300  # kube-apiserver's --default-not-ready/unreachable-toleration-seconds
)
DEFAULT_GRACE_SECONDS = 30  # a Pod's terminationGracePeriodSeconds when it sets none
ORPHAN_QUARANTINE_SECONDS = 40  # the Pod garbage collector's quarantineTime
EPOCH = datetime.datetime.fromisoformat(kube.TRANSITION_TIME.replace("Z", "+00:00"))
TAINTING, HALTED, UNTAINTING = "tainting", "halted", "untainting"  # a zone's NoExecute tainting
UNHEALTHY_ZONE_THRESHOLD = 0.55  # --unhealthy-zone-threshold
LARGE_CLUSTER_SIZE_THRESHOLD = 50  # --large-cluster-size-threshold
ZONE_LABELS = (
    ("topology.kubernetes.io/region", "failure-domain.beta.kubernetes.io/region"),
    ("topology.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/zone"),
)


class NodeLifecycle:
    def __init__(self, api: Client):
        self.api = api
        self.clock = 0.0  # seconds since the scenario started
        self.tainted_since: dict[str, float] = {}  # Pod → when it was first on a tainted node
        self.missing_since: dict[str, float] = {}  # node a Pod is bound to → when first missing
        api.api.mutators.append(Mutator("DefaultTolerationSeconds", "Pod", admit))

    def sleep(self, seconds: float) -> None:
        """Time passes (a scenario's `sleep`): evictions that fall due happen next run."""
        self.clock += seconds

    def run(self) -> None:
        nodes = {node["metadata"]["name"]: node for node in self.api.list("Node")}
        tainting = no_execute_tainting(list(nodes.values()))
        for node in nodes.values():
            self.taint(node, tainting[zone_of(node)])
        pods = self.api.list("Pod")
        for pod in pods:
            node = nodes.get(pod["spec"].get("nodeName", ""))
            if node is not None and _ready(node) == "Unknown":
                self.mark_not_ready(pod)
            self.evict_if_due(pod, node)
        self.collect(self.api.list("Pod"), nodes)

    # --- NodeLifecycle ------------------------------------------------------------------------

    def taint(self, node: dict[str, Any], tainting: str = TAINTING) -> None:
        """The not-ready or unreachable taints the node's Ready condition calls for, and the
        cordon's taint where it is cordoned; the NoExecute ones as its zone's state allows."""
        wanted = {"False": NOT_READY, "Unknown": UNREACHABLE}.get(_ready(node) or "")
        cordoned = bool((node.get("spec") or {}).get("unschedulable"))
        taints = list((node.get("spec") or {}).get("taints") or [])

        def stays(taint: Mapping[str, Any]) -> bool:
            key = taint.get("key")
            if (
                key in LIFECYCLE_KEYS
                and taint.get("effect") == "NoExecute"
                and tainting != TAINTING
            ):
                # Halted: left as it is while the node is not Ready (a Ready node is untainted
                # at once, `markNodeAsReachable`); in master disruption mode taken off.
                return tainting == HALTED and wanted is not None
            return (key not in LIFECYCLE_KEYS or key == wanted) and (
                key != UNSCHEDULABLE or cordoned
            )

        kept = [t for t in taints if stays(t)]
        effects = ("NoSchedule", "NoExecute") if tainting == TAINTING else ("NoSchedule",)
        for effect in effects if wanted else ():
            if not any(t.get("key") == wanted and t.get("effect") == effect for t in kept):
                taint = {"key": wanted, "effect": effect}
                if effect == "NoExecute":
                    taint["timeAdded"] = self.now(0)
                kept.append(taint)
        if cordoned and not any(t.get("key") == UNSCHEDULABLE for t in kept):
            kept.append({"key": UNSCHEDULABLE, "effect": "NoSchedule"})
        if kept != taints:
            node.setdefault("spec", {})["taints"] = kept
            if not kept:
                del node["spec"]["taints"]
            self.api.apply(node)

    def mark_not_ready(self, pod: dict[str, Any]) -> None:
        conditions = (pod.get("status") or {}).get("conditions") or []
        ready = next((c for c in conditions if c.get("type") == "Ready"), None)
        if ready is not None and ready.get("status") != "False":
            ready["status"] = "False"
            self.api.update_status(pod)

    # --- taint eviction -----------------------------------------------------------------------

    def evict_if_due(self, pod: dict[str, Any], node: Mapping[str, Any] | None) -> None:
        key = kube.pod_key(pod)
        taints = [
            t
            for t in ((node or {}).get("spec") or {}).get("taints") or []
            if t.get("effect") == "NoExecute"
        ]
        if not taints or "deletionTimestamp" in pod["metadata"]:
            self.tainted_since.pop(key, None)
            return
        since = self.tainted_since.setdefault(key, self.clock)
        seconds = toleration_seconds(pod["spec"].get("tolerations") or [], taints)
        if seconds is not None and self.clock >= since + seconds:
            self.tainted_since.pop(key, None)
            grace = pod["spec"].get("terminationGracePeriodSeconds", DEFAULT_GRACE_SECONDS)
            pod["metadata"]["deletionTimestamp"] = self.now(grace)
            self.api.apply(pod)

    # --- the kubelet's confirmation, and the Pod garbage collector ----------------------------

    def collect(self, pods: list[dict[str, Any]], nodes: Mapping[str, Mapping[str, Any]]) -> None:
        """Pods marked for deletion are gone once confirmed or force-deleted, and Pods on a node
        missing past the quarantine are force-deleted (module docstring)."""
        orphaned = self.deleted_nodes(pods, nodes)
        for pod in pods:
            name = pod["spec"].get("nodeName", "")
            node = nodes.get(name)
            if name in orphaned or (
                "deletionTimestamp" in pod["metadata"] and (node is None or _confirmed(node))
            ):
                self.api.delete("Pod", pod["metadata"]["name"], pod["metadata"]["namespace"])

    def deleted_nodes(
        self, pods: list[dict[str, Any]], nodes: Mapping[str, Mapping[str, Any]]
    ) -> set[str]:
        """The nodes Pods are bound to that have been missing for the quarantine."""
        missing = {p["spec"].get("nodeName") for p in pods} - set(nodes) - {None, ""}
        self.missing_since = {n: self.missing_since.get(n, self.clock) for n in missing}
        return {
            name
            for name, since in self.missing_since.items()
            if self.clock >= since + ORPHAN_QUARANTINE_SECONDS
        }

    def now(self, later: float) -> str:
        moment = EPOCH + datetime.timedelta(seconds=self.clock + later)
        return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def zone_of(node: Mapping[str, Any]) -> str:
    """`GetZoneKey`: region and zone, "" where the node has neither."""
    labels = kube.labels_of(node)
    region, zone = (labels.get(new) or labels.get(old, "") for new, old in ZONE_LABELS)
    return f"{region}:\x00:{zone}" if region or zone else ""


def no_execute_tainting(nodes: list[Mapping[str, Any]]) -> dict[str, str]:
    """Each zone's NoExecute tainting, by the zones' disruption states."""
    zones: dict[str, list[bool]] = {}
    for node in nodes:
        zones.setdefault(zone_of(node), []).append(_ready(node) == "True")
    states = {zone: zone_state(ready) for zone, ready in zones.items()}
    if states and all(state == "FullDisruption" for state in states.values()):
        return dict.fromkeys(states, UNTAINTING)
    return {
        zone: HALTED
        if state == "PartialDisruption" and len(zones[zone]) <= LARGE_CLUSTER_SIZE_THRESHOLD
        else TAINTING
        for zone, state in states.items()
    }


def zone_state(ready: list[bool]) -> str:
    """`ComputeZoneState`, from its nodes' Ready (a node without the condition is not Ready)."""
    not_ready = ready.count(False)
    if not_ready and not any(ready):
        return "FullDisruption"
    if not_ready > 2 and not_ready / len(ready) >= UNHEALTHY_ZONE_THRESHOLD:
        return "PartialDisruption"
    return "Normal"


def admit(pod: dict[str, Any]) -> None:
    """DefaultTolerationSeconds, as the API server admits a new Pod."""
    spec = pod.setdefault("spec", {})
    added = default_tolerations(spec.get("tolerations") or [])
    if added:
        spec["tolerations"] = [*(spec.get("tolerations") or []), *added]


def default_tolerations(tolerations: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """What DefaultTolerationSeconds adds to a Pod created with these tolerations."""
    added = []
    for key in LIFECYCLE_KEYS:
        tolerated = any(
            (t.get("key") or "") in ("", key) and (t.get("effect") or "") in ("", "NoExecute")
            for t in tolerations
        )
        if not tolerated:
            added.append(
                {
                    "key": key,
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": DEFAULT_TOLERATION_SECONDS,
                }
            )
    return added


def toleration_seconds(
    tolerations: list[Mapping[str, Any]], taints: list[Mapping[str, Any]]
) -> float | None:
    """How long a Pod may stay on a node with these NoExecute taints: 0 when one is not
    tolerated, None when it may stay for ever (the taint-eviction controller's rule)."""
    used = []
    for taint in taints:
        first = next((t for t in tolerations if kube.tolerates(t, taint)), None)
        if first is None:
            return 0
        used.append(first)
    seconds = [t["tolerationSeconds"] for t in used if t.get("tolerationSeconds") is not None]
    return max(0, min(seconds)) if seconds else None


def _confirmed(node: Mapping[str, Any]) -> bool:
    """Whether a Pod marked for deletion on this node is gone: its kubelet posts status (it
    stops the containers and confirms), or the node is out of service while not Ready."""
    if _ready(node) in ("True", "False"):
        return True
    taints = (node.get("spec") or {}).get("taints") or []
    return any(t.get("key") == OUT_OF_SERVICE and t.get("effect") == "NoExecute" for t in taints)


def _ready(node: Mapping[str, Any]) -> str | None:
    """The node's Ready status; None before its kubelet first posted one (a node is judged
    only once it has reported: node-monitor-grace-period runs from registration)."""
    for found in (node.get("status") or {}).get("conditions") or []:
        if found.get("type") == "Ready":
            return str(found.get("status", "Unknown"))
    return None
