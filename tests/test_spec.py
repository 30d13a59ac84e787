"""assignment.yaml: the shipped specs load; every malformed one fails naming the file, the
key, what was expected and what was found."""
from __future__ import annotations

from pathlib import Path

import pytest

from grader.checks.distributed import CHECKS
from grader.course import find_course_root, load_course, load_practical
from grader.spec import SpecError, load_assignment

GOOD = """
id: p6
title: DDP
script: p6_ddp.py
seed_argument: seed
args: {batch_size: 64, steps: 3}
variables: [rank, local_rank]
timeouts: {run_s: 30, total_s: 90}
runs:
  - {name: ws1, ranks_per_node: 1}
  - {name: 2x2, nodes: 2, ranks_per_node: 2}
checks:
  - id: rank_setup
    title: Ranks
    points: 2
  - id: grad_sync_2x2
    check: grad_sync
    title: Sync
    points: 3
    visibility: hidden
    runs: [2x2]
    options: {rtol: 0.001}
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "assignment.yaml"
    path.write_text(text)
    return path


def test_a_good_spec_loads_with_defaults_filled_in(tmp_path: Path) -> None:
    spec = load_assignment(write(tmp_path, GOOD), CHECKS)
    assert spec.max_score == 5
    assert [r.layout.world_size for r in spec.runs] == [1, 4]
    first, second = spec.checks
    assert first.visibility == "visible" and first.runs == ("ws1", "2x2") and first.public
    assert second.check == "grad_sync" and second.runs == ("2x2",) and not second.public
    assert second.options == {"rtol": 0.001, "atol": 1e-6, "micro_batches_argument": ""}
    assert spec.run_timeout_s == 30 and spec.total_timeout_s == 90
    assert (spec.timing.repeats, spec.timing.warmup_steps) == (3, 1) and spec.runs[0].solution is None


@pytest.mark.parametrize(
    ("change", "key", "expected", "found"),
    [
        (("points: 2", "points: five"), "checks[0].points", "a number ≥ 0", "'five'"),
        (("  - id: rank_setup\n", "  - id: rank_setup\n    weight: 1\n"), "checks[0].weight", "one of the keys id, check, title", "<an unknown key>"),
        (("  - id: rank_setup", "  - id: rank_setupp"), "checks[0].id", "one of the practical's checks", "'rank_setupp'"),
        (("visibility: hidden", "visibility: secret"), "checks[1].visibility", "one of visible, hidden, after_due_date, after_published", "'secret'"),
        (("runs: [2x2]", "runs: [ws9]"), "checks[1].runs", "a list of run names from ['ws1', '2x2'] ([] for none)", "['ws9']"),
        (("options: {rtol: 0.001}", "options: {rtol: -1}"), "checks[1].options.rtol", "a number ≥ 0.0", "-1"),
        (("options: {rtol: 0.001}", "options: {tolerance: 1}"), "checks[1].options.tolerance", "an option of check 'grad_sync' (rtol, atol, micro_batches_argument)", "<an unknown option>"),
        (("{name: ws1, ranks_per_node: 1}", "{name: 2x2, ranks_per_node: 1}"), "runs[1].name", "a name no other run has", "'2x2'"),
        (("ranks_per_node: 1}", "ranks_per_node: 0}"), "runs[0].ranks_per_node", "a whole number ≥ 1", "0"),
        (("{name: ws1, ranks_per_node: 1}", "{name: ws1, virtual_gpus: -2}"), "runs[0].virtual_gpus", "a whole number ≥ 0 (virtual GPUs per node)", "-2"),
        (("{name: ws1, ranks_per_node: 1}", "{name: ws1, script: ../up.py}"), "runs[0].script", "the file name of a script of the submission", "'../up.py'"),
        (("total_s: 90", "total_s: 10"), "timeouts.total_s", "at least run_s (30)", "10.0"),
        (("script: p6_ddp.py\n", ""), "script", "the file name of the student's script", "<nothing: the key is missing>"),
        (("args: {batch_size: 64, steps: 3}", "args: {batch_size: [64]}"), "args.batch_size", "a Python identifier with a number", "[64]"),
        (("script: p6_ddp.py\n", "script: p6_ddp.py\ntiming: {repeats: 0}\n"), "timing.repeats", "a whole number from 1 to 20 (launches of each timed run)", "0"),
        (("script: p6_ddp.py\n", "script: p6_ddp.py\ntiming: {warmup: 2}\n"), "timing.warmup", "one of the keys repeats, warmup_steps", "<an unknown key>"),
        (("{name: ws1, ranks_per_node: 1}", "{name: ws1, solution: ../p5}"), "runs[0].solution", "a practical's id (its reference solution runs instead of the submission)", "'../p5'"),
        (("{name: ws1, ranks_per_node: 1}", "{name: ws1, carried: yes please}"), "runs[0].carried", "true or false (the grader's hub carries the ranks' process groups)", "'yes please'"),
        (("{name: ws1, ranks_per_node: 1}", "{name: ws1, substitutes: true, args: {dim: 4, micro_batches: 2}}"), "runs[0].substitutes", "carried: true as well (only the grader's hub substitutes sends)", "True"),
        (("{name: ws1, ranks_per_node: 1}", "{name: ws1, carried: true, substitutes: true, args: {dim: 4}}"), "runs[0].args.micro_batches", "a whole number ≥ 1 (substitutes needs it)", "None"),
    ],
)
def test_a_bad_spec_says_where_what_was_expected_and_what_was_found(tmp_path: Path, change, key, expected, found) -> None:
    old, new = change
    assert old in GOOD
    path = write(tmp_path, GOOD.replace(old, new, 1))
    with pytest.raises(SpecError) as caught:
        load_assignment(path, CHECKS)
    message = str(caught.value)
    assert message.startswith(f"{path}: {key}: expected {expected}"), message
    assert message.endswith(f"found {found}"), message


def test_every_timed_run_gives_the_script_its_steps_and_the_clock_factor_is_checked(tmp_path: Path) -> None:
    """The grader times a run without its witness by launches of two step counts
    (grader/speed/measure.py): a timed run must say how many steps it takes."""
    from grader.checks.speed import CHECKS as SPEED

    available = {**CHECKS, **SPEED}
    timed = GOOD + "  - {id: speed, check: efficiency, title: Speed, points: 1, runs: [2x2]}\n"
    assert load_assignment(write(tmp_path, timed), available).timing.clock_factor == 3
    path = write(tmp_path, timed.replace("args: {batch_size: 64, steps: 3}", "args: {batch_size: 64}"))
    with pytest.raises(SpecError) as caught:
        load_assignment(path, available)
    assert str(caught.value) == f"{path}: runs.2x2.args.steps: expected a whole number ≥ 1 of steps (the run is timed; timing.steps_argument is 'steps'), found None"
    renamed = timed.replace("steps: 3}", "iterations: 3}").replace("script: p6_ddp.py\n", "script: p6_ddp.py\ntiming: {steps_argument: iterations, clock_factor: 4}\n")
    assert load_assignment(write(tmp_path, renamed), available).timing.steps_argument == "iterations"
    path = write(tmp_path, renamed.replace("clock_factor: 4", "clock_factor: 1"))
    with pytest.raises(SpecError, match="timing.clock_factor: expected a whole number from 2 to 20"):
        load_assignment(path, available)


def test_yaml_syntax_errors_and_missing_files_are_spec_errors(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"\(file\): expected valid YAML, found <expected .,. or .\]., but got .:. at line 4>"):
        load_assignment(write(tmp_path, "id: p6\ntitle: x\nruns: [1, 2\n  x: y\n"), CHECKS)
    with pytest.raises(SpecError, match=r"\(file\): expected a readable assignment.yaml"):
        load_assignment(tmp_path / "missing.yaml", CHECKS)
    with pytest.raises(SpecError, match=r"\(top level\): expected a mapping of keys to values, found \[1, 2\]"):
        load_assignment(write(tmp_path, "[1, 2]\n"), CHECKS)


def test_every_shipped_practical_loads(root: Path) -> None:
    course = load_course(find_course_root(cwd=root))
    assert course.root == root
    for practical_id in course.practicals:
        practical = load_practical(course, practical_id)
        assert practical.assignment.id == practical_id
        assert (course.solution_dir(practical_id) / practical.assignment.script).is_file()
        assert (course.template_dir(practical_id) / practical.assignment.script).is_file()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("main_overhead: {a: 1}\n", "answer_key.yaml: main_overhead: expected a word, a number or a list of them"),
        ("2nd: data\n", "answer_key.yaml: 2nd: expected a question's name"),
        ("- data\n", "answer_key.yaml: (top level): expected a mapping"),
    ],
)
def test_a_bad_answer_key_names_the_question(text: str, message: str, tmp_path: Path) -> None:
    from grader.spec import load_answer_key

    (tmp_path / "p4").mkdir()
    (tmp_path / "p4" / "answer_key.yaml").write_text(text)
    with pytest.raises(SpecError) as caught:
        load_answer_key(tmp_path, "p4")
    assert message in str(caught.value)
    assert load_answer_key(None, "p4") is None and load_answer_key(tmp_path, "p5") is None
