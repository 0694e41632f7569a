"""The checkpoint layout Megatron's trainer keeps (iter_NNNNNNN directories, the tracker written
last) and the Workload interface every workload implements."""
import os
import time

from .data import write_all


ITERATION = 100

TRACKER = "latest_checkpointed_iteration.txt"  # Megatron's, beside its iter_NNNNNNN directories.


def write_tracker(root, it=ITERATION):
    write_all(os.path.join(root, TRACKER), str(it).encode())


def read_tracker(root):
    with open(os.path.join(root, TRACKER)) as f:
        return int(f.read().strip())


def rank_root(root, rank):
    """The directory rank `rank` saves under: root, or roots[rank % len(roots)] when root is a
    list (one checkpoint seen through several mounts of one backing directory)."""
    return root[rank % len(root)] if isinstance(root, (list, tuple)) else root


def checkpoint_dir(root, iteration):
    """Where a save with `iteration` puts its checkpoint: root itself when iteration is None,
    else Megatron's <root>/iter_000000N beside the tracker."""
    return root if iteration is None else os.path.join(root, f"iter_{iteration:07d}")


def tracker_after_save(rank, root, iteration):
    """What Megatron's trainer does once its save returned: every rank meets at a barrier, then
    rank 0 writes the tracker naming `iteration` under root. Nothing when iteration is None."""
    import torch.distributed as dist
    if iteration is None:
        return
    dist.barrier()
    if rank == 0:
        write_tracker(root, iteration)


class Workload:
    name = "?"
    description = ""
    varying = ()  # Names of files whose bytes the library does not write deterministically.

    def __init__(self, nbytes):
        self.nbytes = int(nbytes)

    def logical_bytes(self):
        """Bytes the trainer hands to the filesystem (file sizes; zarr rewrites not counted)."""
        raise NotImplementedError

    def save(self, root):
        raise NotImplementedError

    def load(self, root, check=True):
        raise NotImplementedError

    def expected_digest(self):
        raise NotImplementedError

    def load_seconds(self, root):
        """How long load(root, check=False) takes; workloads whose loader runs in rank processes
        count from the ranks' start line (process start-up excluded)."""
        t = time.monotonic()
        self.load(root, check=False)
        return time.monotonic() - t
