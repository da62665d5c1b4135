"""Notebook conventions: the toc and the notebooks agree, and every notebook is committed
executed, in order, with outputs and no errors, its first code cell the tagged setup cell."""

import json
import re
from pathlib import Path

import pytest

from notebook_tools import ROOT, SETUP_TAG, toc_files, toc_notebooks

NOTEBOOKS = toc_notebooks()
CHAPTER_NAME = re.compile(r"^\d\d_[a-z0-9_]+\.ipynb$")


def load(path):
    return json.loads(path.read_text())


def code_cells(path):
    return [cell for cell in load(path)["cells"] if cell["cell_type"] == "code"]


def test_every_toc_entry_exists():
    missing = [name for name in toc_files()
               if not any((ROOT / f"{name}{suffix}").exists() for suffix in (".ipynb", ".md"))]
    assert not missing, f"_toc.yml lists files that do not exist: {missing}"


def test_every_notebook_is_in_the_toc():
    listed = {path.resolve() for path in NOTEBOOKS}
    on_disk = {path.resolve() for path in (ROOT / "notebooks").glob("*.ipynb")}
    assert on_disk, "no notebooks found"
    assert on_disk == listed, f"notebooks missing from _toc.yml: {sorted(p.name for p in on_disk - listed)}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_name_and_kernelspec(path):
    assert CHAPTER_NAME.match(path.name), f"{path.name} should be named NN_topic.ipynb"
    assert load(path)["metadata"]["kernelspec"]["name"] == "python3"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_first_code_cell_is_the_tagged_setup_cell(path):
    cells = code_cells(path)
    first = cells[0]
    tags = first.get("metadata", {}).get("tags", [])
    assert SETUP_TAG in tags and "nbval-ignore-output" in tags, f"first code cell tags: {tags}"
    assert any(tag in tags for tag in ("hide-cell", "remove-cell", "hide-input")), "setup cell must be hidden in the book"
    source = "".join(first["source"])
    assert 'find_spec("posenc") is None' in source and "pip" in source and "POSENC_INSTALL_SOURCE" in source
    assert "-e " not in source and "--editable" not in source, "Colab install must be non-editable"
    for cell in cells[1:]:
        assert "pip install" not in "".join(cell["source"]), "only the setup cell may install anything"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_executed_in_order_with_outputs_and_no_errors(path):
    cells = code_cells(path)
    counts = [cell.get("execution_count") for cell in cells]
    assert counts == list(range(1, len(cells) + 1)), f"execution counts {counts}: re-run with `make execute`"
    errors = [o for cell in cells for o in cell.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors, "notebook has error outputs"
    assert any(cell.get("outputs") for cell in cells[1:]), "notebook has no committed outputs"
    for cell in cells:
        for output in cell.get("outputs", []):
            text = "".join(output.get("data", {}).get("text/plain", ""))
            assert not re.search(r"<matplotlib\.[^>]* at 0x", text), "a plot cell leaks an object repr: end it with ; or plt.show()"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_chapter_skeleton(path):
    markdown = "\n".join("".join(c["source"]) for c in load(path)["cells"] if c["cell_type"] == "markdown")
    assert markdown.lstrip().startswith("# "), "a chapter starts with its title"
    for heading in ("What you will learn", "Prerequisites", "## Summary", "## Exercises", "## References"):
        assert heading in markdown, f"missing section: {heading}"
    assert ":class: dropdown" in markdown, "exercise solutions should be hidden behind a dropdown"
    assert "{cite}" in markdown, "a chapter cites its sources"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_setup_cell_installs_from_the_configured_repository(path):
    import yaml

    repository = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]
    source = "".join(code_cells(path)[0]["source"])
    assert f'POSENC_REPOSITORY = "{repository}"' in source, f"setup cell must install from {repository}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_code_lines_fit_the_page(path):
    """The book's code column shows about 90 characters; longer lines hide behind a scroll bar."""
    long = [line for cell in code_cells(path) for line in "".join(cell["source"]).splitlines() if len(line) > 90]
    assert not long, f"code lines over 90 characters: {long}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_most_outputs_are_compared(path):
    """nbval compares every output except NBVAL_IGNORE_OUTPUT cells: at most 30% of a chapter's code cells
    (the setup cell included) may be volatile, so that nearly everything the reader sees is checked."""
    cells = code_cells(path)
    ignored = [cell for cell in cells if "NBVAL_IGNORE_OUTPUT" in "".join(cell["source"])
               or "nbval-ignore-output" in cell.get("metadata", {}).get("tags", [])]
    assert len(ignored) <= 0.3 * len(cells), f"{len(ignored)} of {len(cells)} code cells ignore their output"
