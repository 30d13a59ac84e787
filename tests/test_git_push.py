"""Submission by `git push`, end to end with real parts: bare repositories with the installed
post-receive hook, students' clones pushing to them, grading jobs that run the sandboxed
grading (local processes, or a real single-node Slurm), and the results store."""
from __future__ import annotations

import datetime
import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from grader.submit.dispatch import WAITING_FOR_SLOT
from helpers import AS_ME, ROOT, checks_by_id, copy_course, git, needs, run_cli, sandbox_problem
from p6_variants import VARIANTS
from slurm_cluster import SlurmCluster, slurm_problem

pytestmark = [pytest.mark.slow, needs("sandbox", sandbox_problem())]
WRONG = next(v for v in VARIANTS if v.name == "not_wrapped")


def course_repository(tmp_path: Path, student: str, results: Path, *hook_args: str, env: dict | None = None, course: Path = ROOT) -> Path:
    """A student's bare repository holding the released templates, with the grading hook
    (grading by `course`), and the student's clone of it (returned)."""
    seed = tmp_path / f"{student}-seed"
    shutil.copytree(ROOT / "assignments", seed / "assignments")
    git("init", "-q", cwd=seed)
    git("add", "-A", cwd=seed)
    git("commit", "-qm", "the course's templates", cwd=seed)
    bare = tmp_path / f"{student}.git"
    git("clone", "-q", "--bare", str(seed), str(bare), cwd=tmp_path)
    done = run_cli("--course-root", str(course), "hook", "install", str(bare), "--results-dir", str(results), *AS_ME, *hook_args, env=env)
    assert done.returncode == 0 and done.stdout.strip() == f"installed {bare / 'hooks' / 'post-receive'}", done.stderr
    clone = tmp_path / student
    git("clone", "-q", str(bare), str(clone), cwd=tmp_path)
    return clone


def commit_solution(clone: Path, folder: Path, message: str) -> str:
    """Put `folder`'s p6 script into the clone's assignments/p6 and commit; the commit's id."""
    shutil.copy(folder / "p6_ddp.py", clone / "assignments" / "p6" / "p6_ddp.py")
    git("commit", "-qam", message, cwd=clone)
    return git("rev-parse", "HEAD", cwd=clone)


def push(clone: Path) -> str:
    """`git push` as the student sees it: what the remote said (git prints it on stderr)."""
    done = subprocess.run(["git", "push", "-q", "origin", "main"], cwd=clone, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return "\n".join(line.removeprefix("remote: ").strip() for line in done.stderr.splitlines() if line.startswith("remote:"))


def stored(results: Path, student: str, commit: str) -> dict:
    return json.loads((results / student / "p6" / f"{commit}.json").read_text())


def routing_course(target: Path) -> Path:
    """A copy of the course whose p6 `efficiency` allows 3× the reference's step, judged on one
    round of timed launches (the spec's first: one of the reference's, one of the
    submission's) rather than three: these tests are about where submissions and feedback go,
    and a grading must come out the same on a noisy CI machine (the speed verdict's own tests
    are in test_speed.py and test_p6_grading.py; its false fails are counted in bench/). Every
    run and check of the spec is kept, and a round more is still launched where the verdict
    is in doubt."""
    course = copy_course(target)
    for spec in (course / "solutions" / "p6" / "assignment.yaml", course / "assignments" / "p6" / "assignment.yaml"):
        text = spec.read_text()
        for old, new in (("options: {max_ratio: 1.3}", "options: {max_ratio: 3.0}"), ("timing: {repeats: 3,", "timing: {repeats: 1,")):
            assert text.count(old) == 1, old
            text = text.replace(old, new)
        spec.write_text(text)
    return course


def test_each_push_is_graded_for_the_right_student_and_commit(tmp_path: Path) -> None:
    results = tmp_path / "results"
    course = routing_course(tmp_path / "course")
    alice = course_repository(tmp_path, "alice", results, course=course)
    bob = course_repository(tmp_path, "bob", results, course=course)
    alice_commit = commit_solution(alice, ROOT / "solutions" / "p6", "DDP done")
    bob_commit = commit_solution(bob, WRONG.write(tmp_path / "wrong", "p6"), "DDP, I think")

    receipt = push(alice)
    assert receipt.startswith(f"queued p6 @{alice_commit[:7]}: started as job local-"), receipt
    assert receipt.endswith("\nfeedback, once graded: git fetch origin feedback && git show origin/feedback:p6.md")
    # the local backend grades one at a time (concurrent gradings would disturb each other's timing)
    assert push(bob).splitlines()[0] == f"queued p6 @{bob_commit[:7]}: {WAITING_FOR_SLOT}"
    (alice / "notes.md").write_text("to do: read about NCCL\n")
    git("add", "notes.md", cwd=alice)
    git("commit", "-qm", "notes", cwd=alice)
    assert push(alice) == f"nothing to grade in {git('rev-parse', 'HEAD', cwd=alice)[:7]} (no practical's folder changed)"

    # nobody dispatches again: alice's job starts bob's when it ends
    deadline = time.monotonic() + 240
    while not all((results / s / "p6" / f"{c}.json").exists() for s, c in (("alice", alice_commit), ("bob", bob_commit))) and time.monotonic() < deadline:
        time.sleep(1)

    good, wrong = stored(results, "alice", alice_commit), stored(results, "bob", bob_commit)
    assert good["score"] == good["extra_data"]["max_score"] == 20, {k: v["output"] for k, v in checks_by_id(good).items() if v.get("status") != "passed"}
    assert 0 < wrong["score"] < 20
    assert "no all-reduce at all: is the model wrapped in DistributedDataParallel?" in json.dumps(wrong["tests"])
    for document, student, commit in ((good, "alice", alice_commit), (wrong, "bob", bob_commit)):
        provenance = document["extra_data"]["provenance"]
        assert (provenance["student"], provenance["commit"], provenance["backend"], provenance["attempt"]) == (student, commit, "local", 1)
        assert provenance["isolation"].startswith("bubblewrap sandbox")
    assert sorted(p.relative_to(results).as_posix() for p in results.glob("*/p6/*.json")) == sorted([f"alice/p6/{alice_commit}.json", f"bob/p6/{bob_commit}.json"])

    status = run_cli("status", "--results-dir", str(results), "--student", "bob")
    assert status.stdout.split()[:4] == ["bob", "p6", bob_commit[:10], "graded"] and status.stdout.strip().endswith(f": {wrong['score']:g} of 21 points so far — 1 graded on a GPU node"), status.stdout
    assert "alice" not in status.stdout

    git("push", "-q", "origin", "main:refs/heads/again", cwd=alice)  # the same commits on another branch: not graded again
    assert len(list(results.glob("*/p6/*.json"))) == 2

    # the feedback, read from the students' own clones as the receipt says
    git("fetch", "-q", "origin", "feedback", cwd=alice)
    mine = git("show", "origin/feedback:p6.md", cwd=alice)
    assert "**Score: 16 of 21 points so far — 1 graded on a GPU node, 4 shown after the deadline**" in mine and f"Graded commit: {alice_commit}" in mine
    assert git("show", f"origin/feedback:p6/{alice_commit}.md", cwd=alice) == mine
    assert "Parameters stay identical" not in mine and "shown after the deadline" in mine  # params_sync: after_due_date
    assert "isolation" not in mine and "sandbox" not in mine
    git("fetch", "-q", "origin", "feedback", cwd=bob)
    theirs = git("show", "origin/feedback:p6.md", cwd=bob)
    assert "no all-reduce at all" in theirs and alice_commit not in theirs


def set_deadline(course: Path, practical: str, moment: datetime.datetime) -> None:
    """Give the course's `practical` a deadline (course.yaml, as the staff would)."""
    config = yaml.safe_load((course / "course.yaml").read_text())
    config["deadlines"] = {practical: moment.isoformat()}
    (course / "course.yaml").write_text(yaml.safe_dump(config))


@needs("slurm", slurm_problem())
def test_a_push_while_slurm_is_down_is_graded_once_it_is_back_and_its_feedback_reaches_the_clone(tmp_path: Path) -> None:
    cluster = SlurmCluster(tmp_path / "slurm")
    cluster.write_config()  # configured, not started: the controller does not answer
    course = routing_course(tmp_path / "course")
    set_deadline(course, "p6", datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1))
    results = tmp_path / "results"
    clone = course_repository(tmp_path, "carol", results, "--backend", "slurm", "--time", "10", env=cluster.env, course=course)
    commit = commit_solution(clone, ROOT / "solutions" / "p6", "DDP done")

    receipt = push(clone).splitlines()[0]  # returns within a few seconds although sbatch cannot get through
    assert receipt in (f"queued p6 @{commit[:7]}: recorded; grading starts when the cluster answers", f"queued p6 @{commit[:7]}: waiting (grading is down; it will be graded when it is back)"), receipt
    record = results / "queue" / f"carol--p6--{commit}.json"
    deadline = time.monotonic() + 60
    while "not started, the backend is down" not in record.read_text() and time.monotonic() < deadline:
        time.sleep(0.5)  # the hook's detached dispatcher is still waiting for sbatch to give up
    assert "not started, the backend is down: sbatch: " in record.read_text()

    cluster.start()
    daemons = [process.pid for process in cluster.processes]
    try:
        started = time.monotonic()
        done = run_cli("--course-root", str(course), "dispatch", "--results-dir", str(results), "--backend", "slurm", "--wait", "--timeout", "240", env=cluster.env)
        git("fetch", "-q", "origin", "feedback", cwd=clone)  # the student's view, from their own clone
        waited = time.monotonic() - started
    finally:
        cluster.stop()
    assert not any(Path(f"/proc/{pid}").exists() for pid in daemons)  # stopped by process id
    assert done.returncode == 0, done.stdout + done.stderr
    assert "started as job" in done.stdout
    document = stored(results, "carol", commit)
    assert document["score"] == 20, {k: v["output"] for k, v in checks_by_id(document).items() if v.get("status") != "passed"}
    provenance = document["extra_data"]["provenance"]
    assert provenance["slurm_job"] and provenance["attempt"] == 1 and provenance["commit"] == commit
    assert not record.exists()
    # the job was sized from the spec (4 ranks in a launch) and cut to the test cluster's one node
    script = (results / "logs" / f"carol--p6--{commit}.sbatch").read_text().splitlines()
    assert "#SBATCH --cpus-per-task=2" in script and "#SBATCH --mem=4000M" in script
    assert "# the grading wants 4 CPUs and 7168 MB; the largest node has 2 CPUs and 4000 MB, so it asks for 2 CPUs and 4000 MB (speed checks may then time ranks sharing CPUs)" in script

    # the feedback is in the clone within the grading's time + 60 s; params_sync (after_due_date) is not shown yet
    assert waited <= document["execution_time"] + 60, (waited, document["execution_time"])
    before = git("show", "origin/feedback:p6.md", cwd=clone)
    assert f"Graded commit: {commit}" in before and ": on time (your deadline: " in before
    assert "Parameters stay identical" not in before and "1 more check(s) are shown after the deadline" in before
    # the store is the staff's: another user (a student's) cannot read carol's result
    as_student = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "cat", str(results / "carol" / "p6" / f"{commit}.json")], capture_output=True, text=True)
    assert as_student.returncode != 0 and "Permission denied" in as_student.stderr

    # the deadline passes: the next dispatch (cron's) delivers the feedback again, whole
    set_deadline(course, "p6", datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=1))
    assert run_cli("--course-root", str(course), "dispatch", "--results-dir", str(results)).returncode == 0
    git("fetch", "-q", "origin", "feedback", cwd=clone)
    after = git("show", "origin/feedback:p6.md", cwd=clone)
    assert "Parameters stay identical" in after and "more check(s) are shown after the deadline" not in after
