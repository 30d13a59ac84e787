"""The command line: a thin layer over the library. It is the only place that prints.

    python -m grader grade PRACTICAL SUBMISSION_DIR [--results PATH] [--world-size N] ...
    python -m grader check PRACTICAL [DIR]        the student's self-check (public checks)
    python -m grader list                         practicals, checks, points, visibility
    python -m grader verify [PRACTICAL ...]       grade the reference solutions
    python -m grader run --virtual-gpus N -- CMD  any command, its Python processes on N virtual GPUs

Exit status of grade/check: 0 when grading completed (whatever the score), 1 when the grader
itself could not grade (the results file then holds an "Autograder error" entry), 2 for a
command line that cannot be understood.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

from grader.course import Course, CourseError, Practical, find_course_root, load_course, load_practical
from grader.grade.pipeline import GradeOptions, grade
from grader.results.gradescope import write_results
from grader.results.model import GradingReport, Status
from grader.results.render import console_table, markdown
from grader.run.local import LocalRunner
from grader.run.sandbox import Limits, open_sandbox
from grader.run.virtual_env import virtual_gpu_environment
from grader.spec import SpecError


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number ≥ 1, found {text}")
    return value


def _count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number ≥ 0, found {text}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, found {text}")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m grader", description="Autograder for Parallelism in Deep Learning.")
    parser.add_argument("--course-root", type=Path, help="the course repository (default: found from the current folder)")
    commands = parser.add_subparsers(dest="command", required=True)

    def grading_options(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("--world-size", type=_positive_int, help="one run of N ranks on one node instead of the spec's runs")
        sub.add_argument("--virtual-gpus", type=_count, help="every run on N virtual CUDA devices per node (CPU-backed; 0: none)")
        sub.add_argument("--seed", type=int, help="use this seed instead of a fresh random one (to reproduce a grading)")
        sub.add_argument("--timeout", type=_positive_float, help="seconds one run of the script may take (default: the spec's run_s)")
        sub.add_argument("--time-budget", type=_positive_float, help="seconds the whole grading may take (default: the spec's total_s)")
        sub.add_argument("--markdown", type=Path, help="also write a markdown summary here (e.g. $GITHUB_STEP_SUMMARY)")
        sub.add_argument("--keep-work", action="store_true", help="keep the working folder of the runs and print where it is")

    g = commands.add_parser("grade", help="grade a submission: every check, results.json")
    g.add_argument("practical", help="practical id, e.g. p6")
    g.add_argument("submission", type=Path, help="folder with the student's files")
    g.add_argument("--results", type=Path, default=Path("results.json"), help="where to write results.json (default: ./results.json)")
    g.add_argument("--official", action="store_true", help="refuse to grade without the sandbox (for graded submissions)")
    grading_options(g)

    c = commands.add_parser("check", help="self-check: the public checks on your own work")
    c.add_argument("practical", help="practical id, e.g. p6")
    c.add_argument("dir", nargs="?", type=Path, help="folder with your files (default: assignments/PRACTICAL)")
    c.add_argument("--results", type=Path, help="also write results.json here")
    grading_options(c)

    commands.add_parser("list", help="practicals with their checks, points and visibility")

    r = commands.add_parser("run", help="run any command on virtual GPUs: run --virtual-gpus 4 -- python train.py")
    r.add_argument("--virtual-gpus", type=_count, default=2, help="CUDA devices to pretend (default 2)")
    r.add_argument("cmd", nargs=argparse.REMAINDER, help="-- then the command, e.g. -- torchrun --nproc_per_node=2 train.py")

    v = commands.add_parser("verify", help="grade the reference solutions; fails unless each gets full marks")
    v.add_argument("practicals", nargs="*", help="practical ids (default: all)")
    v.add_argument("--results-dir", type=Path, help="write each practical's results.json into this folder")
    return parser


def _course(args: argparse.Namespace) -> Course:
    return load_course(find_course_root(args.course_root))


def _grade_folder(practical: Practical, folder: Path, options: GradeOptions, keep_work: bool, official: bool = False) -> GradingReport:
    if not folder.is_dir():
        return GradingReport.failure(practical.id, f"the submission folder {folder} does not exist")
    official = official or practical.assignment.sandbox == "required"
    limits = Limits(cpu_s=int((options.total_timeout_s or practical.assignment.total_timeout_s) + 60))
    sandbox = open_sandbox(limits)
    if isinstance(sandbox, str):
        if official:
            return GradingReport.failure(practical.id, f"official grading runs student code only in the sandbox, and there is none here: {sandbox}")
        print(f"warning: no sandbox ({sandbox}); the code runs with your own rights — fine for a self-check, refused by official grading", file=sys.stderr)
        sandbox = None
    work = Path(tempfile.mkdtemp(prefix=f"grader-{practical.id}-"))
    try:
        return grade(practical, folder.resolve(), LocalRunner(work, sandbox=sandbox), options)
    finally:
        if sandbox is not None:
            sandbox.release()
        if keep_work:
            print(f"working folder kept: {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)


def _options(args: argparse.Namespace, public_only: bool) -> GradeOptions:
    return GradeOptions(world_size=args.world_size, virtual_gpus=args.virtual_gpus, public_only=public_only, seed=args.seed, run_timeout_s=args.timeout, total_timeout_s=args.time_budget)


def _emit(report: GradingReport, results: Path | None, markdown_path: Path | None) -> int:
    if results is not None:
        write_results(report, results)
    if markdown_path is not None:
        with open(markdown_path, "a", encoding="utf-8") as handle:
            handle.write(markdown(report))
    print(console_table(report))
    if results is not None:
        print(f"results written to {results}")
    return 1 if report.error else 0


def cmd_grade(args: argparse.Namespace, public_only: bool = False) -> int:
    """grade / check: every path ends in a written results file (when one was asked for)."""
    started = time.monotonic()
    try:
        course = _course(args)
        practical = load_practical(course, args.practical)
        folder = args.submission if not public_only else (args.dir or course.template_dir(args.practical))
        report = _grade_folder(practical, folder, _options(args, public_only), args.keep_work, official=getattr(args, "official", False))
    except (CourseError, SpecError) as exc:
        report = GradingReport.failure(args.practical, str(exc), execution_time_s=time.monotonic() - started)
    except Exception as exc:  # noqa: BLE001 - the results file must exist even then
        report = GradingReport.failure(args.practical, f"internal error: {type(exc).__name__}: {exc}", execution_time_s=time.monotonic() - started)
    return _emit(report, args.results, args.markdown)


def cmd_list(args: argparse.Namespace) -> int:
    course = _course(args)
    print(f"{course.title} ({course.root})")
    for practical_id in course.practicals:
        practical = load_practical(course, practical_id)
        spec = practical.assignment
        runs = ", ".join(f"{r.name} ({r.layout.describe()})" for r in spec.runs)
        print(f"\n{spec.id}: {spec.title} — {spec.max_score:g} points; script {spec.script}; runs: {runs}")
        for check in spec.checks:
            print(f"  {check.id:<16} {check.points:>4g} pts  {check.visibility:<15} {check.title}")
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    course = _course(args)
    failed = []
    for practical_id in args.practicals or course.practicals:
        practical = load_practical(course, practical_id)
        report = _grade_folder(practical, course.solution_dir(practical_id), GradeOptions(), keep_work=False)
        results = args.results_dir / f"{practical_id}.json" if args.results_dir else None
        _emit(report, results, None)
        full = not report.error and all(c.status in (Status.PASSED, Status.DEFERRED) for c in report.checks)
        print(f"==> {practical_id}: {report.score:g}/{report.max_score:g} {'FULL MARKS' if full else 'NOT FULL MARKS'}\n")
        if not full:
            failed.append(practical_id)
    if failed:
        print(f"reference solutions below full marks: {', '.join(failed)}")
        return 1
    print("every reference solution gets full marks")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    command = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not command:
        print("error: no command given; e.g. python -m grader run --virtual-gpus 4 -- python train.py", file=sys.stderr)
        return 2
    try:
        return subprocess.call(command, env=virtual_gpu_environment(args.virtual_gpus))
    except FileNotFoundError:
        print(f"error: command not found: {command[0]}", file=sys.stderr)
        return 127


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "grade":
            return cmd_grade(args)
        if args.command == "check":
            return cmd_grade(args, public_only=True)
        if args.command == "list":
            return cmd_list(args)
        if args.command == "run":
            return cmd_run(args)
        return cmd_verify(args)
    except (CourseError, SpecError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
