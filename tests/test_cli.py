"""The command line: list, the self-check, exit codes, and a results file on every path."""
from __future__ import annotations

import argparse
import base64
import json
import shutil
from dataclasses import replace
from pathlib import Path

import jsonschema
import pytest

from grader.cli import _check_status, _parser, main
from grader.results.classroom import reporter_points
from helpers import ROOT, SCHEMA, load_results, run_cli


def test_list_shows_practicals_checks_points_and_visibility(capsys: pytest.CaptureFixture) -> None:
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "p6: DistributedDataParallel under torchrun — 21 points" in out and "efficiency          2 pts" in out
    assert "p5: Data parallelism with nn.DataParallel — 17 points" in out and "gpu0_memory" in out and "scaling" in out
    assert "p4: Understanding parallelism (notebook) — 14 points" in out
    assert "2x2 (2 nodes × 2 ranks, 2 virtual GPUs)" in out
    assert "params_sync         4 pts  after_due_date" in out


def test_an_unknown_practical_still_writes_results(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    results = tmp_path / "r.json"
    assert main(["grade", "p99", str(ROOT / "solutions" / "p6"), "--results", str(results)]) == 1
    document = load_results(results)
    jsonschema.validate(document, SCHEMA)
    assert document["tests"][0]["name"] == "Autograder error"
    assert "unknown practical 'p99'; this course has: p4, p5, p6" in document["tests"][0]["output"]
    assert "AUTOGRADER ERROR" in capsys.readouterr().out


def test_a_missing_submission_folder_still_writes_results(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    results = tmp_path / "r.json"
    assert main(["grade", "p6", str(tmp_path / "nowhere"), "--results", str(results)]) == 1
    document = load_results(results)
    assert "does not exist" in document["tests"][0]["output"]
    assert document["execution_time"] < 5  # once the machine's uptime
    assert "graded in 0." in capsys.readouterr().out


def test_a_broken_spec_is_an_autograder_error_naming_the_key(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    course = tmp_path / "course"
    shutil.copytree(ROOT / "assignments" / "p6", course / "assignments" / "p6")
    (course / "course.yaml").write_text("course: a copy\npracticals: [p6]\n")
    spec = course / "assignments" / "p6" / "assignment.yaml"
    spec.write_text(spec.read_text().replace("points: 5", "points: lots"))
    results = tmp_path / "r.json"
    code = main(["--course-root", str(course), "grade", "p6", str(ROOT / "solutions" / "p6"), "--results", str(results)])
    assert code == 1
    output = load_results(results)["tests"][0]["output"]
    assert "assignment.yaml: checks[3].points: expected a number ≥ 0, found 'lots'" in output
    assert main(["--course-root", str(course), "list"]) == 1
    assert f"p6: cannot be loaded: {spec}: checks[3].points" in capsys.readouterr().out


def test_bad_command_lines_exit_2() -> None:
    done = run_cli("grade", "p6")
    assert done.returncode == 2 and "SUBMISSION" in done.stderr.upper()
    assert run_cli("grade", "p6", "x", "--world-size", "0").returncode == 2
    typo = run_cli("check", "pp6")
    assert typo.returncode == 2 and "error: unknown practical 'pp6' (did you mean p6?); this course has: p4, p5, p6, p7, p10" in typo.stderr
    assert "AUTOGRADER ERROR" not in typo.stdout


def test_every_command_and_option_says_what_it_is_for() -> None:
    parser = _parser()
    assert "SUPPRESS" not in parser.format_help()
    unexplained = []
    for name, sub in _subcommands(parser):
        assert "SUPPRESS" not in sub.format_help(), name
        unexplained += [f"{name} {action.dest}" for action in sub._actions if not action.help and not isinstance(action, argparse._SubParsersAction)]
    assert unexplained == []


def _subcommands(parser: argparse.ArgumentParser, prefix: str = "") -> list[tuple[str, argparse.ArgumentParser]]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += [(prefix + name, sub), *_subcommands(sub, prefix + name + " ")]
    return found


def test_the_self_check_exits_1_when_a_check_fails_unless_told_otherwise(tmp_path: Path) -> None:
    """The student's CI goes red on a failing check; --exit-zero keeps it green."""
    from grader.results.model import CheckResult, GradingReport, Status

    check = CheckResult(id="a", title="A", number=1, score=0, max_score=1, status=Status.FAILED, summary="no")
    failing = GradingReport(practical="p6", title="P6", checks=(check,))
    deferred = GradingReport(practical="p6", title="P6", checks=(replace(check, status=Status.DEFERRED),))
    assert _check_status(deferred, exit_zero=False) == 0
    assert _check_status(failing, exit_zero=False) == 1 and _check_status(failing, exit_zero=True) == 0


@pytest.mark.slow
def test_one_grade_everywhere_a_half_done_p6_reads_of_the_same_total_in_every_place(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A p6 whose model is never wrapped in DDP, self-checked (console, markdown, Classroom) and
    graded by Gradescope's run_autograder; its result stored as a push's, its feedback on the
    branch, collected, and `list`: every place states the practical's 21 points, and names the
    points not given yet and where they come from, never as lost."""
    import subprocess

    from grader.course import load_course
    from grader.results.gradescope import read_report
    from grader.store import ResultsStore
    from grader.submit.queue import Submission
    from grader.submit.worker import deliver
    from p6_variants import VARIANTS
    from test_gradescope import autograder, run_autograder

    folder = next(v for v in VARIANTS if v.name == "not_wrapped").write(tmp_path / "half-done", "p6")
    summary, results, classroom = tmp_path / "summary.md", tmp_path / "r.json", tmp_path / "classroom.txt"
    assert main(["check", "p6", str(folder), "--world-size", "2", "--markdown", str(summary), "--results", str(results), "--classroom", str(classroom)]) == 1  # its checks fail: CI shows it
    out = capsys.readouterr().out
    self_check = "Score: 9 of 21 points so far — 1 graded on a GPU node, 6 graded by the autograder"  # efficiency (2, not timed here) and params_sync (4, not run here); ddp_vs_dp (1) on a GPU node
    assert self_check in out and f"**{self_check}**" in summary.read_text()
    document = json.loads(base64.b64decode(classroom.read_text()))
    logged, noticed, maximum = reporter_points(document)  # the reporter's log and Classroom's points: the self-check's score, of the practical's total
    assert (noticed, maximum) == (9, 21) and logged == pytest.approx(9)
    assert "| 4 | Gradients are all-reduced in backward and equal the full-batch gradient | 0/5 | ❌ fail |" in summary.read_text()

    graded = run_autograder(autograder(tmp_path, "p6"), folder)  # Gradescope: every check, the GPU's deferred
    shown = sum(t["score"] for t in graded["tests"] if t["visibility"] == "visible")
    assert graded["extra_data"]["total_points"] == 21 and graded["extra_data"]["headline"] == f"{graded['score']:g} of 21 points so far — 1 graded on a GPU node"  # staff's: every check
    assert f"Score: {shown:g} of 21 points so far — 1 graded on a GPU node, 4 shown after the deadline\n" in graded["output"]  # the student's view: params_sync's points named, not its score

    repo = tmp_path / "alice.git"
    subprocess.run(["git", "init", "-q", "--bare", str(repo)], check=True)
    store, course = ResultsStore(tmp_path / "store"), load_course(ROOT)
    push = Submission("alice", "p6", "a" * 40, {"kind": "git", "repo": str(repo)})
    store.save(graded, {"student": "alice", "practical": "p6", "commit": push.commit, "submitted_at": push.submitted_at, "source": push.source})
    assert deliver(store, course, push, read_report(graded)) == "; feedback on the repository's feedback branch"
    branch = subprocess.run(["git", "--git-dir", str(repo), "show", "feedback:p6.md"], capture_output=True, text=True, check=True).stdout
    assert f"**Score: {shown:g} of 21 points so far — 1 graded on a GPU node, 4 shown after the deadline**" in branch

    assert main(["collect", str(store.root), "--csv", str(tmp_path / "grades.csv")]) == 0
    row = dict(zip(*[line.split(",") for line in (tmp_path / "grades.csv").read_text().splitlines()]))
    assert (row["p6.max"], row["p6.pending"], row["p6.ddp_vs_dp"], row["p6.score"], row["max"]) == ("21", "1", "pending", f"{graded['score']:g}", "21")
    assert main(["list"]) == 0 and "p6: DistributedDataParallel under torchrun — 21 points" in capsys.readouterr().out


def test_a_self_check_writes_into_a_folder_of_its_own_and_keeps_only_the_latest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without --results, `check` writes its results and views into a new pdl-check-* folder
    (named as "results written to …"); of the earlier ones, the latest two stay."""
    import os
    import tempfile

    from grader.cli import check_folder

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    earlier = [tmp_path / f"pdl-check-{n}" for n in range(4)]
    for age, folder in enumerate(earlier):
        folder.mkdir()
        os.utime(folder, (1000 + age, 1000 + age))
    (tmp_path / "pdl-check-file").write_text("not a folder of the check's")
    made = check_folder()
    assert made.parent == tmp_path and made.name.startswith("pdl-check-")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([made.name, "pdl-check-2", "pdl-check-3", "pdl-check-file"])
