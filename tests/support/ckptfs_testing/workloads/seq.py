"""seq: a few large files written sequentially (8 MiB writes; bench only)."""
import hashlib
import os

from .checkpoint import Workload
from .data import pool_bytes
from .ranks import rank_main, run_ranks


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
