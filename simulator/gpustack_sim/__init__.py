"""A simulated cluster that runs the real handlers the way Crossplane would, with stand-ins for
the controllers around them (`gpustack-fn simulate`, the scenario tests)."""

from __future__ import annotations

from gpustack_sim.scenario import ScenarioError, play
from gpustack_sim.world import World, load_documents, world_from

__all__ = ["ScenarioError", "World", "load_documents", "play", "world_from"]
