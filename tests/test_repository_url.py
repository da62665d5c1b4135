"""The repository URL lives in _config.yml; every other copy agrees with it (tests/repository_url.py)."""

from __future__ import annotations

import shutil
import subprocess
import sys

import nbformat
import pytest

from notebook_tools import ROOT
from repository_url import check, configured, pages_url, parse, set_repository

# What a fork's copy needs from the checkout (CITATION.cff when another part of the project has added it).
COPIED = ["_config.yml", "README.md", "pyproject.toml", "book/intro.md", "CITATION.cff"]


def test_every_copy_of_the_repository_url_agrees_with_config():
    assert check() == []


def test_check_repository_command():
    result = subprocess.run([sys.executable, "tests/notebook_tools.py", "check-repository"], cwd=ROOT,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert configured()["url"] in result.stdout


def test_pages_url_is_derived_from_the_repository_url():
    assert parse("https://github.com/Some-Teacher/pe.course") == ("Some-Teacher", "pe.course")
    assert pages_url("https://github.com/Some-Teacher/pe.course") == "https://some-teacher.github.io/pe.course/"
    assert pages_url("https://github.com/someone/someone.github.io") == "https://someone.github.io/"
    for wrong in ("https://github.com/someone/book/", "https://github.com/someone/book.git",
                  "https://gitlab.com/someone/book", "https://github.com/someone", "git@github.com:a/b"):
        with pytest.raises(ValueError):
            parse(wrong)


@pytest.fixture
def fork(tmp_path):
    """A copy of every file that holds the URL, outside git (the check then walks the folder)."""
    for name in COPIED:
        if (ROOT / name).exists():
            (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(ROOT / name, tmp_path / name)
    shutil.copytree(ROOT / "notebooks", tmp_path / "notebooks", ignore=shutil.ignore_patterns(".*"))
    return tmp_path


def test_a_stale_copy_fails_the_check_and_set_repository_rewrites_every_copy(fork):
    assert check(fork) == []
    url = configured(fork)["url"]
    chapter = fork / "notebooks" / "01_permutation_problem.ipynb"
    chapter.write_text(chapter.read_text().replace(f'\\"{url}\\"', '\\"https://github.com/someone/else\\"'))
    (fork / "book" / "extra.md").write_text(f"Issues: {url}/issues\n")  # a copy the tool does not know
    problems = check(fork)
    assert len(problems) == 2, problems
    assert problems[0].startswith("notebooks/01_permutation_problem.ipynb:") and "someone/else" in problems[0]
    assert problems[1].startswith("book/extra.md:1:")
    (fork / "book" / "extra.md").unlink()

    before = {p: p.read_bytes() for p in (fork / "notebooks").glob("*.ipynb")}
    changed = set_repository("https://github.com/a-teacher/course-book", fork)
    assert check(fork) == []
    assert {p.relative_to(fork).as_posix() for p in changed} == {
        name for name in COPIED if (fork / name).exists()} | {f"notebooks/{p.name}" for p in before}
    assert "url: https://github.com/a-teacher/course-book\n" in (fork / "_config.yml").read_text()
    readme = (fork / "README.md").read_text()
    assert ("https://colab.research.google.com/github/a-teacher/course-book/blob/main/notebooks/"
            "01_permutation_problem.ipynb") in readme
    assert "published at <https://a-teacher.github.io/course-book/>" in " ".join(readme.split())
    assert "git clone https://github.com/a-teacher/course-book && cd course-book\n" in (
        fork / "book" / "intro.md").read_text()
    pyproject = (fork / "pyproject.toml").read_text()
    assert 'Homepage = "https://a-teacher.github.io/course-book/"' in pyproject
    assert 'Source = "https://github.com/a-teacher/course-book"' in pyproject
    if (fork / "CITATION.cff").exists():
        citation = (fork / "CITATION.cff").read_text()
        assert "repository-code: \"https://github.com/a-teacher/course-book\"" in citation
        assert "url: \"https://a-teacher.github.io/course-book/\"" in citation

    # each notebook: exactly its setup line changed, byte for byte; cells and outputs as they were
    for path, old in before.items():
        new = path.read_bytes()
        differing = [(a, b) for a, b in zip(old.splitlines(), new.splitlines()) if a != b]
        assert len(old.splitlines()) == len(new.splitlines()) and len(differing) == 1, path.name
        assert differing[0][1] == b'    "POSENC_REPOSITORY = \\"https://github.com/a-teacher/course-book\\"\\n",'
        old_nb, new_nb = nbformat.reads(old.decode(), as_version=4), nbformat.reads(new.decode(), as_version=4)
        assert [c.get("outputs") for c in old_nb.cells] == [c.get("outputs") for c in new_nb.cells]
        assert len(old_nb.cells) == len(new_nb.cells)

    assert set_repository(None, fork) == []  # idempotent: nothing left to rewrite
