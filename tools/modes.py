"""Write what the XRDs spell per sharing mode from the core's table (`core/modes.py`, `MODES`).

Three XRDs name the modes: the Instance asks for each by its request fields, the InstanceType
shows each mode's view (and its abbreviation in the `ACCELERATOR(EX/SH/SL/PT)` column) and lists
the modes a pool offers (the `status.offers.modes` enum), and a Devices allocation names its
mode. Each of those spots is written here, between a pair of marker comments (or, for the column
and the enums, on its one line), so a new mode is an entry in the table and `make generate`, not
six hand edits. A test checks the committed XRDs are what this writes; `tools/legacy.py` then
copies them into the legacy set.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import yaml

from functions.core.modes import MODES, FieldKind, Mode
from functions.core.pools import AcceleratorViews

ROOT = Path(__file__).resolve().parent.parent
XRDS = ROOT / "compositions" / "xrds"
INSTANCE, INSTANCETYPE, DEVICES = (
    XRDS / f"{n}.yaml" for n in ("instance", "instancetype", "devices")
)

BEGIN = "# >>> modes: written by tools/modes.py from core/modes.py (make generate); do not edit"
END = "# <<< modes"
BLOCK = re.compile(rf"^( *){re.escape(BEGIN)}\n.*?^ *{re.escape(END)}\n", re.MULTILINE | re.DOTALL)

# How the Instance XRD declares a request field of each kind (`*quantity` is its anchor for
# Kubernetes quantities, on `cpu` above the block).
FIELD_SCHEMA = {
    FieldKind.QUANTITY: None,
    FieldKind.COUNT: {"type": "integer", "minimum": 0},
    FieldKind.PERCENT: {"type": "integer", "minimum": 0, "maximum": 100},
    FieldKind.NAME: {"type": "string", "maxLength": 63},
}


# A view's figures are strings; its lists are counts by name (a partition's profiles).
def counts_by_name() -> dict:
    counts = {"name": {"type": "string"}, "count": {"type": "integer"}}
    return {"type": "array", "items": {"type": "object", "properties": counts}}


def render() -> dict[Path, str]:
    """Each of the three XRDs with its per-mode spots written from the table."""
    return {
        INSTANCE: block(INSTANCE, INSTANCE.read_text(), request_fields()),
        INSTANCETYPE: offers(column(block(INSTANCETYPE, INSTANCETYPE.read_text(), views()))),
        DEVICES: devices(DEVICES.read_text()),
    }


def request_fields() -> str:
    """The Instance's `spec.resources` fields of every mode, in the table's order."""
    lines = []
    for spec in MODES.values():
        for f in spec.fields:
            schema = FIELD_SCHEMA[f.kind]
            if schema is None:
                lines.append(f"{f.name}: *quantity")  # an alias takes no description
            else:
                lines.append(_dump({f.name: schema | {"description": f.description}}))
    return "\n".join(lines)


def views() -> str:
    """The InstanceType's status view of every mode: the keys its empty view writes."""
    empty = AcceleratorViews()
    found = {}
    for mode, spec in MODES.items():
        status = empty[mode].as_status()
        properties = {
            key: {"type": "string"} if isinstance(value, str) else counts_by_name()
            for key, value in status.items()
        }
        found[spec.view] = {"type": "object", "properties": properties}
    return _dump(found)


def column(text: str) -> str:
    """The InstanceType's accelerator column, headed by the modes' abbreviations."""
    header = "ACCELERATOR(" + "/".join(spec.abbreviation for spec in MODES.values()) + ")"
    return _one(INSTANCETYPE, text, re.compile(r"(- \{name: )ACCELERATOR\([^)]*\)(, )"), header)


def offers(text: str) -> str:
    """The InstanceType's `status.offers.modes` enum: a mode missing from it would have the API
    server refuse the status of every pool that offers the mode."""
    enum = re.compile(
        r"(\n *modes:\n *type: array\n(?: *description: [^\n]*\n)?"
        r" *items: \{type: string, enum: )\[[^\]\n]*\](\})"
    )
    return _one(INSTANCETYPE, text, enum, _titles())


def devices(text: str) -> str:
    """A Devices allocation's `mode` enum and a card's integer mode, as the table names them."""
    text = _one(
        DEVICES,
        text,
        re.compile(r"(\n *mode: \{type: string, enum: )\[[^\]\n]*\](\})"),
        _titles(),
    )
    numbers = '"' + ", ".join(f"{mode.value} {mode.name.title()}" for mode in Mode) + '"'
    integer = re.compile(r"(\n *mode: \{type: integer, description: )\"[^\"\n]*\"(\})")
    return _one(DEVICES, text, integer, numbers)


def _titles() -> str:
    """The modes' titles as a flow-style enum, in the table's order: `[Exclusive, Shared, ...]`."""
    return "[" + ", ".join(spec.mode.title for spec in MODES.values()) + "]"


def block(path: Path, text: str, body: str) -> str:
    """`text` with what stands between its one pair of markers replaced by `body`."""

    def write(match: re.Match[str]) -> str:
        indent = match.group(1)
        lines = [BEGIN, *body.splitlines(), END]
        return "".join(f"{indent}{line}\n" for line in lines)

    written, found = BLOCK.subn(write, text)
    if found != 1:
        raise SystemExit(f"{path}: expected one `{BEGIN}` … `{END}` block, found {found}")
    return written


def _one(path: Path, text: str, line: re.Pattern[str], value: str) -> str:
    written, found = line.subn(lambda m: f"{m.group(1)}{value}{m.group(2)}", text)
    if found != 1:
        raise SystemExit(f"{path}: expected one line matching {line.pattern}, found {found}")
    return written


def _dump(data: dict) -> str:
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=200).rstrip("\n")


def main() -> int:
    for path, text in render().items():
        path.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
