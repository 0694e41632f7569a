"""Rank processes: started from a forkserver, they generate their data, meet at a start line
(the clock starts when it opens), and report their result, bytes written and CPU time; as a
torch.distributed gloo group (run_distributed), and with nodes lost on purpose (NodeLoss)."""
import datetime
import functools
import multiprocessing
import os
import queue as queue_mod
import re
import shutil
import tempfile
import threading
import time
import traceback


def _ctx(preload):
    # forkserver, not fork: forking a process that has used torch's OpenMP pool can hang the
    # child. The server imports torch and zarr (and the modules of the first workload to start
    # ranks in this process) once, so rank processes start in milliseconds.
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["numpy", "torch", "zarr", "numcodecs", __package__, *preload])
    return ctx


def run_ranks(target, nranks, args, preload=(), node_loss=None):
    """Starts nranks processes target(rank, barrier, queue, *args); they generate their data and
    wait at the barrier; the clock starts when the barrier opens. Returns (seconds until the last
    rank's body returned: what the processes do at exit, such as stopping a library's helper
    processes, is not counted; [rank results]). Raises when a rank fails, unless node_loss (a
    NodeLoss) is given: then it waits for every rank to end, however it ends, and returns the
    seconds until the last completed rank's body returned (None when none did) and None as the
    result of each rank that did not complete (node_loss.errors says why)."""
    ctx = _ctx(preload)
    barrier = ctx.Barrier(nranks + 1)  # Start line: every rank and this process.
    group = ctx.Barrier(nranks)  # Between the ranks (torch.distributed.barrier()).
    queue = ctx.Queue()
    procs = [ctx.Process(target=target, args=(r, barrier, group, queue) + tuple(args))
             for r in range(nranks)]
    for p in procs:
        p.start()
    try:
        try:
            barrier.wait(timeout=300)
        except threading.BrokenBarrierError:  # A rank failed before the start line: say why.
            raise RuntimeError(f"a rank failed before the start line: {_rank_errors(queue)}")
        t0 = time.monotonic()
        global last_start_line
        last_start_line = t0
        if node_loss is not None:
            results = node_loss._collect(procs, queue)
        else:
            results = _collect(procs, queue)
        for r in results:
            procs[r].join(timeout=600)
        ends = [results[r][2] for r in results]
        elapsed = max(ends) - t0 if ends else None  # CLOCK_MONOTONIC: one clock.
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()  # Only the rank processes started here.
                p.join()
    # A rank the node loss killed after it reported its result completed all the same.
    killed = node_loss.killed if node_loss is not None else set()
    bad = [p.exitcode for r, p in enumerate(procs)
           if p.exitcode != 0 and r in results and r not in killed]
    if bad:
        raise RuntimeError(f"rank processes exited with {bad}")
    global ranks_written, ranks_cpu
    ranks_written += sum(results[r][1] for r in results)
    ranks_cpu += sum(results[r][3] for r in results)
    return elapsed, [results[r][0] if r in results else None for r in range(nranks)]


def _collect(procs, queue):
    """{rank: (result, bytes written, end time, CPU)} of every rank; raises when one fails."""
    results = {}
    while len(results) < len(procs):
        try:
            r, res = queue.get(timeout=1)
        except queue_mod.Empty:
            dead = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
            if dead:
                raise RuntimeError(f"a rank process died with {dead}")
            continue
        if isinstance(res, BaseException):
            raise RuntimeError(f"rank {r} failed: {res!r}")
        results[r] = res
    return results


class NodeLoss:
    """A save through which nodes may die (tests of several mounts): pass it to a workload's
    save(..., node_loss=...), from a thread of its own. `started` is set when the ranks' start
    line opens; kill_ranks(ranks) then kills those rank processes, as a trainer dies with its
    node. The save waits for every rank to end however it ends (the survivors fail on their
    collectives with the dead, or complete), kills the ranks still running `grace` seconds after
    kill_ranks, and returns instead of raising: `errors` {rank: why} holds each rank that did
    not complete, `hung` the ranks killed after the grace period, and unexplained_failures()
    the survivors' failures that the loss does not explain."""

    def __init__(self, grace=120):
        self.grace = grace
        self.started = threading.Event()
        self.errors = {}
        self.hung = []
        self._lock = threading.Lock()
        self._procs = []
        self._killed_at = None
        self._reports = {}  # {rank: what a rank that failed reported}
        self.lost = set()  # Ranks given to kill_ranks: those of the dead nodes.
        self.killed = set()  # Ranks kill_ranks killed (possibly after they reported a result).

    def kill_ranks(self, ranks):
        """SIGKILLs rank processes `ranks` of the save (only those it started). Call it once
        `started` is set."""
        with self._lock:
            assert self._procs, "kill_ranks before the ranks' start line"
            self.lost.update(ranks)
            for r in ranks:
                if self._procs[r].is_alive():
                    self.killed.add(r)
                    self._procs[r].kill()
            self._killed_at = time.monotonic()

    def unexplained_failures(self):
        """{rank: why} of the survivors (ranks not given to kill_ranks) that did not complete for
        another reason than the loss: a survivor may fail only on a collective with a dead rank
        (gloo's connection to it broke), or with DCP's CheckpointException naming lost ranks
        alone (a lost rank's error, gathered before it died)."""
        return {r: why for r, why in self.errors.items()
                if r not in self.lost and not _loss_explains(self._reports.get(r), self.lost)}

    def _collect(self, procs, queue):
        """run_ranks' collection: {rank: (result, bytes written, end time, CPU)} of the ranks that
        completed; the others land in `errors`."""
        with self._lock:
            self._procs = procs
        self.started.set()
        results, ended = {}, set()

        def take(item):
            r, res = item
            ended.add(r)
            if isinstance(res, BaseException):
                report = self._reports[r] = str(res).strip()
                failed = _FAILED_RANKS.search(report)  # Its last line is a failed rank's error.
                self.errors[r] = "failed: " + (failed[0] if failed else report.splitlines()[-1])
            else:
                results[r] = res
        while len(ended) < len(procs):
            try:
                take(queue.get(timeout=1))
                continue
            except queue_mod.Empty:
                pass
            exited = [r for r, p in enumerate(procs) if p.exitcode is not None and r not in ended]
            try:
                while True:  # What an exited rank put on the queue before it exited.
                    take(queue.get_nowait())
            except queue_mod.Empty:
                pass
            for r in exited:
                if r not in ended:
                    ended.add(r)
                    self.errors[r] = f"exited with {procs[r].exitcode} without a result"
            with self._lock:
                overdue = (self._killed_at is not None
                           and time.monotonic() - self._killed_at > self.grace)
            if overdue:
                for r, p in enumerate(procs):
                    if r not in ended:
                        p.kill()
                        p.join()
                        ended.add(r)
                        self.hung.append(r)
                        self.errors[r] = f"still running {self.grace}s after kill_ranks: killed"
        return results


# How gloo fails a collective whose peer died (its tcp pair's connection broke), and DCP's report
# of the ranks whose step failed (torch.distributed.checkpoint.api.CheckpointException).
_BROKEN_PAIR = re.compile(
    r"gloo/transport/tcp/pair\.cc:\d+\] (Connection closed by peer|Read error|writev) ")
_FAILED_RANKS = re.compile(r"CheckpointException ranks:dict_keys\(\[([\d, ]*)\]\)")


def _loss_explains(report, lost):
    """Whether `report`, a rank's failure (None: it reported none), is the loss of ranks `lost`."""
    if report is None:
        return False
    failed = _FAILED_RANKS.search(report)
    if failed:
        ranks = {int(r) for r in re.findall(r"\d+", failed.group(1))}
        return bool(ranks) and ranks <= lost
    return bool(_BROKEN_PAIR.search(report.splitlines()[-1]))


def _rank_errors(queue, wait=10):
    """The failures the ranks reported on `queue` within `wait` seconds."""
    errors, deadline = [], time.monotonic() + wait
    while not errors and time.monotonic() < deadline:
        try:
            while True:
                r, res = queue.get(timeout=1)
                if isinstance(res, BaseException):
                    errors.append(f"rank {r}: {res}")
        except queue_mod.Empty:
            pass
    return "; ".join(errors) or "no rank reported an error"


# When the start line of the last run_ranks opened (time.monotonic(), one clock for every process):
# the bench times from it what happens after a save returns.
last_start_line = None

# Bytes the rank processes of all saves so far wrote towards a block device (write_bytes -
# cancelled_write_bytes of /proc/self/io). The forkserver, not this process, reaps the ranks, so
# their I/O does not show in this process's /proc/self/io; the bench reads this instead.
ranks_written = 0
# CPU seconds (user + system) the rank processes of all saves so far used from their start line
# to the end of their body, for the same reason.
ranks_cpu = 0.0


class _StartLine:
    """A rank's view of the start line: notes the rank's CPU time when the line opens."""

    def __init__(self, barrier, group):
        self._barrier = barrier
        self.group = group
        self.cpu_at_start = time.process_time()

    def wait(self, *args, **kwargs):
        opened = self._barrier.wait(*args, **kwargs)
        self.cpu_at_start = time.process_time()
        return opened

    def abort(self):
        self._barrier.abort()


def _written_by_self():
    io = {}
    with open("/proc/self/io") as f:
        for line in f:
            k, v = line.split(":")
            io[k.strip()] = int(v)
    return io["write_bytes"] - io["cancelled_write_bytes"]


def rank_main(fn):
    """Wraps a rank body: reports its result or exception on the queue."""

    @functools.wraps(fn)  # Picklable by name (forkserver start method).
    def wrapper(rank, barrier, group, queue, *args):
        start_line = _StartLine(barrier, group)
        try:
            io0 = _written_by_self()
            res = fn(rank, start_line, *args)
            done = time.monotonic()
            cpu = time.process_time() - start_line.cpu_at_start
            queue.put((rank, (res, _written_by_self() - io0, done, cpu)))
        except BaseException:  # Report to the parent, then fail.
            for b in (barrier, group):
                try:
                    b.abort()
                except Exception:
                    pass
            queue.put((rank, RuntimeError(traceback.format_exc(limit=-4))))
            raise
    return wrapper


def run_distributed(target, nranks, args, preload=(), node_loss=None):
    """run_ranks for a target made with @distributed_rank: its ranks form a torch.distributed
    gloo group (rendezvous through a file store in a fresh temporary directory)."""
    store = tempfile.mkdtemp(prefix="ckptfs-pg-")
    try:
        return run_ranks(target, nranks, (nranks, store) + tuple(args),
                          preload=(target.__module__, *preload), node_loss=node_loss)
    finally:
        shutil.rmtree(store, ignore_errors=True)


def distributed_rank(fn):
    """A rank body fn(rank, barrier, *args) run inside a torch.distributed gloo group of the
    ranks run_distributed starts."""

    @functools.wraps(fn)
    def body(rank, barrier, world, store, *args):
        import torch.distributed as dist
        os.environ["MASTER_ADDR"] = "127.0.0.1"  # DCP's checkpoint process meets here too.
        dist.init_process_group("gloo", init_method=f"file://{store}/rendezvous", rank=rank,
                                world_size=world, timeout=datetime.timedelta(seconds=300))
        try:
            return fn(rank, barrier, *args)
        finally:
            dist.destroy_process_group()
    return rank_main(body)
