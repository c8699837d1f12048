"""How the suite runs on pytest-xdist workers, as `make test` runs it (`-n 2 --dist loadfile`);
a run without `-n` is left as it is.

* A test file runs in one worker, its tests in order (xdist's `loadfile`), so a module-scoped
  fixture (one spawn of ranks that many tests check) runs once.
* The files that build a root network-namespace testbed (TESTBED_FILES) run as one file, one
  after the other in one worker: one testbed at a time. Two at once would not break each other
  (names unique to the run; `cleanup_stale` keeps the runs whose owner lives), but their checks
  time an all-reduce at 100 Mbit/s against the link rate, and a second testbed's jobs would
  share the CPU that shapes the links.
* The files known to be long go first, longest first, the rest after them in the order
  collected, so that no worker is left with a long file at the end. xdist hands files out in
  the order its workers collected them (this scheduler does not reorder them by number of
  tests, which says little about their cost here). LONGEST_FIRST is a hint only (CPU seconds
  per file, benchmarks/results/suite-2026-11-28/files.csv, measured on a quiet machine): a
  stale one costs time, never a result.
"""
from pathlib import PurePath

import pytest

TESTBED = "testbed"
TESTBED_FILES = {"test_testbed", "test_testbed_nodes", "test_cli_testbed", "test_validate",
                 "test_validate_fsdp", "test_validate_tiers"}
LONGEST_FIRST = [TESTBED, "test_report", "test_converge", "test_integrations",
                 "test_hierarchical", "test_kernels_ef", "test_checkpoint",
                 "test_hooks_distributed", "test_teardown", "test_notebook", "test_gpu_run",
                 "test_readme_ddp", "test_kernels_sparse"]


def group_of(nodeid: str) -> str:
    """What runs in one worker: TESTBED, or the test's file (tests/test_x.py: test_x)."""
    name = PurePath(nodeid.split("::", 1)[0]).stem
    return TESTBED if name in TESTBED_FILES else name


@pytest.hookimpl(optionalhook=True)  # a hook of xdist's, which a plain run may not have
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") == "loadfile":
        from xdist.scheduler import LoadFileScheduling

        class FileScheduling(LoadFileScheduling):
            def __init__(self, config, log):
                super().__init__(config, log)
                config.option.loadscopereorder = False  # the files in the order collected

            def _split_scope(self, nodeid: str) -> str:
                return group_of(nodeid)

        return FileScheduling(config, log)
    return None


def pytest_collection_modifyitems(config, items):
    if hasattr(config, "workerinput"):  # an xdist worker: its collection orders the schedule
        rank = {group: i for i, group in enumerate(LONGEST_FIRST)}
        items.sort(key=lambda item: rank.get(group_of(item.nodeid), len(rank)))  # stable
