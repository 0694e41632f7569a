"""nvidia-resiliency-ext (NVRx) local checkpointing, the real thing, on the CPU.

Two rank processes (a gloo group, pipeline parallel: rank r holds decoder layer r) each save
their own state with NVRx's LocalCheckpointManager(root, session_id=SESSION), as Megatron-LM's
local non-persistent checkpoints do: the state (the layer's bf16 weights and fp32 Adam moments,
iteration, args, RNG state) is a Megatron sharded state dict wrapped in
MCoreTensorAwareStateDict (algo "atomic"), which runs on the CPU unchanged. Two iterations are
saved in a row, synchronously.

What NVRx writes, per rank and iteration: open(<root>/<session>/<rank>/
iter_0000010_<rank>_local.dirty.pt, "bx") (O_CREAT | O_EXCL), torch.save of the whole
MCoreTensorAwareStateDict through that file object, close, rename to iter_0000010_<rank>_local.pt;
no fsync anywhere. A barrier, then find_latest (an all_gather of every rank's directory listing)
validates the iteration, and each rank unlinks its files of older iterations: the tree ends with
iter_0000020_<rank>_local.pt alone in each rank's directory. A restarted job (a fresh manager)
finds the latest iteration complete on every rank and torch.loads its file (weights_only=False).

Every file is byte-deterministic (torch.save of the same objects).
"""

import os

import torch

from ckptfs_testing import workloads as wl

SESSION = "nvrx_local"
ITERATIONS = (10, 20)  # Saved in this order; the second replaces the first.
RANKS = 2
LAYER_PARAMS = (("self_attention.linear_qkv.weight", (3, 1)),
                ("self_attention.linear_proj.weight", (1, 1)),
                ("mlp.linear_fc1.weight", (4, 1)),
                ("mlp.linear_fc2.weight", (1, 4)))  # Shapes in units of the hidden size.
LOCAL_LAYER = "decoder.layers.0."  # A rank's own layer, as its model names it.
# The rank processes import these once, in the forkserver, before any clock runs.
LIBRARIES = ("megatron.core.dist_checkpointing.tensor_aware_state_dict",
             "nvidia_resiliency_ext.checkpointing.local.ckpt_managers.local_manager")


def rank_state(w, rank, iteration, fill=True):
    """The plain state of `rank` at `iteration`, as to_state_dict returns it; fill=False: zeros and
    Nones of the same layout (a load template, so that only loaded data can match)."""
    def tensor(kind, name, shape, dtype):
        if not fill:
            return torch.zeros(shape, dtype=dtype)
        return wl.tensor(f"nvrx_local/{iteration}/{rank}/{kind}/{name}", shape).to(dtype)
    shapes = [(LOCAL_LAYER + name, (a * w.hidden, b * w.hidden)) for name, (a, b) in LAYER_PARAMS]
    objects = {"iteration": iteration, "checkpoint_version": 3.0, "args": w.args(),
               "rng_state": wl.rng_state(rank + iteration)}
    return {"model": {n: tensor("weight", n, s, torch.bfloat16) for n, s in shapes},
            "optimizer": {kind: {n: tensor(kind, n, s, torch.float32) for n, s in shapes}
                          for kind in ("exp_avg", "exp_avg_sq")},
            **(objects if fill else dict.fromkeys(objects))}


def sharded_state_dict(state, rank):
    """Megatron's sharded view of a rank_state: each tensor is the rank's layer of a global
    tensor stacked over the layers of all ranks, the RNG state a per-rank ShardedObject, the rest
    common."""
    from megatron.core.dist_checkpointing.mapping import ShardedObject, ShardedTensor

    def stacked(key, x):
        if isinstance(x, dict):
            return {k: stacked(f"{key}.{k}", v) for k, v in x.items()}
        return ShardedTensor.from_rank_offsets(key.replace(LOCAL_LAYER, "decoder.layers."), x,
                                               (0, rank, RANKS), prepend_axis_num=1)
    sharded = dict(state)
    for section in ("model", "optimizer"):
        sharded[section] = stacked(section, state[section])
    sharded["rng_state"] = ShardedObject("rng_state", state["rng_state"], (RANKS,), (rank,),
                                         replica_id=0)
    return sharded


class NVRxLocal(wl.Workload):
    name = "nvrx_local"
    description = ("NVRx LocalCheckpointManager: 2 ranks (gloo), MCoreTensorAwareStateDict, "
                   "two synchronous saves, the older one cleaned up")

    def __init__(self, nbytes):
        super().__init__(nbytes)
        # Per rank and iteration nbytes / 2: 12 h^2 parameters of 10 bytes (bf16 + 2 x fp32).
        self.hidden = max(64, round((self.nbytes / 240) ** 0.5 / 64) * 64)
        self._expected = None

    def args(self):
        return {"hidden_size": self.hidden, "num_layers": RANKS,
                "pipeline_model_parallel_size": RANKS, "bf16": True, "lr": 3e-4,
                "non_persistent_ckpt_type": "local", "non_persistent_local_ckpt_algo": "atomic"}

    def logical_bytes(self):
        """The tensors of both iterations: every save hands its whole state to the filesystem."""
        return len(ITERATIONS) * RANKS * 10 * 12 * self.hidden ** 2

    def save(self, root):
        return wl.run_distributed(_save_rank, RANKS, (root, self), preload=LIBRARIES)[0]

    def load(self, root, check=True):
        digests = wl.run_distributed(_load_rank, RANKS, (root, self, check), preload=LIBRARIES)[1]
        return wl.digest(digests) if check else None

    def load_seconds(self, root):
        return wl.run_distributed(_load_rank, RANKS, (root, self, False), preload=LIBRARIES)[0]

    def expected_digest(self):
        if self._expected is None:
            self._expected = wl.digest([wl.digest(rank_state(self, r, ITERATIONS[-1]))
                                        for r in range(RANKS)])
        return self._expected


@wl.distributed_rank
def _save_rank(rank, barrier, root, w):
    from megatron.core.dist_checkpointing.tensor_aware_state_dict import MCoreTensorAwareStateDict
    from nvidia_resiliency_ext.checkpointing.local.ckpt_managers.local_manager import (
        LocalCheckpointManager)
    states = {it: rank_state(w, rank, it) for it in ITERATIONS}
    manager = LocalCheckpointManager(root, session_id=SESSION)
    barrier.wait()
    for it in ITERATIONS:
        tasd, _ = MCoreTensorAwareStateDict.from_state_dict(
            sharded_state_dict(states.pop(it), rank), algo="atomic")
        manager.save(tasd, it, is_async=False)


@wl.distributed_rank
def _load_rank(rank, barrier, root, w, check):
    """A restarted job's load: the rank's digest of what it loaded (None without check)."""
    from nvidia_resiliency_ext.checkpointing.local.ckpt_managers.local_manager import (
        LocalCheckpointManager)
    template = sharded_state_dict(rank_state(w, rank, ITERATIONS[-1], fill=False), rank)
    barrier.wait()
    manager = LocalCheckpointManager(root, session_id=SESSION)
    latest = manager.find_latest()
    assert latest == ITERATIONS[-1], f"find_latest() = {latest}"
    files = sorted(os.listdir(manager.local_ckpt_dir))
    assert files == [f"iter_{latest:07d}_{rank}_local.pt"], f"rank {rank} holds {files}"
    tasd, ckpt_id = manager.load()
    assert ckpt_id == (latest, rank, SESSION), ckpt_id
    state = tasd.to_state_dict(template, algo="atomic")
    return wl.digest(state) if check else None
