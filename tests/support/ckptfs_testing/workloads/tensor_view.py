"""A DCP checkpoint saved by 2 ranks with every kind of sharding the tensor view serves, and what
the view must show of any DCP checkpoint.

save(root): dcp.save by 2 gloo ranks of
  dt.even    DTensor Shard(0), float32 [8, 6]: 4 + 4 rows (the shards' own grid)
  dt.edge    DTensor Shard(0), bfloat16 [7, 5]: 4 + 3 rows (zarr's edge chunk, padded)
  dt.cols    DTensor Shard(1), float32 [4, 7]: 4 + 3 columns (padded row by row)
  st.uneven  ShardedTensor, float32 [10, 6]: rows 0-2 on rank 0, 3-9 on rank 1 (no regular grid)
  st.blocks  ShardedTensor, bfloat16 [6, 6]: columns 0-1 on rank 0; rows 0-2 and 3-5 of columns
             2-5 on rank 1 (two local shards)
  plain.bias a replicated float64 [5]; scalar, a 0-d tensor; step and meta.name, byte items.
Values are deterministic (each tensor an arange scaled by its index and the save's version), the
same for every rank.

reference(ckpt): every tensor of a DCP checkpoint, loaded whole by DCP's own loader
(format_utils.dcp_to_torch_save), by fully qualified name.
read_view(ckpt): what the view shows: info.json, and each tensor read with zarr.
"""

import json
import os
import tempfile

import numpy as np
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor

from ckptfs_testing import workloads as wl

VIEW = ".tensors"

SHAPES = {
    "dt.even": ((8, 6), torch.float32),
    "dt.edge": ((7, 5), torch.bfloat16),
    "dt.cols": ((4, 7), torch.float32),
    "st.uneven": ((10, 6), torch.float32),
    "st.blocks": ((6, 6), torch.bfloat16),
    "plain.bias": ((5,), torch.float64),
    "scalar": ((), torch.float32),
}


def full(name, version=1):
    shape, dtype = SHAPES[name]
    k = list(SHAPES).index(name) + version
    n = int(torch.Size(shape).numel())
    return (torch.arange(n, dtype=torch.float64) * 0.25 * k - 3).reshape(shape).to(dtype)


def _sharded(name, rank, boxes, version):
    from torch.distributed._shard.metadata import ShardMetadata
    from torch.distributed._shard.sharded_tensor import Shard as LocalShard
    from torch.distributed._shard.sharded_tensor import init_from_local_shards
    t = full(name, version)
    local = []
    for owner, offsets, sizes in boxes:
        if owner != rank:
            continue
        part = t[tuple(slice(o, o + s) for o, s in zip(offsets, sizes))].contiguous()
        local.append(LocalShard(part, ShardMetadata(list(offsets), list(sizes), f"rank:{rank}/cpu")))
    return init_from_local_shards(local, list(t.shape))


@wl.distributed_rank
def _save_rank(rank, barrier, root, version):
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    v = version
    state = {
        "dt": {"even": distribute_tensor(full("dt.even", v), mesh, [Shard(0)]),
               "edge": distribute_tensor(full("dt.edge", v), mesh, [Shard(0)]),
               "cols": distribute_tensor(full("dt.cols", v), mesh, [Shard(1)])},
        "st": {"uneven": _sharded("st.uneven", rank, [(0, (0, 0), (3, 6)), (1, (3, 0), (7, 6))], v),
               "blocks": _sharded("st.blocks", rank, [(0, (0, 0), (6, 2)), (1, (0, 2), (3, 4)),
                                                      (1, (3, 2), (3, 4))], v)},
        "plain": {"bias": full("plain.bias", v)},
        "scalar": full("scalar", v),
        "step": 12,
        "meta": {"name": "run-1"},
    }
    barrier.wait()
    dcp.save(state, storage_writer=dcp.FileSystemWriter(root, thread_count=2, sync_files=True))


def save(root, version=1):
    """The save above; `version` changes every value (the same shapes)."""
    return wl.run_distributed(_save_rank, 2, (root, version))[0]


def _flatten(obj, prefix, out):
    if isinstance(obj, dict):
        for k, v in obj.items():
            _flatten(v, f"{prefix}.{k}" if prefix else str(k), out)
    elif isinstance(obj, (list, tuple)) and not isinstance(obj, torch.Size):
        for i, v in enumerate(obj):
            _flatten(v, f"{prefix}.{i}", out)
    else:
        out[prefix] = obj
    return out


def reference(ckpt):
    """{fqn: tensor} of every tensor of the DCP checkpoint at ckpt, as DCP loads it."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "full.pt")
        dcp_to_torch_save(ckpt, out)
        state = torch.load(out, weights_only=False)
    return {k: v for k, v in _flatten(state, "", {}).items() if isinstance(v, torch.Tensor)}


def metadata_shapes(ckpt):
    """{fqn: (shape, torch dtype name)} of the tensors .metadata lists."""
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata
    md = dcp.FileSystemReader(ckpt).read_metadata()
    return {k: (tuple(v.size), str(v.properties.dtype).removeprefix("torch."))
            for k, v in md.state_dict_metadata.items() if isinstance(v, TensorStorageMetadata)}


def as_served(t):
    """A tensor as the view serves it: numpy, bfloat16 as its raw bits (uint16)."""
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(np.uint16)
    return t.numpy()


def view_chunks(ckpt):
    """{path in the view: bytes} of every chunk file of the view of ckpt."""
    view = os.path.join(ckpt, VIEW)
    out = {}
    for root, _, files in os.walk(view):
        for name in files:
            if name[0].isdigit():
                path = os.path.join(root, name)
                with open(path, "rb") as f:
                    out[os.path.relpath(path, view)] = f.read()
    return out


def read_view(ckpt):
    """(info.json, {fqn: numpy array read with zarr}) of the view of the checkpoint at ckpt."""
    import zarr
    view = os.path.join(ckpt, VIEW)
    with open(os.path.join(view, "info.json")) as f:
        info = json.load(f)
    arrays = {t["fqn"]: zarr.open(os.path.join(view, t["path"]), mode="r")[...] for t in info["tensors"]}
    return info, arrays


def _flatten_keys(obj, prefix, out):
    """torch.load's result by the key paths the view uses ("a/b/0")."""
    if isinstance(obj, dict):
        items = obj.items()
    elif isinstance(obj, (list, tuple)) and not isinstance(obj, torch.Size):
        items = enumerate(obj)
    else:
        out[prefix] = obj
        return out
    for k, v in items:
        _flatten_keys(v, f"{prefix}/{k}" if prefix else str(k), out)
    return out


def torch_reference(path):
    """{key path: tensor} of every tensor of the torch.save file at path, as torch.load reads it."""
    state = torch.load(path, weights_only=False)
    return {k: v for k, v in _flatten_keys(state, "", {}).items() if isinstance(v, torch.Tensor)}


def read_torch_view(path):
    """(info.json's entry of the torch.save file at path, {key path: numpy array read with zarr})."""
    import zarr
    view = os.path.join(os.path.dirname(path), VIEW)
    with open(os.path.join(view, "info.json")) as f:
        info = json.load(f)
    entry = next(e for e in info["files"] if e["file"] == os.path.basename(path))
    arrays = {t["key"]: zarr.open(os.path.join(view, t["path"]), mode="r")[...] for t in entry["tensors"]}
    return entry, arrays


def save_optimizer_state(path):
    """torch.save of a model's and an Adam optimizer's state dicts after one step (bfloat16
    parameters, fp32 state, a step counter per parameter), with a transposed (not row-major)
    tensor and a slice of a larger storage beside them."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.LayerNorm(4)).to(torch.bfloat16)
    optim = torch.optim.Adam(model.parameters(), lr=1e-3)
    model(torch.randn(3, 6, dtype=torch.bfloat16)).float().sum().backward()
    optim.step()
    base = torch.arange(30, dtype=torch.float32)
    torch.save({"model": model.state_dict(), "optimizer": optim.state_dict(),
                "extra": {"transposed": torch.arange(6.0).reshape(2, 3).t(), "slice": base[7:19].view(3, 4)},
                "iteration": 3}, path)
