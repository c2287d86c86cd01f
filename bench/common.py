"""What every benchmark reports: percentiles, the machine, process CPU time."""

from __future__ import annotations

import os
import platform
import statistics
import sys
from pathlib import Path
from typing import Any


def percentiles_ms(values_s: list[float]) -> dict[str, float]:
    """p50/p95/p99/max in milliseconds of durations given in seconds."""
    if not values_s:
        return {"n": 0}
    ordered = sorted(values_s)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 3)

    return {
        "n": len(ordered),
        "p50_ms": at(0.50),
        "p95_ms": at(0.95),
        "p99_ms": at(0.99),
        "max_ms": round(ordered[-1] * 1000, 3),
        "mean_ms": round(statistics.fmean(ordered) * 1000, 3),
    }


def machine() -> dict[str, Any]:
    """CPU model and count, Python version: figures mean little without them."""
    model = ""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {
        "cpu_model": model or platform.processor(),
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
    }


def wakeups(pid: int) -> int:
    """Times the process's threads blocked and were woken (voluntary context switches): each
    is an event-loop wake-up (or a Go scheduler park) whose fixed cost a busier load shares."""
    total = 0
    for status in Path(f"/proc/{pid}/task").glob("*/status"):
        try:
            text = status.read_text()
        except OSError:  # a thread that ended between the listing and the read
            continue
        for line in text.splitlines():
            if line.startswith("voluntary_ctxt_switches:"):
                total += int(line.split()[1])
    return total


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks
