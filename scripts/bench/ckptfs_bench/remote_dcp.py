"""--remote-dcp: a DCP save through a mount with -o remote against the ways a trainer gets a
checkpoint onto an object store without ckptfs, all to one moto server (ckptfs_testing.s3_server)
on this machine. The checkpoint: --remote-mib (default 256 x scale) MiB in TENSORS tensors, saved
by one process (DCP's no_dist mode). Contenders:

  ckptfs        dcp.save into a mount of an empty backing directory with -o remote; on the store
                when `ckptfs sync MNT --remote` returns
  local+boto3   dcp.save into a directory on the backing disk (DCP's writer fsyncs its files),
                then every file uploaded at once with boto3's transfer manager (its default
                TransferConfig: 10 threads, multipart above 8 MiB); on the store when the last
                upload completed
  shm           dcp.save into /dev/shm (--shm-dir): the save's return at memory speed, the
                reference of the save's target; not uploaded

Each contender saves twice into the same place: the first save (save_first, reported; ckptfs's
into a fresh mount) is then removed (from the store too), and the second is timed, as a trainer
that keeps its latest checkpoint saves. save is the time dcp.save blocked the trainer; store the
time from its start until the checkpoint is on the store. Targets: ckptfs on the store no later
than local+boto3, its save at most 1.3x shm's. DCP's own fsspec writer to s3:// (s3fs) is not a
contender: s3fs 2026.9 needs aiobotocore, which pins a botocore older than the one the pinned
boto3 needs. Alternated, --repeat runs, medians; the objects are deleted after each run. Also reported: the ckptfs daemon's peak resident
memory (VmHWM) once the checkpoint is on the store, against cache_size (--cache-size) plus
HWM_MARGIN."""
import contextlib
import os
import shutil
import tempfile
import time
import warnings

from .measure import alternated, medians, parse_size
from .store import BUCKET, empty_bucket, moto_bucket, remote_mount, sync_remote
from .tables import table

CONTENDERS = ("ckptfs", "local+boto3", "shm")
TENSORS = 16
SAVE_TARGET = 1.3  # ckptfs's save over shm's.
MIB = 1 << 20
# What the daemon may hold beyond cache_size: the uploader's buffers (libcurl reads each part
# through 1 MiB, remote_concurrency at a time), threads and tables.
HWM_MARGIN = 64 * MIB


def make_state(mib):
    import torch
    g = torch.Generator().manual_seed(11)
    per = (mib << 20) // TENSORS // 4
    return {f"layer{i}.weight": torch.randn(per, generator=g) for i in range(TENSORS)}


@contextlib.contextmanager
def removed_after(path):
    try:
        yield
    finally:
        shutil.rmtree(path, ignore_errors=True)


def timed_save(dcp, state, checkpoint_id):
    t = time.monotonic()
    dcp.save(state, checkpoint_id=checkpoint_id)
    return time.monotonic() - t


def upload_tree(client, root, prefix):
    """Uploads every file under `root` to BUCKET/`prefix`/ with one transfer manager, all at
    once, and waits for the last."""
    from boto3.s3.transfer import TransferConfig, create_transfer_manager
    with create_transfer_manager(client, TransferConfig()) as manager:
        futures = []
        for dirpath, _, names in os.walk(root):
            for name in names:
                path = os.path.join(dirpath, name)
                key = f"{prefix}/{os.path.relpath(path, root)}"
                futures.append(manager.upload(path, BUCKET, key))
        for f in futures:
            f.result()


def run(a):
    import torch.distributed.checkpoint as dcp
    warnings.filterwarnings("ignore")  # One process without a process group: DCP's no_dist mode.
    mib = int(a.remote_mib or 256 * a.scale)
    state = make_state(mib)
    rows = {c: [] for c in CONTENDERS}
    os.makedirs(a.shm_dir)
    with moto_bucket() as (s3, client), removed_after(a.shm_dir):
        for rep in range(a.repeat):
            for c in alternated(CONTENDERS, rep):
                work = tempfile.mkdtemp(prefix="ckptfs-remote-dcp-", dir=a.workdir)
                rec = {}
                try:
                    if c == "ckptfs":
                        log = os.path.join(a.workdir, "remote_dcp.log")
                        opts = f"cache_size={a.cache_size},{a.ckptfs_opts}"
                        with remote_mount(work, s3, "ckptfs", log, opts) as d:
                            rec["save_first"] = timed_save(dcp, state, d.path("step_0"))
                            sync_remote(d)
                            shutil.rmtree(d.path("step_0"))
                            t = time.monotonic()
                            dcp.save(state, checkpoint_id=d.path("step_1"))
                            rec["save"] = time.monotonic() - t
                            sync_remote(d)
                            rec["store"] = time.monotonic() - t
                            rec["daemon_hwm"] = d.vm_hwm_kib() * 1024
                    elif c == "local+boto3":
                        rec["save_first"] = timed_save(dcp, state, os.path.join(work, "step_0"))
                        shutil.rmtree(os.path.join(work, "step_0"))
                        t = time.monotonic()
                        dcp.save(state, checkpoint_id=os.path.join(work, "step_1"))
                        rec["save"] = time.monotonic() - t
                        upload_tree(client, os.path.join(work, "step_1"), "boto3/step_1")
                        rec["store"] = time.monotonic() - t
                    else:
                        for step, key in (("step_0", "save_first"), ("step_1", "save")):
                            rec[key] = timed_save(dcp, state, os.path.join(a.shm_dir, step))
                            shutil.rmtree(os.path.join(a.shm_dir, step))
                finally:
                    shutil.rmtree(work, ignore_errors=True)
                empty_bucket(client)
                rows[c].append(rec)
                print(f"rep {rep + 1} {c:12s} save_first {rec['save_first']:.2f} s  "
                      f"save {rec['save']:.2f} s"
                      + (f"  on the store after {rec['store']:.2f} s" if "store" in rec else ""),
                      flush=True)
    med = {c: medians(rows[c]) for c in CONTENDERS}
    save_ratio = med["ckptfs"]["save"] / med["shm"]["save"]
    hwm = max(r["daemon_hwm"] for r in rows["ckptfs"])
    hwm_limit = parse_size(a.cache_size) + HWM_MARGIN
    store_ratio = med["ckptfs"]["store"] / med["local+boto3"]["store"]
    print()
    print(f"checkpoint: {mib} MiB in {TENSORS} tensors, DCP, one process")
    print(table(["contender", "first save s", "save s", "on the store s"],
                [[c, f"{med[c]['save_first']:.2f}", f"{med[c]['save']:.2f}",
                  f"{med[c]['store']:.2f}" if "store" in med[c] else "-"] for c in CONTENDERS]))
    print(f"ckptfs save / shm save: {save_ratio:.2f} (target <= {SAVE_TARGET}: "
          f"{'ok' if save_ratio <= SAVE_TARGET else 'MISSED'}); ckptfs on the store / "
          f"local+boto3: {store_ratio:.2f} (target <= 1.0: "
          f"{'ok' if store_ratio <= 1.0 else 'MISSED'})")
    print(f"ckptfs daemon's peak resident memory (VmHWM): {hwm / MIB:.0f} MiB (target <= "
          f"cache_size {a.cache_size} + {HWM_MARGIN // MIB} MiB of upload buffers and the rest: "
          f"{'ok' if hwm <= hwm_limit else 'MISSED'})")
    return {"remote_dcp": {c: {"runs": rows[c], "median": med[c]} for c in CONTENDERS}}
