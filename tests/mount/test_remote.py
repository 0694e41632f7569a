"""The remote tier (-o remote): every file version closed through a real mount reaches a real S3
server (moto) byte for byte after `ckptfs sync --remote`, files and directories removed through
the mount leave it, markers only after the files before them,
the store's failures (through a fault-injecting proxy) retried and counted; a mount whose remote
cannot be used is refused with one line."""

import os
import shutil
import tempfile
import time
import unittest
from unittest import mock

from ckptfs_testing.file_contents import distinct_content
from ckptfs_testing.harness import CkptfsMount, mounted, run_ckptfs, wait_for
from ckptfs_testing.remote_tests import BUCKET, RemoteStoreTestCase, sync_remote, write
from ckptfs_testing.s3_server import CREDENTIALS, FaultProxy, MotoServer, signature_matches

MiB = 1 << 20
PREFIX = "job/7"


class RemoteTest(RemoteStoreTestCase):
    def options(self, endpoint, prefix):
        return [f"remote=s3://{BUCKET}/{prefix}", f"remote_endpoint={endpoint}",
                "remote_part_size=5M", "remote_concurrency=4", "flush_delay=0"]

    def assert_store_equals_backing(self, m, prefix):
        store = self.s3.objects(BUCKET, prefix + "/")
        expected = {}
        for root, dirs, files in os.walk(m.backing):
            dirs[:] = [d for d in dirs if not (root == m.backing and d == ".ckptfs")]
            for f in files:
                path = os.path.join(root, f)
                with open(path, "rb") as fh:
                    expected[prefix + "/" + os.path.relpath(path, m.backing)] = fh.read()
        self.assertEqual(sorted(store), sorted(expected), "the store's keys differ")
        for key, data in expected.items():
            self.assertTrue(store[key] == data, f"{key}: {len(store[key])} bytes on the store, "
                                                f"{len(data)} in the backing directory")

    def test_every_file_closed_is_on_the_store_byte_for_byte_after_sync_remote(self):
        prefix = PREFIX + "/plain"
        with CkptfsMount(options=self.options(self.s3.endpoint, prefix)) as m:
            write(m.path("step_1", "__0_0.distcp"), distinct_content("a", 12 * MiB + 7))  # 3 parts.
            write(m.path("step_1", "__1_0.distcp"), distinct_content("b", 3 * MiB))
            write(m.path("step_1", "empty"), b"")
            write(m.path("step_1", "rewritten.bin"), distinct_content("old", MiB))
            write(m.path("step_1", "renamed.tmp"), distinct_content("renamed", 6 * MiB))
            m.sync()
            sync_remote(m)
            self.assertIn(f"{prefix}/step_1/renamed.tmp", self.s3.objects(BUCKET, prefix + "/"))
            # Renamed once on the store: the object moves (its old key is removed after).
            os.rename(m.path("step_1", "renamed.tmp"), m.path("step_1", "renamed.bin"))
            write(m.path("step_1", "rewritten.bin"), distinct_content("new", 2 * MiB))
            write(m.path("step_1", ".metadata.tmp"), b"metadata of step 1")
            os.rename(m.path("step_1", ".metadata.tmp"), m.path("step_1", ".metadata"))
            write(m.path("latest_iteration.txt"), b"1")
            r = sync_remote(m, progress=True)
            self.assertIn("on the store", r.stderr)
            self.assert_store_equals_backing(m, prefix)
            stats = m.stats()["remote"]
            self.assertEqual(stats["pending_files"], 0)
            self.assertEqual(stats["uploaded_in_order"], stats["handed_over"])
            self.assertGreaterEqual(stats["files_uploaded"], 6)
            self.assertGreaterEqual(stats["bytes_uploaded"], 17 * MiB)
            self.assertEqual(stats["last_error"], "")
            status = run_ckptfs(["status", m.mnt])
            self.assertIn(f"s3://{BUCKET}/{prefix}", status.stdout)
            self.assertNotIn(CREDENTIALS["AWS_SECRET_ACCESS_KEY"], m.output())
            self.assertNotIn(CREDENTIALS["AWS_SECRET_ACCESS_KEY"], status.stdout)

    def test_the_stores_failures_are_retried_counted_and_markers_wait_for_the_data(self):
        prefix = PREFIX + "/faults"
        with FaultProxy(self.s3.endpoint) as proxy:
            proxy.inject("slowdown", method="PUT", query_part="partNumber=", count=2)
            proxy.inject("500", method="PUT", query_part="partNumber=", count=1)
            proxy.inject("reset", method="PUT", query_part="partNumber=", count=1)
            proxy.inject("delay", method="PUT", query_part="partNumber=3", count=1, delay=1.5)
            with CkptfsMount(options=self.options(proxy.endpoint, prefix)) as m:
                write(m.path("step_2", "__0_0.distcp"), distinct_content("c", 11 * MiB))
                write(m.path("step_2", "small.bin"), distinct_content("d", 100000))
                write(m.path("step_2", ".metadata"), b"metadata of step 2")
                sync_remote(m)
                self.assert_store_equals_backing(m, prefix)
                stats = m.stats()["remote"]
                self.assertGreaterEqual(stats["retries"], 4, (stats, proxy.injected))
                self.assertEqual(stats["last_error"], "")
            self.assertEqual(proxy.injected, {"slowdown": 2, "500": 1, "reset": 1, "delay": 1})
            # Every request libcurl signed carries the signature botocore computes for it (moto
            # does not check signatures): HEAD bucket, the listing of open multipart uploads,
            # the listings of the directories looked into (ListObjectsV2), PUT object, the
            # multipart requests.
            kinds = set()
            for e in proxy.log:
                ok, expected, sent = signature_matches(e[2], proxy.endpoint + e[3], e[5],
                                                       CREDENTIALS["AWS_SECRET_ACCESS_KEY"])
                self.assertTrue(ok, f"{e[2]} {e[3]}: signed {sent}, botocore says {expected}")
                kinds.add((e[2], "partNumber=" in e[3], "uploads" in e[3]))
            self.assertIn(("GET", False, False), kinds)  # ListObjectsV2.
            self.assertEqual(len(kinds), 7, kinds)
            # The marker was put only after every object before it was complete.
            log = list(proxy.log)
            marker = [e for e in log if e[2] == "PUT" and e[3].endswith("/.metadata")]
            self.assertEqual(len(marker), 1, log)
            data_done = [e[1] for e in log if e[4] == 200 and (
                (e[2] == "POST" and "uploadId=" in e[3]) or
                (e[2] == "PUT" and e[3].endswith("/small.bin")))]
            self.assertEqual(len(data_done), 2, log)
            self.assertGreater(marker[0][0], max(data_done),
                               "the marker was sent before the data it commits was on the store")

    def test_files_and_directories_removed_through_the_mount_leave_the_store(self):
        prefix = PREFIX + "/removed"
        with CkptfsMount(options=self.options(self.s3.endpoint, prefix)) as m:
            write(m.path("step_1", "__0_0.distcp"), distinct_content("a", 6 * MiB))
            write(m.path("step_1", "optim", "__0_0.distcp"), distinct_content("o", 100000))
            write(m.path("step_1", ".metadata"), b"metadata of step 1")
            write(m.path("step_2", "__0_0.distcp"), distinct_content("b", 100000))
            write(m.path("step_2", "scratch.bin"), b"removed on its own")
            m.sync()
            sync_remote(m)
            self.assertEqual(len(self.s3.objects(BUCKET, prefix + "/")), 5)
            write(m.path("step_2", ".metadata"), b"metadata of step 2")
            shutil.rmtree(m.path("step_1"))  # The files first, then optim/, then step_1/.
            os.unlink(m.path("step_2", "scratch.bin"))
            m.sync()
            sync_remote(m)
            self.assert_store_equals_backing(m, prefix)
            self.assertEqual(sorted(self.s3.objects(BUCKET, prefix + "/")),
                             [f"{prefix}/step_2/.metadata", f"{prefix}/step_2/__0_0.distcp"])
            self.assertEqual(m.stats()["remote"]["last_error"], "")

    def test_a_file_removed_before_its_removal_reached_the_store_is_not_listed_back(self):
        prefix = PREFIX + "/removal_pending"
        backing = tempfile.mkdtemp(prefix="ckptfs-removal-", dir="/var/tmp")
        self.addCleanup(shutil.rmtree, backing, ignore_errors=True)
        with CkptfsMount(options=self.options(self.s3.endpoint, prefix), backing=backing) as m:
            write(m.path("step_1", "removed.bin"), b"removed through the mount")
            write(m.path("step_1", "kept.bin"), b"kept")
            m.sync()
            sync_remote(m)
        with FaultProxy(self.s3.endpoint) as proxy:
            # The store refuses the removal until this mount gives up at its unmount: the
            # removal stays in the upload log, for the next mount.
            proxy.inject("500", method="DELETE", count=100000)
            with CkptfsMount(options=self.options(proxy.endpoint, prefix), backing=backing,
                             expect_errors=[r"InternalError", r"uploads left undone"]) as m:
                os.unlink(m.path("step_1", "removed.bin"))
                m.sync()
                wait_for(lambda: proxy.injected.get("500", 0) >= 1, 30,
                         lambda: f"no DELETE was sent: {proxy.log}")
        self.assertIn(f"{prefix}/step_1/removed.bin", self.s3.objects(BUCKET, prefix + "/"))
        with FaultProxy(self.s3.endpoint) as proxy:
            # The resumed removal stays in flight while the directory is listed from the store.
            proxy.inject("delay", method="DELETE", count=1, delay=6.0)
            with CkptfsMount(options=self.options(proxy.endpoint, prefix), backing=backing) as m:
                self.assertEqual(os.listdir(m.path("step_1")), ["kept.bin"])
                sync_remote(m)
                self.assertEqual(os.listdir(m.path("step_1")), ["kept.bin"])
                self.assertEqual(m.stats()["remote"]["directories_listed"], 2)
            self.assertEqual(proxy.injected, {"delay": 1})
            listed = [e[0] for e in proxy.log if e[2] == "GET" and "list-type=2" in e[3]
                      and "step_1" in e[3]]
            deleted = [e[1] for e in proxy.log if e[2] == "DELETE"]
            self.assertEqual(len(listed), 1, proxy.log)
            self.assertLess(listed[0], deleted[0], "the directory was listed after the removal")
        self.assertEqual(sorted(self.s3.objects(BUCKET, prefix + "/")),
                         [f"{prefix}/step_1/kept.bin"])

    def test_bytes_the_store_refuses_for_their_checksum_are_checked_and_corrupt_ones_held(self):
        prefix = PREFIX + "/baddigest"
        backing = tempfile.mkdtemp(prefix="ckptfs-baddigest-", dir="/var/tmp")
        self.addCleanup(shutil.rmtree, backing, ignore_errors=True)
        with FaultProxy(self.s3.endpoint) as proxy:
            # Damaged on the way (the local bytes are intact): sent again.
            proxy.inject("baddigest", method="PUT", query_part="/step_1/", count=2)
            # Corrupt on the local disk while the store checks them: the store refuses them (the
            # checksum sent is the one recorded when they were written), and so does the mount.
            proxy.inject("baddigest", method="PUT", query_part="/step_2/x.bin", count=1, delay=3)
            with CkptfsMount(options=self.options(proxy.endpoint, prefix), backing=backing,
                             expect_errors=[r"BadDigest", r"not uploaded"]) as m:
                write(m.path("step_1", "x.bin"), distinct_content("x1", 100000))
                write(m.path("step_1", ".metadata"), b"commits step 1")
                m.sync()
                sync_remote(m)
                self.assertEqual(len(self.s3.objects(BUCKET, prefix + "/step_1/")), 2)

                write(m.path("step_2", "x.bin"), distinct_content("x2", 100000))
                wait_for(lambda: proxy.injected.get("baddigest", 0) >= 3, 30,
                         lambda: f"x.bin of step 2 was not sent: {proxy.log}")
                with open(os.path.join(m.backing, "step_2", "x.bin"), "r+b") as f:
                    f.seek(5000)
                    f.write(b"\xff\x00\xff")  # Same size: only the checksums can tell.
                write(m.path("step_2", ".metadata"), b"commits step 2")
                m.sync()
                wait_for(lambda: m.stats()["remote"]["failed_files"] == 1, 30,
                         lambda: f"the corrupt file was not given up: {m.stats()['remote']}")
                remote = m.stats()["remote"]
                self.assertEqual(remote["corrupt_files"], 1, remote)
                r = run_ckptfs(["sync", "--remote", m.mnt])
                self.assertNotEqual(r.returncode, 0, "sync --remote waited for a corrupt file")
                self.assertIn("cannot be uploaded", r.stderr)
                time.sleep(1)  # Nothing of step 2 is sent after the corrupt file: no marker.
                self.assertEqual(sorted(self.s3.objects(BUCKET, prefix + "/step_2/")), [])
                puts = [e for e in proxy.log if e[2] == "PUT" and "/step_2/x.bin" in e[3]]
                self.assertEqual(len(puts), 1, "the corrupt file was sent again")
            self.assertEqual(proxy.injected, {"baddigest": 3})
            # The next mount holds it as this one did, without sending it again (the store, with
            # no fault left to inject, would take its corrupt bytes).
            with CkptfsMount(options=self.options(proxy.endpoint, prefix), backing=backing,
                             expect_errors=[r"corrupt", r"not uploaded"]) as m:
                remote = m.stats()["remote"]
                self.assertEqual((remote["failed_files"], remote["corrupt_files"]), (1, 1), remote)
                write(m.path("step_3", "y.bin"), distinct_content("y3", 1000))
                m.sync()
                wait_for(lambda: f"{prefix}/step_3/y.bin" in self.s3.objects(BUCKET, prefix + "/"),
                         30, lambda: f"y.bin of step 3 was not uploaded: {m.stats()['remote']}")
                r = run_ckptfs(["sync", "--remote", m.mnt])
                self.assertNotEqual(r.returncode, 0, "sync --remote waited for a corrupt file")
            puts = [e for e in proxy.log if e[2] == "PUT" and "/step_2/x.bin" in e[3]]
            self.assertEqual(len(puts), 1, "the corrupt file was sent again by the next mount")
            self.assertEqual(sorted(self.s3.objects(BUCKET, prefix + "/step_2/")), [])

    def test_a_file_renamed_after_its_upload_is_copied_by_the_store_not_sent_again(self):
        prefix = PREFIX + "/renamed"
        data = distinct_content("r", 6 * MiB)  # A multipart upload.
        metadata = b"metadata of step 1"
        with FaultProxy(self.s3.endpoint) as proxy:
            with CkptfsMount(options=self.options(proxy.endpoint, prefix)) as m:
                write(m.path("step_1", "__0_0.distcp.tmp"), data)
                write(m.path("step_1", ".metadata.tmp"), metadata)
                m.sync()
                sync_remote(m)
                self.assertEqual(len(self.s3.objects(BUCKET, prefix + "/step_1/")), 2)
                os.rename(m.path("step_1", "__0_0.distcp.tmp"), m.path("step_1", "__0_0.distcp"))
                os.rename(m.path("step_1", ".metadata.tmp"), m.path("step_1", ".metadata"))
                m.sync()
                sync_remote(m)
                self.assert_store_equals_backing(m, prefix)
                self.assertEqual(m.stats()["remote"]["bytes_uploaded"], len(data) + len(metadata),
                                 "a renamed file was sent again")
        log = list(proxy.log)
        copies = [e for e in log if e[2] == "PUT" and any(
            n.lower() == "x-amz-copy-source" for n in e[5])]
        self.assertEqual(sorted(e[3] for e in copies),
                         [f"/{BUCKET}/{prefix}/step_1/.metadata",
                          f"/{BUCKET}/{prefix}/step_1/__0_0.distcp"], log)
        for e in copies:
            self.assertEqual(e[4], 200, e)
            ok, expected, sent = signature_matches(e[2], proxy.endpoint + e[3], e[5],
                                                   CREDENTIALS["AWS_SECRET_ACCESS_KEY"])
            self.assertTrue(ok, f"{e[3]}: signed {sent}, botocore says {expected}")
        for e in copies:
            deleted = [d for d in log if d[2] == "DELETE" and d[3] == e[3] + ".tmp"]
            self.assertEqual(len(deleted), 1, log)
            self.assertGreater(deleted[0][0], e[1],
                               f"{e[3]}.tmp was removed before it was copied to its new name")

    def test_a_renamed_directory_moves_on_the_store_and_leaves_its_old_name(self):
        prefix = PREFIX + "/dir_renamed"
        first = distinct_content("a", 6 * MiB)
        second = distinct_content("b", 100000)
        with CkptfsMount(options=self.options(self.s3.endpoint, prefix)) as m:
            # As Orbax commits a step: its temporary directory renamed, here once on the store.
            write(m.path("step_1.orbax-checkpoint-tmp-1", "d", "0.0"), first)
            write(m.path("step_1.orbax-checkpoint-tmp-1", "_METADATA"), b"meta 1")
            m.sync()
            sync_remote(m)
            os.rename(m.path("step_1.orbax-checkpoint-tmp-1"), m.path("step_1"))
            # And renamed before its files reached the store.
            write(m.path("step_2.orbax-checkpoint-tmp-2", "d", "0.0"), second)
            os.rename(m.path("step_2.orbax-checkpoint-tmp-2"), m.path("step_2"))
            m.sync()
            sync_remote(m)
            self.assert_store_equals_backing(m, prefix)
            self.assertEqual(m.stats()["remote"]["bytes_uploaded"], len(first) + 6 + len(second),
                             "a moved file was sent again")

    def test_a_daemon_killed_in_the_middle_of_a_directory_move_loses_no_object(self):
        prefix = PREFIX + "/dir_move_killed"
        files = {f"d/{i}": distinct_content(f"m{i}", 1000 + i) for i in range(4)}
        with FaultProxy(self.s3.endpoint) as proxy:
            with CkptfsMount(options=self.options(proxy.endpoint, prefix)) as m:
                for name, data in files.items():
                    write(m.path("ckpt.tmp", name), data)
                m.sync()
                sync_remote(m)
                # The move's first removal stalls: the daemon dies with the objects copied.
                proxy.inject("delay", method="DELETE", count=1, delay=20.0)
                os.rename(m.path("ckpt.tmp"), m.path("ckpt"))
                m.sync()
                wait_for(lambda: proxy.injected.get("delay", 0) >= 1, 30,
                         lambda: f"the move did not start: {m.stats()['remote']}")
                m.kill9()
                store = self.s3.objects(BUCKET, prefix + "/")
                for name, data in files.items():
                    self.assertTrue(store.get(f"{prefix}/ckpt/{name}") == data or
                                    store.get(f"{prefix}/ckpt.tmp/{name}") == data,
                                    f"{name} is under neither name: {sorted(store)}")
                m.start()
                wait_for(lambda: "remote: resuming" in m.output(), 60,
                         lambda: "the next mount resuming the move")
                sync_remote(m)
                self.assert_store_equals_backing(m, prefix)

    def test_a_marker_waits_for_the_version_it_commits_of_a_file_rewritten_after_it(self):
        prefix = PREFIX + "/rewritten"
        with FaultProxy(self.s3.endpoint) as proxy:
            # The first version of x stays in flight while the next ones are handed over.
            proxy.inject("delay", method="PUT", query_part="/step_3/x", count=1, delay=6.0)
            with CkptfsMount(options=self.options(proxy.endpoint, prefix)) as m:
                versions = [b"x of step 2", b"x of step 3", b"x of step 4"]

                def hand_over(path, data, count):
                    write(path, data)
                    wait_for(lambda: m.stats()["remote"]["handed_over"] >= count, 30,
                             lambda: f"{path} not handed over: {m.stats()['remote']}")

                hand_over(m.path("step_3", "x"), versions[0], 1)
                hand_over(m.path("step_3", "x"), versions[1], 2)
                hand_over(m.path("step_3", ".metadata"), b"commits x of step 3", 3)
                hand_over(m.path("step_3", "x"), versions[2], 4)
                sync_remote(m)
                self.assert_store_equals_backing(m, prefix)
            self.assertEqual(proxy.injected, {"delay": 1})
            log = list(proxy.log)
            marker = [e for e in log if e[2] == "PUT" and e[3].endswith("/step_3/.metadata")]
            self.assertEqual(len(marker), 1, log)
            x_done = [e[1] for e in log
                      if e[2] == "PUT" and e[3].endswith("/step_3/x") and e[4] == 200]
            # Versions 1 and 2 end before the marker starts; version 3, handed over after it,
            # may start with it and end first: that breaks no promise.
            self.assertGreaterEqual(len([t for t in x_done if t < marker[0][0]]), 2,
                                    "the marker was sent before the version of x it commits was "
                                    f"on the store: {log}")

    def test_a_remote_that_cannot_be_used_refuses_the_mount_with_one_line(self):
        unreachable = MotoServer()  # A free port nothing listens on.
        cases = {
            "no such bucket": ["remote=s3://missing-bucket/x",
                               f"remote_endpoint={self.s3.endpoint}"],
            "endpoint is unreachable": [f"remote=s3://{BUCKET}/x",
                                      f"remote_endpoint={unreachable.endpoint}"],
            "no AWS credentials": [f"remote=s3://{BUCKET}/x",
                                   f"remote_endpoint={self.s3.endpoint}"],
            "bucket name": ["remote=s3://Bad_Bucket/x"],
        }
        for why, opts in cases.items():
            with self.subTest(why=why):
                env = dict(os.environ)
                if why == "no AWS credentials":
                    for k in CREDENTIALS:
                        env.pop(k, None)
                    env["HOME"] = "/nonexistent"
                work = tempfile.mkdtemp(prefix="ckptfs-remote-refused-")
                self.addCleanup(shutil.rmtree, work, True)
                backing, mnt = os.path.join(work, "backing"), os.path.join(work, "mnt")
                os.mkdir(backing)
                os.mkdir(mnt)
                with mock.patch.dict(os.environ, env, clear=True):
                    r = run_ckptfs([backing, mnt, "-f", "-o", ",".join(opts)], timeout=60)
                self.assertNotEqual(r.returncode, 0)
                lines = r.stderr.strip().splitlines()
                self.assertEqual(len(lines), 1, r.stderr)
                self.assertIn(why, lines[0])
                self.assertFalse(mounted(mnt))
                self.assertNotIn(CREDENTIALS["AWS_SECRET_ACCESS_KEY"], r.stderr)


if __name__ == "__main__":
    unittest.main()
