"""What a grading job runs (`python -m grader work --results-dir DIR KEY`), on the node:
take the submission out of git (or the inbox), grade it officially (sandbox required), and
store the results with their provenance. A failure of the grader itself leaves the record
queued for a retry, up to MAX_ATTEMPTS; after that an autograder-error result is stored, so
no accepted submission ends without a result."""
from __future__ import annotations

import io
import os
import platform
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

from grader import __version__
from grader.course import Course, load_practical
from grader.grade.pipeline import GradeOptions
from grader.grade.session import grade_folder
from grader.results.gradescope import to_gradescope
from grader.results.model import GradingReport
from grader.run.tree import TreeRefused, copy_tree, open_folder, remove_tree
from grader.store import ResultsStore
from grader.submit.queue import MAX_ATTEMPTS, Queue, Submission, now


def git_free_environment() -> dict[str, str]:
    """This environment without git's hook variables (GIT_DIR=. and the like), which would
    point every git command of the grader at the student's repository."""
    return {name: value for name, value in os.environ.items() if not name.startswith("GIT_")}


class MaterialiseError(Exception):
    """The submission's files cannot be had (the commit or the folder is gone)."""


def materialise(submission: Submission, into: Path) -> Path:
    """The submission's folder for its practical, made under `into`."""
    folder = into / "submission"
    source = submission.source
    if source["kind"] == "folder":
        try:
            handle = open_folder(Path(source["path"]))  # the inbox entry may not have become another user's link
            try:
                copy_tree(handle, folder)  # links stay links; hard links and FIFOs are left out
            finally:
                os.close(handle)
        except (OSError, TreeRefused) as exc:
            raise MaterialiseError(f"the submitted folder cannot be taken: {exc}") from None
        return folder
    folder.mkdir()
    prefix = f"assignments/{submission.practical}"
    done = subprocess.run(["git", "--git-dir", source["repo"], "archive", "--format=tar", submission.commit, prefix], capture_output=True, timeout=120, env=git_free_environment())
    if done.returncode != 0:
        if b"did not match any files" in done.stderr or b"pathspec" in done.stderr:
            return folder  # the commit has no such practical: graded as a missing script
        raise MaterialiseError(f"git archive {submission.commit}: {done.stderr.decode(errors='replace').strip()[:300]}")
    with tarfile.open(fileobj=io.BytesIO(done.stdout)) as archive:
        extract(archive, prefix, folder)
    return folder


def extract(archive: tarfile.TarFile, prefix: str, folder: Path) -> None:
    """Extract the members under `prefix` into `folder` — as the grader, from a student's
    repository: no member may write outside `folder` (no '..', no path through a link), files
    are created afresh without following links, links are kept as links."""
    real_folder = os.path.realpath(folder)
    for member in archive.getmembers():
        relative = member.name[len(prefix):].lstrip("/")
        if not relative or ".." in Path(relative).parts or relative.startswith("/"):
            continue
        target = folder / relative
        if not os.path.realpath(target.parent).startswith(real_folder):
            continue  # a path through a link that leaves the folder
        if member.isdir():
            target.mkdir(parents=True, exist_ok=True)
        elif member.isfile():
            target.parent.mkdir(parents=True, exist_ok=True)
            source = archive.extractfile(member)
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o755 if member.mode & 0o111 else 0o644)
            with os.fdopen(fd, "wb") as handle:
                shutil.copyfileobj(source, handle)
        elif member.issym():
            target.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(member.linkname, target)


def template_version(course: Course, practical: str) -> str:
    """The course repository's last commit of the practical's template, when it is a git repo."""
    done = subprocess.run(["git", "-C", str(course.root), "log", "-1", "--format=%h", "--", f"assignments/{practical}"], capture_output=True, text=True, env=git_free_environment())
    return done.stdout.strip() or "unknown"


def provenance(submission: Submission, course: Course, report: GradingReport) -> dict:
    env = report.environment
    return {
        "student": submission.student,
        "practical": submission.practical,
        "commit": submission.commit,
        "submitted_at": submission.submitted_at,
        "graded_at": now(),
        "grader": __version__,
        "template_version": template_version(course, submission.practical),
        "node": platform.node(),
        "gpus": {"requested": submission.options.get("gpus", 0), "visible": os.environ.get("CUDA_VISIBLE_DEVICES", ""), "cuda": env.get("cuda_gpus", 0), "devices": env.get("devices", "")},
        "slurm_job": os.environ.get("SLURM_JOB_ID"),
        "backend": submission.backend,
        "attempt": submission.attempts + 1,
        "isolation": env.get("isolation", ""),
    }


def store_failure(store: ResultsStore, submission: Submission, course: Course, message: str) -> Path:
    """Store an autograder-error result: the submission is not lost, staff can regrade."""
    report = GradingReport.failure(submission.practical, message)
    return store.save(to_gradescope(report), provenance(submission, course, report))


def work(store: ResultsStore, course: Course, key: str) -> str:
    """Grade the queued submission `key`; return what happened, in a few words."""
    queue = Queue(store)
    submission = queue.load(key)
    if store.has(submission.student, submission.practical, submission.commit):
        queue.remove(key)
        return "graded already"
    practical = load_practical(course, submission.practical)
    scratch = Path(tempfile.mkdtemp(prefix="grader-work-"))
    try:
        folder = materialise(submission, scratch)
        options = GradeOptions(world_size=submission.options.get("world_size"))
        report = grade_folder(practical, folder, options, official=True).report
    except MaterialiseError as exc:
        report = GradingReport.failure(submission.practical, str(exc))
    except Exception as exc:  # noqa: BLE001 - the worker's own failure: retried, never lost
        report = GradingReport.failure(submission.practical, f"the grading job failed: {type(exc).__name__}: {exc}")
    finally:
        remove_tree(scratch)
    if report.error and submission.attempts + 1 < MAX_ATTEMPTS:
        submission.attempts += 1
        submission.state = "queued"
        submission.note(f"the grader failed ({report.error[:200]}); to be retried")
        queue.save(submission)
        return f"grader failure, retry {submission.attempts} of {MAX_ATTEMPTS - 1}"
    store.save(to_gradescope(report), provenance(submission, course, report))
    queue.remove(key)
    if report.error:
        return f"an autograder error is recorded after {submission.attempts + 1} attempts: {report.error[:200]}"
    return f"graded: {report.score:g}/{report.max_score:g}"
