"""instancetypeflavor: a catalog row composes nothing; it is ready once it exists.

InstanceTypeFlavors are written by the catalog handler; their spec is the row. The handler
only reports readiness, so `kubectl get instancetypeflavor` shows them Ready.
"""

from __future__ import annotations

import datetime

from functions.handlers.base import Handler, Request
from functions.handlers.desired import Desired


def compose(request: Request) -> Desired:
    return Desired(composite_ready=True)


HANDLER = Handler(
    "instancetypeflavor",
    frozenset({"InstanceTypeFlavor"}),
    compose,
    ttl=datetime.timedelta(hours=1),  # nothing outside the object itself can change it
)
