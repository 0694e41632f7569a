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

from .measure import alternated, medians
from .store import BUCKET, empty_bucket, moto_bucket, remote_mount, sync_remote
from .tables import table

CONTENDERS = ("ckptfs", "boto3")
FILES = 4


def write_files(root, mib):
    block = os.urandom(1 << 20)
    for i in range(FILES):
        with open(os.path.join(root, f"shard_{i}.distcp"), "wb") as f:
            for _ in range(mib // FILES):
                f.write(block)


def run(a):
    mib = int(a.remote_mib or 256 * a.scale)
    rows = {c: [] for c in CONTENDERS}
    with moto_bucket() as (s3, client):
        source = os.path.join(a.workdir, "source")
        os.makedirs(source)
        write_files(source, mib)
        for rep in range(a.repeat):
            for c in alternated(CONTENDERS, rep):
                if c == "boto3":
                    t = time.monotonic()
                    for name in sorted(os.listdir(source)):
                        client.upload_file(os.path.join(source, name), BUCKET, f"boto3/{name}")
                    seconds = time.monotonic() - t
                else:
                    with remote_mount(a.workdir, s3, "ckptfs",
                                      os.path.join(a.workdir, "remote.log"), a.ckptfs_opts) as d:
                        t = time.monotonic()
                        for name in sorted(os.listdir(source)):
                            shutil.copyfile(os.path.join(source, name), d.path(name))
                        d.sync()
                        durable = time.monotonic() - t
                        sync_remote(d)
                        seconds = time.monotonic() - t
                rec = {"seconds": seconds, "mib_per_s": mib / seconds}
                if c == "ckptfs":
                    rec["durable_seconds"] = durable
                rows[c].append(rec)
                print(f"rep {rep + 1} {c:7s} {seconds:.2f} s  {mib / seconds:.1f} MiB/s"
                      + (f"  (durable in the backing directory after {durable:.2f} s)"
                         if c == "ckptfs" else ""), flush=True)
                empty_bucket(client)
    med = {c: medians(rows[c]) for c in CONTENDERS}
    print()
    print(table(["uploader", "s", "MiB/s", "x boto3", "durable locally s"],
                [[c, f"{med[c]['seconds']:.2f}", f"{med[c]['mib_per_s']:.1f}",
                  f"{med[c]['mib_per_s'] / med['boto3']['mib_per_s']:.2f}",
                  f"{med[c]['durable_seconds']:.2f}" if "durable_seconds" in med[c] else "-"]
                 for c in CONTENDERS]))
    return {"remote": {c: {"runs": rows[c], "median": med[c]} for c in CONTENDERS}}
