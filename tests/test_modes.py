"""The table of sharing modes is whole: every layer has a rule for each mode it lists, and what
the API spells per mode (the XRDs' fields, views, printer column and enum) is what it says."""

from __future__ import annotations

import pytest
import yaml

from functions.core import labels, ledger, pools, requests
from functions.core.ledger import GroupSummary
from functions.core.modes import MODES, NO_CLAIM, SHARE, Claim, D, FieldKind, Mode
from tests.conftest import ROOT
from tools import modes as modes_tool


def xrd(name: str) -> dict:
    return yaml.safe_load((ROOT / "compositions" / "xrds" / f"{name}.yaml").read_text())


def schema(name: str) -> dict:
    return xrd(name)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


@pytest.mark.parametrize(
    "rules",
    [
        ledger._TAKE,
        pools._VIEWS,
        {m: r for m, r in requests._VALIDATE.items() if m is not Mode.NONE},
    ],
    ids=["how a card takes it", "how its view is summed", "how its request is validated"],
)
def test_every_layer_has_a_rule_for_each_mode_of_the_table(rules):
    assert list(rules) == list(MODES)


def test_the_instancetype_column_names_each_modes_view_in_the_tables_order():
    columns = xrd("instancetype")["spec"]["versions"][0]["additionalPrinterColumns"]
    abbreviations = "/".join(spec.abbreviation for spec in MODES.values())
    assert f"ACCELERATOR({abbreviations})" in [c["name"] for c in columns]


def test_the_instancetype_status_has_a_view_for_each_mode():
    status = schema("instancetype")["properties"]["status"]["properties"]
    assert all(spec.view in status for spec in MODES.values())


def test_the_instance_asks_for_each_mode_by_the_fields_the_table_names():
    resources = schema("instance")["properties"]["spec"]["properties"]["resources"]["properties"]
    assert all(f.name in resources for spec in MODES.values() for f in spec.fields)


def test_the_xrds_are_what_make_generate_writes_from_the_table():
    for path, text in modes_tool.render().items():
        assert path.read_text() == text, f"{path.name} is stale: run `make generate`"


def test_a_request_field_is_read_as_its_kind_declares_it():
    read_as = {
        FieldKind.QUANTITY: set(requests._QUANTITIES),
        FieldKind.COUNT: set(requests._INTEGERS),
        FieldKind.PERCENT: set(requests._INTEGERS),
        FieldKind.NAME: {requests.PROFILE},
    }
    for spec in MODES.values():
        for f in spec.fields:
            assert f.name in read_as[f.kind], f"{f.name} is a {f.kind.value}"


def test_the_instance_declares_each_request_field_as_its_kind():
    resources = schema("instance")["properties"]["spec"]["properties"]["resources"]["properties"]
    quantity = resources["cpu"]
    for spec in MODES.values():
        for f in spec.fields:
            declared = resources[f.name]
            if f.kind is FieldKind.QUANTITY:
                assert declared == quantity
            else:
                assert declared["description"] == f.description


def test_a_devices_allocation_names_the_modes_of_the_table():
    spec = schema("devices")["properties"]["spec"]["properties"]
    mode = spec["allocations"]["items"]["properties"]["mode"]
    assert mode["enum"] == [m.title for m in MODES]


def test_an_instancetype_offers_the_modes_of_the_table():
    offers = schema("instancetype")["properties"]["status"]["properties"]["offers"]["properties"]
    assert offers["modes"]["items"]["enum"] == [m.title for m in MODES]


def test_make_generate_writes_the_offered_modes_enum():
    text = modes_tool.INSTANCETYPE.read_text()
    titles = ", ".join(m.title for m in MODES)
    stale = text.replace(f"enum: [{titles}]", "enum: [Exclusive]")
    assert stale != text
    assert modes_tool.offers(stale) == text


def enums(node) -> list[list]:
    """Every `enum` a schema declares, wherever it stands."""
    if isinstance(node, list):
        return [found for item in node for found in enums(item)]
    if not isinstance(node, dict):
        return []
    here = [node["enum"]] if isinstance(node.get("enum"), list) else []
    return here + [found for value in node.values() for found in enums(value)]


@pytest.mark.parametrize("folder", ["xrds", "legacy/xrds"])
def test_every_enum_of_the_api_that_names_a_mode_names_every_mode_of_the_table(folder):
    """A hand-written enum of modes (offers.modes was one) refuses the statuses and specs that
    name a new mode: every enum naming one mode names them all, as the table orders them."""
    titles = [m.title for m in MODES]
    found = []
    for path in sorted((ROOT / "compositions" / folder).glob("*.yaml")):
        for enum in enums(yaml.safe_load(path.read_text())):
            if set(enum) & set(titles):
                assert enum == titles, f"{path.name}: enum {enum} is not the table's modes"
                found.append(path.name)
    assert sorted(found) == ["devices.yaml", "instancetype.yaml"]


def test_the_devices_handler_writes_a_fit_label_for_every_mode_with_one():
    written = labels.fit_labels("a", GroupSummary())
    assert sorted(written) == sorted(spec.fit + "a" for spec in MODES.values() if spec.fit)


@pytest.mark.parametrize(
    "claim, credits",
    [
        (NO_CLAIM, 0),
        (Claim(Mode.EXCLUSIVE, 2), 2 * D),
        (Claim(Mode.SHARED, 3), 3 * SHARE),
        (Claim(Mode.SLICED, 1, memory_percentage=20, units=320_000), 320_000),
        (Claim(Mode.PARTITIONED, 1, profile="3g.40gb", units=800_000), 800_000),
    ],
    ids=["no card", "two whole cards", "three shares", "a 20 % slice", "a 3g.40gb partition"],
)
def test_one_credit_rule_prices_every_mode(claim, credits):
    assert claim.credits == credits
