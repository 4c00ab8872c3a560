"""HAMi's scheduler extender, served to the real kube-scheduler over HTTP.

HAMi schedules vGPUs as a kube-scheduler extender (its chart's scheduler config): kube-scheduler
ignores the resources the extender manages (`ignoredByScheduler`), asks it to filter the nodes
for each Pod that asks for one of them (`filter`) and leaves the binding to it (`bind`), where
it writes the cards it chose on the Pod before binding it. The choice is the simulator's
stand-in for HAMi's rules (simulator/gpustack_sim/hami.py, `HamiScheduler`); this module only
speaks the extender protocol (k8s.io/kube-scheduler/extender/v1: its types have no JSON tags,
so the keys are the Go field names) and writes through the real API server.

Not played here: HAMi's admission webhook (its denials and its `schedulerName`): the one
kube-scheduler carries the extender, where HAMi's chart runs a second one named
`hami-scheduler` for the Pods its webhook hands it.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from e2e.api import Api
from gpustack_sim.hami import MANAGED, HamiScheduler

FILTER, BIND = "filter", "bind"


class HamiExtender:
    def __init__(self, port: int):
        self.port = port
        self.api: Api | None = None  # set once the control plane serves
        self.lock = threading.Lock()  # one decision at a time, as HAMi's own cache is locked
        verbs: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
            f"/{FILTER}": self.filter,
            f"/{BIND}": self.bind,
        }

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # http.server calls it by this name
                verb = verbs.get(self.path)
                if verb is None:
                    self.send_error(404)
                    return
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                answer = json.dumps(verb(body)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:  # kube-scheduler's log says enough
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)

    def config(self) -> dict[str, Any]:
        """The `extenders` entry of kube-scheduler's configuration, as HAMi's chart writes it
        (plain HTTP on loopback here, where the chart serves TLS on the scheduler's Pod)."""
        return {
            "urlPrefix": f"http://127.0.0.1:{self.port}",
            "filterVerb": FILTER,
            "bindVerb": BIND,
            "enableHTTPS": False,
            "weight": 1,
            "nodeCacheCapable": True,
            "httpTimeout": "30s",
            "managedResources": [{"name": name, "ignoredByScheduler": True} for name in MANAGED],
        }

    def start(self) -> None:
        threading.Thread(target=self.server.serve_forever, name="hami", daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()

    def hami(self) -> HamiScheduler:
        if self.api is None:
            raise RuntimeError("the extender was called before the control plane served")
        return HamiScheduler(self.api)  # it calls only what Api has of the simulator's client

    def filter(self, args: dict[str, Any]) -> dict[str, Any]:
        """`ExtenderArgs` → `ExtenderFilterResult`: the nodes whose cards take the Pod's
        vGPUs; the others with HAMi's reason, which a preemption could resolve."""
        pod, names = args["Pod"], args.get("NodeNames") or []
        passed: list[str] = []
        failed: dict[str, str] = {}
        with self.lock:
            hami = self.hami()
            for name in names:
                node = hami.api.get("Node", name)
                chosen = hami.choose(pod, node) if node else "node(s) not found"
                if isinstance(chosen, str):
                    failed[name] = chosen
                else:
                    passed.append(name)
        return {"NodeNames": passed, "FailedNodes": failed, "Error": ""}

    def bind(self, args: dict[str, Any]) -> dict[str, Any]:
        """`ExtenderBindingArgs` → `ExtenderBindingResult`: HAMi's choice written on the Pod,
        then the Pod bound (an error sends the Pod back to kube-scheduler's queue)."""
        name, namespace, node_name = args["PodName"], args["PodNamespace"], args["Node"]
        with self.lock:
            hami = self.hami()
            api = hami.api
            pod, node = api.get("Pod", name, namespace), api.get("Node", node_name)
            if pod is None or node is None:
                return {"Error": f"pod {namespace}/{name} or node {node_name} is gone"}
            chosen = hami.choose(pod, node)
            if isinstance(chosen, str):
                return {"Error": chosen}
            hami.bind(pod, chosen)
            try:
                api.resource("Pod").patch(
                    name=name,
                    namespace=namespace,
                    body={"metadata": {"annotations": pod["metadata"]["annotations"]}},
                    content_type="application/merge-patch+json",
                )
                api.bind(name, namespace, node_name)
            except Exception as error:  # the API server's refusal, handed to kube-scheduler
                return {"Error": f"{type(error).__name__}: {error}"}
        return {"Error": ""}
