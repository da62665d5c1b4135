"""The Colab path: a notebook run where posenc is not installed installs it through its setup cell.

Colab has PyTorch, NumPy and Matplotlib but not posenc. This test builds a fresh virtual environment
that sees the project's third-party packages (through a ``.pth`` file pointing at ``.venv``'s
site-packages, where ``.pth`` files such as posenc's editable install are *not* processed) but cannot
import posenc, checks that, then executes chapter 1 there with ``POSENC_INSTALL_SOURCE`` pointing at this
checkout. The setup cell must pip-install posenc from it and the chapter must run without errors.
Run by ``make colab`` (part of ``make test``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

from notebook_tools import ROOT

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
    # the measured results chapters 10 and 12 read ship inside the installed package
    shipped = run(python, "-c", SHIPPED, env=env, cwd=tmp_path)
    assert shipped.returncode == 0, shipped.stderr
