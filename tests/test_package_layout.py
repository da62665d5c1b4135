"""The package's folders show its architecture: no import cycle, the layers without a position encoding in
``posenc.mixers`` (as RoPE's modules are in ``posenc.rope``), the exercise checks split by topic, and the
names chapters and readers import still importable."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import posenc
from posenc import exercises, mixers
from posenc.model import MIXER_MODULES

PACKAGE = Path(posenc.__file__).parent


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """posenc module -> the posenc modules it imports, anywhere in its code (inside functions too)."""
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        imported = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = package.split(".")[:len(package.split(".")) - node.level + 1] if node.level else []
                target = ".".join(base + ([node.module] if node.module else []))
                # "from . import data" imports posenc.data, not posenc's __init__
                imported |= {f"{target}.{a.name}" if f"{target}.{a.name}" in modules else target for a in node.names}
            elif isinstance(node, ast.Import):
                imported |= {a.name for a in node.names}
        graph[name] = {m for m in imported if m in modules and m != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_the_package_has_no_import_cycle():
    graph = import_graph()
    assert "posenc.mixers.forgetting" in graph["posenc.mixers.decay"]  # the graph sees relative imports
    assert cycles(graph) == []


def test_a_planted_cycle_is_found():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_layers_without_an_encoding_live_in_posenc_mixers():
    layers = [cls for kind, cls in MIXER_MODULES.items() if kind != "attention"] + [mixers.ShortConv]
    assert {cls.__module__.rsplit(".", 1)[0] for cls in layers} == {"posenc.mixers"}
    top_level = {p.stem for p in PACKAGE.glob("*.py")}
    assert not top_level & {"forgetting", "stick_breaking", "cope", "decay", "conv", "mixers"}


@pytest.mark.parametrize("old, name", [("forgetting", "forget_bias"), ("stick_breaking", "stick_breaking_weights"),
                                       ("cope", "cope_positions"), ("decay", "decay_attention"),
                                       ("conv", "causal_conv")])
def test_the_old_module_names_still_import(old, name):
    module = importlib.import_module(f"posenc.{old}")
    assert module is importlib.import_module(f"posenc.mixers.{old}")
    assert getattr(module, name) is getattr(mixers, name)


def test_exercise_checks_are_split_by_topic_and_importable_from_one_place():
    checks = [name for name in exercises.__all__ if name.startswith("check_")]
    assert len(checks) >= 19
    homes = {getattr(exercises, name).__module__ for name in checks}
    assert homes == {f"posenc.exercises.{topic}" for topic in ("absolute", "relative", "rope", "masks", "stats")}
    for path in (PACKAGE / "exercises").glob("*.py"):
        assert len(path.read_text().splitlines()) < 300, path.name  # one topic a reader reads in one sitting
