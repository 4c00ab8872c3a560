"""Names that look unused to vulture but are used by name, read by `make lint` (pyproject.toml's
[tool.vulture]). Vulture matches by name alone, so each entry keeps every name spelled so.

Reviewed: an entry says who uses the name. A name that is simply unused is deleted, not listed;
what a decorator registers (click commands, pytest fixtures, pydantic validators) is left to
`ignore_decorators` there.
"""

# ruff: noqa: B018, F821
# (each line only names a name: `_` stands for any object, as in vulture's own whitelists)

# http.server's BaseHTTPRequestHandler dispatches requests to do_<METHOD> and logs through
# log_message; socketserver reads daemon_threads (functions/metrics.py, e2e/extender.py and the
# tests' stand-in servers).
_.do_GET
_.do_POST
_.do_PATCH
_.log_message
_.daemon_threads

# logging.Formatter's hook, overridden to keep stacks out of a record (functions/logs.py).
_.formatStack

# Fields a library reads from what it is handed: the Kubernetes client's Configuration
# (functions/agent/agent.py), zipfile's ZipInfo and tarfile's TarInfo (functions/kubectl/krew.py),
# protobuf messages and descriptor options (functions/frame.py, functions/wire.py), pydantic's
# model configuration (functions/core/settings.py) and cel-python's parser (simulator/gpustack_sim/).
_.retries
_.compress_type
_.external_attr
_.gid
_.gname
_.null_value
_.map_entry
_.model_config
_.CEL_PARSER

# GroupSummary's figure, read by name through the figures' tables (core/status/summary.py,
# core/pools.py).
_.max_card_slice_percent

# Read from spec.allocations[].podUID so a malformed one is refused with the field's path;
# kept on the Allocation it came with (functions/core/devices.py).
_.pod_uid

# Part of functools.cache's key: a changed file is read again (simulator/gpustack_sim/kueue.py).
_.modified

# Fixtures a test requests by name for what they set up (tests/test_logs.py, tests/test_readme.py).
_.failing_handler
_.after_make_demo

# The catch-all signature of a stand-in (tests/test_schemas_tool.py's refused urlopen).
_.kwargs
