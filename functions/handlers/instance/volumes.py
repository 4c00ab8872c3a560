"""An Instance's volumes: the shape rules, the host-path gate, and claim placement.

Shape (reference §8.3, walkthrough §6): the workspace and every additional volume have an
absolute, canonical mountPath (`/mnt/../etc`, `/mnt/data/`, `//mnt`, `/mnt/./x` are refused,
the canonical spelling in the message); an additional volume duplicates neither another entry
nor the workspace, and has exactly one source, a relative subPath that does not climb out,
DNS-valid object names and a valid hostPath. The host-path gate (§7.2) is
judged only when an Instance takes the escape: a mount the observed Pod already holds is covered.
Placement (§1.4, the walkthrough §6): a bound node-local claim pins the Pod to its node; network
or ReadWriteMany storage does not; a claim nothing binds composes no Pod.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable
from dataclasses import dataclass

from functions.core import labels, names, reasons
from functions.core.requests import Refusal
from functions.views import View

SOURCES = ("persistent", "configMap", "secret", "hostPath")
HOST_PATH_TYPES = (
    "",
    "DirectoryOrCreate",
    "Directory",
    "FileOrCreate",
    "File",
    "Socket",
    "CharDevice",
    "BlockDevice",
)
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
HOST_PATH_GATE = "instanceHostPathVolumeAllowed"
# The XRD's rules in its words (compositions/xrds/instance.yaml), which the handler applies where
# no API server does: offline render, and a rule at the schema's root before Crossplane 2.2
# (tests/test_messages.py holds the two equal).
ONE_SOURCE_RULE = "exactly one of persistent, configMap, secret or hostPath must be set"


def _climbs(path: str) -> bool:
    return ".." in path.split("/")


def clean(path: str) -> str:
    return posixpath.normpath(path) if path else path


def canonical(path: str) -> str:
    """An absolute path in its one spelling: no empty, `.` or `..` segment, no trailing `/`
    (`..` at the root stays at the root, as the kernel resolves it)."""
    segments: list[str] = []
    for segment in path.split("/"):
        if segment == "..":
            segments = segments[:-1]
        elif segment not in ("", "."):
            segments.append(segment)
    return "/" + "/".join(segments)


def shape_refusals(spec: View) -> list[Refusal]:
    """Every shape rule the workspace mount and the additional volumes break, entry by entry,
    in field order."""
    refusals = []
    workspace = spec.str("volumeMount") or "/workspace"
    if spec.has("volumeMount"):
        refusals += canonical_refusals("spec.volumeMount", workspace)
    workspace = canonical(workspace)
    seen: dict[str, int] = {}
    for index, volume in enumerate(spec.list("additionalVolumes").views()):
        at = f"spec.additionalVolumes[{index}]"
        refusals += mount_path_refusals(at, index, volume, workspace, seen)
        refusals += source_refusals(at, volume)
        refusals += sub_path_refusals(at, volume)
        refusals += name_refusals(at, volume)
        refusals += host_path_shape_refusals(at, volume)
    return refusals


def canonical_refusals(at: str, path: str) -> list[Refusal]:
    """Absolute and canonical (walkthrough §6): the kubelet mounts the path as written, so
    `/mnt/../etc` would land on `/etc` and two spellings of one path would escape the
    duplicate rule."""
    if not path.startswith("/"):
        return [Refusal(at, f"must be an absolute path, got {path!r}")]
    if path == canonical(path):
        return []
    message = f"must be an absolute, canonical path, got {path!r}: write {canonical(path)!r}"
    return [Refusal(at, message)]


def mount_path_refusals(
    at: str, index: int, volume: View, workspace: str, seen: dict[str, int]
) -> list[Refusal]:
    """Absolute and canonical, and neither the workspace nor another entry's path (compared
    in canonical form, so a refused spelling names the clash too)."""
    mount = volume.str("mountPath")
    refusals = canonical_refusals(f"{at}.mountPath", mount)
    if not mount.startswith("/"):
        return refusals
    path = canonical(mount)
    first = seen.setdefault(path, index)
    if path == workspace:
        message = f"{path} is the workspace (spec.volumeMount); mount elsewhere"
        return [*refusals, Refusal(f"{at}.mountPath", message)]
    if first != index:
        message = f"{path} duplicates spec.additionalVolumes[{first}].mountPath"
        return [*refusals, Refusal(f"{at}.mountPath", message)]
    return refusals


def source_refusals(at: str, volume: View) -> list[Refusal]:
    sources = [s for s in SOURCES if volume.has(s)]
    if len(sources) == 1:
        return []
    return [Refusal(at, f"{ONE_SOURCE_RULE}, got {len(sources)}")]


def name_refusals(at: str, volume: View) -> list[Refusal]:
    """An object a source names has a DNS-1123 name."""
    refusals = []
    for source in ("persistent", "configMap", "secret"):
        name = volume.str(source, "name")
        if volume.has(source) and not (name and len(name) <= 253 and _DNS_SUBDOMAIN.match(name)):
            message = (
                f"must be a DNS-1123 name (lowercase letters, digits, '-' and '.'), got {name!r}"
            )
            refusals.append(Refusal(f"{at}.{source}.name", message))
    return refusals


def sub_path_refusals(at: str, volume: View) -> list[Refusal]:
    sub_path = volume.str("subPath")
    if sub_path and (sub_path.startswith("/") or _climbs(sub_path)):
        message = f"must be a relative path that stays inside the volume, got {sub_path!r}"
        return [Refusal(f"{at}.subPath", message)]
    return []


def host_path_shape_refusals(at: str, volume: View) -> list[Refusal]:
    if not volume.has("hostPath"):
        return []
    refusals = []
    host = volume.str("hostPath", "path")
    if not host.startswith("/") or _climbs(host):
        message = f"must be an absolute path without '..', got {host!r}"
        refusals.append(Refusal(f"{at}.hostPath.path", message))
    kind = volume.str("hostPath", "type")
    if kind not in HOST_PATH_TYPES:
        allowed = ", ".join(t for t in HOST_PATH_TYPES if t)
        refusals.append(Refusal(f"{at}.hostPath.type", f"must be one of {allowed}, got {kind!r}"))
    return refusals


@dataclass(frozen=True)
class HostMount:
    path: str
    type: str
    sub_path: str
    read_only: bool

    def covers(self, other: HostMount) -> bool:
        """A held mount covers the same host path, at the same or a deeper sub-path, no wider."""
        if (clean(self.path), self.type) != (clean(other.path), other.type):
            return False
        if self.read_only and not other.read_only:
            return False
        held, wanted = _segments(self.sub_path), _segments(other.sub_path)
        return wanted[: len(held)] == held


def _segments(path: str) -> list[str]:
    return [part for part in clean(path).split("/") if part and part != "."] if path else []


def wanted_host_mounts(spec: View) -> Iterable[tuple[int, HostMount]]:
    for index, volume in enumerate(spec.list("additionalVolumes").views()):
        if volume.has("hostPath"):
            yield (
                index,
                HostMount(
                    volume.str("hostPath", "path"),
                    volume.str("hostPath", "type"),
                    volume.str("subPath"),
                    volume.bool("readOnly"),
                ),
            )


def held_host_mounts(pod: View | None) -> list[HostMount]:
    """The host paths an observed Pod already mounts into `main`."""
    if pod is None:
        return []
    host_paths = {
        v.str("name"): v.view("hostPath")
        for v in pod.list("spec", "volumes").views()
        if v.has("hostPath")
    }
    held = []
    for container in pod.list("spec", "containers").views():
        if container.str("name") != names.MAIN_CONTAINER:
            continue
        for mount in container.list("volumeMounts").views():
            source = host_paths.get(mount.str("name"))
            if source is not None:
                held.append(
                    HostMount(
                        source.str("path"),
                        source.str("type"),
                        mount.str("subPath"),
                        mount.bool("readOnly"),
                    )
                )
    return held


def host_path_refusals(spec: View, allowed: bool, pod: View | None) -> list[Refusal]:
    asked = list(wanted_host_mounts(spec))
    if allowed or not asked:
        return []
    held = held_host_mounts(pod)  # read only where the gate is shut and host paths asked for
    return [
        Refusal(
            f"spec.additionalVolumes[{index}].hostPath",
            f'mounting a host path is not allowed: enable the Catalog\'s "{HOST_PATH_GATE}" setting to allow it',
            reasons.HOST_PATH_NOT_ALLOWED,
        )
        for index, wanted in asked
        if not any(mount.covers(wanted) for mount in held)
    ]


def claims(spec: View) -> list[tuple[str, str]]:
    """(field, claim name) of every persistent volume the Instance mounts, workspace first."""
    found = []
    if spec.has("volume", "persistent"):
        found.append(("spec.volume.persistent", spec.str("volume", "persistent", "name")))
    for index, volume in enumerate(spec.list("additionalVolumes").views()):
        if volume.has("persistent"):
            found.append(
                (f"spec.additionalVolumes[{index}].persistent", volume.str("persistent", "name"))
            )
    return found


@dataclass(frozen=True)
class Placement:
    node: str | None = None  # the node a local claim pins the Pod to
    waiting: str = ""  # why no Pod can be composed yet


def placement(
    wanted: list[tuple[str, str]],
    pvcs: list[View] | None,
    volumes: list[View] | None,
    classes: list[View] | None,
) -> Placement:
    """Where the claims let the Pod run: a local volume's node, or anywhere; or not yet."""
    if not wanted:
        return Placement()
    if pvcs is None or volumes is None or classes is None:
        return Placement(waiting="reading the persistent volume claims")
    by_name = {pvc.name: pvc for pvc in pvcs}
    pv_by_name = {pv.name: pv for pv in volumes}
    wait_for_consumer = {
        c.name for c in classes if c.str("volumeBindingMode") == "WaitForFirstConsumer"
    }
    node = None
    for field, name in wanted:
        pvc = by_name.get(name)
        if pvc is None:
            return Placement(waiting=f"{field}: persistent volume claim {name} does not exist yet")
        if pvc.str("status", "phase") != "Bound":
            if pvc.str("spec", "storageClassName") in wait_for_consumer:
                continue  # the scheduler binds it with the Pod
            return Placement(
                waiting=f"{field}: persistent volume claim {name} is not bound yet; the Instance starts once it is"
            )
        pv = pv_by_name.get(pvc.str("spec", "volumeName"))
        local = _local_node(pv) if pv is not None else None
        if local is None:
            continue
        if node is not None and node != local:
            return Placement(
                waiting=f"{field}: claim {name} is local to node {local}, another claim to node {node}"
            )
        node = local
    return Placement(node=node)


def _local_node(pv: View) -> str | None:
    """The one node a ReadWriteOnce volume is confined to, if its node affinity names one."""
    modes = set(pv.list("spec", "accessModes"))
    if modes & {"ReadWriteMany", "ReadOnlyMany"}:
        return None
    terms = list(pv.list("spec", "nodeAffinity", "required", "nodeSelectorTerms").views())
    if len(terms) != 1:
        return None
    for expression in terms[0].list("matchExpressions").views():
        values = list(expression.list("values"))
        if (
            expression.str("key") == labels.HOSTNAME
            and expression.str("operator") == "In"
            and len(values) == 1
        ):
            return values[0]
    return None
