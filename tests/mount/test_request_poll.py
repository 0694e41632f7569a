"""-o request_poll (fs/request_poller.h, 400 us by default): serving threads poll /dev/fuse for the
next small request before they sleep, one at a time. Files written and read by many threads at once
come out whole, small requests are caught while polling, an idle mount stops polling, `0` turns it
off, and a worker replaced (an upgrade, a kill) while polling leaves the next one serving."""

import concurrent.futures
import hashlib
import os
import signal
import time
import unittest

from ckptfs_testing.harness import CkptfsMount, require_fuse, wait_for

CRASH = r"worker \d+ died"


def polling(m):
    w = m.stats()["worker"]
    return {"max_us": w["request_poll_us"], "window_us": w["request_poll_window_us"],
            "polls": w["request_polls"], "caught": w["requests_caught_polling"],
            "polling_seconds": w["request_polling_seconds"]}


def write_files(m, names, seed):
    for name in names:
        with open(m.path(name), "wb") as f:
            f.write(hashlib.sha256((seed + name).encode()).digest() * (1 + len(name) * 37))


def expected(name, seed):
    return hashlib.sha256((seed + name).encode()).digest() * (1 + len(name) * 37)


class RequestPollTest(unittest.TestCase):
    def setUp(self):
        require_fuse()

    def test_files_written_and_read_by_many_threads_while_polling_come_out_whole(self):
        names = [f"d{t}/f{i:03d}.bin" for t in range(4) for i in range(150)]
        big = os.urandom((3 << 20) + 123)
        with CkptfsMount([]) as m:
            self.assertEqual(polling(m)["max_us"], 400)
            for t in range(4):
                os.mkdir(m.path(f"d{t}"))
            with concurrent.futures.ThreadPoolExecutor(5) as pool:
                jobs = [pool.submit(write_files, m, names[t::4], "a") for t in range(4)]
                with open(m.path("big.bin"), "wb") as f:
                    f.write(big)
                for j in jobs:
                    j.result()

            def read_all(part):
                return {n: open(m.path(n), "rb").read() for n in part}
            for _ in range(2):  # Through the daemon, then again.
                with concurrent.futures.ThreadPoolExecutor(4) as pool:
                    got = {}
                    for part in pool.map(read_all, [names[t::4] for t in range(4)]):
                        got.update(part)
                for n in names:
                    self.assertEqual(got[n], expected(n, "a"), n)
                with open(m.path("big.bin"), "rb") as f:
                    self.assertEqual(f.read(), big)
            stats = polling(m)
            self.assertGreater(stats["polls"], 0, stats)
            self.assertGreater(stats["caught"], 0, stats)
            self.assertLessEqual(stats["caught"], stats["polls"], stats)
            self.assertEqual(m.unexpected_errors(), [])

    def test_an_idle_mount_stops_polling(self):
        with CkptfsMount(["request_poll=2000"]) as m:
            write_files(m, [f"f{i}" for i in range(200)], "b")
            for i in range(200):
                with open(m.path(f"f{i}"), "rb") as f:
                    f.read()
            before = polling(m)
            time.sleep(1.0)
            after = polling(m)
            # The stats read itself is a few requests, each followed by at most one window.
            self.assertLess(after["polling_seconds"] - before["polling_seconds"], 0.05,
                            (before, after))

    def test_request_poll_0_turns_polling_off(self):
        with CkptfsMount(["request_poll=0"]) as m:
            write_files(m, [f"f{i}" for i in range(50)], "c")
            for i in range(50):
                with open(m.path(f"f{i}"), "rb") as f:
                    self.assertEqual(f.read(), expected(f"f{i}", "c"))
            stats = polling(m)
            self.assertEqual((stats["max_us"], stats["polls"], stats["window_us"]), (0, 0, 0), stats)

    def test_a_worker_upgraded_or_killed_while_polling_leaves_the_next_one_serving(self):
        names = [f"f{i:03d}" for i in range(300)]
        with CkptfsMount([], expect_errors=(CRASH,)) as m:
            write_files(m, names, "d")
            for how in ("upgrade", "kill"):
                before = m.stats()["worker"]
                stop = time.monotonic() + 30
                with concurrent.futures.ThreadPoolExecutor(2) as pool:
                    def load():
                        loads = 0
                        while loads < 3 and time.monotonic() < stop:
                            for n in names:
                                with open(m.path(n), "rb") as f:
                                    self.assertEqual(f.read(), expected(n, "d"), n)
                            loads += 1
                        return loads
                    jobs = [pool.submit(load) for _ in range(2)]
                    time.sleep(0.2)
                    if how == "upgrade":
                        with open(m.path(".ckptfs", "upgrade"), "w") as f:
                            f.write("upgrade")
                    else:
                        os.kill(before["pid"], signal.SIGKILL)
                    wait_for(lambda: m.stats()["worker"]["number"] == before["number"] + 1, 60,
                             lambda: m.stats()["worker"])
                    self.assertEqual([j.result(timeout=120) for j in jobs], [3, 3], how)
                after = m.stats()["worker"]
                self.assertNotEqual(after["pid"], before["pid"], how)
                self.assertEqual(after["request_poll_us"], 400, how)
                for n in names:
                    with open(m.path(n), "rb") as f:
                        self.assertEqual(f.read(), expected(n, "d"), n)


if __name__ == "__main__":
    unittest.main()
