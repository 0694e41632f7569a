"""What the bench measures with, besides the clock: the disk's and processes' written bytes, CPU
time, caches dropped, medians; and the small file-tree and size helpers of every mode."""
import os
import resource
import shutil
import statistics
import subprocess
import time

from ckptfs_testing.workloads import ranks

MiB = 1 << 20


def fs_type(path):
    out = subprocess.run(["stat", "-f", "-c", "%T", path], capture_output=True, text=True)
    return out.stdout.strip()


def block_device(path):
    """The /sys/block name of the disk holding path (partitions map to their disk), or None."""
    st = os.stat(path)
    major, minor = os.major(st.st_dev), os.minor(st.st_dev)
    sys_dev = f"/sys/dev/block/{major}:{minor}"
    if not os.path.exists(sys_dev):
        return None
    real = os.path.realpath(sys_dev)
    if os.path.exists(os.path.join(real, "partition")):
        real = os.path.dirname(real)
    name = os.path.basename(real)
    return name if os.path.exists(f"/sys/block/{name}/stat") else None


def sectors_written(dev):
    if not dev:
        return 0
    with open(f"/sys/block/{dev}/stat") as f:
        return int(f.read().split()[6]) * 512


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def written(io0, io1):
    return (io1["write_bytes"] - io0["write_bytes"]) - (io1["cancelled_write_bytes"]
                                                       - io0["cancelled_write_bytes"])


def alternated(contenders, rep):
    """The contenders in the order of run `rep`: as given in even runs, reversed in odd ones, so
    that none always runs first (into memory the other just freed, or a cold disk)."""
    return list(contenders) if rep % 2 == 0 else list(reversed(contenders))


def timed(fn, *a):
    t = time.monotonic()
    r = fn(*a)
    return time.monotonic() - t, r


def empty_dir(root):
    for name in os.listdir(root):
        p = os.path.join(root, name)
        if os.path.isdir(p) and not os.path.islink(p):
            shutil.rmtree(p)
        else:
            os.unlink(p)


def medians(recs):
    """Per key, the median over the runs that measured it (load_whole: the first run only)."""
    out = {}
    for k in dict.fromkeys(k for r in recs for k in r):
        vals = [r[k] for r in recs if isinstance(r.get(k), (int, float))]
        if vals:
            out[k] = statistics.median(vals)
    return out


def saver_cpu_seconds():
    """CPU time (user + system) of this process, its finished children and the rank processes of
    the saves so far."""
    total = ranks.ranks_cpu
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        u = resource.getrusage(who)
        total += u.ru_utime + u.ru_stime
    return total


def parse_size(s):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    s = s.strip().upper()
    return int(float(s[:-1]) * units[s[-1]]) if s[-1] in units else int(s)
