"""How the suite runs on pytest-xdist workers, as `make test` runs it (`-n 2 --dist loadgroup
--no-loadscope-reorder`); any other run is left as it is.

* A test file is one xdist group, named as the file (`test_x`): its tests run in one worker,
  in order, so a module-scoped fixture (one spawn of ranks that many tests check) runs once.
* The files that build a root network-namespace testbed are one group, TESTBED: one testbed
  at a time. Two at once would not break each other (names unique to the run; `cleanup_stale`
  keeps the runs whose owner lives), but their checks time an all-reduce at 100 Mbit/s against
  the link rate, and a second testbed's jobs would share the link-shaping CPU with them.
* The groups known to be long go first, longest first, the rest after them in the order
  collected: xdist hands out groups in the collection's order (with --no-loadscope-reorder;
  its default orders them by number of tests, which says little about their cost here), and
  a long file handed out last would leave the other worker idle. The list is a hint only
  (wall seconds per file, benchmarks/results/suite-2026-11-28/files.csv): a stale one costs
  time, never a result.
"""
from pathlib import PurePath

import pytest

TESTBED = "testbed"
TESTBED_FILES = {"test_testbed", "test_testbed_nodes", "test_cli_testbed", "test_validate",
                 "test_validate_fsdp", "test_validate_tiers"}
LONGEST_FIRST = [TESTBED, "test_report", "test_integrations", "test_teardown", "test_converge",
                 "test_gpu_run", "test_hierarchical", "test_cli_errors", "test_hooks_distributed",
                 "test_kernels_ef"]


def group_of(item: pytest.Item) -> str:
    """The xdist group of a test: TESTBED, or its file's name (tests/test_x.py: test_x)."""
    name = PurePath(item.nodeid.split("::", 1)[0]).stem
    return TESTBED if name in TESTBED_FILES else name


@pytest.hookimpl(tryfirst=True)  # before xdist's worker names each test after its group
def pytest_collection_modifyitems(config, items):
    if not getattr(config.option, "loadgroup", False):  # set in xdist's workers of a loadgroup run
        return
    for item in items:
        item.add_marker(pytest.mark.xdist_group(group_of(item)))
    rank = {group: i for i, group in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(group_of(item), len(rank)))  # stable: files in order
