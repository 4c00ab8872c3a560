"""One module per handler; the step input's `handler` names one of these."""

from __future__ import annotations

from functions.frame import Handler
from functions.handlers.instancetypeflavor import InstanceTypeFlavorHandler

HANDLERS: dict[str, Handler] = {handler.name: handler for handler in (InstanceTypeFlavorHandler(),)}
