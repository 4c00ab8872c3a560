"""The Pod (and NodePort Service) an Instance of runtime Container becomes (reference §5.2–5.3).

Everything numeric — sizes, resource keys, credits — comes from `core.requests.plan`; this
module only lays the Pod out.
"""

from __future__ import annotations

from dataclasses import dataclass

from functions.core import apis, labels, names, resources
from functions.core.modes import Mode
from functions.core.requests import Plan
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
    runtime_class: str | None = None
    fit_affinity: bool = True


def render_pod(spec: View, inputs: PodInputs) -> dict:
    main = {
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
        main["command"] = list(spec.list("command"))
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
    volumes = [workspace_volume(spec)]
    for index, volume in enumerate(spec.list("additionalVolumes").views()):
        name = f"additional-{index}"
        volumes.append({"name": name, **additional_source(volume)})
        mount = {"name": name, "mountPath": volume.str("mountPath")}
        if volume.bool("readOnly"):
            mount["readOnly"] = True
        if volume.str("subPath"):
            mount["subPath"] = volume.str("subPath")
        main["volumeMounts"].append(mount)
    containers = [main]
    if spec.has("sshPublicKey"):
        containers.append(sshd(spec, inputs))
        volumes.append(
            {
                "name": "sshd-authorized-keys",
                "secret": {"secretName": spec.str("sshPublicKey", "name"), "defaultMode": 0o600},
            }
        )
    pod_spec: dict = {
        "hostIPC": True,
        "shareProcessNamespace": True,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "containers": containers,
        "volumes": volumes,
    }
    if spec.has("imagePullSecret"):
        pod_spec["imagePullSecrets"] = [{"name": spec.str("imagePullSecret", "name")}]
    if inputs.hostname:
        pod_spec["nodeSelector"] = {labels.HOSTNAME: inputs.hostname}
    affinity = fit_affinity(inputs)
    if affinity:
        pod_spec["affinity"] = affinity
    if inputs.runtime_class:
        pod_spec["runtimeClassName"] = inputs.runtime_class
    return {
        "apiVersion": apis.CORE,
        "kind": "Pod",
        "metadata": {
            "name": inputs.name,
            "namespace": inputs.namespace,
            "labels": {labels.QUEUE_NAME: inputs.entrance, labels.INSTANCE: inputs.name},
        },
        "spec": pod_spec,
    }


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
    if inputs.manufacturer and inputs.plan.claim.cards:
        visibility = {resources.visibility_key(inputs.manufacturer): str(inputs.plan.claim.cards)}
        container["resources"] = {"requests": visibility, "limits": visibility}
    return container


def fit_affinity(inputs: PodInputs) -> dict | None:
    """Per-card feasibility as node affinity: a slice needs one card with its units free, a
    share on N cards needs N cards with a free share on one node (the fit labels)."""
    if not inputs.fit_affinity or not inputs.accelerator_key:
        return None
    claim, key = inputs.plan.claim, inputs.accelerator_key
    if claim.mode is Mode.SLICED:
        expression = {
            "key": labels.SLICED_FIT + key,
            "operator": "Gt",
            "values": [str(claim.units - 1)],
        }
    elif claim.mode is Mode.SHARED and claim.cards >= 2:
        expression = {
            "key": labels.SHARED_FIT + key,
            "operator": "Gt",
            "values": [str(claim.cards - 1)],
        }
    else:
        return None
    term = {"matchExpressions": [expression]}
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
        }
    }


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
