"""How many threads llama.cpp gets: ASSISTANT_THREADS when set, else the number of physical cores.

Hyper-threads share one core's vector units, so using them slows matrix products down.
"""

from __future__ import annotations

import os


def default_threads() -> int:
    configured = os.environ.get("ASSISTANT_THREADS")
    if configured:
        return max(1, int(configured))
    return physical_cores()


def physical_cores() -> int:
    """Distinct (socket, core) pairs among the CPUs this process may run on."""
    allowed = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set(range(os.cpu_count() or 1))
    cores = set()
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            processor = physical_id = None
            for line in cpuinfo:
                key, _, value = (part.strip() for part in line.partition(":"))
                if key == "processor":
                    processor = int(value)
                elif key == "physical id":
                    physical_id = value
                elif key == "core id" and processor in allowed:
                    cores.add((physical_id, value))
    except (OSError, ValueError):
        pass
    return max(1, min(len(cores) or len(allowed), len(allowed)))
