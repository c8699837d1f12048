"""The documentation site builds with `mkdocs build --strict` (a broken link, a missing page or an
API reference that does not resolve fails), and its API reference lists every public name of
`gradcomp.comm` and `gradcomp.fsdp`; the results page lists every run folder of
benchmarks/results, and each run's README is a page of the site."""
import os
import re
import subprocess
import sys
from pathlib import Path

import gradcomp.comm
import gradcomp.fsdp

ROOT = Path(__file__).resolve().parent.parent


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
