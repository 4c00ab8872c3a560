"""YAML files as users write them: read fast, and wrong ones answered with file and line.

Every command that reads a user's YAML (simulate, render, demo) reads it here, so that:
- libyaml's parser does the scanning where PyYAML was built with it (`CSafeLoader`, ten times
  the pure-Python `SafeLoader`); the result is the same safe load either way;
- a key given twice in one mapping is recorded (`Document.duplicates`, as paths like
  `spec.ports[0].port`), for the simulated API server to refuse as kube-apiserver's strict
  field validation does; the load itself keeps the last value, as a lenient decoder would;
- a syntax error is a `DocumentError` naming the file, the line and the column, instead of
  PyYAML's trace ending `in "<unicode string>"`;
- a field's line can be found afterwards (`line_of`), for an error that names a field: the
  file is composed again only then, so the fast path keeps no marks;
- files that change rarely and are read by every run — the XRDs, the Compositions, the
  upstream CRDs (2.5 MB of them) — are parsed once per version of the file (`shipped`): the
  parse is kept, as marshal, in the user's cache directory, keyed by the file's path, size and
  modification time, and by the Python that wrote it. A cache that cannot be read or written
  is no error: the file is parsed.
"""

from __future__ import annotations

import hashlib
import marshal
import os
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

_BASE: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class DocumentError(ValueError):
    """A file that cannot be read as YAML objects: where, what is wrong, what to do."""

    def __init__(self, file: Path | str, line: int | None, message: str, hint: str = ""):
        self.file, self.line, self.message, self.hint = str(file), line, message, hint
        where = f"{self.file}:{line}" if line else self.file
        super().__init__(f"{where}: {message}" + (f" — {hint}" if hint else ""))


@dataclass(frozen=True)
class Document:
    """One YAML document of a file: the object, where it starts, and its duplicate keys."""

    obj: Any
    file: Path
    line: int  # 1-based line where the document's content starts
    index: int  # its position among the file's documents, empty ones counted
    duplicates: tuple[str, ...] = field(default=())


class _Loader(_BASE):  # type: ignore[misc, valid-type]
    """The safe loader, noting each mapping that holds a key twice (the last value stays)."""

    def __init__(self, stream: str):
        super().__init__(stream)
        self.repeated: list[tuple[yaml.MappingNode, str]] = []

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
            if key is not None and key in seen and key != "<<":
                self.repeated.append((node, key))
            seen.add(key)
        return super().construct_mapping(node, deep)


def read_text(path: Path) -> str:
    try:
        return Path(path).read_text()
    except FileNotFoundError:
        raise DocumentError(path, None, "no such file", "check the path") from None
    except IsADirectoryError:
        raise DocumentError(path, None, "is a directory, not a file") from None
    except (OSError, UnicodeDecodeError) as error:
        raise DocumentError(path, None, f"cannot be read: {error}") from None


def load_all(path: Path) -> list[Document]:
    """Every non-empty document of a YAML file, in order."""
    text = read_text(path)
    loader = _Loader(text)
    found = []
    try:
        index = 0
        while loader.check_node():
            node = loader.get_node()
            loader.repeated.clear()
            obj = loader.construct_document(node)
            if obj is not None:
                duplicates = tuple(_duplicate_paths(node, loader.repeated))
                found.append(Document(obj, Path(path), node.start_mark.line + 1, index, duplicates))
            index += 1
    except yaml.MarkedYAMLError as error:
        raise _syntax_error(path, error) from None
    except yaml.YAMLError as error:
        raise DocumentError(path, None, f"not YAML: {error}") from None
    finally:
        loader.dispose()
    return found


def load(path: Path) -> Any:
    """The one document of a file (None when it is empty)."""
    documents = load_all(path)
    if len(documents) > 1:
        raise DocumentError(
            path, documents[1].line, "a second YAML document: this file holds one", "remove it"
        )
    return documents[0].obj if documents else None


def objects(path: Path) -> list[Document]:
    """The Kubernetes objects of a file: each document must be a mapping."""
    documents = load_all(path)
    for document in documents:
        if not isinstance(document.obj, dict):
            kind = type(document.obj).__name__
            raise DocumentError(
                path,
                document.line,
                f"a document here is a {kind}, not an object",
                "each document is one Kubernetes object: a mapping with apiVersion and kind",
            )
    return documents


def shipped(path: Path) -> list[Any]:
    """The non-empty documents of a file that changes rarely, parsed once per version of it."""
    path = Path(path)
    try:
        stat = path.stat()
    except OSError:
        return [document.obj for document in load_all(path) if document.obj]
    made_by = f"{sys.version_info[:2]}-{marshal.version}-{yaml.__version__}"
    identity = f"{made_by}\0{path.resolve()}\0{stat.st_size}\0{stat.st_mtime_ns}"
    kept = cache_dir() / f"{hashlib.sha256(identity.encode()).hexdigest()}.marshal"
    try:
        return list(marshal.loads(kept.read_bytes()))
    except (OSError, EOFError, ValueError, TypeError):
        pass
    found = [document.obj for document in load_all(path) if document.obj]
    try:
        kept.parent.mkdir(parents=True, exist_ok=True)
        partial = kept.with_name(f"{kept.name}.{os.getpid()}")
        partial.write_bytes(marshal.dumps(found))
        os.replace(partial, kept)  # whole or not at all, for a reader beside it
    except (OSError, ValueError):  # read-only home, or a value marshal cannot keep
        pass
    return found


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "function-gpustack" / "parsed"


def _syntax_error(path: Path, error: yaml.MarkedYAMLError) -> DocumentError:
    mark = error.problem_mark or error.context_mark
    words = f"{error.problem} ({error.context})" if error.context else str(error.problem or "")
    where = f"column {mark.column + 1}: " if mark is not None else ""
    line = mark.line + 1 if mark else None
    return DocumentError(path, line, f"{where}{words or error}", "fix the YAML there")


# --- paths: where a field is -------------------------------------------------------------------

_PART = re.compile(r"([^.\[\]]+)|\[([^\]]*)\]")


def _duplicate_paths(
    root: yaml.Node, repeated: list[tuple[yaml.MappingNode, str]]
) -> Iterator[str]:
    """The path of each repeated key, as kube-apiserver names it (`spec.ports[0].port`)."""
    if not repeated:
        return
    paths = {id(node): path for node, path in _walk(root, "")}
    for node, key in repeated:
        parent = paths.get(id(node), "")
        yield f"{parent}.{key}" if parent else key


def _walk(node: yaml.Node, path: str) -> Iterator[tuple[yaml.Node, str]]:
    yield node, path
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode):
                yield from _walk(value, f"{path}.{key.value}" if path else key.value)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            yield from _walk(item, f"{path}[{index}]")


def line_of(document: Document, path: str) -> int:
    """The line of the field at `path` (`spec.volumes[0].name`; `metadata.labels[a/b]`) in
    the document, or of the nearest field above it that is there; the document's own line
    when none is."""
    try:
        nodes = list(yaml.compose_all(read_text(document.file), Loader=_BASE))
    except (yaml.YAMLError, DocumentError):
        return document.line
    if document.index >= len(nodes) or nodes[document.index] is None:
        return document.line
    node, line = nodes[document.index], document.line
    for plain, bracketed in _PART.findall(path):
        found = _child(node, plain or bracketed, bool(bracketed))
        if found is None:
            break
        line, node = found
    return line


def _child(node: yaml.Node, part: str, bracketed: bool) -> tuple[int, yaml.Node] | None:
    """The line where the child starts (a key's own line) and its value."""
    if isinstance(node, yaml.SequenceNode) and bracketed and part.isdigit():
        index = int(part)
        if index < len(node.value):
            return node.value[index].start_mark.line + 1, node.value[index]
    if isinstance(node, yaml.MappingNode):
        found = [(k, v) for k, v in node.value if getattr(k, "value", None) == part]
        if found:
            key, value = found[-1]
            return key.start_mark.line + 1, value
    return None
