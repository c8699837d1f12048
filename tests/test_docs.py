"""The documentation site builds with `mkdocs build --strict` (a broken link, a missing page or an
API reference that does not resolve fails), and its API reference lists every public name of
`gradcomp.comm` and `gradcomp.fsdp`; the results page lists every run folder of
benchmarks/results, and each run's README is a page of the site; runs that a later run
superseded are listed and shown as such."""
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import gradcomp.comm
import gradcomp.fsdp

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"


def results_hook():
    """docs/_hooks/results.py, the MkDocs hook that makes the results pages."""
    spec = importlib.util.spec_from_file_location("results_hook",
                                                  ROOT / "docs" / "_hooks" / "results.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_site_builds_strict_and_the_api_lists_every_public_name(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT), NO_MKDOCS_2_WARNING="1")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet",
                           "--config-file", str(ROOT / "mkdocs.yml"), "--site-dir",
                           str(tmp_path / "site")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    api = (tmp_path / "site" / "api" / "index.html").read_text()
    for module in (gradcomp.comm, gradcomp.fsdp):
        for name in module.__all__:  # under the package, or where it is defined (a function
            defined_in = getattr(getattr(module, name), "__module__", module.__name__)  # that
            assert (f'id="{module.__name__}.{name}"' in api  # shares its module's name)
                    or f'id="{defined_in}.{name}"' in api), f"{module.__name__}.{name}"
    for page in ("getting-started", "ddp", "auto", "fsdp2", "trainers", "workload", "model",
                 "evaluation", "diloco", "collectives", "kernels", "architecture",
                 "contributing"):
        assert (tmp_path / "site" / page / "index.html").exists(), page
    results = (tmp_path / "site" / "results" / "index.html").read_text()
    for run in sorted(p for p in (ROOT / "benchmarks" / "results").iterdir() if p.is_dir()):
        assert run.name in results, run.name
        if (run / "README.md").exists():
            assert (tmp_path / "site" / "results" / run.name / "index.html").exists(), run.name


def test_the_readme_links_only_to_files_that_exist():
    readme = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme)
    assert any(link.startswith("docs/") for link in links)
    for link in links:
        assert (ROOT / link).exists(), link


def test_the_results_page_shows_superseded_runs_as_such(tmp_path):
    hook = results_hook()
    for run, text in {"old": "Superseded by `new`: re-measured at later code.\n\n# Old run\n",
                      "new": "# New run\n\nIt measured.\n", "plain": "# Plain\n"}.items():
        (tmp_path / run).mkdir()
        (tmp_path / run / "README.md").write_text(text)
    (tmp_path / "tables").mkdir()
    (tmp_path / "tables" / "rates.csv").write_text("a\n")
    page = hook.index_page(sorted(tmp_path.iterdir()))
    current, superseded = page.split("## Superseded runs")
    for run in ("new", "plain"):
        assert f"| [{run}]({run}/index.md) |" in current and f"| [{run}]" not in superseded
    assert "| `tables` | tables only: rates.csv |" in current
    assert ("| [old](old/index.md) | **superseded by [new](new/index.md)**: Old run |"
            in superseded) and "| [old]" not in current
    old_page = hook.run_page(tmp_path / "old" / "README.md")
    assert old_page.startswith('!!! warning "Superseded"\n    By [new](../new/index.md): '
                               "re-measured at later code.\n\n# Old run\n")
    assert hook.run_page(tmp_path / "new" / "README.md") == "# New run\n\nIt measured.\n"
    assert hook.title(tmp_path / "old" / "README.md") == "Old run"
    (tmp_path / "old" / "README.md").write_text("Superseded by `tables`: no README there.\n")
    with pytest.raises(ValueError, match="'tables', which is not a run folder with a README"):
        hook.index_page(sorted(tmp_path.iterdir()))


def test_every_superseded_mark_in_benchmarks_results_names_a_run_with_a_readme():
    hook = results_hook()
    marked = {}
    for readme in sorted(RESULTS.glob("*/README.md")):
        first = hook.first_line(readme)
        if first.lower().startswith("superseded"):  # a mark the hook would not read fails
            marked[readme.parent.name] = hook.superseded_by(readme)
            assert marked[readme.parent.name], f"{readme}: {first}"
    assert marked  # and a newer run is never itself marked superseded by an older one
    for run, newer in marked.items():
        assert newer != run and marked.get(newer) != run, run
