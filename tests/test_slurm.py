"""Grading jobs on a real single-node Slurm cluster (Debian's slurm-wlm and munge, two CPUs,
two fake GPUs as GRES), started for this module and stopped by process id: queued work all
graded, a job past its time limit recorded as TIMEOUT, a cancelled job retried, the same
commit graded once. Each scenario has its own results store, so one's queue never waits on
another's; the hanging submission is queued first, as its minute-long time limit runs while
the other scenarios use the second CPU."""
from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from grader.run import procs
from grader.run.sandbox import UID_POOL
from helpers import ROOT, copy_course, needs, run_cli, sandbox_problem
from p6_variants import VARIANTS
from slurm_cluster import SlurmCluster, slurm_problem

pytestmark = [pytest.mark.slow, needs("slurm", slurm_problem()), needs("sandbox", sandbox_problem())]
WRONG = next(v for v in VARIANTS if v.name == "not_wrapped")
# never trains; computes (so the grader never finds it idle: a hung job's watch) for longer in
# each run: 5 s with one rank, 1.7 times that with each rank more, so each run ends within the
# grader's pace (twice the submission's longest run that ended) and the grading outlasts a job
# of one minute
HANG = "import os, time\n\nend = time.time() + 5 * 1.7 ** (int(os.environ['WORLD_SIZE']) - 1)\nwhile time.time() < end:\n    sum(range(10**5))\n"


@dataclass
class Slurm:
    cluster: SlurmCluster
    folder: Path  # scratch space of the module
    hanging_store: Path  # the store of the hanging submission, queued when the cluster started

    def cli(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return run_cli(*args, env=self.cluster.env, timeout=timeout)

    def submit(self, store: Path, student: str, folder: Path, *extra: str) -> str:
        """`grader submit --backend slurm` (not waiting); what it printed. Each job asks for one
        CPU (`--cpus`, not the spec's size), so that the module's scenarios share the two."""
        done = self.cli("submit", "p6", str(folder), "--results-dir", str(store), "--backend", "slurm", "--student", student, "--cpus", "1", *extra)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout.strip()

    def finished_jobs(self, name_part: str, count: int) -> list[str]:
        """The job-completion log's JobState of each finished job whose line contains
        `name_part`, once there are `count` (a job's line comes a moment after its result)."""
        log = self.cluster.root / "log" / "jobcomp.txt"
        deadline = time.monotonic() + 30
        while True:
            lines = log.read_text().splitlines() if log.exists() else []
            states = [field.split("=", 1)[1] for line in lines if name_part in line for field in line.split() if field.startswith("JobState=")]
            if len(states) >= count or time.monotonic() > deadline:
                return states
            time.sleep(0.5)


def job_id(printed: str) -> str:
    return printed.rsplit("started as job ", 1)[1].split()[0]


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("slurm")
    cluster = SlurmCluster(folder / "cluster")
    cluster.start()
    try:
        state = Slurm(cluster, folder, folder / "hanging-store")
        hang = folder / "hang"
        hang.mkdir()
        (hang / "p6_ddp.py").write_text(HANG)
        # the whole spec (its 180 s budget) with a 1-minute limit: Slurm stops the job first
        assert "started as job" in state.submit(state.hanging_store, "hang", hang, "--time", "1")
        yield state
    finally:
        cluster.stop()


def result(store: Path, student: str) -> dict:
    (path,) = (store / student / "p6").glob("*.json")
    return json.loads(path.read_text())


def test_three_submissions_queued_on_two_cpus_are_all_graded(slurm: Slurm) -> None:
    """More one-CPU jobs than the node's two CPUs (one of them taken by the hanging job): a
    correct one, a buggy one and a correct one that asks for a GPU; each is graded in turn."""
    store = slurm.folder / "three"
    wrong = WRONG.write(slurm.folder / "wrong", "p6")
    students = {"s1": ROOT / "solutions" / "p6", "s2": wrong, "s3": ROOT / "solutions" / "p6"}
    for student, folder in students.items():
        extra = ["--gpus", "1"] if student == "s3" else []
        assert "started as job" in slurm.submit(store, student, folder, "--world-size", "2", *extra)
    done = slurm.cli("dispatch", "--results-dir", str(store), "--backend", "slurm", "--wait", "--timeout", "280")
    assert done.returncode == 0, done.stdout + done.stderr
    for student, folder in students.items():
        document = result(store, student)
        provenance = document["extra_data"]["provenance"]
        assert provenance["student"] == student and provenance["attempt"] == 1 and provenance["slurm_job"], provenance
        assert provenance["node"] == slurm.cluster.node
        if folder == wrong:  # a student's bug is graded once, never retried
            assert document["score"] < 18 and "no all-reduce at all" in json.dumps(document["tests"])
        else:
            assert document["score"] == 18, document["tests"]
    assert result(store, "s3")["extra_data"]["provenance"]["gpus"] | {"cuda": 0} == {"requested": 1, "visible": "0", "cuda": 0, "devices": "CPU only (no CUDA GPU)"}
    assert result(store, "s1")["extra_data"]["provenance"]["gpus"]["visible"] == ""
    assert slurm.finished_jobs("Name=grade-p6-s", 3) == ["COMPLETED"] * 3
    assert not (store / "queue").exists() or list((store / "queue").glob("*.json")) == []


def test_a_cancelled_job_is_retried(slurm: Slurm) -> None:
    store = slurm.folder / "cancelled"
    printed = slurm.submit(store, "unlucky", ROOT / "solutions" / "p6", "--world-size", "2")
    subprocess.run(["scancel", job_id(printed)], env=slurm.cluster.env, check=True)
    done = slurm.cli("dispatch", "--results-dir", str(store), "--backend", "slurm", "--wait", "--timeout", "200")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "job ended CANCELLED; started as job" in done.stdout
    document = result(store, "unlucky")
    assert document["score"] == 18 and document["extra_data"]["provenance"]["attempt"] == 2
    assert slurm.finished_jobs("Name=grade-p6-unlucky", 2) == ["CANCELLED", "COMPLETED"]


def test_the_same_commit_submitted_twice_is_graded_once(slurm: Slurm) -> None:
    store = slurm.folder / "twice"
    folder = ROOT / "solutions" / "p6"
    first = slurm.submit(store, "eager", folder, "--world-size", "2", "--commit", "abc1234")
    assert first.startswith("queued p6 for eager @abc1234: started as job")
    assert slurm.submit(store, "eager", folder, "--world-size", "2", "--commit", "abc1234") == "p6 for eager @abc1234: already queued"
    summary = slurm.folder / "summary.md"  # as $GITHUB_STEP_SUMMARY in .github/workflows/grade-on-cluster.yml
    done = slurm.cli("submit", "p6", str(folder), "--results-dir", str(store), "--backend", "slurm", "--student", "eager", "--commit", "abc1234", "--world-size", "2", "--wait", "--markdown", str(summary))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[0] == "p6 for eager @abc1234: already queued"
    assert "graded: 14 of 21 points so far — 1 graded on a GPU node, 2 graded by the autograder, 4 shown after the deadline" in done.stdout  # what the student is shown
    shown = summary.read_text()  # the student's view: the feedback branch's text
    assert "**Score: 14 of 21 points so far — 1 graded on a GPU node, 2 graded by the autograder, 4 shown after the deadline**" in shown and "1 more check(s) are shown after the deadline" in shown and shown.endswith("Graded commit: abc1234\n") and "sandbox" not in shown
    graded = store / "eager" / "p6" / "abc1234.json"
    before = graded.stat().st_mtime_ns
    assert slurm.submit(store, "eager", folder, "--world-size", "2", "--commit", "abc1234") == "p6 for eager @abc1234: graded"
    assert graded.stat().st_mtime_ns == before
    assert slurm.finished_jobs("Name=grade-p6-eager", 1) == ["COMPLETED"]


def test_a_job_past_its_time_limit_is_recorded_as_timeout_with_feedback(slurm: Slurm) -> None:
    status = slurm.cli("status", "--results-dir", str(slurm.hanging_store)).stdout.split()
    assert status[:3] == ["hang", "p6", status[2]] and " ".join(status[3:6]) in ("running as job", "queued in slurm"), status  # Slurm's own state
    done = slurm.cli("dispatch", "--results-dir", str(slurm.hanging_store), "--backend", "slurm", "--wait", "--timeout", "280")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "timed out: recorded as such" in done.stdout
    document = result(slurm.hanging_store, "hang")
    assert document["score"] == 0
    assert {t["status"] for t in document["tests"]} == {"failed"}
    assert "not graded: the grading job ran past its time limit (1 min) and was stopped; the code probably hangs or is far too slow" in document["tests"][0]["output"]
    assert slurm.finished_jobs("Name=grade-p6-hang", 1) == ["TIMEOUT"]  # a student's hang is not retried
    status = slurm.cli("status", "--results-dir", str(slurm.hanging_store))
    assert status.stdout.split()[:4] == ["hang", "p6", status.stdout.split()[2], "graded"] and status.stdout.splitlines()[0].endswith(": 0 of 21 points")  # every check of the spec, failed
    deadline = time.monotonic() + 30
    while procs.pids_of_uids(UID_POOL) and time.monotonic() < deadline:
        time.sleep(0.5)  # Slurm's kill reaches the sandbox's processes too
    assert procs.pids_of_uids(UID_POOL) == []


def test_gpu_checks_deferred_where_no_gpu_is_are_followed_up_on_the_gpu_partition(slurm: Slurm) -> None:
    """course.yaml sends deferred checks to the cluster's `gpu` partition with 2 GPUs. p5's
    reference graded on the default partition defers its 4 GPU points there; the job that stored
    the grade queues the follow-up, which runs on `gpu` (2 GRES GPUs) for those checks alone, and
    its verdicts are merged into the grade, the earlier one kept. The test node's GPUs are
    /dev/null: CUDA sees none there either, so the checks stay deferred, saying where they were
    tried, and staff are told the partition's jobs see no GPU."""
    course = copy_course(slurm.folder / "gpu-course")
    (course / "course.yaml").write_text((ROOT / "course.yaml").read_text() + "deferred:\n  backend: slurm\n  partition: gpu\n  gpus: 2\n")
    store = slurm.folder / "gpu-store"
    done = slurm.cli("--course-root", str(course), "submit", "p5", str(ROOT / "solutions" / "p5"), "--results-dir", str(store), "--backend", "slurm", "--student", "dora", "--cpus", "1")
    assert done.returncode == 0 and "started as job" in done.stdout, done.stdout + done.stderr
    done = slurm.cli("--course-root", str(course), "dispatch", "--results-dir", str(store), "--backend", "slurm", "--wait", "--timeout", "280")
    assert done.returncode == 0, done.stdout + done.stderr
    (path,) = (store / "dora" / "p5").glob("*.json")
    document = json.loads(path.read_text())
    gpu_checks = ["gpu_step_times", "gpu0_memory", "scaling"]
    (follow,) = document["extra_data"]["provenance"]["follow_ups"]
    assert follow["checks"] == gpu_checks and follow["graded"] == [] and follow["where"].startswith("partition gpu (job ") and follow["where"].endswith(f"node {slurm.cluster.node})"), follow
    tests = {test["tags"][0]: test for test in document["tests"]}
    for check in gpu_checks:
        assert "still deferred: the follow-up on partition gpu (job " in tests[check]["output"] and "needs ≥ 2 CUDA GPUs (this machine has 0)" in tests[check]["output"], tests[check]["output"]
    assert document["extra_data"]["headline"].endswith("4 graded on a GPU node") and document["extra_data"]["total_points"] == 17
    assert len(list((path.parent / "history").glob("*.json"))) == 1  # the grade before the follow-up
    assert slurm.finished_jobs("Name=grade-p5-dora", 2) == ["COMPLETED", "COMPLETED"]
    jobs = (slurm.cluster.root / "log" / "jobcomp.txt").read_text().splitlines()  # a job's line comes a moment after its result
    assert [next(f for f in line.split() if f.startswith("Partition=")) for line in jobs if "Name=grade-p5-dora" in line] == ["Partition=grading", "Partition=gpu"]
    status = slurm.cli("--course-root", str(course), "status", "--results-dir", str(store))
    assert "could not grade gpu0_memory, gpu_step_times, scaling of p5: the job was given GPUs 0,1 but torch sees no CUDA GPU there" in status.stderr, status.stderr
