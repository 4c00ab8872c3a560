"""The kubelet's pod-resources API (`v1.PodResourcesLister`) over its Unix socket.

The messages are declared here from the kubelet's `podresources/v1/api.proto` (only the fields
the agent reads), so no generated code is needed.
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
LIST_METHOD = "/v1.PodResourcesLister/List"

_T = descriptor_pb2.FieldDescriptorProto


REPEATED, ONE = _T.LABEL_REPEATED, _T.LABEL_OPTIONAL


def _message(name: str, *fields: tuple[str, int, int, int, str]) -> descriptor_pb2.DescriptorProto:
    message = descriptor_pb2.DescriptorProto(name=name)
    for field_name, number, label, kind, type_name in fields:
        field = message.field.add(name=field_name, number=number, label=label, type=kind)
        if type_name:
            field.type_name = type_name
    return message


def _file() -> descriptor_pb2.FileDescriptorProto:
    proto = descriptor_pb2.FileDescriptorProto(
        name="gpustack/podresources/v1/api.proto", package="v1", syntax="proto3"
    )
    proto.message_type.extend(
        [
            _message("ListPodResourcesRequest"),
            _message(
                "ListPodResourcesResponse",
                ("pod_resources", 1, REPEATED, _T.TYPE_MESSAGE, ".v1.PodResources"),
            ),
            _message(
                "PodResources",
                ("name", 1, ONE, _T.TYPE_STRING, ""),
                ("namespace", 2, ONE, _T.TYPE_STRING, ""),
                ("containers", 3, REPEATED, _T.TYPE_MESSAGE, ".v1.ContainerResources"),
            ),
            _message(
                "ContainerResources",
                ("name", 1, ONE, _T.TYPE_STRING, ""),
                ("devices", 2, REPEATED, _T.TYPE_MESSAGE, ".v1.ContainerDevices"),
            ),
            _message(
                "ContainerDevices",
                ("resource_name", 1, ONE, _T.TYPE_STRING, ""),
                ("device_ids", 2, REPEATED, _T.TYPE_STRING, ""),
            ),
        ]
    )
    return proto


_POOL = descriptor_pool.DescriptorPool()
_POOL.Add(_file())
ListPodResourcesRequest = message_factory.GetMessageClass(
    _POOL.FindMessageTypeByName("v1.ListPodResourcesRequest")
)
ListPodResourcesResponse = message_factory.GetMessageClass(
    _POOL.FindMessageTypeByName("v1.ListPodResourcesResponse")
)


@dataclass(frozen=True)
class ContainerDevices:
    pod: str  # namespace/name
    container: str
    resource: str
    device_ids: tuple[str, ...]


def list_devices(socket: str = DEFAULT_SOCKET, timeout: float = 10) -> list[ContainerDevices]:
    """Every device the kubelet handed to a container on this node."""
    with grpc.insecure_channel(f"unix://{socket}") as channel:
        call = channel.unary_unary(
            LIST_METHOD,
            request_serializer=ListPodResourcesRequest.SerializeToString,
            response_deserializer=ListPodResourcesResponse.FromString,
        )
        response = call(ListPodResourcesRequest(), timeout=timeout)
    return [
        ContainerDevices(
            f"{pod.namespace}/{pod.name}",
            container.name,
            devices.resource_name,
            tuple(devices.device_ids),
        )
        for pod in response.pod_resources
        for container in pod.containers
        for devices in container.devices
    ]
