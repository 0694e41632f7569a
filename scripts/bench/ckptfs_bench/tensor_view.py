"""--tensor-view: reading every tensor of a DCP checkpoint through the mount's tensor view
(`.tensors`: its chunk files, and zarr) against reading the same byte ranges straight from the
.distcp files on the backing store, cold and warm."""
import os
import statistics
import subprocess

from ckptfs_testing.ckptfs_daemon import CkptfsDaemon

from .measure import MiB, drop_caches, timed
from .tables import table


def view_ranges(ckpt):
    """{fqn: (.distcp path, offset, length)} of each tensor's storage bytes in the checkpoint."""
    import io
    import zipfile
    import torch.distributed.checkpoint as dcp
    md = dcp.FileSystemReader(ckpt).read_metadata()
    out = {}
    for index, info in md.storage_data.items():
        if index.offset is None:
            continue
        path = os.path.join(ckpt, info.relative_path)
        with open(path, "rb") as f:
            f.seek(info.offset)
            blob = f.read(info.length)
        z = zipfile.ZipFile(io.BytesIO(blob))
        entry = next(e for e in z.infolist() if e.filename.endswith("/data/0"))
        local = blob[entry.header_offset:entry.header_offset + 30]
        start = entry.header_offset + 30 + int.from_bytes(local[26:28], "little") + int.from_bytes(local[28:30], "little")
        out[index.fqn] = (path, info.offset + start, entry.file_size)
    return out


def read_range(path, offset, length, buf):
    """Reads [offset, offset + length) of path in reads of len(buf) bytes (as cat does)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        done = 0
        while done < length:
            got = os.preadv(fd, [memoryview(buf)[:min(len(buf), length - done)]], offset + done)
            if got == 0:
                break
            done += got
        return done
    finally:
        os.close(fd)


def read_direct(ranges):
    buf = bytearray(MiB)
    return sum(read_range(path, offset, length, buf) for path, offset, length in ranges.values())


def read_view_files(view):
    buf = bytearray(MiB)
    n = 0
    for root, _, files in os.walk(view):
        for name in files:
            if name[0].isdigit():
                path = os.path.join(root, name)
                n += read_range(path, 0, os.path.getsize(path), buf)
    return n


def read_view_zarr(view):
    import zarr
    n = 0
    for name in os.listdir(view):
        if os.path.isdir(os.path.join(view, name)):
            n += zarr.open(os.path.join(view, name), mode="r")[...].nbytes
    return n


def run(a):
    import torch
    import torch.distributed.checkpoint as dcp
    backing, mnt = os.path.join(a.workdir, "backing"), os.path.join(a.workdir, "mnt")
    ckpt = os.path.join(backing, "ck")
    for p in (backing, mnt):
        os.makedirs(p)
    count = max(1, int(a.view_gib * 16))
    g = torch.Generator().manual_seed(0)
    dcp.save({f"layers.{i}.weight": torch.rand(4096, 4096, generator=g) for i in range(count)},
             checkpoint_id=ckpt)
    subprocess.run(["sync", "-f", ckpt], check=True)
    ranges = view_ranges(ckpt)
    total = sum(r[2] for r in ranges.values())
    opts = [f"cache_size={a.cache_size}"] + [o for o in a.ckptfs_opts.split(",") if o]
    times = {(c, t): [] for c in ("direct", "view", "zarr") for t in ("cold", "warm")}
    with CkptfsDaemon(backing, mnt, opts, log_file=os.path.join(a.workdir, "daemon.log")):
        view = os.path.join(mnt, "ck", ".tensors")
        readers = {"direct": lambda: read_direct(ranges), "view": lambda: read_view_files(view),
                   "zarr": lambda: read_view_zarr(view)}
        for rep in range(a.repeat):
            order = list(readers) if rep % 2 == 0 else list(reversed(readers))
            for c in order:
                for kind in ("cold", "warm"):
                    if kind == "cold":
                        drop_caches()
                    t, n = timed(readers[c])
                    if n != total:
                        raise RuntimeError(f"{c} read {n} bytes, not {total}")
                    times[(c, kind)].append(t)
                    print(f"{c} {kind}: {t:.3f}s ({total / MiB / t:.0f} MiB/s)", flush=True)
    lines = []
    for kind in ("cold", "warm"):
        direct = statistics.median(times[("direct", kind)])
        for c in ("direct", "view", "zarr"):
            t = statistics.median(times[(c, kind)])
            lines.append([kind, c, f"{t:.3f}", f"{total / MiB / t:.0f}", f"{direct / t:.2f}",
                          "" if c == "direct" else ("yes" if direct / t >= 0.9 else "no")])
    print()
    print(f"{count} tensors, {total / MiB:.0f} MiB, {a.repeat} runs (medians)")
    print(table(["load", "reader", "s", "MiB/s", "speed/direct", ">= 0.9"], lines))
    return {f"{c} {k}": v for (c, k), v in times.items()}

