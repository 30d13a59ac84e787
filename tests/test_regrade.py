"""`grader regrade` on a real store, a real git repository and the local backend: an injected
autograder error is graded again to a real score, the earlier result is kept in history, a
second regrade finds nothing to do, and a result graded under another spec is found stale."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from grader import __version__
from grader.course import find_course_root, load_course
from grader.results.gradescope import to_gradescope
from grader.results.model import GradingReport
from grader.store import ResultsStore
from grader.submit.worker import spec_digest
from helpers import ROOT, run_cli

pytestmark = pytest.mark.slow


def pushed_p4(tmp_path: Path) -> tuple[Path, str]:
    """A bare repository whose main holds p4's solution in assignments/p4; and its commit."""
    work = tmp_path / "work"
    shutil.copytree(ROOT / "solutions" / "p4", work / "assignments" / "p4")
    git = ["git", "-c", "user.email=s@s", "-c", "user.name=s", "-C", str(work)]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "p4"], check=True)
    commit = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    bare = tmp_path / "alice.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(bare)], check=True)
    return bare, commit


def test_an_autograder_error_is_regraded_to_a_real_score_and_kept_in_history(tmp_path: Path) -> None:
    course = load_course(find_course_root(cwd=ROOT))
    bare, commit = pushed_p4(tmp_path)
    store = ResultsStore(tmp_path / "results")
    base = {"practical": "p4", "submitted_at": "2026-11-20T10:00:00+00:00", "grader": __version__, "spec_digest": spec_digest(course, "p4")}
    store.save(to_gradescope(GradingReport.failure("p4", "the node lost its GPU")), {**base, "student": "alice", "commit": commit, "source": {"kind": "git", "repo": str(bare)}})
    store.save(to_gradescope(GradingReport.failure("p4", "a folder submission")), {**base, "student": "bob", "commit": "b" * 40, "source": {"kind": "folder", "path": "/gone"}})

    done = run_cli("regrade", "--results-dir", str(store.root), "--errors", "--wait")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"alice/p4@{commit[:10]}: queued" in done.stdout
    assert f"bob/p4@{'b' * 10}: not regraded: its files were a folder submission, which is not kept: submit it again" in done.stdout
    result = json.loads(store.path_for("alice", "p4", commit).read_text())
    assert result["score"] == 14
    provenance = result["extra_data"]["provenance"]
    assert provenance["submitted_at"] == base["submitted_at"] and provenance["spec_digest"] == base["spec_digest"]
    (earlier,) = store.history("alice", "p4", commit)
    assert "the node lost its GPU" in earlier.read_text()

    again = run_cli("regrade", "--results-dir", str(store.root), "--errors", "--student", "alice")
    assert "no stored result matches" in again.stdout  # nothing is an error any more: nothing queued twice

    result["extra_data"]["provenance"]["spec_digest"] = "graded under an older spec"
    store.path_for("alice", "p4", commit).write_text(json.dumps(result))
    stale = run_cli("regrade", "--results-dir", str(store.root), "--stale", "--student", "alice", "--wait")
    assert stale.returncode == 0 and f"alice/p4@{commit[:10]}: queued" in stale.stdout
    assert len(store.history("alice", "p4", commit)) == 2
    assert json.loads(store.path_for("alice", "p4", commit).read_text())["extra_data"]["provenance"]["spec_digest"] == base["spec_digest"]
