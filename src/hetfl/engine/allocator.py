"""Keep freed memory for reuse: each round allocates stacks of K models and frees them again.

glibc serves allocations above its mmap threshold (at most 32 MiB) with fresh pages and returns them to
the kernel on free, so every round's stack of parameters (80 MB for 100 2NN clients) page-faults anew:
15,000–20,000 minor faults per 2NN round, ≈ 15% of its CPU time (docs/engine.md). Raising the mmap and
trim thresholds makes glibc keep freed memory in its heap and hand the same pages out next round. The
resident set then stays at the run's peak, which a training process reaches every round anyway.
PyTorch's CPU performance guide recommends a caching allocator (jemalloc, tcmalloc) for the same reason;
this needs none.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

# glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_THRESHOLD = 1 << 30  # allocations up to 1 GiB come from the heap, and up to 1 GiB of free heap is kept


def retain_freed_memory() -> bool:
    """Ask glibc to keep and reuse freed memory (once per process; a no-op elsewhere). True if set."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return bool(libc.mallopt(_M_MMAP_THRESHOLD, _THRESHOLD)) and \
            bool(libc.mallopt(_M_TRIM_THRESHOLD, _THRESHOLD))
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
