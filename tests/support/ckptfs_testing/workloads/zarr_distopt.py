"""zarr_distopt: the distributed optimizer's zarr pattern alone, with big chunks (or, with
fine_chunks=True, zarr's own 1 MiB chunks: the floor)."""
import json
import os

import numpy as np

from .checkpoint import Workload
from .data import Digest, fdata
from .distopt import (DISTOPT_PREFIX, digest_shards, load_pieces, piece_bounds_of,
                      pieces_digest, write_zarr_metadata)
from .ranks import rank_main, run_ranks


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
        return piece_bounds_of(self.shard, self.pieces, rank)

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
            load_pieces(d, self._open(root, kind), self)
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
        digest_shards(d, "zarr_distopt", self.kinds, self)
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
        write_zarr_metadata(root)
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

    return [pieces_digest(pieces(kind), check) for kind in w.kinds]
