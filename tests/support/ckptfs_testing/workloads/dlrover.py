"""dlrover: DLRover's flash-checkpoint layout, 4 rank processes in parallel."""
import os
import time

import numpy as np

from .checkpoint import ITERATION, Workload, read_tracker, write_tracker
from .data import Digest, tensor, torch_load
from .gpt import gpt_param_shapes, gpt_state_dict
from .ranks import rank_main, run_ranks


class DLRover(Workload):
    name = "dlrover"
    description = "DLRover flash ckpt: mp_rank_TT_PPP + rank_RRRR, 4 ranks in parallel"
    tp, pp = 2, 2

    def __init__(self, nbytes):
        super().__init__(nbytes)
        self.ranks = self.tp * self.pp
        # Each rank holds its pipeline stage's layers, tensor-parallel-sliced: fp16 weights in
        # model_optim_rng.pt; fp32 param/exp_avg/exp_avg_sq flat buffers in distrib_optim.pt.
        per_rank = self.nbytes // self.ranks
        params = max(1, per_rank // 14)
        self.hidden = 512 if params < 20_000_000 else 1024
        self.vocab = 8192
        self.layers = max(1, int(round((params * self.tp - self.vocab * self.hidden / self.pp)
                                       / (12 * self.hidden ** 2))))

    def rank_coords(self, rank):
        return rank % self.tp, rank // self.tp

    def rank_shapes(self, rank):
        tp_rank, _ = self.rank_coords(rank)
        return gpt_param_shapes(self.hidden, self.layers, self.vocab, self.tp, tp_rank)

    def rank_state(self, rank):
        tp_rank, pp_rank = self.rank_coords(rank)
        sd = gpt_state_dict(f"dlrover/r{rank}", self.hidden, self.layers, self.vocab, self.tp,
                            tp_rank, self.pp, with_optimizer=False)
        sd["optimizer"] = {"param_groups": [{"lr": 3e-4, "step": ITERATION}],
                           "grad_scaler": {"scale": 65536.0}}
        numel = sum(int(np.prod(s)) for _, s in self.rank_shapes(rank))
        optim = {"per_bucket_numel": [numel], "per_bucket_numel_unpadded": [numel],
                 "param_state": {0: {k: tensor(f"dlrover/r{rank}/{k}", (numel,))
                                     for k in ("param", "exp_avg", "exp_avg_sq")}}}
        return sd, optim

    def paths(self, root, rank):
        tp_rank, pp_rank = self.rank_coords(rank)
        it = os.path.join(root, f"iter_{ITERATION:07d}")
        return (os.path.join(it, f"mp_rank_{tp_rank:02d}_{pp_rank:03d}", "model_optim_rng.pt"),
                os.path.join(it, f"rank_{rank:04d}", "distrib_optim.pt"))

    def logical_bytes(self):
        return sum(sum(int(np.prod(s)) for _, s in self.rank_shapes(r)) * 14 for r in range(self.ranks))

    def save(self, root):
        elapsed0, _ = run_ranks(_dlrover_rank, self.ranks, (root, self))
        t = time.monotonic()
        write_tracker(root)  # Rank 0's tracker, after every rank's files.
        return elapsed0 + time.monotonic() - t

    def load(self, root, check=True):
        import torch
        it = read_tracker(root)
        assert it == ITERATION
        d = Digest() if check else None
        for r in range(self.ranks):
            for p in self.paths(root, r):
                obj = torch_load(p)
                if d:
                    d.add(obj)
        return d.hexdigest() if d else None

    def expected_digest(self):
        d = Digest()
        for r in range(self.ranks):
            for obj in self.rank_state(r):
                d.add(obj)
        return d.hexdigest()


@rank_main
def _dlrover_rank(rank, barrier, root, w):
    import torch
    sd, optim = w.rank_state(rank)
    barrier.wait()
    model_path, optim_path = w.paths(root, rank)
    os.makedirs(os.path.dirname(model_path), exist_ok=True)
    os.makedirs(os.path.dirname(optim_path), exist_ok=True)
    torch.save(sd, model_path)
    torch.save(optim, optim_path)
    return None
