"""Readings that hold: a card is reported changed only once two polls in a row agree.

NVML readings flap: a call fails once, a counter is read mid-update, a lost GPU comes back. The
agent writes `Devices` whenever what it reports changes, and every write re-runs the devices
handler and every pool of the node. So each card's reading — its identity, memory, health, MIG
state — and each vendor's driver versions pass through `Steady`: a reading that differs from
what was reported is held back until the next poll reads the same; a reading that flips back
is dropped. The first poll reports what it reads (there is nothing to hold to yet).

What the kubelet handed out (allocations) is not a reading of hardware and is never held.

A card never read has no identity yet: its placeholder (`unknown`) is no reading to hold to.
The first poll that reads it is reported at once, whatever polls before and after read: a
card whose first read failed and whose reads then failed every other poll stayed
`GPU-unreadable-0` for good, each good reading held back and then dropped by the failing one
after it, although half the reads were good. Once it is known, it holds as any other card.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

_ABSENT = object()
VENDOR = "vendor"  # the key of a vendor's own fields, beside its cards' indexes


@dataclass
class Steady:
    """What was reported per key, and a differing reading seen once, waiting to be confirmed."""

    reported: dict[Hashable, Any] = field(default_factory=dict)
    pending: dict[Hashable, Any] = field(default_factory=dict)
    started: bool = False
    # A reported value that is no reading (a card's placeholder identity): replaced by the
    # first reading that is one, without waiting for a second.
    unknown: Callable[[Any], bool] = field(default=lambda value: False)

    def settle(self, readings: Mapping[Hashable, Any]) -> dict[Hashable, Any]:
        """What to report for this poll's `readings` (a key missing from them: gone)."""
        settled: dict[Hashable, Any] = {}
        for key in sorted(set(readings) | set(self.reported), key=repr):
            value = self._settle(key, readings.get(key, _ABSENT))
            if value is not _ABSENT:
                settled[key] = value
        self.reported, self.started = settled, True
        return dict(settled)

    def _settle(self, key: Hashable, read: Any) -> Any:
        held = self.reported.get(key, _ABSENT)
        if (
            read == held
            or not self.started
            or self.pending.get(key, _ABSENT) == read
            or (held is not _ABSENT and self.unknown(held) and not self.unknown(read))
        ):
            self.pending.pop(key, None)
            return read
        self.pending[key] = read  # seen once: report it if the next poll reads it too
        return held

    @property
    def unsettled(self) -> bool:
        """A differing reading waits for the next poll to confirm it."""
        return bool(self.pending)


def by_key(vendors: list[dict[str, Any]]) -> dict[Hashable, Any]:
    """Vendors' readings keyed by (manufacturer, card index), and (manufacturer, VENDOR)."""
    readings: dict[Hashable, Any] = {}
    for vendor in vendors:
        manufacturer = vendor["manufacturer"]
        readings[(manufacturer, VENDOR)] = {k: v for k, v in vendor.items() if k != "devices"}
        for card in vendor.get("devices") or []:
            readings[(manufacturer, card["index"])] = card
    return readings


def vendors_of(readings: Mapping[Hashable, Any]) -> list[dict[str, Any]]:
    """`by_key` undone: vendors in manufacturer order, their cards in index order."""
    vendors: dict[str, dict[str, Any]] = {}
    for (manufacturer, key), value in sorted(readings.items(), key=lambda item: repr(item[0])):
        if key == VENDOR:
            vendors.setdefault(manufacturer, {"devices": []}).update(value)
    for (manufacturer, key), value in readings.items():
        if key != VENDOR and manufacturer in vendors:
            vendors[manufacturer]["devices"].append(value)
    found = []
    for manufacturer in sorted(vendors):
        vendor = vendors[manufacturer]
        vendor["devices"].sort(key=lambda card: card["index"])
        if vendor["devices"]:
            found.append({k: vendor[k] for k in (*sorted(set(vendor) - {"devices"}), "devices")})
    return found
