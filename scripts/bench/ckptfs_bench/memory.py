"""--memory: two more ckptfs mounts alternated with the default one (the cache in shared memory
with huge pages): ck_small, the cache in shared memory of small pages (the kernel set as Debian's
ships for its runs, and restored after), and ck_private, the cache in each worker's private
memory."""
import contextlib

from ckptfs_testing.ckptfs_daemon import kernel_without_huge_pages

# Mounts of ckptfs and the options that make each (--memory adds the last two).
CKPTFS_VARIANTS = {"ckptfs": (), "ck_small": ("huge_pages=leave",),
                   "ck_private": ("cache_memory=private",)}
MEMORY_CONTENDERS = ["ck_small", "ck_private"]


def kernel_for(contender):
    """The kernel setting `contender`'s runs need, as a context manager."""
    return kernel_without_huge_pages() if contender == "ck_small" else contextlib.nullcontext()
