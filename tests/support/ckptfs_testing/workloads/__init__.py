"""Checkpoint workloads shared by the end-to-end tests (tests/e2e) and the benchmark (scripts/bench).

Each workload writes, under a root directory, what a real trainer's save code writes, with the
real libraries (torch.save, zarr), from separate processes where a trainer has several ranks:

    torch_legacy  Megatron legacy layout: iter_0000100/mp_rank_00/model_optim_rng.pt (a GPT-style
                  state dict: fp16 weights, fp32 master weights and Adam state), then
                  latest_checkpointed_iteration.txt last.
    zarr_dist     Megatron-core / NeMo distributed checkpoint, zarr backend, 2 rank processes:
                  common.pt, one directory per sharded tensor (.zarray + chunk files 0.0.0 ...),
                  and the distributed-optimizer pattern (per rank one float32 chunk holding the
                  rank's whole flattened optimizer shard, filled parameter by parameter with
                  set_coordinate_selection under a zarr.ProcessSynchronizer whose lock files live
                  in <key>.sync/ inside the checkpoint), metadata.json last, by rank 0.
    zarr_distopt  the distributed-optimizer pattern alone, 2 rank processes: per rank one chunk
                  of a float32 array holding the rank's whole optimizer shard (200 MiB at bench
                  size), filled by 60 uneven set_coordinate_selection pieces under a
                  ProcessSynchronizer, metadata.json last; fine_chunks=True makes zarr itself use
                  1 MiB chunks (the floor). Loads slice by slice, or (load_whole_region, one
                  process per rank) as Megatron does: every piece re-reads its rank's whole
                  region.
    dlrover       DLRover flash-checkpoint layout, 4 rank processes in parallel:
                  iter_0000100/mp_rank_TT_PPP/model_optim_rng.pt and
                  iter_0000100/rank_RRRR/distrib_optim.pt, tracker last.
    dcp           real PyTorch DCP (dcp.py): dcp.save of a DTensor-sharded GPT + Adam
                  from 2 rank processes (gloo), FileSystemWriter(thread_count=2, sync_files=True).
    dcp_small     real PyTorch DCP (dcp_small.py): dcp.save of 10,000 tensors of 4 KiB from one
                  process, FileSystemWriter's defaults: one small write per tensor.
    seq           a few large files written sequentially (8 MiB writes).
    small         many small files (1-64 KiB) in 100 directories.

Data is deterministic (a fixed random pool, shifted and scaled per tensor name), so a run on a
plain directory and a run through ckptfs must produce byte-identical trees. torch.save output is
deterministic for the same object and file name (checked in the tests by comparing bytes). zarr's
Blosc compressor is not deterministic with threads (blocks are stored in completion order), so
the workers set numcodecs.blosc.use_threads = False; everything else is what Megatron does.

Every workload has save(root) -> seconds (data generation excluded, process start-up excluded:
ranks generate their data, meet at a barrier, and the clock runs from the barrier to the last
byte of the tracker/metadata), load(root, check) -> digest (the way a loader reads it back), and
expected_digest() (the same digest computed from the generated data).

The real libraries' saves (dcp, mcore_torch_dist) also take a list of roots: rank r saves under
roots[r % len(roots)], one checkpoint seen through several mounts of one backing directory (one
mount per node); save(..., iteration=N) saves into <root>/iter_000000N and has rank 0 write
the tracker latest_checkpointed_iteration.txt after a barrier, as Megatron's trainer does; and
save(..., node_loss=NodeLoss()) lets a save run on while some ranks' node dies (NodeLoss).

One module per workload (the name make() takes); what they share: data.py (the deterministic
data and digests), ranks.py (the rank processes, their start line and totals), gpt.py (GPT-style
state dicts), checkpoint.py (Megatron's layout, the Workload interface), distopt.py (the
distributed optimizer's zarr pattern).
"""
import importlib

from .checkpoint import (ITERATION, TRACKER, Workload, checkpoint_dir, rank_root,  # noqa: F401
                         tracker_after_save)
from .data import Digest, digest, fdata, pool_bytes, tensor, torch_load  # noqa: F401
from .dlrover import DLRover
from .gpt import gpt_dims, gpt_param_shapes, gpt_state_dict, rng_state  # noqa: F401
from .ranks import (NodeLoss, distributed_rank, rank_main, run_distributed,  # noqa: F401
                    run_ranks)
from .seq import SeqWrite
from .small import SmallFiles
from .torch_legacy import TorchLegacy
from .zarr_dist import ZarrDist
from .zarr_distopt import ZarrDistOpt


def make(name, scale=1.0, for_test=False, **kw):
    """The workload `name` at bench size x scale (or the smaller size the tests use); kw go to
    its constructor (e.g. fine_chunks=True for zarr_distopt)."""
    MB = 1 << 20
    if for_test:
        sizes = {"torch_legacy": 200 * MB, "zarr_dist": 100 * MB, "zarr_distopt": 32 * MB,
                 "dlrover": 160 * MB, "dcp": 120 * MB, "mcore_torch_dist": 120 * MB,
                 "nvrx_local": 64 * MB, "safetensors": 1024 * MB, "seq": 256 * MB, "small": 2000,
                 "dcp_small": 2000}
    else:
        sizes = {"torch_legacy": 512 * MB, "zarr_dist": 256 * MB, "zarr_distopt": 400 * MB,
                 "dlrover": 512 * MB, "dcp": 1024 * MB, "mcore_torch_dist": 1024 * MB,
                 "nvrx_local": 1024 * MB, "safetensors": 1024 * MB, "seq": 4096 * MB,
                 "small": 20000, "dcp_small": 10000}
    n = int(sizes[name] * scale)
    if name in REAL_LIBRARY_WORKLOADS:  # Imported on demand: they take seconds to import.
        module, cls_name = REAL_LIBRARY_WORKLOADS[name]
        cls = getattr(importlib.import_module("." + module, __package__), cls_name)
    else:
        cls = {"torch_legacy": TorchLegacy, "zarr_dist": ZarrDist, "zarr_distopt": ZarrDistOpt,
               "dlrover": DLRover, "seq": SeqWrite, "small": SmallFiles}[name]
    return cls(n, **kw)


# Workloads that run a library's own checkpointing code, each in a module of its own.
REAL_LIBRARY_WORKLOADS = {
    "dcp": ("dcp", "DCP"),
    "dcp_small": ("dcp_small", "DCPSmall"),
    "mcore_torch_dist": ("mcore_torch_dist", "MCoreTorchDist"),
    "nvrx_local": ("nvrx_local", "NVRxLocal"),
    "safetensors": ("safetensors", "Safetensors"),
}


ALL = ["seq", "small", "torch_legacy", "zarr_dist", "zarr_distopt", "dlrover", "dcp", "dcp_small",
       "mcore_torch_dist", "nvrx_local", "safetensors"]
