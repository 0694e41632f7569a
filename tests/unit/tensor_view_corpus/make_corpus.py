"""Makes the seed files of the tensor view's reader tests and fuzz test (run from this directory
with the project's .venv; the outputs are kept in the repository):

  dcp.metadata      .metadata of a DCP save by one rank: 2-D, 1-D and 0-d tensors, bfloat16,
                    nested keys, byte items
  shard.distcp      the .distcp file of that save (its shards are torch.save archives)
  weight.raw        the bytes of that save's model.layer.weight (float32 [6, 4]), and
  bias.raw          of its model.layer.bias (bfloat16 [4]), as the view must serve them
  state_dict.pt     torch.save of a nested state dict: OrderedDict, a Parameter, a view with a
                    storage offset, an optimizer-like state, ints, floats, strings, None
  protocol0.pkl     the same kind of nested dict as protocol 0 (text opcodes)
  misfit.pt         torch.save of tensors described by hand over one 4-element float32
                    storage: one that fits it and ones that do not (past its end, at an
                    offset or with more elements than 64 bits count, a dimension too large)
"""

import collections
import io
import os
import pickle
import shutil
import tempfile

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.metadata import ChunkStorageMetadata  # noqa: F401  (format)

torch.manual_seed(0)
here = os.path.dirname(os.path.abspath(__file__))

with tempfile.TemporaryDirectory() as d:
    state = {
        "model": {"layer.weight": torch.randn(6, 4), "layer.bias": torch.randn(4).to(torch.bfloat16)},
        "optim": {"state": {0: {"step": torch.tensor(3.0), "exp_avg": torch.randn(6, 4)}}, "lr": 0.1},
        "iteration": 7,
        "name": "run/1",
    }
    dcp.save(state, checkpoint_id=d)
    shutil.copy(os.path.join(d, ".metadata"), os.path.join(here, "dcp.metadata"))
    shutil.copy(os.path.join(d, "__0_0.distcp"), os.path.join(here, "shard.distcp"))
    for name, key in (("weight.raw", "layer.weight"), ("bias.raw", "layer.bias")):
        with open(os.path.join(here, name), "wb") as f:
            f.write(state["model"][key].view(torch.uint8).numpy().tobytes())

base = torch.arange(20, dtype=torch.float32)
nested = collections.OrderedDict(
    model=collections.OrderedDict(w=torch.nn.Parameter(torch.ones(2, 3)), tail=base[5:9]),
    optimizer={"state": {0: {"exp_avg": torch.zeros(3, dtype=torch.bfloat16)}}, "param_groups": [{"lr": 1e-3, "params": [0]}]},
    args={"iteration": 12, "note": None, "ratio": 0.5, "name": "gpt"},
)
torch.save(nested, os.path.join(here, "state_dict.pt"))

with open(os.path.join(here, "protocol0.pkl"), "wb") as f:
    f.write(pickle.dumps({"a": [1, 2.5, "x", None, True], "b": (3, -4, 2**70), "c": {"d": b"\x00\x01"}}, protocol=0))


class Rebuilt:
    """Pickles as torch pickles a tensor, with the storage, offset, shape and stride given."""

    def __init__(self, storage, offset, shape, stride):
        self.args = (storage, offset, shape, stride, False, collections.OrderedDict())

    def __reduce_ex__(self, protocol):
        return torch._utils._rebuild_tensor_v2, self.args


storage = torch.arange(4, dtype=torch.float32).untyped_storage()
storage = torch.storage.TypedStorage(wrap_storage=storage, dtype=torch.float32, _internal=True)
torch.save({"fits": Rebuilt(storage, 0, (2, 2), (2, 1)),
            "past_end": Rebuilt(storage, 2, (4,), (1,)),
            "far_offset": Rebuilt(storage, 2**62, (1,), (1,)),
            "too_many_elements": Rebuilt(storage, 0, (2**32, 2**32), (2**32, 1)),
            "too_long": Rebuilt(storage, 0, (2**49,), (1,))},
           os.path.join(here, "misfit.pt"))
