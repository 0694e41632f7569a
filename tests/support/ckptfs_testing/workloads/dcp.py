"""PyTorch DCP, the real thing: torch.distributed.checkpoint.save, async_save and load.

Each rank process (torch.distributed with gloo on the CPU) holds a small GPT-like model whose
parameters are DTensors sharded along their first dimension (Shard(0) on a 1-D CPU mesh) and an
Adam optimizer after one step (exp_avg, exp_avg_sq). The state dict comes from
torch.distributed.checkpoint.state_dict.get_state_dict and is written with
dcp.save(storage_writer=FileSystemWriter(root, thread_count=2, sync_files=True)): per rank
__R_0.distcp and __R_1.distcp, each fsynced, then .metadata (written as .metadata.tmp, fsynced,
renamed) by rank 0. Loads read it back into a model sharded over any number of ranks
(resharding) and push it through set_state_dict.

save(roots, ranks=3) spreads 3 ranks over several roots (rank r under roots[r % len(roots)]);
with iteration=N each saves into <root>/iter_000000N and rank 0 writes Megatron's tracker after
the save (workloads.tracker_after_save).

Data is deterministic (workloads.tensor), so the digest of the full (unsharded) state is the
same for every rank count. .metadata is not byte-deterministic: it records a random save id
and the checkpoint's path (see e2e_check's `varying`).
"""

import contextlib
import hashlib
import os
import shutil
import tempfile
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn as nn
from torch.distributed.checkpoint.filesystem import FileSystem
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Shard, distribute_tensor

from ckptfs_testing import workloads as wl

MiB = 1 << 20


class _Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.ln1 = nn.LayerNorm(d, device="meta")
        self.qkv = nn.Linear(d, 3 * d, device="meta")
        self.proj = nn.Linear(d, d, device="meta")
        self.ln2 = nn.LayerNorm(d, device="meta")
        self.fc1 = nn.Linear(d, 4 * d, device="meta")
        self.fc2 = nn.Linear(4 * d, d, device="meta")


class TinyGPT(nn.Module):
    """The parameter tree of a GPT decoder (names and shapes; no forward pass is needed)."""

    def __init__(self, vocab, d, layers):
        super().__init__()
        self.embedding = nn.Embedding(vocab, d, device="meta")
        self.blocks = nn.ModuleList(_Block(d) for _ in range(layers))
        self.final_ln = nn.LayerNorm(d, device="meta")
        self.lm_head = nn.Linear(d, vocab, bias=False, device="meta")


def build(dims, mesh, fill):
    """(model, Adam) with every parameter a Shard(0) DTensor on `mesh`. fill: deterministic
    values and one Adam step on deterministic gradients; otherwise zeros (a load target)."""
    model = TinyGPT(*dims)
    for name, p in list(model.named_parameters()):
        owner, _, attr = name.rpartition(".")
        full = wl.tensor(f"dcp/{name}", tuple(p.shape)) if fill else torch.zeros(p.shape)
        setattr(model.get_submodule(owner), attr, nn.Parameter(distribute_tensor(full, mesh, [Shard(0)])))
    optim = torch.optim.Adam(model.parameters(), lr=1e-3)
    if fill:
        for name, p in model.named_parameters():
            p.grad = distribute_tensor(wl.tensor(f"dcp/grad/{name}", tuple(p.shape)), mesh, [Shard(0)])
        optim.step()
        optim.zero_grad(set_to_none=True)
    return model, optim


def state_dict(model, optim):
    msd, osd = get_state_dict(model, optim)
    return {"model": msd, "optim": osd}


def full_digest(state):
    """Digest of the unsharded state in canonical order. Collective (DTensor.full_tensor)."""
    def full(obj):
        if isinstance(obj, DTensor):
            return obj.full_tensor()
        if isinstance(obj, dict):
            return {k: full(v) for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return type(obj)(full(v) for v in obj)
        return obj
    return wl.digest(full(state))


class DCP(wl.Workload):
    name = "dcp"
    description = ("PyTorch DCP save: 2 ranks (gloo), DTensor-sharded GPT + Adam, "
                   "FileSystemWriter(thread_count=2, sync_files=True)")
    ranks = 2
    varying = (".metadata",)

    def __init__(self, nbytes):
        super().__init__(nbytes)
        vocab, layers = 8192, 4
        params = self.nbytes // 12  # fp32 weights, exp_avg, exp_avg_sq
        # 12 * layers * d^2 + 2 * vocab * d ~= params
        a, b = 12 * layers, 2 * vocab
        d = int((-b + (b * b + 4 * a * params) ** 0.5) / (2 * a)) // 64 * 64
        self.dims = (vocab, max(64, d), layers)
        self._expected = None

    def logical_bytes(self):
        model = TinyGPT(*self.dims)
        return 12 * sum(p.numel() for p in model.parameters())

    def save(self, root, ranks=None, iteration=None, node_loss=None, written=None):
        """root: a directory, or a list of them (rank r saves under root[r % len(root)]);
        ranks: default self.ranks; iteration and node_loss: see workloads' docstring. written:
        a dict that receives {file name: sha256 of the bytes its rank wrote into it, in order}
        of every file a rank that completed wrote (the checkpoint's files have distinct names)."""
        elapsed, results = wl.run_distributed(_save_rank, ranks or self.ranks,
                                              (root, self, iteration, written is not None),
                                              node_loss=node_loss)
        if written is not None:
            for rank_written in results:
                written.update(rank_written or {})
        return elapsed

    def save_async(self, root, executor="thread"):
        """dcp.async_save with the "thread" or "process" executor, after which each rank changes
        every tensor of its state in place (the next training step) while the save runs. Per
        rank, whether the save was still running when async_save returned (its writes wait for
        that: _WritesAfterReturn)."""
        return wl.run_distributed(_save_async_rank, self.ranks, (root, self, executor))[1]

    def async_save_seconds(self, root):
        """dcp.async_save with the thread executor, as a trainer calls it: (seconds until it
        returned, seconds until its save completed), the slowest rank's."""
        ranks = wl.run_distributed(_timed_async_save_rank, self.ranks, (root, self))[1]
        return max(r[0] for r in ranks), max(r[1] for r in ranks)

    def load(self, root, check=True, ranks=1):
        return wl.run_distributed(_load_rank, ranks, (root, self, check))[1][0]

    def load_seconds(self, root):
        return wl.run_distributed(_load_rank, 1, (root, self, False))[0]

    def expected_digest(self):
        if self._expected is None:
            self._expected = wl.run_distributed(_digest_rank, 1, (self,))[1][0]
        return self._expected


def _mesh():
    return init_device_mesh("cpu", (dist.get_world_size(),))


def _writer(root):
    return dcp.FileSystemWriter(root, thread_count=2, sync_files=True)


class _DigestingStream:
    """A stream of DCP's writer that also hashes what is written through it, in order."""

    def __init__(self, raw):
        self.raw = raw
        self.sha256 = hashlib.sha256()

    def write(self, data):
        self.sha256.update(data)
        return self.raw.write(data)

    def __getattr__(self, name):  # tell, flush, fileno: the file's own.
        return getattr(self.raw, name)


class _DigestingFileSystem(FileSystem):
    """DCP's file system, recording in `written` the sha256 of each file written whole through
    it ({file name: hex digest})."""

    def __init__(self):
        super().__init__()
        self.written = {}

    @contextlib.contextmanager
    def create_stream(self, path, mode):
        with super().create_stream(path, mode) as raw:
            stream = _DigestingStream(raw)
            yield stream
            if mode == "wb":
                self.written[os.path.basename(path)] = stream.sha256.hexdigest()


def _digesting_writer(root):
    """_writer whose `fs` records what the rank wrote (_DigestingFileSystem)."""
    writer = _writer(root)
    writer.fs = _DigestingFileSystem()
    return writer


class _WritesAfterReturn(dcp.FileSystemWriter):
    """_writer's FileSystemWriter whose writes begin once the file `returned` exists (the rank
    makes it when async_save has returned), so that the save is seen running then whatever the
    scheduling. Its writes fail when async_save has not returned within a minute (it waited for
    them: no async save)."""

    def __init__(self, root, returned):
        super().__init__(root, thread_count=2, sync_files=True)
        self.returned = returned

    def write_data(self, plan, planner):
        deadline = time.monotonic() + 60
        while not os.path.exists(self.returned):
            if time.monotonic() > deadline:
                raise RuntimeError("async_save did not return before its writes")
            time.sleep(0.01)
        return super().write_data(plan, planner)


def _change_in_place(obj):
    """Adds 1 to every tensor of a state dict, as a training step changes them."""
    if isinstance(obj, torch.Tensor):
        with torch.no_grad():
            obj.add_(1)
    elif isinstance(obj, dict):
        for v in obj.values():
            _change_in_place(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            _change_in_place(v)


@wl.distributed_rank
def _save_rank(rank, barrier, root, w, iteration, digest):
    """digest: return {file name: sha256} of the files this rank wrote."""
    root = wl.rank_root(root, rank)
    state = state_dict(*build(w.dims, _mesh(), fill=True))
    directory = wl.checkpoint_dir(root, iteration)
    writer = (_digesting_writer if digest else _writer)(directory)
    barrier.wait()
    dcp.save(state, storage_writer=writer)
    wl.tracker_after_save(rank, root, iteration)
    return writer.fs.written if digest else None


@wl.distributed_rank
def _save_async_rank(rank, barrier, root, w, executor):
    from torch.distributed.checkpoint.state_dict_saver import AsyncCheckpointerType
    kind = {"thread": AsyncCheckpointerType.THREAD, "process": AsyncCheckpointerType.PROCESS}[executor]
    state = state_dict(*build(w.dims, _mesh(), fill=True))
    gate = tempfile.mkdtemp(prefix="ckptfs-async-save-")
    returned = os.path.join(gate, "returned")
    barrier.wait()
    try:
        future = dcp.async_save(state, storage_writer=_WritesAfterReturn(root, returned),
                                async_checkpointer_type=kind)
        upload = getattr(future, "upload_completion", future)
        running = not upload.done()
        _change_in_place(state)
        open(returned, "x").close()
        upload.result()
    finally:
        shutil.rmtree(gate)
    if executor == "process":
        # torch has no public close for its checkpoint process; dropping the handle runs the
        # handle's own shutdown (terminate request, join).
        from torch.distributed.checkpoint import _async_process_executor
        _async_process_executor._CHECKPOINT_PROCESS = None
    return running


@wl.distributed_rank
def _timed_async_save_rank(rank, barrier, root, w):
    from torch.distributed.checkpoint.state_dict_saver import AsyncCheckpointerType
    state = state_dict(*build(w.dims, _mesh(), fill=True))
    barrier.wait()
    start = time.monotonic()
    future = dcp.async_save(state, storage_writer=_writer(root),
                            async_checkpointer_type=AsyncCheckpointerType.THREAD)
    returned = time.monotonic() - start
    getattr(future, "upload_completion", future).result()
    return returned, time.monotonic() - start


@wl.distributed_rank
def _load_rank(rank, barrier, root, w, check):
    model, optim = build(w.dims, _mesh(), fill=False)
    state = state_dict(model, optim)
    barrier.wait()
    dcp.load(state, storage_reader=dcp.FileSystemReader(root))
    set_state_dict(model, optim, model_state_dict=state["model"], optim_state_dict=state["optim"])
    return full_digest(state_dict(model, optim)) if check else None


@wl.distributed_rank
def _digest_rank(rank, barrier, w):
    state = state_dict(*build(w.dims, _mesh(), fill=True))
    barrier.wait()
    return full_digest(state)
