"""The Pod (and NodePort Service) an Instance of runtime Container becomes (reference §5.2–5.3).

Everything numeric — sizes, resource keys, credits — comes from `core.requests.plan`; this
module only lays the Pod out.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from functions.core import apis, labels, names, resources
from functions.core.dialects import DEFAULT, DIALECTS, DRA_REQUEST, Dialect
from functions.core.modes import MODES, Claim, Mode
from functions.core.requests import Plan
from functions.handlers.instance import pin
from functions.views import View

SSH_IMAGE = "gpustack/ssh-server:v1.3.0"


@dataclass(frozen=True)
class PodInputs:
    """What the Pod is made of besides the Instance's own spec."""

    name: str
    namespace: str
    entrance: str
    plan: Plan
    manufacturer: str = ""
    accelerator_key: str = ""
    hostname: str | None = None  # the pin, read from the Node's own label
    pin_expressions: tuple[dict, ...] = ()  # rule out the other flavors of a pinned Pod's pool
    runtime_class: str | None = None
    fit_affinity: bool = True
    dialect: Dialect = DIALECTS[DEFAULT]  # the cluster's device plugin
    spec_digest: str = ""  # the Instance spec the Pod is made from (`record.spec_digest`)


def render_claim_template(inputs: PodInputs) -> dict | None:
    """Under a DRA dialect, the ResourceClaimTemplate the Pod's claim is made from: its name
    is the Instance's and a digest of what it asks, since a template's spec cannot change —
    another request is another template (the Pod is replaced with it), and Crossplane deletes
    the one no longer composed."""
    request = inputs.dialect.device_request(inputs.manufacturer, inputs.plan.claim)
    if request is None:
        return None
    spec = {"spec": {"devices": {"requests": [request]}}}
    digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:10]
    name = f"{names.fitted(inputs.name, names.COMPOSITE_NAME_MAX - len(digest) - 1)}-{digest}"
    return {
        "apiVersion": apis.RESOURCE,
        "kind": "ResourceClaimTemplate",
        "metadata": {
            "name": name,
            "namespace": inputs.namespace,
            "labels": {labels.INSTANCE: inputs.name},
        },
        "spec": spec,
    }


def render_pod(spec: View, inputs: PodInputs, claim_template: dict | None = None) -> dict:
    """The Pod, with `main` (and the SSH sidecar), the volumes and the placement; its
    accelerators claimed from `claim_template` where the dialect claims them through DRA."""
    main = main_container(spec, inputs)
    volumes = [workspace_volume(spec)]
    for index, volume in enumerate(spec.list("additionalVolumes").views()):
        source, mount = additional_volume(index, volume)
        volumes.append(source)
        main["volumeMounts"].append(mount)
    containers = [main]
    if spec.has("sshPublicKey"):
        containers.append(sshd(spec, inputs))
        secret = {"secretName": spec.str("sshPublicKey", "name"), "defaultMode": 0o600}
        volumes.append({"name": "sshd-authorized-keys", "secret": secret})
    pod_spec: dict = {
        "hostIPC": True,
        "shareProcessNamespace": True,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "containers": containers,
        "volumes": volumes,
        **placement(inputs),
    }
    if spec.has("imagePullSecret"):
        pod_spec["imagePullSecrets"] = [{"name": spec.str("imagePullSecret", "name")}]
    if claim_template is not None:
        template = claim_template["metadata"]["name"]
        # the Pod's one claim is named for the template's one request
        entry = {"name": DRA_REQUEST, "resourceClaimTemplateName": template}
        pod_spec["resourceClaims"] = [entry]
        main["resources"]["claims"] = [{"name": DRA_REQUEST}]
    metadata: dict = {
        "name": inputs.name,
        "namespace": inputs.namespace,
        "labels": {labels.QUEUE_NAME: inputs.entrance, labels.INSTANCE: inputs.name},
    }
    if inputs.spec_digest:
        metadata["annotations"] = {labels.SPEC_DIGEST: inputs.spec_digest}
    return {"apiVersion": apis.CORE, "kind": "Pod", "metadata": metadata, "spec": pod_spec}


def main_container(spec: View, inputs: PodInputs) -> dict:
    """`main`: the tenant's image, sized by the plan, the workspace mounted (§5.2)."""
    main: dict = {
        "name": names.MAIN_CONTAINER,
        "image": spec.str("image"),
        "imagePullPolicy": spec.str("imagePullPolicy") or "IfNotPresent",
        "securityContext": {"runAsUser": 0, "privileged": spec.bool("privileged")},
        "resources": {"requests": inputs.plan.requests, "limits": inputs.plan.limits},
        "volumeMounts": [
            {"name": "workspace", "mountPath": spec.str("volumeMount") or "/workspace"}
        ],
    }
    if spec.has("command"):
        main["command"] = spec.list("command").to_list()
    if spec.has("env"):
        main["env"] = [
            {"name": e.str("name"), "value": e.str("value")} for e in spec.list("env").views()
        ]
    ports = list(spec.list("ports").views())
    if ports:
        main["ports"] = [
            {
                "name": port_name(p),
                "containerPort": int(p.get("port")),
                "protocol": p.str("protocol") or "TCP",
            }
            for p in ports
        ]
    return main


def additional_volume(index: int, volume: View) -> tuple[dict, dict]:
    """One additional volume: its source, and its mount into `main` (into `main` only)."""
    name = f"additional-{index}"
    mount: dict[str, str | bool] = {"name": name, "mountPath": volume.str("mountPath")}
    if volume.bool("readOnly"):
        mount["readOnly"] = True
    if volume.str("subPath"):
        mount["subPath"] = volume.str("subPath")
    return {"name": name, **additional_source(volume)}, mount


def placement(inputs: PodInputs) -> dict:
    """The pin (a hostname nodeSelector, never nodeName), the affinity, the runtime class."""
    found: dict = {}
    if inputs.hostname:
        found["nodeSelector"] = {labels.HOSTNAME: inputs.hostname}
    affinity = fit_affinity(inputs)
    if affinity:
        found["affinity"] = affinity
    if inputs.runtime_class:
        found["runtimeClassName"] = inputs.runtime_class
    return found


def port_name(port: View) -> str:
    return port.str("name") or f"{(port.str('protocol') or 'TCP').lower()}-{int(port.get('port'))}"


def workspace_volume(spec: View) -> dict:
    if spec.has("volume", "persistent"):
        return {
            "name": "workspace",
            "persistentVolumeClaim": {"claimName": spec.str("volume", "persistent", "name")},
        }
    capacity = spec.get("volume", "ephemeral", "capacity")
    return {"name": "workspace", "emptyDir": {"sizeLimit": str(capacity)} if capacity else {}}


def additional_source(volume: View) -> dict:
    if volume.has("persistent"):
        return {"persistentVolumeClaim": {"claimName": volume.str("persistent", "name")}}
    if volume.has("configMap"):
        return {"configMap": {"name": volume.str("configMap", "name")}}
    if volume.has("secret"):
        return {"secret": {"secretName": volume.str("secret", "name")}}
    host = {"path": volume.str("hostPath", "path")}
    if volume.str("hostPath", "type"):
        host["type"] = volume.str("hostPath", "type")
    return {"hostPath": host}


def sshd(spec: View, inputs: PodInputs) -> dict:
    """The SSH sidecar: it enters `main`'s namespaces, so it sees every mount."""
    container = {
        "name": names.SSHD_CONTAINER,
        "image": SSH_IMAGE,
        "stdin": True,
        "tty": True,
        "securityContext": {"capabilities": {"add": ["SYS_ADMIN", "SYS_PTRACE"]}},
        "env": [{"name": "VOLUME_MOUNT_PATH", "value": spec.str("volumeMount") or "/workspace"}],
        "volumeMounts": [
            {
                "name": "sshd-authorized-keys",
                "mountPath": "/var/run/sshd-authorized-keys",
                "readOnly": True,
            }
        ],
    }
    if inputs.manufacturer and inputs.plan.claim.cards and inputs.dialect.sidecar_visibility:
        visibility = {resources.visibility_key(inputs.manufacturer): str(inputs.plan.claim.cards)}
        container["resources"] = {"requests": visibility, "limits": visibility}
    return container


def fit_affinity(inputs: PodInputs) -> dict | None:
    """The Pod's required node affinity, one term: the pin's flavor steering, the card count a
    multi-card claim needs, and (with `workloadFitAffinity`) per-card feasibility from the fit
    labels — N whole cards need N wholly free cards on one node, a slice needs one card with
    its units free, a share on N cards needs N cards with a free share on one node."""
    claim, key = inputs.plan.claim, inputs.accelerator_key
    # Replicas a plugin may stack on one card need no node with that many cards.
    spread = claim.mode is not Mode.SHARED or inputs.dialect.distinct_shares
    expressions = list(inputs.pin_expressions)
    if spread:
        expressions += pin.card_count_expressions(claim, key)
    if inputs.fit_affinity and key and spread:
        expressions += fit_expressions(claim, key)
    if not expressions:
        return None
    term = {"matchExpressions": expressions}
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
        }
    }


def fit_expressions(claim: Claim, key: str) -> list[dict]:
    """What the fit labels must say of one node for the claim to fit on its cards: without
    them a whole card is placed on a node whose cards are all held by shares or slices (the
    plugin advertises `<base>` per card, whatever holds it) and the kubelet fails the Pod.
    The mode's fit label says the most of the claim's count (cards, or units) a node can take."""
    spec = MODES.get(claim.mode)
    if spec is None or not spec.fit or spec.count(claim) < spec.fit_from:
        return []
    return [{"key": spec.fit + key, "operator": "Gt", "values": [str(spec.count(claim) - 1)]}]


def render_service(spec: View, name: str, namespace: str) -> dict | None:
    ports = list(spec.list("ports").views())
    if not ports:
        return None
    return {
        "apiVersion": apis.CORE,
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace, "labels": {labels.INSTANCE: name}},
        "spec": {
            "type": "NodePort",
            "selector": {labels.INSTANCE: name},
            "ports": [
                {
                    "name": port_name(p),
                    "port": int(p.get("port")),
                    "targetPort": int(p.get("port")),
                    "protocol": p.str("protocol") or "TCP",
                }
                for p in ports
            ],
        },
    }
