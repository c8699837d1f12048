"""MkDocs hook: the measurement runs of benchmarks/results as pages of the site. Each run's
README.md becomes results/<run>/index.md (with the images beside it), and results/index.md, the
results page, lists every run folder with its README's title, generated at each build so it
cannot miss a run.

A run that a later run superseded says so in the first line of its README, naming the newer
folder: "Superseded by `<newer run>`: why.". The results page lists it under the current runs,
marked with a link to the newer one, and its page opens with the same link; a name that is not a
run folder with a README fails the build."""
import re
from pathlib import Path

from mkdocs.structure.files import File

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
IMAGES = (".png", ".svg")
#: The superseded mark: the first line of a run's README.
SUPERSEDED = re.compile(r"Superseded by `([^`/]+)`:? ?(.*)")


def first_line(readme: Path) -> str:
    return next((line for line in readme.read_text().splitlines() if line.strip()), "")


def superseded_by(readme: Path) -> str | None:
    """The newer run its README's first line names, or None."""
    mark = SUPERSEDED.fullmatch(first_line(readme).strip())
    if mark is None:
        return None
    if not (readme.parent.parent / mark.group(1) / "README.md").exists():
        raise ValueError(f"{readme}: superseded by {mark.group(1)!r}, which is not a run folder "
                         f"with a README.md in {readme.parent.parent}")
    return mark.group(1)


def title(readme: Path) -> str:
    """The README's first heading (or first line other than the superseded mark), without the
    leading #s."""
    lines = [line for line in readme.read_text().splitlines()
             if line.strip() and not SUPERSEDED.fullmatch(line.strip())]
    heading = next((line for line in lines if line.startswith("#")), lines[0] if lines else "")
    return heading.lstrip("#").strip()


def row(run: Path) -> str:
    readme = run / "README.md"
    if not readme.exists():
        files = ", ".join(sorted(p.name for p in run.iterdir() if p.is_file())[:6])
        return f"| `{run.name}` | tables only: {files} |"
    newer = superseded_by(readme)
    mark = f"**superseded by [{newer}]({newer}/index.md)**: " if newer else ""
    return f"| [{run.name}]({run.name}/index.md) | {mark}{title(readme)} |"


def index_page(runs) -> str:
    runs = list(runs)
    old = [run for run in runs
           if (run / "README.md").exists() and superseded_by(run / "README.md")]
    lines = ["# Results: every measurement run", "",
             "Each run's folder under `benchmarks/results/` holds its tables and, where written, a "
             "README with the command, the commit, the machine, its load and what it showed. "
             "A run that a later run superseded says so in its README's first line and is listed "
             "under Superseded runs; none is deleted.", "",
             "| run | what it measured |", "| --- | --- |"]
    lines += [row(run) for run in runs if run not in old]
    lines += ["", "## Superseded runs", "", "| run | what it measured |", "| --- | --- |"]
    lines += [row(run) for run in old]
    return "\n".join(lines) + "\n"


def run_page(readme: Path) -> str:
    """The README as its page: the superseded mark becomes a warning that links the newer run."""
    text = readme.read_text()
    newer = superseded_by(readme)
    if newer is None:
        return text
    why = SUPERSEDED.fullmatch(first_line(readme).strip()).group(2)
    rest = text.split(first_line(readme), 1)[1].lstrip("\n")
    return (f'!!! warning "Superseded"\n    By [{newer}](../{newer}/index.md)'
            f"{': ' + why if why else '.'}\n\n{rest}")


def on_files(files, config):
    runs = sorted(p for p in RESULTS.iterdir() if p.is_dir())
    files.append(File.generated(config, "results/index.md", content=index_page(runs)))
    for run in runs:
        readme = run / "README.md"
        if not readme.exists():
            continue
        files.append(File.generated(config, f"results/{run.name}/index.md",
                                    content=run_page(readme)))
        for image in run.iterdir():
            if image.suffix in IMAGES:
                files.append(File.generated(config, f"results/{run.name}/{image.name}",
                                            abs_src_path=str(image)))
    return files
