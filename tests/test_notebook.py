"""notebooks/speedup_curves.ipynb runs headless: model-only, and on a small results folder."""
from contextlib import contextmanager
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from gradcomp.evaluation.analyses.whatif import sweep
from gradcomp.evaluation.common.store import write_atomic
from gradcomp.evaluation.model.fit import validate
from gradcomp.evaluation.report.report import ASSUMED, SWEEP, VALIDATION
from test_report import make_results

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "speedup_curves.ipynb"


# Run first in each execution (in its own cell, which outputs nothing): a namespace as fresh
# as a new kernel's, the results folder (or none) and the working directory.
SETUP = """%reset -f
import os
os.environ.pop("GRADCOMP_RESULTS", None)
os.environ.update({env!r})
os.chdir({cwd!r})
"""


@contextmanager
def kernel():
    """A kernel for executions of the notebook (`execute`), shut down at the end."""
    client = NotebookClient(nbformat.v4.new_notebook(), timeout=120, kernel_name="python3")
    with client.setup_kernel():
        yield client


@pytest.fixture(scope="module")
def client():
    """One kernel for the file's executions: the notebook's imports (gradcomp's evaluation
    suite, pandas, matplotlib) happen once."""
    with kernel() as client:
        yield client


def execute(client, tmp_path, results=None):
    env = {} if results is None else {"GRADCOMP_RESULTS": str(results)}
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nb.cells.insert(0, nbformat.v4.new_code_cell(SETUP.format(env=env, cwd=str(tmp_path))))
    client.nb = nb
    client.execute(cleanup_kc=False)  # the kernel stays for the next execution
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    return outputs


def images(outputs) -> int:
    return sum("image/png" in o.get("data", {}) for o in outputs)


def test_notebook_runs_a_model_only_sweep_without_results(client, tmp_path):
    outputs = execute(client, tmp_path)
    assert images(outputs) == 1
    assert any("No results folder" in o.get("data", {}).get("text/markdown", "")
               for o in outputs)


def test_notebook_plots_a_results_folder(client, tmp_path):
    folder = make_results(tmp_path / "results")
    curves = sweep("resnet50", [1e9, 10e9, 100e9], 8, ["none", "fp16"]).assign(costs=ASSUMED)
    write_atomic(folder / SWEEP, curves.to_csv(index=False))
    check = validate([0.002, 0.005], [0.0025, 0.004]).table.assign(method=["ddp", "fp16"])
    write_atomic(folder / VALIDATION, check.to_csv(index=False))
    outputs = execute(client, tmp_path, folder)
    assert images(outputs) == 4  # speedup curves, codec and collective fits, validation
    tables = [o["data"]["text/plain"] for o in outputs if "text/html" in o.get("data", {})]
    assert any("fp16" in t and "0.25" in t for t in tables)  # the validation table
