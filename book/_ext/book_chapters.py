"""Facts about the book's chapters, read from the notebooks that _toc.yml lists.

Used by the teaching page (``book/teaching.md``, through the ``chapter-table`` directive of posenc_book)
and by ``book_figures.py`` (the chapter dependency graph). Nothing here is typed twice: the prerequisites
come from each chapter's ``**Prerequisites.**`` paragraph, the run times from the cell execution times that
Jupyter records in the committed notebook (``metadata.execution``).
"""

from __future__ import annotations

import json
import math
import re
import sys
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from notebook_tools import toc_entries  # noqa: E402  (one reader of _toc.yml, shared with the tests)

from chapter_refs import chapter_numbers  # noqa: E402, F401  (typed or linked: "chapters [6](06_rope.ipynb) and 7")

# Reading-time estimate (stated on the teaching page): prose at 150 words a minute (technical text with
# formulas), visible code at 20 lines a minute; code folded behind a toggle is not counted.
WORDS_PER_MINUTE = 150
CODE_LINES_PER_MINUTE = 20
FOLDED_TAGS = {"hide-input", "hide-cell", "remove-input", "remove-cell"}

@dataclass(frozen=True)
class Chapter:
    number: int
    docname: str              # as in _toc.yml, e.g. "notebooks/06_rope"
    part: str                 # the caption of its part in _toc.yml, e.g. "Relative positions"
    title: str                # the notebook's first heading, e.g. "6. Rotary position embedding (RoPE)"
    prerequisites: frozenset  # chapter numbers the Prerequisites paragraph names
    words: int                # words of prose (markdown cells)
    code_lines: int           # non-blank lines of code in cells that are not folded away
    exercises: int            # numbered exercises under "## Exercises"
    run_seconds: float | None  # sum of the recorded cell execution times; None if a cell has none

    @property
    def short_title(self) -> str:
        """The title without its number and without what follows a colon or a comma."""
        return re.split(r"[:,]", self.title.split(". ", 1)[1])[0].strip()

    @property
    def reading_minutes(self) -> int:
        """The reading estimate, rounded up to 5 minutes."""
        minutes = self.words / WORDS_PER_MINUTE + self.code_lines / CODE_LINES_PER_MINUTE
        return 5 * math.ceil(minutes / 5)


def _timestamp(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def run_seconds(notebook: dict) -> float | None:
    """Sum over code cells of (reply - start) as Jupyter records them; None if any code cell lacks a record."""
    total = 0.0
    for cell in notebook["cells"]:
        if cell["cell_type"] != "code":
            continue
        record = cell.get("metadata", {}).get("execution")
        if not record or "iopub.status.busy" not in record or "shell.execute_reply" not in record:
            return None
        total += (_timestamp(record["shell.execute_reply"]) - _timestamp(record["iopub.status.busy"])).total_seconds()
    return total


def _section(markdown: str, heading: str) -> str:
    match = re.search(rf"^## {re.escape(heading)}\s*$(.*?)(?=^## |\Z)", markdown, re.MULTILINE | re.DOTALL)
    return match.group(1) if match else ""


def read_chapter(path: Path, docname: str, part: str = "") -> Chapter:
    notebook = json.loads(path.read_text())
    cells = notebook["cells"]
    markdown = "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    title = re.search(r"^# (.+)$", markdown, re.MULTILINE).group(1).strip()
    number = int(re.match(r"(\d+)\.", title).group(1))
    paragraph = re.search(r"\*\*Prerequisites\.\*\*(.*?)(?:\n\s*\n|\Z)", markdown, re.DOTALL)
    if paragraph is None:
        raise ValueError(f"{docname}: no **Prerequisites.** paragraph")
    visible_code = [c for c in cells if c["cell_type"] == "code"
                    and not FOLDED_TAGS & set(c.get("metadata", {}).get("tags", []))]
    return Chapter(
        number=number,
        docname=docname,
        part=part,
        title=title,
        prerequisites=frozenset(chapter_numbers(paragraph.group(1)) - {number}),
        words=len(re.sub(r"```.*?```", " ", markdown, flags=re.DOTALL).split()),
        code_lines=sum(1 for c in visible_code for line in "".join(c["source"]).splitlines() if line.strip()),
        exercises=len(re.findall(r"^\*\*\d+\.\*\*", _section(markdown, "Exercises"), re.MULTILINE)),
        run_seconds=run_seconds(notebook),
    )


def chapters(root: Path = ROOT) -> list[Chapter]:
    """The chapters (the notebooks of _toc.yml), in reading order."""
    return [read_chapter(root / f"{name}.ipynb", name, part) for name, part in toc_entries(root)
            if (root / f"{name}.ipynb").exists()]


def prerequisite_edges(chapter_list: list[Chapter]) -> set[tuple[int, int]]:
    """(prerequisite, chapter) for every prerequisite a chapter names."""
    return {(before, chapter.number) for chapter in chapter_list for before in chapter.prerequisites}


def transitive_reduction(edges: set[tuple[int, int]]) -> set[tuple[int, int]]:
    """The edges not implied by a longer path (the graph must have no cycle)."""
    successors: dict[int, set[int]] = {}
    for a, b in edges:
        successors.setdefault(a, set()).add(b)

    def reachable(start: int, skip_direct: int) -> bool:
        stack = [n for n in successors.get(start, ()) if n != skip_direct]
        seen = set(stack)
        while stack:
            node = stack.pop()
            if node == skip_direct:
                return True
            for n in successors.get(node, ()):
                if n not in seen:
                    seen.add(n)
                    stack.append(n)
        return False

    return {(a, b) for a, b in edges if not reachable(a, b)}


def format_run_time(seconds: float | None) -> str:
    """A run time as the page prints it: "12 s" under a minute, else "7.0 min"; "not recorded" for None."""
    if seconds is None:
        return "not recorded"
    if seconds < 59.5:
        return f"{round(seconds)} s"
    return f"{seconds / 60:.1f} min"


def format_numbers(numbers) -> str:
    """Chapter numbers as a reader writes them: [3, 4, 5, 6, 8, 13] -> "3-6, 8, 13"; none -> "none"."""
    runs: list[list[int]] = []
    for n in sorted(numbers):
        if runs and n == runs[-1][-1] + 1:
            runs[-1].append(n)
        else:
            runs.append([n])
    return ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 2 else ", ".join(map(str, r)) for r in runs) or "none"
