"""The Catalog's settings (DESIGN §3.1): read once per request, with field-path errors.

A pydantic model pays here: a small, cold object whose every field has a type, a default and a
name users type in YAML. Strict types, so `"false"` is refused rather than read as true. The
same defaults are in the Catalog XRD.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator

from functions.core import dialects, labels, names

DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
LABEL_KEY_RULE = (
    "a label key is an optional DNS subdomain and '/', then at most 63 letters, digits, '-', "
    "'_' or '.', starting and ending with a letter or digit"
)
LABEL_VALUE_RULE = (
    "a label value is empty or at most 63 letters, digits, '-', '_' or '.', starting and "
    "ending with a letter or digit"
)


def _matching(pattern: str, rule: str) -> AfterValidator:
    def check(text: str) -> str:
        if re.match(pattern, text) is None:
            raise ValueError(rule)
        return text

    return AfterValidator(check)


LabelKey = Annotated[str, _matching(labels.LABEL_KEY_PATTERN, LABEL_KEY_RULE)]
LabelValue = Annotated[str, _matching(labels.LABEL_VALUE_PATTERN, LABEL_VALUE_RULE)]

# The taints Kubernetes' node lifecycle sets (not-ready, unreachable, unschedulable, the
# pressures, out-of-service; a cloud's uninitialized and shutdown): a Pod tolerating one could be
# placed on, or outlive, a lost or cordoned node.
LIFECYCLE_TAINT_PREFIXES = ("node.kubernetes.io/", "node.cloudprovider.kubernetes.io/")
LIFECYCLE_TAINT_RULE = (
    "the node lifecycle's taints (node.kubernetes.io/..., node.cloudprovider.kubernetes.io/...) "
    "are never tolerated: a Pod on a lost or cordoned node must be evicted and placed again"
)
# Every toleration's, the Catalog's and a GPU class's alike (their XRDs say the same).
EXISTS_VALUE_RULE = "an Exists toleration has no value; drop it, or use Equal"


def _not_lifecycle(key: str) -> str:
    if key.startswith(LIFECYCLE_TAINT_PREFIXES):
        raise ValueError(LIFECYCLE_TAINT_RULE)
    return key


class FlavorToleration(BaseModel):
    """A taint, beside its manufacturer's GPU taint, that every accelerated flavor tolerates:
    for clusters whose accelerator nodes carry another taint (docs/reliability.md). Kueue copies
    a flavor's tolerations onto each Pod it admits to it, and places the Pod on the flavor's
    nodes only, so one list serves every accelerated flavor."""

    model_config = ConfigDict(frozen=True, strict=True, extra="ignore")

    key: Annotated[LabelKey, AfterValidator(_not_lifecycle)]
    operator: Literal["Equal", "Exists"] = "Equal"
    value: LabelValue = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None

    @model_validator(mode="after")
    def _exists_has_no_value(self) -> FlavorToleration:
        if self.operator == "Exists" and self.value:
            raise ValueError(EXISTS_VALUE_RULE)
        return self

    def toleration(self) -> dict[str, str]:
        """As a Pod (and a ResourceFlavor) spells it."""
        found = {"key": self.key, "operator": self.operator}
        if self.operator == "Equal":
            found["value"] = self.value
        if self.effect:
            found["effect"] = self.effect
        return found


class SettingsError(ValueError):
    """A Catalog setting of the wrong type or shape; `field` is its path (`spec.<setting>`)."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class Settings(BaseModel):
    """The Catalog's settings, under the names the reference gives them (camelCase in YAML)."""

    model_config = ConfigDict(frozen=True, strict=True, extra="ignore", populate_by_name=True)

    derived_from_node: bool = Field(True, alias="instanceTypeDerivedFromNode")
    aware_cpu_manufacturer: bool = Field(False, alias="instanceTypeAwareCpuManufacturer")
    mixed_on_node: bool = Field(True, alias="instanceTypeMixedOnNode")
    drain_when_no_flavors: bool = Field(True, alias="instanceTypeDrainWhenNoFlavors")
    overcommit: bool = Field(True, alias="instanceGeneralResourcesOvercommit")
    privileged_allowed: bool = Field(False, alias="instancePrivilegedAllowed")
    host_path_allowed: bool = Field(False, alias="instanceHostPathVolumeAllowed")
    persistent_volume_placement: bool = Field(True, alias="instancePersistentVolumePlacement")
    node_management_manual: bool = Field(False, alias="nodeManagementManual")
    workload_fit_affinity: bool = Field(True, alias="workloadFitAffinity")
    node_devices_admission_check: bool = Field(False, alias="nodeDevicesAdmissionCheck")
    vgpu_entitlement: bool = Field(False, alias="vgpuEntitlement")
    device_plugin: dialects.Name = Field(dialects.DEFAULT, alias="devicePlugin")
    system_namespace: str = Field("gpustack-system", alias="systemNamespace", pattern=DNS_LABEL)
    license_namespace: str = Field("cozy-system", alias="licenseNamespace", pattern=DNS_LABEL)
    # Labels every node whose GPUs serve VMs carries: a GPUClass requires only the Nodes with
    # them (beside KubeVirt's own), so its request need not carry the rest of a large fleet.
    vm_node_selector: dict[LabelKey, LabelValue] = Field(
        default_factory=dict, alias="vmNodeSelector", max_length=16
    )
    # Kueue allows a flavor eight tolerations; its manufacturer's GPU taint takes one.
    accelerated_flavor_tolerations: list[FlavorToleration] = Field(
        default_factory=list, alias="acceleratedFlavorTolerations", max_length=7
    )

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any] | None) -> Settings:
        """Read a Catalog's spec; unset (or null) fields keep their defaults."""
        given = {key: value for key, value in (spec or {}).items() if value is not None}
        try:
            return cls.model_validate(given)
        except ValidationError as error:
            first = error.errors()[0]
            raise SettingsError(_field_path(first["loc"]), _explain(first)) from error

    @property
    def dialect(self) -> dialects.Dialect:
        """How Instances write their claims for the cluster's device plugin."""
        return dialects.of(self.device_plugin)

    @property
    def vm_nodes(self) -> dict[str, str]:
        """The labels of the Nodes a GPUClass counts: the Catalog's `vmNodeSelector` and
        KubeVirt's heartbeat label, which no setting can override."""
        return {**self.vm_node_selector, **labels.KUBEVIRT_SCHEDULABLE}

    @property
    def reserved_namespaces(self) -> frozenset[str]:
        """Namespaces that get no LocalQueue and take no Instance."""
        return frozenset({self.system_namespace, *names.RESERVED_NAMESPACES})


def _field_path(loc: tuple[int | str, ...]) -> str:
    """`spec.acceleratedFlavorTolerations[0].key` for pydantic's location of an error."""
    if loc[-1] == "[key]":  # a map's key: the path is the map's
        loc = loc[:-2]
    path = "spec"
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


def _explain(error: Mapping[str, Any]) -> str:
    value = error.get("input")
    message = error["msg"].removeprefix("Value error, ")
    message = message[:1].lower() + message[1:]  # pydantic's sentence, inside ours
    if error["type"].endswith("_type"):
        return f"{message}, got {value!r}; fix the Catalog default"
    return f"{message} (got {value!r}); fix the Catalog default"


DEFAULTS = Settings()
