"""Deferred checks graded where they can be (grader/submit/followup.py): course.yaml's place
for them, a follow-up's verdicts merged into the stored grade with the earlier one kept, and
what a place could not grade either left deferred, saying so. The whole path on a real Slurm
cluster is tests/test_slurm.py's."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from grader.course import CourseError, FollowUpPlace, load_course
from grader.results.gradescope import read_document, read_report, read_scores, to_gradescope
from grader.results.model import CheckResult, GradingReport, Later, Status
from grader.store import ResultsStore
from grader.submit import followup
from grader.submit.queue import Queue, Submission
from grader.submit.regrade import Selection, regrade
from helpers import ROOT

PLACE = FollowUpPlace(backend="slurm", partition="gpu", gpus=2)
COURSE = replace(load_course(ROOT), follow_up=PLACE)
GPU = "needs ≥ 2 CUDA GPUs (this machine has 0); its points are left to a grading on a GPU node"


def p5_report(seed: int = 7) -> GradingReport:
    """A stored p5 grading of a machine without GPUs: one check graded, two deferred for GPUs,
    one deferred by a self-check (not the machine's: no follow-up for it)."""
    checks = (
        CheckResult("split_table", "The split table", 1, 3.0, 3.0, Status.PASSED, "right"),
        CheckResult("gpu0_memory", "GPU 0 carries the most memory", 2, 0.0, 1.0, Status.DEFERRED, GPU, later=Later.GPU_NODE),
        CheckResult("scaling", "DataParallel's speedup", 3, 0.0, 2.0, Status.DEFERRED, GPU, later=Later.GPU_NODE),
        CheckResult("timing_table", "The timing table", 4, 0.0, 2.0, Status.DEFERRED, "no answer key here", later=Later.AUTOGRADER),
    )
    return GradingReport("p5", "Data parallelism", checks, environment={"seed": seed}, total_points=8.0)


def stored(tmp_path: Path, report: GradingReport) -> tuple[ResultsStore, Submission]:
    store = ResultsStore(tmp_path / "results")
    submission = Submission("alice", "p5", "c" * 40, {"kind": "git", "repo": "/srv/git/alice.git"}, submitted_at="2026-11-30T10:00:00+00:00")
    store.save(to_gradescope(report), {"student": "alice", "practical": "p5", "commit": submission.commit, "submitted_at": submission.submitted_at, "source": submission.source})
    return store, submission


def test_course_yaml_names_the_place_and_its_mistakes_name_the_key(tmp_path: Path) -> None:
    (tmp_path / "course.yaml").write_text("practicals: [p5]\ndeferred:\n  backend: slurm\n  partition: gpu\n  gpus: 2\n")
    assert load_course(tmp_path).follow_up == PLACE and PLACE.describe() == "partition gpu (2 GPUs)"
    assert load_course(ROOT).follow_up is None  # the course's own: deferred points stay pending
    for wrong, message in (("backend: gradescope", "deferred.backend: expected one of local, slurm"), ("gpus: two", "deferred.gpus: expected a whole number"), ("partition: 'a b'", "deferred.partition"), ("nodes: 2", "deferred: expected a mapping of")):
        (tmp_path / "course.yaml").write_text(f"practicals: [p5]\ndeferred:\n  {wrong}\n")
        with pytest.raises(CourseError, match=message):
            load_course(tmp_path)


def test_a_follow_up_asks_for_the_machine_s_deferred_checks_alone_with_the_grading_s_seed(tmp_path: Path) -> None:
    store, submission = stored(tmp_path, p5_report())
    follow = followup.follow_up_of(submission, p5_report(), COURSE)
    assert follow is not None and follow.checks == ["gpu0_memory", "scaling"] and follow.seed == 7
    assert follow.options == {"partition": "gpu", "gpus": 2} and follow.backend == "slurm" and follow.submitted_at == submission.submitted_at
    assert follow.key == f"alice--p5--{'c' * 40}--deferred"
    assert followup.follow_up_of(submission, p5_report(), load_course(ROOT)) is None  # no place: pending
    assert followup.follow_up_of(follow, p5_report(), COURSE) is None  # a follow-up asks for none
    assert followup.request(store, COURSE, submission, p5_report()) == "; 2 deferred check(s) queued for partition gpu (2 GPUs)"
    assert not Queue(store).settled(follow)


def test_a_follow_up_s_verdicts_are_merged_and_the_earlier_grade_kept(tmp_path: Path) -> None:
    store, submission = stored(tmp_path, p5_report())
    follow = followup.follow_up_of(submission, p5_report(), COURSE)
    assert follow is not None
    later = GradingReport("p5", "Data parallelism", (
        CheckResult("gpu0_memory", "GPU 0 carries the most memory", 1, 1.0, 1.0, Status.PASSED, "GPU 0 peaked at 2.1 GiB, GPU 1 at 0.9 GiB"),
        CheckResult("scaling", "DataParallel's speedup", 2, 0.0, 2.0, Status.FAILED, "speedup 1.1×, 0.8 × the reference's 1.9× needed"),
    ), environment={"seed": 7, "cuda_gpus": 2})
    merged = followup.merge(store, follow, later, "partition gpu (job 42, node g1)")
    assert merged is not None and merged.headline() == "4 of 8 points so far — 2 graded by the autograder"
    document = store.entry("alice", "p5", submission.commit).document
    assert read_scores(document).checks == {"split_table": 3.0, "gpu0_memory": 1.0, "scaling": 0.0} and read_scores(document).pending == {"timing_table": 2.0}
    checks = {c.id: c for c in read_report(document).checks}
    assert "GPU 0 peaked at 2.1 GiB" in checks["gpu0_memory"].summary and "(graded by the follow-up on partition gpu (job 42, node g1))" in checks["gpu0_memory"].summary
    assert checks["timing_table"].summary == "no answer key here"  # a deferred check kept reads as it did
    assert any(note.startswith("2 deferred check(s) graded by a follow-up on partition gpu (job 42, node g1)") for note in read_report(document).notes)
    (record,) = document["extra_data"]["provenance"]["follow_ups"]
    assert record["graded"] == ["gpu0_memory", "scaling"] and record["requested_at"] == follow.requested_at
    (earlier,) = store.history("alice", "p5", submission.commit)
    assert read_scores(read_document(earlier) or {}).pending == {"gpu0_memory": 1.0, "scaling": 2.0, "timing_table": 2.0}
    assert Queue(store).settled(follow)


def test_what_the_place_cannot_grade_either_stays_deferred_and_says_why(tmp_path: Path) -> None:
    store, submission = stored(tmp_path, p5_report())
    follow = followup.follow_up_of(submission, p5_report(), COURSE)
    assert follow is not None
    again = GradingReport("p5", "Data parallelism", tuple(replace(c, number=n) for n, c in enumerate(p5_report().checks[1:3], 1)), environment={"seed": 7, "cuda_gpus": 0})
    merged = followup.merge(store, follow, again, "partition gpu (job 43, node g1)")
    assert merged is not None and merged.headline() == "3 of 8 points so far — 3 graded on a GPU node, 2 graded by the autograder"
    checks = {c.id: c for c in merged.checks}
    assert checks["scaling"].summary.startswith("still deferred: the follow-up on partition gpu (job 43, node g1) could not grade it either: needs ≥ 2 CUDA GPUs")
    assert followup.deferred_here(merged) == ("gpu0_memory", "scaling")
    failed = followup.merge(store, follow, GradingReport.failure("p5", "the node lost its disk"), "partition gpu (job 44, node g1)")
    assert failed is not None and failed.headline() == merged.headline() and "the follow-up failed: the node lost its disk" in failed.notes[-1]
    assert len(store.history("alice", "p5", submission.commit)) == 2
    regraded = replace(p5_report(seed=8))  # a regrade meanwhile: its own seed, its own follow-up
    store.save(to_gradescope(regraded), store.entry("alice", "p5", submission.commit).provenance)
    assert followup.merge(store, follow, again, "partition gpu") is None


def test_regrade_deferred_queues_a_follow_up_of_each_grade_that_still_has_some(tmp_path: Path) -> None:
    store, submission = stored(tmp_path, p5_report())
    done = replace(p5_report(), checks=p5_report().checks[:1])
    store.save(to_gradescope(done), {"student": "bob", "practical": "p5", "commit": "d" * 40, "source": {"kind": "git", "repo": "/srv/git/bob.git"}})
    (queued,) = regrade(store, COURSE, Selection(deferred=True), "local")  # bob's has nothing deferred for its machine
    assert queued.what == "queued" and queued.key == f"alice--p5--{'c' * 40}--deferred"
    record = Queue(store).load(queued.key)
    assert record.checks == ["gpu0_memory", "scaling"] and record.seed == 7 and record.backend == "slurm" and record.options == {"partition": "gpu", "gpus": 2}
    assert store.history("alice", "p5", submission.commit) == []  # the grade stands until the follow-up's verdicts come
    (again,) = regrade(store, COURSE, Selection(deferred=True), "local")
    assert again.what == "already queued"
    (nowhere,) = regrade(store, load_course(ROOT), Selection(deferred=True, student="alice"), "local")
    assert nowhere.what.startswith("not queued: course.yaml names no place for deferred checks")
