"""One BLAS thread while a fit runs.

The solver's linear algebra is matrix-vector products on tall, thin Jacobians (40k × 25), which
OpenBLAS splits across threads that spin-wait for each other: on a 2-core machine shared with other
work one product took 2.4 ms on two threads and 0.16 ms on one. One thread also makes a fit's
rounding, and so its poorly identified parameters, independent of the machine's core count.
Finds the OpenBLAS libraries this process has loaded (numpy's and scipy's wheels bundle their own)
by their exported thread setters; elsewhere (another BLAS, no /proc) it does nothing.
"""
from __future__ import annotations

import ctypes
from contextlib import contextmanager

_PREFIXES = ("scipy_openblas", "openblas")
_SUFFIXES = ("64_", "")
_found = None


def _openblas() -> list:
    global _found
    if _found is not None:
        return _found
    _found = []
    try:
        with open("/proc/self/maps") as f:
            paths = sorted({line.split()[-1] for line in f if "openblas" in line and ".so" in line})
    except OSError:
        return _found
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for pre in _PREFIXES:
            for suf in _SUFFIXES:
                get = getattr(lib, f"{pre}_get_num_threads{suf}", None)
                put = getattr(lib, f"{pre}_set_num_threads{suf}", None)
                if get is not None and put is not None:
                    get.restype, put.argtypes = ctypes.c_int, [ctypes.c_int]
                    _found.append((get, put))
                    break
            else:
                continue
            break
    return _found


@contextmanager
def one_blas_thread():
    libs = _openblas()
    before = [get() for get, _ in libs]
    try:
        for _, put in libs:
            put(1)
        yield
    finally:
        for (_, put), n in zip(libs, before):
            put(n)
