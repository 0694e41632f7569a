"""zarr_dist: Megatron-core / NeMo distributed checkpoint, zarr backend, with the distributed
optimizer, 2 rank processes."""
import json
import os

import numpy as np

from .checkpoint import ITERATION, Workload
from .data import Digest, fdata, torch_load
from .distopt import (DISTOPT_PREFIX, digest_shards, load_pieces, piece_bounds_of,
                      write_zarr_metadata)
from .gpt import megatron_args, rng_state
from .ranks import rank_main, run_ranks


class ZarrDist(Workload):
    name = "zarr_dist"
    description = "Megatron dist ckpt, zarr backend + distributed optimizer, 2 ranks"
    ranks = 2

    def __init__(self, nbytes, pieces=16):
        super().__init__(nbytes)
        # 40% of the bytes: fp16 model tensors (tensor-parallel over the 2 ranks);
        # 60%: the distributed optimizer's 3 fp32 arrays (param, exp_avg, exp_avg_sq).
        params = max(1, int(self.nbytes * 0.4) // 2)
        self.hidden = 512 if params < 30_000_000 else 1024
        self.vocab = 8192
        self.layers = max(1, int(round((params - self.vocab * self.hidden) / (12 * self.hidden ** 2))))
        self.shard = max(1024, int(self.nbytes * 0.6) // (3 * 4 * self.ranks))  # floats per rank
        self.pieces = pieces

    def model_tensors(self):
        """(key, global shape, chunk shape, tp split dim or None for replicated)."""
        h, l, v, r = self.hidden, self.layers, self.vocab, self.ranks
        return [
            ("model.embedding.word_embeddings.weight", (v, h), (v // r, h), 0),
            ("model.decoder.layers.input_layernorm.weight", (l, h), (1, h), None),
            ("model.decoder.layers.self_attention.linear_qkv.weight", (l, 3 * h, h), (1, 3 * h // r, h), 1),
            ("model.decoder.layers.self_attention.linear_proj.weight", (l, h, h), (1, h, h // r), 2),
            ("model.decoder.layers.mlp.linear_fc1.weight", (l, 4 * h, h), (1, 4 * h // r, h), 1),
            ("model.decoder.layers.mlp.linear_fc2.weight", (l, h, 4 * h), (1, h, 4 * h // r), 2),
            ("model.decoder.final_layernorm.weight", (h,), (h,), None),
        ]

    def piece_bounds(self, rank):
        """The [start, stop) ranges (global coordinates) of the parameters in rank's shard:
        uneven sizes, like real parameters, covering the shard exactly."""
        return piece_bounds_of(self.shard, self.pieces, rank)

    def common_state(self):
        return {"iteration": ITERATION, "args": megatron_args(self.hidden, self.layers, self.vocab, 2, 1),
                "rng_state": [rng_state(3)], "checkpoint_version": 3.0,
                "optimizer": {"param_groups": [{"lr": 3e-4, "betas": (0.9, 0.95), "eps": 1e-8,
                                                "weight_decay": 0.1, "step": ITERATION}]},
                "opt_param_scheduler": {"max_lr": 3e-4, "num_steps": ITERATION * 512}}

    def logical_bytes(self):
        n = 0
        for _, shape, _, _ in self.model_tensors():
            n += int(np.prod(shape)) * 2
        return n + 3 * self.ranks * self.shard * 4

    def save(self, root):
        elapsed, _ = run_ranks(_zarr_rank, self.ranks, (root, self))
        return elapsed

    def _tp_slices(self, shape, chunk, split, rank):
        if split is None:
            return tuple(slice(0, n) for n in shape)
        sl = [slice(0, n) for n in shape]
        sl[split] = slice(rank * chunk[split], (rank + 1) * chunk[split])
        return tuple(sl)

    def load(self, root, check=True):
        """Like a resharding loader: each rank's slice of each tensor, each parameter's slice of
        each optimizer shard, read separately."""
        import torch
        import zarr
        with open(os.path.join(root, "metadata.json")) as f:
            meta = json.load(f)
        assert meta["sharded_backend"] == "zarr", meta
        d = Digest() if check else None
        common = torch_load(os.path.join(root, "common.pt"))
        if d:
            d.add(common)
        for key, shape, chunk, split in self.model_tensors():
            arr = zarr.open(os.path.join(root, key), mode="r")
            assert arr.shape == shape and arr.dtype == np.float16, (key, arr.shape, arr.dtype)
            for r in range(self.ranks):
                piece = arr[self._tp_slices(shape, chunk, split, r)]
                if d:
                    d.add(piece)
        for kind in ("param", "exp_avg", "exp_avg_sq"):
            load_pieces(d, zarr.open(os.path.join(root, DISTOPT_PREFIX + kind), mode="r"), self)
        return d.hexdigest() if d else None

    def expected_digest(self):
        d = Digest()
        d.add(self.common_state())
        for key, shape, chunk, split in self.model_tensors():
            full = fdata("zarr/" + key, int(np.prod(shape)), np.float16).reshape(shape)
            for r in range(self.ranks):
                d.add(np.ascontiguousarray(full[self._tp_slices(shape, chunk, split, r)]))
        digest_shards(d, "zarr", ("param", "exp_avg", "exp_avg_sq"), self)
        return d.hexdigest()


@rank_main
def _zarr_rank(rank, barrier, root, w):
    import numcodecs
    import torch
    import zarr
    numcodecs.blosc.use_threads = False  # Deterministic chunk bytes (see the module docstring).
    # Data this rank holds: its tensor-parallel slice of every model tensor (the replicated ones
    # are written by rank 0 only, the main replica), and its optimizer shard.
    model = []
    for key, shape, chunk, split in w.model_tensors():
        if split is None and rank != 0:
            continue
        full = fdata("zarr/" + key, int(np.prod(shape)), np.float16).reshape(shape)
        sl = w._tp_slices(shape, chunk, split, rank)
        model.append((key, sl, np.ascontiguousarray(full[sl])))
    opt = {kind: fdata(f"zarr/{kind}/rank{rank}", w.shard) for kind in ("param", "exp_avg", "exp_avg_sq")}
    barrier.wait()

    os.makedirs(root, exist_ok=True)
    if rank == 0:
        torch.save(w.common_state(), os.path.join(root, "common.pt"))
        # The rank holding each tensor's first chunk creates the array (here rank 0 for all).
        for key, shape, chunk, _ in w.model_tensors():
            zarr.create(shape, dtype=np.float16, store=os.path.join(root, key), chunks=chunk,
                        overwrite=True, fill_value=None, write_empty_chunks=True)
        for kind in opt:
            zarr.create((w.ranks * w.shard,), dtype=np.float32, compressor=None,
                        store=os.path.join(root, DISTOPT_PREFIX + kind), chunks=(w.shard,),
                        overwrite=True, fill_value=None, write_empty_chunks=True)
    barrier.group.wait()
    for key, sl, data in model:
        arr = zarr.open(os.path.join(root, key), mode="r+")
        arr[sl] = data
    for kind, flat in opt.items():
        key = DISTOPT_PREFIX + kind
        sync = zarr.ProcessSynchronizer(os.path.join(root, key + ".sync"))
        arr = zarr.open(os.path.join(root, key), mode="r+", synchronizer=sync)
        for a, b in w.piece_bounds(rank):  # One parameter at a time, as Megatron does.
            arr.set_coordinate_selection(np.arange(a, b), flat[a - rank * w.shard:b - rank * w.shard])
    barrier.group.wait()
    if rank == 0:
        write_zarr_metadata(root)
    return None
