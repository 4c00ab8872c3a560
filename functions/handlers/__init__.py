"""One module per handler; the step input's `handler` names one of these."""

from __future__ import annotations

from functions.frame import Handler
from functions.handlers.catalog import CatalogHandler
from functions.handlers.devices import DevicesHandler
from functions.handlers.gpuclass import GPUClassHandler
from functions.handlers.instance import InstanceHandler
from functions.handlers.instancetype import InstanceTypeHandler
from functions.handlers.instancetypeflavor import InstanceTypeFlavorHandler

HANDLERS: dict[str, Handler] = {
    handler.name: handler
    for handler in (
        CatalogHandler(),
        DevicesHandler(),
        GPUClassHandler(),
        InstanceHandler(),
        InstanceTypeHandler(),
        InstanceTypeFlavorHandler(),
    )
}
