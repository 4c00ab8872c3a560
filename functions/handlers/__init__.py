"""One module per handler, each with one entry point `HANDLER`; the step input's `handler`
names one of these."""

from __future__ import annotations

from functions.handlers import (
    catalog,
    devices,
    gpuclass,
    instance,
    instancepersistentvolume,
    instancetype,
    instancetypeflavor,
    kubernetesnodes,
)
from functions.handlers.base import Handler

HANDLERS: dict[str, Handler] = {
    module.HANDLER.name: module.HANDLER
    for module in (
        catalog,
        devices,
        gpuclass,
        instance,
        instancepersistentvolume,
        instancetype,
        instancetypeflavor,
        kubernetesnodes,
    )
}
