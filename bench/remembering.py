"""Our server with the handlers' own rules skipped: each answers as it answered its first call.

What is left of a call is our server and the frame: the parse, the response made from what the
handler composed, and the serialisation. `make bench` times it beside ours and the do-nothing
SDK function on the one request it sends again and again, so an Instance's p99 splits into the
server and frame's part and the part that is the handler's rules (docs/performance.md, "Where
it stands"). On that request it answers ours byte for byte (`make bench` checks it before it
times anything, and tests/test_scale.py on every `make test`).

No design for a server: only the bench sends one request again and again, and a handler that
gave its first answer again would answer any other request wrongly. Only calls answered on the
server's loop (small requests, as an Instance's) skip the rules: a worker process imports the
handlers afresh.

    python -m bench.remembering --insecure --address 127.0.0.1:PORT
"""

from __future__ import annotations

import dataclasses

from functions import server
from functions.handlers import HANDLERS
from functions.handlers.base import Handler, Request, Requirement
from functions.handlers.desired import Desired


def remembering(handler: Handler) -> Handler:
    """`handler`, its requirements and its composition run on the first call only."""
    required: list[dict[str, Requirement]] = []
    composed: list[Desired] = []

    def requirements(request: Request) -> dict[str, Requirement]:
        if not required:
            required.append(handler.requirements(request))
        return required[0]

    def compose(request: Request) -> Desired:
        if not composed:
            composed.append(handler.compose(request))
        return composed[0]

    return dataclasses.replace(handler, requirements=requirements, compose=compose)


def main() -> None:
    HANDLERS.update({name: remembering(handler) for name, handler in HANDLERS.items()})
    server.main()


if __name__ == "__main__":
    main()
