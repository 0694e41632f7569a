"""Variants of the ckptfs mount, alternated with the default one (the cache in shared memory with
huge pages). --memory: ck_small, the cache in shared memory of small pages (the kernel set as
Debian's ships for its runs, and restored after), and ck_private, the cache in each worker's
private memory. --baseline: base, the default mount of another ckptfs binary (the previous
main), for an A/B of a change."""
import contextlib

from ckptfs_testing.ckptfs_daemon import kernel_without_huge_pages

# Mounts of ckptfs and the options that make each: --memory adds ck_small and ck_private,
# --baseline base; ck_async runs the async saves (contenders.ASYNC_CONTENDERS).
CKPTFS_VARIANTS = {"ckptfs": (), "ck_small": ("huge_pages=leave",),
                   "ck_private": ("cache_memory=private",), "base": (), "ck_async": ()}
MEMORY_CONTENDERS = ["ck_small", "ck_private"]
BASELINE = "base"


def binary_for(contender, args):
    """The ckptfs binary that mounts for `contender` (None: the one under test)."""
    return args.baseline if contender == BASELINE else None


def kernel_for(contender):
    """The kernel setting `contender`'s runs need, as a context manager."""
    return kernel_without_huge_pages() if contender == "ck_small" else contextlib.nullcontext()
