"""Every condition type, reason and phase the functions write, defined once.

Conditions are what `kubectl describe` shows and what users grep for; their reasons are part of
the product's contract (docs/instances.md lists every refusal). Reasons are CamelCase nouns or
past participles, as Kubernetes conventions ask.
"""

from __future__ import annotations

# --- condition types --------------------------------------------------------------------------
ADMITTED = "Admitted"  # Instance: a Pod or VMI is composed (True) or why not (False)
INPUTS_READABLE = "InputsReadable"  # a pool handler skipped objects it could not read
RESOURCE_NAME_CONFLICT = "ResourceNameConflict"  # GPUClass
RESOURCE_NAME_NOT_PERMITTED = "ResourceNameNotPermitted"  # GPUClass
LICENSE_SECRET_MISSING = "LicenseSecretMissing"  # GPUClass
RESTART_REQUIRED = "RestartRequired"  # a running VM keeps what it started with; True: what changed
SCHEDULED = "Scheduled"  # a VM's VMI is placed on a node (also the True reason); False: why not
WORKERS_READY = "WorkersReady"  # KubernetesNodes: every desired worker VMI is Ready

# --- Instance: refusals (the Instance composes nothing until the spec or the cluster changes) --
INVALID_RESOURCES = "InvalidResources"
FORBIDDEN = "Forbidden"  # two fields that exclude each other, or a shape the pool does not offer
INVALID_VOLUME = "InvalidVolume"
INSTANCE_TYPE_NOT_FOUND = "InstanceTypeNotFound"
NODE_NOT_FOUND = "NodeNotFound"
RESERVED_NAMESPACE = "ReservedNamespace"
PRIVILEGED_NOT_ALLOWED = "PrivilegedNotAllowed"
HOST_PATH_NOT_ALLOWED = "HostPathNotAllowed"
PLACEMENT_CONFLICT = "PlacementConflict"
INVALID_FOR_VIRTUAL_MACHINE = "InvalidForVirtualMachine"
INVALID_FOR_CONTAINER = "InvalidForContainer"  # a field only the VirtualMachine runtime takes
GPU_CLASS_NOT_FOUND = "GPUClassNotFound"
GPU_CLASS_DELETING = "GPUClassDeleting"
GPU_CLASS_CONFLICT = "GPUClassConflict"
RESOURCE_NOT_PERMITTED = "ResourceNotPermitted"
VGPU_NOT_ENTITLED = "VGPUNotEntitled"
INVALID_GPUS = "InvalidGPUs"
PASSTHROUGH_ONLY = "PassthroughOnly"  # a KubernetesNodes pool takes passthrough classes only

# --- Instance: waits (the Instance starts by itself once the cluster catches up) --------------
INSTANCE_TYPE_NOT_READY = "InstanceTypeNotReady"
READING_INSTANCE_TYPE = "ReadingInstanceType"
READING_NODE = "ReadingNode"
READING_GPU_CLASSES = "ReadingGPUClasses"
WAITING_FOR_VOLUME = "WaitingForVolume"
WAITING_FOR_LICENSE = "WaitingForLicense"
WAITING_FOR_CAPACITY = "WaitingForCapacity"  # a shortage: no eligible node has the GPUs yet
REPLACING_FAILED_VMI = "ReplacingFailedVMI"  # a VMI ended Failed (node lost): a new one starts
REPLACING_VIRTUAL_MACHINE = "ReplacingVirtualMachine"  # an unstarted VMI's spec changed: recreated
REPLACING_OUTDATED_POD = "ReplacingOutdatedPod"  # the Pod was made from another spec: a new one
REPLACING_FAILED_POD = "ReplacingFailedPod"  # the kubelet rejected the Pod at admission: a new one

# --- Instance: running and stopped ------------------------------------------------------------
POD_COMPOSED = "PodComposed"
VMI_COMPOSED = "VirtualMachineInstanceComposed"
UP_TO_DATE = "UpToDate"  # RestartRequired=False: the running VM is what a start would make
NOT_RUNNING = "NotRunning"  # RestartRequired=False: no VM runs (stopped, waiting or refused)
GPU_CLASS_CHANGED = "GPUClassChanged"  # RestartRequired=True: a start would make another VMI
LICENSE_CHANGED = "LicenseChanged"  # RestartRequired=True: the license Secret was rotated
STOPPED = "Stopped"

# --- results ----------------------------------------------------------------------------------
ALLOCATION_CONFLICT = "AllocationConflict"  # Devices: an observed allocation the ledger refused
NODE_LEFT_OUT = "NodeLeftOut"  # Devices: the device plugin cannot serve the node as claims ask
UNREADABLE_OBJECT = "UnreadableObject"  # a required object skipped: its kind, name and field
NODE_SUMMARIES_MISSING = "NodeSummariesMissing"  # a pool kept what it composed: no summary yet
NODE_SUMMARY_NEWER = "NodeSummaryNewer"  # a pool read a newer release's summaries by what it knows
VM_NODES_UNSELECTED = "VMNodesUnselected"  # a GPUClass reads many Nodes that serve no VM
VM_NODE_STATES_MISSING = "VMNodeStatesMissing"  # a GPUClass kept its counts: no VM node state yet
INVALID_GPU_CLASS = "InvalidGPUClass"  # GPUClass: a field the XRD refuses (Fatal, offline too)
FLAVORS_LEFT_OUT = "FlavorsLeftOut"  # an InstanceType: more flavors than its queue can list

# --- GPUClass condition reasons -----------------------------------------------------------------
CONFLICT, UNIQUE = "Conflict", "Unique"
NOT_PERMITTED, PERMITTED = "NotPermitted", "Permitted"
MISSING, PRESENT, NOT_LICENSED = "Missing", "Present", "NotLicensed"
ALL_READABLE = "AllReadable"

# --- phases -----------------------------------------------------------------------------------
# InstanceType (its ClusterQueue's state)
ACTIVE, ACTIVATING, INACTIVE, DRAINING = "Active", "Activating", "Inactive", "Draining"
# Instance (reference §1.4, plus Refused)
STARTING, SCHEDULING, PENDING, INITIALIZING = "Starting", "Scheduling", "Pending", "Initializing"
READY, NOT_READY, SUCCEEDED, FAILED = "Ready", "NotReady", "Succeeded", "Failed"
STOPPING, STOPPED_PHASE, REFUSED = "Stopping", "Stopped", "Refused"
