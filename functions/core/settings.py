"""The Catalog's settings (DESIGN §3.1): read once per request, with field-path errors.

A pydantic model pays here: a small, cold object whose every field has a type, a default and a
name users type in YAML. Strict types, so `"false"` is refused rather than read as true. The
same defaults are in the Catalog XRD.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

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

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any] | None) -> Settings:
        """Read a Catalog's spec; unset (or null) fields keep their defaults."""
        given = {key: value for key, value in (spec or {}).items() if value is not None}
        try:
            return cls.model_validate(given)
        except ValidationError as error:
            first = error.errors()[0]
            path = [str(part) for part in ("spec", *first["loc"])]
            if path[-1] == "[key]":  # a map's key: the path is the map's
                path = path[:-2]
            raise SettingsError(".".join(path), _explain(first)) from error

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


def _explain(error: Mapping[str, Any]) -> str:
    value = error.get("input")
    message = error["msg"].removeprefix("Value error, ")
    message = message[:1].lower() + message[1:]  # pydantic's sentence, inside ours
    if error["type"].endswith("_type"):
        return f"{message}, got {value!r}; fix the Catalog default"
    return f"{message} (got {value!r}); fix the Catalog default"


DEFAULTS = Settings()
