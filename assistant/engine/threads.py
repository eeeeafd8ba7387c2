"""How many threads llama.cpp gets: ASSISTANT_THREADS when set, else the number of physical cores.

Hyper-threads share one core's vector units, so using them slows matrix products down.
"""

from __future__ import annotations

import os

from assistant.cpu import cpuinfo_records


def default_threads() -> int:
    configured = os.environ.get("ASSISTANT_THREADS")
    if configured:
        return max(1, int(configured))
    return physical_cores()


def physical_cores() -> int:
    """Distinct (socket, core) pairs among the CPUs this process may run on."""
    allowed = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set(range(os.cpu_count() or 1))
    cores = set()
    for record in cpuinfo_records():
        try:
            if int(record.get("processor", -1)) in allowed and "core id" in record:
                cores.add((record.get("physical id"), record["core id"]))
        except ValueError:
            continue
    return max(1, min(len(cores) or len(allowed), len(allowed)))
