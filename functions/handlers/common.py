"""What several handlers read: the Catalog's settings and the nodes' published summaries."""

from __future__ import annotations

from functions.core.catalog import Settings
from functions.core.devices import SpecError, parse_devices
from functions.core.pools import NodeSummary, summarize_devices
from functions.core.status import summary_from_status
from functions.frame import InputError, Request, Requirement
from functions.structs import View

API = "worker.gpustack.ai/v1alpha1"
CATALOG = Requirement(API, "Catalog", match_name="default")


def catalog_settings(request: Request, requirement: str = "catalog") -> Settings:
    """The Catalog `default`'s settings; its defaults while it is missing or not yet read."""
    catalog = request.required_one(requirement)
    if catalog is None:
        return Settings()
    return Settings.from_spec(catalog.view("spec").to_dict())


def node_summary(devices: View, settings: Settings) -> NodeSummary:
    """A node's summary as its devices handler published it.

    Only the small `status.summary` subtree is read. A Devices object the devices handler has
    not reconciled yet is summarised from its spec (the same core code the handler runs).
    """
    summary = devices.view("status", "summary")
    if summary:
        return summary_from_status(devices.name, summary)
    try:
        spec = parse_devices(devices.to_dict())
    except SpecError as error:
        raise InputError(f"Devices {devices.name}: {error.path}", error.problem) from error
    return summarize_devices(spec, settings.node_management_manual)


def condition_status(obj: View | None, type_: str) -> str:
    """`True`, `False` or `Unknown` for a condition of an observed object."""
    if obj is None:
        return "Unknown"
    for condition in obj.list("status", "conditions").views():
        if condition.str("type") == type_:
            return condition.str("status") or "Unknown"
    return "Unknown"
