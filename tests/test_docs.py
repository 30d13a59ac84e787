"""The guides work as copied: every YAML block of README.md, docs/ and the students' README
parses (the assignment spec's example loads as a spec), and every command line of their bash
blocks parses as the environment the README makes runs it: `python -m grader …` (with
`.venv` activated) by the grader's own command line, a script by bash. Commands are parsed,
not run: running them is what the rest of the suite does (and some need a GPU node, a Slurm
cluster or a student's push)."""
from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

from grader.assign.export import student_readme
from grader.cli import _parser
from grader.course import load_course, load_practical
from grader.spec import load_assignment
from helpers import ROOT

GUIDES = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
ACTIVATE = "source .venv/bin/activate"
PLACEHOLDER = re.compile(r"[A-Z][A-Z_]*_[A-Z]+")  # RESULTS_DIR, SUBMISSION_DIR: what the reader fills in


def blocks(text: str, language: str) -> list[str]:
    """The fenced blocks of `text` in `language`."""
    return [body for lang, body in FENCE.findall(text) if lang == language]


def guides() -> dict[str, str]:
    """Every guide's text by its name; the students' README as an export of every practical
    makes it, and as one of p4 alone."""
    course = load_course(ROOT)
    template = (ROOT / "templates" / "student" / "README.md").read_text(encoding="utf-8")
    return {
        **{path.relative_to(ROOT).as_posix(): path.read_text(encoding="utf-8") for path in GUIDES},
        "the students' README": student_readme(template, course, list(course.practicals)),
        "the students' README of p4 alone": student_readme(template, course, ["p4"]),
    }


def command_lines(script: str) -> list[list[str]]:
    """The commands of a bash block: continuations joined, comments dropped, `&&` split, a
    usage synopsis's optional `[…]` parts left out."""
    joined = re.sub(r"\\\n\s*", " ", script)
    commands = []
    for line in joined.splitlines():
        words = shlex.split(re.sub(r"\s\[[^\]]*\]", "", line), comments=True)
        while words:
            cut = words.index("&&") if "&&" in words else len(words)
            commands.append(words[:cut])
            words = words[cut + 1:]
    return commands


def test_every_yaml_block_of_the_guides_parses_and_the_spec_example_loads(tmp_path: Path) -> None:
    found = {name: blocks(text, "yaml") for name, text in guides().items()}
    assert sum(map(len, found.values())) >= 3
    for name, texts in found.items():
        for text in texts:
            try:
                yaml.safe_load(text)
            except yaml.YAMLError as exc:
                pytest.fail(f"{name}: a YAML block does not parse: {exc}")
    spec = next(text for text in found["docs/instructors.md"] if text.startswith("id: p6"))
    (tmp_path / "assignment.yaml").write_text(spec)
    loaded = load_assignment(tmp_path / "assignment.yaml", load_practical(load_course(ROOT), "p6").module.CHECKS)
    assert [run.name for run in loaded.runs] == ["ws2", "2x2"] and loaded.draw


def test_every_command_of_the_guides_parses_as_the_readme_sets_it_up(tmp_path: Path) -> None:
    """`python -m grader …` with every option as the grader's parser takes it (a misspelt option
    or subcommand fails; a placeholder such as RESULTS_DIR stands for a folder that exists),
    `bash SCRIPT` on a script that exists and bash reads; the README says to activate .venv,
    the students' README too."""
    parser = _parser()
    seen = {"grader": 0, "bash": 0}
    for name, text in guides().items():
        for command in (c for block in blocks(text, "bash") for c in command_lines(block)):
            shown = " ".join(command)
            if command[:3] == ["python", "-m", "grader"] or command[:3] == [".venv/bin/python", "-m", "grader"]:
                try:
                    parser.parse_args([str(tmp_path) if PLACEHOLDER.fullmatch(word) else word for word in command[3:]])
                except SystemExit:
                    pytest.fail(f"{name}: `{shown}` does not parse as the grader's command line")
                seen["grader"] += 1
            elif command[0] == "bash":
                script = ROOT / command[1]
                assert script.is_file(), f"{name}: `{shown}`: no {command[1]}"
                assert subprocess.run(["bash", "-n", str(script)]).returncode == 0, f"{name}: `{shown}`: bash cannot read it"
                seen["bash"] += 1
    assert seen["grader"] >= 20 and seen["bash"] >= 3, seen
    assert ACTIVATE in guides()["README.md"] and ACTIVATE in guides()["the students' README"]


def test_the_students_readme_names_only_the_practicals_the_export_holds() -> None:
    course = load_course(ROOT)
    template = (ROOT / "templates" / "student" / "README.md").read_text(encoding="utf-8")
    for held in (["p4", "p5"], ["p10"]):
        text = student_readme(template, course, held)
        named = set(re.findall(r"\bp\d+\b", text))
        assert named == set(held), (held, named)
    text = student_readme(template, course, ["p4", "p5"])
    assert "python -m grader check p5" in text and "assignments/p5/p5_dp.py" in text  # p4 is a notebook: the examples take p5
    assert "$" not in text.replace("$ git push", "")
