"""The grader's modules import one another without a cycle (every import counts, also one
inside a function: a cycle there is a knot all the same)."""
from __future__ import annotations

import ast
from pathlib import Path

from helpers import ROOT

PACKAGE = ROOT / "grader"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """Module -> the grader's modules it imports anywhere in its source."""
    modules = {_module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    stem = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*stem, base] if base else stem)
                found.update(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names)
        graph[name] = {target for target in found if target in modules and target != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return found


def test_no_module_of_the_grader_takes_part_in_an_import_cycle() -> None:
    graph = import_graph()
    assert "grader.grade.session" in graph and "grader.grade.calibration" in graph["grader.grade.session"]
    assert cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_measurement_of_speed_imports_no_check_practical_or_grading_stage() -> None:
    """grader/speed reads what a run produced: the launch policy is the grading pipeline's
    (grader/grade/timing.py), the verdicts the checks' (grader/checks/speed.py), so neither
    grade → speed → grade nor checks → speed → checks can knot again."""
    graph = import_graph()
    below: set[str] = set()
    todo = [name for name in graph if name == "grader.speed" or name.startswith("grader.speed.")]
    while todo:
        name = todo.pop()
        if name not in below:
            below.add(name)
            todo.extend(graph[name])
    assert todo == [] and any(name.startswith("grader.speed.") for name in below)
    above = sorted(name for name in below if name.split(".")[1] in ("checks", "practicals", "grade"))
    assert above == [], f"grader.speed reaches {above}"
