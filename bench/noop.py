"""The do-nothing baseline: an SDK function whose RunFunction returns `response.to(req)`.

Served as every crossplane-function-sdk-python function is — `runtime.serve`, one grpc.aio
server parsing requests on its event loop — with the same message limits as ours (64 MiB), so
what it costs is what any Python function pays to receive a request and answer it.

    python -m bench.noop 127.0.0.1:PORT
"""

from __future__ import annotations

import sys

from crossplane.function import response, runtime
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

from functions.server import DEFAULT_MAX_RECV_MESSAGE_MB

LIMIT = DEFAULT_MAX_RECV_MESSAGE_MB * 1024 * 1024


class DoNothing(grpcv1.FunctionRunnerServiceServicer):
    async def RunFunction(
        self, req: fnv1.RunFunctionRequest, _context: object
    ) -> fnv1.RunFunctionResponse:
        return response.to(req)


def main() -> None:
    options = [("grpc.max_receive_message_length", LIMIT), ("grpc.max_send_message_length", LIMIT)]
    runtime.serve(DoNothing(), sys.argv[1], creds=None, insecure=True, options=options)


if __name__ == "__main__":
    main()
