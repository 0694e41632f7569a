"""--remote-load: loading a DCP checkpoint that is only on the object store (restart on any node),
both from one moto server (ckptfs_testing.s3_server) on this machine. The checkpoint (--remote-mib,
default 256 x scale, in 4 ranks' worth of tensors saved by one process) is put on the store once
with boto3. ckptfs: a mount of an empty backing directory with -o remote, then dcp.load through it
(the mount lists the directories it is asked for and fetches each file with parallel ranged GETs
before its first open), timed from the mount being up until the load returns; boto3: download_file
of every object of the checkpoint into an empty directory (its default TransferConfig: ranged GETs
of 8 MiB above 8 MiB, 10 threads), one after another, then dcp.load from that directory. Alternated,
--repeat runs, medians; the page cache is dropped before each run. Target: ckptfs at least 0.8x
boto3's speed."""
import os
import shutil
import tempfile
import time
import warnings

from .measure import alternated, drop_caches, medians
from .store import BUCKET, moto_bucket, remote_mount
from .tables import table

PREFIX = "load"
CONTENDERS = ("ckptfs", "boto3")
TENSORS = 16


def make_state(mib):
    import torch
    g = torch.Generator().manual_seed(7)
    per = (mib << 20) // TENSORS // 4
    return {f"layer{i}.weight": torch.randn(per, generator=g) for i in range(TENSORS)}


def run(a):
    import torch
    import torch.distributed.checkpoint as dcp
    warnings.filterwarnings("ignore")  # One process without a process group: DCP's no_dist mode.
    mib = int(a.remote_mib or 256 * a.scale)
    rows = {c: [] for c in CONTENDERS}
    state = make_state(mib)
    with moto_bucket() as (s3, client):
        source = tempfile.mkdtemp(prefix="ckptfs-load-src-", dir=a.workdir)
        dcp.save(state, checkpoint_id=os.path.join(source, "step_1"))
        total = 0
        for name in sorted(os.listdir(os.path.join(source, "step_1"))):
            path = os.path.join(source, "step_1", name)
            total += os.path.getsize(path)
            client.upload_file(path, BUCKET, f"{PREFIX}/step_1/{name}")
        shutil.rmtree(source)
        real_mib = total / (1 << 20)

        def load(root):
            loaded = {k: torch.empty_like(v) for k, v in state.items()}
            dcp.load(loaded, checkpoint_id=os.path.join(root, "step_1"))
            for k, v in state.items():
                if not torch.equal(loaded[k], v):
                    raise RuntimeError(f"{k} loaded differs")

        for rep in range(a.repeat):
            for c in alternated(CONTENDERS, rep):
                drop_caches()
                work = tempfile.mkdtemp(prefix="ckptfs-load-", dir=a.workdir)
                try:
                    if c == "boto3":
                        t = time.monotonic()
                        listed = client.list_objects_v2(Bucket=BUCKET, Prefix=f"{PREFIX}/")
                        for o in listed.get("Contents", []):
                            dest = os.path.join(work, os.path.relpath(o["Key"], PREFIX))
                            os.makedirs(os.path.dirname(dest), exist_ok=True)
                            client.download_file(BUCKET, o["Key"], dest)
                        fetched = time.monotonic() - t
                        load(work)
                        seconds = time.monotonic() - t
                    else:
                        log = os.path.join(a.workdir, "remote_load.log")
                        with remote_mount(work, s3, PREFIX, log, a.ckptfs_opts) as d:
                            t = time.monotonic()
                            load(d.mnt)
                            seconds = time.monotonic() - t
                            fetched = None
                finally:
                    shutil.rmtree(work, ignore_errors=True)
                rec = {"seconds": seconds, "mib_per_s": real_mib / seconds}
                if fetched is not None:
                    rec["fetch_seconds"] = fetched
                rows[c].append(rec)
                print(f"rep {rep + 1} {c:7s} {seconds:.2f} s  {real_mib / seconds:.1f} MiB/s"
                      + (f"  (downloaded after {fetched:.2f} s)" if fetched is not None else ""),
                      flush=True)
    med = {c: medians(rows[c]) for c in CONTENDERS}
    print()
    print(f"checkpoint: {real_mib:.0f} MiB in {TENSORS} tensors, DCP, on the store only")
    print(table(["loader", "s", "MiB/s", "x boto3", "download s"],
                [[c, f"{med[c]['seconds']:.2f}", f"{med[c]['mib_per_s']:.1f}",
                  f"{med[c]['mib_per_s'] / med['boto3']['mib_per_s']:.2f}",
                  f"{med[c]['fetch_seconds']:.2f}" if "fetch_seconds" in med[c] else "-"]
                 for c in CONTENDERS]))
    return {"remote_load": {c: {"runs": rows[c], "median": med[c]} for c in CONTENDERS}}
