"""The submission queue, the dispatcher's decisions, the results store and the git hook's
receipts, with the fake backend (jobs are records a test ends as it likes). The same
scenarios against a real Slurm and real pushes are in test_slurm.py and test_git_push.py."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from grader.course import load_course
from grader.results.gradescope import to_gradescope
from grader.results.model import CheckResult, GradingReport, Status
from grader.store import ResultsStore, StoreError
from grader.submit import hook
from grader.submit.backends import FakeBackend, JobSize, JobState, LocalBackend, SlurmBackend
from grader.submit.dispatch import COALESCED, WAITING_FOR_SLOT, dispatch, dispatch_coalesced, job_size, pass_requested, progress
from grader.submit.queue import MAX_ATTEMPTS, Queue, Submission
from grader.run.sandbox import SandboxMissing, open_sandbox
from grader.submit.problems import open_problems
from grader.submit.regrade import Selection, regrade
from grader.submit.worker import materialise, ready_to_grade, store_failure, work
from helpers import ROOT, copy_course, git, needs, run_cli, sandbox_problem

COURSE = load_course(ROOT)
COMMIT = "c0ffee1234"

READ_FEEDBACK = "feedback, once graded: git fetch origin feedback && git show origin/feedback:p6.md"


@pytest.fixture
def store(tmp_path: Path) -> ResultsStore:
    return ResultsStore(tmp_path / "results")


def folder_submission(path: Path, student: str = "alice", commit: str = COMMIT) -> Submission:
    return Submission(student=student, practical="p6", commit=commit, source={"kind": "folder", "path": str(path)}, backend="fake")


def graded_document(score: float) -> dict:
    return to_gradescope(GradingReport("p6", "DDP", (CheckResult("grad_sync", "Gradients", 1, score, 12.0, Status.PASSED if score == 12 else Status.FAILED, "said"),)))


def provenance_of(student: str = "alice", commit: str = COMMIT) -> dict:
    return {"student": student, "practical": "p6", "commit": commit}


def only_job(backend: FakeBackend) -> str:
    assert len(backend.jobs) == 1, backend.jobs
    return next(iter(backend.jobs))


def test_the_same_commit_is_queued_once_and_graded_once(store: ResultsStore, tmp_path: Path) -> None:
    queue, backend = Queue(store), FakeBackend()
    assert queue.add(folder_submission(tmp_path)) == "queued"
    assert queue.add(folder_submission(tmp_path)) == "already queued"
    assert dispatch(store, COURSE, backend) == {f"alice--p6--{COMMIT}": "started as job fake-1"}
    assert dispatch(store, COURSE, backend) == {f"alice--p6--{COMMIT}": "pending"}
    store.save(graded_document(12), provenance_of())  # what the job's worker does
    backend.finish("fake-1")
    assert dispatch(store, COURSE, backend) == {f"alice--p6--{COMMIT}": "graded"}
    assert queue.pending() == []
    assert queue.add(folder_submission(tmp_path)) == "graded"
    assert dispatch(store, COURSE, backend) == {}
    assert only_job(backend) == "fake-1"


def test_a_backend_with_one_slot_starts_the_next_grading_when_the_running_one_ends(store: ResultsStore, tmp_path: Path) -> None:
    queue, backend = Queue(store), FakeBackend(slots=1)
    other = "0123456789abcdef0123456789abcdef01234567"
    assert queue.add(folder_submission(tmp_path)) == "queued"
    assert queue.add(folder_submission(tmp_path, "bob", other)) == "queued"
    assert dispatch(store, COURSE, backend) == {f"alice--p6--{COMMIT}": "started as job fake-1", f"bob--p6--{other}": WAITING_FOR_SLOT}
    assert dispatch(store, COURSE, backend)[f"bob--p6--{other}"] == WAITING_FOR_SLOT
    assert sum(line.endswith(WAITING_FOR_SLOT) for line in queue.load(f"bob--p6--{other}").history) == 1  # said once
    store.save(graded_document(12), provenance_of())
    backend.finish("fake-1")
    assert dispatch(store, COURSE, backend) == {f"alice--p6--{COMMIT}": "graded", f"bob--p6--{other}": "started as job fake-2"}
    # no scheduler starts the next one: each job ends with a dispatch pass of its own
    assert backend.jobs["fake-2"][-3:] == ["--then-dispatch", "fake", f"bob--p6--{other}"]


def test_two_dispatchers_at_once_cannot_both_take_the_last_slot(store: ResultsStore, tmp_path: Path) -> None:
    queue, backend = Queue(store), FakeBackend(slots=1)
    assert queue.add(folder_submission(tmp_path)) == "queued"
    with queue.hold("fake.slots") as mine:  # another dispatcher is counting the running jobs
        assert mine
        assert dispatch(store, COURSE, backend) == {f"alice--p6--{COMMIT}": WAITING_FOR_SLOT}
    assert backend.jobs == {}
    assert dispatch(store, COURSE, backend) == {f"alice--p6--{COMMIT}": "started as job fake-1"}


def test_a_backend_without_slots_jobs_do_not_dispatch(store: ResultsStore, tmp_path: Path) -> None:
    Queue(store).add(folder_submission(tmp_path))
    backend = FakeBackend()
    dispatch(store, COURSE, backend)
    assert "--then-dispatch" not in backend.jobs["fake-1"]


def test_a_job_past_its_time_limit_is_recorded_as_timeout_with_feedback(store: ResultsStore, tmp_path: Path) -> None:
    Queue(store).add(folder_submission(tmp_path))
    backend = FakeBackend()
    dispatch(store, COURSE, backend)
    backend.finish("fake-1", JobState.TIMEOUT)
    assert dispatch(store, COURSE, backend) == {f"alice--p6--{COMMIT}": "job fake-1 timed out: recorded as such"}
    document = json.loads(store.path_for("alice", "p6", COMMIT).read_text())
    assert document["score"] == 0 and document["tests"]
    assert {t["status"] for t in document["tests"]} == {"failed"}
    assert all("ran past its time limit (8 min)" in t["output"] for t in document["tests"])  # p6: 180 s budget + 5 min
    assert only_job(backend) == "fake-1"  # a student's hang is graded, not retried


@pytest.mark.parametrize("state", [JobState.CANCELLED, JobState.NODE_FAIL, JobState.FAILED, JobState.UNKNOWN])
def test_infrastructure_failures_are_retried_then_recorded(store: ResultsStore, tmp_path: Path, state: JobState) -> None:
    Queue(store).add(folder_submission(tmp_path))
    backend = FakeBackend()
    key = f"alice--p6--{COMMIT}"
    dispatch(store, COURSE, backend)
    for attempt in range(1, MAX_ATTEMPTS):
        backend.finish(f"fake-{attempt}", state)
        assert dispatch(store, COURSE, backend) == {key: f"job ended {state.value}; started as job fake-{attempt + 1}"}
    backend.finish(f"fake-{MAX_ATTEMPTS}", state)
    assert dispatch(store, COURSE, backend) == {key: f"gave up after {MAX_ATTEMPTS} attempts: an autograder error is recorded"}
    document = json.loads(store.path_for("alice", "p6", COMMIT).read_text())
    assert document["tests"][0]["name"] == "Autograder error"
    assert f"the grading job failed {MAX_ATTEMPTS} times ({state.value}); course staff will regrade it" in document["tests"][0]["output"]
    assert len(backend.jobs) == MAX_ATTEMPTS and Queue(store).pending() == []


def test_a_result_stored_before_the_job_failed_is_kept(store: ResultsStore, tmp_path: Path) -> None:
    Queue(store).add(folder_submission(tmp_path))
    backend = FakeBackend()
    dispatch(store, COURSE, backend)
    store.save(graded_document(7), provenance_of())
    backend.finish("fake-1", JobState.NODE_FAIL)  # the node died after the worker stored the result
    assert dispatch(store, COURSE, backend) == {f"alice--p6--{COMMIT}": "graded"}
    assert json.loads(store.path_for("alice", "p6", COMMIT).read_text())["score"] == 7
    assert only_job(backend) == "fake-1"


def test_a_submission_made_while_the_backend_is_down_waits_and_is_started_later(store: ResultsStore, tmp_path: Path) -> None:
    Queue(store).add(folder_submission(tmp_path))
    backend = FakeBackend(down=True)
    assert dispatch(store, COURSE, backend) == {f"alice--p6--{COMMIT}": "waiting (grading is down; it will be graded when it is back)"}
    (record,) = Queue(store).pending()
    assert record.state == "queued" and "not started, the backend is down: the fake backend is down" in record.history[-1]
    backend.down = False
    assert dispatch(store, COURSE, backend) == {f"alice--p6--{COMMIT}": "started as job fake-1"}


def test_a_record_held_by_another_dispatcher_is_left_alone(store: ResultsStore, tmp_path: Path) -> None:
    queue, backend = Queue(store), FakeBackend()
    queue.add(folder_submission(tmp_path))
    with queue.hold(f"alice--p6--{COMMIT}") as mine:
        assert mine
        assert dispatch(store, COURSE, backend) == {f"alice--p6--{COMMIT}": "being dispatched by another process"}
    assert backend.jobs == {}
    assert dispatch(store, COURSE, backend) == {f"alice--p6--{COMMIT}": "started as job fake-1"}


@pytest.mark.slow
@needs("sandbox", sandbox_problem())
def test_a_submission_too_large_to_take_is_graded_as_not_run_not_as_an_autograder_error(store: ResultsStore, tmp_path: Path) -> None:
    folder = tmp_path / "inbox"
    folder.mkdir()
    (folder / "p6_ddp.py").write_text("pass\n")
    with open(folder / "weights.bin", "wb") as handle:  # sparse: 60 MiB that cost no disk
        handle.truncate(60 << 20)
    Queue(store).add(folder_submission(folder))
    assert work(store, COURSE, f"alice--p6--{COMMIT}").startswith("graded: 0 of 21 points")
    document = json.loads(store.path_for("alice", "p6", COMMIT).read_text())
    assert document["extra_data"]["autograder_error"] is None
    assert "not run: the submission holds more than 50 MiB" in document["output"]


@needs("sandbox", sandbox_problem())
def test_a_worker_that_cannot_find_the_submission_retries_then_records_an_autograder_error(store: ResultsStore, tmp_path: Path) -> None:
    queue = Queue(store)
    queue.add(folder_submission(tmp_path / "gone"))
    key = f"alice--p6--{COMMIT}"
    for attempt in range(1, MAX_ATTEMPTS):
        assert work(store, COURSE, key) == f"grader failure, retry {attempt} of {MAX_ATTEMPTS - 1}"
        assert queue.load(key).state == "queued"
    assert work(store, COURSE, key).startswith(f"an autograder error is recorded after {MAX_ATTEMPTS} attempts: the submitted folder cannot be taken: [Errno 2] No such file or directory")
    document = json.loads(store.path_for("alice", "p6", COMMIT).read_text())
    assert "the submitted folder cannot be taken: [Errno 2] No such file or directory" in document["tests"][0]["output"]
    assert document["extra_data"]["provenance"]["attempt"] == MAX_ATTEMPTS
    assert queue.pending() == []


def test_the_store_refuses_names_that_are_not_plain_file_names(store: ResultsStore, tmp_path: Path) -> None:
    queue = Queue(store)
    for student, message in (("../etc", "student '../etc' cannot be used as a file name"), ("queue", "student 'queue' is a name the results store keeps for itself"), ("a--b", "student 'a--b' cannot contain '--'")):
        with pytest.raises(StoreError, match=message.replace("(", r"\(").replace(")", r"\)")):
            queue.add(folder_submission(tmp_path, student=student))
    assert not (store.root / "queue").exists() or queue.pending() == []


def test_the_store_lists_results_only_and_leaves_no_temporary_files(store: ResultsStore) -> None:
    store.save(graded_document(5), provenance_of("bob", "abc1234"))
    (store.root / "inbox" / "bob--p6--abc1234").mkdir(parents=True)
    (store.root / "inbox" / "bob--p6--abc1234" / "x.json").write_text("{}")
    (store.root / "logs").mkdir()
    entries = list(store.entries())
    assert [(e.student, e.practical, e.commit, e.document["score"]) for e in entries] == [("bob", "p6", "abc1234", 5)]
    assert entries[0].provenance == provenance_of("bob", "abc1234")
    assert sorted(p.name for p in (store.root / "bob" / "p6").iterdir()) == ["abc1234.json"]


def test_the_slurm_script_asks_for_gpus_as_gres_and_keeps_the_submission_options(tmp_path: Path) -> None:
    submission = folder_submission(tmp_path)
    submission.options = {"gpus": 2, "partition": "gpu-a100", "time_min": 12}
    script = SlurmBackend().script(submission, ["python", "-m", "grader", "work", "it's"], tmp_path / "job.log")
    assert script.splitlines() == [
        "#!/bin/bash",
        f"#SBATCH --job-name=grade-p6-alice-{COMMIT[:7]}",
        f"#SBATCH --output={tmp_path / 'job.log'}",
        f"#SBATCH --chdir={tmp_path}",
        "#SBATCH --time=12",
        "#SBATCH --cpus-per-task=1",
        "#SBATCH --gres=gpu:2",
        "#SBATCH --partition=gpu-a100",
        "exec python -m grader work 'it'\"'\"'s'",
    ]



def test_a_job_is_sized_from_the_spec_and_cut_to_the_largest_node(tmp_path: Path) -> None:
    assert job_size(COURSE, "p6") == JobSize(cpus=4, memory_mb=7168)  # 2 nodes × 2 ranks, or 4 ranks; one launch at a time
    assert job_size(COURSE, "p6", world_size=2) == JobSize(cpus=2, memory_mb=7168)
    assert job_size(COURSE, "p4").cpus == 1
    submission = folder_submission(tmp_path)
    submission.options = {"time_min": 12, "cpus": 4, "mem_mb": 7168}
    roomy = SlurmBackend().script(submission, ["true"], tmp_path / "job.log", largest=JobSize(64, 512_000)).splitlines()
    assert "#SBATCH --cpus-per-task=4" in roomy and "#SBATCH --mem=7168M" in roomy and not any(line.startswith("# ") for line in roomy)
    small = SlurmBackend().script(submission, ["true"], tmp_path / "job.log", largest=JobSize(2, 4000)).splitlines()
    assert "#SBATCH --cpus-per-task=2" in small and "#SBATCH --mem=4000M" in small
    note = "the grading wants 4 CPUs and 7168 MB; the largest node has 2 CPUs and 4000 MB, so it asks for 2 CPUs and 4000 MB (speed checks may then time ranks sharing CPUs)"
    assert f"# {note}" in small and f"echo '{note}'" in small


def _object(repo: Path, kind: str, data: bytes) -> str:
    """Write a raw object (git checks nothing with --literally) and return its name."""
    done = subprocess.run(["git", "--git-dir", str(repo), "hash-object", "--literally", "-w", "-t", kind, "--stdin"], input=data, capture_output=True, check=True)
    return done.stdout.decode().strip()


def _commit_of(repo: Path, p6_entries: list[tuple[str, str, str]]) -> str:
    """A commit whose assignments/p6 tree holds `p6_entries` (mode, name, object) as written."""
    def tree(entries: list[tuple[str, str, str]]) -> str:
        return _object(repo, "tree", b"".join(f"{mode} {name}".encode() + b"\0" + bytes.fromhex(sha) for mode, name, sha in entries))

    p6 = tree(p6_entries)
    root = tree([("40000", "assignments", tree([("40000", "p6", p6)]))])
    done = subprocess.run(["git", "--git-dir", str(repo), "commit-tree", root, "-m", "x"], capture_output=True, check=True, env={"GIT_AUTHOR_NAME": "s", "GIT_AUTHOR_EMAIL": "s@x", "GIT_COMMITTER_NAME": "s", "GIT_COMMITTER_EMAIL": "s@x", "PATH": "/usr/bin:/bin"})
    return done.stdout.decode().strip()


def test_a_crafted_git_tree_with_one_name_twice_is_taken_the_first_time(tmp_path: Path) -> None:
    from grader.submit.worker import materialise

    repo = tmp_path / "student.git"
    git("init", "--bare", str(repo), cwd=tmp_path)
    script, link = _object(repo, "blob", b"print('first')\n"), _object(repo, "blob", b"/etc/passwd")
    commit = _commit_of(repo, [("100644", "p6_ddp.py", script), ("120000", "p6_ddp.py", link)])
    submission = Submission(student="alice", practical="p6", commit=commit, source={"kind": "git", "repo": str(repo)}, backend="fake")
    taken = materialise(submission, tmp_path)
    assert taken.refused is None and (taken.folder / "p6_ddp.py").read_text() == "print('first')\n"


def test_a_crafted_tree_never_writes_outside_the_folder(tmp_path: Path) -> None:
    """Names a crafted tree may hold: `..`, a link to a folder outside and a folder of the same
    name behind it, a submodule."""
    from grader.submit.worker import materialise

    repo = tmp_path / "student.git"
    git("init", "--bare", str(repo), cwd=tmp_path)

    def tree(entries: list[tuple[str, str, str]]) -> str:
        return _object(repo, "tree", b"".join(f"{mode} {name}".encode() + b"\0" + bytes.fromhex(sha) for mode, name, sha in entries))

    escaped = tree([("100644", "escaped.txt", _object(repo, "blob", b"out"))])
    commit = _commit_of(repo, [
        ("40000", "..", escaped),
        ("120000", "out", _object(repo, "blob", str(tmp_path).encode())),
        ("40000", "out", tree([("100644", "through_link.txt", _object(repo, "blob", b"out"))])),
        ("100755", "p6_ddp.py", _object(repo, "blob", b"print(1)\n")),
        ("160000", "vendored", "0" * 40),
    ])
    submission = Submission(student="alice", practical="p6", commit=commit, source={"kind": "git", "repo": str(repo)}, backend="fake")
    (tmp_path / "into").mkdir()
    taken = materialise(submission, tmp_path / "into")
    assert taken.refused is None and (taken.folder / "p6_ddp.py").read_text() == "print(1)\n" and os.access(taken.folder / "p6_ddp.py", os.X_OK)
    assert (taken.folder / "out").is_symlink() and sorted(p.name for p in taken.folder.iterdir()) == ["out", "p6_ddp.py"]
    assert not list(tmp_path.rglob("escaped.txt")) and not (tmp_path / "through_link.txt").exists()


def test_committed_attributes_change_no_byte(pushed, tmp_path: Path) -> None:
    """git archive would substitute an export-subst file's $Format$ (2.3 GiB of git's memory for
    a 3.4 MB file with %>(16000)%H in it) and leave export-ignore files out: the grader takes the
    committed bytes."""
    repo, _, _ = pushed
    work_tree = tmp_path / "clone"
    held = "$Format:%H$ " * 3
    (work_tree / "assignments" / "p6" / "notes.txt").write_text(held)
    (work_tree / "assignments" / "p6" / "hidden.txt").write_text("kept")
    (work_tree / ".gitattributes").write_text("*.txt export-subst\nhidden.txt export-ignore\n")
    git("add", "-A", cwd=work_tree)
    git("commit", "-qm", "attributes", cwd=work_tree)
    commit = git("rev-parse", "HEAD", cwd=work_tree)
    git("push", "-q", str(repo), f"{commit}:refs/heads/attributes", cwd=work_tree)
    submission = Submission(student="alice", practical="p6", commit=commit, source={"kind": "git", "repo": str(repo)}, backend="fake")
    (tmp_path / "into").mkdir()
    taken = materialise(submission, tmp_path / "into")
    assert (taken.folder / "notes.txt").read_text() == held and (taken.folder / "hidden.txt").read_text() == "kept"


def test_a_huge_blob_is_refused_while_it_streams(tmp_path: Path) -> None:
    from grader.run.tree import TreeLimits
    from grader.submit.worker import materialise

    repo = tmp_path / "student.git"
    git("init", "--bare", str(repo), cwd=tmp_path)
    big = _object(repo, "blob", b"\0" * (8 << 20))
    commit = _commit_of(repo, [("100644", "data.bin", big), ("100644", "p6_ddp.py", _object(repo, "blob", b"pass\n"))])
    submission = Submission(student="alice", practical="p6", commit=commit, source={"kind": "git", "repo": str(repo)}, backend="fake")
    taken = materialise(submission, tmp_path, TreeLimits(max_bytes=1 << 20))
    assert taken.refused == "the submission holds more than 1 MiB" and list(taken.folder.iterdir()) == []


@pytest.fixture
def pushed(tmp_path: Path) -> tuple[Path, str, str]:
    """A bare repository with two commits on main: (repo, first, second); the second changes p6."""
    work_tree = tmp_path / "clone"
    (work_tree / "assignments" / "p6").mkdir(parents=True)
    (work_tree / "assignments" / "p6" / "p6_ddp.py").write_text("print('v1')\n")
    git("init", "-q", cwd=work_tree)
    git("add", "-A", cwd=work_tree)
    git("commit", "-qm", "one", cwd=work_tree)
    first = git("rev-parse", "HEAD", cwd=work_tree)
    (work_tree / "assignments" / "p6" / "p6_ddp.py").write_text("print('v2')\n")
    (work_tree / "notes.txt").write_text("not a practical\n")
    git("commit", "-qam", "two", cwd=work_tree)
    second = git("rev-parse", "HEAD", cwd=work_tree)
    repo = tmp_path / "alice.git"
    git("clone", "-q", "--bare", str(work_tree), str(repo), cwd=tmp_path)
    return repo, first, second


def receive(lines: list[str], repo: Path, store: ResultsStore, backend: FakeBackend, start=None) -> list[str]:
    out = io.StringIO()
    hook.receive(lines, repo, store, COURSE, "alice", backend.name, {"gpus": 1}, start or (lambda: dispatch(store, COURSE, backend)), out, wait_s=0.5)
    return out.getvalue().splitlines()


def test_the_hook_queues_each_pushed_practical_and_says_so(pushed, store: ResultsStore) -> None:
    repo, first, second = pushed
    backend = FakeBackend()
    assert receive([f"{first} {second} refs/heads/main"], repo, store, backend) == [f"queued p6 @{second[:7]}: started as job fake-1", READ_FEEDBACK]
    (record,) = Queue(store).pending()
    assert (record.student, record.practical, record.commit, record.source, record.options) == ("alice", "p6", second, {"kind": "git", "repo": str(repo)}, {"gpus": 1, "time_min": 8, "cpus": 4, "mem_mb": 7168})
    assert receive([f"{first} {second} refs/heads/main"], repo, store, backend) == [f"p6 @{second[:7]}: already queued", READ_FEEDBACK]  # the same commit pushed again (or found by reconciliation first)
    assert receive([f"{'0' * 40} {first} refs/heads/other"], repo, store, backend) == []
    assert receive([f"{second} {second} refs/heads/main"], repo, store, backend) == [f"nothing to grade in {second[:7]} (no practical's folder changed)"]


def test_a_student_asks_for_a_regrade_with_a_commit_message_at_most_three_times_a_day(pushed, store: ResultsStore) -> None:
    """An empty commit whose message starts with "regrade" grades the pushed commit again for the
    practicals it names ("regrade" alone: all the student submitted), its feedback delivered as
    any push's; a fourth request of a practical within 24 hours is refused, saying when the
    next may come; a practical never submitted is not regraded."""
    repo, first, second = pushed
    backend = FakeBackend()
    tree = git("rev-parse", f"{second}^{{tree}}", cwd=repo)

    def asked(parent: str, message: str) -> str:
        return git("commit-tree", tree, "-p", parent, "-m", message, cwd=repo)

    early = asked(second, "regrade p6")
    assert receive([f"{second} {early} refs/heads/main"], repo, store, backend) == [f"nothing to grade in {early[:7]} (no practical's folder changed, and no regrade of one you submitted can be made)"]
    assert receive([f"{first} {second} refs/heads/main"], repo, store, backend)[0] == f"queued p6 @{second[:7]}: started as job fake-1"
    parent = second
    for request in (1, 2, 3):
        commit = asked(parent, "regrade p6 please" if request == 1 else "Regrade: the machine was busy")
        assert receive([f"{parent} {commit} refs/heads/main"], repo, store, backend) == [f"regrade of p6: request {request} of 3 in 24 hours", f"queued p6 @{commit[:7]}: started as job fake-{request + 1}", READ_FEEDBACK]
        parent = commit
    refused = asked(parent, "regrade")
    said = receive([f"{parent} {refused} refs/heads/main"], repo, store, backend)
    assert said[0].startswith("regrade of p6 refused: 3 in the last 24 hours already (at most 3); the next from ") and said[1].startswith(f"nothing to grade in {refused[:7]}")
    assert parent in {s.commit for s in Queue(store).pending()} and refused not in {s.commit for s in Queue(store).pending()}  # nothing queued for the refused one
    assert receive([f"{parent} {asked(parent, 'a regrade, maybe')} refs/heads/main"], repo, store, backend)[0].startswith("nothing to grade")  # the message must start with it


def test_the_hook_records_a_push_when_grading_is_down(pushed, store: ResultsStore) -> None:
    repo, first, second = pushed
    down = FakeBackend(down=True)
    assert receive([f"{'0' * 40} {first} refs/heads/main"], repo, store, down) == [f"queued p6 @{first[:7]}: waiting (grading is down; it will be graded when it is back)", READ_FEEDBACK]

    def broken() -> None:
        raise OSError("no such file: python")

    assert receive([f"{first} {second} refs/heads/main"], repo, store, down, start=broken) == [f"queued p6 @{second[:7]}: waiting (grading is down; it will be graded when it is back) (OSError)"]
    assert receive([f"{second} {second} refs/heads/master"], repo, store, down, start=lambda: None) == [f"nothing to grade in {second[:7]} (no practical's folder changed)"]
    assert sorted(s.commit for s in Queue(store).pending()) == sorted([first, second])
    back = FakeBackend()
    assert set(dispatch(store, COURSE, back).values()) == {"started as job fake-1", "started as job fake-2"}


def test_the_hook_receipt_is_undecided_when_the_dispatcher_is_slow(pushed, store: ResultsStore) -> None:
    repo, first, second = pushed
    assert receive([f"{first} {second} refs/heads/main"], repo, store, FakeBackend(), start=lambda: None) == [f"queued p6 @{second[:7]}: recorded; grading starts when the cluster answers", READ_FEEDBACK]


def test_installing_the_hook_checks_the_repository(tmp_path: Path, store: ResultsStore, pushed) -> None:
    with pytest.raises(ValueError, match="is not a bare git repository"):
        hook.install(tmp_path, store.root, "local", {}, ROOT)
    repo = pushed[0]
    with pytest.raises(StoreError, match="student 'x y' cannot be used as a file name"):
        hook.install(repo, store.root, "local", {}, ROOT, student="x y")
    path = hook.install(repo, store.root, "slurm", {"gpus": 1, "time_min": 20}, ROOT)
    text = path.read_text()
    assert path.stat().st_mode & 0o111 and text.rstrip().endswith("exit 0")
    assert "hook receive" in text and "--backend slurm --gpus 1 --time 20 --student alice" in text


def validate_workflows(*paths: Path) -> subprocess.CompletedProcess:
    check = Path(sys.executable).parent / "check-jsonschema"
    return subprocess.run([str(check), "--builtin-schema", "vendor.github-workflows", *map(str, paths)], capture_output=True, text=True)


def test_both_github_workflows_validate_against_the_workflow_schema() -> None:
    workflows = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
    assert {"grade-on-cluster.yml", "student-self-check.yml"} <= {w.name for w in workflows}
    done = validate_workflows(*workflows)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok -- validation done" in done.stdout


def test_the_workflow_validation_rejects_a_broken_workflow(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yml"
    broken.write_text("on: push\njobs:\n  grade:\n    runs-on: ubuntu-latest\n    stepz:\n      - run: echo hi\n")
    done = validate_workflows(broken)
    assert done.returncode == 1 and "Schema validation errors were encountered" in done.stdout, done.stdout


def test_results_are_the_staffs_and_another_user_cannot_read_them() -> None:
    """Mode 0640 in folders of 0750, in the store root's group: a student's uid reads nothing."""
    import os
    import shutil
    import stat
    import subprocess
    import tempfile

    from grader.results.gradescope import to_gradescope
    from grader.results.model import GradingReport

    outer = Path(tempfile.mkdtemp(dir="/var/tmp"))  # a place any user can reach, unlike pytest's
    try:
        root = outer / "results"
        root.mkdir()
        os.chmod(outer, 0o755)
        os.chmod(root, 0o755)  # the admin's mistake: the root itself open to all
        store = ResultsStore(root)
        path = store.save(to_gradescope(GradingReport.failure("p6", "x")), {"student": "alice", "practical": "p6", "commit": "a" * 40})
        assert stat.S_IMODE(path.stat().st_mode) == 0o640 and path.stat().st_gid == root.stat().st_gid
        assert {stat.S_IMODE(folder.stat().st_mode) for folder in (path.parent, path.parent.parent)} == {0o750}
        if os.geteuid() == 0:  # as another user, the way a second student would try
            as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
            assert subprocess.run([*as_nobody, "ls", str(root)], capture_output=True).returncode == 0  # it can get this far
            done = subprocess.run([*as_nobody, "cat", str(path)], capture_output=True, text=True)
            assert done.returncode != 0 and "Permission denied" in done.stderr
    finally:
        shutil.rmtree(outer)


def test_a_push_the_hook_never_recorded_is_queued_by_the_next_dispatch_once(pushed, store: ResultsStore, tmp_path: Path) -> None:
    from grader.submit.reconcile import register

    repo, first, second = pushed
    register(store, "alice", repo, "fake", {"gpus": 1})
    backend = FakeBackend()
    dispatch(store, COURSE, backend)  # the hook never ran (a store it could not write, say)
    (record,) = Queue(store).pending()
    assert (record.student, record.practical, record.commit, record.source["repo"]) == ("alice", "p6", second, str(repo.resolve()))
    assert "found by reconciliation" in " ".join(record.history)
    dispatch(store, COURSE, backend)
    assert len(Queue(store).pending()) == 1 and len(backend.jobs) == 1  # queued and started once
    store.save(graded_document(12), provenance_of(commit=second))
    Queue(store).remove(record.key)
    clone = tmp_path / "clone"
    branch = git("rev-parse", "--abbrev-ref", "HEAD", cwd=clone)
    (clone / "notes.txt").write_text("only notes changed\n")
    git("add", "-A", cwd=clone)
    git("commit", "-qm", "three", cwd=clone)
    git("push", "-q", str(repo), f"HEAD:refs/heads/{branch}", cwd=clone)
    dispatch(store, COURSE, backend)
    assert Queue(store).pending() == []  # the same files of p6 were graded already: not again
    (clone / "assignments" / "p6" / "p6_ddp.py").write_text("print('v3')\n")
    git("commit", "-qam", "four", cwd=clone)
    git("push", "-q", str(repo), f"HEAD:refs/heads/{branch}", cwd=clone)
    dispatch(store, COURSE, backend)
    assert [s.commit for s in Queue(store).pending()] == [git("rev-parse", "HEAD", cwd=clone)]
    git("push", "-q", str(repo), f"{first}:refs/heads/{branch}", "--force", cwd=clone)  # back to the starter
    Queue(store).remove(Queue(store).pending()[0].key)
    dispatch(store, COURSE, backend)
    assert Queue(store).pending() == []  # the untouched starter is not a submission


def test_the_pushes_dispatchers_make_one_pass_at_a_time_and_none_is_left_out(pushed, store: ResultsStore, tmp_path: Path) -> None:
    """A deadline burst (bench/bench_burst.py): each push once started a whole dispatch pass of
    its own, each reading every registered repository; hundreds ran at once. Now a push's
    dispatcher that finds another running asks it for one more pass and ends."""
    from grader.submit.reconcile import register

    repo, _, second = pushed
    register(store, "alice", repo, "fake", {"gpus": 1})
    backend, queue = FakeBackend(), Queue(store)
    queue.add(folder_submission(tmp_path, "bob", "b" * 7))
    with queue.hold(COALESCED) as mine:  # a push's dispatcher is running
        assert mine
        assert pass_requested(store)  # the hook starts no dispatcher then
        assert dispatch_coalesced(store, COURSE, backend) is None  # one started anyway ends at once
        assert backend.jobs == {} and (queue.root / "locks" / "dispatch.again").exists()
    happened = dispatch_coalesced(store, COURSE, backend)  # the running one looks again after letting go
    assert happened == {f"alice--p6--{second}": "started as job fake-2"}  # the last pass: alice's found by reconciliation, started by a pass of its own; bob's job left alone
    assert sorted(s.job for s in queue.pending()) == ["fake-1", "fake-2"] and not (queue.root / "locks" / "dispatch.again").exists()
    assert not pass_requested(store)  # none running: the hook starts one
    queue.add(folder_submission(tmp_path, "carol", "c" * 7))
    register(store, "dave", repo, "fake", {})  # not reconciled again within the minute: the queue is settled at once
    assert dispatch_coalesced(store, COURSE, backend)["carol--p6--ccccccc"] == "started as job fake-3"
    assert "dave" not in {s.student for s in queue.pending()}
    dispatch(store, COURSE, backend)  # cron's `dispatch` always reconciles
    assert "dave" in {s.student for s in queue.pending()}


def test_reconciliation_does_not_queue_again_a_version_whose_job_ends_while_it_reads(pushed, store: ResultsStore, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Found by bench/bench_burst.py: a job that stored its result and removed its record
    between reconciliation's two reads was in neither, and its files (p6 at the student's
    newer head, which changed another folder) were graded again."""
    from grader.submit.reconcile import reconcile, register

    repo, _, second = pushed
    register(store, "alice", repo, "fake", {})
    clone = tmp_path / "clone"
    (clone / "notes.txt").write_text("the next push changed no p6 file\n")
    git("add", "-A", cwd=clone)
    git("commit", "-qm", "three", cwd=clone)
    git("push", "-q", str(repo), f"HEAD:refs/heads/{git('rev-parse', '--abbrev-ref', 'HEAD', cwd=clone)}", cwd=clone)
    queue = Queue(store)
    submission = Submission(student="alice", practical="p6", commit=second, source={"kind": "git", "repo": str(repo)}, backend="fake")
    queue.add(submission)
    listed = store.entries

    def entries_while_the_job_ends():
        found = list(listed())
        store.save(graded_document(12), provenance_of(commit=second))  # the job ends: its result, then its record goes
        queue.remove(submission.key)
        return iter(found)

    monkeypatch.setattr(store, "entries", entries_while_the_job_ends)
    assert reconcile(store, COURSE) == []
    assert queue.pending() == []


def test_reconciliation_does_not_queue_again_a_version_pushed_and_recorded_while_it_reads(pushed, store: ResultsStore, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Found by bench/bench_burst.py (37 of 1,200 pushes graded twice): a pass read what was
    accounted for, then each repository's head; a student who pushed p6 (recorded by the hook)
    and then another folder meanwhile had p6 queued again under the newer commit."""
    from grader.submit import reconcile as reconciliation

    repo, _, second = pushed
    reconciliation.register(store, "alice", repo, "fake", {})
    store.save(graded_document(12), provenance_of(commit=second))
    clone, queue = tmp_path / "clone", Queue(store)
    branch = git("rev-parse", "--abbrev-ref", "HEAD", cwd=clone)
    accounted = reconciliation._accounted

    def pushes_meanwhile(*args):
        known = accounted(*args)
        (clone / "assignments" / "p6" / "p6_ddp.py").write_text("print('v3')\n")
        git("commit", "-qam", "p6 again", cwd=clone)
        git("push", "-q", str(repo), f"HEAD:refs/heads/{branch}", cwd=clone)
        queue.add(Submission(student="alice", practical="p6", commit=git("rev-parse", "HEAD", cwd=clone), source={"kind": "git", "repo": str(repo)}, backend="fake"))  # its hook
        (clone / "notes.txt").write_text("then only notes\n")
        git("add", "-A", cwd=clone)
        git("commit", "-qm", "notes", cwd=clone)
        git("push", "-q", str(repo), f"HEAD:refs/heads/{branch}", cwd=clone)
        return known

    monkeypatch.setattr(reconciliation, "_accounted", pushes_meanwhile)
    assert reconciliation.reconcile(store, COURSE) == []
    assert [s.commit for s in queue.pending()] == [git("rev-parse", "HEAD~1", cwd=clone)]


def test_installing_the_hook_refuses_a_store_that_cannot_record_the_repository(pushed, tmp_path: Path) -> None:
    repo, _, _ = pushed
    not_a_folder = tmp_path / "results-file"
    not_a_folder.write_text("")
    with pytest.raises(ValueError, match="cannot record the repository"):
        hook.install(repo, not_a_folder, "local", {}, ROOT)
    assert not (repo / "hooks" / "post-receive").exists()


def test_status_says_queued_running_graded_or_failed_from_the_jobs_own_state(store: ResultsStore, tmp_path: Path) -> None:
    store_failure(store, folder_submission(tmp_path, "erin", "e" * 7), COURSE, "the sandbox could not start")
    store.save(graded_document(9), provenance_of("dave", "d" * 7))
    queue = Queue(store)
    waiting = folder_submission(tmp_path, "bob", "b" * 7)
    waiting.backend = "local"
    queue.add(waiting)
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        running = folder_submission(tmp_path, "carol", "c" * 7)
        running.backend, running.state, running.job = "local", "dispatched", f"local-{sleeper.pid}"
        queue.add(running)
        queue.save(running)
        lines = {line.split()[0]: " ".join(line.split()[3:]) for line in run_cli("status", "--results-dir", str(store.root)).stdout.splitlines()}
    finally:
        sleeper.kill()
        sleeper.wait()
    assert lines["bob"] == "queued (accepted (folder))"
    assert lines["carol"] == f"running as job local-{sleeper.pid}"
    assert lines["dave"].startswith("graded ") and lines["dave"].endswith(": 9 of 12 points")
    assert lines["erin"].startswith("failed (an autograder error; staff will regrade)") and lines["erin"].endswith(": not graded yet: the autograder could not grade it (the course staff regrade it)")
    running.job = "local-999999999"  # the job is gone, no result yet
    assert progress(running, LocalBackend()) == "job local-999999999 ended UNKNOWN without a result yet (the next dispatch settles it)"


def test_a_failure_no_retry_can_mend_is_recorded_at_once_and_reported_to_staff_once(store: ResultsStore, tmp_path: Path) -> None:
    course = copy_course(tmp_path / "course")
    spec = course / "assignments" / "p6" / "assignment.yaml"
    spec.write_text(spec.read_text() + "surprise: 1\n")  # a staff mistake: the spec no longer loads
    broken = load_course(course)
    queue = Queue(store)
    for student in ("alice", "bob"):
        queue.add(folder_submission(tmp_path, student))
    first = work(store, broken, f"alice--p6--{COMMIT}")
    assert first.startswith("not graded: the practical cannot be loaded: ") and first.endswith("not retried: no retry can mend it) and the problem is reported to staff")
    assert work(store, broken, f"bob--p6--{COMMIT}").endswith("the problem is known to staff already")
    assert queue.pending() == []
    assert "(the course staff are told and will regrade it)" in json.loads(store.path_for("bob", "p6", COMMIT).read_text())["extra_data"]["autograder_error"]
    status = run_cli("status", "--results-dir", str(store.root))
    (problem,) = [line for line in status.stderr.splitlines() if line.startswith("PROBLEM")]
    assert "2 submission(s) since" in problem and "the practical cannot be loaded" in problem
    assert "fix it, then: python -m grader regrade --results-dir DIR --errors" in status.stderr
    regrade(store, broken, Selection(errors=True), "fake")  # after the fix: the list is cleared
    assert open_problems(store) == []


def test_a_node_without_bubblewrap_is_a_lasting_problem(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    missing = open_sandbox()
    assert isinstance(missing, SandboxMissing) and missing == "bubblewrap (bwrap) is not installed; on Debian/Ubuntu: apt-get install bubblewrap"
    assert ready_to_grade(COURSE, "p6") == f"official grading needs the sandbox, and this node has none: {missing}"


def test_a_repository_whose_config_runs_a_program_is_graded_as_not_run_and_the_program_never_runs(pushed, tmp_path: Path) -> None:
    repo, _, second = pushed
    ran = tmp_path / "smudged"
    subprocess.run(["git", "--git-dir", str(repo), "config", "filter.lfs.smudge", f"touch {ran}"], check=True)
    submission = Submission(student="alice", practical="p6", commit=second, source={"kind": "git", "repo": str(repo)})
    (tmp_path / "into").mkdir()
    taken = materialise(submission, tmp_path / "into")
    assert taken.refused == "your repository cannot be graded: its git config sets filter.lfs.smudge, which would make git run a program: the grader does not read such a repository"
    assert not ran.exists() and not any(taken.folder.iterdir())
