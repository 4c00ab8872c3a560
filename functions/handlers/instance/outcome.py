"""One Instance's reconcile: what it reads (`Instance`) and the four ways it ends (outcomes).

Every decision returns a value, never raises: `Stopped` (no workload, and why), `Refused` (a
spec the cluster will never take as it is: the fields and reasons), `Waiting` (the cluster has
not caught up yet: the reason, and anything composed meanwhile), or `Running` (the workload's
objects and the status mirrored from them, with any conditions it adds). `render` turns an
outcome into the Desired state.

A refusal never removes a running workload: an observed Pod made from the current spec, or a
VMI that has started on a node, is kept by a Fatal result (the container runtime), or composed
as observed with a `RestartRequired` condition (the VirtualMachine runtime, `vm.keep_running`);
a VMI that never left Pending or Scheduling has not started, so a refusal drops it, and a new
spec replaces it (`Waiting`, reason `ReplacingVirtualMachine`: KubeVirt refuses to update a
VMI's spec). A Pod made from another spec, or rejected by the kubelet at admission, is not kept
either (`record`): a refusal removes it, and a start replaces it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from functions.core import reasons
from functions.core.requests import Refusal
from functions.core.settings import Settings
from functions.handlers.base import Request
from functions.handlers.desired import Condition, Desired
from functions.views import View


@dataclass(frozen=True)
class Instance:
    """What one reconcile of an Instance reads."""

    request: Request
    spec: View
    name: str
    namespace: str
    settings: Settings
    workload: View | None  # the observed Pod or VMI, if any
    generation: int
    spec_digest: str = ""  # what a Pod made from the spec records (`record.spec_digest`)
    replacing: Waiting | None = None  # why the observed Pod is not kept (`record.replacing`)

    @property
    def virtual_machine(self) -> bool:
        return self.spec.str("runtime") == "VirtualMachine"

    @property
    def kept(self) -> View | None:
        """The observed workload, unless it is a Pod being replaced: what gates, the pin and
        the Pod's placement read as already held."""
        return None if self.replacing is not None else self.workload

    @property
    def running(self) -> bool:
        """A workload a refusal must not remove: a kept Pod, or a started VMI."""
        if self.kept is None:
            return False
        return not self.virtual_machine or started(self.kept)


# KubeVirt's VMI phases once its launcher is on a node (Unknown: the node stopped reporting).
STARTED_PHASES = ("Scheduled", "Running", "Unknown")


def started(vmi: View | None) -> bool:
    """A VMI that started on a node; Pending and Scheduling have not, Succeeded and Failed ended."""
    return vmi is not None and vmi.str("status", "phase") in STARTED_PHASES


@dataclass(frozen=True)
class Stopped:
    message: str
    generation: int | None = None  # recorded as status.stoppedGeneration


@dataclass(frozen=True)
class Refused:
    refusals: tuple[Refusal, ...]

    @property
    def reason(self) -> str:
        return self.refusals[0].reason

    @property
    def message(self) -> str:
        return "; ".join(map(str, self.refusals))


@dataclass(frozen=True)
class Waiting:
    reason: str
    message: str
    resources: Mapping[str, dict[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class Running:
    reason: str  # PodComposed or VirtualMachineInstanceComposed
    resources: Mapping[str, dict[str, Any]]
    status: Mapping[str, Any]
    conditions: tuple[Condition, ...] = ()  # a VM's Scheduled and RestartRequired


Outcome = Stopped | Refused | Waiting | Running


def refused(*refusals: Refusal) -> Refused:
    return Refused(tuple(refusals))


def render(instance: Instance, outcome: Outcome, desired: Desired) -> Desired:
    """The Desired state an outcome comes to."""
    if instance.virtual_machine and not isinstance(outcome, Running):
        no_vm(outcome, desired)
    if isinstance(outcome, Running):
        _compose(instance, outcome.resources, desired)
        desired.condition(reasons.ADMITTED, True, outcome.reason)
        for condition in outcome.conditions:
            desired.condition(condition.type, condition.status, condition.reason, condition.message)
        desired.status = dict(outcome.status)
    elif isinstance(outcome, Waiting):
        _compose(instance, outcome.resources, desired)
        desired.condition(reasons.ADMITTED, False, outcome.reason, outcome.message)
        desired.status = {"phase": reasons.STARTING, "phaseMessage": outcome.message}
        desired.composite_ready = False
    elif isinstance(outcome, Stopped):
        stopping = instance.workload is not None
        phase = reasons.STOPPING if stopping else reasons.STOPPED_PHASE
        desired.status = {"phase": phase, "phaseMessage": outcome.message}
        if outcome.generation is not None:
            desired.status["stoppedGeneration"] = outcome.generation
        desired.condition(reasons.ADMITTED, False, reasons.STOPPED, outcome.message)
        desired.composite_ready = False
    elif instance.running:  # a Fatal result keeps the running workload untouched
        desired.fatal(outcome.message, outcome.reason)
    else:
        desired.condition(reasons.ADMITTED, False, outcome.reason, outcome.message)
        desired.warning(outcome.message, outcome.reason)
        desired.status = {"phase": reasons.REFUSED, "phaseMessage": outcome.message}
        desired.composite_ready = False
    return desired


def no_vm(outcome: Stopped | Refused | Waiting, desired: Desired) -> None:
    """A VM's own conditions when no VMI runs: Crossplane keeps a condition a function stops
    sending, so a stopped VM would otherwise still read Scheduled, and RestartRequired as it was
    when it last ran."""
    reason = reasons.STOPPED if isinstance(outcome, Stopped) else outcome.reason
    desired.condition(reasons.SCHEDULED, False, reason, outcome.message)
    desired.condition(reasons.RESTART_REQUIRED, False, reasons.NOT_RUNNING)


def _compose(instance: Instance, resources: Mapping[str, dict[str, Any]], desired: Desired) -> None:
    for name, obj in resources.items():
        desired.compose(name, obj, instance.request.observed(name))
