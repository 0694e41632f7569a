"""ckptfs benchmark: real checkpoint save code on a plain disk directory, /dev/shm, and ckptfs.

    scripts/bench/run [--repeat 2] [--scale 1] [--only seq,zarr_dist] [--json out.json]

For every workload (ckptfs_testing.workloads, one module each: seq, small, torch_legacy,
zarr_dist, zarr_distopt, dlrover, and the real libraries' saves dcp, mcore_torch_dist,
nvrx_local, safetensors) and every
contender (plain = a directory on the backing disk, shm = /dev/shm, ckptfs = a fresh mount over a
directory on the backing disk; for dcp and mcore_torch_dist also async = the library's own async
save to the plain directory: dcp.async_save with the thread executor, Megatron's async request
on an AsyncCallsQueue) it measures, --repeat times with the contenders alternated, and reports
medians:

  save      time until the save returns (rank processes started and data generated beforehand),
            of the second checkpoint in the same place: the first one (save_first, reported) is
            saved, made durable and deleted before, as by a trainer that keeps the latest
            checkpoints; a ckptfs mount then writes into memory it has faulted in already, as a
            mount that serves a whole training job does (--no-warm-up: time the first)
  durable   plain: save + `sync -f DIR`; ckptfs: save + `ckptfs sync MNT`; async: until the
            async save completed (its fsyncs done); its save is the time the save call blocked
  CPU       from the start of the save to its durable point: the saving processes' CPU time
            (user + system; the plain directory's includes the backing filesystem's work in their
            system calls) and, for ckptfs, the daemon's (all threads); steadier than times on a
            noisy machine when judging a change
  WA        bytes written towards the backing device per logical byte saved: write_bytes -
            cancelled_write_bytes from /proc/PID/io of the workload's processes (plain) or of
            the ckptfs daemon (ckptfs; writes into FUSE do not reach a device). devWA: the
            block device's sectors-written delta over the save and sync (includes whatever else
            the machine wrote meanwhile).
  HWM       the daemon's peak resident memory (VmHWM) after the durable point
  prefault_wait  with --ckptfs-opts prefault=on: the wait, untimed, after mounting for the mount
            to fault its cache in, as a mount made when a training job starts has done by its
            first checkpoint
  load      cold: after sync, `echo 3 > /proc/sys/vm/drop_caches` and (ckptfs) a fresh mount;
            warm: the same load again right after. Loads use the workload's own loader.

multinode (bench only; not in workloads.ALL): a DCP save of 3 ranks, each through its own
mount of ONE backing directory, as on 3 nodes over a shared filesystem. Contenders: plain (the 3
ranks all write the plain directory: its save returns with every file and .metadata fsynced, so
its marker time is its save time), ckptfs1 (the 3 ranks through one mount), ckptfs3 (3 mounts,
-o shared,node=n0|n1|n2), ckptfs3r (the same with replicas=1 over loopback) and ckptfs3rf
(ckptfs3r with fsync=replicated: each fsync waits for the partner's copy). It reports the
save (until the slowest rank returned) and the marker time: from the ranks' start line until
.metadata is on the backing store under its final name (ckptfs renames it there after its
fdatasync), looked for every MARKER_POLL seconds; the shared members themselves meet every
poll_interval (--ckptfs-opts, default 100 ms); with replicas also the time until every member's
files are in its partner's memory (`ckptfs sync --replicated` on each). ckptfs3r-loss: ckptfs3r
whose n1 cannot make its part durable (its staging directory is immutable, chattr +i) and is
killed (kill -9) once that part is in its partner's memory and it saw the commit request; it
reports the time from the kill until the marker: the others judge it dead after member_timeout
(default 10 s), its partner makes its part durable, and n0 publishes the marker. No loads.

zarr_distopt (the distributed-optimizer zarr pattern alone: per rank one 200 MiB chunk filled by
60 set_coordinate_selection pieces, each of which makes zarr rewrite the whole chunk) has its own
contenders: shm, floor (the same workload on /dev/shm with zarr itself creating 1 MiB chunks:
what a fine chunk grid can reach at best) and ckptfs; plain only with --distopt-plain. Besides
the slice-by-slice load (load) it times Megatron's load, in which every piece re-reads its rank's
whole region (load_whole, one process per rank), cold and warm like the others (ckptfs remounts
after drop_caches before each cold load), in each contender's first run only and over every
--whole-region-every'th piece (default 5: 12 of 60 per rank): on shm each piece costs 2 s.

The plain and shm runs of zarr_dist and zarr_distopt (every piece rewrites the whole chunk: 10-25x
slower than ckptfs) run --slow-repeat times (default 1) instead of --repeat, without a warm-up
save: they are most of a default run's time.

--takeover (instead of the workloads): how long trainers wait while an upgrade (the control file
`ckptfs upgrade` writes) replaces the mount's worker: with nothing staged, with --takeover-gib
(default 6 x scale) written, closed and not yet flushed (flush_delay of an hour), and with as much
written to files still open (unsealed). A probe thread lists a directory of the mount every
millisecond: its longest wait is the stall a trainer sees; `upgrade s` is the whole upgrade
(sealed data is flushed first, while the mount serves); `takeover_ms` is the new worker's own
figure (from when the old one stopped answering to its first answer). --repeat runs, alternated,
medians. With --takeover-by kill the worker is killed (kill -9) instead: the next one takes over
after a crash (with -o cache_memory=shared it recovers what the dead one held, open files
included; `recovered s` is the daemon's own figure of what the recovery took, in takeover_ms).

--memory (with the workloads): two more ckptfs contenders, alternated with the others: ck_small
(the cache in shared memory of small pages: huge_pages=leave, on a kernel set as Debian's ships,
restored after its runs) and ck_private (cache_memory=private); a table compares their save, first
save, durable time and daemon CPU with the default mount's (shared memory with huge pages).

--baseline CKPTFS (with the workloads): one more contender, base, a default mount of another
ckptfs binary (the previous main), alternated with the others; the same table compares it with
the binary under test (save/ckptfs, CPU/ckptfs): the A/B a change's "no regression" needs.
With --replication: the same replication with that binary (contender base), alternated.

--fuse-ring (instead of the workloads): the warm load of --small-count small files (default 5,000,
each open() of Python costs 3 requests: OPEN, IOCTL from isatty, RELEASE) through one
binary with its requests over /dev/fuse (-o io_uring=off) and over FUSE over io_uring
(-o io_uring=on: one daemon thread pinned to each CPU serves the requests made on that CPU); the
fuse module's enable_uring is turned on for the run and back after. Alternated, --repeat runs,
medians: time, daemon CPU per file, how often the loader was moved to another CPU per file
(whether the reply woke it on the CPU it asked from), requests served over the ring per file.

--tensor-view (instead of the workloads): reading tensors through a checkpoint's tensor view
(`.tensors`) against reading the same bytes straight from the .distcp files on the backing
store. A DCP checkpoint of --view-gib (default 1 x scale) GiB in 64 MiB float32 tensors is saved
to the backing directory (dcp.save, one rank), then mounted. Contenders, alternated, --repeat
runs, medians: direct (the storage range of every tensor, found beforehand from .metadata and
each shard's zip, read from the .distcp files), view (every chunk file of the view read), both
in 1 MiB reads into one buffer (as cat does), and zarr (zarr.open(...)[...] of every tensor
through the view: one read of each whole chunk). Cold: caches dropped before each read-through; warm: the same again right after.

--verify (instead of the workloads): `ckptfs verify` of a checkpoint of --verify-gib (default
4 x scale) GiB in 8 files, written through a mount, against `cat FILES > /dev/null`, on the backing
directory and through a mount, cold (the files' own pages dropped with fadvise DONTNEED: the
rest of the page cache is left alone) and warm; alternated, --repeat runs, medians, and per run
verify's speed as cat's (spread: min-max). Then what -o verify=markers adds to the publication of
a marker closed after the files (from its close until it is on the backing store under its name),
fresh mounts with verify=off and verify=markers alternated (and with --verify-baseline CKPTFS,
verify=markers of that binary too, with the added time as the baseline's per run), beside the time
of cat of the same files cold and from the page cache. --verify-markers-only measures only that.

--remote (instead of the workloads): upload throughput of -o remote against boto3's upload_file,
both to one moto server on this machine (--remote-mib, default 256 x scale, in 4 files): ckptfs
from the first write through the mount until `ckptfs sync --remote` returns, boto3 upload_file of
the same files; alternated, --repeat runs, medians.

--replication (instead of the workloads): how fast a node's files reach its partner's memory
(-o shared,replicas=1) against iperf3 over the same veth pair between two network namespaces:
--replication-mib (default 1024 x scale) MiB in 4 files written through node 0's mount, from the
first write until `ckptfs sync --replicated` returns; iperf3's one TCP stream for 5 s. Alternated,
--repeat runs, medians.

--remote-load (instead of the workloads): loading a DCP checkpoint that is only on the store
(--remote-mib, default 256 x scale): dcp.load through a mount of an empty directory with -o remote
(listing and fetching from the store), against boto3's download_file of its objects then dcp.load
from the local copy; alternated, --repeat runs, medians.

--remote-dcp (instead of the workloads): a DCP save through a mount with -o remote until
`ckptfs sync --remote` returns, against dcp.save to the plain directory then an upload of its
files with boto3's transfer manager, and dcp.save to /dev/shm (--remote-mib, default 256 x scale);
alternated, --repeat runs, medians; targets: on the store no later, the save at most 1.3x shm's.

Needs root (drop_caches, FUSE). Cleans up its mounts and directories, also on failure.
"""
import argparse
import json
import os
import shutil
import sys
import warnings

from . import (fuse_ring, remote, remote_dcp, remote_load, replication, saves, takeover,
               tensor_view, verify)
from .contenders import ALL_WORKLOADS
from .measure import fs_type

# Modes run instead of the save comparison, by the flag that asks for each (the first one set).
MODES = {"tensor_view": tensor_view.run, "fuse_ring": fuse_ring.run, "takeover": takeover.run,
         "remote": remote.run, "remote_load": remote_load.run, "remote_dcp": remote_dcp.run,
         "verify": verify.run,
         "replication": replication.run}


def keep_library_output(path):
    """Sends what the libraries print to `path`, so that the bench prints only its own lines and
    tables: file descriptor 2, which every process the bench starts inherits (rank processes'
    FutureWarning/UserWarning lines, missing Transformer Engine or Apex), and the bench process's
    own Python warnings go there; the bench's messages and errors still reach the terminal."""
    log = open(path, "w", buffering=1)
    sys.stderr = os.fdopen(os.dup(2), "w", buffering=1)
    os.dup2(log.fileno(), 2)

    def to_log(message, category, filename, lineno, file=None, line=None):
        log.write(warnings.formatwarning(message, category, filename, lineno, line))
    warnings.showwarning = to_log
    print(f"bench: the libraries' own output goes to {path}", flush=True)


def main():
    a = parse_args()
    keep_library_output(a.library_log)
    os.makedirs(a.workdir)
    for mode, run in MODES.items():
        if getattr(a, mode):
            try:
                rows = run(a)
            finally:
                shutil.rmtree(a.workdir, ignore_errors=True)
            with open(a.json, "w") as f:
                json.dump({"config": vars(a), mode: rows}, f, indent=1, default=str)
            return
    saves.run_saves(a)


def parse_args():
    """The command line's arguments, defaults filled in; exits with a usage error when they
    cannot run here."""
    ap = parser()
    a = ap.parse_args()
    if a.view_gib is None:
        a.view_gib = a.scale
    if a.takeover_gib is None:
        a.takeover_gib = 6 * a.scale
    if a.verify_gib is None:
        a.verify_gib = 4 * a.scale
    if a.only:
        a.only = [n for x in a.only for n in x.split(",") if n]
        bad = [n for n in a.only if n not in ALL_WORKLOADS]
        if bad:
            ap.error(f"unknown workload {bad}; choose from {ALL_WORKLOADS}")
    for opt in ("repeat", "whole_region_every"):
        if getattr(a, opt) < 1:
            ap.error(f"--{opt.replace('_', '-')} must be at least 1")
    if os.geteuid() != 0 and not a.no_cold:
        ap.error("cold loads need root (drop_caches); run as root or pass --no-cold")
    parent = a.workdir if os.path.exists(a.workdir) else os.path.dirname(os.path.realpath(a.workdir))
    if fs_type(parent) in ("tmpfs", "ramfs"):
        ap.error(f"--workdir {a.workdir} is on {fs_type(parent)}; it must be on the backing disk")
    for p in (a.workdir, a.shm_dir):
        if os.path.exists(p):
            ap.error(f"{p} exists; remove it or choose another directory")
    return a


def parser():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=2,
                    help="runs per contender, medians reported (default 2, to keep a default run "
                    "near 25 minutes; 3 or more to judge a change whose effect is near the noise)")
    ap.add_argument("--scale", type=float, default=1.0, help="multiply every workload's size")
    ap.add_argument("--only", action="append", help="run only these workloads (comma list; "
                    "repeatable): " + ",".join(ALL_WORKLOADS))
    ap.add_argument("--json", default="bench-results.json", help="write results here")
    ap.add_argument("--library-log", default="bench-libraries.log",
                    help="where the output of the libraries (their warnings) goes")
    ap.add_argument("--workdir", default="/var/tmp/ckptfs-bench",
                    help="plain and backing directories (must be on a real disk, not tmpfs)")
    ap.add_argument("--shm-dir", default="/dev/shm/ckptfs-bench")
    ap.add_argument("--cache-size", default="6G", help="ckptfs cache_size")
    ap.add_argument("--ckptfs-opts", default="", help="extra -o options for ckptfs, comma separated")
    ap.add_argument("--seq-gib", type=float, help="total size of the sequential files (default 4 x scale)")
    ap.add_argument("--small-count", type=int, help="number of small files (default 20000 x scale)")
    ap.add_argument("--no-cold", action="store_true", help="skip drop_caches (cold loads)")
    ap.add_argument("--no-warm-up", dest="warm_up", action="store_false",
                    help="time the first save in a fresh place (ckptfs: a fresh mount) instead of "
                    "the one after a saved, synced and deleted checkpoint")
    ap.add_argument("--slow-repeat", type=int, default=1,
                    help="runs of zarr_dist and zarr_distopt on plain and shm, at most --repeat "
                    "(default 1: each takes tens of seconds, 10-25x ckptfs' time)")
    ap.add_argument("--whole-region-every", type=int, default=5,
                    help="zarr_distopt's whole-region load loads every Nth piece of each rank "
                    "(default 5: 12 of 60; each piece reads the whole region, so each costs the "
                    "same; 1: all, minutes on shm)")
    ap.add_argument("--distopt-plain", action="store_true",
                    help="also run zarr_distopt on the plain directory (slow: rewrites the whole "
                    "chunk on disk per piece)")
    ap.add_argument("--takeover", action="store_true",
                    help="measure worker takeovers (ckptfs upgrade) instead of the workloads")
    ap.add_argument("--takeover-by", choices=["upgrade", "kill"], default="upgrade",
                    help="--takeover: replace the worker by an upgrade (default) or kill -9")
    ap.add_argument("--takeover-gib", type=float,
                    help="GiB staged for --takeover (default 6 x scale)")
    ap.add_argument("--tensor-view", action="store_true",
                    help="measure reads through a checkpoint's tensor view instead of the workloads")
    ap.add_argument("--view-gib", type=float, help="checkpoint size for --tensor-view (default 1 x scale)")
    ap.add_argument("--memory", action="store_true",
                    help="also mount with the cache in shared memory of small pages (ck_small) "
                    "and in private memory (ck_private), alternated with the others")
    ap.add_argument("--baseline", metavar="CKPTFS",
                    help="also mount this ckptfs binary (the previous main) with the default "
                    "options (contender base), alternated with the others: an A/B of a change")
    ap.add_argument("--remote", action="store_true",
                    help="measure uploads through a mount with -o remote against boto3's "
                    "upload_file, both to a local moto server, instead of the workloads")
    ap.add_argument("--remote-load", action="store_true",
                    help="measure loading a DCP checkpoint that is only on the store through a "
                    "mount of an empty directory with -o remote, against boto3's download_file "
                    "then a local load, both from a local moto server, instead of the workloads")
    ap.add_argument("--remote-dcp", action="store_true",
                    help="measure a DCP save through a mount with -o remote until it is on the "
                    "store, against dcp.save to the plain directory then boto3's transfer manager, "
                    "and dcp.save to /dev/shm, instead of the workloads")
    ap.add_argument("--remote-mib", type=int,
                    help="MiB uploaded by --remote, saved by --remote-dcp, or loaded by "
                    "--remote-load "
                    "(default 256 x scale)")
    ap.add_argument("--verify", action="store_true",
                    help="measure `ckptfs verify` against cat, and what -o verify=markers adds to "
                    "a marker's publication, instead of the workloads")
    ap.add_argument("--verify-gib", type=float, help="checkpoint size for --verify (default 4 x scale)")
    ap.add_argument("--verify-markers-only", action="store_true",
                    help="--verify measures only what -o verify=markers adds to a marker")
    ap.add_argument("--verify-baseline", metavar="CKPTFS",
                    help="--verify also measures -o verify=markers of this ckptfs binary (the "
                    "previous main), alternated with the one under test")
    ap.add_argument("--replication", action="store_true",
                    help="measure replication into a partner's memory (-o replicas=1) against "
                    "iperf3 over one veth pair, instead of the workloads")
    ap.add_argument("--replication-mib", type=int,
                    help="MiB written by --replication (default 1024 x scale)")
    ap.add_argument("--fuse-ring", action="store_true",
                    help="measure the warm load of --small-count (default 5,000) small files over "
                    "/dev/fuse and over FUSE over io_uring (-o io_uring=on) instead of the workloads")
    return ap
