"""--takeover: how long trainers wait while an upgrade (or, with --takeover-by kill, a kill -9)
replaces the mount's worker, with nothing staged, with --takeover-gib closed but unflushed, and
with as much written to files still open."""
import os
import shutil
import signal
import statistics
import threading
import time

from ckptfs_testing.ckptfs_daemon import CkptfsDaemon

from .measure import MiB, parse_size
from .tables import table


def takeover_run(a, workdir, staged_bytes, still_open):
    """One upgrade of a fresh mount with `staged_bytes` staged: sealed and unflushed, or
    (`still_open`) written to a file that stays open, unsealed. Returns (longest stall seen by a
    prober, the upgrade's wall time, the new worker's takeover_ms), in seconds."""
    backing, mnt = os.path.join(workdir, "backing"), os.path.join(workdir, "mnt")
    for p in (backing, mnt):
        os.makedirs(p)
    cache = max(parse_size(a.cache_size), staged_bytes + (1 << 30))
    opts = [f"cache_size={cache}", "flush_delay=3600s"] + [o for o in a.ckptfs_opts.split(",") if o]
    held = []
    try:
        with CkptfsDaemon(backing, mnt, opts, log_file=os.path.join(workdir, "daemon.log")) as d:
            chunk = os.urandom(MiB) * 64
            left, i = staged_bytes, 0
            while left > 0:
                f = open(os.path.join(mnt, f"staged{i}.bin"), "wb")
                for _ in range(min(left, 1 << 30) // len(chunk)):
                    f.write(chunk)
                f.flush()
                if still_open:
                    held.append(f)
                else:
                    f.close()
                left -= 1 << 30
                i += 1
            probe_dir = os.path.join(mnt, "probe")
            os.mkdir(probe_dir)
            stop, worst = threading.Event(), [0.0]

            def probe():
                # A listing always asks the daemon (attributes would come from the kernel's cache).
                while not stop.is_set():
                    t = time.monotonic()
                    os.listdir(probe_dir)
                    worst[0] = max(worst[0], time.monotonic() - t)
                    time.sleep(0.001)
            prober = threading.Thread(target=probe)
            prober.start()
            before = d.stats()["worker"]
            number = before["number"]
            t = time.monotonic()
            if a.takeover_by == "kill":
                os.kill(before["pid"], signal.SIGKILL)
            else:
                # Asked from this process (what `ckptfs upgrade` does): a child's exec would
                # close, and so seal, the files held open.
                with open(os.path.join(mnt, ".ckptfs", "upgrade"), "w") as f:
                    f.write("upgrade")
            while True:
                worker = d.stats()["worker"]
                if worker["number"] != number or worker["upgrade_error"]:
                    break
                time.sleep(0.005)
            wall = time.monotonic() - t
            time.sleep(0.1)
            stop.set()
            prober.join()
            if worker["upgrade_error"]:
                raise RuntimeError(f"upgrade failed: {worker['upgrade_error']}")
            for f in held:
                f.close()
            held.clear()
            return worst[0], wall, worker["takeover_ms"] / 1000
    finally:
        for f in held:
            try:
                f.close()
            except OSError:  # Its worker was killed and the cache was private: EBADF.
                pass
        shutil.rmtree(workdir, ignore_errors=True)


def run(a):
    staged = int(a.takeover_gib * (1 << 30))
    cases = {"nothing staged": (0, False), "sealed, unflushed": (staged, False),
             "open, unsealed": (staged, True)}
    rows = {name: [] for name in cases}
    for rep in range(a.repeat):
        for name in (list(cases) if rep % 2 == 0 else reversed(list(cases))):
            size, still_open = cases[name]
            rec = takeover_run(a, os.path.join(a.workdir, f"takeover-{rep}-{len(rows[name])}-{size}-{still_open}"),
                               size, still_open)
            print(f"{name} ({size / (1 << 30):.1f} GiB): stall {rec[0]:.3f}s, upgrade {rec[1]:.3f}s, "
                  f"takeover_ms {rec[2] * 1000:.1f}", flush=True)
            rows[name].append(rec)
    lines = []
    for name, recs in rows.items():
        stall, wall, took = (statistics.median(r[i] for r in recs) for i in range(3))
        lines.append([name, f"{cases[name][0] / (1 << 30):.1f} GiB", f"{stall:.3f}", f"{wall:.3f}",
                      f"{took:.3f}", "yes" if stall < 1.0 else "no"])
    print()
    print(table(["case", "staged", "stall s", "upgrade s", "takeover s", "< 1 s"], lines))
    return rows
