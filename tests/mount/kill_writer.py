"""Writer process of test_kill_workloads, and the contents it writes (shared with the checker).

    python kill_writer.py MODE DIR SEED LOG

Imports what it needs, prints "ready", then saves checkpoints under DIR with real save code
until it is stopped by an error (the daemon was killed) or has saved MAX_ITERATIONS of them:

    torch  iter_NNNNNNN/mp_rank_00/model_optim_rng.pt (torch.save of a small Megatron GPT state
           dict), then latest_checkpointed_iteration.txt rewritten in place (as Megatron does);
           every FSYNC_EVERY-th tracker is fsynced before it is closed.
    zarr   ckpt_NNNN/<tensor>/ (zarr arrays, DirectoryStore: .zarray, then chunk files written as
           <key>.<uuid>.partial and renamed into place), then ckpt_NNNN/metadata.json.
    small  d<k>/fNNNNN.bin: small files written to fNNNNN.bin.tmp and renamed into place; every
           MANIFEST_EVERY files, MANIFEST.tmp is written and renamed over MANIFEST (the count).
    stream s/fNNNNNN.bin: files of 64 KiB-1 MiB written in place, each closed before the next is
           opened; every STREAM_TRACKER_EVERY files, the tracker rewritten in place (the count).
    dcp    iter_NNNNNNN/ (torch.distributed.checkpoint.save of a model and optimizer state, one
           rank: its FileSystemWriter fsyncs every file), then the tracker written to a
           temporary, fsynced and renamed into place.

Every completed step is appended to LOG (outside the mount) in close order: "close REL" after a
file under its final name is complete (closed, or renamed into place), "durable N" after an
fsync of the tracker returned. SIGUSR2 stops the writer after the step it is in: it exits 0. Contents derive from SEED and the path, so the checker can
recompute them. The writer works in DIR through its working directory, so that it stops at
the first error once the daemon is dead, instead of writing on into the bare mount point.
"""

import faulthandler
import json
import os
import signal
import sys

from ckptfs_testing.workloads import fdata, gpt_state_dict, pool_bytes
from crash_writer import write_file  # Beside this file: the script's directory is on the path.

MAX_ITERATIONS = 100_000
TRACKER = "latest_checkpointed_iteration.txt"
FSYNC_EVERY = 4
GPT_DIMS = (128, 2, 2048)  # hidden, layers, vocab: ~9 MB per model_optim_rng.pt.
MANIFEST_EVERY = 25
STREAM_TRACKER_EVERY = 10


# --- torch ----------------------------------------------------------------------------------------

def torch_rel(it):
    return os.path.join(f"iter_{it:07d}", "mp_rank_00", "model_optim_rng.pt")


def torch_state(seed, it):
    return gpt_state_dict(f"kill/{seed}/{it}", *GPT_DIMS)


def save_torch(root, seed, log):
    import torch
    for it in range(1, MAX_ITERATIONS):
        sd = torch_state(seed, it)
        rel = torch_rel(it)
        os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
        torch.save(sd, os.path.join(root, rel))
        log(f"close {rel}")
        with open(os.path.join(root, TRACKER), "w") as f:
            f.write(str(it))
            if it % FSYNC_EVERY == 0:
                f.flush()
                os.fsync(f.fileno())
        log(f"close {TRACKER} {it}")
        if it % FSYNC_EVERY == 0:
            log(f"durable {it}")


# --- zarr -----------------------------------------------------------------------------------------

# (name, shape, chunks, dtype, compressed) of the tensors of every zarr checkpoint.
ZARR_ARRAYS = [
    ("model.embedding.word_embeddings.weight", (512, 256), (128, 256), "float16", True),
    ("model.decoder.layers.self_attention.linear_qkv.weight", (2, 384, 128), (1, 192, 128),
     "float32", True),
    ("optimizer.exp_avg", (300_000,), (100_000,), "float32", False),
]


def zarr_rel(ck):
    return f"ckpt_{ck:04d}"


def zarr_data(seed, ck, name, shape, dtype):
    import numpy as np
    n = int(np.prod(shape))
    return fdata(f"kill/{seed}/{ck}/{name}", n, np.dtype(dtype).type).reshape(shape)


def zarr_metadata(ck):
    return {"sharded_backend": "zarr", "sharded_backend_version": 1, "common_backend": "torch",
            "common_backend_version": 1, "checkpoint": ck}


def _zarr_open(store, shape, chunks, dtype, compressed):
    import numcodecs
    import zarr
    numcodecs.blosc.use_threads = False  # Deterministic chunk bytes.
    kw = {} if compressed else {"compressor": None}
    return zarr.open(store=store, mode="w", shape=shape, chunks=chunks, dtype=dtype,
                     fill_value=None, write_empty_chunks=True, **kw)


def zarr_expected(seed, ck):
    """{path relative to the checkpoint dir: bytes} of every zarr file of checkpoint ck, in the
    order the writer stores them (made by the same zarr code on an in-memory store)."""
    import zarr
    out = {}
    for name, shape, chunks, dtype, compressed in ZARR_ARRAYS:
        store = zarr.MemoryStore()
        arr = _zarr_open(store, shape, chunks, dtype, compressed)
        arr[...] = zarr_data(seed, ck, name, shape, dtype)
        for key in store.keys():
            out[f"{name}/{key}"] = bytes(store[key])
    return out


def save_zarr(root, seed, log):
    import zarr

    class LoggingStore(zarr.DirectoryStore):
        """A DirectoryStore that logs each key once it is in place (closed and renamed)."""

        def __init__(self, path, rel):
            super().__init__(path)
            self.rel = rel

        def __setitem__(self, key, value):
            super().__setitem__(key, value)
            log(f"close {self.rel}/{key}")

    for ck in range(1, MAX_ITERATIONS):
        d = zarr_rel(ck)
        os.makedirs(os.path.join(root, d))
        for name, shape, chunks, dtype, compressed in ZARR_ARRAYS:
            rel = f"{d}/{name}"
            arr = _zarr_open(LoggingStore(os.path.join(root, rel), rel), shape, chunks, dtype,
                             compressed)
            arr[...] = zarr_data(seed, ck, name, shape, dtype)
        write_file(os.path.join(root, d, "metadata.json"), json.dumps(zarr_metadata(ck)).encode())
        log(f"close {d}/metadata.json")


# --- small files ----------------------------------------------------------------------------------

def small_rel(i):
    return os.path.join(f"d{i % 8}", f"f{i:05d}.bin")


def small_content(seed, i):
    size = 512 + (i * 7919) % (24 << 10)
    head = f"{seed}/{i}:".encode()
    return head + pool_bytes(f"kill/{seed}/{i}", size - len(head))


def manifest_content(count):
    return f"{count}\n".encode()


def save_small(root, seed, log):
    for k in range(8):
        os.makedirs(os.path.join(root, f"d{k}"), exist_ok=True)
    for i in range(MAX_ITERATIONS):
        rel = small_rel(i)
        write_file(os.path.join(root, rel + ".tmp"), small_content(seed, i))
        os.rename(os.path.join(root, rel + ".tmp"), os.path.join(root, rel))
        log(f"close {rel}")
        if i % MANIFEST_EVERY == MANIFEST_EVERY - 1:
            write_file(os.path.join(root, "MANIFEST.tmp"), manifest_content(i + 1))
            os.rename(os.path.join(root, "MANIFEST.tmp"), os.path.join(root, "MANIFEST"))
            log(f"close MANIFEST {i + 1}")


# --- a stream of closed files --------------------------------------------------------------------

def stream_rel(i):
    return os.path.join("s", f"f{i:06d}.bin")


def stream_content(seed, i):
    size = (64 << 10) + (i * 104729) % (960 << 10)
    head = f"{seed}/{i}:".encode()
    return head + pool_bytes(f"stream/{seed}/{i}", size - len(head))


def save_stream(root, seed, log):
    os.makedirs(os.path.join(root, "s"), exist_ok=True)
    for i in range(MAX_ITERATIONS):
        rel = stream_rel(i)
        write_file(os.path.join(root, rel), stream_content(seed, i))
        log(f"close {rel}")
        if i % STREAM_TRACKER_EVERY == STREAM_TRACKER_EVERY - 1:
            write_file(os.path.join(root, TRACKER), manifest_content(i + 1))
            log(f"close {TRACKER} {i + 1}")


# --- dcp ------------------------------------------------------------------------------------------

def dcp_rel(it):
    return f"iter_{it:07d}"


def dcp_state(seed, it):
    """The flat model and optimizer state DCP saves at iteration `it`."""
    from ckptfs_testing.workloads import gpt_param_shapes, tensor
    state = {}
    for name, shape in gpt_param_shapes(*GPT_DIMS):
        state[f"model.{name}"] = tensor(f"kill/{seed}/{it}/model/{name}", shape, "float16")
        state[f"optimizer.exp_avg.{name}"] = tensor(f"kill/{seed}/{it}/exp_avg/{name}", shape)
    return state


def save_dcp(root, seed, log):
    import warnings
    import torch.distributed.checkpoint as dcp
    warnings.filterwarnings("ignore")  # One rank without a process group is DCP's no_dist mode.
    for it in range(1, MAX_ITERATIONS):
        dcp.save(dcp_state(seed, it), checkpoint_id=os.path.join(root, dcp_rel(it)))
        log(f"close {dcp_rel(it)}")
        fd = os.open(os.path.join(root, TRACKER + ".tmp"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
                     0o644)
        try:
            os.write(fd, str(it).encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(os.path.join(root, TRACKER + ".tmp"), os.path.join(root, TRACKER))
        log(f"close {TRACKER} {it}")


SAVERS = {"torch": save_torch, "zarr": save_zarr, "small": save_small, "stream": save_stream,
          "dcp": save_dcp}


class Stopped(BaseException):
    """Raised after a logged step once SIGUSR2 came (no save code catches it)."""


stop_requested = False


def ask_stop(signum, frame):
    global stop_requested
    stop_requested = True


def main():
    faulthandler.register(signal.SIGUSR1)  # The test asks for a traceback when the writer hangs.
    signal.signal(signal.SIGUSR2, ask_stop)
    mode, root, seed, log_path = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    if mode in ("torch", "zarr", "dcp"):
        import torch  # noqa: F401  (import time is not part of the save)
        import zarr  # noqa: F401
    with open(log_path, "a", buffering=1) as log_file:
        # Every path goes through the working directory: once the daemon is killed and its mount
        # detached, each operation fails, instead of writing into the bare mount point.
        os.chdir(root)
        print("ready", flush=True)
        def log(line):
            log_file.write(line + "\n")
            if stop_requested:
                raise Stopped()

        try:
            SAVERS[mode]("/proc/self/cwd", seed, log)
        except Stopped:
            print("writer stopped as asked", file=sys.stderr)


if __name__ == "__main__":
    try:
        main()
    except (OSError, KeyError, RuntimeError) as e:  # zarr reports a failed write as KeyError.
        print(f"writer stopped: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(3)
