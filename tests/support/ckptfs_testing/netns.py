"""Nodes as network namespaces: each a namespace with one veth pair to a bridge of the test's own,
and an address of its own in 10.251.X.0/24 (X chosen free on this machine). Everything is
removed at cleanup, also when the set-up fails half-way. Needs root and iproute2 (and nftables
for shape()).

    net = NetworkNodes(test_case, 3)   # registers its cleanup
    net.address(0)                     # "10.251.X.1"
    net.wrapper(0)                     # a command prefix running a program in node 0's namespace
    net.shape(0, "100mbit", 1)         # node 0's side of its link slow and lossy
    net.set_link(0, up=False)          # node 0 cut off the network (up=True: back on)
"""

import os
import random
import subprocess
import unittest


def _ip(*args, check=True):
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def require_network_namespaces():
    if os.geteuid() != 0:
        raise unittest.SkipTest("network namespaces need root")
    if subprocess.run(["which", "ip", "nsenter"], capture_output=True).returncode != 0:
        raise unittest.SkipTest("iproute2's ip and util-linux's nsenter are needed")


def _subnets_in_use():
    out = _ip("-4", "-o", "addr", "show").stdout
    return {line.split()[3].rsplit(".", 1)[0] for line in out.splitlines() if " inet " in line}


def _names_in_use():
    """Links and namespaces of this host: those of an earlier NetworkNodes may outlive its
    removal for a moment (the kernel destroys a namespace, and its veth ends, asynchronously)."""
    links = [line.split(":")[1].strip().split("@")[0]
             for line in _ip("-o", "link", "show").stdout.splitlines()]
    namespaces = [line.split()[0] for line in _ip("netns", "list").stdout.splitlines() if line]
    return set(links) | set(namespaces)


# Successive NetworkNodes of one process draw different subnets.
_draw = random.Random(os.getpid())


class NetworkNodes:
    def __init__(self, tc, count):
        require_network_namespaces()
        used, names = _subnets_in_use(), _names_in_use()
        ours = lambda x: (f"ckrb{x}", f"ckr{x}h", f"ckr{x}n", f"ckptfs-r{x}-")
        free = [x for x in range(1, 255) if f"10.251.{x}" not in used
                and not any(n.startswith(ours(x)) for n in names)]
        if not free:
            raise RuntimeError("no free 10.251.X.0/24 subnet on this machine")
        self.x = _draw.choice(free)
        self.bridge = f"ckrb{self.x}"
        self.namespaces = [f"ckptfs-r{self.x}-{i}" for i in range(count)]
        tc.addCleanup(self.remove)
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("link", "set", self.bridge, "up")
        for i, ns in enumerate(self.namespaces):
            host, inner = f"ckr{self.x}h{i}", f"ckr{self.x}n{i}"
            _ip("netns", "add", ns)
            _ip("link", "add", host, "type", "veth", "peer", "name", inner, "netns", ns)
            _ip("link", "set", host, "master", self.bridge, "up")
            _ip("-n", ns, "addr", "add", f"{self.address(i)}/24", "dev", inner)
            _ip("-n", ns, "link", "set", inner, "up")
            _ip("-n", ns, "link", "set", "lo", "up")

    def address(self, i):
        return f"10.251.{self.x}.{i + 1}"

    def set_link(self, i, up):
        """Sets node i's link up or down (down: the node is cut off the network)."""
        _ip("-n", self.namespaces[i], "link", "set", f"ckr{self.x}n{i}", "up" if up else "down")

    def wrapper(self, i):
        """Runs the command after it in node i's network namespace only (the mount namespace
        stays the test's, so a FUSE mount made there is seen by the test)."""
        return ["nsenter", f"--net=/run/netns/{self.namespaces[i]}", "--"]

    def shape(self, i, rate="100mbit", loss_percent=1):
        """Makes node i's link slow and lossy on its side, as a congested network is: what it
        sends is limited to `rate` by tc's token bucket filter (queued up to 100 ms), and
        `loss_percent` of its packets are dropped at random by nftables (this machine's kernel
        has no tc netem)."""
        run = ["ip", "netns", "exec", self.namespaces[i]]
        subprocess.run(run + ["tc", "qdisc", "add", "dev", f"ckr{self.x}n{i}", "root", "tbf",
                              "rate", rate, "burst", "64kb", "latency", "100ms"],
                       capture_output=True, text=True, check=True)
        for rule in (["add", "table", "inet", "ckptfs_loss"],
                     ["add", "chain", "inet", "ckptfs_loss", "out",
                      "{ type filter hook output priority 0; }"],
                     ["add", "rule", "inet", "ckptfs_loss", "out", "oifname",
                      f"ckr{self.x}n{i}", "numgen", "random", "mod", "100", "<",
                      str(loss_percent), "drop"]):
            subprocess.run(run + ["nft"] + rule, capture_output=True, text=True, check=True)

    def remove(self):
        """Removes the namespaces (their veth pairs go with them) and the bridge."""
        for ns in self.namespaces:
            _ip("netns", "del", ns, check=False)
        _ip("link", "del", self.bridge, check=False)
