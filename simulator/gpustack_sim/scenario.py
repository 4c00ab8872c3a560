"""Scenarios: a cluster to start from, then steps of literal kubectl commands, each followed by
the tables `kubectl get` prints once the cluster has settled.

```yaml
apply: [devices.yaml, nodes.yaml, catalog.yaml]   # the cluster to start from (relative paths)
steps:
- title: 3. Requesting a logical sliced GPU
  run:                                           # kubectl, as a user types it
  - kubectl apply -f instance-sliced-demo.yaml
  - kubectl -n default patch instance custom-demo --type=merge -p '{"spec":{"stop":false}}'
  - kubectl patch devices node-a10g --type=json -p '[{"op":"add","path":"/spec/managed","value":false}]'
  - kubectl delete instance sliced-demo -n default
  show: [InstanceType, Instance]                 # what to print after the step settles
```

`kubectl apply -f`, `patch` (`--type=merge` or `--type=json`; `-p`; `--subresource=status`) and
`delete` are understood, with `-n/--namespace` anywhere; kinds by kind, plural, singular or short
name. `sleep SECONDS` lets time pass for the stand-ins that keep it (node lifecycle). Every write
goes through the simulated API server as kubectl sends it, with Strict field validation
(kubectl's default): an unknown or duplicate field, or anything else a real API server refuses,
fails the step with the API server's message. After an Instance table, the reason of every
Instance not Ready is printed too.

What a scenario gets wrong is a `ScenarioError` that names the file and line to fix (the
scenario's, or the applied file's and the field's), says what is wrong, and what to do: a key
the format does not know (`stpes:`, `shwo:`) is refused with the keys it knows, rather than
playing nothing.
"""

from __future__ import annotations

import difflib
import json
import shlex
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from functions import documents
from functions.documents import Document, DocumentError
from gpustack_sim.apiserver import ALREADY_EXISTS, BAD_REQUEST, NOT_FOUND, STRICT, Refused
from gpustack_sim.schemas import Schemas
from gpustack_sim.validation import fields_at
from gpustack_sim.world import World

# Kinds a scenario may name that no XRD of ours defines: kind → (plural, short names).
KNOWN_KINDS = {
    "Pod": ("pods", ("po",)),
    "Node": ("nodes", ("no",)),
    "Namespace": ("namespaces", ("ns",)),
    "NodeFeature": ("nodefeatures", ()),
    "ResourceFlavor": ("resourceflavors", ()),
    "ClusterQueue": ("clusterqueues", ("cq",)),
    "LocalQueue": ("localqueues", ("lq",)),
    "Workload": ("workloads", ("wl",)),
    "PersistentVolumeClaim": ("persistentvolumeclaims", ("pvc",)),
    "Secret": ("secrets", ()),
    "VirtualMachineInstance": ("virtualmachineinstances", ("vmi", "vmis")),
}
SETTLED_PHASES = ("Ready", "Stopped", "Succeeded")
SCENARIO_KEYS = ("apply", "steps")
STEP_KEYS = ("title", "run", "show")


class ScenarioError(Exception):
    """What is wrong with a scenario, where (file and line), and what to do about it."""

    def __init__(
        self, message: str, file: Path | str | None = None, line: int | None = None, hint: str = ""
    ):
        self.message, self.file, self.line, self.hint = message, file, line, hint
        where = f"{shown_path(file)}:{line}" if file and line else shown_path(file) if file else ""
        text = f"{where}: {message}" if where else message
        super().__init__(f"{text} — {hint}" if hint else text)


def shown_path(path: Path | str | None) -> str:
    """A path as the user can use it: relative to the working directory where it is below it."""
    if path is None:
        return ""
    path = Path(path)
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


# --- the plan: what the scenario file says --------------------------------------------------


@dataclass(frozen=True)
class Step:
    index: int
    title: str
    run: tuple[str, ...]
    show: tuple[str, ...]


@dataclass(frozen=True)
class Plan:
    document: Document
    apply: tuple[str, ...]
    steps: tuple[Step, ...]

    @property
    def base(self) -> Path:
        return self.document.file.parent

    def line(self, path: str) -> int:
        """The scenario file's line of one of its entries (`steps[2].run[0]`)."""
        return documents.line_of(self.document, path)

    def error(self, path: str, message: str, hint: str = "") -> ScenarioError:
        return ScenarioError(message, self.document.file, self.line(path), hint)


def read_plan(scenario: Path) -> Plan:
    """The scenario file, every key checked before anything is played."""
    try:
        [document] = documents.load_all(scenario) or [Document(None, Path(scenario), 1, 0)]
    except DocumentError as error:
        raise _from_document_error(error) from None
    except ValueError:
        raise ScenarioError(
            "holds more than one YAML document; a scenario is one",
            scenario,
            1,
            "remove the `---` separators",
        ) from None
    plan = Plan(document, (), ())
    body = document.obj
    if not isinstance(body, dict):
        raise plan.error(
            "",
            "a scenario is a mapping with `apply:` and `steps:`",
            "see docs/scenarios.md for the format",
        )
    _known_keys(plan, body, "", SCENARIO_KEYS, "the scenario")
    apply = _strings(plan, body.get("apply", []), "apply", "file names, relative to the scenario")
    steps_list = body.get("steps", [])
    if not isinstance(steps_list, list):
        raise plan.error("steps", "`steps:` must be a list of steps", "start each with `- title:`")
    steps = tuple(_step(plan, index, step) for index, step in enumerate(steps_list))
    return Plan(document, apply, steps)


def _step(plan: Plan, index: int, step: Any) -> Step:
    where = f"steps[{index}]"
    if not isinstance(step, dict):
        raise plan.error(
            where, "a step is a mapping", "write it as `- title: …` with `run:` and `show:`"
        )
    _known_keys(plan, step, where, STEP_KEYS, "a step")
    title = step.get("title")
    if not isinstance(title, str) or not title:
        raise plan.error(where, "a step needs a `title:`", "name what the step shows")
    run = _strings(plan, step.get("run", []), f"{where}.run", "kubectl commands, one an item")
    show = _strings(
        plan, step.get("show", []), f"{where}.show", "kinds, as `kubectl get` takes them"
    )
    return Step(index, title, run, show)


def _known_keys(
    plan: Plan, body: Mapping[str, Any], where: str, known: Sequence[str], what: str
) -> None:
    for key in body:
        if key not in known:
            path = f"{where}.{key}" if where else str(key)
            hint = f"{what} takes: {', '.join(known)}"
            close = difflib.get_close_matches(str(key), known, n=1)
            hint = f'did you mean "{close[0]}"? {hint}' if close else hint
            raise plan.error(path, f'unknown key "{key}" in {what}', hint)


def _strings(plan: Plan, value: Any, where: str, what: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise plan.error(
            where, f"`{where.rpartition('.')[2]}:` must be a list of strings", f"give {what}"
        )
    return tuple(value)


# --- playing it -----------------------------------------------------------------------------


def play(
    scenario: Path, run: Callable[..., Any] | None = None, dump_to: Path | None = None
) -> Iterator[str]:
    """Play a scenario file step by step, yielding what each step prints."""
    plan = read_plan(scenario)
    world = World(run) if run is not None else World()
    kubectl = Kubectl(world, plan.base)
    for step in plan.steps:
        _check_kinds(plan, step, kubectl)
    for index, name in enumerate(plan.apply):
        try:
            kubectl.apply_file(name)
        except CommandError as error:
            raise error.located(plan, f"apply[{index}]", "apply") from error
    world.reconcile()
    for number, step in enumerate(plan.steps, start=1):
        for index, command in enumerate(step.run):
            try:
                kubectl.run(command)
            except CommandError as error:
                context = f"step {step.title!r}: {command}"
                raise error.located(plan, f"steps[{step.index}].run[{index}]", context) from error
        world.reconcile()
        if dump_to is not None:
            dump(world, dump_to / f"{number:02d}")
        yield "\n".join(shown(world, step, kubectl.kinds))


def _check_kinds(plan: Plan, step: Step, kubectl: Kubectl) -> None:
    for index, word in enumerate(step.show):
        if word.lower() not in kubectl.kinds:
            raise plan.error(
                f"steps[{step.index}].show[{index}]",
                f'the server doesn\'t have a resource type "{word}"',
                _suggest(word.lower(), kubectl.kinds, "a kind, plural or short name"),
            )


def shown(world: World, step: Step, kinds: Mapping[str, str]) -> list[str]:
    lines = [f"== {step.title}"]
    for word in step.show:
        kind = kinds.get(word.lower(), word)
        lines += [f"$ kubectl get {word.lower()}", world.table(kind), ""]
        if kind == "Instance":
            lines += reasons(world)
    return lines


def reasons(world: World) -> list[str]:
    """Why each Instance that is not settled is where it is: its phase message."""
    lines = []
    for instance in world.store.list("Instance"):  # only read: not handed out for editing
        status = instance.get("status") or {}
        if status.get("phase") not in SETTLED_PHASES and status.get("phaseMessage"):
            name = instance["metadata"]["name"]
            lines += [
                f"$ kubectl get instance {name} -o jsonpath='{{.status.phaseMessage}}'",
                status["phaseMessage"],
                "",
            ]
    return lines


def dump(world: World, directory: Path) -> None:
    """Every object of the settled cluster, one file per kind (for `kubectl gpustack -f`)."""
    directory.mkdir(parents=True, exist_ok=True)
    for kind in sorted({key.kind for key in world.store}):
        found = world.store.list(kind)  # only read: not handed out for editing
        text = "".join("---\n" + yaml.safe_dump(obj, sort_keys=True) for obj in found)
        (directory / f"{kind}.yaml").write_text(text)


# --- kubectl ------------------------------------------------------------------------------------


class CommandError(Exception):
    """A command that failed: why, what to do, and, where a file it read is at fault, where."""

    def __init__(
        self, message: str, hint: str = "", file: Path | None = None, line: int | None = None
    ):
        super().__init__(message)
        self.message, self.hint, self.file, self.line = message, hint, file, line

    def located(self, plan: Plan, entry: str, context: str) -> ScenarioError:
        """As a ScenarioError: at the applied file's line where one is at fault, else at the
        scenario's entry that ran the command."""
        message = f"{context}: {self.message}"
        if self.file is not None and self.line is not None:
            return ScenarioError(message, self.file, self.line, self.hint)
        return ScenarioError(message, plan.document.file, plan.line(entry), self.hint)


class Kubectl:
    """The few kubectl commands a scenario types, against the simulated API server, as kubectl
    sends them: with Strict field validation."""

    def __init__(self, world: World, base: Path):
        self.world = world
        self.base = base
        self.kinds = _kind_names(world)

    def run(self, command: str) -> None:
        try:
            words = shlex.split(command)
        except ValueError as error:
            raise CommandError(f"cannot be split into words: {error}", "close the quote") from None
        if words[:1] == ["sleep"]:
            return self._sleep(words[1:])
        if words[:1] != ["kubectl"]:
            raise CommandError(
                "a step runs kubectl commands (and `sleep SECONDS`) only",
                "start the command with `kubectl`",
            )
        args, options = _parse(words[1:])
        verb, *rest = args or [""]
        namespace = options.get("namespace", "")
        if verb == "apply":
            if not options["filename"]:
                raise CommandError("kubectl apply needs -f FILE", "name the file to apply")
            for path in options["filename"]:
                self.apply_file(path)
        elif verb == "delete":
            kind, name = self._target(rest)
            self._write(lambda: self.world.delete(kind, name, self._namespace(kind, namespace)))
        elif verb == "patch":
            kind, name = self._target(rest)
            self._patch(kind, name, self._namespace(kind, namespace), options)
        else:
            raise CommandError(
                f"kubectl {verb} is not something a scenario can run",
                "a scenario runs kubectl apply, patch and delete",
            )

    def apply_file(self, name: str) -> None:
        """`kubectl apply -f FILE`: each object of the file, in order; an object given with a
        status is a cluster already in that state."""
        path = self.base / name
        try:
            found = documents.objects(path)
        except DocumentError as error:
            raise _command_error(error, self.base) from None
        for document in found:
            exists = self._exists(document.obj)
            try:
                self.world.apply(
                    document.obj, field_validation=STRICT, duplicates=document.duplicates
                )
            except Refused as refused:
                raise self._refused(
                    refused, document, "patching" if exists else "creating"
                ) from None

    def _exists(self, obj: Mapping[str, Any]) -> bool:
        metadata = obj.get("metadata") or {}
        if not isinstance(metadata, Mapping) or not obj.get("kind") or not metadata.get("name"):
            return False
        found = self.world.get(
            str(obj["kind"]), str(metadata["name"]), str(metadata.get("namespace", ""))
        )
        return found is not None

    def _refused(self, refused: Refused, document: Document, verb: str) -> CommandError:
        """kubectl's words for a refused object of a file."""
        message = f'Error from server ({refused.reason}): error when {verb} "{document.file.name}": {refused}'
        path = refused.paths[0] if refused.paths else ""
        line = documents.line_of(document, path) if path else document.line
        hint = _hint(refused, document, path, self.world.api.schemas)
        return CommandError(message, hint, document.file, line)

    def _sleep(self, words: list[str]) -> None:
        try:
            [seconds] = [float(word) for word in words]
        except ValueError:
            raise CommandError("sleep takes one number of seconds", "write `sleep 300`") from None
        for controller in self.world.controllers:
            getattr(controller, "sleep", lambda seconds: None)(seconds)

    def _patch(self, kind: str, name: str, namespace: str, options: dict[str, Any]) -> None:
        if "patch" not in options:
            raise CommandError("kubectl patch needs -p PATCH", "give the patch as JSON after -p")
        try:
            patch, duplicates = _json_with_duplicates(options["patch"])
        except json.JSONDecodeError as error:
            raise CommandError(
                f"the patch is not JSON: {error}",
                "quote it in single quotes, its strings in double quotes",
            ) from None
        subresource, kind_of_patch = (
            options.get("subresource", ""),
            options.get("type", "strategic"),
        )
        api = self.world.api
        if kind_of_patch == "json":
            self._write(
                lambda: api.json_patch(
                    kind, name, patch, namespace, subresource, field_validation=STRICT
                )
            )
        elif kind_of_patch in ("merge", "strategic"):  # a strategic merge is the same here
            self._write(
                lambda: api.merge_patch(
                    kind,
                    name,
                    patch,
                    namespace,
                    subresource,
                    field_validation=STRICT,
                    duplicates=duplicates,
                )
            )
        else:
            raise CommandError(
                f"--type={kind_of_patch} is not a patch type", "use --type=merge or --type=json"
            )

    def _write(self, write: Callable[[], Any]) -> None:
        try:
            write()
        except Refused as refused:
            path = refused.paths[0] if refused.paths else ""
            hint = _hint(refused, None, path, self.world.api.schemas)
            raise CommandError(f"Error from server ({refused.reason}): {refused}", hint) from None

    def _target(self, rest: list[str]) -> tuple[str, str]:
        if len(rest) == 1 and "/" in rest[0]:
            rest = rest[0].split("/", 1)
        if len(rest) != 2:
            raise CommandError(
                "name the object as KIND NAME or KIND/NAME", "e.g. `instance sliced-demo`"
            )
        kind_word, name = rest
        if kind_word.lower() not in self.kinds:
            raise CommandError(
                f'the server doesn\'t have a resource type "{kind_word}"',
                _suggest(kind_word.lower(), self.kinds, "a kind, plural or short name"),
            )
        return self.kinds[kind_word.lower()], name

    def _namespace(self, kind: str, given: str) -> str:
        namespaced = kind in self.world.crossplane.namespaced_kinds() or kind in _NAMESPACED
        return (given or "default") if namespaced else ""


_NAMESPACED = {
    "Pod",
    "NodeFeature",
    "LocalQueue",
    "Workload",
    "PersistentVolumeClaim",
    "Secret",
    "VirtualMachineInstance",
}


def _hint(refused: Refused, document: Document | None, path: str, schemas: Schemas) -> str:
    """What to do about a refusal: for an unknown field, the field it was most likely meant to
    be (or those there are)."""
    where = f" in {document.file.name}" if document else ""
    if refused.reason == BAD_REQUEST and path and path in refused.fields:
        if path in refused.fields[: refused.duplicates]:
            return f"give {path} once{where}"
        parent, _, name = path.rpartition(".")
        kind = schemas.lookup(refused.api_version, refused.kind) if refused.kind else None
        declared = fields_at(kind, parent) if kind else []
        if declared:
            return _suggest(name, declared, f"the fields of {parent or 'the object'}")
        return f"remove {path}{where}, or correct its name"
    if refused.reason == ALREADY_EXISTS:
        return "it exists already: patch it, or delete it first"
    if refused.reason == NOT_FOUND:
        return "check the kind, name and namespace (-n)"
    return f"correct {path or 'the object'}{where} and play the scenario again"


def _suggest(word: str, choices: Mapping[str, Any] | Sequence[str], what: str) -> str:
    names = sorted(choices)
    close = difflib.get_close_matches(word, names, n=1)
    if close:
        return f'did you mean "{close[0]}"?'
    shown = ", ".join(names[:12]) + (", …" if len(names) > 12 else "")
    return f"{what}: {shown}"


class _Twice(dict):
    """A JSON object as parsed, with the keys it gave more than once (the last value kept)."""

    twice: tuple[str, ...] = ()


def _object(pairs: list[tuple[str, Any]]) -> _Twice:
    found = _Twice(pairs)
    keys = [key for key, _ in pairs]
    found.twice = tuple(dict.fromkeys(k for i, k in enumerate(keys) if k in keys[:i]))
    return found


def _json_with_duplicates(text: str) -> tuple[Any, list[str]]:
    """The JSON value as plain dicts and lists, and the paths of the keys it gives twice, as
    kube-apiserver names them (`spec.ports[0].port`)."""
    duplicates: list[str] = []

    def plain(value: Any, path: str) -> Any:
        if isinstance(value, dict):
            for key in getattr(value, "twice", ()):
                duplicates.append(f"{path}.{key}" if path else key)
            return {k: plain(v, f"{path}.{k}" if path else k) for k, v in value.items()}
        if isinstance(value, list):
            return [plain(item, f"{path}[{i}]") for i, item in enumerate(value)]
        return value

    return plain(json.loads(text, object_pairs_hook=_object), ""), duplicates


def _command_error(error: DocumentError, base: Path) -> CommandError:
    if error.line is None:  # the file itself: said at the scenario's line that names it
        folder = shown_path(base)
        folder = "the working directory" if folder == "." else folder
        message = f"{shown_path(error.file)}: {error.message}"
        return CommandError(message, f"paths are relative to the scenario's folder, {folder}")
    return CommandError(error.message, error.hint, Path(error.file), error.line)


def _from_document_error(error: DocumentError) -> ScenarioError:
    return ScenarioError(error.message, error.file, error.line, error.hint)


def _kind_names(world: World) -> dict[str, str]:
    names: dict[str, str] = {}
    for kind, (plural, short) in KNOWN_KINDS.items():
        for word in (kind.lower(), plural, *short):
            names[word] = kind
    for kind, xrd in world.crossplane.xrds.items():
        spec = xrd["spec"]["names"]
        for word in (
            kind.lower(),
            spec["plural"],
            spec.get("singular", ""),
            *spec.get("shortNames", []),
        ):
            if word:
                names[word] = kind
    return names


def _parse(words: list[str]) -> tuple[list[str], dict[str, Any]]:
    """kubectl's arguments and the options a scenario uses (`-n`, `-f`, `-p`, `--type`)."""
    aliases = {"-n": "namespace", "-f": "filename", "-p": "patch", "--type": "type"}
    aliases |= {"--namespace": "namespace", "--filename": "filename", "--patch": "patch"}
    aliases["--subresource"] = "subresource"
    args: list[str] = []
    options: dict[str, Any] = {"filename": []}
    words = list(words)
    while words:
        word = words.pop(0)
        flag, eq, value = word.partition("=")
        if flag in aliases:
            if not eq and not words:
                raise CommandError(f"{flag} needs a value", f"write {flag} VALUE")
            value = value if eq else words.pop(0)
            if aliases[flag] == "filename":
                options["filename"].append(value)
            else:
                options[aliases[flag]] = value
        else:
            args.append(word)
    return args, options
