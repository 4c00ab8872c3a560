"""What the reference's Instance webhook refuses, judged here since no webhook runs.

The namespace must be a tenant's. Two escapes are gated by Catalog settings (reference §7.2),
judged only when the Instance takes them: privileged mode, and host-path volumes (a mount the
observed Pod already holds is covered). The volumes must have a sound shape (§8.2, §8.3).
"""

from __future__ import annotations

from functions.core import quantity, reasons
from functions.core.quantity import QuantityError
from functions.core.requests import Refusal
from functions.core.settings import Settings
from functions.handlers.instance import volumes
from functions.views import View

PRIVILEGED_GATE = "instancePrivilegedAllowed"
# The XRD's rules in its words (compositions/xrds/instance.yaml), which the handler applies where
# no API server does: offline render, and a rule at the schema's root before Crossplane 2.2
# (tests/test_messages.py holds the two equal).
BOTH_VOLUMES_RULE = "cannot specify both ephemeral and persistent of volume"
ONE_VOLUME_RULE = "either ephemeral or persistent of volume should be specified"


def namespace_refusals(namespace: str, settings: Settings) -> list[Refusal]:
    if namespace not in settings.reserved_namespaces:
        return []
    message = f"cannot create instance in reserved namespace {namespace}: use a tenant namespace"
    return [Refusal("metadata.namespace", message, reasons.RESERVED_NAMESPACE)]


def refusals(spec: View, settings: Settings, pod: View | None) -> list[Refusal]:
    """Every gate and shape rule the spec breaks, in field order."""
    found = privileged_refusals(spec, settings, pod)
    found += volumes.host_path_refusals(spec, settings.host_path_allowed, pod)
    found += [
        Refusal(r.field, r.message, reasons.INVALID_VOLUME)
        for r in workspace_refusals(spec) + volumes.shape_refusals(spec)
    ]
    return found


def privileged_refusals(spec: View, settings: Settings, pod: View | None) -> list[Refusal]:
    if not spec.bool("privileged") or settings.privileged_allowed or held_privileged(pod):
        return []
    message = (
        f'privileged mode is not allowed: enable the Catalog\'s "{PRIVILEGED_GATE}" setting to '
        "allow it"
    )
    return [Refusal("spec.privileged", message, reasons.PRIVILEGED_NOT_ALLOWED)]


def held_privileged(pod: View | None) -> bool:
    """Whether the observed Pod already runs a privileged container."""
    return pod is not None and any(
        c.bool("securityContext", "privileged") for c in pod.list("spec", "containers").views()
    )


def workspace_refusals(spec: View) -> list[Refusal]:
    """`spec.volume`: exactly one of ephemeral (with a positive capacity) or persistent."""
    ephemeral, persistent = spec.has("volume", "ephemeral"), spec.has("volume", "persistent")
    if ephemeral and persistent:
        return [Refusal("spec.volume", BOTH_VOLUMES_RULE)]
    if not (ephemeral or persistent):
        return [Refusal("spec.volume", ONE_VOLUME_RULE)]
    if persistent:
        if spec.str("volume", "persistent", "name"):
            return []
        message = "name of the persistent volume must be specified"
        return [Refusal("spec.volume.persistent.name", message)]
    try:
        positive = quantity.parse(spec.get("volume", "ephemeral", "capacity") or 0) > 0
    except QuantityError:
        positive = False
    if positive:
        return []
    message = "capacity of ephemeral volume must be positive"
    return [Refusal("spec.volume.ephemeral.capacity", message)]
