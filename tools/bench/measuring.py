"""Measuring on a shared machine, for every bench: the page cache primed and fsync timed, wall and
CPU time of a call, the load average, and the machine and library versions a report names.

Stdlib only at import time (numpy, h5py and mdiff are imported where used): codec_study.py imports
it in its --hash-child mode, which runs under qemu without numpy.
"""

from __future__ import annotations

import os
import platform
import resource
import time
from pathlib import Path


def fsync_file(path: Path) -> float:
    """fsync an existing file; the seconds it took."""
    start = time.perf_counter()
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return time.perf_counter() - start


def prime(nbytes: int) -> None:
    """Touch and free ``nbytes`` of memory just before a timed call (untimed).

    On this VM, memory that has been free for a few seconds may be handed back to the host (virtio
    free page reporting); touching it again was seen to cost ~0.5 GB/s instead of 5–10 GB/s. A
    contender that allocates (page cache for its output file, arrays) right after a pause would
    pay for that and one that follows another allocation would not: priming gives every contender
    recently used memory.
    """
    if nbytes > 0:
        import numpy as np

        block = np.ones(int(nbytes), np.uint8)
        del block


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def machine() -> str:
    mem = "?"
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem = f"{int(line.split()[1]) / (1 << 20):.1f} GiB"
    except OSError:
        pass
    return f"{os.cpu_count()} CPUs, {mem} memory, {platform.platform()}"


def versions() -> str:
    import h5py
    import numpy as np

    import mdiff

    parts = [f"Python {platform.python_version()}", f"numpy {np.__version__}",
             f"h5py {h5py.__version__} (HDF5 {h5py.version.hdf5_version})", f"mdiff {mdiff.__version__}"]
    for module in ("safetensors", "torch", "zstandard"):
        try:
            parts.append(f"{module} {__import__(module).__version__}")
        except ImportError:
            parts.append(f"{module} missing")
    return ", ".join(parts)


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)  # every thread of this process
    return r.ru_utime + r.ru_stime


def timed(record: dict, label: str, fn) -> None:
    start, cpu = time.perf_counter(), cpu_s()
    fn()
    record.setdefault(label, {"wall": [], "cpu": []})
    record[label]["wall"].append(time.perf_counter() - start)
    record[label]["cpu"].append(cpu_s() - cpu)


def median(values: list) -> float:
    import numpy as np

    return float(np.median(values))
