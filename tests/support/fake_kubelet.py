"""A fake kubelet pod-resources server on a real Unix socket."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc

from functions.agent.podresources import (
    LIST_METHOD,
    ListPodResourcesRequest,
    ListPodResourcesResponse,
)


class FakeKubelet:
    def __init__(self):
        self.response = ListPodResourcesResponse()

    def assign(
        self, namespace: str, pod: str, container: str, resource: str, *device_ids: str
    ) -> None:
        found = next(
            (p for p in self.response.pod_resources if (p.namespace, p.name) == (namespace, pod)),
            None,
        )
        if found is None:
            found = self.response.pod_resources.add(name=pod, namespace=namespace)
        holder = next(
            (c for c in found.containers if c.name == container), None
        ) or found.containers.add(name=container)
        holder.devices.add(resource_name=resource, device_ids=list(device_ids))

    def clear(self) -> None:
        self.response = ListPodResourcesResponse()

    def _list(self, request, context):
        return self.response


@contextlib.contextmanager
def fake_kubelet(directory: Path) -> Iterator[tuple[FakeKubelet, str]]:
    kubelet = FakeKubelet()
    socket = str(directory / "kubelet.sock")
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    method = grpc.unary_unary_rpc_method_handler(
        kubelet._list,
        request_deserializer=ListPodResourcesRequest.FromString,
        response_serializer=ListPodResourcesResponse.SerializeToString,
    )
    service, name = LIST_METHOD.strip("/").split("/")
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(service, {name: method}),)
    )
    server.add_insecure_port(f"unix://{socket}")
    server.start()
    try:
        yield kubelet, socket
    finally:
        server.stop(grace=None)
