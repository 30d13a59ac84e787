"""The students' repository: what goes in, what may never, and that it works on its own."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from grader.run import procs
from grader.run.local import TOKEN_VARIABLE
from grader.submit.feedback import read_command
from helpers import ROOT, copy_course, run_cli


def export(course: Path, out: Path, *practicals: str) -> subprocess.CompletedProcess:
    return run_cli("--course-root", str(course), "export-student", *(practicals or ("p4", "p5", "p6", "p7", "p10")), "--out", str(out))


def test_the_export_holds_templates_public_checks_and_the_self_check(tmp_path: Path) -> None:
    out = tmp_path / "student"
    done = export(ROOT, out)
    assert done.returncode == 0, done.stderr
    files = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    assert {"assignments/p6/p6_ddp.py", "assignments/p5/answers.yaml", "assignments/p4/p4_concepts.ipynb", "course.yaml", "README.md", "pyproject.toml", "scripts/setup.sh", ".github/workflows/student-self-check.yml", "grader/cli.py", "grader/probe/zygote.py"} <= files
    assert not [f for f in files if f.startswith(("solutions/", "tests/", "bench/", ".ci/", "templates/"))]
    assert [f for f in files if f.startswith("calibration/")] == ["calibration/p6.yaml"]  # the course's baselines, where measured: the self-check's pace
    readme = (out / "README.md").read_text()
    assert "## Reading your feedback" in readme and read_command("p5") in readme  # the push's own hint, and how to read the feedback (of the first practical with a script)
    spec = yaml.safe_load((out / "assignments" / "p6" / "assignment.yaml").read_text())
    assert [c["id"] for c in spec["checks"]] == ["rank_setup", "device_mapping", "batch_shard", "grad_sync", "clean_exit", "efficiency", "ddp_vs_dp"]
    assert "python -m grader check" in (out / ".github" / "workflows" / "student-self-check.yml").read_text()
    assert (out / "assignments" / "p6" / "p6_ddp.py").read_bytes() == (ROOT / "assignments" / "p6" / "p6_ddp.py").read_bytes()
    assert yaml.safe_load((out / "course.yaml").read_text())["practicals"] == ["p4", "p5", "p6", "p7", "p10"]
    assert not [f for f in files if f.endswith("answer_key.yaml")]  # the answers with one right value stay home
    ignored = (out / ".gitignore").read_text().splitlines()
    assert {".venv/", "__pycache__/", "*.egg-info/", "results*.json", "results*-runs/", "observe-out/"} <= set(ignored)


def test_the_answer_key_agrees_with_torch_chunk_and_the_self_check_leaves_it_to_the_autograder() -> None:
    from grader.checks.base import CheckContext
    from grader.checks.concepts import concept_answers
    from grader.checks.dataparallel import chunk_rows
    from grader.spec import load_answer_key

    key = load_answer_key(ROOT / "solutions", "p4")
    assert key is not None and key["chunks_of_64_by_3"] == chunk_rows(64, 3) and key["chunks_of_10_by_4"] == chunk_rows(10, 4)
    verdict = concept_answers(CheckContext(runs=(), options={}, args={}))
    assert verdict.deferred == "the answer key stays with the course staff: the autograder grades these answers"


def plant(tmp_path: Path, where: str, text: str) -> Path:
    course = copy_course(tmp_path / "course")
    path = course / where
    path.write_text(path.read_text() + text if path.exists() else text)
    return course


@pytest.mark.parametrize(
    ("where", "text", "message"),
    [
        ("assignments/p6/p6_ddp.py", "    dist.init_process_group(backend=backend)\n", "assignments/p6/p6_ddp.py:93: a line of the solution (solutions/p6/p6_ddp.py:57): 'dist.init_process_group(backend=backend)'"),
        ("assignments/p10/p10_hybrid.py", "        with model.no_sync() if ddp and not last else nullcontext():\n", "a line of the solution (solutions/p10/p10_hybrid.py:"),
        ("assignments/p5/answers.yaml", "  3: [22, 22, 20]\n", "assignments/p5/answers.yaml:35: a line of the solution (solutions/p5/answers.yaml:17): '3: [22, 22, 20]'"),
        ("assignments/p6/README.md", "\nHidden: Parameters stay identical across ranks and match single-process training\n", "assignments/p6/README.md: the hidden check 'params_sync' ('Parameters stay identical across ranks and match single-process training')"),
        ("assignments/p6/notes_for_staff.txt", "the grading seeds we use\n", "assignments/p6/notes_for_staff.txt: not a file that `release` makes from solutions/p6 (not on the allow-list)"),
        ("grader/practicals/p6.py", "\n\ndef _never_called(x, rank, shard, device):\n    x = x[rank * shard : (rank + 1) * shard].to(device)\n", "grader/practicals/p6.py:"),
        ("grader/checks/concepts.py", '\nEXPECTED = {"easier_to_implement": "data"}\n', "the answer to easier_to_implement (solutions/p4/answer_key.yaml)"),
        ("grader/checks/concepts.py", "\nSIZES = dict(chunks_of_10_by_4=[3,3,3,1])\n", "the answer to chunks_of_10_by_4 (solutions/p4/answer_key.yaml)"),
    ],
    ids=["template line", "p10 template line", "p5 answers", "hidden check title", "unlisted file", "grader module", "answer word", "answer list"],
)
def test_a_planted_leak_makes_the_export_refuse_and_names_it(where: str, text: str, message: str, tmp_path: Path) -> None:
    course = plant(tmp_path, where, text)
    out = tmp_path / "student"
    done = export(course, out)
    assert done.returncode == 1, done.stdout
    assert "error: export refused:" in done.stderr and message in done.stderr, done.stderr
    assert not out.exists()


def test_private_modules_and_other_practicals_stay_home(tmp_path: Path) -> None:
    course = copy_course(tmp_path / "course")
    (course / "grader" / "checks" / "staff_only.py").write_text("# grader: private\nHIDDEN_SEEDS = [1, 2, 3]\n")
    out = tmp_path / "student"
    assert export(course, out, "p6").returncode == 0
    assert not (out / "grader" / "checks" / "staff_only.py").exists()
    assert not (out / "assignments" / "p5").exists() and not (out / "grader" / "practicals" / "p5.py").exists()
    assert (out / "grader" / "practicals" / "p6.py").exists()


@pytest.mark.slow
def test_the_exported_repository_self_checks_on_its_own(tmp_path: Path) -> None:
    out = tmp_path / "student"
    assert export(ROOT, out, "p6").returncode == 0
    env = {**os.environ, "PYTHONPATH": str(out)}
    code = "import grader, sys; sys.exit(0 if grader.__file__.startswith(sys.argv[1]) else 1)"
    assert subprocess.run([sys.executable, "-c", code, str(out)], cwd=out, env=env).returncode == 0
    # a p6 that hangs in every run, self-checked in full where no reference solution is: with 1
    # or 3 ranks its training loop never ends (it keeps computing); with 2 or 4, rank 1 waits for
    # a message rank 0 never sends while rank 0 waits in DDP's all-reduce (a deadlock, no CPU)
    assert (out / "calibration" / "p6.yaml").read_bytes() == (ROOT / "calibration" / "p6.yaml").read_bytes()  # the course's baselines pace its runs
    solution = (ROOT / "solutions" / "p6" / "p6_ddp.py").read_text()
    assert solution.count("for step in range(steps):") == 1 and solution.count("t0 = time.time()\n") == 1
    hangs = solution.replace("for step in range(steps):", "for step in (itertools.count() if world_size in (1, 3) else range(steps)):  # never ends").replace("import os\n", "import itertools\nimport os\n", 1)
    hangs = hangs.replace("t0 = time.time()\n", "t0 = time.time()\nif ddp and world_size in (2, 4) and rank == 1:\n    dist.recv(torch.zeros(1), src=0)\n")
    (out / "assignments" / "p6" / "p6_ddp.py").write_text(hangs)
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "grader", "check", "p6", "--results", str(tmp_path / "r.json"), "--no-views"], cwd=out, env=env, capture_output=True, text=True, timeout=300)
    assert time.monotonic() - started <= 60, done.stdout  # issue 48: 182 s before the baselines travelled (issue 34: a grading of it in 45 s)
    assert done.returncode == 1, done.stderr  # its checks fail: the student's CI shows it
    results = json.loads((tmp_path / "r.json").read_text())
    runs = {run["name"]: run["outcome"] for run in results["extra_data"]["runs"]}
    for name in ("ws1", "ws3"):  # stopped at the pace the course's grading sets, told it was still computing
        assert re.match(r"did not finish within [46] s, where the reference solution's same run takes [\d.]+ s on the course's machines \(twice the longest they measured\), \d+× its whole run \(still computing: does the loop end\?\): rank 0 is still computing at p6_ddp.py:", runs[name]), runs[name]
    for name in ("ws2", "ws4", "2x2"):  # stopped once none of its processes used the CPU
        assert runs[name].startswith("hung: stopped after ") and re.search(r"none of its processes had used the CPU for [234](\.\d)? s", runs[name]) and "rank 1 waits at p6_ddp.py:" in runs[name], runs[name]
    checks = {t["tags"][0]: t for t in results["tests"]}
    assert all(checks[name]["score"] == 0 for name in ("batch_shard", "grad_sync", "clean_exit")), {k: v["score"] for k, v in checks.items()}  # the training never ended: nothing for what needs its end
    assert "this check judges the whole training, which never ended" in checks["grad_sync"]["output"]
    outputs = " ".join(t["output"] for t in results["tests"])
    assert "time budget" not in outputs and "not run" not in outputs  # every run had its time
    assert not (tmp_path / "r-runs").exists() and procs.pids_with_env_name(TOKEN_VARIABLE) == []  # --no-views; nothing outlives the self-check
    assert not [pid for pid in procs.all_pids() if "grader.probe.zygote" in procs.cmdline(pid)]
