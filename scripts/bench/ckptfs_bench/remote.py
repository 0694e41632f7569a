"""--remote: upload throughput of the remote tier (-o remote) against boto3's upload_file, both
to one moto server (ckptfs_testing.s3_server) on this machine. --remote-mib (default 256 x
scale) MiB in 4 files. ckptfs: the files written through a mount with -o remote, from the first
write until `ckptfs sync --remote` returns (written, made durable in the backing directory and
uploaded; when `ckptfs sync` returned is shown too: uploads run meanwhile); boto3: upload_file of the same files from a directory (its default TransferConfig:
multipart above 8 MiB, 10 threads), one after another. Alternated, --repeat runs, medians; the
objects are deleted after each run."""
import os
import shutil
import time

import boto3
from ckptfs_testing.ckptfs_daemon import CkptfsDaemon, run_ckptfs
from ckptfs_testing.s3_server import CREDENTIALS, MotoServer

from .measure import medians
from .tables import table

BUCKET = "bench"
CONTENDERS = ("ckptfs", "boto3")
FILES = 4


def write_files(root, mib):
    block = os.urandom(1 << 20)
    for i in range(FILES):
        with open(os.path.join(root, f"shard_{i}.distcp"), "wb") as f:
            for _ in range(mib // FILES):
                f.write(block)


def empty_bucket(s3):
    c = s3.client()
    for page in c.get_paginator("list_objects_v2").paginate(Bucket=BUCKET):
        for o in page.get("Contents", []):
            c.delete_object(Bucket=BUCKET, Key=o["Key"])


def run(a):
    mib = int(a.remote_mib or 256 * a.scale)
    os.environ.update(CREDENTIALS)
    rows = {c: [] for c in CONTENDERS}
    with MotoServer() as s3:
        s3.create_bucket(BUCKET)
        source = os.path.join(a.workdir, "source")
        os.makedirs(source)
        write_files(source, mib)
        client = boto3.client("s3", endpoint_url=s3.endpoint, region_name="us-east-1")
        for rep in range(a.repeat):
            for c in (CONTENDERS if rep % 2 == 0 else reversed(CONTENDERS)):
                if c == "boto3":
                    t = time.monotonic()
                    for name in sorted(os.listdir(source)):
                        client.upload_file(os.path.join(source, name), BUCKET, f"boto3/{name}")
                    seconds = time.monotonic() - t
                else:
                    backing = os.path.join(a.workdir, "backing")
                    mnt = os.path.join(a.workdir, "mnt")
                    os.makedirs(backing)
                    os.makedirs(mnt)
                    d = CkptfsDaemon(backing, mnt, [f"remote=s3://{BUCKET}/ckptfs",
                                                    f"remote_endpoint={s3.endpoint}"],
                                     log_file=os.path.join(a.workdir, "remote.log"))
                    d.start()
                    try:
                        t = time.monotonic()
                        for name in sorted(os.listdir(source)):
                            shutil.copyfile(os.path.join(source, name), d.path(name))
                        d.sync()
                        durable = time.monotonic() - t
                        r = run_ckptfs(["sync", d.mnt, "--remote"], timeout=3600)
                        seconds = time.monotonic() - t
                        if r.returncode != 0:
                            raise RuntimeError("ckptfs sync --remote failed: " + r.stderr)
                        if d.unmount() != 0:
                            raise RuntimeError("ckptfs exited non-zero:\n" + d.output()[-3000:])
                    finally:
                        d.cleanup()
                        shutil.rmtree(backing, ignore_errors=True)
                        shutil.rmtree(mnt, ignore_errors=True)
                rec = {"seconds": seconds, "mib_per_s": mib / seconds}
                if c == "ckptfs":
                    rec["durable_seconds"] = durable
                rows[c].append(rec)
                print(f"rep {rep + 1} {c:7s} {seconds:.2f} s  {mib / seconds:.1f} MiB/s"
                      + (f"  (durable in the backing directory after {durable:.2f} s)"
                         if c == "ckptfs" else ""), flush=True)
                empty_bucket(s3)
    med = {c: medians(rows[c]) for c in CONTENDERS}
    print()
    print(table(["uploader", "s", "MiB/s", "x boto3", "durable locally s"],
                [[c, f"{med[c]['seconds']:.2f}", f"{med[c]['mib_per_s']:.1f}",
                  f"{med[c]['mib_per_s'] / med['boto3']['mib_per_s']:.2f}",
                  f"{med[c]['durable_seconds']:.2f}" if "durable_seconds" in med[c] else "-"]
                 for c in CONTENDERS]))
    return {"remote": {c: {"runs": rows[c], "median": med[c]} for c in CONTENDERS}}
