"""The device-plugin stand-ins, by the name a Catalog's `devicePlugin` gives their dialect: the
one list the simulated kubelet and `make e2e`'s nodes both read (a new dialect's stand-in is a
module and a line here)."""

from __future__ import annotations

from gpustack_sim.client import Client
from gpustack_sim.deviceplugin import DevicePlugin, GpustackPlugin
from gpustack_sim.dra import DraPlugin
from gpustack_sim.hami import HamiPlugin
from gpustack_sim.nvidia import NvidiaPlugin


def device_plugins(api: Client) -> dict[str, DevicePlugin]:
    """Each stand-in, reading the cluster through `api` where its plugin reads it (the GPU
    Operator's ClusterPolicy and ConfigMap)."""
    return {
        "gpustack": GpustackPlugin(),
        "nvidia": NvidiaPlugin(api),
        "hami": HamiPlugin(),
        "dra": DraPlugin(),  # with NVIDIA's DRA driver, which world.py runs beside the kubelet
    }
