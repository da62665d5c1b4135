"""The Colab path: a notebook run where posenc is not installed installs it through its setup cell.

Colab has PyTorch, NumPy and Matplotlib but not posenc. This test builds a fresh virtual environment
that sees the project's third-party packages (through a ``.pth`` file pointing at ``.venv``'s
site-packages, where ``.pth`` files such as posenc's editable install are *not* processed) but cannot
import posenc, checks that, then executes chapter 1 there with ``POSENC_INSTALL_SOURCE`` pointing at this
checkout. The setup cell must pip-install posenc from it and the chapter must run without errors.
Run by ``make colab`` (part of ``make test``).
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import venv
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from notebook_tools import ROOT, heaviest_first, toc_notebooks

NOTEBOOK = ROOT / "notebooks" / "01_permutation_problem.ipynb"

EXECUTE = """
import sys, nbformat
from nbclient import NotebookClient
nb = nbformat.read(sys.argv[1], as_version=4)
NotebookClient(nb, timeout=600, kernel_name="python3",
               resources={"metadata": {"path": sys.argv[2]}}).execute()
errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
assert not errors, errors
print("executed", len(nb.cells), "cells")
"""


SHIPPED = """
from importlib import resources
for name in ("head_to_head_v2_full", "length_generalisation_v2_full", "context_extension_v2_full"):
    assert resources.files("posenc").joinpath(f"results/{name}.json").is_file(), name
"""


def run(python: Path, *args: str, env: dict, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(python), *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=900)


@pytest.mark.colab
def test_setup_cell_installs_posenc_in_a_fresh_environment(tmp_path):
    env_dir = tmp_path / "colab-like"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    site = Path(run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])",
                    env=os.environ.copy(), cwd=tmp_path).stdout.strip())
    # the preinstalled packages of "Colab": everything in the project's environment except posenc
    (site / "colab_preinstalled.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "JUPYTER"))}
    env.update(POSENC_INSTALL_SOURCE=str(ROOT), PIP_DISABLE_PIP_VERSION_CHECK="1",
               JUPYTER_PATH=str(tmp_path / "jupyter"), JUPYTER_DATA_DIR=str(tmp_path / "jupyter"),
               JUPYTER_CONFIG_DIR=str(tmp_path / "jupyter"), IPYTHONDIR=str(tmp_path / "ipython"))

    before = run(python, "-c", "import posenc", env=env, cwd=tmp_path)
    assert before.returncode != 0 and "No module named 'posenc'" in before.stderr, before.stderr
    assert run(python, "-c", "import torch, nbclient, ipykernel", env=env, cwd=tmp_path).returncode == 0

    executed = run(python, "-c", EXECUTE, str(NOTEBOOK), str(tmp_path), env=env, cwd=tmp_path)
    assert executed.returncode == 0, executed.stdout + executed.stderr

    after = run(python, "-c", "import posenc; print(posenc.__file__)", env=env, cwd=tmp_path)
    assert after.returncode == 0 and str(env_dir) in after.stdout  # installed into the fresh environment
    assert sys.prefix not in after.stdout
    # the measured results chapters 10 and 20 read ship inside the installed package
    shipped = run(python, "-c", SHIPPED, env=env, cwd=tmp_path)
    assert shipped.returncode == 0, shipped.stderr


# --- Every chapter through the Colab path under a newer Python -------------------------------------------
#
# Colab's Python is newer than the project's 3.11, and the measured chapters' corpus is the running Python's
# standard library, so the numbers differ there. This test builds (once, cached outside the checkout in
# ~/.cache/posenc/venv-newer, or $POSENC_NEWER_VENV, so that every clone on a machine reuses it) a
# Colab-like environment for a second, newer interpreter: the CUDA build of torch that PyPI gives that
# Python (it runs on the CPU), numpy, matplotlib, pandas and Jupyter's kernel, pinned in
# tests/colab_requirements.txt, and no posenc. Each chapter then runs from a copy outside the checkout, in
# a fresh environment of its own that sees that environment's packages (a .pth file, as in the test above) but
# not posenc, so its setup cell installs posenc (POSENC_INSTALL_SOURCE: a wheel built once from this
# checkout, since two pip builds in the checkout at once would collide), as in Colab. Every assertion in
# every chapter must hold there too. Outputs are not compared (nbval does that, under 3.11), so the
# chapters run COLAB_WORKERS at a time (default: one per CPU), one torch thread each (OMP_NUM_THREADS=1;
# two kernels of two threads on two cores would oversubscribe them). Which Python: $POSENC_NEWER_PYTHON, else python3.12 where one runs; skipped
# without one (outside CI). With POSENC_COLAB_NEWEST set (the weekly workflow), the pins are dropped.

NEWER_VENV = Path(os.environ.get("POSENC_NEWER_VENV")
                  or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "posenc" / "venv-newer")
COLAB_REQUIREMENTS = ROOT / "tests" / "colab_requirements.txt"
COLAB_WORKERS = int(os.environ.get("POSENC_COLAB_WORKERS") or os.cpu_count() or 1)


def newer_python() -> str | None:
    """An interpreter newer than this one that runs, or None."""
    candidates = [os.environ.get("POSENC_NEWER_PYTHON"), shutil.which("python3.12")]
    candidates += sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.12*/bin/python3.12")))
    for candidate in filter(None, candidates):
        probe = subprocess.run([candidate, "-c", "import sys; print(sys.version_info[:2] > (3, 11))"],
                               capture_output=True, text=True)
        if probe.returncode == 0 and probe.stdout.strip() == "True":
            return candidate
    return None


@pytest.fixture(scope="module")
def newer_env(tmp_path_factory):
    python = newer_python()
    if python is None:
        if os.environ.get("CI"):
            pytest.fail("no newer Python found: set POSENC_NEWER_PYTHON")
        pytest.skip("no Python newer than 3.11 found (set POSENC_NEWER_PYTHON)")
    env_python = NEWER_VENV / "bin" / "python"
    stamp = NEWER_VENV / ".installed"
    requirements = COLAB_REQUIREMENTS.read_text()
    if os.environ.get("POSENC_COLAB_NEWEST"):  # the weekly workflow: the newest releases, as Colab updates
        requirements = re.sub(r"==\S+", "", requirements)
    wanted = f"{python}\n{requirements}"
    if not (stamp.is_file() and stamp.read_text() == wanted):
        shutil.rmtree(NEWER_VENV, ignore_errors=True)
        NEWER_VENV.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([python, "-m", "venv", str(NEWER_VENV)], check=True)
        pip = [str(env_python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        listed = NEWER_VENV / "requirements.txt"
        listed.write_text(requirements)
        installed = subprocess.run([*pip, "-r", str(listed)], capture_output=True, text=True)
        assert installed.returncode == 0, installed.stdout + installed.stderr
        stamp.write_text(wanted)
    home = tmp_path_factory.mktemp("colab-newer")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTHON", "VIRTUAL_ENV", "JUPYTER", "POSENC_", "PYENV", "OMP_"))}
    env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", MPLBACKEND="agg", OMP_NUM_THREADS="1")
    # posenc is never installed into the shared environment (an older version of this test did that)
    subprocess.run([str(env_python), "-m", "pip", "uninstall", "--quiet", "--yes", "posenc"], env=env,
                   capture_output=True)
    built = run(env_python, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(home / "wheel"),
                str(ROOT), env=env, cwd=home)
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = (home / "wheel").glob("posenc-*.whl")
    env["POSENC_INSTALL_SOURCE"] = str(wheel)
    version = run(env_python, "-c", "import sys; print(sys.version.split()[0])", env=env, cwd=home)
    return env_python, env, version.stdout.strip()


def run_chapter(newer: Path, env: dict, notebook: str, work: Path) -> tuple:
    """One chapter through the Colab path in a fresh environment of its own: (posenc importable before
    its setup cell ran?, the run)."""
    work.mkdir(parents=True)
    subprocess.run([str(newer), "-m", "venv", "--without-pip", str(work / "env")], check=True)
    python = work / "env" / "bin" / "python"
    paths = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    shared, own = (run(p, "-c", paths, env=env, cwd=work).stdout.strip() for p in (newer, python))
    (Path(own) / "colab_preinstalled.pth").write_text(shared + "\n")  # Colab's preinstalled packages
    env = {**env, "JUPYTER_PATH": str(work / "jupyter"), "JUPYTER_DATA_DIR": str(work / "jupyter"),
           "JUPYTER_CONFIG_DIR": str(work / "jupyter"), "IPYTHONDIR": str(work / "ipython")}
    before = run(python, "-c", "import posenc", env=env, cwd=work).returncode == 0
    copy = work / notebook  # outside the checkout, as in Colab
    shutil.copyfile(ROOT / "notebooks" / notebook, copy)
    return before, run(python, "-c", EXECUTE, str(copy), str(work), env=env, cwd=work)


@pytest.fixture(scope="module")
def newer_runs(newer_env, tmp_path_factory):
    """Every chapter started at once, COLAB_WORKERS at a time: {notebook: Future of run_chapter}."""
    python, env, _ = newer_env
    home = tmp_path_factory.mktemp("colab-chapters")
    pool = ThreadPoolExecutor(max_workers=COLAB_WORKERS)
    futures = {p.name: pool.submit(run_chapter, python, env, p.name, home / p.stem)
               for p in heaviest_first(toc_notebooks())}
    yield futures
    pool.shutdown(cancel_futures=True)


@pytest.mark.colab_all
@pytest.mark.parametrize("notebook", [p.name for p in toc_notebooks()])
def test_every_chapter_runs_under_a_newer_python(newer_env, newer_runs, notebook):
    version = newer_env[2]
    assert version.split(".")[:2] != ["3", "11"], version
    importable_before, executed = newer_runs[notebook].result()
    assert not importable_before  # the setup cell, not the environment, provides posenc
    assert executed.returncode == 0, f"Python {version}: " + (executed.stdout + executed.stderr)[-6000:]
