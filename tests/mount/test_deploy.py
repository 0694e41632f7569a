"""The daemon as operators run it: Prometheus metrics over HTTP and in a textfile, and the
readiness and stopping it tells systemd (sd_notify)."""

import http.client
import os
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import unittest

from ckptfs_testing.harness import CkptfsMount, ckptfs_bin, mounted, require_fuse, wait_for

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[^"}]|"(?:[^"\\]|\\.)*")*\})? (\S+)$')


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parse(text):
    """The samples of an exposition text, {"name{labels}": value}, and the type of each
    metric family, {name: type}."""
    samples, types = {}, {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            types[name] = kind
        elif line and not line.startswith("#"):
            m = SAMPLE.match(line)
            assert m, f"not a sample: {line!r}"
            samples[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return samples, types


def monotonic_samples(samples, types):
    """The samples that may never decrease: counters, and the buckets, counts and sums of
    histograms."""
    out = {}
    for key, value in samples.items():
        name = key.split("{", 1)[0]
        if types.get(name) == "counter":
            out[key] = value
        for suffix in ("_bucket", "_count", "_sum"):
            if name.endswith(suffix) and types.get(name[: -len(suffix)]) == "histogram":
                out[key] = value
    return out


def promtool_check(testcase, text):
    r = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True,
                       text=True, timeout=30)
    testcase.assertEqual(r.returncode, 0, f"promtool: {r.stdout}{r.stderr}\n{text[:2000]}")


def get(port, path="/metrics", method="GET", headers=None, body=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        return r.status, r.read().decode(errors="replace"), dict(r.getheaders())
    finally:
        conn.close()


def write_files(directory, count, size, fsync=True):
    block = os.urandom(1 << 20)
    for i in range(count):
        with open(os.path.join(directory, f"shard_{i}.bin"), "wb") as f:
            for _ in range(size >> 20):
                f.write(block)
            f.flush()
            if fsync:
                os.fsync(f.fileno())


class MetricsTest(unittest.TestCase):
    def setUp(self):
        require_fuse()
        self.port = free_port()

    def test_scrapes_during_a_save_pass_promtool_and_their_counters_never_decrease(self):
        with CkptfsMount(options=[f"metrics={self.port}", "flush_delay=50ms"]) as m:
            os.mkdir(m.path("ckpt"))
            writer = threading.Thread(target=write_files, args=(m.path("ckpt"), 12, 32 << 20))
            writer.start()
            scrapes = []
            while writer.is_alive() or len(scrapes) < 3:
                status, text, headers = get(self.port)
                self.assertEqual(status, 200)
                self.assertTrue(headers["Content-Type"].startswith("text/plain; version=0.0.4"))
                scrapes.append(text)
                time.sleep(0.05)
            writer.join()
            m.sync()
            status, text, _ = get(self.port)
            scrapes.append(text)
            self.assertGreaterEqual(len(scrapes), 4)
            previous = {}
            for text in scrapes:
                promtool_check(self, text)
                samples, types = parse(text)
                now = monotonic_samples(samples, types)
                for key, value in previous.items():
                    self.assertIn(key, now, "a counter of an earlier scrape is gone")
                    self.assertGreaterEqual(now[key], value, key)
                previous = now
            samples, types = parse(scrapes[-1])
            label = f'{{mountpoint="{m.mnt}"}}'
            self.assertEqual(samples["ckptfs_up" + label], 1)
            self.assertEqual(samples["ckptfs_written_bytes_total" + label], 12 * (32 << 20))
            self.assertEqual(samples["ckptfs_flushed_bytes_total" + label], 12 * (32 << 20))
            self.assertEqual(samples["ckptfs_dirty_bytes" + label], 0)
            self.assertGreaterEqual(samples["ckptfs_flush_seconds_count" + label], 12)
            self.assertGreaterEqual(samples["ckptfs_save_to_durable_seconds_count" + label], 12)
            writes = f'ckptfs_fuse_request_seconds_count{{mountpoint="{m.mnt}",operation="write"}}'
            self.assertGreater(samples[writes], 0)
            self.assertEqual(types["ckptfs_fuse_request_seconds"], "histogram")
            self.assertEqual(types["ckptfs_written_bytes_total"], "counter")

    def test_bad_requests_get_an_error_and_slow_clients_never_stall_the_mount(self):
        with CkptfsMount(options=[f"metrics={self.port}"]) as m:
            self.assertEqual(get(self.port, "/")[0], 404)
            self.assertEqual(get(self.port, "/metrics/../stats")[0], 404)
            status, _, headers = get(self.port, method="POST", body=b"x" * 100)
            self.assertEqual(status, 405)
            self.assertEqual(headers.get("Allow"), "GET, HEAD")
            self.assertEqual(get(self.port, method="DELETE")[0], 405)
            self.assertEqual(get(self.port, method="HEAD")[0], 200)
            self.assertGreaterEqual(get(self.port, headers={"X-Big": "a" * 20000})[0], 400)
            self.assertGreaterEqual(
                get(self.port, method="POST", body=b"x" * (1 << 20))[0], 400)
            # Clients that connect and send half a request, or garbage, and hold on.
            slow = []
            for i in range(40):
                s = socket.create_connection(("127.0.0.1", self.port), timeout=10)
                s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n" if i % 2 else b"\x00\xff\x16\x03")
                slow.append(s)
            try:
                # The mount serves on meanwhile, and so does the endpoint once the slow ones are
                # dropped (after their read timeout).
                write_files(m.mnt, 2, 8 << 20)
                m.sync()
                self.assertEqual(sorted(n for n in os.listdir(m.backing) if n != ".ckptfs"),
                                 ["shard_0.bin", "shard_1.bin"])
                status, text, _ = get(self.port)
                self.assertEqual(status, 200)
                self.assertIn("ckptfs_up{", text)
                for s in slow:  # Dropped: an error reply or the end of the stream.
                    s.settimeout(10)
                    answer = s.recv(4096)
                    self.assertTrue(answer == b"" or answer.startswith(b"HTTP/1.1 4"), answer)
            finally:
                for s in slow:
                    s.close()

    def test_the_endpoint_binds_to_loopback_unless_told_otherwise_in_the_supervisor_alone(self):
        def listening(port):
            """(address, socket inode) of the sockets listening on `port`."""
            with open("/proc/net/tcp") as f:
                rows = [line.split() for line in f.readlines()[1:]]
            return [(r[1].split(":")[0], r[9]) for r in rows
                    if r[3] == "0A" and int(r[1].split(":")[1], 16) == port]

        def sockets_of(pid):
            links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
            return {link[len("socket:["):-1] for link in links if link.startswith("socket:[")}

        with CkptfsMount(options=[f"metrics={self.port}"]) as m:
            [(address, inode)] = listening(self.port)
            self.assertEqual(address, "0100007F")
            self.assertIn(inode, sockets_of(m.pid))
            self.assertNotIn(inode, sockets_of(m.worker_pid()))
        other = free_port()
        with CkptfsMount(options=[f"metrics=0.0.0.0:{other}"]):
            self.assertEqual([address for address, _ in listening(other)], ["00000000"])

    def test_the_metrics_file_is_replaced_whole_every_interval_and_removed_at_unmount(self):
        workdir = tempfile.mkdtemp(prefix="ckptfs-prom-")
        self.addCleanup(shutil.rmtree, workdir, True)
        path = os.path.join(workdir, "ckptfs.prom")
        with CkptfsMount(options=[f"metrics_file={path}", "metrics_interval=100ms"]) as m:
            wait_for(lambda: os.path.exists(path) and "ckptfs_up{" in open(path).read()
                     and parse(open(path).read())[0].get(
                         f'ckptfs_up{{mountpoint="{m.mnt}"}}') == 1, 10, "the metrics file")
            writer = threading.Thread(target=write_files, args=(m.mnt, 4, 32 << 20))
            writer.start()
            inodes = set()
            # Read while the save runs, and for at least 10 intervals.
            until = time.monotonic() + 1.0
            while writer.is_alive() or time.monotonic() < until:
                with open(path) as f:
                    inodes.add(os.fstat(f.fileno()).st_ino)
                    text = f.read()
                self.assertTrue(text.endswith("\n") and "ckptfs_info{" in text, text[-200:])
                parse(text)
                time.sleep(0.02)
            writer.join()
            m.sync()
            wait_for(lambda: parse(open(path).read())[0].get(
                f'ckptfs_flushed_bytes_total{{mountpoint="{m.mnt}"}}') == 4 * (32 << 20), 10,
                "the flushed bytes in the metrics file")
            promtool_check(self, open(path).read())
            self.assertGreater(len(inodes), 1, "the file was never replaced")
            self.assertEqual(sorted(os.listdir(workdir)), ["ckptfs.prom"])
        self.assertEqual(os.listdir(workdir), [])

    def test_a_taken_port_or_an_unwritable_metrics_file_refuses_the_mount_with_one_line(self):
        workdir = os.path.realpath(tempfile.mkdtemp(prefix="ckptfs-refused-"))
        self.addCleanup(shutil.rmtree, workdir, True)
        backing, mnt = os.path.join(workdir, "backing"), os.path.join(workdir, "mnt")
        os.mkdir(backing)
        os.mkdir(mnt)
        holder = socket.socket()
        holder.bind(("127.0.0.1", self.port))
        holder.listen()
        self.addCleanup(holder.close)
        for option, reason in [(f"metrics={self.port}", "cannot serve metrics on 127.0.0.1"),
                               ("metrics_file=/nonexistent-dir/ckptfs.prom",
                                "cannot write the metrics file")]:
            r = subprocess.run([ckptfs_bin(), backing, mnt, "-f", "-o", option],
                               capture_output=True, text=True, timeout=30,
                               stdin=subprocess.DEVNULL)
            self.assertNotEqual(r.returncode, 0)
            lines = r.stderr.splitlines()
            self.assertEqual(len(lines), 1, r.stderr)
            self.assertTrue(lines[0].startswith("ckptfs:") and reason in lines[0], lines[0])
            self.assertFalse(mounted(mnt))
            self.assertEqual(os.listdir(backing), [])


class NotifyTest(unittest.TestCase):
    """systemd's Type=notify: told READY=1 once the mount serves, STOPPING=1 when asked to
    stop; through a notify socket of the test's own, as systemd would hold it."""

    def setUp(self):
        require_fuse()

    def test_systemd_is_told_ready_once_the_mount_serves_and_stopping_on_sigterm(self):
        workdir = tempfile.mkdtemp(prefix="ckptfs-notify-")
        self.addCleanup(shutil.rmtree, workdir, True)
        path = os.path.join(workdir, "notify")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(path)
        self.addCleanup(sock.close)
        os.environ["NOTIFY_SOCKET"] = path
        try:
            m = CkptfsMount()
            m.__enter__()
        finally:
            del os.environ["NOTIFY_SOCKET"]
        try:
            sock.settimeout(10)
            ready = sock.recv(4096).decode()
            self.assertIn("READY=1", ready)
            self.assertIn(f"STATUS=serving {m.mnt}", ready)
            with open(m.path("f"), "wb") as f:
                f.write(b"x" * 4096)
            m.proc.terminate()
            stopping = sock.recv(4096).decode()
            self.assertIn("STOPPING=1", stopping)
            self.assertEqual(m.wait_exit(), 0)
            with open(m.bpath("f"), "rb") as f:
                self.assertEqual(f.read(), b"x" * 4096)
        finally:
            m.__exit__(None, None, None)


if __name__ == "__main__":
    unittest.main()
