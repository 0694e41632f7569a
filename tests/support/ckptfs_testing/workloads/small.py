"""small: many small files (1-64 KiB) in 100 directories (bench only)."""
import hashlib
import os

from .checkpoint import Workload
from .data import pool_bytes, write_all
from .ranks import rank_main, run_ranks


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
        write_all(os.path.join(root, rel), base[off:off + size])
    return None
