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
    dcp           real PyTorch DCP (dcp_workload.py): dcp.save of a DTensor-sharded GPT + Adam
                  from 2 rank processes (gloo), FileSystemWriter(thread_count=2, sync_files=True).
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
"""

import datetime
import functools
import hashlib
import importlib
import json
import multiprocessing
import os
import queue as queue_mod
import re
import shutil
import tempfile
import threading
import time
import traceback
import zlib

import numpy as np

ITERATION = 100
_POOL_FLOATS = 1 << 22  # 16 MiB of float32 noise, generated once per process.
_pool = None


def _get_pool():
    global _pool
    if _pool is None:
        _pool = np.random.default_rng(20240801).standard_normal(_POOL_FLOATS, dtype=np.float32)
    return _pool


def fdata(name, n, dtype=np.float32):
    """n deterministic, name-dependent, realistic-looking floats (a shifted, scaled noise pool)."""
    pool = _get_pool()
    h = zlib.crc32(name.encode())
    start = h % len(pool)
    out = np.empty(n, np.float32)
    i = 0
    while i < n:
        k = min(n - i, len(pool) - start)
        out[i:i + k] = pool[start:start + k]
        i += k
        start = 0
    out *= 0.02 * (1.0 + ((h >> 8) % 97) / 97.0)
    return out if dtype == np.float32 else out.astype(dtype)


def tensor(name, shape, dtype="float32"):
    import torch
    n = int(np.prod(shape))
    arr = fdata(name, n, np.float16 if dtype == "float16" else np.float32)
    return torch.from_numpy(arr.reshape(shape))


def pool_bytes(name, n):
    """n deterministic bytes depending on name."""
    raw = memoryview(_get_pool()).cast("B")
    h = zlib.crc32(name.encode()) % (len(raw) - 1)
    out = bytearray()
    while len(out) < n:
        take = min(n - len(out), len(raw) - h)
        out += raw[h:h + take]
        h = 0
    return bytes(out)


def torch_load(f):
    """torch.load with weights_only (nothing in the file is executed), admitting the numpy
    arrays that Megatron's RNG state holds."""
    import torch
    numpy_globals = [np._core.multiarray._reconstruct, np.ndarray, np.dtype,
                     type(np.dtype(np.uint32))]
    with torch.serialization.safe_globals(numpy_globals):
        return torch.load(f, map_location="cpu", weights_only=True)


class Digest:
    """sha256 over a canonical walk of (nested) checkpoint objects."""

    def __init__(self):
        self.h = hashlib.sha256()

    def add(self, obj):
        import torch
        h = self.h
        if isinstance(obj, torch.Tensor):
            h.update(f"T{obj.dtype}{tuple(obj.shape)}".encode())
            h.update(obj.detach().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
        elif isinstance(obj, np.ndarray):
            h.update(f"A{obj.dtype}{obj.shape}".encode())
            h.update(np.ascontiguousarray(obj).tobytes())
        elif isinstance(obj, dict):
            h.update(b"{")
            for k in sorted(obj, key=repr):
                h.update(repr(k).encode())
                self.add(obj[k])
            h.update(b"}")
        elif isinstance(obj, (list, tuple)):
            h.update(b"[")
            for x in obj:
                self.add(x)
            h.update(b"]")
        else:
            h.update(repr(obj).encode())
        return self

    def hexdigest(self):
        return self.h.hexdigest()


def digest(*objs):
    d = Digest()
    for o in objs:
        d.add(o)
    return d.hexdigest()


def _write_all(path, data):
    with open(path, "wb") as f:
        f.write(data)


def _ctx(preload):
    # forkserver, not fork: forking a process that has used torch's OpenMP pool can hang the
    # child. The server imports torch and zarr (and the modules of the first workload to start
    # ranks in this process) once, so rank processes start in milliseconds.
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["numpy", "torch", "zarr", "numcodecs", "ckptfs_testing.workloads", *preload])
    return ctx


def run_ranks(target, nranks, args, preload=(), node_loss=None):
    """Starts nranks processes target(rank, barrier, queue, *args); they generate their data and
    wait at the barrier; the clock starts when the barrier opens. Returns (seconds until the last
    rank's body returned: what the processes do at exit, such as stopping a library's helper
    processes, is not counted; [rank results]). Raises when a rank fails, unless node_loss (a
    NodeLoss) is given: then it waits for every rank to end, however it ends, and returns the
    seconds until the last completed rank's body returned (None when none did) and None as the
    result of each rank that did not complete (node_loss.errors says why)."""
    ctx = _ctx(preload)
    barrier = ctx.Barrier(nranks + 1)  # Start line: every rank and this process.
    group = ctx.Barrier(nranks)  # Between the ranks (torch.distributed.barrier()).
    queue = ctx.Queue()
    procs = [ctx.Process(target=target, args=(r, barrier, group, queue) + tuple(args))
             for r in range(nranks)]
    for p in procs:
        p.start()
    try:
        try:
            barrier.wait(timeout=300)
        except threading.BrokenBarrierError:  # A rank failed before the start line: say why.
            raise RuntimeError(f"a rank failed before the start line: {_rank_errors(queue)}")
        t0 = time.monotonic()
        global last_start_line
        last_start_line = t0
        if node_loss is not None:
            results = node_loss._collect(procs, queue)
        else:
            results = _collect(procs, queue)
        for r in results:
            procs[r].join(timeout=600)
        ends = [results[r][2] for r in results]
        elapsed = max(ends) - t0 if ends else None  # CLOCK_MONOTONIC: one clock.
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()  # Only the rank processes started here.
                p.join()
    # A rank the node loss killed after it reported its result completed all the same.
    killed = node_loss.killed if node_loss is not None else set()
    bad = [p.exitcode for r, p in enumerate(procs)
           if p.exitcode != 0 and r in results and r not in killed]
    if bad:
        raise RuntimeError(f"rank processes exited with {bad}")
    global ranks_written, ranks_cpu
    ranks_written += sum(results[r][1] for r in results)
    ranks_cpu += sum(results[r][3] for r in results)
    return elapsed, [results[r][0] if r in results else None for r in range(nranks)]


def _collect(procs, queue):
    """{rank: (result, bytes written, end time, CPU)} of every rank; raises when one fails."""
    results = {}
    while len(results) < len(procs):
        try:
            r, res = queue.get(timeout=1)
        except queue_mod.Empty:
            dead = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
            if dead:
                raise RuntimeError(f"a rank process died with {dead}")
            continue
        if isinstance(res, BaseException):
            raise RuntimeError(f"rank {r} failed: {res!r}")
        results[r] = res
    return results


class NodeLoss:
    """A save through which nodes may die (tests of several mounts): pass it to a workload's
    save(..., node_loss=...), from a thread of its own. `started` is set when the ranks' start
    line opens; kill_ranks(ranks) then kills those rank processes, as a trainer dies with its
    node. The save waits for every rank to end however it ends (the survivors fail on their
    collectives with the dead, or complete), kills the ranks still running `grace` seconds after
    kill_ranks, and returns instead of raising: `errors` {rank: why} holds each rank that did
    not complete, `hung` the ranks killed after the grace period, and unexplained_failures()
    the survivors' failures that the loss does not explain."""

    def __init__(self, grace=120):
        self.grace = grace
        self.started = threading.Event()
        self.errors = {}
        self.hung = []
        self._lock = threading.Lock()
        self._procs = []
        self._killed_at = None
        self._reports = {}  # {rank: what a rank that failed reported}
        self.lost = set()  # Ranks given to kill_ranks: those of the dead nodes.
        self.killed = set()  # Ranks kill_ranks killed (possibly after they reported a result).

    def kill_ranks(self, ranks):
        """SIGKILLs rank processes `ranks` of the save (only those it started). Call it once
        `started` is set."""
        with self._lock:
            assert self._procs, "kill_ranks before the ranks' start line"
            self.lost.update(ranks)
            for r in ranks:
                if self._procs[r].is_alive():
                    self.killed.add(r)
                    self._procs[r].kill()
            self._killed_at = time.monotonic()

    def unexplained_failures(self):
        """{rank: why} of the survivors (ranks not given to kill_ranks) that did not complete for
        another reason than the loss: a survivor may fail only on a collective with a dead rank
        (gloo's connection to it broke), or with DCP's CheckpointException naming lost ranks
        alone (a lost rank's error, gathered before it died)."""
        return {r: why for r, why in self.errors.items()
                if r not in self.lost and not _loss_explains(self._reports.get(r), self.lost)}

    def _collect(self, procs, queue):
        """run_ranks' collection: {rank: (result, bytes written, end time, CPU)} of the ranks that
        completed; the others land in `errors`."""
        with self._lock:
            self._procs = procs
        self.started.set()
        results, ended = {}, set()

        def take(item):
            r, res = item
            ended.add(r)
            if isinstance(res, BaseException):
                report = self._reports[r] = str(res).strip()
                failed = _FAILED_RANKS.search(report)  # Its last line is a failed rank's error.
                self.errors[r] = "failed: " + (failed[0] if failed else report.splitlines()[-1])
            else:
                results[r] = res
        while len(ended) < len(procs):
            try:
                take(queue.get(timeout=1))
                continue
            except queue_mod.Empty:
                pass
            exited = [r for r, p in enumerate(procs) if p.exitcode is not None and r not in ended]
            try:
                while True:  # What an exited rank put on the queue before it exited.
                    take(queue.get_nowait())
            except queue_mod.Empty:
                pass
            for r in exited:
                if r not in ended:
                    ended.add(r)
                    self.errors[r] = f"exited with {procs[r].exitcode} without a result"
            with self._lock:
                overdue = (self._killed_at is not None
                           and time.monotonic() - self._killed_at > self.grace)
            if overdue:
                for r, p in enumerate(procs):
                    if r not in ended:
                        p.kill()
                        p.join()
                        ended.add(r)
                        self.hung.append(r)
                        self.errors[r] = f"still running {self.grace}s after kill_ranks: killed"
        return results


# How gloo fails a collective whose peer died (its tcp pair's connection broke), and DCP's report
# of the ranks whose step failed (torch.distributed.checkpoint.api.CheckpointException).
_BROKEN_PAIR = re.compile(
    r"gloo/transport/tcp/pair\.cc:\d+\] (Connection closed by peer|Read error|writev) ")
_FAILED_RANKS = re.compile(r"CheckpointException ranks:dict_keys\(\[([\d, ]*)\]\)")


def _loss_explains(report, lost):
    """Whether `report`, a rank's failure (None: it reported none), is the loss of ranks `lost`."""
    if report is None:
        return False
    failed = _FAILED_RANKS.search(report)
    if failed:
        ranks = {int(r) for r in re.findall(r"\d+", failed.group(1))}
        return bool(ranks) and ranks <= lost
    return bool(_BROKEN_PAIR.search(report.splitlines()[-1]))


def _rank_errors(queue, wait=10):
    """The failures the ranks reported on `queue` within `wait` seconds."""
    errors, deadline = [], time.monotonic() + wait
    while not errors and time.monotonic() < deadline:
        try:
            while True:
                r, res = queue.get(timeout=1)
                if isinstance(res, BaseException):
                    errors.append(f"rank {r}: {res}")
        except queue_mod.Empty:
            pass
    return "; ".join(errors) or "no rank reported an error"


# When the start line of the last run_ranks opened (time.monotonic(), one clock for every process):
# the bench times from it what happens after a save returns.
last_start_line = None

# Bytes the rank processes of all saves so far wrote towards a block device (write_bytes -
# cancelled_write_bytes of /proc/self/io). The forkserver, not this process, reaps the ranks, so
# their I/O does not show in this process's /proc/self/io; the bench reads this instead.
ranks_written = 0
# CPU seconds (user + system) the rank processes of all saves so far used from their start line
# to the end of their body, for the same reason.
ranks_cpu = 0.0


class _StartLine:
    """A rank's view of the start line: notes the rank's CPU time when the line opens."""

    def __init__(self, barrier, group):
        self._barrier = barrier
        self.group = group
        self.cpu_at_start = time.process_time()

    def wait(self, *args, **kwargs):
        opened = self._barrier.wait(*args, **kwargs)
        self.cpu_at_start = time.process_time()
        return opened

    def abort(self):
        self._barrier.abort()


def _written_by_self():
    io = {}
    with open("/proc/self/io") as f:
        for line in f:
            k, v = line.split(":")
            io[k.strip()] = int(v)
    return io["write_bytes"] - io["cancelled_write_bytes"]


def rank_main(fn):
    """Wraps a rank body: reports its result or exception on the queue."""

    @functools.wraps(fn)  # Picklable by name (forkserver start method).
    def wrapper(rank, barrier, group, queue, *args):
        start_line = _StartLine(barrier, group)
        try:
            io0 = _written_by_self()
            res = fn(rank, start_line, *args)
            done = time.monotonic()
            cpu = time.process_time() - start_line.cpu_at_start
            queue.put((rank, (res, _written_by_self() - io0, done, cpu)))
        except BaseException:  # Report to the parent, then fail.
            for b in (barrier, group):
                try:
                    b.abort()
                except Exception:
                    pass
            queue.put((rank, RuntimeError(traceback.format_exc(limit=-4))))
            raise
    return wrapper


def run_distributed(target, nranks, args, preload=(), node_loss=None):
    """run_ranks for a target made with @distributed_rank: its ranks form a torch.distributed
    gloo group (rendezvous through a file store in a fresh temporary directory)."""
    store = tempfile.mkdtemp(prefix="ckptfs-pg-")
    try:
        return run_ranks(target, nranks, (nranks, store) + tuple(args),
                          preload=(target.__module__, *preload), node_loss=node_loss)
    finally:
        shutil.rmtree(store, ignore_errors=True)


def distributed_rank(fn):
    """A rank body fn(rank, barrier, *args) run inside a torch.distributed gloo group of the
    ranks run_distributed starts."""

    @functools.wraps(fn)
    def body(rank, barrier, world, store, *args):
        import torch.distributed as dist
        os.environ["MASTER_ADDR"] = "127.0.0.1"  # DCP's checkpoint process meets here too.
        dist.init_process_group("gloo", init_method=f"file://{store}/rendezvous", rank=rank,
                                world_size=world, timeout=datetime.timedelta(seconds=300))
        try:
            return fn(rank, barrier, *args)
        finally:
            dist.destroy_process_group()
    return rank_main(body)


# ------------------------------------------------------------------------------------------------
# GPT-style state dicts

def gpt_dims(nbytes, bytes_per_param=14):
    """(hidden, layers, vocab) of a GPT whose fp16 weights + fp32 master + Adam state take about
    nbytes (14 bytes per parameter)."""
    params = max(1, nbytes // bytes_per_param)
    hidden = 512 if params < 60_000_000 else 1024
    vocab = 8192
    layers = max(1, int(round((params - vocab * hidden) / (12 * hidden * hidden))))
    return hidden, layers, vocab


def gpt_param_shapes(hidden, layers, vocab, tp=1, tp_rank=0):
    """Megatron legacy parameter names and (tensor-parallel-sliced) shapes, in model order."""
    h = hidden
    shapes = [("language_model.embedding.word_embeddings.weight", (vocab // tp, h))]
    for i in range(layers):
        p = f"language_model.encoder.layers.{i}."
        shapes += [
            (p + "input_layernorm.weight", (h,)),
            (p + "input_layernorm.bias", (h,)),
            (p + "self_attention.query_key_value.weight", (3 * h // tp, h)),
            (p + "self_attention.query_key_value.bias", (3 * h // tp,)),
            (p + "self_attention.dense.weight", (h, h // tp)),
            (p + "self_attention.dense.bias", (h,)),
            (p + "post_attention_layernorm.weight", (h,)),
            (p + "post_attention_layernorm.bias", (h,)),
            (p + "mlp.dense_h_to_4h.weight", (4 * h // tp, h)),
            (p + "mlp.dense_h_to_4h.bias", (4 * h // tp,)),
            (p + "mlp.dense_4h_to_h.weight", (h, 4 * h // tp)),
            (p + "mlp.dense_4h_to_h.bias", (h,)),
        ]
    shapes += [("language_model.encoder.final_layernorm.weight", (h,)),
               ("language_model.encoder.final_layernorm.bias", (h,))]
    return shapes


def rng_state(seed):
    import torch
    g = torch.Generator().manual_seed(seed)
    return {"random_rng_state": (3, tuple(range(seed, seed + 16)), None),
            "np_rng_state": ("MT19937", np.arange(624, dtype=np.uint32) + seed, 624, 0, 0.0),
            "torch_rng_state": g.get_state(),
            "cuda_rng_state": g.get_state(),
            "rng_tracker_states": {"model-parallel-rng": g.get_state()}}


def _args_dict(hidden, layers, vocab, tp, pp):
    return {"num_layers": layers, "hidden_size": hidden, "num_attention_heads": hidden // 64,
            "padded_vocab_size": vocab, "tensor_model_parallel_size": tp,
            "pipeline_model_parallel_size": pp, "fp16": True, "lr": 3e-4, "seq_length": 2048,
            "iteration": ITERATION, "save": "/checkpoints/gpt", "use_distributed_optimizer": False}


def gpt_state_dict(tag, hidden, layers, vocab, tp=1, tp_rank=0, pp=1, with_optimizer=True):
    """A Megatron legacy model_optim_rng.pt state dict (fp16 model, fp32 optimizer state)."""
    shapes = gpt_param_shapes(hidden, layers, vocab, tp, tp_rank)
    model = {"language_model": {"embedding": {"word_embeddings": {}}, "encoder": {}}}
    for name, shape in shapes:
        t = tensor(f"{tag}/model/{name}", shape, "float16")
        short = name[len("language_model."):]
        if short.startswith("embedding."):
            model["language_model"]["embedding"]["word_embeddings"]["weight"] = t
        else:
            model["language_model"]["encoder"][short[len("encoder."):]] = t
    sd = {"args": _args_dict(hidden, layers, vocab, tp, pp), "checkpoint_version": 3.0,
          "iteration": ITERATION, "model": model, "rng_state": [rng_state(tp_rank + 7)]}
    if with_optimizer:
        state = {}
        masters = []
        for i, (name, shape) in enumerate(shapes):
            state[i] = {"exp_avg": tensor(f"{tag}/exp_avg/{name}", shape),
                        "exp_avg_sq": tensor(f"{tag}/exp_avg_sq/{name}", shape).abs_(),
                        "step": ITERATION}
            masters.append(tensor(f"{tag}/master/{name}", shape))
        sd["optimizer"] = {
            "optimizer": {"state": state,
                          "param_groups": [{"lr": 3e-4, "betas": (0.9, 0.95), "eps": 1e-8,
                                            "weight_decay": 0.1, "params": list(range(len(shapes)))}]},
            "fp32_from_fp16_params": [masters],
            "grad_scaler": {"scale": 65536.0, "growth_factor": 2.0, "backoff_factor": 0.5,
                            "growth_interval": 1000, "_growth_tracker": 17},
        }
        sd["opt_param_scheduler"] = {"max_lr": 3e-4, "num_steps": ITERATION * 512}
    return sd


TRACKER = "latest_checkpointed_iteration.txt"  # Megatron's, beside its iter_NNNNNNN directories.


def _tracker(root, it=ITERATION):
    _write_all(os.path.join(root, TRACKER), str(it).encode())


def _read_tracker(root):
    with open(os.path.join(root, TRACKER)) as f:
        return int(f.read().strip())


def rank_root(root, rank):
    """The directory rank `rank` saves under: root, or roots[rank % len(roots)] when root is a
    list (one checkpoint seen through several mounts of one backing directory)."""
    return root[rank % len(root)] if isinstance(root, (list, tuple)) else root


def checkpoint_dir(root, iteration):
    """Where a save with `iteration` puts its checkpoint: root itself when iteration is None,
    else Megatron's <root>/iter_000000N beside the tracker."""
    return root if iteration is None else os.path.join(root, f"iter_{iteration:07d}")


def tracker_after_save(rank, root, iteration):
    """What Megatron's trainer does once its save returned: every rank meets at a barrier, then
    rank 0 writes the tracker naming `iteration` under root. Nothing when iteration is None."""
    import torch.distributed as dist
    if iteration is None:
        return
    dist.barrier()
    if rank == 0:
        _tracker(root, iteration)


class Workload:
    name = "?"
    description = ""
    varying = ()  # Names of files whose bytes the library does not write deterministically.

    def __init__(self, nbytes):
        self.nbytes = int(nbytes)

    def logical_bytes(self):
        """Bytes the trainer hands to the filesystem (file sizes; zarr rewrites not counted)."""
        raise NotImplementedError

    def save(self, root):
        raise NotImplementedError

    def load(self, root, check=True):
        raise NotImplementedError

    def expected_digest(self):
        raise NotImplementedError

    def load_seconds(self, root):
        """How long load(root, check=False) takes; workloads whose loader runs in rank processes
        count from the ranks' start line (process start-up excluded)."""
        t = time.monotonic()
        self.load(root, check=False)
        return time.monotonic() - t


# ------------------------------------------------------------------------------------------------
# 1. torch.save, Megatron legacy layout

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
        it = _read_tracker(root)
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
    _tracker(root)
    return None


# ------------------------------------------------------------------------------------------------
# 2. Megatron-core distributed checkpoint, zarr backend, with the distributed optimizer

DISTOPT_PREFIX = "optimizer.distributed.dp_group_idx_0.gbuf_idx_0.dtype_(torch.float16, torch.float16).bucket_idx_0."


def _piece_bounds(shard, pieces, rank):
    """The [start, stop) ranges (global coordinates) of `pieces` parameters filling rank's shard
    of `shard` elements (rank r's shard starts at r * shard): uneven sizes (1 to 13 parts),
    covering the shard exactly."""
    weights = [1 + (i * 7919 + rank * 104729) % 13 for i in range(pieces)]
    total = sum(weights)
    cuts = [0]
    acc = 0
    for w in weights[:-1]:
        acc += w
        cuts.append(shard * acc // total)
    cuts.append(shard)
    base = rank * shard
    return [(base + a, base + b) for a, b in zip(cuts, cuts[1:]) if b > a]


def _write_zarr_metadata(root):
    """metadata.json of a Megatron-core distributed checkpoint with the zarr backend."""
    meta = {"sharded_backend": "zarr", "sharded_backend_version": 1,
            "common_backend": "torch", "common_backend_version": 1}
    _write_all(os.path.join(root, "metadata.json"), json.dumps(meta).encode())


def _pieces_digest(pieces, check=True):
    """Consumes one rank's parameter pieces (an iterable of arrays); returns their sub-digest, or
    None without check. Shards are digested per rank so that ranks can load in parallel."""
    sub = Digest() if check else None
    for piece in pieces:
        if sub:
            sub.add(piece)
    return sub.hexdigest() if sub else None


def _load_pieces(d, arr, w):
    """Reads each parameter's own slice of every rank's shard from arr (into digest d, if any,
    one _pieces_digest per rank)."""
    for r in range(w.ranks):
        sub = _pieces_digest((arr[a:b] for a, b in w.piece_bounds(r)), check=d is not None)
        if d:
            d.add(sub)


def _digest_shards(d, prefix, kinds, w):
    """Adds to digest d, per kind and rank, the _pieces_digest of the rank's generated optimizer
    shard."""
    for kind in kinds:
        for r in range(w.ranks):
            flat = fdata(f"{prefix}/{kind}/rank{r}", w.shard)
            d.add(_pieces_digest(flat[a - r * w.shard:b - r * w.shard] for a, b in w.piece_bounds(r)))


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
        return _piece_bounds(self.shard, self.pieces, rank)

    def common_state(self):
        return {"iteration": ITERATION, "args": _args_dict(self.hidden, self.layers, self.vocab, 2, 1),
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
            _load_pieces(d, zarr.open(os.path.join(root, DISTOPT_PREFIX + kind), mode="r"), self)
        return d.hexdigest() if d else None

    def expected_digest(self):
        d = Digest()
        d.add(self.common_state())
        for key, shape, chunk, split in self.model_tensors():
            full = fdata("zarr/" + key, int(np.prod(shape)), np.float16).reshape(shape)
            for r in range(self.ranks):
                d.add(np.ascontiguousarray(full[self._tp_slices(shape, chunk, split, r)]))
        _digest_shards(d, "zarr", ("param", "exp_avg", "exp_avg_sq"), self)
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
        _write_zarr_metadata(root)
    return None


# ------------------------------------------------------------------------------------------------
# 2b. The distributed-optimizer zarr pattern alone, with big chunks

FINE_CHUNK_FLOATS = 262144  # 1 MiB of float32.


def fine_chunk_len(n, limit=FINE_CHUNK_FLOATS):
    """The largest divisor of n that is at most limit: a chunk length that splits a chunk of n
    elements into equal chunks of at most limit elements (rank boundaries stay chunk boundaries)."""
    if n <= limit:
        return n
    for d in range(limit, 0, -1):
        if n % d == 0:
            return d
    return 1


class ZarrDistOpt(Workload):
    """Megatron-core's distributed optimizer saved with the zarr backend, alone: per state kind
    one 1-D float32 array (compressor=None, fill_value=None, write_empty_chunks=True) of shape
    (ranks * shard,) whose chunk is one rank's whole flattened optimizer shard; each rank fills
    its chunk parameter by parameter (uneven pieces) with set_coordinate_selection under a
    zarr.ProcessSynchronizer whose lock files live in <key>.sync/ inside the checkpoint; rank 0
    writes metadata.json last. Every piece rewrites the whole chunk (zarr reads, modifies and
    stores chunks whole), which is what makes this pattern slow on an ordinary filesystem.

    fine_chunks=True: the same, but zarr itself creates the arrays with chunks of at most 1 MiB
    (the largest divisor of the shard that fits): the floor a filesystem can hope to reach.

    Two loaders: load() reads each parameter's own slice; load_whole_region() is Megatron's
    loader for flattened-range tensors: every parameter reads its rank's whole region of the
    array and slices its range out of it."""

    name = "zarr_distopt"
    ranks = 2

    def __init__(self, nbytes, pieces=60, fine_chunks=False, kinds=("param",)):
        super().__init__(nbytes)
        self.kinds = tuple(kinds)
        shard = max(1024, self.nbytes // (4 * self.ranks * len(self.kinds)))  # floats per rank
        unit = FINE_CHUNK_FLOATS if shard >= FINE_CHUNK_FLOATS else 1024
        self.shard = max(unit, shard // unit * unit)
        self.pieces = pieces
        self.fine_chunks = bool(fine_chunks)
        self.chunk = fine_chunk_len(self.shard) if self.fine_chunks else self.shard
        self.description = (f"zarr distributed optimizer alone, {self.ranks} ranks, "
                            f"{self.shard * 4 / 2**20:.0f} MiB shard x {self.pieces} pieces, "
                            + (f"zarr chunks of {self.chunk * 4 / 2**20:.2f} MiB (floor)"
                               if self.fine_chunks else "1 chunk per shard"))

    def key(self, kind):
        return DISTOPT_PREFIX + kind

    def piece_bounds(self, rank):
        return _piece_bounds(self.shard, self.pieces, rank)

    def logical_bytes(self):
        return len(self.kinds) * self.ranks * self.shard * 4

    def save(self, root):
        elapsed, _ = run_ranks(_zarr_distopt_rank, self.ranks, (root, self))
        return elapsed

    def _open(self, root, kind):
        import zarr
        arr = zarr.open(os.path.join(root, self.key(kind)), mode="r")
        assert arr.shape == (self.ranks * self.shard,) and arr.dtype == np.float32, \
            (kind, arr.shape, arr.dtype)
        return arr

    def _check_meta(self, root):
        with open(os.path.join(root, "metadata.json")) as f:
            meta = json.load(f)
        assert meta["sharded_backend"] == "zarr", meta

    def load(self, root, check=True):
        """Slice by slice (a resharding loader): each parameter reads only its own range."""
        self._check_meta(root)
        d = Digest() if check else None
        for kind in self.kinds:
            _load_pieces(d, self._open(root, kind), self)
        return d.hexdigest() if d else None

    def load_whole_region(self, root, check=True, every=1):
        """Megatron's zarr loader (_load_from_array of a flattened-range ShardedTensor), in one
        process per rank as the ranks load: every parameter opens the array, reads its rank's
        whole region arr[r*shard:(r+1)*shard] and takes its range out of it. every=N loads only
        every Nth piece of each rank (each costs the same: a read of the whole region)."""
        self._check_meta(root)
        _, per_rank = run_ranks(_zarr_distopt_whole_region_rank, self.ranks,
                                 (root, self, check, every))
        if not check:
            return None
        d = Digest()
        for i in range(len(self.kinds)):
            for r in range(self.ranks):
                d.add(per_rank[r][i])
        return d.hexdigest()

    def expected_digest(self):
        d = Digest()
        _digest_shards(d, "zarr_distopt", self.kinds, self)
        return d.hexdigest()


@rank_main
def _zarr_distopt_rank(rank, barrier, root, w):
    import zarr
    opt = {kind: fdata(f"zarr_distopt/{kind}/rank{rank}", w.shard) for kind in w.kinds}
    barrier.wait()

    os.makedirs(root, exist_ok=True)
    if rank == 0:  # The rank holding the first chunk creates the arrays.
        for kind in w.kinds:
            zarr.create((w.ranks * w.shard,), dtype=np.float32, compressor=None,
                        store=os.path.join(root, w.key(kind)), chunks=(w.chunk,),
                        overwrite=True, fill_value=None, write_empty_chunks=True)
    barrier.group.wait()
    base = rank * w.shard
    for kind, flat in opt.items():
        key = w.key(kind)
        sync = zarr.ProcessSynchronizer(os.path.join(root, key + ".sync"))
        for a, b in w.piece_bounds(rank):
            # One ShardedTensor per parameter: Megatron opens the array for each.
            arr = zarr.open(os.path.join(root, key), mode="r+", synchronizer=sync)
            arr.set_coordinate_selection(np.arange(a, b), flat[a - base:b - base])
    barrier.group.wait()
    if rank == 0:
        _write_zarr_metadata(root)
    return None


@rank_main
def _zarr_distopt_whole_region_rank(rank, barrier, root, w, check, every):
    """Rank's part of ZarrDistOpt.load_whole_region: per kind, the sub-digest of its pieces."""
    barrier.wait()
    s = w.shard

    def pieces(kind):
        for a, b in w.piece_bounds(rank)[::every]:
            region = w._open(root, kind)[rank * s:(rank + 1) * s]  # Read whole, per piece.
            yield region[a - rank * s:b - rank * s]

    return [_pieces_digest(pieces(kind), check) for kind in w.kinds]


# ------------------------------------------------------------------------------------------------
# 3. DLRover flash checkpoint

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
        _tracker(root)  # Rank 0's tracker, after every rank's files.
        return elapsed0 + time.monotonic() - t

    def load(self, root, check=True):
        import torch
        it = _read_tracker(root)
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


# ------------------------------------------------------------------------------------------------
# Plain sequential large files and many small files (bench only)

class SeqWrite(Workload):
    name = "seq"
    description = "sequential write of 4 large files, 8 MiB writes"
    files = 4
    block = 8 << 20

    def logical_bytes(self):
        per = (self.nbytes // self.files) // self.block * self.block
        return per * self.files

    def save(self, root):
        elapsed, _ = run_ranks(_seq_rank, 1, (root, self))
        return elapsed

    def load(self, root, check=True):
        d = hashlib.sha256() if check else None
        buf = bytearray(self.block)
        for i in range(self.files):
            with open(os.path.join(root, f"big_{i}.bin"), "rb", buffering=0) as f:
                while True:
                    n = f.readinto(buf)
                    if not n:
                        break
                    if d:
                        d.update(memoryview(buf)[:n])
        return d.hexdigest() if d else None

    def expected_digest(self):
        d = hashlib.sha256()
        for i, blk in self._blocks():
            d.update(blk)
        return d.hexdigest()

    def _blocks(self):
        base = bytearray(pool_bytes("seq", self.block))
        per = self.logical_bytes() // self.files
        for i in range(self.files):
            for j in range(per // self.block):
                base[0:16] = f"{i:07d}/{j:08d}".encode()
                yield i, base


@rank_main
def _seq_rank(rank, barrier, root, w):
    base = bytearray(pool_bytes("seq", w.block))
    barrier.wait()
    os.makedirs(root, exist_ok=True)
    per = w.logical_bytes() // w.files
    for i in range(w.files):
        fd = os.open(os.path.join(root, f"big_{i}.bin"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            for j in range(per // w.block):
                base[0:16] = f"{i:07d}/{j:08d}".encode()
                view = memoryview(base)
                while view:
                    view = view[os.write(fd, view):]
        finally:
            os.close(fd)
    return None


class SmallFiles(Workload):
    name = "small"
    description = "20,000 small files (1-64 KiB) in 100 directories"
    sizes = [4096, 1024, 16384, 8192, 65536, 2048, 12288, 4096, 32768, 6144]

    def __init__(self, count):
        self.count = int(count)
        self.nbytes = self.logical_bytes()

    def _files(self):
        for i in range(self.count):
            yield f"d{i % 100:03d}/f{i:05d}.bin", self.sizes[i % len(self.sizes)]

    def logical_bytes(self):
        return sum(s for _, s in self._files())

    def save(self, root):
        elapsed, _ = run_ranks(_small_rank, 1, (root, self))
        return elapsed

    def load(self, root, check=True):
        d = hashlib.sha256() if check else None
        for rel, _ in self._files():
            with open(os.path.join(root, rel), "rb") as f:
                data = f.read()
            if d:
                d.update(data)
        return d.hexdigest() if d else None

    def expected_digest(self):
        d = hashlib.sha256()
        base = pool_bytes("small", 65536 + 4096)
        for i, (rel, size) in enumerate(self._files()):
            off = (i * 4099) % 4096
            d.update(base[off:off + size])
        return d.hexdigest()


@rank_main
def _small_rank(rank, barrier, root, w):
    base = pool_bytes("small", 65536 + 4096)
    barrier.wait()
    for k in range(100):
        os.makedirs(os.path.join(root, f"d{k:03d}"), exist_ok=True)
    for i, (rel, size) in enumerate(w._files()):
        off = (i * 4099) % 4096
        _write_all(os.path.join(root, rel), base[off:off + size])
    return None


def make(name, scale=1.0, for_test=False, **kw):
    """The workload `name` at bench size x scale (or the smaller size the tests use); kw go to
    its constructor (e.g. fine_chunks=True for zarr_distopt)."""
    MB = 1 << 20
    if for_test:
        sizes = {"torch_legacy": 200 * MB, "zarr_dist": 100 * MB, "zarr_distopt": 32 * MB,
                 "dlrover": 160 * MB, "dcp": 120 * MB, "mcore_torch_dist": 120 * MB,
                 "nvrx_local": 64 * MB, "safetensors": 1024 * MB, "seq": 256 * MB, "small": 2000}
    else:
        sizes = {"torch_legacy": 512 * MB, "zarr_dist": 256 * MB, "zarr_distopt": 400 * MB,
                 "dlrover": 512 * MB, "dcp": 1024 * MB, "mcore_torch_dist": 1024 * MB,
                 "nvrx_local": 1024 * MB, "safetensors": 1024 * MB, "seq": 4096 * MB,
                 "small": 20000}
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
    "dcp": ("dcp_workload", "DCP"),
    "mcore_torch_dist": ("mcore_workload", "MCoreTorchDist"),
    "nvrx_local": ("nvrx_workload", "NVRxLocal"),
    "safetensors": ("safetensors_workload", "Safetensors"),
}


ALL = ["seq", "small", "torch_legacy", "zarr_dist", "zarr_distopt", "dlrover", "dcp",
       "mcore_torch_dist", "nvrx_local", "safetensors"]
