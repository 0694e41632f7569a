"""--fuse-ring: the warm load of --small-count small files through one binary, its requests over
/dev/fuse and over FUSE over io_uring (-o io_uring=on)."""
import os
import sys

from ckptfs_testing import workloads
from ckptfs_testing.ckptfs_daemon import CkptfsDaemon

from .measure import alternated, medians, timed
from .tables import table

ENABLE_URING = "/sys/module/fuse/parameters/enable_uring"
FUSE_RING_CONTENDERS = ("dev_fuse", "io_uring")


def loader_migrations():
    """How often the kernel has moved this process to another CPU (/proc/self/sched)."""
    with open("/proc/self/sched") as f:
        for line in f:
            if line.startswith("se.nr_migrations"):
                return int(line.split()[-1])
    return 0


def run(a):
    """The warm load of --small-count small files (default 5,000) through one binary, its
    requests over /dev/fuse (io_uring=off) and over FUSE over io_uring (io_uring=on), alternated,
    --repeat runs, medians."""
    if not os.path.exists(ENABLE_URING):
        sys.exit(f"bench: {ENABLE_URING} is missing: this kernel has no FUSE over io_uring")
    w = workloads.SmallFiles(a.small_count or 5000)
    backing = os.path.join(a.workdir, "backing")
    mnt = os.path.join(a.workdir, "mnt")
    os.makedirs(backing)
    os.makedirs(mnt)
    with open(ENABLE_URING) as f:
        enabled_before = f.read().strip()
    rows = {c: [] for c in FUSE_RING_CONTENDERS}
    d = None
    try:
        with open(ENABLE_URING, "w") as f:
            f.write("Y")
        d = CkptfsDaemon(backing, mnt, [], log_file=os.path.join(a.workdir, "save.log"))
        d.start()
        w.save(mnt)
        d.sync()
        if d.unmount() != 0:
            raise RuntimeError("ckptfs exited non-zero:\n" + d.output()[-3000:])
        d = None
        for rep in range(a.repeat):
            for c in alternated(FUSE_RING_CONTENDERS, rep):
                d = CkptfsDaemon(backing, mnt, ["io_uring=" + ("on" if c == "io_uring" else "off")],
                                 log_file=os.path.join(a.workdir, f"{c}.log"))
                d.start()
                w.load(mnt)  # Fills the page cache: the timed load is warm.
                cpu0, moved0, ring0 = d.cpu_seconds(), loader_migrations(), \
                    d.stats()["worker"]["io_uring_requests"]
                seconds, _ = timed(w.load, mnt)
                rec = {"load_warm": seconds, "us_per_file": seconds / w.count * 1e6,
                       "daemon_cpu_us_per_file": (d.cpu_seconds() - cpu0) / w.count * 1e6,
                       "loader_migrations_per_file": (loader_migrations() - moved0) / w.count,
                       "io_uring_requests_per_file":
                           (d.stats()["worker"]["io_uring_requests"] - ring0) / w.count}
                if d.unmount() != 0:
                    raise RuntimeError("ckptfs exited non-zero:\n" + d.output()[-3000:])
                d = None
                rows[c].append(rec)
                print(f"rep {rep + 1} {c:8s} " + " ".join(f"{k}={v:.3f}" for k, v in rec.items()),
                      flush=True)
    finally:
        if d is not None:
            d.cleanup()
        with open(ENABLE_URING, "w") as f:
            f.write(enabled_before)
    med = {c: medians(rows[c]) for c in FUSE_RING_CONTENDERS}
    print()
    print(table(["transport", "warm load s", "us/file", "daemon CPU us/file",
                 "loader CPU moves/file", "ring requests/file"],
                [[c, f"{m['load_warm']:.3f}", f"{m['us_per_file']:.1f}",
                  f"{m['daemon_cpu_us_per_file']:.1f}", f"{m['loader_migrations_per_file']:.2f}",
                  f"{m['io_uring_requests_per_file']:.2f}"] for c, m in med.items()]))
    print(f"\nio_uring speed / /dev/fuse: "
          f"{med['dev_fuse']['load_warm'] / med['io_uring']['load_warm']:.2f}x "
          f"({w.count} files, median of {a.repeat})")
    return {"runs": rows, "median": med}
