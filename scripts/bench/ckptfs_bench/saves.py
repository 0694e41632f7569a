"""The save comparison (the default mode): every workload saved and loaded by every contender,
--repeat times, alternated; medians reported by report.py."""
import json
import os
import shutil
import signal
import subprocess
import time

from ckptfs_testing import workloads
from ckptfs_testing.workloads import ranks
from ckptfs_testing.ckptfs_daemon import CkptfsDaemon, ckptfs_bin, mounted, proc_io

from .contenders import (ALL_WORKLOADS, ASYNC_CONTENDERS, ON_SHM, SLOW_CONTENDERS, SLOW_WORKLOADS,
                         contenders_of)
from .measure import (MiB, block_device, drop_caches, empty_dir, fs_type, medians, parse_size,
                      saver_cpu_seconds, sectors_written, timed, written)
from .memory import CKPTFS_VARIANTS, binary_for, kernel_for
from .multinode import (MARKER_POLL, MULTINODE, MULTINODE_DESCRIPTION, MULTINODE_NODES,
                        multinode_workload, run_multinode)
from .report import report


class Bench:
    def __init__(self, args):
        self.args = args
        self.workdir = os.path.realpath(args.workdir)
        self.shmdir = os.path.realpath(args.shm_dir)
        self.daemons = []
        self.dev = block_device(os.path.dirname(self.workdir) if not os.path.exists(self.workdir)
                                else self.workdir)

    # --- one measurement --------------------------------------------------------------------------

    def run_one(self, contender, w, cold, first_run):
        a = self.args
        rec = {"contender": contender}
        is_ck = contender in CKPTFS_VARIANTS
        is_async = contender in ASYNC_CONTENDERS
        if contender in ON_SHM:
            root = os.path.join(self.shmdir, w.name + ("-floor" if contender == "floor" else ""))
        elif contender in ("plain", "async"):
            root = os.path.join(self.workdir, contender, w.name)
        else:
            backing = os.path.join(self.workdir, "backing", w.name)
            root = os.path.join(self.workdir, "mnt")
            os.makedirs(backing)
            os.makedirs(root, exist_ok=True)
        if not is_ck:
            os.makedirs(root)
        os.sync()  # Start from a quiet disk: earlier runs' dirty data is not ours to pay for.
        d = None
        try:
            if is_ck:
                d = self.mount(backing, root, "save", CKPTFS_VARIANTS[contender],
                               binary_for(contender, a))
                waited = self._await_prefault(d)
                if waited is not None:
                    rec["prefault_wait"] = waited
                rec["daemon_rss_before"] = d.vm_rss_kib() * 1024
            if self._warm_up(contender, w):
                # The checkpoint before: saved, made durable, then deleted, as a trainer that
                # keeps the latest checkpoints deletes older ones.
                rec["save_first"] = w.async_save_seconds(root)[0] if is_async else w.save(root)
                if contender == "plain":
                    subprocess.run(["sync", "-f", root], check=True)
                elif is_ck:
                    d.sync()
                empty_dir(root)
                if is_ck:
                    d.sync()
                os.sync()
            if is_ck:
                dio0, cpu0 = d.io(), d.cpu_seconds()
            io0, dev0 = proc_io("self"), sectors_written(self.dev)
            ranks0 = ranks.ranks_written
            saver0 = saver_cpu_seconds()
            if is_async:
                rec["save"], completed = w.async_save_seconds(root)
            else:
                rec["save"] = completed = w.save(root)
            if contender == "async":
                rec["durable"] = completed
            elif contender == "plain":
                t, _ = timed(subprocess.run, ["sync", "-f", root])
                rec["durable"] = rec["save"] + t
            elif is_ck:
                t, _ = timed(d.sync)
                rec["durable"] = completed + t
                rec["daemon_cpu"] = d.cpu_seconds() - cpu0
            rec["saver_cpu"] = saver_cpu_seconds() - saver0
            for key in ("save_first", "save", "durable"):
                if key in rec and type(rec[key]) is not float:
                    raise TypeError(f"{w.name} {contender}: {key} is {rec[key]!r}, not seconds")
            io1, dev1 = proc_io("self"), sectors_written(self.dev)
            by_workload = written(io0, io1) + ranks.ranks_written - ranks0
            rec["logical_bytes"] = w.logical_bytes()
            if contender == "plain":
                rec["wa"] = by_workload / rec["logical_bytes"]
            elif is_ck:
                rec["wa"] = written(dio0, d.io()) / rec["logical_bytes"]
                rec["workload_written_wa"] = by_workload / rec["logical_bytes"]
                rec["daemon_hwm"] = d.vm_hwm_kib() * 1024
                rec["stats"] = d.stats()
            if contender not in ON_SHM:
                rec["dev_wa"] = (dev1 - dev0) / rec["logical_bytes"]
            # Loads: cold (after the durable point, caches dropped, ckptfs remounted), then warm;
            # for each of the workload's loaders (load; load_whole: zarr_distopt's whole-region).
            # The async saves' files are those of plain and ckptfs.
            loads = [] if is_async else [("load", w.load_seconds)]
            if hasattr(w, "load_whole_region") and first_run:
                loads.append(("load_whole", lambda root: timed(
                    w.load_whole_region, root, False, a.whole_region_every)[0]))
            for key, load in loads:
                if is_ck:
                    t, rc = timed(d.unmount)
                    if key == "load":
                        rec["unmount"] = t
                    if rc != 0:
                        what = "after unmount" if key == "load" else "(load mount) after unmount"
                        raise RuntimeError(f"ckptfs exited {rc} {what}:\n{d.output()[-3000:]}")
                    self.check_errors(d)
                    if cold:
                        drop_caches()
                    d = self.mount(backing, root, key, CKPTFS_VARIANTS[contender],
                                   binary_for(contender, a))
                elif cold and contender == "plain":
                    drop_caches()
                if cold and contender not in ON_SHM:
                    rec[key + "_cold"] = load(root)
                rec[key + "_warm"] = load(root)
                if is_ck:
                    rec["load_daemon_hwm"] = max(rec.get("load_daemon_hwm", 0), d.vm_hwm_kib() * 1024)
            if is_ck:
                if d.unmount() != 0:
                    raise RuntimeError("ckptfs (load mount) exited non-zero:\n" + d.output()[-3000:])
                self.check_errors(d)
                d = None
        finally:
            if d is not None:
                d.cleanup()
                self.daemons.remove(d)
            if is_ck:
                if not mounted(root):
                    shutil.rmtree(os.path.join(self.workdir, "backing"), ignore_errors=True)
            elif not (contender in ("plain", "async") and mounted(root)):
                shutil.rmtree(root, ignore_errors=True)
        return rec

    def _warm_up(self, contender, w):
        """Whether the timed save follows an untimed one in the same place (not for the slow runs:
        SLOW_WORKLOADS on SLOW_CONTENDERS)."""
        return self.args.warm_up and not (w.name in SLOW_WORKLOADS and contender in SLOW_CONTENDERS)

    def _await_prefault(self, d):
        """With prefault=on, waits until the mount has faulted its cache in, as a mount made at
        the start of a training job has by its first checkpoint; returns the wait (None: no
        prefault)."""
        t = time.monotonic()
        if not d.stats().get("prefault_running"):
            return None
        while d.stats().get("prefault_running"):
            time.sleep(0.1)
        return time.monotonic() - t

    def mount(self, backing, mnt, tag, extra_opts=(), binary=None):
        opts = ([f"cache_size={self.args.cache_size}"]
                + [o for o in self.args.ckptfs_opts.split(",") if o] + list(extra_opts))
        d = CkptfsDaemon(backing, mnt, opts, log_file=os.path.join(self.workdir, f"ckptfs-{tag}.log"),
                         binary=binary)
        if os.path.exists(d.log_file):
            os.unlink(d.log_file)
        self.daemons.append(d)
        d.start()
        return d

    def check_errors(self, d):
        errs = d.error_lines()
        if errs:
            raise RuntimeError("ckptfs logged errors:\n" + "\n".join(errs[-10:]))
        self.daemons.remove(d)

    def cleanup(self):
        for d in list(self.daemons):
            d.cleanup()
        self.daemons.clear()
        for p in (self.workdir, self.shmdir):
            if os.path.isdir(p) and not any(mounted(os.path.join(p, x))
                                            for x in ("mnt",) + MULTINODE_NODES):
                shutil.rmtree(p, ignore_errors=True)

    # --- the whole run ------------------------------------------------------------------------------

    def run(self):
        a = self.args
        names = a.only or ALL_WORKLOADS
        results = {}
        cold = not a.no_cold
        for name in names:
            w = self._workload(name)
            contenders, repeats = contenders_of(name, a)
            variants = {c: w for c in contenders}
            if "floor" in contenders:
                variants["floor"] = self._workload(name, fine_chunks=True)
            runs = {c: [] for c in contenders}
            description = MULTINODE_DESCRIPTION if name == MULTINODE else w.description
            print(f"== {name}: {description}, {w.logical_bytes() / MiB:.0f} MiB logical", flush=True)
            if name == MULTINODE:
                print(f"   marker: until .metadata is on the backing store, looked for every "
                      f"{MARKER_POLL * 1000:.0f} ms", flush=True)
            if name == "zarr_distopt":
                print(f"   floor: {variants['floor'].description}; whole-region load: "
                      f"{whole_region_pieces(w, a.whole_region_every)}", flush=True)
            if name in SLOW_WORKLOADS:
                print("   runs: " + ", ".join(f"{c} {repeats[c]}" for c in contenders)
                      + f" ({'/'.join(SLOW_CONTENDERS)}: --slow-repeat, each run rewrites whole"
                      " chunks per piece)", flush=True)
            error = None
            started = time.monotonic()
            for rep in range(a.repeat):
                n = len(contenders)
                order = contenders[rep % n:] + contenders[:rep % n]  # Alternate who goes first.
                for c in order:
                    if rep >= repeats[c]:
                        continue
                    try:
                        if name == MULTINODE:
                            rec = run_multinode(self, c, variants[c])
                        else:
                            # ck_small's runs on a kernel that gives shared memory small pages.
                            with kernel_for(c):
                                rec = self.run_one(c, variants[c], cold, first_run=not runs[c])
                    except Exception as e:  # Report it and go on with the next workload.
                        error = f"{c}: {e}"
                        print(f"   rep {rep + 1} {c:6s} FAILED: {e}", flush=True)
                        break
                    runs[c].append(rec)
                    print(f"   rep {rep + 1} {c:6s} " + " ".join(
                        f"{k}={v:.3f}" for k, v in rec.items() if isinstance(v, float)), flush=True)
                if error:
                    break
            elapsed = time.monotonic() - started
            print(f"   {name} took {elapsed:.0f}s", flush=True)
            results[name] = {"description": description, "logical_bytes": w.logical_bytes(),
                             "error": error, "contenders": contenders, "repeats": repeats,
                             "runs": runs, "median": {c: medians(runs[c]) for c in contenders},
                             "elapsed_s": elapsed}
            if "floor" in contenders:
                results[name]["floor_description"] = variants["floor"].description
                results[name]["whole_region_pieces"] = whole_region_pieces(w, a.whole_region_every)
        return results

    def _workload(self, name, **kw):
        a = self.args
        if name == "seq" and a.seq_gib:
            return workloads.SeqWrite(int(a.seq_gib * (1 << 30)))
        if name == "small" and a.small_count:
            return workloads.SmallFiles(a.small_count)
        if name == MULTINODE:
            return multinode_workload(a.scale)
        return workloads.make(name, scale=a.scale, **kw)


def whole_region_pieces(w, every):
    """Which pieces ZarrDistOpt.load_whole_region(every=every) loads, in words."""
    n = len(w.piece_bounds(0))
    return f"every piece of {n} per rank" if every == 1 else \
        f"1 piece in {every}, {len(w.piece_bounds(0)[::every])} of {n} per rank"


def run_saves(a):
    """Runs the comparison with the parsed arguments `a`, prints its report and writes --json."""
    os.makedirs(a.shm_dir)

    b = Bench(a)
    # SIGTERM/SIGINT: unwind through the finally below so the mounts go away.
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    t0 = time.monotonic()
    try:
        print(f"ckptfs {ckptfs_bin()}; plain/backing {b.workdir} ({fs_type(b.workdir)}, "
              f"device {b.dev}); shm {b.shmdir}; cache_size={a.cache_size}; repeat {a.repeat}; "
              f"scale {a.scale}", flush=True)
        results = b.run()
    finally:
        b.cleanup()
    text, targets = report(results, parse_size(a.cache_size))
    print()
    print(text)
    print(f"\ntotal {time.monotonic() - t0:.0f}s")
    with open(a.json, "w") as f:
        json.dump({"config": {k: v for k, v in vars(a).items()}, "device": b.dev,
                   "ckptfs": ckptfs_bin(), "elapsed": time.monotonic() - t0,
                   "results": results, "targets": targets}, f, indent=1, default=str)
    print(f"wrote {a.json}")
