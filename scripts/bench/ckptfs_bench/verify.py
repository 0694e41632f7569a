"""--verify: `ckptfs verify` of a checkpoint against `cat` of the same files to /dev/null, on the
backing directory and through a mount, cold (the files' pages dropped from the page cache, theirs
only) and warm; and what -o verify=markers adds to the publication of a commit marker written
after the checkpoint's files."""
import contextlib
import os
import statistics
import subprocess
import time

from ckptfs_testing.ckptfs_daemon import CkptfsDaemon, ckptfs_bin

from .measure import MiB, timed
from .tables import table

FILES = 8
WRITE = 64 * MiB


def write_files(ckpt, total):
    """FILES files of total/FILES bytes each in `ckpt`, every 64 MiB different, closed."""
    os.makedirs(ckpt, exist_ok=True)
    base = bytearray(os.urandom(WRITE))
    per_file = total // FILES
    paths = []
    for i in range(FILES):
        path = os.path.join(ckpt, f"__{i}_0.distcp")
        with open(path, "wb") as f:
            for at in range(0, per_file, WRITE):
                base[:16] = f"{i}:{at}".encode().ljust(16)
                f.write(memoryview(base)[:min(WRITE, per_file - at)])
        paths.append(path)
    return paths


def drop_pages(paths):
    """Drops the page cache of `paths` only (their pages are clean: synced beforehand)."""
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def run_verify(root):
    r = subprocess.run([ckptfs_bin(), "verify", root], capture_output=True, text=True,
                       stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        raise RuntimeError(f"ckptfs verify {root} exited {r.returncode}: {r.stdout}{r.stderr}")


def run_cat(paths):
    with open(os.devnull, "wb") as null:
        subprocess.run(["cat", *paths], stdout=null, check=True)


def spread(values):
    return f"{min(values):.2f}-{max(values):.2f}"


def verify_against_cat(a, backing, mnt, opts, total):
    """Per place (backing, mount) and kind (cold, warm): verify's and cat's times, alternated."""
    ckpt = os.path.join(backing, "ck")
    times = {}
    with CkptfsDaemon(backing, mnt, opts, log_file=os.path.join(a.workdir, "daemon.log")) as d:
        write_files(os.path.join(mnt, "ck"), total)
        d.sync()
    subprocess.run(["sync", "-f", backing], check=True)
    backing_paths = sorted(os.path.join(ckpt, n) for n in os.listdir(ckpt))
    with CkptfsDaemon(backing, mnt, opts, log_file=os.path.join(a.workdir, "daemon.log")):
        mount_paths = sorted(os.path.join(mnt, "ck", n) for n in os.listdir(os.path.join(mnt, "ck")))
        places = {"backing": (os.path.join(backing, "ck"), backing_paths, [backing_paths]),
                  "mount": (os.path.join(mnt, "ck"), mount_paths, [mount_paths, backing_paths])}
        for rep in range(a.repeat):
            for place, (root, paths, to_drop) in places.items():
                order = ["verify", "cat"] if rep % 2 == 0 else ["cat", "verify"]
                for c in order:
                    for kind in ("cold", "warm"):
                        if kind == "cold":
                            for p in to_drop:
                                drop_pages(p)
                        t, _ = timed(run_verify if c == "verify" else run_cat,
                                     root if c == "verify" else paths)
                        times.setdefault((place, kind, c), []).append(t)
                        print(f"{place} {kind} {c}: {t:.3f}s ({total / MiB / t:.0f} MiB/s)", flush=True)
    return times


@contextlib.contextmanager
def binary(path):
    """CKPTFS_BIN set to `path` (unchanged when None) while the block runs."""
    saved = os.environ.get("CKPTFS_BIN")
    if path:
        os.environ["CKPTFS_BIN"] = path
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("CKPTFS_BIN", None)
        else:
            os.environ["CKPTFS_BIN"] = saved


def marker_publication(a, backing, mnt, opts, total, verify, ckptfs=None):
    """Seconds from the close of a marker written after the checkpoint's files until it is on
    the backing store under its name, through a fresh mount with -o verify=`verify` of the
    binary `ckptfs` (None: the one under test)."""
    for p in (backing, mnt):
        os.makedirs(p, exist_ok=True)
    marker = os.path.join(backing, "ck", ".metadata")
    with binary(ckptfs), CkptfsDaemon(backing, mnt, opts + [f"verify={verify}"],
                                      log_file=os.path.join(a.workdir, "daemon.log")) as d:
        write_files(os.path.join(mnt, "ck"), total)
        with open(os.path.join(mnt, "ck", ".metadata"), "wb") as f:
            f.write(b"marker")
        t0 = time.monotonic()
        while not os.path.exists(marker):
            time.sleep(0.002)
        t = time.monotonic() - t0
        d.sync()
        read_back = d.stats()["bytes_read_back"]
    if verify == "markers" and read_back < total:
        raise RuntimeError(f"verify=markers read back {read_back} bytes, not {total}")
    subprocess.run(["rm", "-rf", backing, mnt], check=True)
    return t


def verify_table(times):
    lines = []
    for place in ("backing", "mount"):
        for kind in ("cold", "warm"):
            v, c = times[(place, kind, "verify")], times[(place, kind, "cat")]
            speed = [ci / vi for vi, ci in zip(v, c)]  # Per run: verify's speed as cat's.
            lines.append([place, kind, f"{statistics.median(v):.3f}", f"{statistics.median(c):.3f}",
                          f"{statistics.median(c) / statistics.median(v):.2f}",
                          f"{statistics.median(speed):.2f}", spread(speed),
                          "yes" if statistics.median(speed) >= 0.8 else "no"])
    return table(["place", "load", "verify s", "cat s", "cat/verify s", "speed/cat", "spread",
                  ">= 0.8"], lines)


def run(a):
    backing, mnt = os.path.join(a.workdir, "backing"), os.path.join(a.workdir, "mnt")
    for p in (backing, mnt):
        os.makedirs(p)
    total = int(a.verify_gib * (1 << 30)) // FILES // WRITE * WRITE * FILES
    opts = [f"cache_size={a.cache_size}"] + [o for o in a.ckptfs_opts.split(",") if o]
    times = {}
    if not a.verify_markers_only:
        times = verify_against_cat(a, backing, mnt, opts, total)
        subprocess.run(["rm", "-rf", backing, mnt], check=True)
    # Reading the checkpoint's bytes from the backing store, cold and from the page cache: what
    # verify=markers reads back (from the device, where the backing filesystem has O_DIRECT).
    with CkptfsDaemon(backing, mnt, opts, log_file=os.path.join(a.workdir, "daemon.log")) as d:
        write_files(os.path.join(mnt, "ck"), total)
        d.sync()
    ckpt = os.path.join(backing, "ck")
    paths = sorted(os.path.join(ckpt, n) for n in os.listdir(ckpt))
    drop_pages(paths)
    cat_cold, _ = timed(run_cat, paths)
    cat_warm, _ = timed(run_cat, paths)
    subprocess.run(["rm", "-rf", backing, mnt], check=True)
    # (label, verify, binary): the binary under test without and with the gate, and with
    # --verify-baseline the gate of another binary (the previous main), alternated.
    variants = [("verify=off", "off", None), ("verify=markers", "markers", None)]
    if a.verify_baseline:
        variants.append(("verify=markers, baseline", "markers", a.verify_baseline))
    markers = {label: [] for label, _, _ in variants}
    for rep in range(a.repeat):
        shift = rep % len(variants)
        for label, verify, ckptfs in variants[shift:] + variants[:shift]:
            t = marker_publication(a, backing, mnt, opts, total, verify, ckptfs)
            markers[label].append(t)
            print(f"marker published, {label}: {t:.3f}s", flush=True)
    if times:
        print()
        print(f"{FILES} files, {total / MiB:.0f} MiB, {a.repeat} runs alternated (medians; "
              "speed/cat: median of the runs' ratios, spread: their min-max)")
        print(verify_table(times))
    off = markers["verify=off"]
    rows = [[label, f"{statistics.median(markers[label]):.3f}"] for label, _, _ in variants]
    for label, _, _ in variants[1:]:
        added = [m - o for m, o in zip(markers[label], off)]
        rows.append([f"added by {label} (median of paired runs)",
                     f"{statistics.median(added):.3f}"])
        rows.append([f"added by {label}, spread", spread(added)])
    if a.verify_baseline:
        ratio = [(m - o) / (b - o) for m, b, o in
                 zip(markers["verify=markers"], markers["verify=markers, baseline"], off)]
        rows.append(["added as the baseline's (median of paired runs)",
                     f"{statistics.median(ratio):.2f}"])
        rows.append(["added as the baseline's, spread", spread(ratio)])
    rows += [["cat of the files, cold", f"{cat_cold:.3f}"],
             ["cat of the files, page cache", f"{cat_warm:.3f}"]]
    print()
    print(f"marker closed after {FILES} files, {total / MiB:.0f} MiB; {a.repeat} runs alternated")
    print(table(["marker published after", "s"], rows))
    return {"verify": {" ".join(k): v for k, v in times.items()}, "marker": markers,
            "cat_cold": cat_cold, "cat_warm": cat_warm, "bytes": total}
