"""A pytest plugin that writes each test's CPU seconds (this process, the children it reaped, and
its live children with theirs, e.g. the fork server's ranks) and wall seconds to the CSV file
$SUITE_CPU_OUT, so that the suite's cost is measured in CPU time, which load does not inflate
as much as wall time:

    SUITE_CPU_OUT=cpu.csv PYTHONPATH=benchmarks python -m pytest -q -p suite_cpu
"""
import csv
import os
import time

import pytest

TICK = os.sysconf("SC_CLK_TCK")
_rows = []


def _stat(pid):
    with open(f"/proc/{pid}/stat") as f:
        s = f.read()
    fields = s[s.rindex(")") + 2:].split()
    return int(fields[1]), sum(int(x) for x in fields[11:15])  # ppid, utime+stime+cutime+cstime


def _cpu():
    me = os.getpid()
    total = 0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            ppid, ticks = _stat(int(name))
        except (OSError, ValueError):
            continue
        if int(name) == me or ppid == me:
            total += ticks
    return total / TICK


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    c0, t0 = _cpu(), time.perf_counter()
    yield
    _rows.append((item.nodeid, _cpu() - c0, time.perf_counter() - t0))


def pytest_sessionfinish(session):
    out = os.environ.get("SUITE_CPU_OUT")
    if out:
        with open(out, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["nodeid", "cpu_s", "wall_s"])
            writer.writerows((n, f"{c:.2f}", f"{w:.2f}") for n, c, w in _rows)
