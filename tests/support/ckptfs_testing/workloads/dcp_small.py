"""dcp_small: PyTorch DCP, the real thing, saving many small tensors from one process:
dcp.save(storage_writer=FileSystemWriter(root)) (its defaults: one thread, every file fsynced) of
`count` tensors of 64x16 float32 (4 KiB each: the biases, norms and optimizer scalars a real
model holds by the thousand beside its big tensors). DCP writes each tensor with torch.save into
one stream, which flushes after every tensor: one small write per tensor, then .metadata.

Data is deterministic (workloads.tensor); .metadata records a random save id and the
checkpoint's path (compared by size, as dcp's)."""

import torch
import torch.distributed.checkpoint as dcp

from ckptfs_testing import workloads as wl

SHAPE = (64, 16)


class DCPSmall(wl.Workload):
    name = "dcp_small"
    description = ("PyTorch DCP save of many 64x16 float32 tensors from one process, "
                   "FileSystemWriter's defaults")
    ranks = 1
    varying = (".metadata",)

    def logical_bytes(self):
        return self.nbytes * SHAPE[0] * SHAPE[1] * 4

    def save(self, root):
        return wl.run_distributed(_save_rank, 1, (root, self))[0]

    def load(self, root, check=True):
        return wl.run_distributed(_load_rank, 1, (root, self, check))[1][0]

    def expected_digest(self):
        return wl.digest(_state(self.nbytes, fill=True))


def _state(count, fill):
    return {f"layers.{i}.bias": (wl.tensor(f"dcp_small/{i}", SHAPE) if fill else torch.zeros(SHAPE))
            for i in range(count)}


@wl.distributed_rank
def _save_rank(rank, barrier, root, w):
    state = _state(w.nbytes, fill=True)
    barrier.wait()
    dcp.save(state, storage_writer=dcp.FileSystemWriter(root))


@wl.distributed_rank
def _load_rank(rank, barrier, root, w, check):
    state = _state(w.nbytes, fill=False)
    barrier.wait()
    dcp.load(state, storage_reader=dcp.FileSystemReader(root))
    return wl.digest(state) if check else None
