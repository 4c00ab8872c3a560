"""`make schemas` (tools/schemas.py) fetches every upstream schema the tests read, each checked
against its pinned sha256, into a cache laid out as ../shared/schemas is — subfolders included —
so a machine without ../shared runs the same validation. Run here without the internet: the
download is played from the schema directory itself."""

from __future__ import annotations

import hashlib
import io
import urllib.error

import pytest

from gpustack_sim import schemas as found_schemas
from tests.support.schemas import require_schemas
from tools import schemas


def schema_files() -> list[str]:
    root = require_schemas()
    return sorted(
        str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and p.name != "SOURCES.md"
    )


def test_every_schema_file_the_tests_read_has_a_pinned_download():
    rows = {row["file"]: row for row in schemas.rows()}
    assert sorted(rows) == schema_files()
    root = require_schemas()
    for name, row in rows.items():
        if name not in schemas.EXTRACT:  # an extraction is ours, not upstream's bytes
            assert hashlib.sha256((root / name).read_bytes()).hexdigest() == row["sha"], name


def test_the_crossplane_1x_crds_come_from_the_release_tags():
    rows = {row["file"]: row["url"] for row in schemas.rows()}
    tags = {  # the commit each release tag points to (crossplane/crossplane)
        "v1.17.0": "0e973c9fabe336bf7a82abb0752869d27abadabc",
        "v1.20.0": "2efdb03ae80fc27f4b6b9b0cebc96a462233cf17",
    }
    for name, url in rows.items():
        if name.startswith("crossplane-1.x/"):
            tag, _, crd = name.removeprefix("crossplane-1.x/").partition("_")
            assert url == (
                f"https://raw.githubusercontent.com/crossplane/crossplane/{tags[tag]}/cluster/crds/{crd}"
            )


def served_from(root):
    by_url = {row["url"]: root / row["file"] for row in schemas.rows()}

    def urlopen(url, timeout):
        return io.BytesIO(by_url[url].read_bytes())

    return urlopen


def test_make_schemas_lays_the_cache_out_as_the_schema_directory(tmp_path, monkeypatch, capsys):
    root = require_schemas()
    monkeypatch.setattr(schemas, "CACHE", tmp_path / "cache")
    monkeypatch.setattr(schemas.urllib.request, "urlopen", served_from(root))
    assert schemas.main() == 0
    cached = sorted(
        str(p.relative_to(tmp_path / "cache"))
        for p in (tmp_path / "cache").rglob("*")
        if p.is_file() and p.name != "SOURCES.md"
    )
    assert cached == schema_files()
    for name in cached:
        if name not in schemas.EXTRACT:
            assert (tmp_path / "cache" / name).read_bytes() == (root / name).read_bytes()
    # ... and the tests find it there when nothing else is set
    monkeypatch.setattr(found_schemas, "ROOT", tmp_path / "checkout")
    monkeypatch.setenv("GPUSTACK_SCHEMAS", str(tmp_path / "cache"))
    assert found_schemas.schema_dir() == tmp_path / "cache"
    assert (
        "fetched crossplane-1.x/v1.17.0_pkg.crossplane.io_functions.yaml" in capsys.readouterr().out
    )


def test_a_download_that_fails_names_the_file_and_its_url(tmp_path, monkeypatch, capsys):
    def unreachable(url, timeout):
        raise urllib.error.URLError("Temporary failure in name resolution")

    monkeypatch.setattr(schemas, "CACHE", tmp_path / "cache")
    monkeypatch.setattr(schemas.urllib.request, "urlopen", unreachable)
    assert schemas.main() == 1
    [line] = capsys.readouterr().err.splitlines()
    first = schemas.rows()[0]
    assert line == (
        f"{first['file']}: cannot fetch {first['url']}: "
        "<urlopen error Temporary failure in name resolution>"
    )


def test_a_file_that_does_not_match_its_pin_is_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(schemas, "CACHE", tmp_path / "cache")
    monkeypatch.setattr(schemas.urllib.request, "urlopen", lambda url, timeout: io.BytesIO(b"x"))
    assert schemas.main() == 1
    first = schemas.rows()[0]
    assert capsys.readouterr().err.startswith(f"{first['file']}: sha256 ")
    assert not (tmp_path / "cache" / first["file"]).exists()


@pytest.fixture(autouse=True)
def _no_network(monkeypatch):
    """Nothing here reaches the internet, whatever a test forgets to replace."""

    def refused(*args, **kwargs):
        raise AssertionError("tests/test_schemas_tool.py must not download")

    monkeypatch.setattr(schemas.urllib.request, "urlopen", refused)
