"""Deterministic data: a fixed random pool, shifted and scaled per tensor name, so a run on a
plain directory and a run through ckptfs produce byte-identical trees; and digests of it."""
import hashlib
import zlib

import numpy as np


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


def write_all(path, data):
    with open(path, "wb") as f:
        f.write(data)
