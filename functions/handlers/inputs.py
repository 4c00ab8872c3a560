"""What several handlers read: the Catalog's settings and the nodes' published summaries.

A required object a handler cannot read is skipped and named — kind, name and field — in a
Warning result and the `InputsReadable` condition; the rest composes. One bad Devices object
never stops a pool.
"""

from __future__ import annotations

from functions.core import apis, names, reasons
from functions.core.devices import SpecError, parse_devices
from functions.core.pools import NodeSummary, summarize_devices
from functions.core.settings import Settings, SettingsError
from functions.core.status import StatusError
from functions.core.status.devices import read_summary
from functions.handlers.base import Request, Requirement
from functions.handlers.desired import Desired
from functions.views import View

CATALOG = Requirement(apis.WORKER, "Catalog", match_name=names.CATALOG)


def catalog_settings(request: Request, desired: Desired, requirement: str = "catalog") -> Settings:
    """The Catalog `default`'s settings; the defaults while it is missing, not yet read, or
    unreadable (then a Warning names the field: the Catalog's own reconcile refuses it)."""
    catalog = request.required_one(requirement)
    if catalog is None:
        return Settings()
    try:
        return Settings.from_spec(catalog.view("spec").to_dict())
    except SettingsError as error:
        unreadable(desired, "Catalog", catalog.name, error.field, error.message)
        return Settings()


def node_summaries(request: Request, settings: Settings, desired: Desired) -> list[NodeSummary]:
    """Every required Devices object's summary; unreadable ones are skipped and named."""
    summaries, skipped = [], []
    for devices in request.required("devices") or []:
        try:
            summaries.append(node_summary(devices, settings))
        except (StatusError, SpecError) as error:
            where = error.field if isinstance(error, StatusError) else error.path
            unreadable(desired, "Devices", devices.name, where, error.problem)
            skipped.append(devices.name)
    inputs_readable(desired, "Devices", skipped)
    return summaries


def node_summary(devices: View, settings: Settings) -> NodeSummary:
    """A node's summary as its devices handler published it.

    Only the small `status.summary` subtree is read. A Devices object the devices handler has
    not reconciled yet is summarised from its spec (the same core code the handler runs).
    """
    summary = read_summary(devices.name, devices.get("status"))
    if summary is not None:
        return summary
    spec = parse_devices(devices.to_dict())
    fixed = settings.dialect.fixed_partitions
    return summarize_devices(spec, settings.node_management_manual, fixed_partitions=fixed)


def unreadable(desired: Desired, kind: str, name: str, field: str, problem: str) -> None:
    desired.warning(
        f"{kind} {name}: {field}: {problem}; it is left out until it is fixed",
        reasons.UNREADABLE_OBJECT,
    )


def inputs_readable(desired: Desired, kind: str, skipped: list[str]) -> None:
    if skipped:
        message = f"left out unreadable {kind}: {', '.join(skipped)} (see the Warning events)"
        desired.condition(reasons.INPUTS_READABLE, False, reasons.UNREADABLE_OBJECT, message)
    else:
        desired.condition(reasons.INPUTS_READABLE, True, reasons.ALL_READABLE)
