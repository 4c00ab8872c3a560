"""The README and docs/ are read without anything outside the repository: no page sends a reader
to the design notes, the seed documents or the operator's contract the project was built from,
and every relative link resolves inside the checkout. What the project differs from
gpustack-operator in is said in the pages' own words (docs/decisions.md)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.schemas import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
OUTSIDE = re.compile(
    r"DESIGN(?:\.md| §)|\bseeds? ?`?0\d\d\b|\(seed\b|\bthe seed\b|\bseed's\b"
    r"|\breference §|\bthe reference\b|\breference's\b|recorded walkthrough"
    r"|\boperator(?:'s)? contract\b|gpustack-operator-contract|crossplane-functions\.md"
    r"|shared/reference",
    re.IGNORECASE,  # "The seed warns …" at the start of a sentence
)
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def findings(page: Path) -> list[str]:
    found = []
    for number, line in enumerate(page.read_text().splitlines(), start=1):
        found += [f"{number}: {m[0]!r}" for m in OUTSIDE.finditer(line)]
        for target in LINK.findall(line):
            if re.match(r"^[a-z]+:", target):
                continue  # a URL: the user-facing references (Kubernetes, Kueue, Crossplane)
            resolved = (page.parent / target).resolve()
            if not resolved.is_relative_to(ROOT) or not resolved.exists():
                found.append(f"{number}: link {target} leads outside the checkout or nowhere")
    return found


def test_no_page_sends_a_reader_outside_the_repository():
    unexpected = {str(page.relative_to(ROOT)): found for page in PAGES if (found := findings(page))}
    assert unexpected == {}
