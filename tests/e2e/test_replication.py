"""Replicas in partners' memory (-o shared,replicas=1) between nodes that talk over a network:
each node is a network namespace joined by a veth pair to a bridge of the test's own
(ckptfs_testing.netns), with a ckptfs daemon `-o shared,replicas=1` bound to its address, all
over ONE backing directory, the group secret in a root-only file.

- Each node's sealed file is held in its partner's memory (the next node in the ring of names)
  before it is durable (flush_delay keeps it from the backing store meanwhile): `ckptfs sync
  --replicated` returns, the owner's replicated level has reached its sealed one, the partner
  holds its bytes.
- A real DCP save through the three mounts (rank r through node r) reaches the backing store as
  on a plain directory; every node received its owner's versions, and once everything is durable
  every partner has dropped them (nothing held).
- A fourth node with another secret is refused by the node it connects to, which logs it, and
  holds nothing of it; its own mount keeps taking writes.
No daemon logs an error; every one unmounts with status 0.
- A real Megatron-core torch_dist save (rank r through node r % 3): every node's part is in its
  partner's memory once `ckptfs sync --replicated` returns on it; then, once durable, the
  backing tree is the plain run's, and the checkpoint loads equal through every mount and from
  the backing directory.
- A dead member's checkpoint completes through its partner: a real DCP save through the three
  mounts returns (no rank sees an error), the victim (n1 or n2: rank 0's n0 commits the marker)
  has seen the commit request, its data is in its partner's memory and cannot become durable
  (its staging directory is made immutable, `chattr +i`: a flush that fails, a certain window
  whatever the flush speed), then at a seeded random point its link goes down and its daemon is
  killed (kill -9; its ranks ended with the save). Its partner makes its files durable and
  acknowledges for it: the marker appears, the backing tree is the plain run's byte for byte,
  the live members log no error and unmount with status 0; the time from the death to the
  marker is printed; then the node comes back under its name (a new daemon that recovers what
  the dead one had sealed) and the tree stays the plain run's, none of the victim's files
  published again (each is still the file its partner wrote: same inode). Once with the test's options,
  once with only those the promise needs (shared, node, replicas=1, replication_secret,
  replication_address; cache_size only to fit three daemons on this machine), with the default
  member_timeout and flush_delay. And a victim
  whose link was down since before the save (nothing replicated): the commit fails as without
  replicas, the marker never appears. Seeded: CKPTFS_REPLICATION_SEED=N replays.
- The long variant (ReplicationLongTest, CKPTFS_LONG_TESTS=1): 30 node-loss points, the three
  cases above then seeded random ones.
- A mount asking for replicas without the shared mode, or with a secret others may read, or
  none, or for fsync=replicated without replicas, is refused with one line saying why, and
  leaves no mount.
"""

import glob
import os
import random
import re
import time
import unittest

from ckptfs_testing import workloads
from ckptfs_testing.ckptfs_daemon import CkptfsDaemon, mounted, run_ckptfs, wait_for
from ckptfs_testing.harness import choose_seed, require_long
from ckptfs_testing.netns import NetworkNodes
from test_multinode import (NODES, MultiNodeChecks, ThreeNodeSaves, chattr, commit_failed_for,
                            make_tmp, plain_tree)

MEMBER_TIMEOUT_MS = 2000
# Long enough that a version sealed by the test is replicated well before it is flushed.
FLUSH_DELAY = "20s"
# Bounds on waiting for the network and the daemons: a hang, not a speed.
TIMEOUT = 60.0
# Kill points: seconds after the victim saw the commit request and its data was replicated.
KILL_DELAY = (0.0, 1.5)


def write_secret(path, secret):
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
        f.write(secret + "\n")


class ReplicationNodes(ThreeNodeSaves):
    """Nodes with replicas=1 over the test's network (a mixin)."""

    def start_node(self, tmp, backing, net, i, node, secret_file, promise_only=False, tag=""):
        """promise_only: only the options a dead member's completion needs (and a cache that
        fits three daemons on this machine)."""
        mnt = os.path.join(tmp, node)
        os.makedirs(mnt, exist_ok=True)
        options = ["cache_size=512M", "shared", f"node={node}", "replicas=1",
                   f"replication_secret={secret_file}", f"replication_address={net.address(i)}"]
        if not promise_only:
            options += [f"member_timeout={MEMBER_TIMEOUT_MS}", f"flush_delay={FLUSH_DELAY}"]
        d = CkptfsDaemon(backing, mnt, options, log_file=os.path.join(tmp, f"{node}{tag}.log"),
                         wrapper=net.wrapper(i))
        self.addCleanup(d.cleanup)
        d.start()
        return d

    @staticmethod
    def replication(d):
        return d.stats()["replication"]

    def wait_connected(self, d, partner):
        wait_for(lambda: [(p["node"], p["connected"]) for p in self.replication(d)["partners"]]
                 == [(partner, True)], TIMEOUT, f"{d.mnt} connected to its partner {partner}")


class NodeLoss(ReplicationNodes):
    """A node killed after the save returned (a mixin): the three cases, then random ones up to
    LOSS_POINTS."""
    LOSS_POINTS = 3

    def test_a_dead_members_checkpoint_completes_through_its_partner_unless_it_was_not_replicated(
            self):
        seed = choose_seed("CKPTFS_REPLICATION_SEED", "replication node-loss test")
        rng = random.Random(seed)
        tmp = make_tmp(self, "ckptfs-e2e-replication-loss-")
        w = workloads.make("dcp", for_test=True)
        expected, _ = plain_tree(w, tmp, lambda roots: w.save(roots, ranks=len(NODES)))
        self.assertTrue(expected, "the workload wrote nothing")
        net = NetworkNodes(self, len(NODES))
        secret = os.path.join(tmp, "replication.key")
        write_secret(secret, "the group secret of this test's nodes")
        cases = [("replicated", False, True),
                 ("replicated, the promise's options only", True, True),
                 ("not replicated", False, False)]
        cases += [rng.choice(cases) for _ in range(self.LOSS_POINTS - len(cases))]
        for k, (what, promise_only, replicated) in enumerate(cases):
            # n0 holds rank 0, which commits the marker (DCP's .metadata.tmp renamed to
            # .metadata): its partner n1 publishes it when n0 is the one that dies.
            victim = rng.choice([0, 1, 2])
            delay = rng.uniform(*KILL_DELAY)
            after = "its save returned" if victim == 0 else "its sight"
            ctx = (f"seed {seed}, point {k}, {what}: {NODES[victim]} killed {delay:.2f}s after "
                   f"{after}")
            print(ctx, flush=True)
            with self.subTest(case=k, kind=what):
                backing = os.path.join(tmp, f"backing{k}")
                os.mkdir(backing)
                daemons = []
                try:
                    self.node_loss(w, tmp, backing, net, secret, expected, victim, delay,
                                   promise_only, replicated, f"-{k}", ctx, daemons)
                finally:  # The next case mounts on the same mount points.
                    for d in daemons:
                        d.cleanup()

    def node_loss(self, w, tmp, backing, net, secret, expected, victim, delay, promise_only,
                  replicated, tag, ctx, daemons):
        """One case of the test above, on a fresh backing directory and fresh daemons (appended
        to `daemons`)."""
        node = NODES[victim]
        partner = NODES[(victim + 1) % len(NODES)]
        for i in range(len(NODES)):  # An earlier case's victim may have been left cut off.
            net.set_link(i, up=True)
        for i, n in enumerate(NODES):
            daemons.append(self.start_node(tmp, backing, net, i, n, secret, promise_only, tag))
        for i, d in enumerate(daemons):
            self.wait_connected(d, NODES[(i + 1) % len(NODES)])
        live = [d for i, d in enumerate(daemons) if i != victim]
        staging = os.path.join(backing, ".ckptfs", "staging", node)
        self.assertTrue(os.path.isdir(staging), f"{ctx}: no staging directory {staging}")
        chattr("+i", staging)
        self.addCleanup(chattr, "-i", staging, check=False)
        if not replicated:
            net.set_link(victim, up=False)

        # Raises when a rank fails: the trainers see no error.
        w.save([d.mnt for d in daemons], ranks=len(NODES))
        committer = victim == 0
        if not committer:
            sights = os.path.join(backing, ".ckptfs", "shared", "commits", "*", f"seen.{node}")
            wait_for(lambda: glob.glob(sights), TIMEOUT, f"{ctx}: {node}'s sight of the commit")
        # The committer posts no commit: its data before the marker never becomes durable.
        if replicated:
            synced = run_ckptfs(["sync", "--replicated", daemons[victim].mnt], timeout=TIMEOUT)
            self.assertEqual(synced.returncode, 0, f"{ctx}: {synced.stderr}")
        own = [f for f in expected if re.fullmatch(rf"__{victim}_\d+\.distcp", f)]
        self.assertTrue(own, f"{ctx}: rank {victim} wrote no file")
        time.sleep(delay)
        marker = os.path.join(backing, ".metadata")
        self.assertEqual([f for f in own if os.path.exists(os.path.join(backing, f))], [],
                         f"{ctx}: {node}'s files were durable before the kill")
        self.assertFalse(os.path.exists(marker), f"{ctx}: the marker came before {node}'s data")
        net.set_link(victim, up=False)
        killed_at = time.monotonic()
        daemons[victim].kill9()

        if replicated:
            wait_for(lambda: os.path.exists(marker), TIMEOUT,
                     f"{ctx}: the marker, through {node}'s partner {partner}")
            print(f"  {ctx}: from the death to the marker: {time.monotonic() - killed_at:.2f} s",
                  flush=True)
            for d in live:
                d.sync()
            self.assert_tree(expected, backing, f"{ctx}: backing dir once the marker is there",
                             w.varying)
            r = self.replication(daemons[NODES.index(partner)])
            self.assertGreaterEqual(r["completed_for_dead"], len(own), f"{ctx}: {r}")
            if committer:
                self.assertIn(f"replication: published the commit marker .metadata of dead node "
                              f"{node} (seq", daemons[NODES.index(partner)].output(), ctx)
                self.assertIn(", renamed from .metadata.tmp)",
                              daemons[NODES.index(partner)].output(), ctx)
            else:
                self.assertIn(f"completed the part of dead node {node} in commit",
                              daemons[NODES.index(partner)].output(), ctx)
            for d in live:
                self.assertEqual(d.stats()["shared"]["commits_failed"], 0, f"{ctx}: {d.mnt}")
            # The node comes back under its name: it recovers what its dead daemon had sealed
            # and rejoins; the tree stays the plain run's, and nothing its partner published for
            # it is published again (each of its files is still the one the partner wrote).
            published = {f: os.stat(os.path.join(backing, f)).st_ino for f in own}
            chattr("-i", staging)
            net.set_link(victim, up=True)
            daemons[victim] = self.start_node(tmp, backing, net, victim, node, secret,
                                              promise_only, tag + "-restart")
            self.assertIn("recovered what the earlier mount left", daemons[victim].output(), ctx)
            self.assertRegex(daemons[victim].output(),
                             r"recovery: \d+ file versions of run [0-9a-f]{16} were made durable "
                             r"by a partner while this node was dead", ctx)
            live.append(daemons[victim])
            for d in live:
                d.sync()
            self.assert_tree(expected, backing, f"{ctx}: backing dir after {node} came back",
                             w.varying)
            self.assertEqual({f: os.stat(os.path.join(backing, f)).st_ino for f in own},
                             published, f"{ctx}: {node} published again what {partner} had")
            self.assertEqual(glob.glob(os.path.join(backing, ".ckptfs", "stood-in", "*")), [],
                             f"{ctx}: the stand-in record outlived the recovery")
        else:
            if committer:
                # Nothing of n0's reached n1: no commit is posted for its marker.
                judged = re.compile(rf"member {re.escape(node)} \(host [^)]*\) "
                                    r"(stopped beating|has shown no new beat|is gone after)")
                wait_for(lambda: judged.search(daemons[NODES.index(partner)].output()), TIMEOUT,
                         f"{ctx}: {partner} judging {node} dead")
            else:
                wait_for(lambda: commit_failed_for(node).search(daemons[0].output()), TIMEOUT,
                         f"{ctx}: n0 logging the commit that failed for {node}")
            time.sleep(2 * MEMBER_TIMEOUT_MS / 1000)
            self.assertFalse(os.path.exists(marker),
                             f"{ctx}: the marker was published without {node}'s data")
            self.assertEqual([f for f in own if os.path.exists(os.path.join(backing, f))], [],
                             f"{ctx}: {node}'s files appeared though they were never replicated")
            self.assertEqual(self.replication(daemons[NODES.index(partner)])["completed_for_dead"],
                             0, ctx)
        for d in live:
            errors = [line for line in d.error_lines() if not commit_failed_for(node).search(line)]
            self.assertEqual(errors, [], f"{ctx}: {d.mnt} logged errors")
        for d in live:
            self.assertEqual(d.unmount(), 0, f"{ctx}: exit status\n" + d.output()[-3000:])
        chattr("-i", staging, check=False)
        if replicated:
            self.assert_tree(expected, backing, f"{ctx}: backing dir after unmount", w.varying)
        else:
            self.assertFalse(os.path.exists(marker), f"{ctx}: the marker after unmount")


class ReplicationTest(NodeLoss, unittest.TestCase):
    def test_replicas_reach_partners_over_the_network_and_are_dropped_once_durable(self):
        tmp = make_tmp(self, "ckptfs-e2e-replication-")
        w = workloads.make("dcp", for_test=True)
        expected, _ = plain_tree(w, tmp, lambda roots: w.save(roots, ranks=len(NODES)))
        self.assertTrue(expected, "the workload wrote nothing")
        net = NetworkNodes(self, len(NODES) + 1)
        secret = os.path.join(tmp, "replication.key")
        write_secret(secret, "the group secret of this test's nodes")
        backing = os.path.join(tmp, "backing")
        os.mkdir(backing)
        daemons = [self.start_node(tmp, backing, net, i, node, secret)
                   for i, node in enumerate(NODES)]
        partner_of = {n: NODES[(i + 1) % len(NODES)] for i, n in enumerate(NODES)}
        for node, d in zip(NODES, daemons):
            self.assertEqual(self.replication(d)["endpoint"].rsplit(":", 1)[0],
                             net.address(NODES.index(node)))
            self.wait_connected(d, partner_of[node])

        # A sealed version is in its partner's memory before it is durable.
        sizes = {}
        for i, (node, d) in enumerate(zip(NODES, daemons)):
            data = os.urandom((3 << 20) + 1000 * i)
            sizes[node] = len(data)
            with open(d.path(f"staged-{node}.bin"), "wb") as f:
                f.write(data)
        for node, d in zip(NODES, daemons):
            synced = run_ckptfs(["sync", "--replicated", d.mnt], timeout=TIMEOUT)
            self.assertEqual(synced.returncode, 0, synced.stderr)
            r = self.replication(d)
            self.assertGreaterEqual(r["replicated_seq"], r["sealed_seq"], f"{node}: {r}")
            self.assertLess(r["durable_seq"], r["sealed_seq"],
                            f"{node} made its file durable before the check: {r}")
            partner = daemons[NODES.index(partner_of[node])]
            held = {h["node"]: h for h in self.replication(partner)["held_for"]}
            self.assertIn(node, held, f"{partner_of[node]} holds nothing of {node}")
            self.assertEqual(held[node]["bytes"], sizes[node])
            self.assertFalse(os.path.exists(os.path.join(backing, f"staged-{node}.bin")),
                             "flushed before its flush_delay")

        # A real DCP save through the three mounts, then everything durable.
        w.save([d.mnt for d in daemons], ranks=len(NODES))
        for d in daemons:
            d.sync()
        for node in NODES:
            os.unlink(os.path.join(backing, f"staged-{node}.bin"))
        self.assert_tree(expected, backing, "backing dir after `ckptfs sync` on every node",
                         w.varying)
        for node, d in zip(NODES, daemons):
            # Once durable, the partner drops every replica it was sent.
            wait_for(lambda: self.replication(d)["held_replicas"] == 0, TIMEOUT,
                     f"{node} dropped its partner's durable replicas")
            r = self.replication(d)
            print(f"{node}: {r}", flush=True)
            self.assertEqual(r["held_bytes"], 0)
            self.assertGreaterEqual(r["received_replicas"], 2, f"{node}: {r}")
            self.assertEqual(r["dropped_replicas"], r["received_replicas"], f"{node}: {r}")
            self.assertEqual(r["connections_refused"], 0, f"{node}: {r}")
            [p] = r["partners"]
            self.assertGreaterEqual(p["replicas_stored"], 2, f"{node}: {r}")
            self.assertEqual(p["replicas_unsendable"], 0, f"{node}: {r}")
            self.assertEqual(r["replicated_seq"], r["sealed_seq"], f"{node}: {r}")

        # A member with another secret: n3's partner is n0 (the ring wraps), which refuses it.
        other = os.path.join(tmp, "other.key")
        write_secret(other, "a secret of some other group entirely")
        intruder = self.start_node(tmp, backing, net, 3, "n3", other)
        refused = re.compile(rf"replication: refused a connection from "
                             rf"{re.escape(net.address(3))}:\d+: node n3 did not prove it holds "
                             rf"the secret")
        wait_for(lambda: refused.search(daemons[0].output()), TIMEOUT,
                 "n0 logging n3's refusal")
        self.assertGreaterEqual(self.replication(daemons[0])["connections_refused"], 1)
        with open(intruder.path("intruder.bin"), "wb") as f:
            f.write(b"x" * 4096)
        self.assertEqual(self.replication(daemons[0])["held_for"], [])
        [p] = self.replication(intruder)["partners"]
        self.assertEqual((p["node"], p["connected"], p["replicas_stored"]), ("n0", False, 0))
        intruder.sync()
        self.assertEqual(intruder.unmount(), 0, intruder.output()[-3000:])
        os.unlink(os.path.join(backing, "intruder.bin"))

        self.assert_unmounted_clean(daemons, expected, backing, w.varying)
        self.assertFalse(any(mounted(d.mnt) for d in daemons))

    def test_a_megatron_save_through_three_nodes_with_replicas_reaches_the_backing_store_as_plain(
            self):
        w = workloads.make("mcore_torch_dist", for_test=True, scale=0.5, dp=2)
        net = NetworkNodes(self, len(NODES))

        def start(tc, tmp, backing):
            secret = os.path.join(tmp, "replication.key")
            write_secret(secret, "the group secret of this test's nodes")
            daemons = [self.start_node(tmp, backing, net, i, node, secret)
                       for i, node in enumerate(NODES)]
            for i, d in enumerate(daemons):
                self.wait_connected(d, NODES[(i + 1) % len(NODES)])
            return daemons

        def saved(daemons):
            """Every node's part reached its partner's memory."""
            for node, d in zip(NODES, daemons):
                synced = run_ckptfs(["sync", "--replicated", d.mnt], timeout=TIMEOUT)
                self.assertEqual(synced.returncode, 0, f"{node}: {synced.stderr}")
                r = self.replication(d)
                self.assertGreaterEqual(r["replicated_seq"], r["sealed_seq"], f"{node}: {r}")
                [p] = r["partners"]
                self.assertGreaterEqual(p["replicas_stored"], 1, f"{node}: {r}")
                self.assertEqual(p["replicas_unsendable"], 0, f"{node}: {r}")

        self.check_three_node_save(w, lambda roots: w.save(roots, iteration=1), "iter_0000001",
                                   start=start, saved=saved)

    def test_a_mount_with_replicas_is_refused_without_shared_or_a_secret_only_its_owner_reads(self):
        tmp = make_tmp(self, "ckptfs-e2e-replication-refused-")
        backing, mnt = os.path.join(tmp, "backing"), os.path.join(tmp, "n0")
        os.mkdir(backing)
        os.mkdir(mnt)
        good = os.path.join(tmp, "good.key")
        write_secret(good, "the group secret of this test's nodes")
        readable = os.path.join(tmp, "readable.key")
        write_secret(readable, "the group secret of this test's nodes")
        os.chmod(readable, 0o644)
        for options, why in [
                (f"replicas=1,replication_secret={good}",
                 "replicas=1 needs -o shared"),
                (f"shared,node=n0,replicas=1,replication_secret={readable}",
                 "may be read or written by others than its owner: chmod 600 it"),
                (f"shared,node=n0,replicas=1,replication_secret={tmp}/missing.key",
                 "cannot open the replication secret"),
                ("shared,node=n0,replicas=3", "must be 0, 1 or 2"),
                ("shared,node=n0,fsync=replicated", "fsync=replicated needs -o replicas=1 or 2")]:
            r = run_ckptfs([backing, mnt, "-f", "-o", options])
            self.assertNotEqual(r.returncode, 0, options)
            self.assertIn(why, r.stderr, options)
            self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
            self.assertFalse(mounted(mnt), options)


class ReplicationLongTest(NodeLoss, unittest.TestCase):
    """The long variant (CKPTFS_LONG_TESTS=1): 30 node-loss points."""
    LOSS_POINTS = 30

    def setUp(self):
        require_long()


if __name__ == "__main__":
    unittest.main()
