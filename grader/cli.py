"""The command line: a thin layer over the library. It is the only place that prints.

    python -m grader grade PRACTICAL SUBMISSION_DIR [--results PATH] [--world-size N] ...
    python -m grader check PRACTICAL [DIR]        the student's self-check (public checks)
    python -m grader list                         practicals, checks, points, visibility
    python -m grader verify [PRACTICAL ...]       grade the reference solutions
    python -m grader run --virtual-gpus N -- CMD  any command, its Python processes on N virtual GPUs
    python -m grader release [PRACTICAL ...]      assignments/ from solutions/ (the templates)
    python -m grader export-student P... --out D  the students' repository, scanned for leaks
    python -m grader new ID --title T             a new practical from templates/practical/
    python -m grader calibrate PRACTICAL          baselines of the reference solution on this machine
    python -m grader collect RESULTS_DIR --csv F  grades out (latest submission before a deadline)

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

from grader.assign.export import ExportRefused, build_export, write_export
from grader.assign.markers import MarkerError
from grader.assign.scaffold import ScaffoldError, new_practical
from grader.assign.release import differences, release_practical, write
from grader.course import Course, CourseError, Practical, find_course_root, load_course, load_practical
from grader.checks import timing
from grader.collect import collect, parse_time, write_answers, write_grades
from grader.grade import calibration
from grader.grade.pipeline import GradeOptions, execute, grade
from grader.results.gradescope import write_results
from grader.results.model import GradingReport, Status
from grader.results.render import console_table, markdown
from grader.run.local import LocalRunner
from grader.run.sandbox import Limits, open_sandbox
from grader.run.virtual_env import virtual_gpu_environment
from grader.spec import SpecError
from grader.store import ResultsStore


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

    rel = commands.add_parser("release", help="regenerate assignments/ from solutions/ (the templates)")
    rel.add_argument("practicals", nargs="*", help="practical ids (default: all)")
    rel.add_argument("--check", action="store_true", help="change nothing; fail if assignments/ is out of step")

    x = commands.add_parser("export-student", help="write the students' starter repository (no solution can leak)")
    x.add_argument("practicals", nargs="+", help="practical ids")
    x.add_argument("--out", type=Path, required=True, help="an empty or new folder")

    n = commands.add_parser("new", help="scaffold a new practical from templates/practical/")
    n.add_argument("practical", help="its id, e.g. p7")
    n.add_argument("--title", required=True, help="its title")

    cal = commands.add_parser("calibrate", help="measure the reference solution here; speed checks compare with it")
    cal.add_argument("practical")
    cal.add_argument("--repeat", type=_positive_int, default=3, help="gradings to measure (the fastest of each run counts)")

    col = commands.add_parser("collect", help="grades out of a results store: one CSV row per student")
    col.add_argument("results_dir", type=Path)
    col.add_argument("--csv", type=Path, required=True, help="where to write the grades")
    col.add_argument("--answers", type=Path, help="where to write the free-text answers (default: next to --csv)")
    col.add_argument("--deadline", help="ISO 8601 time; later submissions are flagged (UTC without a zone)")

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
        runs = ", ".join(f"{r.name} ({r.layout.describe()}{f', {r.virtual_gpus} virtual GPUs' if r.virtual_gpus else ''})" for r in spec.runs)
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


def cmd_release(args: argparse.Namespace) -> int:
    course = _course(args)
    out_of_step = []
    for practical in args.practicals or course.practicals:
        try:
            released = release_practical(course, practical)
        except (MarkerError, FileNotFoundError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        if args.check:
            out_of_step += differences(course, released)
            continue
        changed = write(course, released)
        print(f"{practical}: " + (", ".join(changed) if changed else "up to date"))
    if out_of_step:
        print("assignments/ is out of step with solutions/ (run: python -m grader release):", *out_of_step, sep="\n  ")
        return 1
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    course = _course(args)
    unknown = [p for p in args.practicals if p not in course.practicals]
    if unknown:
        print(f"error: unknown practical(s) {', '.join(unknown)}; this course has: {', '.join(course.practicals)}", file=sys.stderr)
        return 1
    try:
        export = build_export(course, args.practicals)
        write_export(export, args.out)
    except (ExportRefused, FileExistsError, MarkerError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"exported {', '.join(args.practicals)} to {args.out} ({len(export.files)} files, no leak found)")
    return 0


def cmd_new(args: argparse.Namespace) -> int:
    course = _course(args)
    try:
        written = new_practical(course, args.practical, args.title)
    except (ScaffoldError, MarkerError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"made {args.practical}:", *written, sep="\n  ")
    print(f"next: edit solutions/{args.practical}/, then `python -m grader release {args.practical}` and `python -m grader verify {args.practical}`")
    return 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    course = _course(args)
    practical = load_practical(course, args.practical)
    best: dict[str, dict] = {}
    for _ in range(args.repeat):
        sandbox = open_sandbox()
        work = Path(tempfile.mkdtemp(prefix=f"grader-calibrate-{practical.id}-"))
        try:
            execution = execute(practical, course.solution_dir(practical.id), LocalRunner(work, sandbox=None if isinstance(sandbox, str) else sandbox), GradeOptions())
        finally:
            if not isinstance(sandbox, str):
                sandbox.release()
            shutil.rmtree(work, ignore_errors=True)
        if isinstance(execution, GradingReport):
            print(f"error: {execution.error}", file=sys.stderr)
            return 1
        for name, run in execution.results.items():
            measured = timing.summary(run)
            if measured and (name not in best or measured["median_step_s"] < best[name]["median_step_s"]):
                best[name] = {k: round(v, 6) if isinstance(v, float) else v for k, v in measured.items()}
    env = execution.environment
    key = calibration.machine_key(env["cuda_gpus"], env["devices"].split(" × ", 1)[-1] if env["cuda_gpus"] else "")
    path = calibration.record(course, practical.id, key, best, env["torch"])
    print(f"{practical.id} on {key}:")
    for name, values in sorted(best.items()):
        print(f"  {name}: median step {values['median_step_s'] * 1000:.2f} ms over {values['steps']} steps")
    print(f"recorded in {path}")
    return 0


def cmd_collect(args: argparse.Namespace) -> int:
    try:
        deadline = parse_time(args.deadline) if args.deadline else None
    except ValueError:
        print(f"error: --deadline {args.deadline!r} is not an ISO 8601 time (e.g. 2026-12-01T23:59:00+02:00)", file=sys.stderr)
        return 2
    if not args.results_dir.is_dir():
        print(f"error: {args.results_dir} is not a folder", file=sys.stderr)
        return 1
    table = collect(ResultsStore(args.results_dir), deadline)
    answers = args.answers or args.csv.with_name(args.csv.stem + ".answers.csv")
    write_grades(table, args.csv)
    write_answers(table, answers)
    late = sum(1 for row in table.values() for chosen in row.values() if chosen.late)
    print(f"{len(table)} students; grades in {args.csv}, free-text answers in {answers}; {late} late")
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


def cmd_check(args: argparse.Namespace) -> int:
    return cmd_grade(args, public_only=True)


COMMANDS = {
    "grade": cmd_grade,
    "check": cmd_check,
    "list": cmd_list,
    "verify": cmd_verify,
    "run": cmd_run,
    "release": cmd_release,
    "export-student": cmd_export,
    "new": cmd_new,
    "calibrate": cmd_calibrate,
    "collect": cmd_collect,
}


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except (CourseError, SpecError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
