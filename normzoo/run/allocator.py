"""Freed memory kept for reuse when training on a CPU, so that a step does not fault its large
tensors in afresh.

glibc's ``malloc`` serves every block above its mmap threshold (32 MB at most) with a fresh
``mmap`` and hands it back to the kernel on ``free``. A training step allocates the same large
tensors every step (the vocabulary's logits and their gradient: 49 MB each at 2,048 tokens of a
6,000-entry vocabulary in float32), so every step touched them in page by page, 4 kB a fault:
about a tenth of an fp32 step of the depth study's model on the 2-core Zen 4
(``benchmarks/step_profile.py``). With ``mmap`` off and trimming deferred, freed blocks stay
resident in the heap, and later blocks that fit in them (after glibc coalesces neighbours) take
no faults. The heap holds some blocks it cannot yet reuse, so the peak is a little higher
(``benchmarks/precision.py --allocator``), and memory goes back to the system only when the
process ends, as with PyTorch's caching allocator on a GPU, or jemalloc and tcmalloc set never
to decay.

Only when training on a CPU and only under glibc; ``NORMZOO_CPU_MALLOC=system`` leaves ``malloc``
as it is. ``summary.json`` records which (``machine.cpu_malloc``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform

from normzoo.errors import NormzooError

ENV = "NORMZOO_CPU_MALLOC"
MODES = ("reuse", "system")
# mallopt's parameters (glibc's malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4
_NEVER_TRIM = 2**31 - 1  # an int: the largest threshold mallopt takes

_mode = "system"


def mode() -> str:
    """``reuse`` once :func:`keep_freed_memory` changed ``malloc`` in this process, else
    ``system``."""
    return _mode


def requested() -> str:
    """The mode ``NORMZOO_CPU_MALLOC`` asks for (``reuse`` when unset); a run checks it before it
    starts, so that a mistyped value is refused before anything is written."""
    asked = os.environ.get(ENV, "reuse")
    if asked not in MODES:
        raise NormzooError(f"{ENV}={asked!r}: set it to reuse (the default: freed memory kept "
                           "for reuse) or system (malloc as it is), or unset it")
    return asked


def keep_freed_memory() -> str:
    """Keep freed blocks in glibc's heap for reuse (see the module's docstring); returns the
    mode now in force. Idempotent; nothing happens outside Linux with glibc or when
    ``NORMZOO_CPU_MALLOC=system``."""
    global _mode
    if _mode == "reuse" or requested() == "system":
        return _mode
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return _mode
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return _mode
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    # Trimming first: were mmap off and trimming on, a freed block at the heap's top would go
    # back to the kernel and be faulted in again.
    if mallopt(_M_TRIM_THRESHOLD, _NEVER_TRIM) == 1 and mallopt(_M_MMAP_MAX, 0) == 1:
        _mode = "reuse"
    return _mode
