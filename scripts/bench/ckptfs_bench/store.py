"""What the object-store benches (--remote, --remote-load, --remote-dcp) share: one moto server
on this machine with one bucket, and fresh mounts with -o remote on it."""
import contextlib
import os
import shutil

import boto3
from ckptfs_testing.ckptfs_daemon import CkptfsDaemon, run_ckptfs
from ckptfs_testing.s3_server import CREDENTIALS, MotoServer

BUCKET = "bench"


@contextlib.contextmanager
def moto_bucket():
    """Yields (server, boto3 client) of a moto server holding an empty BUCKET; the credentials
    the server takes are in the environment for the mounts and boto3."""
    os.environ.update(CREDENTIALS)
    with MotoServer() as s3:
        s3.create_bucket(BUCKET)
        yield s3, boto3.client("s3", endpoint_url=s3.endpoint, region_name="us-east-1")


def empty_bucket(client):
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET):
        for o in page.get("Contents", []):
            client.delete_object(Bucket=BUCKET, Key=o["Key"])


@contextlib.contextmanager
def remote_mount(workdir, s3, prefix, log_file, options=""):
    """Yields a started CkptfsDaemon mounted over an empty backing directory of `workdir` with
    -o remote=s3://BUCKET/`prefix` and the comma list `options` (--ckptfs-opts), logging to
    `log_file`; unmounted (a non-zero exit raises) and its directories removed after."""
    backing = os.path.join(workdir, "backing")
    mnt = os.path.join(workdir, "mnt")
    os.makedirs(backing)
    os.makedirs(mnt)
    d = CkptfsDaemon(backing, mnt, [f"remote=s3://{BUCKET}/{prefix}",
                                    f"remote_endpoint={s3.endpoint}",
                                    *[o for o in options.split(",") if o]],
                     log_file=log_file)
    d.start()
    try:
        yield d
        if d.unmount() != 0:
            raise RuntimeError("ckptfs exited non-zero:\n" + d.output()[-3000:])
    finally:
        d.cleanup()
        shutil.rmtree(backing, ignore_errors=True)
        shutil.rmtree(mnt, ignore_errors=True)


def sync_remote(d):
    """Returns once everything written through mount `d` is on the store (`ckptfs sync
    --remote`); raises when that fails."""
    r = run_ckptfs(["sync", d.mnt, "--remote"], timeout=3600)
    if r.returncode != 0:
        raise RuntimeError("ckptfs sync --remote failed: " + r.stderr)
