"""The node agent: NVML and the kubelet's pod-resources API to one Devices object per node."""
