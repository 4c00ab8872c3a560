"""Composing through provider-kubernetes, where Crossplane cannot compose namespaced objects.

Crossplane 1.x's XR CRD declares `spec.resourceRefs[]` without a namespace, and its function
composer server-side applies a reference with one for every namespaced object it composes: the
apply is refused and nothing is composed (crossplane#6362, docs/e2e.md). Every handler composes
namespaced objects (ConfigMaps, NodeFeatures, LocalQueues, Pods). On 1.x they travel inside
provider-kubernetes' cluster-scoped `Object`, which applies its `spec.forProvider.manifest` and
reports the object it observes in `status.atProvider.manifest`.

A pipeline step whose input has `providerKubernetes` composes each namespaced object inside an
Object, and its handler sees each observed Object as the object it carries (`carried`): handlers
compose as they always do, and cluster-scoped objects (ResourceFlavors, ClusterQueues) are
composed as they are. The provider needs server-side apply (`--enable-server-side-apply`): a
client-side apply copies the manifest into an annotation, which a node's summary outgrows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from functions.handlers.base import InputError
from functions.handlers.desired import Desired
from functions.views import View, view_of

API_VERSION = "kubernetes.crossplane.io/v1alpha2"
KIND = "Object"
FIELD = "providerKubernetes"  # the step input's field
DEFAULT_PROVIDER_CONFIG = "default"  # provider-kubernetes' own default providerConfigRef


@dataclass(frozen=True)
class Envelope:
    """How a step's namespaced objects are wrapped: in Objects of this ProviderConfig."""

    provider_config: str = DEFAULT_PROVIDER_CONFIG

    @classmethod
    def of(cls, step_input: View) -> Envelope | None:
        """The step input's `providerKubernetes`, or None where it has none."""
        found = step_input.get(FIELD)
        if found is None:
            return None
        if not isinstance(found, View):
            raise InputError(
                f"input.{FIELD}",
                "must be an object, {providerConfigName: <name>} (or {} for provider-kubernetes' "
                "ProviderConfig `default`)",
            )
        name = found.get("providerConfigName", default=DEFAULT_PROVIDER_CONFIG)
        if not isinstance(name, str) or not name:
            raise InputError(
                f"input.{FIELD}.providerConfigName",
                f"must name a provider-kubernetes ProviderConfig, got {name!r}; leave it out "
                f"for {DEFAULT_PROVIDER_CONFIG!r}",
            )
        return cls(name)

    def observed(self, observed: Mapping[str, Any]) -> dict[str, Any]:
        """Each observed Object as the object it carries (`carried`); every other observed
        object as it is."""
        found: dict[str, Any] = {}
        for name, obj in observed.items():
            view = view_of(obj)
            is_object = (view.str("apiVersion"), view.str("kind")) == (API_VERSION, KIND)
            found[name] = carried(view) if is_object else obj
        return found

    def desired(self, desired: Desired, observed: Mapping[str, Any]) -> Desired:
        """`desired` with each namespaced object inside an Object, ready where the handler
        judges it ready and the provider has observed it (until then it may not exist)."""
        for name, obj in desired.resources.items():
            if view_of(obj).namespace:
                desired.resources[name] = self.wrapped(obj)
                desired.ready[name] = desired.ready.get(name, False) and seen(observed.get(name))
        return desired

    def wrapped(self, manifest: dict[str, Any]) -> dict[str, Any]:
        # No name: Crossplane names what it composes after the composite. `watch`: the provider
        # (run with --enable-watches) observes the object again when it changes, so a Pod's
        # phase reaches its Instance as soon as the Pod's own status does.
        return {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "spec": {
                "forProvider": {"manifest": manifest},
                "providerConfigRef": {"name": self.provider_config},
                "watch": True,
            },
        }


def seen(envelope: Any) -> bool:
    """Whether the provider has observed the object an observed Object carries."""
    return envelope is not None and isinstance(
        view_of(envelope).get("status", "atProvider", "manifest"), View
    )


def carried(envelope: View) -> dict[str, Any]:
    """The object an Object carries, as Crossplane 2.x would observe it once applied: what the
    provider last observed (`status.atProvider.manifest`: the status, the fields others set)
    with the manifest asked for applied over it. The provider applies after the composite's
    reconcile, so what it observed may still predate the manifest; a handler that keeps an
    observed object as it is must keep what it asked for, not that older copy."""
    asked = envelope.get("spec", "forProvider", "manifest")
    seen = envelope.get("status", "atProvider", "manifest")
    return applied(
        seen.to_dict() if isinstance(seen, View) else {},
        asked.to_dict() if isinstance(asked, View) else {},
    )


def applied(live: dict[str, Any], manifest: Mapping[str, Any]) -> dict[str, Any]:
    """`manifest` applied over `live`: objects merged key by key, anything else replaced."""
    for key, value in manifest.items():
        if isinstance(value, Mapping) and isinstance(live.get(key), dict):
            applied(live[key], value)
        else:
            live[key] = value
    return live
