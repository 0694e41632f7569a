"""The supervisor and its workers (fs/supervisor.h, fs/worker.h, core/recovery/handoff.h) on a real mount:
a worker replaced (ckptfs upgrade, SIGHUP) keeps every open file, name and byte; a worker killed
leaves the mount up; the supervisor's own end ends the mount as a daemon's always did."""

import errno
import glob
import os
import shutil
import signal
import unittest

from ckptfs_testing.harness import (MiB, CkptfsMount, StreamWriter, cache_memory_files, mounted,
                                    require_fuse, run_ckptfs, stream_bytes, wait_for)

CRASH = r"worker \d+ died"


class TakeoverTest(unittest.TestCase):
    def setUp(self):
        require_fuse()

    def upgrade(self, m, *args):
        r = run_ckptfs(["upgrade", m.mnt, "--timeout", "60", *args], timeout=120)
        return r

    def test_an_upgrade_keeps_open_files_removed_files_and_unsealed_bytes(self):
        for memory in ("shared", "private"):
            with self.subTest(cache_memory=memory):
                self.upgrade_keeps_open_files_removed_files_and_unsealed_bytes(memory)

    def upgrade_keeps_open_files_removed_files_and_unsealed_bytes(self, memory):
        with CkptfsMount(["flush_delay=0", f"cache_memory={memory}"]) as m:
            os.makedirs(m.path("ckpt"))
            with open(m.path("ckpt", "done.bin"), "wb") as f:
                f.write(b"d" * 300000)
            writing = open(m.path("ckpt", "model.pt"), "wb", buffering=0)
            writing.write(b"a" * 1000000)
            removed = open(m.path("ckpt", "scratch"), "w+b", buffering=0)
            removed.write(b"scratch bytes")
            os.unlink(m.path("ckpt", "scratch"))
            reading = open(m.path("ckpt", "done.bin"), "rb")
            self.assertEqual(reading.read(1000), b"d" * 1000)
            listing = os.scandir(m.path("ckpt"))
            cwd = os.open(m.path("ckpt"), os.O_RDONLY | os.O_DIRECTORY)
            before = m.stats()["worker"]

            # Asked from this process: a child's exec would close (and so seal) the open files.
            with open(m.path(".ckptfs", "upgrade"), "w") as f:
                f.write("upgrade")
            wait_for(lambda: m.stats()["worker"]["number"] == before["number"] + 1, 60,
                     lambda: m.stats()["worker"])
            after = m.stats()["worker"]
            self.assertEqual(after["number"], before["number"] + 1)
            self.assertNotEqual(after["pid"], before["pid"])
            self.assertEqual(after["handoffs"], 1)
            self.assertGreater(after["takeover_ms"], 0)
            self.assertEqual([f for f in m.staging_files() if not f.startswith("spill-1-handoff-")],
                             [], "handoff files become the new worker's spill files")
            stats = m.stats()
            shared = memory == "shared"
            unsealed = 1000000 + len(b"scratch bytes")
            self.assertEqual(stats["cache_shared"], shared)
            # Unsealed bytes stay in the cache's shared memory, or go through handoff files.
            self.assertEqual(stats["taken_over_in_memory"], unsealed if shared else 0)
            self.assertEqual(stats["taken_over_from_files"], 0 if shared else unsealed)

            writing.write(b"b" * 500000)
            writing.close()
            self.assertEqual(reading.read(), b"d" * 299000)
            reading.close()
            removed.seek(0)
            self.assertEqual(removed.read(), b"scratch bytes")
            removed.close()
            self.assertEqual(sorted(e.name for e in listing), ["done.bin", "model.pt"])
            self.assertEqual(os.listdir(f"/proc/self/fd/{cwd}"), ["done.bin", "model.pt"])
            os.close(cwd)
            with open(m.path("ckpt", "model.pt"), "rb") as f:
                self.assertEqual(f.read(), b"a" * 1000000 + b"b" * 500000)
            m.sync()
            with open(m.bpath("ckpt", "model.pt"), "rb") as f:
                self.assertEqual(f.read(), b"a" * 1000000 + b"b" * 500000)
            self.assertEqual(sorted(os.listdir(m.bpath("ckpt"))), ["done.bin", "model.pt"])
            self.assertEqual(m.staging_files(), [], "spill files go once their files are closed")
            self.assertEqual(m.unmount(), 0)

    def test_an_upgrade_while_a_file_larger_than_the_cache_streams_in_neither_hangs_nor_loses_it(self):
        for memory in ("shared", "private"):
            with self.subTest(cache_memory=memory):
                # Under the default options but the cache's size (and its memory for "private").
                options = ["cache_size=16M"] + (["cache_memory=private"] if memory == "private"
                                                else [])
                with CkptfsMount(options) as m, \
                        StreamWriter(m.path("model.pt"), [24, 40]) as writer:
                    writer.wait_acknowledged(24 * MiB, 120)
                    self.assertGreater(m.stats()["spilled_bytes"], 0, "streamed through a file")
                    r = self.upgrade(m)
                    self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
                    writer.go_on(1)
                    # The new worker spills what it took over and what comes after.
                    self.assertEqual(writer.result(120), "ok")
                    self.assertGreater(m.stats()["spilled_bytes"], 0)
                    self.assert_streamed(m, "model.pt", 64 * MiB)
                    self.assertEqual(m.unmount(), 0)

    def test_a_worker_killed_after_an_upgrade_loses_nothing_of_a_file_larger_than_the_cache(self):
        with CkptfsMount(["cache_size=16M"], expect_errors=[CRASH]) as m, \
                StreamWriter(m.path("model.pt"), [24, 4, 20]) as writer:
            writer.wait_acknowledged(24 * MiB, 120)
            r = self.upgrade(m)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            writer.go_on(1)
            writer.wait_acknowledged(28 * MiB, 120)
            old = m.worker_pid()
            os.kill(old, signal.SIGKILL)
            wait_for(lambda: m.worker_pid() != old, 30, lambda: "a new worker")
            writer.go_on(2)
            self.assertEqual(writer.result(120), "ok")
            self.assertEqual(m.stats()["worker"]["crashes"], 1)
            self.assertNotIn("cannot be named", m.output())
            self.assert_streamed(m, "model.pt", 48 * MiB)
            self.assertEqual(m.unmount(), 0)

    def assert_streamed(self, m, name, size):
        """`name` holds the first `size` bytes a StreamWriter writes, through the mount and, after
        a sync, on the backing store."""
        want = stream_bytes(size)
        with open(m.path(name), "rb") as f:
            self.assertTrue(f.read() == want, "the file read through the mount differs")
        m.sync()
        with open(m.bpath(name), "rb") as f:
            self.assertTrue(f.read() == want, "the file on the backing store differs")

    def test_an_upgrade_to_another_binary_and_a_failed_one(self):
        with CkptfsMount(expect_errors=[r"upgrade to \S*/false failed"]) as m:
            new = os.path.join(m.workdir, "ckptfs-new")
            shutil.copy2(m.stats()["worker"]["binary"], new)
            r = self.upgrade(m, "--binary", new)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertEqual(m.stats()["worker"]["binary"], new)

            not_executable = os.path.join(m.workdir, "not-executable")
            with open(not_executable, "w") as f:
                f.write("#!/bin/sh\n")
            refused = self.upgrade(m, "--binary", not_executable)
            self.assertEqual(refused.returncode, 1)
            self.assertIn("Permission denied", refused.stderr)

            # /bin/false runs and ends without serving: the previous binary takes over again.
            failed = self.upgrade(m, "--binary", "/bin/false")
            self.assertEqual(failed.returncode, 1, failed.stdout + failed.stderr)
            self.assertRegex(failed.stderr, "upgrade to .*/false failed")
            w = m.stats()["worker"]
            self.assertEqual(w["binary"], new)
            self.assertEqual(w["handoffs"], 2)
            with open(m.path("f"), "w") as f:
                f.write("served")
            with open(m.path("f")) as f:
                self.assertEqual(f.read(), "served")
            self.assertEqual(m.unmount(), 0)

    def test_sighup_to_the_supervisor_restarts_the_worker_in_place(self):
        with CkptfsMount() as m:
            with open(m.path("kept"), "w") as f:
                f.write("x")
            number = m.stats()["worker"]["number"]
            os.kill(m.pid, signal.SIGHUP)
            wait_for(lambda: m.stats()["worker"]["number"] == number + 1, 30,
                     lambda: "a new worker")
            with open(m.path("kept")) as f:
                self.assertEqual(f.read(), "x")
            self.assertEqual(m.unmount(), 0)

    def test_a_killed_worker_leaves_the_mount_up_under_the_default_options(self):
        with CkptfsMount(expect_errors=[CRASH]) as m:
            with open(m.path("durable"), "w") as f:
                f.write("synced")
            m.sync()
            with open(m.path("closed"), "w") as f:
                f.write("closed, not synced")
            old = m.worker_pid()
            open_before = open(m.path("durable"), "rb")
            os.kill(old, signal.SIGKILL)
            wait_for(lambda: m.worker_pid() != old, 30, lambda: "a new worker")
            self.assertTrue(mounted(m.mnt))
            self.assertEqual(open_before.read(), b"synced", "the handle goes on")
            open_before.close()
            with open(m.path("after"), "w") as f:
                f.write("written after the crash")
            m.sync()
            for name, text in (("durable", "synced"), ("closed", "closed, not synced"),
                               ("after", "written after the crash")):
                with open(m.bpath(name)) as f:
                    self.assertEqual(f.read(), text, name)
            w = m.stats()["worker"]
            self.assertEqual((w["crashes"], w["handoffs"]), (1, 0))
            self.assertTrue(m.stats()["cache_shared"])
            self.assertEqual(m.unmount(), 0)

    def test_a_file_closed_before_a_crash_and_released_after_keeps_the_version_it_sealed(self):
        # Under the default options but a flush_delay that keeps the version in memory. close()
        # seals (FLUSH); the kernel releases the handle later, here only when the second
        # descriptor goes. The version sealed before the crash is the one published: a second
        # seal of the same bytes at the release would supersede it, so that a commit marker
        # taken after the close could be published before it.
        with CkptfsMount(["flush_delay=3600s"], expect_errors=[CRASH]) as m:
            data = os.urandom(3 << 20)
            fd = os.open(m.path("shard"), os.O_WRONLY | os.O_CREAT, 0o644)
            os.write(fd, data)
            kept = os.dup(fd)
            os.close(fd)
            old = m.worker_pid()
            os.kill(old, signal.SIGKILL)
            wait_for(lambda: m.worker_pid() != old, 30, lambda: "a new worker")
            with open(m.path("shard"), "rb") as f:
                self.assertEqual(f.read(), data)
            os.close(kept)
            stats = m.stats()
            self.assertEqual((stats["recovered_versions"], stats["recovered_handles"]), (1, 1))
            self.assertEqual(stats["versions_skipped"], 0,
                             "the release sealed the recovered version again and skipped it")
            m.sync()
            with open(m.bpath("shard"), "rb") as f:
                self.assertEqual(f.read(), data)
            self.assertEqual(m.stats()["files_flushed"], 1)
            self.assertEqual(m.unmount(), 0)

    def test_a_worker_that_dies_with_a_private_cache_ends_the_mount_and_publishes_nothing_after(self):
        died = r"died \(killed by Killed\) with the cache in its private memory"
        with CkptfsMount(["cache_memory=private", "flush_delay=3600s"],
                         expect_errors=[died]) as m:
            with open(m.path("durable"), "w") as f:
                f.write("synced")
            m.sync()
            for name in ("lost", "tracker"):
                with open(m.path(name), "w") as f:
                    f.write(name)
            os.kill(m.worker_pid(), signal.SIGKILL)
            self.assertEqual(m.wait_exit(), 1, "the mount ends with an error")
            self.assertFalse(mounted(m.mnt))
            self.assertIn("what it had not made durable is lost", m.output())
            self.assertEqual(sorted(os.listdir(m.backing)), [".ckptfs", "durable"])
            with open(m.bpath("durable")) as f:
                self.assertEqual(f.read(), "synced")

    def test_a_worker_that_dies_with_its_recovery_log_unreadable_ends_the_mount(self):
        died = r"died \(killed by Killed\) and what it held cannot be taken over"
        # A small cache: its memory file must find room in /dev/shm, which other mounts share.
        with CkptfsMount(["cache_size=64M"], expect_errors=[died]) as m:
            with open(m.path("durable"), "w") as f:
                f.write("synced")
            m.sync()
            [memory_file] = cache_memory_files(m.backing)
            # The recovery log follows the cache's blocks of 16 KiB (core/memory/arena.h:
            # ArenaLogOffset); its header's magic is damaged under the running worker, which
            # never reads it again.
            log = m.stats()["cache_size"] // 16384 * 16384
            with open(memory_file, "r+b") as f:
                f.seek(log)
                self.assertEqual(f.read(8), b"LRsftpkc", "the log's magic, little-endian")
                f.seek(log)
                f.write(b"damaged!")
            worker = m.worker_pid()
            os.kill(worker, signal.SIGKILL)
            self.assertEqual(m.wait_exit(), 1, "the mount ends with an error")
            self.assertFalse(mounted(m.mnt))
            self.assertIn("not a recovery log of this version", m.output())
            self.assertNotIn("starting another", m.output(), "no worker after the loss")
            self.assertEqual(sorted(os.listdir(m.backing)), [".ckptfs", "durable"])

    def test_a_killed_worker_loses_nothing_and_its_open_files_go_on_under_the_default_options(self):
        with CkptfsMount(["flush_delay=3600s"],
                         expect_errors=[CRASH]) as m:
            model, shard = self.save_model_and_fsync_an_open_shard(m)
            with open(m.path("latest.txt"), "w") as f:
                f.write("100")
            self.assertFalse(os.path.exists(m.bpath("ckpt")), "nothing flushed yet")
            ckpt = os.open(m.path("ckpt"), os.O_RDONLY | os.O_DIRECTORY)
            try:
                self.kill_worker_and_go_on(m, model, shard, ckpt)
            finally:
                os.close(ckpt)
            stats = m.stats()
            self.assertEqual((stats["recovered_versions"], stats["recovered_handles"],
                              stats["worker"]["crashes"]), (3, 1, 1))
            m.sync()
            with open(m.bpath("ckpt", "model.pt"), "rb") as f:
                self.assertEqual(f.read(), model)
            with open(m.bpath("ckpt", "__0_0.distcp"), "rb") as f:
                self.assertEqual(f.read(), b"s" * 100000 + b"more")
            self.assertEqual(sorted(os.listdir(m.bpath("ckpt"))),
                             ["__0_0.distcp", "common.pt", "model.pt"])
            self.assertEqual(os.stat(m.bpath("ckpt", "__0_0.distcp")).st_mode & 0o777, 0o640)
            self.assertEqual(m.unmount(), 0)

    def save_model_and_fsync_an_open_shard(self, m):
        """Saves ckpt/model.pt (a temporary renamed into place) and writes 100,000 bytes to
        ckpt/__0_0.distcp, fsynced (acknowledged, as DCP has it) and left open; returns the model's
        bytes and the shard's descriptor."""
        os.makedirs(m.path("ckpt"))
        model = os.urandom(3 << 20)
        with open(m.path("ckpt", "model.pt.tmp"), "wb") as f:
            f.write(model)
        os.rename(m.path("ckpt", "model.pt.tmp"), m.path("ckpt", "model.pt"))
        shard = os.open(m.path("ckpt", "__0_0.distcp"), os.O_WRONLY | os.O_CREAT, 0o640)
        os.write(shard, b"s" * 100000)
        os.fsync(shard)
        return model, shard

    def kill_worker_and_go_on(self, m, model, shard, ckpt):
        """Kills m's worker: what it held reads back, and the open file `shard` and the open
        directory `ckpt` go on."""
        old = m.worker_pid()
        os.kill(old, signal.SIGKILL)
        wait_for(lambda: m.worker_pid() != old, 30, lambda: "a new worker")
        self.read_back_and_go_on(m, model, shard, ckpt)

    def read_back_and_go_on(self, m, model, shard, ckpt):
        """What save_model_and_fsync_an_open_shard and a tracker left reads back through the
        worker that took over; the open file `shard` and the open directory `ckpt` go on."""
        with open(m.path("ckpt", "model.pt"), "rb") as f:
            self.assertEqual(f.read(), model)
        with open(m.path("ckpt", "__0_0.distcp"), "rb") as f:
            self.assertEqual(f.read(), b"s" * 100000)
        with open(m.path("latest.txt")) as f:
            self.assertEqual(f.read(), "100")
        # The open file goes on through its descriptor, and so does a directory the kernel
        # got from the dead worker.
        self.assertEqual(os.write(shard, b"more"), 4)
        os.fsync(shard)
        os.close(shard)
        common = os.open("common.pt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=ckpt)
        os.write(common, b"c")
        os.close(common)

    def test_two_workers_killed_in_a_row_the_second_before_its_recovery_lose_nothing(self):
        with CkptfsMount(["flush_delay=3600s"],
                         expect_errors=[CRASH, "could not start"]) as m:
            model, shard = self.save_model_and_fsync_an_open_shard(m)
            with open(m.path("latest.txt"), "w") as f:
                f.write("100")
            ckpt = os.open(m.path("ckpt"), os.O_RDONLY | os.O_DIRECTORY)
            try:
                first = m.worker_pid()
                os.kill(first, signal.SIGKILL)
                # The next one is killed as soon as it runs: before it has taken anything over.
                second = m.worker_pid()
                while second == first:
                    second = m.worker_pid()
                os.kill(second, signal.SIGKILL)
                wait_for(lambda: m.worker_pid() not in (first, second), 30,
                         lambda: "a third worker")
                self.read_back_and_go_on(m, model, shard, ckpt)
            finally:
                os.close(ckpt)
            stats = m.stats()
            # The second never served: it "could not start", which is no crash of a server.
            self.assertEqual((stats["recovered_handles"], stats["worker"]["crashes"]), (1, 1))
            self.assertRegex(m.output(), "a new worker could not start")
            m.sync()
            with open(m.bpath("ckpt", "model.pt"), "rb") as f:
                self.assertEqual(f.read(), model)
            with open(m.bpath("ckpt", "__0_0.distcp"), "rb") as f:
                self.assertEqual(f.read(), b"s" * 100000 + b"more")
            self.assertEqual(m.unmount(), 0)

    def test_workers_that_keep_dying_right_after_their_start_end_the_mount(self):
        # A worker may be killed before it serves (then it "could not start").
        with CkptfsMount(expect_errors=[CRASH, "workers keep dying", "could not start"]) as m:
            def replaced(old):
                if m.proc.poll() is not None:
                    return True
                try:
                    return m.worker_pid(wait=0) != old
                except RuntimeError:  # Between two workers.
                    return False

            for _ in range(3):
                worker = m.worker_pid()
                os.kill(worker, signal.SIGKILL)
                wait_for(lambda: replaced(worker), 30, lambda: "a new worker or the supervisor's end")
            self.assertEqual(m.wait_exit(30), 1, "the third quick death in a row gives up")
            self.assertFalse(mounted(m.mnt))

    def test_sigterm_to_the_supervisor_unmounts_after_flushing(self):
        with CkptfsMount(["flush_delay=3600s"]) as m:
            with open(m.path("f"), "wb") as f:
                f.write(b"z" * 100000)
            os.kill(m.pid, signal.SIGTERM)
            self.assertEqual(m.wait_exit(60), 0)
            self.assertFalse(mounted(m.mnt))
            with open(m.bpath("f"), "rb") as f:
                self.assertEqual(f.read(), b"z" * 100000)

    def test_a_killed_supervisor_takes_its_worker_and_the_mount_with_it(self):
        with CkptfsMount() as m:
            worker = m.worker_pid()
            os.kill(m.pid, signal.SIGKILL)
            wait_for(lambda: not os.path.exists(f"/proc/{worker}"), 30,
                     lambda: "the worker to end")
            try:
                os.stat(m.mnt)
                gone = not mounted(m.mnt)  # auto_unmount removed it.
            except OSError as e:
                gone = e.errno == errno.ENOTCONN
            self.assertTrue(gone, "the mount outlived its supervisor")
            m.kill9()  # Reaps the supervisor and detaches what is left of the mount.

    def test_a_killed_supervisor_leaves_what_it_held_to_the_next_mount_of_its_backing_store(self):
        with CkptfsMount(["flush_delay=3600s", "cache_size=64M"]) as m:
            model, shard = self.save_model_and_fsync_an_open_shard(m)
            os.write(shard, b"never closed")  # Saved to a rescue directory, not published.
            with open(m.path("latest.txt"), "w") as f:
                f.write("100")
            self.assertEqual(len(cache_memory_files(m.backing)), 1)
            m.kill9()
            with self.assertRaises(OSError):  # The mount went with its daemon.
                os.close(shard)
            self.assertFalse(os.path.exists(m.bpath("ckpt", "model.pt")), "nothing flushed")
            self.assertEqual(len(cache_memory_files(m.backing)), 1, "left to the next mount")
            # Another cache size: the next mount recovers the earlier memory as it was.
            with CkptfsMount(["cache_size=32M"], backing=m.backing) as again:
                self.assertRegex(again.output(), "recovering it")
                with open(m.bpath("ckpt", "model.pt"), "rb") as f:
                    self.assertEqual(f.read(), model)
                with open(m.bpath("latest.txt")) as f:
                    self.assertEqual(f.read(), "100")
                with open(m.bpath("ckpt", "__0_0.distcp"), "rb") as f:
                    self.assertEqual(f.read(), b"s" * 100000)
                rescued = glob.glob(m.bpath(".ckptfs", "rescue-*", "ckpt", "__0_0.distcp"))
                self.assertEqual(len(rescued), 1, os.listdir(m.bpath(".ckptfs")))
                with open(rescued[0], "rb") as f:
                    self.assertEqual(f.read(), b"s" * 100000 + b"never closed")
                with open(again.path("ckpt", "model.pt"), "rb") as f:
                    self.assertEqual(f.read(), model)
                self.assertEqual(len(cache_memory_files(m.backing)), 1, "this mount's own")
                self.assertEqual(again.unmount(), 0)
            self.assertEqual(cache_memory_files(m.backing), [], "a clean unmount removes it")


if __name__ == "__main__":
    unittest.main(verbosity=2)
