"""Least privilege: every grant of the shipped RBAC is one the code uses, and every use granted.

- Crossplane's aggregated ClusterRole (compositions/rbac/clusterrole.yaml) against the kinds the
  handlers compose and require, read from their source (functions/handlers/): each object
  literal `{"apiVersion": apis.X, "kind": "K", ...}` is a kind composed, each
  `Requirement(apis.X, "K", ...)` one required. The source, not a run, so a branch no example
  takes counts too; a run of every example's kinds through the simulated Crossplane checks the
  reading misses none. A composed kind takes COMPOSE, a required one READ. The kinds of the
  package's own XRDs are left out: Crossplane's RBAC manager grants those itself.
- The agent's ClusterRole (compositions/agent/rbac.yaml) against the requests its real client
  (functions/agent/agent.py `KubernetesApi`) sends for each call of the agent's `Kube`
  protocol, turned into RBAC attributes as kube-apiserver's request-info resolver does.
"""

from __future__ import annotations

import ast
import functools
import http.server
import json
import threading
import urllib.parse
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from functions.core import apis
from gpustack_sim import schemas as simulated
from tests.support.schemas import ROOT, documents, require_schemas

HANDLERS = ROOT / "functions" / "handlers"
CROSSPLANE_ROLE = ROOT / "compositions" / "rbac" / "clusterrole.yaml"
AGENT_ROLE = ROOT / "compositions" / "agent" / "rbac.yaml"
XRDS = ROOT / "compositions" / "xrds"

# What Crossplane does to a kind it composes: server-side apply (patch; create while the object
# does not exist), update, get, the list and watch of its composed-resource informers, and
# delete for what is no longer desired. To a kind it only fetches as a required resource: read.
COMPOSE = frozenset({"get", "list", "watch", "create", "update", "patch", "delete"})
READ = frozenset({"get", "list", "watch"})

# Object literals whose apiVersion and kind are not constants, each with why they need no grant
# of their own: the handler passes on an object it observed, of a kind it composes by name.
COPIES = {
    "functions/handlers/instance/vm.py:as_observed": "a VMI or a Secret, which vm.py composes",
}


@dataclass(frozen=True, order=True)
class Use:
    api_version: str
    kind: str
    how: str  # "composes" | "requires"
    where: str  # file:function


@dataclass(frozen=True, order=True)
class Grant:
    group: str
    resource: str
    verb: str

    def __str__(self) -> str:
        return f"{self.verb} {self.resource}" + (f".{self.group}" if self.group else "")


# --- what the handlers compose and require, from their source ---------------------------------


def constant(node: ast.expr | None) -> str | None:
    """A string the source states: a literal, or a constant of functions/core/apis.py."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "apis"
    ):
        value = getattr(apis, node.attr, None)
        return value if isinstance(value, str) else None
    return None


def argument(call: ast.Call, position: int, keyword: str) -> ast.expr | None:
    if len(call.args) > position:
        return call.args[position]
    return next((k.value for k in call.keywords if k.arg == keyword), None)


def is_requirement(call: ast.Call) -> bool:
    name = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")
    return name == "Requirement"


class Sites(ast.NodeVisitor):
    """Every kind a module composes or requires, and the sites it cannot read a kind at."""

    def __init__(self, file: str):
        self.file = file
        self.function = "<module>"
        self.uses: list[Use] = []
        self.unread: list[str] = []

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        outer, self.function = self.function, node.name
        self.generic_visit(node)
        self.function = outer

    def visit_Dict(self, node: ast.Dict) -> None:
        fields = {constant(k): v for k, v in zip(node.keys, node.values, strict=True) if k}
        if "apiVersion" in fields and "kind" in fields:
            self.found(constant(fields["apiVersion"]), constant(fields["kind"]), "composes")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        if is_requirement(node):
            api_version = constant(argument(node, 0, "api_version"))
            self.found(api_version, constant(argument(node, 1, "kind")), "requires")
        self.generic_visit(node)

    def found(self, api_version: str | None, kind: str | None, how: str) -> None:
        where = f"{self.file}:{self.function}"
        if api_version is None or kind is None:
            self.unread.append(where)
        else:
            self.uses.append(Use(api_version, kind, how, where))


@functools.cache
def scanned() -> tuple[tuple[Use, ...], tuple[str, ...]]:
    uses, unread = [], []
    for path in sorted(HANDLERS.rglob("*.py")):
        sites = Sites(str(path.relative_to(ROOT)))
        sites.visit(ast.parse(path.read_text(), str(path)))
        uses += sites.uses
        unread += sites.unread
    return tuple(sorted(set(uses))), tuple(sorted(set(unread)))


@functools.cache
def own_groups() -> frozenset[str]:
    return frozenset(
        doc["spec"]["group"] for path in XRDS.glob("*.yaml") for doc in documents(path)
    )


@functools.cache
def cluster() -> simulated.Schemas:
    return simulated.Schemas(require_schemas())


def resource_of(api_version: str, kind: str) -> tuple[str, str]:
    """(group, plural) as the API server serves the kind: its CRD or its built-in schema."""
    found = cluster().lookup(api_version, kind)
    assert found is not None, f"no schema for {api_version} {kind}: the plural is not known"
    return found.group, found.plural


def needed(uses: Iterable[Use]) -> set[Grant]:
    grants = set()
    for use in uses:
        if apis.group(use.api_version) in own_groups():
            continue
        group, resource = resource_of(use.api_version, use.kind)
        verbs = COMPOSE if use.how == "composes" else READ
        grants |= {Grant(group, resource, verb) for verb in verbs}
    return grants


def granted(roles: Iterable[dict[str, Any]]) -> set[Grant]:
    found = set()
    for role in roles:
        if role["kind"] != "ClusterRole":
            continue
        for rule in role["rules"]:
            assert set(rule) == {"apiGroups", "resources", "verbs"}, rule  # no names, no URLs
            assert "*" not in [*rule["apiGroups"], *rule["resources"], *rule["verbs"]], rule
            found |= {
                Grant(group, resource, verb)
                for group in rule["apiGroups"]
                for resource in rule["resources"]
                for verb in rule["verbs"]
            }
    return found


def differences(grants: set[Grant], uses: set[Grant]) -> dict[str, list[str]]:
    """What a role grants that nothing uses, and what is used but not granted."""
    return {
        "unused": sorted(str(g) for g in grants - uses),
        "missing": sorted(str(g) for g in uses - grants),
    }


NOTHING = {"unused": [], "missing": []}


def test_the_source_is_read_at_every_site_a_kind_is_named():
    uses, unread = scanned()
    assert list(unread) == sorted(COPIES)
    assert {u.how for u in uses} == {"composes", "requires"}


def test_crossplanes_role_grants_exactly_what_the_handlers_compose_and_require():
    uses, _ = scanned()
    assert differences(granted(documents(CROSSPLANE_ROLE)), needed(uses)) == NOTHING


def role_with(path: Path, *rules: dict[str, list[str]]) -> list[dict[str, Any]]:
    """The role of `path` granting these rules besides its own."""
    roles = documents(path)
    next(r for r in roles if r["kind"] == "ClusterRole")["rules"].extend(rules)
    return roles


def test_a_grant_no_handler_uses_is_found():
    """What the role granted before issue 38: Kueue's admission checks and workloads, which no
    handler reads or composes (a ClusterQueue only names its admission check)."""
    roles = role_with(
        CROSSPLANE_ROLE,
        {
            "apiGroups": ["kueue.x-k8s.io"],
            "resources": ["admissionchecks", "workloads"],
            "verbs": sorted(COMPOSE),
        },
    )
    unused = differences(granted(roles), needed(scanned()[0]))["unused"]
    assert unused == sorted(
        f"{verb} {resource}.kueue.x-k8s.io"
        for resource in ("admissionchecks", "workloads")
        for verb in COMPOSE
    )


def test_a_kind_composed_but_not_granted_is_found():
    roles = documents(CROSSPLANE_ROLE)
    for rule in roles[0]["rules"]:
        rule["resources"] = [r for r in rule["resources"] if r != "localqueues"]
    missing = differences(granted(roles), needed(scanned()[0]))["missing"]
    assert missing == sorted(f"{verb} localqueues.kueue.x-k8s.io" for verb in COMPOSE)


class Recording:
    """The simulated Crossplane's permission check, recording each (kind, verb) it is asked."""

    def __init__(self, rbac: Any):
        self.rbac = rbac
        self.asked: set[tuple[str, str, str]] = set()

    def check(self, api_version: str, kind: str, verb: str, namespace: str = "") -> None:
        self.asked.add((api_version, kind, verb))
        self.rbac.check(api_version, kind, verb, namespace)


def test_the_simulated_crossplane_asks_nothing_the_source_reading_missed():
    """A composite of every kind (the walkthrough, two Instances, GPU classes) reconciled: each
    permission the simulated Crossplane checks is one the reading of the source found."""
    from gpustack_sim import World, load_documents

    walkthrough, classes = ROOT / "examples" / "walkthrough", ROOT / "examples" / "gpuclass"
    world = World()
    recording = Recording(world.crossplane.rbac)
    world.crossplane.rbac = recording
    files = ["devices.yaml", "nodes.yaml", "namespaces.yaml", "storage.yaml", "catalog.yaml"]
    for path in [
        *(walkthrough / name for name in files),
        walkthrough / "instancepersistentvolume-datasets.yaml",
        classes / "cluster.yaml",
        classes / "classes.yaml",
        walkthrough / "instance-sliced-demo.yaml",
    ]:
        world.apply(*load_documents(path))
    world.reconcile()
    asked = set()
    for api_version, kind, verb in recording.asked:
        if apis.group(api_version) not in own_groups():
            asked.add(Grant(*resource_of(api_version, kind), verb))
    assert len({g.resource for g in asked}) >= 8  # pods, configmaps, nodefeatures, queues, ...
    assert asked - needed(scanned()[0]) == set()


def test_each_kind_of_the_role_is_named_by_its_served_plural():
    """A resource name the API server does not serve grants nothing: each is a CRD's or a
    built-in kind's plural, of its group."""
    served = {resource_of(u.api_version, u.kind) for u in scanned()[0]}
    for grant in granted(documents(CROSSPLANE_ROLE)):
        assert (grant.group, grant.resource) in served, grant


# --- what the agent's client asks of the API server -------------------------------------------


NODE = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {"name": "node-a", "uid": "5d3c1e8e-0000-4000-8000-000000000001"},
    "status": {"capacity": {"cpu": "4"}},
}
CALLS = {  # each method of the agent's Kube protocol, as the agent calls it
    "node_facts": ("node-a",),
    "pods_on": ("node-a",),
    "resource_claim": ("default", "claim-a"),
    "resource_slices": ("node-a",),
    "apply_devices": (
        {"apiVersion": apis.WORKER, "kind": "Devices", "metadata": {"name": "node-a"}},
    ),
}


@dataclass(frozen=True)
class Sent:
    method: str
    path: str
    content_type: str


def attributes(sent: Sent) -> Iterator[Grant]:
    """The RBAC attributes kube-apiserver checks for a request (its RequestInfoFactory): a GET
    of one object is a get, of a collection a list (a watch with `watch=true`); a server-side
    apply is a patch, and a create too while the object does not exist."""
    url = urllib.parse.urlsplit(sent.path)
    parts = url.path.strip("/").split("/")
    group, rest = ("", parts[2:]) if parts[0] == "api" else (parts[1], parts[3:])
    if rest[:1] == ["namespaces"] and len(rest) > 2:
        rest = rest[2:]
    resource, named = rest[0], len(rest) > 1
    query = urllib.parse.parse_qs(url.query)
    if sent.method == "GET":
        verb = "get" if named else "watch" if query.get("watch") == ["true"] else "list"
        yield Grant(group, resource, verb)
    elif sent.method == "PATCH":
        yield Grant(group, resource, "patch")
        if sent.content_type == "application/apply-patch+yaml":
            yield Grant(group, resource, "create")
    else:
        verb = {"POST": "create", "PUT": "update", "DELETE": "delete"}[sent.method]
        yield Grant(group, resource, verb)


def requests_of_the_agent() -> list[Sent]:
    """Each call of the Kube protocol through the real client, against a server that records
    the requests and answers each as kube-apiserver would."""
    import kubernetes

    from functions.agent.agent import Kube, KubernetesApi

    sent: list[Sent] = []

    class ApiServer(http.server.BaseHTTPRequestHandler):
        def answer(self, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def record(self) -> bytes:
            sent.append(Sent(self.command, self.path, self.headers.get("Content-Type", "")))
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))

        def do_GET(self) -> None:
            self.record()
            if self.path.startswith("/api/v1/nodes/"):
                self.answer(NODE)
            else:
                self.answer({"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": []})

        def do_PATCH(self) -> None:
            self.answer(yaml.safe_load(self.record()))

        def log_message(self, *args: Any) -> None:
            pass

    protocol = {name for name in vars(Kube) if not name.startswith("_")}
    assert protocol == set(CALLS), "name how the agent calls each method of its Kube protocol"
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), ApiServer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        host = f"http://127.0.0.1:{server.server_address[1]}"
        api = KubernetesApi(5, kubernetes.client.Configuration(host=host))
        for name, args in CALLS.items():
            getattr(api, name)(*args)
    finally:
        server.shutdown()
        server.server_close()
    return sent


def test_the_agents_role_grants_exactly_what_its_client_asks():
    asked = {grant for sent in requests_of_the_agent() for grant in attributes(sent)}
    assert sorted(map(str, asked)) == [
        "create devices.worker.gpustack.ai",
        "get nodes",
        "get resourceclaims.resource.k8s.io",
        "list pods",
        "list resourceslices.resource.k8s.io",
        "patch devices.worker.gpustack.ai",
    ]
    assert differences(granted(documents(AGENT_ROLE)), asked) == NOTHING


def test_a_grant_the_agent_never_uses_is_found():
    """What the role granted before issue 38: `get` on Devices and `watch` on Pods."""
    asked = {grant for sent in requests_of_the_agent() for grant in attributes(sent)}
    roles = role_with(
        AGENT_ROLE,
        {"apiGroups": ["worker.gpustack.ai"], "resources": ["devices"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["watch"]},
    )
    assert differences(granted(roles), asked)["unused"] == [
        "get devices.worker.gpustack.ai",
        "watch pods",
    ]


def test_the_agents_role_is_bound_to_its_service_account():
    [binding] = [d for d in documents(AGENT_ROLE) if d["kind"] == "ClusterRoleBinding"]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "gpustack-agent",
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "gpustack-agent", "namespace": "gpustack-system"}
    ]
