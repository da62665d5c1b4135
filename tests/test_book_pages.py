"""The book's own pages and metadata: the teaching page's facts, the citation, the version, the changelog.

The generators live in book/_ext (they run when the book is built); these tests check them on hand-made
inputs and check that what is committed agrees with its sources: the dependency graph with the chapters'
Prerequisites paragraphs, CITATION.cff with _config.yml, every copy of the version with posenc's.
The built pages themselves are checked in a browser by tests/test_browser.py.
"""

from __future__ import annotations

import re
import sys
import tomllib

import pytest
import yaml

from notebook_tools import ROOT, toc_files

sys.path.insert(0, str(ROOT / "book" / "_ext"))
import book_chapters  # noqa: E402
import book_figures  # noqa: E402
import chapter_refs  # noqa: E402
import book_meta  # noqa: E402
from repository_url import pages_url  # noqa: E402

CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
CITATION = yaml.safe_load((ROOT / "CITATION.cff").read_text())
GRAPH = ROOT / "book" / "_static" / "chapter_graph.svg"


@pytest.fixture(scope="module")
def chapters():
    return book_chapters.chapters()


# --- reading the Prerequisites paragraphs ---------------------------------------------------------------

@pytest.mark.parametrize("sentence, numbers", [
    ("Matrix products, the softmax, and what one transformer layer computes. No earlier\nchapter.", set()),
    ("Chapter 1 (attention cannot see order without help).", {1}),
    ("Chapter 2 (the wish list). Sines and cosines, and the rotation matrix in 2D.", {2}),
    ("Chapters 1 to 3.", {1, 2, 3}),
    ("Chapters 1 and 3 (attention; the sinusoidal code and its rotations).", {1, 3}),
    ("Chapters 1 (the causal mask), 4 (learned tables) and 6 (RoPE).", {1, 4, 6}),
    ("Chapters 3-9 (the methods), and chapter 7 for the truncated baseline", {3, 4, 5, 6, 7, 8, 9}),
    ("The method chapters (3-9), chapter 7's and chapter 10's measurements, and the\npart on 2026's models "
     "(chapters 13-16).", {3, 4, 5, 6, 7, 8, 9, 10, 13, 14, 15, 16}),
    ("Chapter 6 (RoPE, its pairings, partial rotation) and chapter 7 (PI, NTK-aware\nscaling, YaRN, "
     "Llama 3's rule). No training in this chapter.", {6, 7}),
    ("Chapter 4 (learned 2D tables and their bicubic resizing), chapter 6 (RoPE, the\nrotation) and "
     "chapter 10 (seeds).", {4, 6, 10}),
])
def test_chapter_numbers_reads_the_forms_the_chapters_use(sentence, numbers):
    assert book_chapters.chapter_numbers(sentence) == numbers


def test_every_chapter_names_prerequisites_that_exist(chapters):
    numbers = [c.number for c in chapters]
    assert len(chapters) == sum(1 for name in toc_files() if name.startswith("notebooks/")) >= 16
    assert sorted(numbers) == list(range(1, len(numbers) + 1))  # chapter numbers 1..N, each once
    for chapter in chapters:
        assert chapter.docname.split("/")[-1].startswith(f"{chapter.number:02d}_"), chapter.docname
        assert chapter.prerequisites <= set(numbers), (chapter.number, chapter.prerequisites)
        assert chapter.number not in chapter.prerequisites
    assert not next(c for c in chapters if c.number == 1).prerequisites
    assert all(c.prerequisites for c in chapters if c.number != 1)  # every later chapter builds on one


def test_transitive_reduction_drops_implied_arrows_only():
    edges = {(1, 2), (2, 3), (1, 3), (3, 5), (1, 5), (4, 5)}
    assert book_chapters.transitive_reduction(edges) == {(1, 2), (2, 3), (3, 5), (4, 5)}
    assert book_chapters.transitive_reduction(set()) == set()


def test_the_committed_graph_draws_what_the_prerequisites_name(chapters):
    svg = GRAPH.read_text()
    drawn = {(int(a), int(b)) for a, b in re.findall(r'<g id="edge-(\d+)-(\d+)"', svg)}
    named = book_chapters.transitive_reduction(book_chapters.prerequisite_edges(chapters))
    assert drawn == named, ("book/_static/chapter_graph.svg is out of step with the Prerequisites paragraphs: "
                            "run `.venv/bin/python book/_ext/book_figures.py` "
                            f"(missing {sorted(named - drawn)}, extra {sorted(drawn - named)})")
    boxes = {int(n) for n in re.findall(r'<g id="chapter-(\d+)"', svg)}
    assert boxes == {c.number for c in chapters}


def test_the_committed_graph_is_what_the_script_draws_now(chapters, tmp_path):
    book_figures.draw_chapter_graph(chapters, tmp_path / "graph.svg")
    assert (tmp_path / "graph.svg").read_text() == GRAPH.read_text(), \
        "run `.venv/bin/python book/_ext/book_figures.py` and commit book/_static/chapter_graph.svg"


# --- time per chapter ---------------------------------------------------------------------------------

def _cell(busy: str | None, reply: str | None = None) -> dict:
    metadata = {} if busy is None else {"execution": {"iopub.status.busy": busy, "shell.execute_reply": reply}}
    return {"cell_type": "code", "metadata": metadata, "source": [], "outputs": []}


def test_run_seconds_sums_the_recorded_cell_times():
    notebook = {"cells": [
        {"cell_type": "markdown", "metadata": {}, "source": ["# 1. Title"]},
        _cell("2026-11-23T09:15:05.000000Z", "2026-11-23T09:15:07.500000Z"),  # 2.5 s
        _cell("2026-11-23T09:16:00.250000Z", "2026-11-23T09:16:01.250000Z"),  # 1 s, after a pause that is not counted
    ]}
    assert book_chapters.run_seconds(notebook) == pytest.approx(3.5)
    notebook["cells"].append(_cell(None))  # a cell without a record: the time is unknown, not smaller
    assert book_chapters.run_seconds(notebook) is None


@pytest.mark.parametrize("seconds, text", [(None, "not recorded"), (0.4, "0 s"), (12.4, "12 s"), (59.4, "59 s"),
                                           (59.6, "1.0 min"), (417.9, "7.0 min"), (113.6, "1.9 min")])
def test_run_times_are_printed_rounded(seconds, text):
    assert book_chapters.format_run_time(seconds) == text


def test_reading_estimate_rounds_up_to_five_minutes():
    def chapter(words, code_lines):
        return book_chapters.Chapter(1, "notebooks/01_x", "", "1. X", frozenset(), words, code_lines, 0, None)

    assert chapter(300, 40).reading_minutes == 5      # 2 min of prose + 2 min of code
    assert chapter(1500, 0).reading_minutes == 10     # exactly 10
    assert chapter(1501, 0).reading_minutes == 15
    assert chapter(3000, 200).reading_minutes == 30   # 20 + 10


@pytest.mark.parametrize("numbers, text", [((), "none"), ((1,), "1"), ((1, 3), "1, 3"), ((1, 2), "1, 2"),
                                           ((1, 2, 3), "1-3"), ((3, 4, 5, 6, 8, 13), "3-6, 8, 13")])
def test_chapter_lists_are_written_as_ranges(numbers, text):
    assert book_chapters.format_numbers(numbers) == text


def test_chapter_facts_are_read_from_the_notebook(chapters):
    rope = next(c for c in chapters if c.docname == "notebooks/06_rope")
    assert rope.number == 6 and rope.title.startswith("6. ") and "RoPE" in rope.title
    assert rope.prerequisites == {3, 5}  # "Chapter 3 (sinusoids and rotations) and chapter 5 (why relative)."
    assert rope.exercises >= 3 and rope.words > 1000 and rope.code_lines > 50
    assert rope.part == "Relative positions"


def test_every_chapter_has_a_recorded_run_time(chapters):
    """The teaching page prints it; `make execute` records it (nbclient keeps each cell's times)."""
    missing = [c.docname for c in chapters if c.run_seconds is None]
    assert missing == [], f"code cells without metadata.execution (re-run with `make execute NB=...`): {missing}"


def test_homework_on_the_teaching_page_names_exercises_that_exist(chapters):
    """Every exercise the teaching page recommends is one the chapter has."""
    text = chapter_refs.LINK.sub(lambda link: link["text"], (ROOT / "book" / "teaching.md").read_text())
    count = {c.number: c.exercises for c in chapters}
    named = []
    for number, bullet in re.findall(r"^- \*\*Chapter (\d+)\.\*\*(.*?)(?=^- |^#|\Z)", text, re.M | re.S):
        for label_list in re.findall(r"(?:Homework|Programming homework|Lab|Projects?|In class|Discussion|"
                                     r"Written question|For strong students): ([^.;]*)", bullet):
            for exercise in re.findall(r"(?:^|, | and )(\d+)\b", re.sub(r"\([^()]*(?:\([^()]*\))*[^()]*\)", "",
                                                                        label_list)):
                named.append((int(number), int(exercise)))
    for number, exercise in re.findall(r"chapter (\d+), exercises? (\d+)", text):
        named.append((int(number), int(exercise)))
    for number, first, second in re.findall(r"chapter (\d+), exercises (\d+) and (\d+)", text):
        named.append((int(number), int(second)))
    assert len({n for n, _ in named}) == len(chapters)  # the page covers every chapter
    wrong = [(n, e) for n, e in named if not 1 <= e <= count[n]]
    assert wrong == [], f"exercises the teaching page names but the chapters do not have: {wrong}"


# --- citation, version, changelog -----------------------------------------------------------------------

def test_citation_cff_has_what_cff_1_2_0_requires():
    assert CITATION["cff-version"] == "1.2.0"
    for key in ("message", "title", "authors", "version", "date-released", "license", "repository-code", "url"):
        assert CITATION.get(key), key
    assert CITATION["authors"] == [{"name": "The posenc authors"}]  # an entity, as CFF writes one
    assert CITATION["license"] == "MIT"
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", str(CITATION["date-released"]))
    preferred = CITATION["preferred-citation"]
    assert preferred["type"] == "book" and preferred["authors"] == CITATION["authors"]
    assert str(preferred["year"]) == str(CITATION["date-released"])[:4]


def test_citation_agrees_with_the_book():
    assert CITATION["title"] == CITATION["preferred-citation"]["title"] == CONFIG["title"]
    assert CITATION["authors"][0]["name"] == CONFIG["author"]
    repository = CONFIG["repository"]["url"]
    assert CITATION["repository-code"] == CITATION["preferred-citation"]["repository-code"] == repository
    assert CITATION["url"] == CITATION["preferred-citation"]["url"] == pages_url(repository)


def test_pages_url_is_the_github_pages_address():
    assert pages_url("https://github.com/posenc-book/posenc") == "https://posenc-book.github.io/posenc/"
    assert pages_url("https://github.com/Alice/notes") == "https://alice.github.io/notes/"
    assert pages_url("https://github.com/alice/alice.github.io") == "https://alice.github.io/"
    with pytest.raises(ValueError):
        pages_url("https://gitlab.com/alice/notes")


def _bibtex_fields(entry: str) -> dict[str, str]:
    return {name: value for name, value in re.findall(r"^\s*(\w+)\s*=\s*\{(.*)\},?$", entry, re.M)}


def test_bibtex_entry_agrees_with_citation_cff():
    entry = book_meta.bibtex(CITATION)
    assert entry.startswith("@book{posenc2026,") and entry.rstrip().endswith("}")
    fields = _bibtex_fields(entry)
    assert fields["title"] == CITATION["title"]
    assert fields["version"] == CITATION["version"]
    assert fields["url"] == CITATION["url"]
    assert fields["year"] == str(CITATION["preferred-citation"]["year"])
    assert fields["author"] == "{The posenc authors}"  # braces: an entity, not "authors, The posenc"
    assert CITATION["repository-code"] in fields["note"]
    assert entry.count("{") == entry.count("}")


def test_bibtex_entry_follows_the_cff_it_is_given():
    changed = {**CITATION, "preferred-citation": {**CITATION["preferred-citation"], "title": "Another title",
                                                  "version": "9.9.9",
                                                  "authors": [{"family-names": "Doe", "given-names": "Jane"}]}}
    fields = _bibtex_fields(book_meta.bibtex(changed))
    assert (fields["title"], fields["version"], fields["author"]) == ("Another title", "9.9.9", "Doe, Jane")


def test_the_citation_and_changelog_pages_show_their_sources():
    citation_page = (ROOT / "book" / "citation.md").read_text()
    assert "```{citation-bibtex}" in citation_page
    assert re.search(r"```\{literalinclude\} \.\./CITATION\.cff\n:language: yaml", citation_page)
    assert (ROOT / "book" / "changelog.md").read_text().strip() == "```{include} ../CHANGELOG.md\n```"
    assert {"book/teaching", "book/citation", "book/changelog"} <= set(toc_files())


def test_every_copy_of_the_version_agrees():
    version = book_meta.package_version()
    assert re.fullmatch(r"\d+\.\d+\.\d+", version)
    assert re.search(rf'^__version__ = "{re.escape(version)}"$', (ROOT / "posenc" / "__init__.py").read_text(), re.M)
    assert tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"] == version
    assert str(CITATION["version"]) == str(CITATION["preferred-citation"]["version"]) == version
    releases = re.findall(r"^## \[(\d+\.\d+\.\d+)\] - (\d{4}-\d{2}-\d{2})$", (ROOT / "CHANGELOG.md").read_text(), re.M)
    assert releases, "CHANGELOG.md has no '## [x.y.z] - YYYY-MM-DD' entry"
    assert releases[0] == (version, str(CITATION["date-released"])), \
        "the top entry of CHANGELOG.md should be this version, released on CITATION.cff's date-released"
    versions = [tuple(map(int, v.split("."))) for v, _ in releases]
    assert versions == sorted(versions, reverse=True) and len(set(versions)) == len(versions)
