"""The live views of the client commands: `ckptfs status MNT --watch` (a screen redrawn in place on
a terminal, plain lines elsewhere) and `ckptfs sync MNT --progress` (a bar on stderr), run under a
pseudo-terminal while data is written into the mount."""

import fcntl
import os
import re
import select
import signal
import struct
import subprocess
import termios
import threading
import time
import unittest

from ckptfs_testing.harness import CkptfsMount, ckptfs_bin, require_fuse

ROWS, COLUMNS = 30, 100
ENTER_SCREEN = b"\x1b[?1049h\x1b[?25l"  # The alternate screen, the cursor hidden.
LEAVE_SCREEN = b"\x1b[?25h\x1b[?1049l"  # The cursor shown, the alternate screen left.
FRAME_START = b"\x1b[H"
ESCAPE = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]")
PLAIN_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d  memory .+ of .+  dirty .+ in \d+ "
                        r"entries  flush .+/s  errors \d+")
EXIT_TIMEOUT = 5  # Seconds for a watch to end after Ctrl-C, SIGTERM or the end of its mount.
MiB = 1 << 20


def make_controlling_terminal():
    """In the child, after setsid (start_new_session): its stdin, the terminal's slave end,
    becomes its controlling terminal, so that Ctrl-C typed there sends it SIGINT."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class Terminal:
    """A pseudo-terminal of ROWS x COLUMNS without echo (a typed Ctrl-C leaves no "^C" in the
    output), whose output a thread of its own collects (a program writing to a full terminal
    would block)."""

    def __init__(self):
        self.master, self.slave = os.openpty()
        fcntl.ioctl(self.slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLUMNS, 0, 0))
        attrs = termios.tcgetattr(self.slave)
        attrs[3] &= ~termios.ECHO
        termios.tcsetattr(self.slave, termios.TCSANOW, attrs)
        self._output = bytearray()
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)

    def run(self, args, **streams):
        """Starts ckptfs with args in a session of its own whose controlling terminal this is,
        on its stdin, stdout and stderr unless `streams` names others."""
        streams = {"stdin": self.slave, "stdout": self.slave, "stderr": self.slave, **streams}
        try:
            return subprocess.Popen([ckptfs_bin()] + args, start_new_session=True,
                                    preexec_fn=make_controlling_terminal, **streams)
        finally:
            os.close(self.slave)  # The master reads EOF once the program has exited.
            self._reader.start()

    def _read(self):
        while True:
            try:
                data = os.read(self.master, 65536)
            except OSError:  # EIO: no slave end is open any more.
                return
            if not data:
                return
            with self._lock:
                self._output += data

    def type(self, data):
        os.write(self.master, data)

    def output(self):
        with self._lock:
            return bytes(self._output)

    def wait_for(self, predicate, timeout, what):
        deadline = time.monotonic() + timeout
        while not predicate(self.output()):
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: not within {timeout}s; "
                                     f"output {self.output()[-2000:]!r}")
            time.sleep(0.05)

    def all_output(self):
        """Everything the program wrote, once it has exited."""
        self._reader.join(timeout=10)
        return self.output()

    def close(self):
        os.close(self.master)


def frames(output):
    """The frames a watch drew on the terminal: each a list of text lines, escapes removed."""
    return [ESCAPE.sub(b"", chunk).decode(errors="replace").replace("\r", "").split("\n")
            for chunk in output.split(FRAME_START)[1:]]


def figures(frame):
    """The lines of a frame that show the mount's figures (not the clock of its first line)."""
    return tuple(l for l in frame if l.split(" ", 1)[0] in ("memory", "dirty", "flush", "durable"))


def write_files(directory, count, size, fsync):
    """Writes `count` files of `size` bytes into directory (each fsynced when `fsync`)."""
    block = os.urandom(8 * MiB)
    for i in range(count):
        with open(os.path.join(directory, f"shard-{i}.bin"), "wb") as f:
            for _ in range(size // len(block)):
                f.write(block)
            if fsync:
                f.flush()
                os.fsync(f.fileno())


def read_lines(pipe, count, timeout):
    """Reads from `pipe` until it holds `count` lines or ends; fails after `timeout` seconds."""
    data = b""
    deadline = time.monotonic() + timeout
    while data.count(b"\n") < count:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"fewer than {count} lines within {timeout}s: {data!r}")
        if select.select([pipe], [], [], left)[0]:
            chunk = os.read(pipe.fileno(), 65536)
            if not chunk:
                break
            data += chunk
    return data


class StatusViewTest(unittest.TestCase):
    def setUp(self):
        require_fuse()

    def run_in_terminal(self, args, **streams):
        """ckptfs with args under a new Terminal; the cleanup kills it (only it) should the test
        leave it running."""
        term = Terminal()
        self.addCleanup(term.close)
        proc = term.run(args, **streams)
        self.addCleanup(self.stop, proc)
        return term, proc

    def run_in_pipes(self, args):
        proc = subprocess.Popen([ckptfs_bin()] + args, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.addCleanup(self.stop, proc)
        return proc

    @staticmethod
    def stop(proc):
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        for pipe in (proc.stdout, proc.stderr):
            if pipe:
                pipe.close()

    def assert_exits(self, proc, code):
        try:
            self.assertEqual(proc.wait(timeout=EXIT_TIMEOUT), code)
        except subprocess.TimeoutExpired:
            self.fail(f"ckptfs did not exit within {EXIT_TIMEOUT}s")

    def test_watch_redraws_while_a_save_runs_and_ctrl_c_leaves_the_terminal_clean(self):
        with CkptfsMount(options=["cache_size=1G"]) as m:
            term, proc = self.run_in_terminal(["status", m.mnt, "--watch", "--interval", "0.2"])
            term.wait_for(lambda out: out.count(FRAME_START) >= 2, 10, "two frames")
            write_files(m.mnt, 4, 64 * MiB, fsync=True)
            drawn = term.output().count(FRAME_START)
            term.wait_for(lambda out: out.count(FRAME_START) >= drawn + 3, 10,
                          "three frames after the save")
            term.type(b"\x03")
            self.assert_exits(proc, 0)
            output = term.all_output()
            self.assertEqual(m.unmount(), 0)
        self.assertTrue(output.startswith(ENTER_SCREEN), output[:100])
        self.assertTrue(output.endswith(LEAVE_SCREEN), output[-200:])
        drawn = frames(output[:-len(LEAVE_SCREEN)])
        self.assertGreaterEqual(len(drawn), 5)
        for frame in drawn:
            self.assertEqual([f.split(" ", 1)[0] for f in figures(frame)],
                             ["memory", "dirty", "flush", "durable"], frame)
            self.assertTrue(any(l.startswith("errors   none") for l in frame), frame)
            self.assertTrue(any(l.startswith("worker   ") for l in frame), frame)
            self.assertLessEqual(len(frame), ROWS)
            self.assertLessEqual(max(len(l) for l in frame), COLUMNS, frame)
        self.assertGreater(len({figures(f) for f in drawn}), 1, "the figures never changed")
        # A quarter of the cache holds the 256 MiB written: a quarter of the 40 cells of the bar
        # that 100 columns leave.
        memory = "memory   [" + "#" * 10 + "-" * 30 + "] 256.0 MiB of 1.0 GiB (25%)"
        self.assertIn(memory, {l for f in drawn for l in f}, "no frame shows the 256 MiB written")

    def test_watch_without_a_terminal_prints_one_plain_line_per_interval(self):
        with CkptfsMount() as m:
            proc = self.run_in_pipes(["status", m.mnt, "--watch", "--interval", "0.2"])
            read = read_lines(proc.stdout, 3, 10)  # Each line arrives while the watch runs.
            proc.send_signal(signal.SIGTERM)
            self.assert_exits(proc, 0)
            output = read + proc.stdout.read()
            stderr = proc.stderr.read()
            self.assertEqual(m.unmount(), 0)
        self.assertNotIn(b"\x1b", output)
        self.assertEqual(stderr, b"")
        lines = output.decode().splitlines()
        self.assertGreaterEqual(len(lines), 3)
        for line in lines:
            self.assertRegex(line, PLAIN_LINE)

    def test_watch_of_a_mount_that_is_unmounted_ends_with_exit_1_and_one_status_line(self):
        for on_terminal in (True, False):
            with self.subTest(on_terminal=on_terminal), CkptfsMount() as m:
                args = ["status", m.mnt, "--watch", "--interval", "0.2"]
                if on_terminal:
                    term, proc = self.run_in_terminal(args, stderr=subprocess.PIPE)
                    term.wait_for(lambda out: out.count(FRAME_START) >= 2, 10, "two frames")
                else:
                    proc = self.run_in_pipes(args)
                    read_lines(proc.stdout, 2, 10)
                self.assertEqual(m.unmount(), 0)
                self.assert_exits(proc, 1)
                lines = proc.stderr.read().decode().splitlines()
                self.assertEqual(len(lines), 1, lines)
                self.assertTrue(lines[0].startswith(f"ckptfs status: {m.mnt} "), lines[0])
                if on_terminal:
                    self.assertTrue(term.all_output().endswith(LEAVE_SCREEN))

    def test_sync_progress_draws_a_bar_of_bytes_with_rate_and_eta_and_exits_0(self):
        # A long flush delay keeps the files dirty until the sync.
        with CkptfsMount(options=["flush_delay=60s"]) as m:
            write_files(m.mnt, 4, 64 * MiB, fsync=False)
            self.assertEqual(m.stats()["dirty_bytes"], 256 * MiB)
            term, proc = self.run_in_terminal(["sync", m.mnt, "--progress"])
            try:
                self.assertEqual(proc.wait(timeout=60), 0)
            except subprocess.TimeoutExpired:
                self.fail("ckptfs sync did not return within 60s")
            output = ESCAPE.sub(b"", term.all_output()).decode()
            self.assertEqual(m.stats()["dirty_bytes"], 0)
            self.assertEqual(m.unmount(), 0)
        self.assertTrue(output.endswith("\r\n"), repr(output))
        draws = [d for d in output[:-2].replace("\r\n", "\r").split("\r") if d]
        bar = r"sync \[[#-]+\] [\d.]+ (B|KiB|MiB) of 256\.0 MiB durable, (-- B|[\d.]+ \w+)/s, "
        self.assertRegex(draws[0], bar + r"ETA (\d+:\d\d|--:--)$")
        self.assertRegex(draws[-1], r"sync \[#+\] 256\.0 MiB of 256\.0 MiB durable, "
                                    r"[\d.]+ \w+/s, done in [\d.]+ s$")
        for draw in draws:
            self.assertLess(len(draw), COLUMNS, draw)


if __name__ == "__main__":
    unittest.main()
