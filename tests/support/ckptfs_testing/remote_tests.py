"""What the tests of the remote tier share: a moto server with one bucket per test class, the
test credentials in the environment of each test, files written with their directories, and
`ckptfs sync --remote`."""

import os
import unittest
from unittest import mock

from ckptfs_testing.harness import require_fuse, run_ckptfs
from ckptfs_testing.s3_server import CREDENTIALS, MotoServer

BUCKET = "ckpt"


class RemoteStoreTestCase(unittest.TestCase):
    """A moto server (self.s3) with bucket BUCKET for the class; CREDENTIALS set in each test."""

    @classmethod
    def setUpClass(cls):
        require_fuse()
        cls.s3 = MotoServer().__enter__()
        cls.s3.create_bucket(BUCKET)

    @classmethod
    def tearDownClass(cls):
        cls.s3.stop()

    def setUp(self):
        patcher = mock.patch.dict(os.environ, CREDENTIALS)
        patcher.start()
        self.addCleanup(patcher.stop)


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def sync_remote(m, progress=False, timeout=120):
    r = run_ckptfs(["sync", m.mnt, "--remote"] + (["--progress"] if progress else []),
                   timeout=timeout)
    if r.returncode != 0:
        raise AssertionError(f"ckptfs sync --remote failed ({r.returncode}): {r.stderr}")
    return r
