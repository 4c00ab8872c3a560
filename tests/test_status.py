"""Devices.status round trip: what the devices handler publishes is what pools read back."""

from __future__ import annotations

import copy

from functions.core.devices import parse_spec
from functions.core.pools import summarize_devices
from functions.core.status import summary_from_status, summary_status
from tests.test_mig import MIG_3G_ON_GPU0, h100_node


def test_a_summary_reads_back_as_it_was_published():
    published = summarize_devices(parse_spec("node-h100", h100_node(3, [MIG_3G_ON_GPU0])))
    status = summary_status(published)
    read = summary_from_status("node-h100", status)
    assert read.groups == published.groups
    assert read.facts == published.facts
    assert read.cpu == published.cpu
    assert (read.os, read.arch, read.g_key, read.managed, read.cpu_cores) == (
        "linux",
        "amd64",
        "intel-xeon-platinum-8480",
        True,
        224,
    )
    assert status["display"] == "nvidia-h100-80gb-hbm3 5/8"


def test_the_named_counts_serve_when_the_packed_list_is_absent():
    published = summarize_devices(parse_spec("node-h100", h100_node(3, [MIG_3G_ON_GPU0])))
    status = copy.deepcopy(summary_status(published))
    for row in status["groups"]:
        del row["counts"]
    assert summary_from_status("node-h100", status).groups == published.groups
