"""Notebook helpers for the Makefile and the convention tests.

    python tests/notebook_tools.py list                  # notebooks in _toc.yml, in reading order
    python tests/notebook_tools.py list --heaviest-first # the same, longest recorded run first
    python tests/notebook_tools.py execute [NB.ipynb...] # re-execute in place (default: all), print times
    python tests/notebook_tools.py set-repository [https://github.com/OWNER/REPO]  # see repository_url.py
    python tests/notebook_tools.py check-repository      # every copy of the repository URL agrees with _config.yml
    python tests/notebook_tools.py renumber              # number the chapters in _toc.yml's order (chapter_refs.py)
    python tests/notebook_tools.py check-references      # every chapter reference a link with its target's number
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SETUP_TAG = "setup"


def toc_entries(root: Path = ROOT) -> list[tuple[str, str]]:
    """(file, part caption) for every file entry of _toc.yml, root first (caption ""), in reading order;
    files as written there (no suffix)."""
    import yaml

    toc = yaml.safe_load((root / "_toc.yml").read_text())
    entries = [(toc["root"], "")]

    def walk(items, caption):
        for item in items or []:
            if "file" in item:
                entries.append((item["file"], caption))
            walk(item.get("chapters") or item.get("sections"), caption)

    for part in toc.get("parts") or []:
        walk(part.get("chapters"), part.get("caption", ""))
    walk(toc.get("chapters"), "")
    return entries


def toc_files() -> list[str]:
    """Every file entry of _toc.yml (root first), as written there (no suffix)."""
    return [name for name, _ in toc_entries()]


def toc_notebooks() -> list[Path]:
    """Paths of the notebooks listed in _toc.yml, in reading order."""
    return [ROOT / f"{name}.ipynb" for name in toc_files() if (ROOT / f"{name}.ipynb").exists()]


def recorded_seconds(path: Path) -> float:
    """Seconds the notebook's cells took when it was last executed (nbclient's timing metadata in each
    cell), 0 where none is recorded."""
    import json
    from datetime import datetime

    def moment(stamp: str) -> datetime:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00"))

    total = 0.0
    for cell in json.loads(path.read_text())["cells"]:
        timing = cell.get("metadata", {}).get("execution", {})
        if "iopub.execute_input" in timing and "shell.execute_reply" in timing:
            total += (moment(timing["shell.execute_reply"]) - moment(timing["iopub.execute_input"])).total_seconds()
    return total


def heaviest_first(paths: list[Path]) -> list[Path]:
    """``paths`` with the longest recorded run first: handed out in this order, notebooks run on several
    workers finish close together (the longest-first rule), not with one long notebook started last."""
    return sorted(paths, key=recorded_seconds, reverse=True)


def execute(path: Path) -> float:
    """Run a notebook top to bottom in its own folder and save it with outputs; return seconds taken."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    seconds = time.perf_counter() - start
    nbformat.write(nb, path)
    return seconds


def main(argv: list[str]) -> None:
    if argv and argv[0] in ("set-repository", "check-repository"):
        import repository_url

        sys.exit(repository_url.main(argv))
    if argv and argv[0] in ("renumber", "check-references"):
        sys.path.insert(0, str(ROOT / "book" / "_ext"))
        import chapter_refs

        if argv[0] == "renumber":
            for old, new in chapter_refs.renumber().items():
                print(f"notebooks/{old}.ipynb -> notebooks/{new}.ipynb")
        found = chapter_refs.all_problems()
        for path, problems in found.items():
            print(f"{path}:\n  " + "\n  ".join(problems))
        sys.exit(1 if found else 0)
    if not argv or argv[0] not in ("list", "execute"):
        sys.exit(__doc__)
    if argv[0] == "list":
        paths = heaviest_first(toc_notebooks()) if "--heaviest-first" in argv else toc_notebooks()
        print("\n".join(str(p.relative_to(ROOT)) for p in paths))
        return
    paths = [Path(p).resolve() for p in argv[1:]] or toc_notebooks()
    total = 0.0
    for path in paths:
        seconds = execute(path)
        total += seconds
        print(f"{seconds:7.1f} s  {path.relative_to(ROOT)}", flush=True)
    print(f"{total:7.1f} s  total")


if __name__ == "__main__":
    main(sys.argv[1:])
