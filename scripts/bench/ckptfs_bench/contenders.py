"""Who runs each workload of the save comparison, and how often."""
from ckptfs_testing import workloads

from .memory import BASELINE, MEMORY_CONTENDERS
from .multinode import MULTINODE, MULTINODE_CONTENDERS

CONTENDERS = ["plain", "shm", "ckptfs"]
# Workloads whose library saves asynchronously too: the anchor "async" is that async save to the
# plain directory (blocked time as its save, completion, fsyncs included, as its durable time),
# and "ck_async" the same async save through a default mount (durable: completion + ckptfs sync).
ASYNC_WORKLOADS = ("dcp", "mcore_torch_dist")
ASYNC_CONTENDERS = ["async", "ck_async"]
# zarr_distopt: floor = the workload with zarr's own 1 MiB chunks, on /dev/shm.
DISTOPT_CONTENDERS = ["shm", "floor", "ckptfs"]
# Contenders whose runs of these workloads rewrite whole zarr chunks per piece: tens of seconds.
SLOW_WORKLOADS = ("zarr_dist", "zarr_distopt")
SLOW_CONTENDERS = ("plain", "shm")
ON_SHM = ("shm", "floor")
ALL_WORKLOADS = workloads.ALL + [MULTINODE]


def contenders_of(name, a):
    """([contenders], {contender: runs}) for workload `name` under the arguments `a`."""
    cs = (CONTENDERS + (ASYNC_CONTENDERS if name in ASYNC_WORKLOADS else [])
          + (MEMORY_CONTENDERS if a.memory else []) + ([BASELINE] if a.baseline else []))
    if name == MULTINODE:
        cs = MULTINODE_CONTENDERS
    if name == "zarr_distopt":
        cs = (["plain"] if a.distopt_plain else []) + DISTOPT_CONTENDERS
    slow = SLOW_CONTENDERS if name in SLOW_WORKLOADS else ()
    return cs, {c: min(a.repeat, a.slow_repeat) if c in slow else a.repeat for c in cs}
