"""The hostile corpus, graded in the sandbox: each case gets its expected score and message,
the grader never crashes, nothing outside the work folder changes, no secret leaks into the
results, and no process survives the grading."""
from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path

import pytest

from grader.run import procs
from grader.run.local import TOKEN_VARIABLE
from grader.run.sandbox import UID_POOL
from helpers import grade_in_process, needs, sandbox_problem
from hostile_corpus import CASES, ROOT, Case

pytestmark = [pytest.mark.slow, needs("sandbox", sandbox_problem())]


def _owner_and_mode(path: Path) -> tuple[int, int, int]:
    info = path.stat()
    return info.st_uid, info.st_gid, info.st_mode


@pytest.fixture
def outside() -> dict:
    """A canary anyone may write and a secret anyone may read, outside the work folder."""
    folder = Path("/tmp") / f"grader-outside-{uuid.uuid4().hex[:8]}"
    folder.mkdir(mode=0o777)
    folder.chmod(0o777)
    canary, secret = folder / "canary.txt", folder / "secret.txt"
    canary.write_text("untouched")
    canary.chmod(0o666)
    token = uuid.uuid4().hex
    secret.write_text(token)
    secret.chmod(0o644)
    yield {"canary": canary, "secret": secret, "token": token, "root": ROOT}
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_hostile_submission_is_graded_and_contained(case: Case, outside: dict, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    folder = tmp_path / "submission"
    folder.mkdir()
    for name, text in case.files({k: v for k, v in outside.items() if k != "token"}).items():
        (folder / name).write_text(text)
    for name, target in case.symlinks.items():
        (folder / name).symlink_to(target)
    watched = [Path("/etc/shadow"), Path("/etc/passwd"), Path("/etc"), outside["canary"], outside["secret"]]
    before = {path: _owner_and_mode(path) for path in watched}
    results = grade_in_process(case.practical, folder, tmp_path / "results.json", *case.args)
    capsys.readouterr()
    text = json.dumps(results, ensure_ascii=False)
    assert results["score"] == pytest.approx(case.score), text[:3000]
    for fragment in case.fragments:
        assert fragment in text, fragment
    assert results["extra_data"]["environment"]["isolation"].startswith("bubblewrap sandbox")
    assert outside["canary"].read_text() == "untouched"
    assert {path: _owner_and_mode(path) for path in watched} == before
    assert "root:" not in text  # /etc/shadow's first line
    assert outside["token"] not in text
    assert '"score": 999' not in text and '"score": 100' not in text
    assert procs.pids_with_env_name(TOKEN_VARIABLE) == []
    assert procs.pids_of_uids(UID_POOL) == []
