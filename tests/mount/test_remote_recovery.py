"""The remote tier keeps what it was handed: a worker killed (-9), the whole daemon killed, or the
worker upgraded (handing over) at a seeded random point during uploads, and the store unreachable
during saves. Afterwards every file acknowledged (closed, then `ckptfs sync`) is on a real S3
server (moto) byte for byte, nothing else is (no partial object, no multipart upload left open),
every object and part went with the CRC32C of its bytes, and no marker (`.metadata`) reached the
store before the data of its step. Run with the defaults (remote= and remote_endpoint= only),
through a fault-injecting proxy that records every request."""

import base64
import os
import random
import signal
import time
import unittest
import urllib.parse

import crc32c

from ckptfs_testing.ckptfs_daemon import wait_for
from ckptfs_testing.file_contents import distinct_content
from ckptfs_testing.harness import CkptfsMount, choose_seed, require_long, run_ckptfs
from ckptfs_testing.remote_tests import BUCKET, RemoteStoreTestCase, sync_remote, write
from ckptfs_testing.s3_server import FaultProxy

MiB = 1 << 20
PART = 16 * MiB  # remote_part_size's default.


def key_of(path):
    """The object key of a request path through the proxy ("/BUCKET/KEY?query")."""
    return urllib.parse.unquote(path.split("?", 1)[0])[len(BUCKET) + 2:]


class RemoteRecoveryTest(RemoteStoreTestCase):
    OUTAGE_SECONDS = 3

    def options(self, proxy, prefix):
        # The defaults: 16 MiB parts, 8 requests in flight.
        return [f"remote=s3://{BUCKET}/{prefix}", f"remote_endpoint={proxy.endpoint}"]

    def save(self, m, rng, step, saved):
        """A checkpoint step: a few files, then its marker, each closed; adds {relative path:
        bytes} to `saved`."""
        for i in range(rng.randint(2, 4)):
            # The first in parts (a multipart upload), the others of any size.
            size = rng.randint(17 * MiB, 34 * MiB) if i == 0 else rng.choice(
                [rng.randint(1, 256 * 1024), rng.randint(MiB, 6 * MiB),
                 rng.randint(17 * MiB, 34 * MiB)])
            rel = f"{step}/__{i}_0.distcp"
            saved[rel] = distinct_content(f"{step}-{i}-{rng.random()}", size)
            write(m.path(rel), saved[rel])
        saved[f"{step}/.metadata"] = f"metadata of {step}: {sorted(saved)}".encode()
        write(m.path(step, ".metadata"), saved[f"{step}/.metadata"])

    def assert_store_holds_exactly(self, prefix, saved, proxy):
        store = self.s3.objects(BUCKET, prefix + "/")
        expected = {f"{prefix}/{rel}": data for rel, data in saved.items()}
        self.assertEqual(sorted(store), sorted(expected), "the store's keys differ")
        for key, data in expected.items():
            self.assertTrue(store[key] == data, f"{key}: {len(store[key])} bytes on the store, "
                                                f"{len(data)} saved")
        open_uploads = self.s3.client().list_multipart_uploads(Bucket=BUCKET, Prefix=prefix + "/")
        self.assertEqual(open_uploads.get("Uploads", []), [], "multipart uploads left open")
        # Every object and part went with the CRC32C of its bytes (PyPI's crc32c, apart from the
        # daemon's ISA-L), for the store to verify.
        log = list(proxy.log)
        for start, end, method, path, status, headers in log:
            if method != "PUT" or status != 200:
                continue
            data = expected[key_of(path)]
            query = urllib.parse.parse_qs(path.partition("?")[2])
            if "partNumber" in query:
                n = int(query["partNumber"][0])
                data = data[(n - 1) * PART:n * PART]
            sent = {k.lower(): v for k, v in headers.items()}.get("x-amz-checksum-crc32c")
            expected_sum = base64.b64encode(crc32c.crc32c(data).to_bytes(4, "big")).decode()
            self.assertEqual(sent, expected_sum, f"the checksum sent with {path}")
        # A marker was put only after every object of its step was complete on the store.
        completed = {}  # key -> the end of its first successful completion.
        for start, end, method, path, status, _ in log:
            whole_put = method == "PUT" and "?" not in path
            complete = method == "POST" and "uploadId=" in path
            if status == 200 and (whole_put or complete):
                completed.setdefault(key_of(path), end)
        for start, end, method, path, status, _ in log:
            key = key_of(path)
            if not (method == "PUT" and status == 200 and key.endswith("/.metadata")):
                continue
            step = key.rsplit("/", 1)[0]
            for other in expected:
                if other.rsplit("/", 1)[0] == step and not other.endswith("/.metadata"):
                    self.assertIn(other, completed, f"{key} was put, {other} never completed")
                    self.assertLess(completed[other], start,
                                    f"{key} was put before {other} was complete on the store")

    def stop_during_uploads(self, how):
        """how: "worker" (kill -9 of the worker), "daemon" (kill -9 of the whole daemon, then a
        new mount) or "upgrade" (`ckptfs upgrade`: the worker hands over)."""
        seed = choose_seed("CKPTFS_REMOTE_KILL_SEED", "remote kill")
        rng = random.Random(seed)
        prefix = f"{how}-{seed}"
        saved = {}
        with FaultProxy(self.s3.endpoint) as proxy:
            # Completions and markers take a while: the kill lands while uploads are pending.
            proxy.inject("delay", method="POST", query_part="uploadId=", count=2, delay=4.0)
            proxy.inject("delay", method="PUT", query_part="partNumber=", count=2, delay=1.0)
            with CkptfsMount(options=self.options(proxy, prefix),
                             expect_errors=[r"worker \d+ died"]) as m:
                for step in ("step_1", "step_2"):
                    self.save(m, rng, step, saved)
                m.sync()  # Acknowledged: durable in the backing directory.
                time.sleep(rng.uniform(0, 1.5))
                pending = m.stats()["remote"]["pending_files"]
                print(f"stopping ({how}) with {pending} uploads pending", flush=True)
                self.assertGreater(pending, 0, "the stop would not land during uploads")
                if how == "daemon":
                    m.kill9()
                    m.start()
                elif how == "worker":
                    old = m.worker_pid()
                    os.kill(old, signal.SIGKILL)
                    wait_for(lambda: m.worker_pid() != old, 30, lambda: "a new worker")
                else:
                    r = run_ckptfs(["upgrade", m.mnt, "--timeout", "60"], timeout=120)
                    self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
                wait_for(lambda: "remote: resuming" in m.output(), 60,
                         lambda: "the next worker resuming the uploads")
                # The mount goes on saving.
                self.save(m, rng, "step_3", saved)
                m.sync()
                sync_remote(m, timeout=240)
                self.assertEqual(m.stats()["remote"]["pending_files"], 0)
            self.assert_store_holds_exactly(prefix, saved, proxy)

    def test_a_worker_killed_during_uploads_leaves_everything_acknowledged_on_the_store(self):
        self.stop_during_uploads("worker")

    def test_a_daemon_killed_during_uploads_leaves_everything_acknowledged_on_the_store(self):
        self.stop_during_uploads("daemon")

    def test_an_upgrade_during_uploads_leaves_everything_acknowledged_on_the_store(self):
        self.stop_during_uploads("upgrade")

    def test_saves_go_on_while_the_store_is_unreachable_and_uploads_resume_after(self):
        seed = choose_seed("CKPTFS_REMOTE_OUTAGE_SEED", "remote outage")
        rng = random.Random(seed)
        prefix = f"outage-{seed}"
        saved = {}
        with FaultProxy(self.s3.endpoint) as proxy:
            with CkptfsMount(options=self.options(proxy, prefix)) as m:
                self.save(m, rng, "step_1", saved)
                m.sync()
                proxy.go_down()
                went_down = time.monotonic()
                for step in ("step_2", "step_3"):
                    self.save(m, rng, step, saved)
                    m.sync()  # Saves go on: the local tier is not held up by the store.
                wait_for(lambda: m.stats()["remote"]["retries"] >= 3, 60,
                         lambda: "retries while the store is unreachable")
                self.assertGreater(m.stats()["remote"]["pending_files"], 0)
                self.assertNotEqual(m.stats()["remote"]["last_error"], "")
                time.sleep(max(0.0, self.OUTAGE_SECONDS - (time.monotonic() - went_down)))
                proxy.come_back()
                sync_remote(m, timeout=240)
                stats = m.stats()["remote"]
                self.assertEqual(stats["pending_files"], 0)
                self.assertEqual(stats["last_error"], "")
                retried = [l for l in m.output().splitlines() if "remote: retrying" in l]
                # Each kind of failure (refused, reset) is said once however often it is retried.
                self.assertLessEqual(len(retried), 3, retried)
                self.assertGreater(stats["retries"], len(retried))
                self.assertIn("failures are said again from now", m.output())
            self.assert_store_holds_exactly(prefix, saved, proxy)


class RemoteRecoveryLongTest(RemoteRecoveryTest):
    OUTAGE_SECONDS = 30

    def setUp(self):
        require_long()
        super().setUp()


if __name__ == "__main__":
    unittest.main()
