"""instancetypeflavor: a catalog row composes nothing; it is ready once it exists.

InstanceTypeFlavors are written by the catalog handler; their spec is the row. The handler
only reports readiness, so `kubectl get instancetypeflavor` shows them Ready.
"""

from __future__ import annotations

import datetime

from functions.frame import Handler, Output, Request


class InstanceTypeFlavorHandler(Handler):
    name = "instancetypeflavor"
    kinds = frozenset({"InstanceTypeFlavor"})
    ttl = datetime.timedelta(hours=1)  # nothing outside the object itself can change it

    def compose(self, request: Request, out: Output) -> None:
        out.composite_ready = True
