"""`kubectl gpustack`: the fleet's GPUs as an administrator asks about them — a cluster-wide
`nvidia-smi` read from the Devices objects (`fleet` reads, `tables` prints, `cli` is the command).
"""
