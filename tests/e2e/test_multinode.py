"""Several nodes over one backing directory (-o shared): three daemons, each on its own mount point
(n0, n1, n2, with `shared,node=NAME`), over ONE backing directory, and the real libraries' saves
with rank r saving through mount r % 3: one checkpoint written by three nodes.

- A DCP save (3 ranks) and a Megatron torch_dist save (TP 2 x DP 2, into iter_0000001 with the
  tracker): after `ckptfs sync` on every node, the backing tree is the plain run's (.metadata by
  name and size), every mount shows that tree, the checkpoint loads through each mount and from
  the backing dir, no daemon logs an error, all unmount with status 0 and leave nothing behind.
- kill -9 of one node (its daemon and the ranks saving through it, as its trainer dies with it)
  at a random point of a sequence of DCP saves into iter_000000N, each followed by Megatron's
  tracker. The live nodes' ranks complete, or fail only for the loss (on a collective with a
  dead rank). The live members save once more (after member_timeout, through their mounts only)
  and that save commits. Then the dead node's mount comes back (a new daemon on its mount point,
  same node name), recovering what the dead one had sealed from its cache memory file in
  /dev/shm. Once the live members judged the dead one gone, after their save, after the restart
  and `ckptfs sync` on every member, and after all unmount: every iter_ directory with a
  .metadata holds the plain run's files, loads from the backing dir and never changes
  afterwards; in every other one each file is absent or the plain run's (no torn file under a
  final name); the tracker names a published checkpoint. After the restart the files the dead
  node's completed ranks closed are there (with rank 0's, their checkpoint is published), and
  the tracker is still the live members' newer one (the dead node's is never published over it); no
  daemon logged an error but the commits that failed for the dead member, and every member exits
  0. Every run interrupts a save (a kill stops a rank of the victim, or keeps the save's tracker
  off the backing store): one kill point of each lands early in the save. Seeded: the seed is
  printed and CKPTFS_MULTINODE_SEED=N replays it; MultiNodeTest runs DEFAULT_KILLS kill points,
  the long variant MultiNodeKillLongTest LONG_KILLS (only with CKPTFS_LONG_TESTS=1; otherwise
  skipped).
- A node's worker killed (kill -9) after it closed its shard, and another node's marker closed
  before the next worker joins: the next worker acknowledges for the killed one, and the marker
  is published only with the shard complete beside it. Likewise for a worker replaced by
  `ckptfs upgrade` while another node's commit awaits it.
- A member dropped while alive: n2's member file is made unwritable and unreadable (a directory
  in its place) for 1.5 member_timeout, so that the others judge it dead, then its last beat
  lands: n2 learns it was dropped and rejoins, and a marker closed on n0 after n2's shard is
  published only with the shard complete beside it.
- A stopped member: SIGSTOP of a node's daemon (not the committer's) after the ranks' files are
  closed, before rank 0's marker: the marker stays off the backing store while the member is
  stopped (checked for a while shorter than member_timeout), writes through the other mounts
  return meanwhile, and after SIGCONT the marker is published.

Mount points have the plain run's directory's length: .metadata records its checkpoint's path.
"""

import os
import random
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import unittest

from ckptfs_testing import workloads
from ckptfs_testing.checksums import mismatched_records
from ckptfs_testing.ckptfs_daemon import (CkptfsDaemon, cache_memory_files, describe_tree_diff,
                                          mounted, read_or_none, run_ckptfs, snapshot, wait_for)
from ckptfs_testing.e2e_check import E2E_TMP, comparable, require_fuse
from ckptfs_testing.harness import choose_seed, require_long

NODES = ("n0", "n1", "n2")
PLAIN = "pl"  # As long as a node's mount point name.
MEMBER_TIMEOUT_MS = 2000
# The kernel caches entries and attributes this long: files another node made show after it.
ATTR_TIMEOUT = 1.0
DEFAULT_KILLS, LONG_KILLS = 3, 30
SAVES = 3  # Saves in a kill point's sequence; the kill lands in one of them.
# Kill delays, in plain saves (from the ranks' start line to the tracker on the plain directory):
# up to past the save's end, while its markers wait for their commit. One kill point of each run,
# drawn by the seed, comes within EARLY_KILL, before the mounted save's tracker is published (its
# ranks take about as long, then the tracker waits flush_delay and a commit round: measured 1.1
# to 2.7 plain saves), so that every run interrupts a save.
LATEST_KILL, EARLY_KILL = 1.5, 0.5
# Bound on waiting for a marker to be published once nothing holds it back: a hang, not a speed.
PUBLISH_TIMEOUT = 60.0
# DCP writes .metadata under this name, then renames it: a save it did not finish may leave it.
METADATA_TMP = ".metadata.tmp"


def start_node(tc, tmp, backing, node, member_timeout_ms=MEMBER_TIMEOUT_MS, tag="", options=()):
    """Mounts a daemon for `node` over `backing` on tmp/<node>, with `options` beside the shared
    mode's, logging to tmp/<node><tag>.log; it is cleaned up when the test ends."""
    mnt = os.path.join(tmp, node)
    os.makedirs(mnt, exist_ok=True)
    if mounted(mnt):  # The daemon would take an earlier mount there for its own.
        raise RuntimeError(f"{mnt} is still mounted")
    d = CkptfsDaemon(backing, mnt, ["cache_size=512M", "shared", f"node={node}",
                                    f"member_timeout={member_timeout_ms}", *options],
                     log_file=os.path.join(tmp, f"{node}{tag}.log"))
    tc.addCleanup(d.cleanup)
    d.start()
    return d


def start_nodes(tc, tmp, backing, member_timeout_ms=MEMBER_TIMEOUT_MS, tag="", options=()):
    """start_node for each node; returns the daemons, in NODES order."""
    return [start_node(tc, tmp, backing, node, member_timeout_ms, tag, options) for node in NODES]


def make_tmp(tc, prefix):
    """A temporary directory removed when the test ends, unless a node is still mounted in it."""
    require_fuse()
    tmp = tempfile.mkdtemp(prefix=prefix, dir=E2E_TMP)

    def remove():
        if os.environ.get("CKPTFS_E2E_KEEP"):
            print(f"kept {tmp}")
        elif not any(mounted(os.path.join(tmp, node)) for node in NODES):
            shutil.rmtree(tmp, ignore_errors=True)
    tc.addCleanup(remove)
    return tmp


def plain_tree(w, tmp, save):
    """(the tree save([tmp/pl] * 3) writes on a plain directory, contents of w.varying left out;
    what save returned)."""
    plain = os.path.join(tmp, PLAIN)
    os.mkdir(plain)
    result = save([plain] * len(NODES))
    tree = comparable(snapshot(plain), w.varying)
    shutil.rmtree(plain)
    return tree, result


def commit_failed_for(node):
    """The daemon's log line, and `ckptfs sync`'s error, of a commit that failed because member
    `node` (its whole name) died before it acknowledged (core/shared/shared_commit.cc)."""
    return re.compile(rf"commit of \S+ failed: member {re.escape(node)} (stopped beating|left) ")


def read_text(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return None


def chattr(flag, path, check=True):
    """chattr FLAG PATH (+i: nothing in the directory can be created, renamed or removed, by root
    neither)."""
    subprocess.run(["chattr", flag, path], check=check, capture_output=True)


def write_file(path, data, fsync=False):
    with open(path, "wb") as f:
        f.write(data)
        if fsync:
            f.flush()
            os.fsync(f.fileno())


def resume(d):
    """SIGCONT to daemon d's worker while the daemon runs (not reaped yet, so its pids are
    still its own)."""
    if d.proc is not None and d.proc.poll() is None:
        os.kill(d.worker_pid(), signal.SIGCONT)


class MultiNodeChecks:
    """Checks shared by the tests (a mixin of unittest.TestCase)."""
    maxDiff = 4000

    def assert_tree(self, expected, root, what, varying):
        got = comparable(snapshot(root), varying)
        self.assertEqual(expected, got, f"{what} differs from the plain run:\n"
                         + describe_tree_diff(expected, got, "plain", what))

    def assert_unmounted_clean(self, daemons, expected, backing, varying):
        """No node (daemons in NODES order) logged an error, each unmounts with status 0, and
        the backing tree is `expected`, with nothing of the shared mode left."""
        for node, d in zip(NODES, daemons):
            self.assertEqual(d.error_lines(), [], f"{node} logged errors")
        for node, d in zip(NODES, daemons):
            self.assertEqual(d.unmount(), 0, f"{node}'s exit status\n" + d.output()[-3000:])
        self.assert_tree(expected, backing, "backing dir after unmount", varying)
        self.assert_no_shared_leftovers(backing)

    def assert_no_shared_leftovers(self, backing):
        """After every node unmounted cleanly: no staged file or staging directory (each member
        stages in a directory of its own), member file or commit request."""
        own = os.path.join(backing, ".ckptfs")
        staged = [os.path.join(d, f) for d, dirs, files in os.walk(os.path.join(own, "staging"))
                  for f in files + dirs]
        self.assertEqual(staged, [], "staged files or staging directories left")
        for sub in ("shared/members", "shared/commits"):
            path = os.path.join(own, sub)
            if os.path.isdir(path):
                self.assertEqual(sorted(os.listdir(path)), [], f"left in {path}")


class ThreeNodeSaves(MultiNodeChecks):
    def check_three_node_save(self, w, save, checkpoint, start=start_nodes, saved=None):
        """save(roots) with rank r through roots[r % 3]; `checkpoint`: the checkpoint's
        directory relative to the root, which w.load reads. start(self, tmp, backing): the
        three daemons, in NODES order; saved(daemons): called once the save returned, before
        anything is synced."""
        tmp = make_tmp(self, f"ckptfs-e2e-multinode-{w.name}-")
        expected, _ = plain_tree(w, tmp, save)
        self.assertTrue(expected, "the workload wrote nothing")
        backing = os.path.join(tmp, "backing")
        os.mkdir(backing)
        daemons = start(self, tmp, backing)
        save([d.mnt for d in daemons])
        if saved:
            saved(daemons)
        for d in daemons:
            d.sync()
        self.assert_tree(expected, backing, "backing dir after `ckptfs sync` on every node",
                         w.varying)
        for node, d in zip(NODES, daemons):
            stats = d.stats()
            shared = stats.get("shared", {})
            print(f"[{w.name}] {node}: {shared}", flush=True)
            self.assertEqual(stats["flush_errors"], 0, f"{node}: {stats}")
            self.assertEqual((shared.get("commits_failed"), shared.get("pending_commits"),
                              shared.get("acks_owed")), (0, [], 0),
                             f"{node}'s shared status after sync: {shared}")
        self.assertGreaterEqual(daemons[0].stats()["shared"]["commits_published"], 1,
                                "rank 0's node published no marker")
        time.sleep(ATTR_TIMEOUT + 0.5)  # What the other nodes wrote shows on every mount.
        for node, d in zip(NODES, daemons):
            self.assert_tree(expected, d.mnt, f"the tree through {node}", w.varying)
        for root in [d.mnt for d in daemons] + [backing]:
            self.assertEqual(w.load(os.path.join(root, checkpoint)), w.expected_digest(),
                             f"the load through {root} read back different data")
        self.assert_unmounted_clean(daemons, expected, backing, w.varying)


class NodeKills(MultiNodeChecks):
    """kill -9 of a node during a sequence of DCP saves (a mixin; KILLS kill points)."""
    KILLS = 0

    def test_kill_9_of_a_node_during_saves_never_publishes_an_incomplete_checkpoint(self):
        seed = choose_seed("CKPTFS_MULTINODE_SEED", "multinode kill test")
        rng = random.Random(seed)
        tmp = make_tmp(self, "ckptfs-e2e-multinode-kill-")
        w = workloads.make("dcp", for_test=True, scale=0.25)
        ranks = len(NODES)
        # save_seconds: from the ranks' start line to the tracker, on the plain directory.
        expected, save_seconds = plain_tree(w, tmp, lambda roots: w.save(roots, ranks=ranks,
                                                                          iteration=1))
        expected = {k[len("iter_0000001/"):]: v for k, v in expected.items()
                    if k.startswith("iter_0000001/")}
        early = rng.randrange(self.KILLS)
        interrupted = []
        for k in range(self.KILLS):
            victim = rng.randrange(len(NODES))
            killed_save = rng.randint(1, SAVES)
            delay = rng.uniform(0.0, EARLY_KILL if k == early else LATEST_KILL) * save_seconds
            ctx = (f"seed {seed}, kill point {k}: {NODES[victim]} killed {delay:.2f}s into save "
                   f"{killed_save}")
            print(ctx, flush=True)
            with self.subTest(kill_point=k):
                backing = os.path.join(tmp, f"backing{k}")
                os.mkdir(backing)
                tag = f"-backing{k}"
                daemons = start_nodes(self, tmp, backing, tag=tag)
                try:
                    interrupted.append(self.kill_point(w, tmp, tag, backing, daemons, expected,
                                                       victim, killed_save, delay, ctx))
                finally:  # The next kill point mounts on the same mount points.
                    for d in daemons:
                        d.cleanup()
        self.assertIn(True, interrupted, f"seed {seed}: no kill point interrupted a save")

    def kill_point(self, w, tmp, tag, backing, daemons, expected, victim, killed_save, delay,
                   ctx):
        """One kill point (the module's docstring) on `daemons`, whose victim's entry becomes its
        restarted daemon. Returns whether the kill interrupted the save: it stopped a rank of the
        victim, or kept the save's tracker off the backing store."""
        roots = [d.mnt for d in daemons]
        ranks = len(NODES)
        node = NODES[victim]
        lost = [r for r in range(ranks) if r % len(NODES) == victim]
        published = {}  # {iteration: its tree when first seen published}, by check_backing
        written = {}  # {iteration: {file name: sha256 of what its rank wrote}}
        for it in range(1, killed_save):
            w.save(roots, ranks=ranks, iteration=it, written=written.setdefault(it, {}))
        loss = workloads.NodeLoss(grace=60)
        failures = []

        def interrupted_save():
            try:
                w.save(roots, ranks=ranks, iteration=killed_save, node_loss=loss,
                       written=written.setdefault(killed_save, {}))
            except Exception as e:  # Reported by the assertion after the join.
                failures.append(e)
        saver = threading.Thread(target=interrupted_save)
        saver.start()
        while not loss.started.wait(timeout=1):
            self.assertTrue(saver.is_alive(), f"{ctx}: the save ended before its start line: "
                            f"{failures}")
        time.sleep(delay)
        daemons[victim].kill9()
        loss.kill_ranks(lost)
        saver.join()
        self.assertEqual(failures, [], ctx)
        self.assertEqual(loss.hung, [], f"{ctx}: ranks still running 60s after the kill "
                         f"({loss.errors})")
        print(f"  {ctx}: ranks that did not complete: {loss.errors or 'none'}", flush=True)
        self.assertEqual(loss.unexplained_failures(), {},
                         f"{ctx}: ranks of live nodes failed, not for the loss of {node}")

        live = [d for i, d in enumerate(daemons) if i != victim]
        time.sleep(2 * MEMBER_TIMEOUT_MS / 1000)  # The live members judge the victim dead.
        self.check_syncs(live, node, ctx)
        self.check_backing(w, backing, expected, killed_save, published, written, ctx)
        tracker = os.path.join(backing, workloads.TRACKER)
        interrupted = (any(r in loss.errors for r in lost)
                       or read_text(tracker) != str(killed_save))
        print(f"  {ctx}: the kill {'interrupted' if interrupted else 'came after'} the save",
              flush=True)

        # The live members save once more, through their mounts only, and that save commits.
        final = killed_save + 1
        w.save([d.mnt for d in live], ranks=ranks, iteration=final,
               written=written.setdefault(final, {}))
        for d in live:  # The newest markers committed: nothing failed is left to report.
            d.sync()
        wait_for(lambda: read_text(tracker) == str(final), PUBLISH_TIMEOUT,
                 lambda: f"{ctx}: the tracker of the live members' save {final} (it holds "
                         f"{read_text(tracker)!r})")
        self.assertIn(final, self.check_backing(w, backing, expected, killed_save, published, written,
                                                ctx))

        # The victim's node comes back: the next mount of its mount point finds the dead
        # daemon's cache memory file and publishes what it had sealed before it mounts.
        memory = [p for p in cache_memory_files(backing) if p.endswith("-" + node)]
        self.assertEqual(len(memory), 1, f"{ctx}: {node}'s cache memory file is not in "
                         f"{cache_memory_files(backing)}")
        dead = daemons[victim]
        daemons[victim] = start_node(self, tmp, backing, node, tag=tag + "-restart")
        self.assertIn("recovered what the earlier mount left", daemons[victim].output(),
                      f"{ctx}: {node} mounted again without recovering the dead mount's memory")
        for line in daemons[victim].output().splitlines():
            if "recovered what was not yet durable" in line or "open for writing" in line:
                print(f"  {ctx}: {node} restarted: {line.split('] ', 3)[-1]}", flush=True)
        for d in daemons:
            d.sync()
        # A tracker the dead mount had sealed is never published over the live members' newer
        # one; a .metadata it had sealed commits now (its name was free).
        self.check_backing(w, backing, expected, killed_save, published, written,
                           ctx + " (after the restart)")
        self.assertEqual(read_text(tracker), str(final),
                         f"{ctx}: the restarted {node} published its older tracker over the "
                         "live members' newer one")
        # What the victim's ranks that completed had closed is there: their files, and with
        # rank 0's .metadata the checkpoint.
        closed = [f for f in expected for r in lost
                  if r not in loss.errors and re.fullmatch(rf"__{r}_\d+\.distcp", f)]
        checkpoint = os.path.join(backing, f"iter_{killed_save:07d}")
        self.assertEqual([f for f in closed if not os.path.exists(os.path.join(checkpoint, f))],
                         [], f"{ctx}: files {node}'s ranks closed, missing after its restart")
        if 0 in lost and 0 not in loss.errors:
            self.assertIn(killed_save, published,
                          f"{ctx}: rank 0 completed, its checkpoint unpublished after the restart")

        statuses = {name: d.unmount() for name, d in zip(NODES, daemons)}
        for name, d in [*zip(NODES, daemons), (f"{node} before the kill", dead)]:
            errors = [line for line in d.error_lines() if not commit_failed_for(node).search(line)]
            self.assertEqual(errors, [], f"{ctx}: {name} logged errors other than commits that "
                             "failed for the dead member")
        self.assertEqual(statuses, {name: 0 for name in NODES}, f"{ctx}: exit statuses")
        self.check_backing(w, backing, expected, killed_save, published, written,
                           ctx + " (after unmount)")
        return interrupted

    def check_syncs(self, live, victim, ctx):
        """`ckptfs sync` on each live member succeeds, or fails with a commit that failed for the
        dead member (a marker that waited for it is never published)."""
        for d in live:
            r = run_ckptfs(["sync", d.mnt], timeout=120)
            if r.returncode != 0:
                self.assertRegex(r.stdout + r.stderr, commit_failed_for(victim),
                                 f"{ctx}: `ckptfs sync {d.mnt}` failed, not for {victim}")
                print(f"  {ctx}: sync on {os.path.basename(d.mnt)}: {r.stderr.strip()}",
                      flush=True)

    def check_backing(self, w, backing, expected, killed_save, published, written, ctx):
        """The checkpoints on the backing store: each iter_ directory with a .metadata holds the
        plain run's files (names, modes, sizes) with the bytes their ranks wrote (`written`:
        {iteration: {file name: sha256}}, the plain run's where no rank's record is), loads, and
        once published never changes (`published`: {iteration: its tree when first seen
        published}, kept up to date here); in the others each file is absent, the plain run's or
        what its rank wrote (no torn file under a final name). The tracker names a published one.
        Returns the published iterations."""
        seen = []
        for name in sorted(os.listdir(backing)):
            if not name.startswith("iter_"):
                continue
            path = os.path.join(backing, name)
            it = int(name[len("iter_"):])
            seen.append(it)
            what = f"{ctx}: {name}" + (" (the interrupted save)" if it == killed_save else "")
            tree = snapshot(path)
            if it in published:
                self.assertEqual(published[it], tree, f"{what} changed since it was published:\n"
                                 + describe_tree_diff(published[it], tree, "then", "now"))
            elif ".metadata" in tree:
                want = self.as_ranks_wrote(expected, written.get(it, {}), what)
                got = comparable(tree, [n for n in w.varying
                                        if n in want and want[n][-1] == "(varies)"])
                if got != want:
                    self.fail(f"{what}, published, differs from what its ranks wrote:\n"
                              + describe_tree_diff(want, got, "ranks", name)
                              + "\nfiles not matching their checksum records (the bytes the "
                              f"daemon flushed): {mismatched_records(path)}")
                self.assertEqual(w.load(path), w.expected_digest(), f"{what} loads other data")
                published[it] = tree
            else:
                self.assert_no_torn_file(w, expected, written.get(it, {}), tree, what)
        self.assertEqual(sorted(set(published) - set(seen)), [],
                         f"{ctx}: published checkpoints gone")
        tracker = read_text(os.path.join(backing, workloads.TRACKER))
        if tracker is not None:
            self.assertIn(tracker, [str(it) for it in published],
                          f"{ctx}: the tracker holds {tracker!r}, not a complete checkpoint")
        print(f"  {ctx}: published {sorted(published)}, tracker {tracker}; unpublished "
              f"{sorted(set(seen) - set(published))}", flush=True)
        return sorted(published)

    @staticmethod
    def as_ranks_wrote(expected, rank_written, what):
        """The plain run's tree `expected` with the contents the ranks recorded (`rank_written`,
        {file name: sha256}; DCP's METADATA_TMP stands for the .metadata it is renamed to) in
        place of the plain run's. A rank that wrote other bytes than the plain run is the
        library's doing, not ckptfs': said, and not a failure."""
        want = dict(expected)
        for name, digest in rank_written.items():
            final = ".metadata" if name == METADATA_TMP else name
            if final in want and want[final][0] == "f":
                if want[final][-1] not in ("(varies)", digest):
                    print(f"  {what}: its rank wrote {final} other than the plain run did "
                          f"({digest[:8]}, plain {want[final][-1][:8]})", flush=True)
                want[final] = want[final][:3] + (digest,)
        return want

    def assert_no_torn_file(self, w, expected, rank_written, tree, what):
        """Each entry of the checkpoint `tree` (a snapshot) is the plain run's of its name or
        what its rank wrote; DCP's METADATA_TMP compares as the .metadata it is renamed to."""
        got = comparable({".metadata" if k == METADATA_TMP else k: v for k, v in tree.items()},
                         w.varying)
        wrote = comparable(self.as_ranks_wrote(expected, rank_written, what), w.varying)
        torn = {k: v for k, v in got.items() if v not in (expected.get(k), wrote.get(k))}
        self.assertEqual(torn, {}, f"{what}, not published, holds what the plain run does not:\n"
                         + describe_tree_diff({k: expected[k] for k in torn if k in expected},
                                              torn, "plain", "backing"))


class MultiNodeTest(ThreeNodeSaves, NodeKills, unittest.TestCase):
    KILLS = DEFAULT_KILLS

    def test_a_dcp_save_from_three_nodes_reaches_the_backing_store_as_on_a_plain_dir(self):
        w = workloads.make("dcp", for_test=True)
        self.check_three_node_save(w, lambda roots: w.save(roots, ranks=len(NODES)), "")

    def test_a_megatron_save_from_three_nodes_reaches_the_backing_store_as_on_a_plain_dir(self):
        w = workloads.make("mcore_torch_dist", for_test=True, scale=0.5, dp=2)
        self.check_three_node_save(w, lambda roots: w.save(roots, iteration=1), "iter_0000001")

    def test_a_stopped_member_holds_the_marker_back_and_the_others_keep_taking_writes(self):
        # Longer than the other tests' timeout: the member stays stopped for most of it, and a
        # member stopped longer is judged dead (its commit then fails instead).
        member_timeout_ms = 4000
        stopped_for = 0.75 * member_timeout_ms / 1000
        tmp = make_tmp(self, "ckptfs-e2e-multinode-stop-")
        backing = os.path.join(tmp, "backing")
        os.mkdir(backing)
        daemons = start_nodes(self, tmp, backing, member_timeout_ms)
        checkpoint = "iter_0000001"
        os.mkdir(daemons[0].path(checkpoint))
        # The ranks' files, one per node, closed after an fsync as DCP's writers do.
        for r, d in enumerate(daemons):
            write_file(d.path(checkpoint, f"__{r}_0.distcp"),
                       workloads.pool_bytes(f"r{r}", 4 << 20), fsync=True)
        stopped = daemons[1]
        self.addCleanup(resume, stopped)  # Runs before its unmount.
        os.kill(stopped.worker_pid(), signal.SIGSTOP)
        t0 = time.monotonic()
        returned = []

        def writes():
            write_file(daemons[0].path(checkpoint, ".metadata"), b"rank 0's marker")
            for node in (0, 2):
                write_file(daemons[node].path(checkpoint, f"after_{node}"), b"x" * 65536)
                returned.append(NODES[node])
        writer = threading.Thread(target=writes, daemon=True)
        writer.start()
        marker = os.path.join(backing, checkpoint, ".metadata")
        while time.monotonic() - t0 < stopped_for:
            self.assertFalse(os.path.exists(marker),
                             f"the marker was published {time.monotonic() - t0:.2f}s after "
                             f"{NODES[1]} stopped")
            time.sleep(0.02)
        self.assertEqual(returned, [NODES[0], NODES[2]],
                         f"writes through the others had not returned {stopped_for}s after "
                         f"{NODES[1]} stopped")
        resume(stopped)
        writer.join()
        wait_for(lambda: os.path.exists(marker), PUBLISH_TIMEOUT,
                 lambda: "the marker after the stopped member resumed")
        for d in daemons:
            d.sync()
        for node, d in zip(NODES, daemons):
            self.assertEqual(d.error_lines(), [], f"{node} logged errors")
            self.assertEqual(d.unmount(), 0, f"{node}'s exit status\n" + d.output()[-3000:])
        self.assertEqual(sorted(os.listdir(os.path.join(backing, checkpoint))),
                         [".metadata", "__0_0.distcp", "__1_0.distcp", "__2_0.distcp", "after_0",
                          "after_2"])
        self.assert_no_shared_leftovers(backing)


    def start_nodes_holding_n1(self, tag):
        """The three nodes under the default options but n1's flush_delay, which keeps what it
        closed in memory until a commit asks for it, and a member_timeout longer than a test's
        stop of n1 (n0 never judges it meanwhile); the checkpoint's directory made through n0.
        Returns the backing directory, the daemons and the checkpoint's name."""
        tmp = make_tmp(self, f"ckptfs-e2e-multinode-{tag}-")
        backing = os.path.join(tmp, "backing")
        os.mkdir(backing)
        daemons = [start_node(self, tmp, backing, node, member_timeout_ms=10000,
                              options=("flush_delay=3600s",) if node == "n1" else ())
                   for node in NODES]
        checkpoint = "iter_0000001"
        os.mkdir(daemons[0].path(checkpoint))
        return backing, daemons, checkpoint

    def wait_for_n0s_marker(self, daemons, marker):
        """`ckptfs sync` of n0 succeeds (its commit did), and `marker` reaches the backing store."""
        self.assertEqual(run_ckptfs(["sync", daemons[0].mnt], timeout=PUBLISH_TIMEOUT + 30)
                         .returncode, 0, "the commit of the marker failed")
        deadline = time.monotonic() + PUBLISH_TIMEOUT
        while not os.path.exists(marker):
            self.assertLess(time.monotonic(), deadline, "the marker was never published")
            time.sleep(0.02)

    def test_a_worker_killed_on_one_node_never_lets_anothers_marker_out_before_its_data(self):
        # Under the default options but n1's flush_delay (start_nodes_holding_n1). n0's commit
        # of the marker is posted while n1 has no worker (its supervisor stopped until then): it
        # awaits the killed worker, for which the worker that takes over its state acknowledges
        # once that state is durable. The kernel releases a closed file's handle after close()
        # returns, when it likes: here after the takeover (a second descriptor keeps it).
        backing, daemons, checkpoint = self.start_nodes_holding_n1("worker")
        data = workloads.pool_bytes("victim's shard", 64 << 20)
        victim = daemons[1]
        fd = os.open(victim.path(checkpoint, "__1_0.distcp"), os.O_WRONLY | os.O_CREAT, 0o644)
        kept = None
        stopped = False
        marker = os.path.join(backing, checkpoint, ".metadata")
        shard = os.path.join(backing, checkpoint, "__1_0.distcp")
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            kept = os.dup(fd)
            os.close(fd)
            old = victim.worker_pid()
            # No child process until SIGCONT: closing the descriptors it inherits waits on n1.
            os.kill(victim.pid, signal.SIGSTOP)
            stopped = True
            os.kill(old, signal.SIGKILL)
            self.assertFalse(os.path.exists(shard), "the kill came after the shard was flushed")
            write_file(daemons[0].path(checkpoint, ".metadata"), b"rank 0's marker")
            wait_for(lambda: any(NODES[1] in c["waiting_for"]
                                 for c in daemons[0].stats()["shared"]["pending_commits"]),
                     PUBLISH_TIMEOUT, lambda: f"n0's commit awaiting {NODES[1]}")
            os.kill(victim.pid, signal.SIGCONT)
            stopped = False
            wait_for(lambda: victim.worker_pid() != old, 30, lambda: f"a new worker on {NODES[1]}")
        finally:
            if stopped:
                os.kill(victim.pid, signal.SIGCONT)
            os.close(kept if kept is not None else fd)
        self.wait_for_n0s_marker(daemons, marker)
        logs = "".join(f"\n--- {node}'s log:\n" + d.output()[-4000:]
                       for node, d in zip(NODES, daemons))
        self.assertTrue(os.path.exists(shard),
                        f"the marker was published before {NODES[1]}'s shard was{logs}")
        with open(shard, "rb") as f:
            self.assertEqual(f.read(), data, f"the marker was published before {NODES[1]}'s data")
        self.assertEqual(victim.stats()["worker"]["crashes"], 1)
        for node, d in zip(NODES, daemons):
            errors = [l for l in d.error_lines()
                      if not (d is victim and "died" in l)]
            self.assertEqual(errors, [], f"{node} logged errors")
            self.assertEqual(d.unmount(), 0, f"{node}'s exit status\n" + d.output()[-3000:])
        self.assert_no_shared_leftovers(backing)


    def test_a_worker_upgraded_under_a_commit_acknowledges_for_the_one_it_replaced(self):
        # Under the default options but n1's flush_delay (start_nodes_holding_n1). n0's commit
        # of the marker awaits n1, which cannot leave its acknowledgement (the request's
        # directory immutable); n1's worker is replaced by `ckptfs upgrade` meanwhile. The next
        # worker takes the member's place: the commit goes on, and the marker is published once
        # n1's data is durable.
        backing, daemons, checkpoint = self.start_nodes_holding_n1("upgrade")
        victim = daemons[1]
        data = workloads.pool_bytes("upgraded node's shard", 32 << 20)
        write_file(victim.path(checkpoint, "__1_0.distcp"), data)
        old = victim.worker_pid()
        os.kill(old, signal.SIGSTOP)  # Until its acknowledgement cannot land.
        try:
            write_file(daemons[0].path(checkpoint, ".metadata"), b"rank 0's marker")
            pending = []
            def awaiting_n1():
                pending[:] = [c["id"] for c in daemons[0].stats()["shared"]["pending_commits"]
                              if NODES[1] in c["waiting_for"]]
                return pending
            wait_for(awaiting_n1, PUBLISH_TIMEOUT, lambda: f"n0's commit awaiting {NODES[1]}")
            request = os.path.join(backing, ".ckptfs", "shared", "commits", pending[0])
            chattr("+i", request)
            self.addCleanup(chattr, "-i", request, check=False)
        finally:
            os.kill(old, signal.SIGCONT)
        wait_for(lambda: victim.stats()["shared"]["acks_owed"] > 0, PUBLISH_TIMEOUT,
                 lambda: f"{NODES[1]} seeing the commit of the marker")
        upgrade = run_ckptfs(["upgrade", victim.mnt, "--timeout", "60"], timeout=120)
        self.assertEqual(upgrade.returncode, 0, upgrade.stderr)
        self.assertNotEqual(victim.worker_pid(), old)
        chattr("-i", request)
        self.wait_for_n0s_marker(daemons, os.path.join(backing, checkpoint, ".metadata"))
        with open(os.path.join(backing, checkpoint, "__1_0.distcp"), "rb") as f:
            self.assertEqual(f.read(), data, f"the marker was published before {NODES[1]}'s data")
        self.assertEqual(victim.stats()["worker"]["handoffs"], 1)
        for node, d in zip(NODES, daemons):
            self.assertEqual(d.error_lines(), [], f"{node} logged errors")
            self.assertEqual(d.unmount(), 0, f"{node}'s exit status\n" + d.output()[-3000:])
        self.assert_no_shared_leftovers(backing)

    def test_a_member_dropped_while_alive_rejoins_and_the_next_marker_waits_for_its_data(self):
        # Under the default options but n2's flush_delay, which keeps its shard in memory unless a
        # commit asks for it. n2's member file is replaced by a directory for 1.5 member_timeout
        # (as a store that stalls its renames): n2 cannot beat, the others judge it dead. Then its
        # last beat comes back (the stalled rename landing), and n2 is alive all along.
        tmp = make_tmp(self, "ckptfs-e2e-multinode-dropped-")
        backing = os.path.join(tmp, "backing")
        os.mkdir(backing)
        daemons = [start_node(self, tmp, backing, node,
                              options=("flush_delay=5s",) if node == "n2" else ())
                   for node in NODES]
        def n2_live_at_n0():
            return any(m["node"] == "n2" for m in daemons[0].stats()["shared"]["members"])
        wait_for(n2_live_at_n0, 30, lambda: "n0 seeing n2")
        members = os.path.join(backing, ".ckptfs", "shared", "members")
        member = os.path.join(members, "n2")
        with open(member, "rb") as f:
            landing = f.read()
        blocker = os.path.join(members, ".blocker")
        os.mkdir(blocker)
        write_file(os.path.join(blocker, "x"), b"")
        while True:  # n2's beats keep renaming its file into place.
            os.unlink(member)
            try:
                os.rename(blocker, member)
                break
            except OSError:
                continue
        time.sleep(1.5 * MEMBER_TIMEOUT_MS / 1000)
        self.assertRegex(daemons[0].output(), r"member n2 .*judged dead", "n0 never judged n2")
        shutil.rmtree(member)
        write_file(os.path.join(members, ".landing"), landing)
        os.rename(os.path.join(members, ".landing"), member)
        try:  # Asserted after the marker: the old binary fails there, the point of the test.
            wait_for(n2_live_at_n0, 5 * MEMBER_TIMEOUT_MS / 1000, lambda: "n2 live at n0")
            rejoined = True
        except AssertionError:
            rejoined = False
        checkpoint = "iter_0000001"
        os.mkdir(daemons[0].path(checkpoint))
        data = workloads.pool_bytes("n2's shard", 16 << 20)
        write_file(daemons[2].path(checkpoint, "__2_0.distcp"), data)
        write_file(daemons[0].path(checkpoint, ".metadata"), b"rank 0's marker")
        marker = os.path.join(backing, checkpoint, ".metadata")
        wait_for(lambda: os.path.exists(marker), PUBLISH_TIMEOUT,
                 lambda: "the marker after n2 came back")
        self.assertEqual(read_or_none(os.path.join(backing, checkpoint, "__2_0.distcp")), data,
                         "the marker was published before the data of n2, alive but dropped")
        self.assertTrue(rejoined, "n0 never saw n2 live again")
        for node, d in zip(NODES, daemons):
            d.sync()
            self.assertEqual(d.error_lines(), [], f"{node} logged errors")
            self.assertEqual(d.unmount(), 0, f"{node}'s exit status\n" + d.output()[-3000:])
        self.assert_no_shared_leftovers(backing)


class MultiNodeKillLongTest(NodeKills, unittest.TestCase):
    """The long variant (CKPTFS_LONG_TESTS=1): LONG_KILLS kill points."""
    KILLS = LONG_KILLS

    def setUp(self):
        require_long()


if __name__ == "__main__":
    unittest.main(verbosity=2)
