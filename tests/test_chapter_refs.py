"""Chapters are numbered as they are read, from one source (_toc.yml), and refer to each other by links.

A chapter's number is its place in _toc.yml; its file name and its title carry that number; every chapter
number in the prose (notebooks' markdown, the book's pages, the README) is the text of a link to that
chapter's notebook (book/_ext/chapter_refs.py). ``renumber`` is tested end to end on a small repository.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from notebook_tools import ROOT, toc_files

sys.path.insert(0, str(ROOT / "book" / "_ext"))
import book_chapters  # noqa: E402
import chapter_refs  # noqa: E402

CHAPTERS = {"06_rope": 6, "07_context_extension": 7}


def test_every_chapter_number_in_the_prose_is_a_link_to_that_chapter():
    found = chapter_refs.all_problems()
    assert found == {}, "run `python tests/notebook_tools.py check-references`:\n" + json.dumps(found, indent=1)


def test_chapters_are_numbered_in_reading_order_in_files_and_titles():
    chapters = book_chapters.chapters()
    notebooks = [name for name in toc_files() if name.startswith("notebooks/")]
    assert [c.docname for c in chapters] == notebooks
    assert [c.number for c in chapters] == list(range(1, len(notebooks) + 1))
    for chapter in chapters:  # the file and the title carry the number the sidebar shows
        assert chapter.docname == f"notebooks/{chapter.number:02d}_" + chapter.docname.split("_", 1)[1]
        assert chapter.title.startswith(f"{chapter.number}. ")
    assert chapter_refs.numbers() == {c.docname.split("/")[1]: c.number for c in chapters}


@pytest.mark.parametrize("text", [
    "RoPE ([chapter 6](06_rope.ipynb)) and [Chapter 7](07_context_extension.ipynb)'s recipes.",
    "chapters [6](06_rope.ipynb) and [7](07_context_extension.ipynb)",
    "from book/: [chapter 6](../notebooks/06_rope.ipynb#the-rotation), the [real-model chapter](07_context_extension.ipynb)",
    "Code keeps its numbers: `chapter 9` and\n```\nmake unit  # chapter 1\n```\n",
    "## Add a chapter\n\n1. Create a notebook.",  # a list item after the word is no chapter number
    "6. **[Learned and 2D tables](06_rope.ipynb)**",  # the 2 of 2D is no chapter number
    "```{admonition} Solution\n:class: dropdown\nAs in [chapter 6](06_rope.ipynb):\n\n    x = 1  # chapter 9\n```",
])
def test_links_with_their_targets_numbers_pass(text):
    assert chapter_refs.problems(text, CHAPTERS) == []


@pytest.mark.parametrize("text, problem", [
    ("as [chapter 7](06_rope.ipynb) shows", "another number than chapter 6"),  # a planted wrong number
    ("chapters [6](06_rope.ipynb) and [6](07_context_extension.ipynb)", "another number than chapter 7"),
    ("as chapter 6 shows", "types a chapter number with no link"),
    ("chapters [6](06_rope.ipynb) and 7", "types a chapter number with no link"),
    ("see ch. 7", "types a chapter number with no link"),
    ("see [chapter 9](09_nope.ipynb)", "09_nope.ipynb is not a chapter"),
    ("5. **[RoPE](06_rope.ipynb)** rotates pairs", "list item 5. links chapter 6"),
    # a directive's fence holds prose (a solution, the glossary), not code: its numbers are checked
    ("```{admonition} Solution\n:class: dropdown\nAs chapter 6 shows.\n```", "types a chapter number with no link"),
])
def test_a_wrong_or_typed_number_is_found(text, problem):
    found = chapter_refs.problems(text, CHAPTERS)
    assert len(found) == 1 and problem in found[0]


def test_a_planted_wrong_number_in_a_real_chapter_is_found():
    cells = json.loads((ROOT / "notebooks" / "07_context_extension.ipynb").read_text())["cells"]
    text = "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    chapters = chapter_refs.numbers()
    assert chapter_refs.problems(text, chapters) == []
    planted = re.sub(r"\[([Cc]hapter) 6\]\(06_rope", r"[\1 5](06_rope", text, count=1)
    assert planted != text and len(chapter_refs.problems(planted, chapters)) == 1


def test_typed_numbers_in_code_are_mapped_and_a_range_that_breaks_is_refused():
    mapping = {11: 13, 17: 11, 12: 20}
    assert chapter_refs.map_typed("chapter 17's runs; chapters 7, 11 and 12; ch. 3", mapping) == \
        "chapter 11's runs; chapters 7, 13 and 20; ch. 3"
    assert chapter_refs.map_typed("chapters 3-9 (the methods)", mapping) == "chapters 3-9 (the methods)"
    with pytest.raises(ValueError, match="no range"):
        chapter_refs.map_typed("chapters 11-12", mapping)


def _git(cwd, *args):
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def test_renumber_renames_retitles_relinks_and_redirects(tmp_path):
    """Chapter 3 moved before chapter 2 in _toc.yml: files, titles, links, typed numbers and redirects follow."""
    def notebook(title, markdown, code="", output=""):
        cells = [{"cell_type": "markdown", "metadata": {}, "source": [f"# {title}\n\n{markdown}"]},
                 {"cell_type": "code", "metadata": {}, "execution_count": 1, "source": [code],
                  "outputs": [{"output_type": "stream", "name": "stdout", "text": [output]}]}]
        return json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5})

    (tmp_path / "notebooks").mkdir()
    (tmp_path / "book").mkdir()
    (tmp_path / "tests").mkdir()
    files = {
        "notebooks/01_a.ipynb": notebook("1. A", "Read [chapter 3](03_c.ipynb) after [chapter 2](02_b.ipynb)."),
        "notebooks/02_b.ipynb": notebook("2. B", "Builds on chapters [1](01_a.ipynb) and [3](03_c.ipynb).",
                                         "# as in chapter 3", "chapter 2 prints this"),
        "notebooks/03_c.ipynb": notebook("3. C", "See [chapter 1](01_a.ipynb)."),
        "book/redirects.json": json.dumps({"notebooks/00_old": "notebooks/03_c"}),
        "book/page.md": "[Chapter 2](../notebooks/02_b.ipynb), and [Chapter 3](../notebooks/03_c.ipynb#x).\n"
                        "\n2. **[B](../notebooks/02_b.ipynb)**\n3. **[C](../notebooks/03_c.ipynb)**\n",
        "tests/test_x.py": '"""Chapter 3\'s table."""\nPATH = "notebooks/02_b.ipynb"\n',
        "_toc.yml": "format: jb-book\nroot: book/page\nchapters:\n- file: notebooks/01_a\n"
                    "- file: notebooks/03_c\n- file: notebooks/02_b\n",
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")

    renamed = chapter_refs.renumber(tmp_path)

    assert renamed == {"03_c": "02_c", "02_b": "03_b"}
    assert sorted(p.name for p in (tmp_path / "notebooks").iterdir()) == ["01_a.ipynb", "02_c.ipynb", "03_b.ipynb"]
    a, b, c = (json.loads((tmp_path / "notebooks" / n).read_text())["cells"]
               for n in ("01_a.ipynb", "03_b.ipynb", "02_c.ipynb"))
    assert "".join(a[0]["source"]) == "# 1. A\n\nRead [chapter 2](02_c.ipynb) after [chapter 3](03_b.ipynb)."
    assert "".join(b[0]["source"]).startswith("# 3. B\n\nBuilds on chapters [1](01_a.ipynb) and [2](02_c.ipynb).")
    assert "".join(c[0]["source"]).startswith("# 2. C")
    assert b[1]["source"] == ["# as in chapter 2"] and b[1]["outputs"][0]["text"] == ["chapter 3 prints this"]
    assert (tmp_path / "book/page.md").read_text() == \
        "[Chapter 3](../notebooks/03_b.ipynb), and [Chapter 2](../notebooks/02_c.ipynb#x).\n" \
        "\n3. **[B](../notebooks/03_b.ipynb)**\n2. **[C](../notebooks/02_c.ipynb)**\n"
    assert (tmp_path / "tests/test_x.py").read_text() == '"""Chapter 2\'s table."""\nPATH = "notebooks/03_b.ipynb"\n'
    assert "notebooks/02_c" in (tmp_path / "_toc.yml").read_text()
    redirects = json.loads((tmp_path / "book/redirects.json").read_text())
    # old pages lead to the new names, chained through the earlier rename; none from a page that exists
    assert redirects == {"notebooks/00_old": "notebooks/02_c", "notebooks/02_b": "notebooks/03_b",
                         "notebooks/03_c": "notebooks/02_c"}
