"""The distributed optimizer's zarr pattern, shared by zarr_dist and zarr_distopt: each rank's
optimizer shard in one chunk, filled parameter piece by piece."""
import json
import os

from .data import Digest, fdata, write_all


DISTOPT_PREFIX = "optimizer.distributed.dp_group_idx_0.gbuf_idx_0.dtype_(torch.float16, torch.float16).bucket_idx_0."


def piece_bounds_of(shard, pieces, rank):
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


def write_zarr_metadata(root):
    """metadata.json of a Megatron-core distributed checkpoint with the zarr backend."""
    meta = {"sharded_backend": "zarr", "sharded_backend_version": 1,
            "common_backend": "torch", "common_backend_version": 1}
    write_all(os.path.join(root, "metadata.json"), json.dumps(meta).encode())


def pieces_digest(pieces, check=True):
    """Consumes one rank's parameter pieces (an iterable of arrays); returns their sub-digest, or
    None without check. Shards are digested per rank so that ranks can load in parallel."""
    sub = Digest() if check else None
    for piece in pieces:
        if sub:
            sub.add(piece)
    return sub.hexdigest() if sub else None


def load_pieces(d, arr, w):
    """Reads each parameter's own slice of every rank's shard from arr (into digest d, if any,
    one pieces_digest per rank)."""
    for r in range(w.ranks):
        sub = pieces_digest((arr[a:b] for a, b in w.piece_bounds(r)), check=d is not None)
        if d:
            d.add(sub)


def digest_shards(d, prefix, kinds, w):
    """Adds to digest d, per kind and rank, the pieces_digest of the rank's generated optimizer
    shard."""
    for kind in kinds:
        for r in range(w.ranks):
            flat = fdata(f"{prefix}/{kind}/rank{r}", w.shard)
            d.add(pieces_digest(flat[a - r * w.shard:b - r * w.shard] for a, b in w.piece_bounds(r)))
