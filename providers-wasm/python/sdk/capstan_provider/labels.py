"""Well-known label, taint and value names (the host's ``capstan-model`` labels)."""

INSTANCE_TYPE = "node.kubernetes.io/instance-type"
ZONE = "topology.kubernetes.io/zone"
REGION = "topology.kubernetes.io/region"
ARCH = "kubernetes.io/arch"
OS = "kubernetes.io/os"
HOSTNAME = "kubernetes.io/hostname"
WINDOWS_BUILD = "node.kubernetes.io/windows-build"
CAPACITY_TYPE = "karpenter.sh/capacity-type"
NODE_POOL = "karpenter.sh/nodepool"
REGISTERED = "karpenter.sh/registered"
INITIALIZED = "karpenter.sh/initialized"
UNREGISTERED_TAINT = "karpenter.sh/unregistered"
"""The taint a node carries until the host registers it."""
DISRUPTED_TAINT = "karpenter.sh/disrupted"

CAPACITY_TYPE_SPOT = "spot"
CAPACITY_TYPE_ON_DEMAND = "on-demand"
CAPACITY_TYPE_RESERVED = "reserved"
CAPACITY_TYPES = (CAPACITY_TYPE_SPOT, CAPACITY_TYPE_ON_DEMAND, CAPACITY_TYPE_RESERVED)
"""Every capacity type Karpenter knows."""

ARCH_AMD64 = "amd64"
ARCH_ARM64 = "arm64"
OS_LINUX = "linux"
OS_WINDOWS = "windows"

RESOURCE_CPU = "cpu"
RESOURCE_MEMORY = "memory"
RESOURCE_PODS = "pods"
RESOURCE_EPHEMERAL_STORAGE = "ephemeral-storage"

WELL_KNOWN = (INSTANCE_TYPE, ZONE, REGION, ARCH, OS, WINDOWS_BUILD, CAPACITY_TYPE, NODE_POOL)
"""Keys the scheduler treats as well known (a requirement on them need not be defined)."""
