"""The command line: a thin layer over the library. It is the only place that prints.

    python -m grader grade PRACTICAL SUBMISSION_DIR [--results PATH] [--world-size N] ...
    python -m grader check PRACTICAL [DIR]        the student's self-check (public checks)
    python -m grader list                         practicals, checks, points, visibility
    python -m grader verify [PRACTICAL ...]       grade the reference solutions
    python -m grader doctor                       what this machine can do for grading, with fixes
    python -m grader run --virtual-gpus N -- CMD  any command, its Python processes on N virtual GPUs
    python -m grader observe [--virtual-gpus N] [--out DIR] -- CMD
                                                  what CMD's processes did: devices, shapes, all-reduces, times
    python -m grader release [PRACTICAL ...]      assignments/ from solutions/ (the templates)
    python -m grader export-student P... --out D  the students' repository, scanned for leaks
    python -m grader new ID --title T             a new practical from templates/practical/
    python -m grader gradescope P --out Z         an autograder zip for Gradescope
    python -m grader calibrate PRACTICAL          baselines of the reference solution on this machine
    python -m grader collect RESULTS_DIR --csv F  grades out, by course.yaml's deadlines and late policy
    python -m grader similarity RESULTS_DIR       identical and near-identical submissions per practical
    python -m grader report RESULTS_DIR --out F   the class report (HTML with plots) for staff
    python -m grader submit P DIR --results-dir R a grading job (Slurm or local); --wait for the result
    python -m grader dispatch --results-dir R     start, watch and retry the queued gradings
    python -m grader hook install REPO ...        grade every git push to a bare repository
    python -m grader roster CSV --repos D ...     each student's bare repository: the export, the hook
    python -m grader status --results-dir R       what was graded, what is queued
    python -m grader regrade --results-dir R ...  grade stored results again (by practical, student, commit, errors, stale)

Exit status of grade: 0 when grading completed (whatever the score), 1 when the grader itself
could not grade (the results file then holds an "Autograder error" entry). Of check: 0 when
every public check graded here passed, 1 when one failed or the grader could not grade
(`--exit-zero`: 0 whenever grading completed). Both: 2 for a command line that cannot be
understood, an unknown practical among them.
"""
from __future__ import annotations

import argparse
import csv
import datetime
import getpass
import hashlib
import os
import socket
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Sequence, TextIO

from grader.assign.export import ExportRefused, build_export, write_export
from grader.assign.gradescope import gradescope_files, write_zip
from grader.assign.markers import MarkerError
from grader.assign.scaffold import ScaffoldError, new_practical
from grader.assign.release import differences, release_practical, write
from grader.course import Course, CourseError, Practical, check_source_spec, find_course_root, load_course, load_practical, unknown_practical
from grader.class_report import class_stats, render_html
from grader.collect import Chosen, collect, write_answers, write_grades
from grader.files import write_atomically
from grader.similarity import similar_in_course
from grader.doctor import PROBLEM, examine
from grader.policy import parse_time
from grader.grade.pipeline import GradeOptions
from grader.results.channels import Delivered, FromText, Outcome, Problem, Route, available, deliver_all
from grader.results.channels.markdown import SummaryFile
from grader.results.escape import spreadsheet_cell, terminal_line
from grader.observe.views import write_views
from grader.results.gradescope import autograder_error_of, read_report
from grader.results.model import GradingReport, Status
from grader.grade.session import CalibrationError, calibrate, grade_folder
from grader.observe.run import observe_command
from grader.run.tree import TreeRefused, copy_tree, remove_tree
from grader.run.virtual_env import virtual_gpu_environment
from grader.spec import SpecError
from grader.store import ResultsStore, StoreError
from grader.submit import hook
from grader.submit.backends import Backend, named_backend
from grader.submit.dispatch import dispatch, dispatch_coalesced, inbox, job_minutes, progress, settle, wait
from grader.submit.feedback import stored_report
from grader.submit.problems import open_problems
from grader.submit.queue import Queue, Submission
from grader.submit.regrade import Selection, regrade
from grader.submit.roster import RosterError, access_instructions, create_repositories, read_roster
from grader.submit.worker import work

CHECK_FOLDERS_KEPT = 3  # a student's self-checks keep their latest results and views, not every one


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


def _fraction(text: str) -> float:
    value = float(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"expected a fraction between 0 and 1, e.g. 0.8, found {text}")
    return value


def _id_list(text: str) -> list[str]:
    ids = [part.strip() for part in text.split(",") if part.strip()]
    if not ids:
        raise argparse.ArgumentTypeError(f"expected comma-separated ids, e.g. p4,p6, found {text!r}")
    return ids


def _store_folder(text: str) -> Path:
    if not Path(text).is_dir():
        raise argparse.ArgumentTypeError(f"{text} is not a folder")
    return Path(text)


def _iso_time(text: str) -> datetime.datetime:
    try:
        return parse_time(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO 8601 time (e.g. 2026-12-01T23:59:00+02:00)") from None


def _delivery(text: str) -> tuple[str, str]:
    name, equals, destination = text.partition("=")
    if not equals or not name or not destination:
        raise argparse.ArgumentTypeError(f"expected NAME=DEST (a feedback channel and where it delivers), found {text}")
    return name, destination


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
        sub.add_argument("--deliver", type=_delivery, action="append", default=[], metavar="NAME=DEST", help="also deliver the result through the feedback channel NAME to DEST (grader/results/channels/); repeatable")
        sub.add_argument("--keep-work", action="store_true", help="keep the working folder of the runs and print where it is")
        sub.add_argument("--no-timing", action="store_true", help="leave the speed checks out (deferred): no timed launches, a quicker grading")
        sub.add_argument("--no-views", action="store_true", help="do not write what the graded runs did (report, timeline, trace) beside the results")
        sub.add_argument("--no-sandbox", action="store_true", help="run the code with your own rights, without the sandbox and the per-job cgroups (refused with --official)")

    g = commands.add_parser("grade", help="grade a submission: every check, results.json")
    g.add_argument("practical", help="practical id, e.g. p6")
    g.add_argument("submission", type=Path, help="folder with the student's files")
    g.add_argument("--results", type=Path, default=Path("results.json"), help="where to write results.json (default: ./results.json)")
    g.add_argument("--official", action="store_true", help="refuse to grade without the sandbox (for graded submissions)")
    grading_options(g)

    c = commands.add_parser("check", help="self-check: the public checks on your own work")
    c.add_argument("practical", help="practical id, e.g. p6")
    c.add_argument("dir", nargs="?", type=Path, help="folder with your files (default: assignments/PRACTICAL)")
    c.add_argument("--results", type=Path, help="also write results.json here (and what your runs did beside it; without it, that goes to a new temporary folder)")
    c.add_argument("--exit-zero", action="store_true", help="exit 0 even when a check fails (the default exit status is 1 then, so CI shows it)")
    c.add_argument("--classroom", type=Path, help="also write the result for GitHub Classroom's grading reporter here (base64, the RUNNER_RESULTS value)")
    grading_options(c)

    commands.add_parser("list", help="practicals with their checks, points and visibility")

    rel = commands.add_parser("release", help="regenerate assignments/ from solutions/ (the templates)")
    rel.add_argument("practicals", nargs="*", help="practical ids (default: all)")
    rel.add_argument("--check", action="store_true", help="change nothing; fail if assignments/ is out of step")

    x = commands.add_parser("export-student", help="write the students' starter repository (no solution can leak)")
    x.add_argument("practicals", nargs="+", help="practical ids")
    x.add_argument("--out", type=Path, required=True, help="an empty or new folder")

    gs = commands.add_parser("gradescope", help="build an autograder zip for Gradescope (setup.sh, run_autograder)")
    gs.add_argument("practical", help="practical id, e.g. p6")
    gs.add_argument("--out", type=Path, default=Path("autograder.zip"), help="where to write the zip (default: ./autograder.zip)")

    n = commands.add_parser("new", help="scaffold a new practical from templates/practical/")
    n.add_argument("practical", help="its id, e.g. p7")
    n.add_argument("--title", required=True, help="its title")

    cal = commands.add_parser("calibrate", help="measure the reference solution here; speed checks compare with it")
    cal.add_argument("practical", help="practical id, e.g. p6 (one with speed checks)")
    cal.add_argument("--repeat", type=_positive_int, default=3, help="gradings to measure (the fastest of each run counts)")

    col = commands.add_parser("collect", help="grades out of a results store: one CSV row per student")
    col.add_argument("results_dir", type=_store_folder, help="the results store (a shared folder)")
    col.add_argument("--csv", type=Path, required=True, help="where to write the grades")
    col.add_argument("--answers", type=Path, help="where to write the free-text answers (default: next to --csv)")
    col.add_argument("--deadline", type=_iso_time, help="ISO 8601 time (UTC without a zone): one deadline for every practical, instead of course.yaml's deadlines and extensions")

    sim = commands.add_parser("similarity", help="identical and near-identical submissions per practical (copydetect; the template's lines left out)")
    sim.add_argument("results_dir", type=_store_folder, help="the results store (a shared folder)")
    sim.add_argument("--threshold", type=_fraction, default=0.8, help="flag a pair when this share of either's own code is shared (default 0.8)")
    sim.add_argument("--csv", type=Path, help="also write the pairs to this CSV file")

    rpt = commands.add_parser("report", help="the class report for staff: scores, pass rates, frequent failures, late work, alike pairs (HTML)")
    rpt.add_argument("results_dir", type=_store_folder, help="the results store (a shared folder)")
    rpt.add_argument("--out", type=Path, required=True, help="the HTML file to write")
    rpt.add_argument("--threshold", type=_fraction, default=0.8, help="similarity that flags a pair (default 0.8)")

    def backend_options(sub: argparse.ArgumentParser, job_options: bool = True) -> None:
        sub.add_argument("--results-dir", type=Path, required=True, help="the results store (a shared folder)")
        sub.add_argument("--backend", choices=("local", "slurm"), default="local", help="where grading jobs run (default: local)")
        if job_options:  # kept with each queued submission, so they hold for its retries too
            sub.add_argument("--partition", help="Slurm partition")
            sub.add_argument("--time", type=_positive_int, help="Slurm time limit of a grading job, minutes (default: the spec's budget + 5)")
            sub.add_argument("--gpus", type=_count, default=0, help="GPUs to ask Slurm for (GRES)")
            sub.add_argument("--cpus", type=_positive_int, help="CPUs of a grading job (default: the ranks of the spec's largest launch)")
            sub.add_argument("--mem", type=_positive_int, help="memory of a grading job, MB (default: the sandbox's cap of one launch + 1 GiB)")

    su = commands.add_parser("submit", help="queue a grading job for a folder (on Slurm or locally)")
    su.add_argument("practical", help="practical id, e.g. p6")
    su.add_argument("submission", type=Path, help="folder with the student's files")
    backend_options(su)
    su.add_argument("--student", default=os.environ.get("USER") or "unknown", help="whose submission (default: $USER)")
    su.add_argument("--commit", help="the submission's version (default: a digest of its files)")
    su.add_argument("--world-size", type=_positive_int, help="one run of N ranks instead of the spec's runs")
    su.add_argument("--wait", action="store_true", help="wait for the result and show it")
    su.add_argument("--markdown", type=Path, help="with --wait: append the student's view of the result here (e.g. $GITHUB_STEP_SUMMARY)")

    d = commands.add_parser("dispatch", help="start queued gradings, watch running ones, retry failed ones")
    backend_options(d, job_options=False)
    d.add_argument("--wait", action="store_true", help="until the queue is empty")
    d.add_argument("--timeout", type=_positive_float, default=3600, help="seconds to wait at most (with --wait)")
    d.add_argument("--coalesce", action="store_true", help="(run by the git hook) one such dispatcher at a time: a second asks the running one for another pass and ends")

    w = commands.add_parser("work", help="(run by grading jobs) grade one queued submission of the store")
    w.add_argument("--results-dir", type=Path, required=True, help="the results store (a shared folder)")
    w.add_argument("--then-dispatch", choices=("local", "slurm"), help="then one dispatch pass on this backend")
    w.add_argument("key", help="the queued submission's key")

    h = commands.add_parser("hook", help="git: install the post-receive hook of a bare repository")
    hooks = h.add_subparsers(dest="hook_command", required=True)
    hi = hooks.add_parser("install", help="install the hook")
    hi.add_argument("repo", type=Path, help="the bare repository")
    backend_options(hi)
    hi.add_argument("--student", help="whose repository (default: its folder name without .git)")
    hi.add_argument("--allow-root", action="store_true", help="install it as root all the same (the hook then runs as root on every push)")
    hr = hooks.add_parser("receive", help="(run by the installed hook) queue what a push brought")
    hr.add_argument("--repo", type=Path, required=True, help="the bare repository")
    hr.add_argument("--student", required=True, help="whose repository")
    backend_options(hr)

    ro = commands.add_parser("roster", help="make each student's bare repository from a roster CSV: seeded with the student export, the hook installed")
    ro.add_argument("roster", type=Path, help="CSV file: a header line with a `student` column (other columns are ignored), then one student a line")
    ro.add_argument("--repos", type=Path, required=True, help="the folder of the repositories: each student's is REPOS/<student>.git")
    ro.add_argument("--practicals", type=_id_list, help="comma-separated practical ids the export holds, e.g. p4,p6 (default: all the course's)")
    ro.add_argument("--allow-root", action="store_true", help="make them as root all the same (root's account then serves the pushes and runs the hook)")
    backend_options(ro)

    rg = commands.add_parser("regrade", help="grade stored results again (keeping the earlier ones): by practical, student, commit, errors or stale")
    backend_options(rg, job_options=False)
    rg.add_argument("--practical", help="only this practical")
    rg.add_argument("--student", help="only this student")
    rg.add_argument("--commit", help="only this commit (or the first characters of it)")
    rg.add_argument("--errors", action="store_true", help="only results that are autograder errors")
    rg.add_argument("--stale", action="store_true", help="only results graded by another grader version or another version of the spec")
    rg.add_argument("--deferred", action="store_true", help="only results with checks deferred for their machine: a follow-up of those checks alone at course.yaml's `deferred` place, merged into the grade")
    rg.add_argument("--wait", action="store_true", help="dispatch until the regrades are done")

    st = commands.add_parser("status", help="what was graded, what is queued")
    st.add_argument("--results-dir", type=Path, required=True, help="the results store (a shared folder)")
    st.add_argument("--student", help="only this student")

    r = commands.add_parser("run", help="run any command on virtual GPUs: run --virtual-gpus 4 -- python train.py")
    r.add_argument("--virtual-gpus", type=_count, required=True, help="CUDA devices to pretend (required: how many GPUs the program should see)")
    r.add_argument("cmd", nargs=argparse.REMAINDER, help="-- then the command, e.g. -- torchrun --nproc_per_node=2 train.py")

    o = commands.add_parser("observe", help="run a command unmodified and report what its processes did: observe -- torchrun ... train.py")
    o.add_argument("--virtual-gpus", type=_count, default=0, help="CUDA devices to pretend (default 0: the real ones, or the CPU)")
    o.add_argument("--out", type=Path, default=Path("observe-out"), help="where the timeline PNG, the trace JSON and the events go (default ./observe-out)")
    o.add_argument("cmd", nargs=argparse.REMAINDER, help="-- then the command, e.g. -- torchrun --nproc_per_node=2 train.py")

    commands.add_parser("doctor", help="what this machine can do for grading (driver, NVML, CUDA, NCCL, sandbox, cgroups), with fixes")

    v = commands.add_parser("verify", help="grade the reference solutions; fails unless each gets full marks")
    v.add_argument("practicals", nargs="*", help="practical ids (default: all)")
    v.add_argument("--results-dir", type=Path, help="write each practical's results.json into this folder")
    return parser


def _course(args: argparse.Namespace) -> Course:
    return load_course(find_course_root(args.course_root))


def _say(text: str, file: TextIO | None = None) -> None:
    """Print one line that carries text from a submission, the store or the queue (escaped)."""
    print(terminal_line(text), file=file or sys.stdout, flush=True)


def _grade_folder(practical: Practical, folder: Path, options: GradeOptions, keep_work: bool, official: bool = False, contain: bool = True) -> GradingReport:
    graded = grade_folder(practical, folder, options, official=official, keep_work=keep_work, contain=contain)
    if graded.warning:
        _say(f"warning: {graded.warning}", sys.stderr)
    if graded.kept:
        print(f"working folder kept: {graded.kept}", file=sys.stderr)
    return graded.report


def _options(args: argparse.Namespace, public_only: bool) -> GradeOptions:
    return GradeOptions(
        world_size=args.world_size,
        virtual_gpus=args.virtual_gpus,
        public_only=public_only,
        seed=args.seed,
        run_timeout_s=args.timeout,
        total_timeout_s=args.time_budget,
        timing=not args.no_timing,
        progress=_progress if sys.stderr.isatty() else None,  # a terminal only: logs stay clean
    )


def _progress(text: str) -> None:
    print(f"… {text}", file=sys.stderr, flush=True)


def check_folder(keep: int = CHECK_FOLDERS_KEPT) -> Path:
    """A new folder for a self-check's results and views (`pdl-check-*` in the temporary
    folder); of this user's earlier ones, only the latest `keep` - 1 stay."""
    made = Path(tempfile.mkdtemp(prefix="pdl-check-"))
    earlier = []
    for path in Path(tempfile.gettempdir()).glob("pdl-check-*"):
        info = path.lstat()
        if path != made and stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid():
            earlier.append((info.st_mtime, path))
    remove_tree(*(path for _, path in sorted(earlier)[: max(len(earlier) - (keep - 1), 0)]))
    return made


def _asked_routes(args: argparse.Namespace) -> list[Route]:
    """The routes of --deliver NAME=DEST; ValueError names an unknown channel."""
    channels = available()
    routes = []
    for name, text in args.deliver:
        channel = channels.get(name)
        if not isinstance(channel, FromText):
            known = ", ".join(n for n, c in channels.items() if isinstance(c, FromText))
            raise ValueError(f"no feedback channel {name!r} takes a destination from the command line; these do: {known}")
        routes.append(Route(channel, channel.destination_from(text)))
    return routes


def _emit(report: GradingReport, results: Path | None, routes: Sequence[Route], with_views: bool = True) -> bool:
    """Write the views beside `results`, then deliver the report: the results file first, then
    every route in order (the console among them); whether every channel delivered."""
    if with_views and results is not None:
        report = write_views(report, results)
    first = [Route(available()["gradescope"], results)] if results is not None else []
    outcomes = deliver_all(report, [*first, *routes])
    if any(isinstance(o, Delivered) and o.channel == "gradescope" for o in outcomes):
        print(f"results written to {results}")
    return _delivered(outcomes)


def _delivered(outcomes: Sequence[Outcome]) -> bool:
    """Name each channel's problem on standard error; whether every channel delivered."""
    problems = [o for o in outcomes if isinstance(o, Problem)]
    for problem in problems:
        _say(f"error: {problem.channel}: {problem.message}", sys.stderr)
    return not problems


def cmd_grade(args: argparse.Namespace, public_only: bool = False) -> int:
    """grade / check: every path ends in a written results file (when one was asked for)."""
    started = time.monotonic()
    try:
        asked = _asked_routes(args)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        course = _course(args)
        if public_only and args.practical not in course.practicals:
            print(f"error: {unknown_practical(course, args.practical)}", file=sys.stderr)
            return 2
        practical = load_practical(course, args.practical)
        folder = args.submission if not public_only else (args.dir or course.template_dir(args.practical))
        report = _grade_folder(practical, folder, _options(args, public_only), args.keep_work, official=getattr(args, "official", False), contain=not args.no_sandbox)
    except (CourseError, SpecError) as exc:
        report = GradingReport.failure(args.practical, str(exc), execution_time_s=time.monotonic() - started)
    except Exception as exc:  # noqa: BLE001 - the results file must exist even then
        report = GradingReport.failure(args.practical, f"internal error: {type(exc).__name__}: {exc}", execution_time_s=time.monotonic() - started)
    results = args.results
    if results is None and public_only and not args.no_views:  # the views need a place: a folder of the check's own, named when written
        results = check_folder() / "results.json"
    channels = available()
    routes = [Route(channels["markdown"], SummaryFile(args.markdown))] if args.markdown is not None else []
    routes.append(Route(channels["console"], sys.stdout))
    if public_only and args.classroom is not None:
        routes.append(Route(channels["classroom"], args.classroom))
    delivered = _emit(report, results, [*routes, *asked], with_views=not args.no_views)
    status = _check_status(report, args.exit_zero) if public_only else 1 if report.error else 0
    return status if delivered else max(status, 1)


def _check_status(report: GradingReport, exit_zero: bool) -> int:
    """The self-check's exit status: 1 when the grader could not grade, or (unless
    `exit_zero`) when a check failed; checks left to another machine do not count."""
    if report.error:
        return 1
    return 0 if exit_zero or not any(c.status in (Status.FAILED, Status.ERROR) for c in report.checks) else 1


def cmd_list(args: argparse.Namespace) -> int:
    course = _course(args)
    print(f"{course.title} ({course.root})")
    broken = 0
    for practical_id in course.practicals:
        try:
            practical = load_practical(course, practical_id)
        except (CourseError, SpecError) as exc:  # one bad practical does not hide the others
            broken += 1
            print(f"\n{practical_id}: cannot be loaded: {exc}")
            continue
        spec = practical.assignment
        runs = ", ".join(f"{r.name} ({r.layout.describe()}{f', {r.virtual_gpus} virtual GPUs' if r.virtual_gpus else ''})" for r in spec.runs)
        print(f"\n{spec.id}: {spec.title} — {spec.max_score:g} points; script {spec.script}; runs: {runs}")
        for check in spec.checks:
            print(f"  {check.id:<16} {check.points:>4g} pts  {check.visibility:<15} {check.title}")
    return 1 if broken else 0


def cmd_verify(args: argparse.Namespace) -> int:
    course = _course(args)
    failed = []
    for practical_id in args.practicals or course.practicals:
        practical = load_practical(course, practical_id)
        report = _grade_folder(practical, course.solution_dir(practical_id), GradeOptions(), keep_work=False)
        results = args.results_dir / f"{practical_id}.json" if args.results_dir else None
        _emit(report, results, [Route(available()["console"], sys.stdout)])
        full = not report.error and all(c.status in (Status.PASSED, Status.DEFERRED) for c in report.checks)
        deferred = [c.id for c in report.checks if c.status is Status.DEFERRED]
        later = f" (deferred, not graded here: {', '.join(deferred)})" if deferred else ""
        print(f"==> {practical_id}: {report.headline()}: {'FULL MARKS' if full else 'NOT FULL MARKS'}{later}\n")
        if not full:
            failed.append(practical_id)
    if failed:
        print(f"reference solutions below full marks: {', '.join(failed)}")
        return 1
    print("every reference solution gets full marks")
    return 0


def cmd_release(args: argparse.Namespace) -> int:
    course = _course(args)
    practicals = args.practicals or course.practicals
    invalid = []
    for practical in practicals:  # every spec first: nothing is released from a bad one
        try:
            check_source_spec(course, practical)
        except (CourseError, SpecError) as exc:
            invalid.append(practical)
            print(f"error: {exc}", file=sys.stderr)
    if invalid:
        print(f"nothing released: fix the spec of {', '.join(invalid)} first", file=sys.stderr)
        return 1
    out_of_step = []
    for practical in practicals:
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


def cmd_gradescope(args: argparse.Namespace) -> int:
    course = _course(args)
    if args.practical not in course.practicals:
        print(f"error: {unknown_practical(course, args.practical)}", file=sys.stderr)
        return 2
    files = gradescope_files(course, args.practical)
    write_zip(files, args.out)
    print(f"wrote {args.out} ({len(files)} files): upload it as the autograder of {args.practical} on Gradescope (Ubuntu base image)")
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
    try:
        key, measured, path = calibrate(course, load_practical(course, args.practical), args.repeat)
    except CalibrationError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"{args.practical} on {key}:")
    for name, values in sorted(measured.items()):
        print(f"  {name}: median step {values['median_step_s'] * 1000:.2f} ms over {values['steps']} steps")
    print(f"recorded in {path}")
    return 0


def _counted(args: argparse.Namespace) -> tuple[Course, dict[str, dict[str, Chosen]]]:
    """The course and the submissions that count in the store, by the course's policy (or
    `--deadline`'s one deadline)."""
    course = _course(args)
    every = getattr(args, "deadline", None)
    return course, collect(ResultsStore(args.results_dir), replace(course.policy, every=every) if every else course.policy)


def cmd_similarity(args: argparse.Namespace) -> int:
    course, table = _counted(args)
    found = similar_in_course(course, table, ResultsStore(args.results_dir).root / "inbox", args.threshold)
    for pair in found.pairs:
        _say(f"{pair.practical:<5} {pair.first:<16} {pair.second:<16} {pair.describe}")
    for note in found.left_out:
        _say(f"left out: {note}")
    if args.csv:
        with open(args.csv, "w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(["practical", "student", "student", "similarity", "identical"])
            writer.writerows([spreadsheet_cell(c) for c in (p.practical, p.first, p.second, f"{p.similarity:.3f}", "yes" if p.identical else "no")] for p in found.pairs)
    print(f"{len(found.pairs)} pair(s) at least {args.threshold:.0%} alike" + (f"; written to {args.csv}" if args.csv else ""))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    course, table = _counted(args)
    found = similar_in_course(course, table, ResultsStore(args.results_dir).root / "inbox", args.threshold)
    page = render_html(course.title or "Course", class_stats(table, found), notes=found.left_out)
    write_atomically(args.out, page, mode=0o640)  # the staff's, as the store is
    print(f"class report of {len(table)} students written to {args.out}")
    return 0


def cmd_collect(args: argparse.Namespace) -> int:
    _, table = _counted(args)
    answers = args.answers or args.csv.with_name(args.csv.stem + ".answers.csv")
    write_grades(table, args.csv)
    write_answers(table, answers)
    late = [f"{student} ({practical}: {chosen.lateness.effect})" for student, row in table.items() for practical, chosen in row.items() if chosen.late]
    print(f"{len(table)} students; grades in {args.csv}, free-text answers in {answers}; {len(late)} late{': ' if late else ''}{', '.join(late)}")
    return 0


def _command(args: argparse.Namespace, example: str) -> list[str] | None:
    """The command after `--`, or None (and why, on stderr) when there is none."""
    command = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not command:
        print(f"error: no command given; e.g. python -m grader {example}", file=sys.stderr)
    return command or None


def cmd_run(args: argparse.Namespace) -> int:
    command = _command(args, "run --virtual-gpus 4 -- python train.py")
    if command is None:
        return 2
    try:
        return subprocess.call(command, env=virtual_gpu_environment(args.virtual_gpus))
    except FileNotFoundError:
        print(f"error: command not found: {command[0]}", file=sys.stderr)
        return 127


def cmd_observe(args: argparse.Namespace) -> int:
    """Run the command observed, print the report; the exit status is the command's."""
    command = _command(args, "observe -- torchrun --nproc_per_node=2 train.py")
    if command is None:
        return 2
    observation = observe_command(command, args.out, args.virtual_gpus)
    print(observation.report, flush=True)
    return observation.exit_status


def _job_options(args: argparse.Namespace) -> dict:
    """The options of a grading job that are kept with its queued submission."""
    return {"gpus": args.gpus, "partition": args.partition, "time_min": args.time, "cpus": args.cpus, "mem_mb": args.mem}


def _folder_digest(folder: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and not p.is_symlink() and ".git" not in p.parts):
        digest.update(path.relative_to(folder).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


def cmd_submit(args: argparse.Namespace) -> int:
    course = _course(args)
    practical = load_practical(course, args.practical)
    if not args.submission.is_dir():
        print(f"error: {args.submission} is not a folder", file=sys.stderr)
        return 1
    store = ResultsStore(args.results_dir)
    time_min = args.time or job_minutes(course, practical.id)
    options = {**_job_options(args), "time_min": time_min, "world_size": args.world_size}
    submission = Submission(
        student=args.student,
        practical=practical.id,
        commit=args.commit or _folder_digest(args.submission),
        source={"kind": "folder", "path": ""},
        backend=args.backend,
        options=options,
    )
    try:
        submission.source["path"] = str(inbox(store, submission.key))
        status = Queue(store).add(submission)
    except StoreError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if status == "queued":
        try:
            target = inbox(store, submission.key)
            target.parent.mkdir(parents=True, exist_ok=True)
            remove_tree(target)  # what an earlier, refused submission of the same version left
            copy_tree(args.submission, target)  # links stay links; hard links and FIFOs are left out
        except (OSError, TreeRefused) as exc:
            Queue(store).remove(submission.key)
            print(f"error: {args.submission} cannot be submitted: {exc}", file=sys.stderr)
            return 1
        what = settle(Queue(store), submission, course, named_backend(args.backend))
        _say(f"queued {submission.practical} for {submission.student} @{submission.commit}: {what}")
    else:
        _say(f"{submission.practical} for {submission.student} @{submission.commit}: {status}")
    if not args.wait:
        return 0
    if not wait(store, course, named_backend(args.backend), {submission.key}, timeout_s=time_min * 60 + 600, report=_say):
        print("error: no result in time; the submission stays queued", file=sys.stderr)
        return 1
    path = store.path_for(submission.student, submission.practical, submission.commit)
    entry = store.entry(submission.student, submission.practical, submission.commit)
    seen = stored_report(entry, course.policy, datetime.datetime.now(datetime.timezone.utc)) if entry is not None else None  # what the student is shown
    _say(f"graded: {seen.headline() if seen is not None else 'no readable result'}")
    print(f"results: {path}")
    if args.markdown is not None and entry is not None and seen is not None:
        summary = SummaryFile(args.markdown, graded_commit=entry.commit)
        outcomes = deliver_all(seen, [Route(available()["markdown"], summary)])
        return 0 if _delivered(outcomes) else 1
    return 0


def cmd_dispatch(args: argparse.Namespace) -> int:
    course = _course(args)
    store = ResultsStore(args.results_dir)
    if args.wait:
        return 0 if wait(store, course, named_backend(args.backend), timeout_s=args.timeout, report=_say) else 1
    if args.coalesce:
        happened = dispatch_coalesced(store, course, named_backend(args.backend))
        if happened is None:
            _say("another dispatcher is running: it makes one more pass for this one")
        for key, what in (happened or {}).items():
            _say(f"{key}: {what}")
        return 0
    for key, what in dispatch(store, course, named_backend(args.backend)).items():
        _say(f"{key}: {what}")
    return 0


def cmd_regrade(args: argparse.Namespace) -> int:
    course, store = _course(args), ResultsStore(args.results_dir)
    selection = Selection(practical=args.practical, student=args.student, commit=args.commit, errors=args.errors, stale=args.stale, deferred=args.deferred)
    done = regrade(store, course, selection, args.backend)
    for item in done:
        _say(f"{item.name}: {item.what}")
    keys = {item.key for item in done if item.key}
    print(f"{len(keys)} of {len(done)} selected result(s) queued again" if done else "no stored result matches")
    if args.wait and keys:
        return 0 if wait(store, course, named_backend(args.backend), keys=keys, report=_say) else 1
    if keys:
        dispatch(store, course, named_backend(args.backend))
    return 0


def cmd_work(args: argparse.Namespace) -> int:
    store, course = ResultsStore(args.results_dir), _course(args)
    _say(work(store, course, args.key))
    if args.then_dispatch:
        for key, what in dispatch(store, course, named_backend(args.then_dispatch)).items():
            _say(f"{key}: {what}")
    return 0


AS_ROOT = (
    "error: {command} as root: the students' pushes would reach root's account (their keys in root's authorized_keys) and the hook would run as root "
    "on every push. Run it as a dedicated git account that owns the repositories and can write the results store (docs/admins.md), "
    "or pass --allow-root if root is meant."
)


def _refused_as_root(args: argparse.Namespace, command: str) -> bool:
    """Whether `command` (roster, hook install) is run as root without --allow-root: then it says why on stderr."""
    if os.geteuid() != 0 or args.allow_root:
        return False
    print(AS_ROOT.format(command=command), file=sys.stderr)
    return True


def cmd_hook(args: argparse.Namespace) -> int:
    course = _course(args)
    if args.hook_command == "install":
        if _refused_as_root(args, "hook install"):
            return 2
        try:
            path = hook.install(args.repo, args.results_dir, args.backend, _job_options(args), course.root, args.student)
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        print(f"installed {path}")
        return 0
    try:
        store = ResultsStore(args.results_dir)
        command = hook.dispatcher_command(course.root, store.root, args.backend)
        hook.receive(sys.stdin, args.repo, store, course, args.student, args.backend, _job_options(args), lambda: hook.start_dispatcher(command, store), sys.stdout)
    except Exception as exc:  # noqa: BLE001 - never break a push
        _say(f"grading could not take this push ({type(exc).__name__}: {exc}); it is recorded in git and will be graded later")
    return 0


def cmd_roster(args: argparse.Namespace) -> int:
    """Each student's repository of the roster; exit 1 when one (or all) could not be made."""
    if _refused_as_root(args, "roster"):
        return 2
    course = _course(args)
    practicals = args.practicals or list(course.practicals)
    unknown = [p for p in practicals if p not in course.practicals]
    if unknown:
        print(f"error: unknown practical(s) {', '.join(unknown)}; this course has: {', '.join(course.practicals)}", file=sys.stderr)
        return 1
    try:
        students = read_roster(args.roster)
        made = create_repositories(course, students, args.repos, practicals, args.results_dir, args.backend, _job_options(args))
    except (RosterError, ExportRefused, MarkerError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)  # a roster's cells are shown with repr(): escaped
        return 1
    for student in made.created:
        _say(f"created {made.repository(student)}")
    for student in made.kept:
        _say(f"kept    {made.repository(student)} (it exists: left as it is)")
    for student, why in made.failed:
        _say(f"failed  {student}: {why}", sys.stderr)
    print(f"{len(made.created)} created, {len(made.kept)} kept, {len(made.failed)} failed; the export holds {', '.join(practicals)}")
    print()
    for line in access_instructions(args.repos, getpass.getuser(), socket.gethostname(), students[0]):
        print(line)
    return 1 if made.failed else 0


def cmd_status(args: argparse.Namespace) -> int:
    store = ResultsStore(args.results_dir)
    rows = [e for e in store.entries() if args.student in (None, e.student)]
    for entry in rows:
        graded_at = entry.provenance.get("graded_at", "?")
        outcome = "failed (an autograder error; staff will regrade)" if autograder_error_of(entry.document) else "graded"
        _say(f"{entry.student:<16} {entry.practical:<5} {entry.commit[:10]:<10} {outcome} {graded_at}: {read_report(entry.document).headline()}")
    for problem in open_problems(store):
        _say(f"PROBLEM on {problem.node}, {problem.count} submission(s) since {problem.first_seen}: {problem.message}", sys.stderr)
        _say("  fix it, then: python -m grader regrade --results-dir DIR --errors", sys.stderr)
    backends: dict[str, Backend] = {}
    for submission in Queue(store).pending():
        if args.student in (None, submission.student):
            backend = backends.setdefault(submission.backend, named_backend(submission.backend)) if submission.backend in ("local", "slurm") else None
            what = f"follow-up of {', '.join(submission.checks)}: " if submission.checks else ""
            _say(f"{submission.student:<16} {submission.practical:<5} {submission.commit[:10]:<10} {what}{progress(submission, backend)}")
    if not rows and not Queue(store).pending():
        print("nothing graded or queued")
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    try:
        course_root: Path | None = find_course_root(args.course_root)
    except CourseError:
        course_root = None
    problems = 0
    for finding in examine(course_root):
        problems += finding.status == PROBLEM
        _say(f"{finding.status:<9} {finding.name:<9} {finding.seen}")
        if finding.fix:
            _say(f"{'':<19}fix: {finding.fix}")
    print("everything this machine has works" if not problems else f"{problems} problem(s): see the fixes above")
    return 1 if problems else 0


def cmd_check(args: argparse.Namespace) -> int:
    return cmd_grade(args, public_only=True)


COMMANDS = {
    "grade": cmd_grade,
    "check": cmd_check,
    "list": cmd_list,
    "verify": cmd_verify,
    "doctor": cmd_doctor,
    "run": cmd_run,
    "observe": cmd_observe,
    "release": cmd_release,
    "export-student": cmd_export,
    "new": cmd_new,
    "gradescope": cmd_gradescope,
    "calibrate": cmd_calibrate,
    "collect": cmd_collect,
    "similarity": cmd_similarity,
    "report": cmd_report,
    "submit": cmd_submit,
    "dispatch": cmd_dispatch,
    "work": cmd_work,
    "hook": cmd_hook,
    "roster": cmd_roster,
    "status": cmd_status,
    "regrade": cmd_regrade,
}


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except (CourseError, SpecError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
