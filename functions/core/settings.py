"""The Catalog's settings (DESIGN §3.1): read once per request, with field-path errors.

A pydantic model pays here: a small, cold object whose every field has a type, a default and a
name users type in YAML. Strict types, so `"false"` is refused rather than read as true. The
same defaults are in the Catalog XRD.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from functions.core import dialects, names

DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"


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

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any] | None) -> Settings:
        """Read a Catalog's spec; unset (or null) fields keep their defaults."""
        given = {key: value for key, value in (spec or {}).items() if value is not None}
        try:
            return cls.model_validate(given)
        except ValidationError as error:
            first = error.errors()[0]
            where = ".".join(str(part) for part in ("spec", *first["loc"]))
            raise SettingsError(where, _explain(first)) from error

    @property
    def dialect(self) -> dialects.Dialect:
        """How Instances write their claims for the cluster's device plugin."""
        return dialects.of(self.device_plugin)

    @property
    def reserved_namespaces(self) -> frozenset[str]:
        """Namespaces that get no LocalQueue and take no Instance."""
        return frozenset({self.system_namespace, *names.RESERVED_NAMESPACES})


def _explain(error: Mapping[str, Any]) -> str:
    value = error.get("input")
    if error["type"].endswith("_type"):
        return f"{error['msg'].lower()}, got {value!r}; fix the Catalog default"
    return f"{error['msg'].lower()} (got {value!r}); fix the Catalog default"


DEFAULTS = Settings()
