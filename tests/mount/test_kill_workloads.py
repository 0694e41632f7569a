"""kill -9 of the daemon at random points during real save workloads (kill_writer.py): torch.save
of Megatron state dicts + tracker, zarr checkpoints + metadata.json, small files renamed into
place + a manifest, a stream of files closed one after the other + a tracker.

Each kill point: the daemon (flush_delay, cache_size, fsync mode and cache_memory, default or
private, drawn from the seed) mounts
BACKING, kill_writer.py MODE runs in a child Python (the tests' own) under run<k>/ and logs its close
order outside the mount, the daemon (only the pid this test started) is SIGKILLed a random delay
after the writer's first close, the writer is reaped, a new daemon mounts the same BACKING, and run<k> is checked through
the mount:

- the mount shows exactly what BACKING holds; BACKING/.ckptfs/staging is empty;
- every file is a complete version of what the writer wrote (each .pt loads with torch.load and
  equals the saved state dict, zarr files are byte-identical to what zarr writes);
- the files are the state after a prefix of the writer's close order (the README's allowance: a
  version superseded before its turn may be missing), at most one step past what the writer
  logged, and (fsync=wait) at least up to its last fsync; no other name (staging or temporary)
  is visible;
- a tracker / metadata.json / MANIFEST names a complete checkpoint, which loads.

KillWorkerTest kills only the mount's worker, under the default options (the cache in shared
memory): the mount stays, its next worker recovers what was sealed and takes over the writer's open files, directories
and pending requests; the writer goes on without an error until it is asked to stop after a
step (it then exits 0), and after `ckptfs sync` BACKING holds every step the writer logged
(nothing acknowledged is lost), at most one more.

KillWorkerTest also kills the worker several times during one run of real DCP saves (each file
fsynced, the tracker fsynced and renamed into place): the writer goes on, and every checkpoint it
logged loads from BACKING with dcp.load into exactly the tensors it saved.

KillWorkerOnSmallPagesTest kills the worker during the stream on a kernel set as Debian's and
Ubuntu's ship (shared memory without huge pages), with huge_pages=leave.

Seeded: the seed is printed; CKPTFS_KILL_SEED=N replays. KillWorkloadTest and KillWorkerTest, the
default run: 2 kill points per workload (8 in all each; KillWorkerTest 4 more during DCP).
KillWorkloadLongTest and KillWorkerLongTest, the long variants, run only with
CKPTFS_LONG_TESTS=1 (17 kill points per workload, 68 in all, and 17 during DCP); without it,
they are reported as skipped.
"""

import bisect
import collections
import itertools
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
import unittest

import kill_writer as kw
from ckptfs_testing.ckptfs_daemon import describe_tree_diff, snapshot
from ckptfs_testing.harness import (CkptfsMount, choose_seed, kernel_without_huge_pages,
                                    require_fuse, require_long, wait_for)
from ckptfs_testing.workloads import digest, torch_load

HERE = os.path.dirname(os.path.abspath(__file__))

MAX_DELAY = 1.5  # Seconds after the writer is ready; the writers save for longer than that.
DEFAULT_KILLS, LONG_KILLS = 2, 17
PARTIAL = re.compile(r"^(.*)\.[0-9a-f]{32}\.partial$")  # zarr DirectoryStore's temporary names.


class Torn(Exception):
    pass


# --- The writers' plans: what each logged step changes, and what each file must contain ----------
#
# A plan is an endless sequence of steps (log line, [event, ...]); an event is a list of
# (name, version or None for "absent") changes that the daemon journals as one entry (a close,
# a rename). version_of() maps a file that is present to its version, or raises Torn.

class TorchPlan:
    def __init__(self, seed):
        self.seed = seed
        self.digests = {}

    def steps(self):
        for it in itertools.count(1):
            yield f"close {kw.torch_rel(it)}", [[(kw.torch_rel(it), 1)]]
            yield f"close {kw.TRACKER} {it}", [[(kw.TRACKER, it)]]

    def expected_digest(self, it):
        if it not in self.digests:
            self.digests[it] = digest(kw.torch_state(self.seed, it))
        return self.digests[it]

    def version_of(self, name, path):
        if name == kw.TRACKER:
            return _versioned_int(path, name)
        m = re.fullmatch(r"iter_(\d{7})/mp_rank_00/model_optim_rng\.pt", name)
        if not m:
            return "unexpected"
        try:
            got = digest(torch_load(path))
        except Exception as e:
            raise Torn(f"{name}: torch.load failed: {type(e).__name__}: {e}")
        if got != self.expected_digest(int(m.group(1))):
            raise Torn(f"{name}: loads, but is not the state dict the writer saved")
        return 1

    def check_complete(self, tc, files, ctx, mnt_run):
        """The tracker names a complete checkpoint (its .pt was validated by version_of)."""
        t = files.get(kw.TRACKER)
        if t:
            for it in range(1, t + 1):
                tc.assertIn(kw.torch_rel(it), files, f"{ctx}: the tracker says {t}")


class ZarrPlan:
    def __init__(self, seed):
        self.seed = seed
        self.expected = {}

    def files(self, ck):
        if ck not in self.expected:
            self.expected[ck] = kw.zarr_expected(self.seed, ck)
        return self.expected[ck]

    def steps(self):
        for ck in itertools.count(1):
            d = kw.zarr_rel(ck)
            for key in self.files(ck):
                rel = f"{d}/{key}"
                yield f"close {rel}", [[(rel + ".partial", 1)],
                                       [(rel + ".partial", None), (rel, 1)]]
            yield f"close {d}/metadata.json", [[(f"{d}/metadata.json", 1)]]

    @staticmethod
    def canonical(name):
        m = PARTIAL.match(name)
        return m.group(1) + ".partial" if m else name

    def version_of(self, name, path):
        m = re.fullmatch(r"ckpt_(\d{4})/(.*?)(\.partial)?", name)
        if not m:
            return "unexpected"
        ck, key = int(m.group(1)), m.group(2)
        with open(path, "rb") as f:
            got = f.read()
        if key == "metadata.json" and not m.group(3):
            try:
                ok = json.loads(got) == kw.zarr_metadata(ck)
            except ValueError:
                ok = False
        else:
            want = self.files(ck).get(key)
            if want is None:
                return "unexpected"
            ok = got == want
        if not ok:
            raise Torn(f"{name}: {len(got)} bytes that zarr did not write there")
        return 1

    def check_complete(self, tc, files, ctx, mnt_run):
        """Every checkpoint with metadata.json reads back equal with zarr."""
        import numpy as np
        import zarr
        for name in files:
            m = re.fullmatch(r"ckpt_(\d{4})/metadata.json", name)
            if not m:
                continue
            ck = int(m.group(1))
            for arr_name, shape, _, dtype, _ in kw.ZARR_ARRAYS:
                arr = zarr.open(os.path.join(mnt_run, kw.zarr_rel(ck), arr_name), mode="r")
                want = kw.zarr_data(self.seed, ck, arr_name, shape, dtype)
                tc.assertTrue(np.array_equal(arr[...], want),
                              f"{ctx}: {name} is present but {arr_name} reads back different")


class NumberedFilesPlan:
    """Files 0, 1, ... written once each (renamed into place from NAME.tmp when through_tmp), and
    after every `every` files an index file holding their count."""

    def __init__(self, seed, rel, content, pattern, index, every, through_tmp):
        self.seed, self.rel, self.content = seed, rel, content
        self.pattern = pattern + (r"(\.tmp)?" if through_tmp else "")
        self.index, self.every, self.through_tmp = index, every, through_tmp

    def _write(self, name, version):
        if not self.through_tmp:
            return [[(name, version)]]
        return [[(name + ".tmp", version)], [(name + ".tmp", None), (name, version)]]

    def steps(self):
        for i in itertools.count():
            yield f"close {self.rel(i)}", self._write(self.rel(i), 1)
            if i % self.every == self.every - 1:
                yield f"close {self.index} {i + 1}", self._write(self.index, i + 1)

    def version_of(self, name, path):
        if name.removesuffix(".tmp") == self.index:
            return _versioned_int(path, name)
        m = re.fullmatch(self.pattern, name)
        if not m or self.rel(int(m.group(1))) != name.removesuffix(".tmp"):
            return "unexpected"
        with open(path, "rb") as f:
            got = f.read()
        if got != self.content(self.seed, int(m.group(1))):
            raise Torn(f"{name}: {len(got)} bytes that the writer did not write")
        return 1

    def check_complete(self, tc, files, ctx, mnt_run):
        n = files.get(self.index)
        if n:
            missing = [self.rel(i) for i in range(n) if self.rel(i) not in files]
            tc.assertFalse(missing, f"{ctx}: {self.index} says {n} files, missing {missing[:5]}")


def small_plan(seed):
    return NumberedFilesPlan(seed, kw.small_rel, kw.small_content, r"d\d/f(\d{5})\.bin",
                             "MANIFEST", kw.MANIFEST_EVERY, through_tmp=True)


def stream_plan(seed):
    return NumberedFilesPlan(seed, kw.stream_rel, kw.stream_content, r"s/f(\d{6})\.bin",
                             kw.TRACKER, kw.STREAM_TRACKER_EVERY, through_tmp=False)


def task_state(pid):
    """State, wait channel and kernel stacks of the threads of process pid (for a hang report)."""
    out = []
    for tid in sorted(os.listdir(f"/proc/{pid}/task"), key=int):
        info = []
        for item in ("stat", "wchan", "stack"):
            try:
                with open(f"/proc/{pid}/task/{tid}/{item}") as f:
                    text = f.read().strip()
            except OSError as e:
                text = f"<{e.strerror}>"
            info.append(text.split(") ", 1)[-1].split()[0] if item == "stat" else text)
        out.append(f"thread {tid}: state {info[0]}, wchan {info[1]}\n{info[2]}")
    return "\n".join(out)


def _versioned_int(path, name):
    with open(path, "rb") as f:
        got = f.read()
    if not re.fullmatch(rb"[1-9]\d*\n?", got):
        raise Torn(f"{name}: torn content {got[:40]!r}")
    return int(got)


# --- The prefix check ---------------------------------------------------------------------------

def prefix_matches(events, actual, min_p, max_p):
    """The prefix lengths p (min_p <= p <= max_p) such that `actual` ({name: version}) is the
    state after events[:p], with the README's allowance: a name whose current version is
    superseded by a later event (of `events`: a new version, a rename or unlink) may show an
    earlier version since its last removal, or be absent. Returns (ok prefixes, (p, {name:
    (actual, acceptable)}) for the closest miss)."""
    history = collections.defaultdict(list)  # name -> [(event index, version)]
    for i, ev in enumerate(events):
        for name, version in ev:
            history[name].append((i, version))

    def acceptable(name, p):
        h = history.get(name, [])
        n = bisect.bisect_left(h, p, key=lambda x: x[0])  # Changes before p.
        values = [None] + [v for _, v in h[:n]]
        if values[-1] is None or n == len(h):
            return {values[-1]}  # Removals are never skipped; nor is a version not superseded.
        # Superseded later: the flusher may have skipped it, and the versions before it back to
        # the name's last removal (or creation).
        last_removal = max(i for i, v in enumerate(values) if v is None)
        return set(values[last_removal:])

    names = set(history) | set(actual)
    bad = {n for n in names if actual.get(n) not in acceptable(n, 0)}
    ok, closest = [], None
    for p in range(0, max_p + 1):
        if p > 0:
            for name, _ in events[p - 1]:
                if actual.get(name) in acceptable(name, p):
                    bad.discard(name)
                else:
                    bad.add(name)
        if p < min_p:
            continue
        if not bad:
            ok.append(p)
        elif closest is None or len(bad) <= len(closest[1]):
            closest = (p, {n: (actual.get(n), acceptable(n, p)) for n in sorted(bad)[:10]})
    return ok, closest


def closes_logged(log):
    with open(log) as f:
        return sum(1 for line in f if line.startswith("close "))


def logged_a_close(log):
    try:
        with open(log) as f:
            return "\nclose " in "\n" + f.read()
    except FileNotFoundError:
        return False


def start_writer(mode, root, wseed, log, err):
    """kill_writer.py MODE ROOT WSEED LOG, its stderr to the file `err`."""
    return subprocess.Popen([sys.executable, os.path.join(HERE, "kill_writer.py"), mode, root,
                             str(wseed), log],
                            stdout=subprocess.PIPE, stderr=err, text=True, cwd="/")


def end_writer(writer):
    """Kills the writer if it still runs (only the one the test started) and reaps it."""
    if writer.poll() is None:
        writer.kill()
    writer.wait()
    writer.stdout.close()


class KillRuns:
    """The kill tests of the three workloads, with KILLS kill points each (a mixin of the
    unittest.TestCase classes below). With KILL_WORKER, only the mount's worker is killed, with
    the cache in shared memory: the mount stays, and everything the writer logged (every close
    acknowledged) must reach BACKING."""
    maxDiff = 4000
    KILLS = 0
    KILL_WORKER = False
    EXTRA_OPTIONS = []  # Of the mount whose worker is killed.

    def test_torch_save(self):
        self.run_kills("torch", TorchPlan, self.KILLS)

    def test_zarr(self):
        self.run_kills("zarr", ZarrPlan, self.KILLS)

    def test_small_files(self):
        self.run_kills("small", small_plan, self.KILLS)

    def test_a_stream_of_closed_files_and_a_tracker(self):
        self.run_kills("stream", stream_plan, self.KILLS)

    def run_kills(self, mode, make_plan, kills):
        require_fuse()
        seed = choose_seed("CKPTFS_KILL_SEED", f"kill test ({mode})")
        rng = random.Random(seed)
        # The options of the daemon killed at each kill point: flushing at once or a little
        # later, a cache that holds a few checkpoints or not even one (writers wait), fsync
        # waiting for durability or not.
        options = [[f"flush_delay={rng.choice(['0', '50ms'])}",
                    f"cache_size={rng.choice(['16M', '64M'])}",
                    f"fsync={rng.choice(['wait', 'defer'])}"]
                   + rng.choice([[], ["cache_memory=private"]]) for _ in range(kills)]
        if self.KILL_WORKER:
            # One mount throughout (its workers change); most of what it holds when flushing
            # waits an hour is recovered from the log. A cache the writers fill (they wait for
            # memory, files are spilled) or never fill.
            options = [[f"flush_delay={rng.choice(['50ms', '3600s'])}",
                        f"cache_size={rng.choice(['16M', '1G'])}"] + self.EXTRA_OPTIONS]
        durable_runs = 0
        with CkptfsMount(options=options[0],
                         expect_errors=[r"worker \d+ died"] if self.KILL_WORKER else ()) as m:
            snapshots = {}
            for k in range(kills):
                run = f"run{k}"
                wseed = rng.randrange(1 << 30)
                delay = rng.uniform(0.0, MAX_DELAY)
                ctx = (f"{mode} {run}, seed {seed} (writer seed {wseed}, kill after {delay:.2f}s, "
                       f"{','.join(m.options)})")
                log = os.path.join(m.workdir, f"{run}.log")
                logged, durable, writer_err = self.kill_during_writer(m, mode, run, wseed, delay,
                                                                      log)
                if "fsync=defer" in m.options:
                    durable = 0  # fsync returned at once: it promised nothing.
                if self.KILL_WORKER:
                    m.sync()  # The same mount, its next worker.
                else:
                    m.options = options[k + 1] if k + 1 < kills else []
                    m.start()
                try:
                    stats = self.check_run(m, make_plan(wseed), run, logged, durable, ctx,
                                           acknowledged=self.KILL_WORKER)
                except AssertionError as e:
                    lines = writer_err.splitlines()
                    last = ([l for l in lines if l.startswith("writer ")] or lines or [""])[0]
                    raise AssertionError(f"{e}\n(the writer's last word: {last})") from None
                snapshots[run] = snapshot(m.bpath(run))
                if self.KILL_WORKER:
                    figures = m.stats()
                    stats["recovered versions"] = figures["recovered_versions"]
                    stats["recovered handles"] = figures["recovered_handles"]
                    stats["spilled MiB"] = figures["spilled_bytes"] >> 20
                print(f"{ctx}: writer logged {len(logged)} steps, {stats}", file=sys.stderr)
                durable_runs += stats["files"] > 0
            # What earlier kill points left is still there, unchanged.
            for run, snap in snapshots.items():
                self.assertEqual(snapshot(m.bpath(run)), snap, f"{mode}: {run} changed later")
            self.assertEqual(m.unmount(), 0)
        self.assertGreater(durable_runs, 0, "no kill point left any file: the test proved nothing")

    def kill_during_writer(self, m, mode, run, wseed, delay, log):
        os.mkdir(m.path(run))
        with open(os.path.join(m.workdir, f"{run}.err"), "w+") as err:
            writer = start_writer(mode, m.path(run), wseed, log, err)
            try:
                ready = writer.stdout.readline().strip()
                self.assertEqual(ready, "ready", "the writer did not start")
                # From its first close on (slow builds and busy machines start slowly): a kill
                # point then always has something written to check.
                wait_for(lambda: logged_a_close(log), 120, lambda: "the writer's first close")
                time.sleep(delay)
                self.assertIsNone(writer.poll(), "the writer ended before the kill")
                if self.KILL_WORKER:
                    # The writer goes on through the crash, through the handles and directories
                    # it had, and is then asked to stop after a step: it exits 0.
                    old = m.worker_pid()
                    logged_before = closes_logged(log)
                    os.kill(old, signal.SIGKILL)
                    wait_for(lambda: m.worker_pid() != old, 30, lambda: "a new worker")
                    wait_for(lambda: closes_logged(log) >= logged_before + 2 or
                             writer.poll() is not None, 120,
                             lambda: "the writer going on after the crash")
                    writer.send_signal(signal.SIGUSR2)
                else:
                    m.kill9()
                try:
                    writer.wait(timeout=60 if self.KILL_WORKER else 30)
                except subprocess.TimeoutExpired:
                    state = task_state(writer.pid)
                    writer.send_signal(signal.SIGUSR1)  # faulthandler: its Python traceback.
                    time.sleep(1)
                    err.seek(0)
                    self.fail(f"the writer hung after the daemon was killed: {state}\n"
                              f"writer stderr: {err.read()[-3000:]}")
            finally:
                end_writer(writer)
            err.seek(0)
            writer_err = err.read()
        if self.KILL_WORKER:
            self.assertEqual(writer.returncode, 0,
                             f"the writer noticed the crash of the worker: {writer_err[-3000:]}")
        if not self.KILL_WORKER:
            self.assertEqual(os.listdir(m.mnt), [], "the writer wrote into the bare mount point")
        with open(log) as f:
            lines = f.read().splitlines()
        logged = [l for l in lines if l.startswith("close ")]
        durable = [int(l.split()[1]) for l in lines if l.startswith("durable ")]
        return logged, (durable[-1] if durable else 0), writer_err

    def check_run(self, m, plan, run, logged, durable, ctx, acknowledged=False):
        self.assertEqual(m.staging_files(), [], f"{ctx}: the new mount left staging files")
        self.assertEqual(sorted(os.listdir(m.path(".ckptfs"))), ["stats", "sync", "upgrade"])
        mnt_run = m.path(run)
        through, backing = snapshot(mnt_run), snapshot(m.bpath(run))
        self.assertEqual(through, backing, f"{ctx}: the mount does not show BACKING:\n"
                         + describe_tree_diff(backing, through, "backing", "mount"))
        # Every file under the run is a complete version of something the writer wrote.
        files = {}
        canonical = getattr(plan, "canonical", lambda n: n)
        for rel, desc in through.items():
            if desc[0] == "d":
                continue
            name = canonical(rel)
            self.assertNotIn(name, files, f"{ctx}: two temporaries for {name}")
            try:
                files[name] = plan.version_of(name, os.path.join(mnt_run, rel))
            except Torn as e:
                self.fail(f"{ctx}: torn file: {e}")
        unexpected = sorted(n for n, v in files.items() if v == "unexpected")
        self.assertFalse(unexpected, f"{ctx}: names the writer never wrote: {unexpected[:10]}")
        # The state after a prefix of the close order, within what the writer logged (+1 step)
        # and at least up to its last fsync.
        steps = list(itertools.islice(plan.steps(), len(logged) + 1))
        self.assertEqual([label for label, _ in steps[:len(logged)]], logged,
                         f"{ctx}: the writer's log is not the planned order (fix the plan)")
        events = [ev for _, evs in steps for ev in evs]
        max_p = len(events)
        # Nothing acknowledged is lost: every step the writer logged.
        min_p = sum(len(evs) for _, evs in steps[:len(logged)]) if acknowledged else 0
        if durable:
            tracker_step = logged.index(f"close {kw.TRACKER} {durable}")
            min_p = max(min_p, sum(len(evs) for _, evs in steps[:tracker_step + 1]))
            self.assertGreaterEqual(files.get(kw.TRACKER, 0), durable,
                                    f"{ctx}: the tracker fsynced at {durable} went back")
        ok, closest = prefix_matches(events, files, min_p, max_p)
        self.assertTrue(ok, f"{ctx}: BACKING is not a prefix of the close order (prefixes "
                            f"{min_p}..{max_p} of {len(events)} events); closest: after "
                            f"{closest[0]} events, name: (present version, acceptable): "
                            f"{closest[1]}")
        plan.check_complete(self, files, ctx, mnt_run)
        return {"files": len(files), "prefix events": ok[-1], "logged events": sum(
            len(evs) for _, evs in steps[:len(logged)])}


class KillWorkloadTest(KillRuns, unittest.TestCase):
    """The default run: DEFAULT_KILLS kill points per workload; and the prefix check itself (no
    mount): it accepts exactly the states the README allows."""
    KILLS = DEFAULT_KILLS

    EVENTS = [[("a", 1)], [("t.tmp", 1)], [("t.tmp", None), ("t", 1)], [("b", 1)],
              [("t.tmp", 2)], [("t.tmp", None), ("t", 2)]]

    def prefixes(self, actual, min_p=0):
        return prefix_matches(self.EVENTS, actual, min_p, len(self.EVENTS))[0]

    def test_prefix_check_accepts(self):
        self.assertEqual(self.prefixes({}), [0])
        # t.tmp 1 may be skipped (renamed away), and so may t 1 (superseded by t 2).
        self.assertEqual(self.prefixes({"a": 1}), [1, 2, 3])
        self.assertEqual(self.prefixes({"a": 1, "t.tmp": 1}), [2])
        self.assertEqual(self.prefixes({"a": 1, "t": 1, "b": 1}), [4, 5])
        # t's first version is superseded by the second: it may be skipped.
        self.assertEqual(self.prefixes({"a": 1, "b": 1, "t": 2}), [6])
        self.assertEqual(self.prefixes({"a": 1, "b": 1}), [4, 5])

    def test_prefix_check_rejects(self):
        self.assertEqual(self.prefixes({"b": 1}), [])  # b before a.
        self.assertEqual(self.prefixes({"a": 1, "t": 2}), [])  # t 2 before b.
        self.assertEqual(self.prefixes({"a": 1, "t": 1, "b": 1, "x": 1}), [])  # Unknown name.
        self.assertEqual(self.prefixes({"a": 1, "t": 3}), [])  # A version never written.
        self.assertEqual(self.prefixes({"a": 1}, min_p=4), [])  # Less than was fsynced.
        self.assertEqual(self.prefixes({"a": 1, "t.tmp": 1, "t": 1}), [])  # Both names.


class DcpKillRuns:
    """kill -9 of the worker DCP_KILLS times during one run of DCP saves (a mixin)."""
    DCP_KILLS = 0

    def test_dcp_with_fsyncs(self):
        require_fuse()
        seed = choose_seed("CKPTFS_KILL_SEED", "kill test (dcp)")
        rng = random.Random(seed)
        options = [f"flush_delay={rng.choice(['50ms', '3600s'])}",
                   f"cache_size={rng.choice(['32M', '1G'])}"]
        wseed = rng.randrange(1 << 30)
        ctx = f"dcp, seed {seed} (writer seed {wseed}, {','.join(options)})"
        with CkptfsMount(options=options, expect_errors=[r"worker \d+ died"]) as m:
            os.mkdir(m.path("dcp"))
            log = os.path.join(m.workdir, "dcp.log")
            with open(os.path.join(m.workdir, "dcp.err"), "w+") as err:
                writer = start_writer("dcp", m.path("dcp"), wseed, log, err)
                try:
                    self.assertEqual(writer.stdout.readline().strip(), "ready", ctx)
                    wait_for(lambda: logged_a_close(log), 120, lambda: "the writer's first close")
                    served_since = time.monotonic()
                    for _ in range(self.DCP_KILLS):
                        time.sleep(rng.uniform(0.0, MAX_DELAY))
                        # Not a crash loop: three workers killed within kQuickDeath (1 s) of
                        # beginning to serve end the mount.
                        time.sleep(max(0.0, served_since + 1.5 - time.monotonic()))
                        self.assertIsNone(writer.poll(), f"{ctx}: the writer ended")
                        old = m.worker_pid()
                        logged_before = closes_logged(log)
                        os.kill(old, signal.SIGKILL)
                        wait_for(lambda: m.worker_pid() != old, 30, lambda: "a new worker")
                        served_since = time.monotonic()
                        wait_for(lambda: closes_logged(log) > logged_before or
                                 writer.poll() is not None, 120,
                                 lambda: "the writer going on after the crash")
                    writer.send_signal(signal.SIGUSR2)
                    writer.wait(timeout=120)
                finally:
                    end_writer(writer)
                err.seek(0)
                self.assertEqual(writer.returncode, 0,
                                 f"{ctx}: the writer noticed a crash: {err.read()[-3000:]}")
            m.sync()
            with open(log) as f:
                saved = [l.split()[1] for l in f.read().splitlines()
                         if l.startswith("close iter_")]
            self.assertEqual(saved, [kw.dcp_rel(it) for it in range(1, len(saved) + 1)], ctx)
            self.check_dcp(m, wseed, len(saved), ctx)
            figures = m.stats()
            print(f"{ctx}: {len(saved)} checkpoints, {self.DCP_KILLS} kills, recovered versions "
                  f"{figures['recovered_versions']}, handles {figures['recovered_handles']}, "
                  f"crashes {figures['worker']['crashes']}", file=sys.stderr)
            self.assertEqual(figures["worker"]["crashes"], self.DCP_KILLS, ctx)
            self.assertEqual(m.unmount(), 0)

    def check_dcp(self, m, wseed, count, ctx):
        """Every checkpoint the writer logged loads from BACKING into the tensors it saved; the
        tracker names the last."""
        import warnings
        import torch
        import torch.distributed.checkpoint as dcp
        warnings.filterwarnings("ignore")
        for it in range(1, count + 1):
            expected = kw.dcp_state(wseed, it)
            loaded = {k: torch.zeros_like(v) for k, v in expected.items()}
            dcp.load(loaded, checkpoint_id=m.bpath("dcp", kw.dcp_rel(it)))
            different = [k for k in expected if not torch.equal(loaded[k], expected[k])]
            self.assertEqual(different, [], f"{ctx}: {kw.dcp_rel(it)} on BACKING")
        with open(m.bpath("dcp", kw.TRACKER)) as f:
            self.assertGreaterEqual(int(f.read()), count - 1, ctx)


class KillWorkerTest(KillRuns, DcpKillRuns, unittest.TestCase):
    """kill -9 of the worker alone, the cache in shared memory: DEFAULT_KILLS kill points per
    workload and 4 during DCP saves, every acknowledged close on BACKING afterwards."""
    KILLS = DEFAULT_KILLS
    DCP_KILLS = 4
    KILL_WORKER = True


class KillWorkerOnSmallPagesTest(KillRuns, unittest.TestCase):
    """The worker killed on a kernel that gives shared memory no huge pages (Debian's and
    Ubuntu's defaults, set for the test and restored after), the mount leaving it so: the cache
    is shared all the same, and nothing is lost. CTest runs its stream test."""
    KILLS = DEFAULT_KILLS
    KILL_WORKER = True
    EXTRA_OPTIONS = ["huge_pages=leave"]

    def setUp(self):
        require_fuse()
        self.enterContext(kernel_without_huge_pages())


class KillWorkerLongTest(KillRuns, DcpKillRuns, unittest.TestCase):
    """The long variant of KillWorkerTest (CKPTFS_LONG_TESTS=1): LONG_KILLS kill points per
    workload and during DCP saves."""
    KILLS = LONG_KILLS
    DCP_KILLS = LONG_KILLS
    KILL_WORKER = True

    def setUp(self):
        require_long()


class KillWorkloadLongTest(KillRuns, unittest.TestCase):
    """The long variant (CKPTFS_LONG_TESTS=1): LONG_KILLS kill points per workload."""
    KILLS = LONG_KILLS

    def setUp(self):
        require_long()


if __name__ == "__main__":
    unittest.main()
