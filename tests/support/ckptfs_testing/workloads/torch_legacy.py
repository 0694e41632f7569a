"""torch_legacy: torch.save of a GPT state dict, Megatron's legacy layout."""
import os

import numpy as np

from .checkpoint import ITERATION, Workload, read_tracker, write_tracker
from .data import digest, torch_load
from .gpt import gpt_dims, gpt_param_shapes, gpt_state_dict
from .ranks import rank_main, run_ranks


class TorchLegacy(Workload):
    name = "torch_legacy"
    description = "torch.save GPT state dict, Megatron legacy layout"

    def __init__(self, nbytes):
        super().__init__(nbytes)
        self.dims = gpt_dims(self.nbytes)

    def _sd(self):
        return gpt_state_dict("legacy", *self.dims)

    def logical_bytes(self):
        h, l, v = self.dims
        return sum(int(np.prod(s)) for _, s in gpt_param_shapes(h, l, v)) * 14

    def save(self, root):
        elapsed, _ = run_ranks(_torch_legacy_rank, 1, (root, self.dims))
        return elapsed

    def load(self, root, check=True):
        import torch
        it = read_tracker(root)
        sd = torch_load(os.path.join(root, f"iter_{it:07d}", "mp_rank_00", "model_optim_rng.pt"))
        return digest(it, sd) if check else None

    def expected_digest(self):
        return digest(ITERATION, self._sd())


@rank_main
def _torch_legacy_rank(rank, barrier, root, dims):
    import torch
    sd = gpt_state_dict("legacy", *dims)
    barrier.wait()
    d = os.path.join(root, f"iter_{ITERATION:07d}", "mp_rank_00")
    os.makedirs(d, exist_ok=True)
    torch.save(sd, os.path.join(d, "model_optim_rng.pt"))
    write_tracker(root)
    return None
