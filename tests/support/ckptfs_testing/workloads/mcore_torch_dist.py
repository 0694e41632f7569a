"""Megatron-core dist_checkpointing with the torch_dist backend (what Megatron and NeMo save by
default), the real thing, on the CPU.

Two rank processes (a gloo group, tensor parallel size 2) each hold their half of a GPT-like
sharded state dict: ShardedTensors split along axis 0 (embedding, qkv, fc1) or axis 1 (proj,
fc2), layer tensors stacked on a prepended layer axis as Megatron's decoder does, layernorms
replicated across the TP ranks, fp32 Adam moments beside bf16 weights, a replicated ShardedObject
(args), a per-rank ShardedObject (RNG state) and a common part. They save with
dist_checkpointing.save and the fully parallel torch_dist strategy, synchronously or through an
AsyncRequest on an AsyncCallsQueue. What Megatron writes: rank 0 writes common.pt; forked writer
processes write __R_B.distcp (one per rank and writer bucket) under their final names and fsync
each; rank 0 writes .metadata (.metadata.tmp, fsync, rename) and then metadata.json. A load with
a different parallel layout (TP 2 -> 1, one process) reads it back.

MCoreTorchDist(nbytes, dp=2) adds data parallelism: TP 2 x DP 2 = 4 ranks (rank r: TP rank r % 2,
DP rank r // 2), whose replicas have a non-zero DP replica id, and the fully parallel strategy
spreads the writing of every main replica over all 4 ranks. save() takes a list of roots (rank r
under roots[r % len(roots)]), and with iteration=N saves into <root>/iter_000000N and has rank 0
write Megatron's tracker after a barrier (workloads.tracker_after_save).

.metadata is not byte-deterministic: it records a random save id and the checkpoint's path.

megatron-core calls CUDA unconditionally in a few places on this path; CPU_PATCHES replaces
exactly those, each as one module sees it. Nothing on the I/O path is replaced.
"""

import os
import time

import torch

from ckptfs_testing import workloads as wl

TP = 2
ITERATION = 1000
DTYPES = (("", torch.bfloat16), ("optimizer.state.exp_avg.", torch.float32),
          ("optimizer.state.exp_avg_sq.", torch.float32))


def _no_cuda_synchronize(device=None):
    """CPU tensors are already on the host: nothing to wait for."""


def _cpu_device():
    return "cpu"


_STRATEGIES = "megatron.core.dist_checkpointing.strategies"
# (module, attribute as that module looks it up, replacement, why).
CPU_PATCHES = [
    (f"{_STRATEGIES}.filesystem_async", "torch.cuda.synchronize", _no_cuda_synchronize,
     "FileSystemWriterAsync.preload_tensors waits for device-to-host copies"),
    (f"{_STRATEGIES}.async_utils", "torch.cuda.synchronize", _no_cuda_synchronize,
     "TemporalAsyncCaller.schedule_async_call waits for device-to-host copies before forking"),
    (f"{_STRATEGIES}.async_utils", "torch.cuda.current_device", _cpu_device,
     "the async callers all_reduce their is-done flag from a CUDA tensor (gloo needs the CPU)"),
    (f"{_STRATEGIES}.state_dict_saver", "torch.cuda.current_device", _cpu_device,
     "save_state_dict_async_finalize broadcasts its write-failure flag from a CUDA tensor"),
]


class _Overlay:
    """`base` with some attributes replaced; every other lookup goes to `base`."""

    def __init__(self, base, replaced):
        self._base = base
        self.__dict__.update(replaced)

    def __getattr__(self, name):
        return getattr(self._base, name)


def apply_cpu_patches():
    """Installs CPU_PATCHES in this process (forked writers inherit them)."""
    import importlib
    for module_name, path, replacement, _ in CPU_PATCHES:
        module = importlib.import_module(module_name)
        torch_name, cuda_name, attr = path.split(".")
        torch_view = getattr(module, torch_name)
        if not isinstance(torch_view, _Overlay):
            torch_view = _Overlay(torch_view, {cuda_name: _Overlay(torch_view.cuda, {})})
            setattr(module, torch_name, torch_view)
        setattr(getattr(torch_view, cuda_name), attr, replacement)


def param_specs(hidden, vocab):
    """[(key, full shape per layer, TP axis or None, stacked per layer)]."""
    h, f = hidden, 4 * hidden
    layer = "decoder.layers."
    return [("embedding.word_embeddings.weight", (vocab, h), 0, False),
            (layer + "input_layernorm.weight", (h,), None, True),
            (layer + "self_attention.linear_qkv.weight", (3 * h, h), 0, True),
            (layer + "self_attention.linear_proj.weight", (h, h), 1, True),
            (layer + "pre_mlp_layernorm.weight", (h,), None, True),
            (layer + "mlp.linear_fc1.weight", (f, h), 0, True),
            (layer + "mlp.linear_fc2.weight", (h, f), 1, True),
            ("decoder.final_layernorm.weight", (h,), None, False)]


def shard(key, shape, dtype, tp_axis, tp_rank, layer):
    """TP rank tp_rank's part of one tensor (all of it when tp_axis is None)."""
    shape = list(shape)
    if tp_axis is not None:
        shape[tp_axis] //= TP
    return wl.tensor(f"mcore/{key}/{layer}/{tp_rank if tp_axis is not None else 'r'}",
                     tuple(shape)).to(dtype)


def full(key, shape, dtype, tp_axis, layer):
    """What a TP 1 load must return: the TP shards concatenated."""
    if tp_axis is None:
        return shard(key, shape, dtype, None, 0, layer)
    return torch.cat([shard(key, shape, dtype, tp_axis, r, layer) for r in range(TP)], tp_axis)


def args_object(w):
    return {"hidden": w.hidden, "layers": w.layers, "vocab": w.vocab, "tp": TP}


def rng_object(tp_rank):
    return {"tp_rank": tp_rank, "torch_rng_state": torch.Generator().manual_seed(tp_rank).get_state()}


def tensors(w):
    """Every tensor of the state dict: (section, name in the model, checkpoint key, full shape
    per layer, dtype, TP axis or None, layer or None)."""
    for prefix, dtype in DTYPES:
        section = "optimizer" if prefix else "model"
        for key, shape, tp_axis, stacked in param_specs(w.hidden, w.vocab):
            key = prefix + key
            for layer in range(w.layers) if stacked else [None]:
                name = key if layer is None else key.replace("layers.", f"layers.{layer}.", 1)
                yield section, name, key, shape, dtype, tp_axis, layer


def sharded_state_dict(w, tp_rank, tp_size, dp_rank=0):
    """Megatron's sharded state dict of one rank: saving (tp_size == TP, with data) or loading
    unsplit (tp_size == 1, empty tensors to fill). Ranks with dp_rank > 0 hold replicas."""
    from megatron.core.dist_checkpointing import ShardedObject, ShardedTensor
    saving = tp_size == TP
    state = {"model": {}, "optimizer": {}}
    for section, name, key, shape, dtype, tp_axis, layer in tensors(w):
        if saving:
            data = shard(key, shape, dtype, tp_axis, tp_rank, layer)
        else:
            data = torch.empty(shape, dtype=dtype)
        offsets = [] if layer is None else [(0, layer, w.layers)]
        if tp_axis is not None:
            offsets.append((tp_axis + len(offsets), tp_rank, tp_size))
        state[section][name] = ShardedTensor.from_rank_offsets(
            key, data, *offsets, replica_id=(0, 0 if tp_axis is not None else tp_rank, dp_rank),
            prepend_axis_num=0 if layer is None else 1)
    if saving:
        rng = ShardedObject("rng_state", rng_object(tp_rank), (1, TP), (0, tp_rank),
                            replica_id=dp_rank)
    else:
        rng = [ShardedObject("rng_state", None, (1, TP), (0, r), replica_id=0) for r in range(TP)]
    return {**state, "rng_state": rng,
            "args": ShardedObject("args", args_object(w) if saving else None, (1,), (0,),
                                  replica_id=dp_rank * TP + tp_rank),
            "iteration": ITERATION, "checkpoint_version": 3.0}


def expected_state(w):
    """The state a TP 1 load returns, built from the generated data."""
    state = {"model": {}, "optimizer": {}}
    for section, name, key, shape, dtype, tp_axis, layer in tensors(w):
        state[section][name] = full(key, shape, dtype, tp_axis, layer)
    return {**state, "rng_state": [rng_object(r) for r in range(TP)],
            "args": args_object(w), "iteration": ITERATION, "checkpoint_version": 3.0}


class MCoreTorchDist(wl.Workload):
    name = "mcore_torch_dist"
    description = ("Megatron-core dist_checkpointing, torch_dist, fully parallel save: "
                   "2 ranks (TP 2, gloo), GPT + Adam")
    varying = (".metadata",)

    def __init__(self, nbytes, dp=1):
        super().__init__(nbytes)
        self.ranks = TP * dp
        self.vocab, self.layers = 8192, 4
        params = self.nbytes // 10  # bf16 weights, fp32 exp_avg and exp_avg_sq
        a, b = 12 * self.layers, self.vocab  # 12 * layers * h^2 + vocab * h ~= params
        self.hidden = max(64, int((-b + (b * b + 4 * a * params) ** 0.5) / (2 * a)) // 64 * 64)

    def logical_bytes(self):
        n = 0
        for _, shape, _, stacked in param_specs(self.hidden, self.vocab):
            n += int(torch.Size(shape).numel()) * (self.layers if stacked else 1)
        return 10 * n

    def save(self, root, iteration=None, node_loss=None):
        """root: a directory, or a list of them (rank r saves under root[r % len(root)]);
        iteration and node_loss: see workloads' docstring."""
        _make_checkpoint_dirs(root, iteration)
        return wl.run_distributed(_save_rank, self.ranks, (root, self, False, iteration),
                                  node_loss=node_loss)[0]

    def save_async(self, root):
        """Saves through AsyncCallsQueue; per rank, a dict: the markers of a finished save
        (.metadata, metadata.json) in the checkpoint when the save was scheduled
        (`when_scheduled`) and when it was finalized (`when_finalized`), and the seconds from the
        start until then (`scheduled_s`, `finalized_s`)."""
        _make_checkpoint_dirs(root, None)
        return wl.run_distributed(_save_rank, self.ranks, (root, self, True, None))[1]

    def async_save_seconds(self, root):
        """save_async's (seconds until the save was scheduled, until it was finalized), the
        slowest rank's."""
        ranks = self.save_async(root)
        return max(r["scheduled_s"] for r in ranks), max(r["finalized_s"] for r in ranks)

    def load(self, root, check=True):
        return wl.run_distributed(_load_rank, 1, (root, self, check))[1][0]

    def load_seconds(self, root):
        return wl.run_distributed(_load_rank, 1, (root, self, False))[0]

    def expected_digest(self):
        return wl.digest(expected_state(self))


def _make_checkpoint_dirs(root, iteration):
    """dist_checkpointing.save wants an existing directory: made through each root in turn."""
    for r in dict.fromkeys(root if isinstance(root, (list, tuple)) else [root]):
        os.makedirs(wl.checkpoint_dir(r, iteration), exist_ok=True)


def _warm_up_write_results_queue():
    """Megatron's writers report through a queue served by a spawned Manager that a trainer
    starts at its first checkpoint; start it before the clock does."""
    from megatron.core.dist_checkpointing.strategies.filesystem_async import _get_write_results_queue
    from torch.distributed.checkpoint.metadata import MetadataIndex
    q = _get_write_results_queue()
    q.put(MetadataIndex("warm-up"))
    q.get()


def _strategy():
    from megatron.core.dist_checkpointing.strategies.fully_parallel import (
        FullyParallelSaveStrategyWrapper)
    from megatron.core.dist_checkpointing.strategies.torch import TorchDistSaveShardedStrategy
    return FullyParallelSaveStrategyWrapper(TorchDistSaveShardedStrategy("torch_dist", 1))


@wl.distributed_rank
def _save_rank(rank, barrier, root, w, asynchronous, iteration):
    from megatron.core import dist_checkpointing
    from megatron.core.dist_checkpointing.strategies.async_utils import AsyncCallsQueue
    apply_cpu_patches()
    _warm_up_write_results_queue()
    root = wl.rank_root(root, rank)
    ckpt = wl.checkpoint_dir(root, iteration)
    state = sharded_state_dict(w, rank % TP, TP, rank // TP)
    barrier.wait()
    if not asynchronous:
        dist_checkpointing.save(state, ckpt, sharded_strategy=_strategy())
        wl.tracker_after_save(rank, root, iteration)
        return None

    def markers():
        return [name for name in (".metadata", "metadata.json")
                if os.path.exists(os.path.join(ckpt, name))]
    calls = AsyncCallsQueue()
    start = time.monotonic()
    request = dist_checkpointing.save(state, ckpt, sharded_strategy=_strategy(),
                                      async_sharded_save=True)
    calls.schedule_async_request(request)
    scheduled_s = time.monotonic() - start
    # No rank has finalized yet: finalizing takes every rank (a gather, then a barrier).
    when_scheduled = markers()
    finalized = calls.maybe_finalize_async_calls(blocking=True)
    finalized_s = time.monotonic() - start
    calls.close()
    assert finalized == [0], f"finalized async calls: {finalized}"
    return {"when_scheduled": when_scheduled, "when_finalized": markers(),
            "scheduled_s": scheduled_s, "finalized_s": finalized_s}


@wl.distributed_rank
def _load_rank(rank, barrier, root, w, check):
    from megatron.core import dist_checkpointing
    apply_cpu_patches()
    state = sharded_state_dict(w, 0, 1)
    barrier.wait()
    loaded = dist_checkpointing.load(state, root)
    return wl.digest(loaded) if check else None
