"""MkDocs hook: the measurement runs of benchmarks/results as pages of the site. Each run's
README.md becomes results/<run>/index.md (with the images beside it), and results/index.md, the
results page, lists every run folder with its README's title, generated at each build so it
cannot miss a run."""
from pathlib import Path

from mkdocs.structure.files import File

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
IMAGES = (".png", ".svg")


def title(readme: Path) -> str:
    """The README's first heading (or first line), without the leading #s."""
    for line in readme.read_text().splitlines():
        if line.strip():
            return line.lstrip("#").strip()
    return ""


def index_page(runs) -> str:
    lines = ["# Results: every measurement run", "",
             "Each run's folder under `benchmarks/results/` holds its tables and, where written, a "
             "README with the command, the commit, the machine, its load and what it showed. "
             "Runs whose README says so are superseded by a later run; none is deleted.", "",
             "| run | what it measured |", "| --- | --- |"]
    for run in runs:
        readme = run / "README.md"
        if readme.exists():
            lines.append(f"| [{run.name}]({run.name}/index.md) | {title(readme)} |")
        else:
            files = ", ".join(sorted(p.name for p in run.iterdir() if p.is_file())[:6])
            lines.append(f"| `{run.name}` | tables only: {files} |")
    return "\n".join(lines) + "\n"


def on_files(files, config):
    runs = sorted(p for p in RESULTS.iterdir() if p.is_dir())
    files.append(File.generated(config, "results/index.md", content=index_page(runs)))
    for run in runs:
        readme = run / "README.md"
        if not readme.exists():
            continue
        files.append(File.generated(config, f"results/{run.name}/index.md",
                                    abs_src_path=str(readme)))
        for image in run.iterdir():
            if image.suffix in IMAGES:
                files.append(File.generated(config, f"results/{run.name}/{image.name}",
                                            abs_src_path=str(image)))
    return files
