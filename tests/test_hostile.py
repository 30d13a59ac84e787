"""The hostile corpus, graded in the sandbox: each case gets its expected score and message,
the grader never crashes, nothing outside the work folder changes (a root-only canary is
neither read nor re-owned), no secret leaks into the results, what the submission wrote
reaches the console and the markdown summary only escaped, and no process survives the
grading."""
from __future__ import annotations

import json
import re
import shutil
import uuid
from pathlib import Path

import pytest

from grader.run import procs
from grader.run.local import TOKEN_VARIABLE
from grader.run.sandbox import UID_POOL
from grader.run.tree import remove_tree
from helpers import grade_in_process, needs, sandbox_problem
from hostile_corpus import CASES, ROOT, Case
from hostile_text import FAKE_SCORE, acting_characters, fenced_blocks, raw_acting

ACTING = acting_characters()
MAX_RESULTS_BYTES = 1 << 20

pytestmark = [pytest.mark.slow, needs("sandbox", sandbox_problem())]


def _owner_and_mode(path: Path) -> tuple[int, int, int]:
    info = path.stat()
    return info.st_uid, info.st_gid, info.st_mode


@pytest.fixture
def outside() -> dict:
    """A canary anyone may write, a secret anyone may read and a secret only root may read,
    outside the work folder (on the file system of the submissions, so that a hard link can
    name it)."""
    folder = Path("/tmp") / f"grader-outside-{uuid.uuid4().hex[:8]}"
    folder.mkdir(mode=0o777)
    folder.chmod(0o777)
    canary, secret = folder / "canary.txt", folder / "secret.txt"
    canary.write_text("untouched")
    canary.chmod(0o666)
    token = uuid.uuid4().hex
    secret.write_text(token)
    secret.chmod(0o644)
    root_secret, root_token = folder / "root-only.txt", uuid.uuid4().hex
    root_secret.write_text(root_token)
    root_secret.chmod(0o600)
    yield {"canary": canary, "secret": secret, "token": token, "root_secret": root_secret, "root_token": root_token, "root": ROOT}
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_hostile_submission_is_graded_and_contained(case: Case, outside: dict, tmp_path: Path, capsys: pytest.CaptureFixture, request: pytest.FixtureRequest) -> None:
    folder = tmp_path / "submission"
    folder.mkdir()
    request.addfinalizer(lambda: remove_tree(folder))  # a tree deeper than pytest's own clean-up can go
    given = {k: v for k, v in outside.items() if not k.endswith("token")}
    for name, text in case.files(given).items():
        (folder / name).write_text(text)
    for name, target in case.symlinks.items():
        (folder / name).symlink_to(target)
    if case.setup is not None:
        case.setup(folder, given)
    watched = [Path("/etc/shadow"), Path("/etc/passwd"), Path("/etc"), outside["canary"], outside["secret"], outside["root_secret"]]
    before = {path: _owner_and_mode(path) for path in watched}
    summary = tmp_path / "summary.md"
    results = grade_in_process(case.practical, folder, tmp_path / "results.json", *case.args, "--markdown", str(summary), timed=case.timed, views=True)
    console, errors = capsys.readouterr()
    text = json.dumps(results, ensure_ascii=False)
    assert results["score"] == pytest.approx(case.score), text[:3000]
    for fragment in case.fragments:
        assert fragment in text, (fragment, [run["outcome"] for run in results["extra_data"]["runs"]])
    assert results["extra_data"]["environment"]["isolation"].startswith("bubblewrap sandbox")
    assert (tmp_path / "results.json").stat().st_size < MAX_RESULTS_BYTES
    assert case.within_s is None or results["execution_time"] < case.within_s
    assert len(errors) < 64 << 10  # the grader's own warnings carry no megabytes of the submission's text
    assert outside["canary"].read_text() == "untouched"
    assert {path: _owner_and_mode(path) for path in watched} == before
    assert "root:" not in text  # /etc/shadow's first line
    assert outside["token"] not in text and outside["root_token"] not in text
    _assert_shown_escaped(console, summary.read_text(encoding="utf-8"))
    assert '"score": 999' not in text and '"score": 100' not in text
    assert procs.pids_with_env_name(TOKEN_VARIABLE) == []
    assert {pid: procs.cmdline(pid) for pid in procs.pids_of_uids(UID_POOL)} == {}


def _assert_shown_escaped(console: str, summary: str) -> None:
    """What the submission wrote reached the console and the markdown summary only escaped:
    no character that acts on a terminal, no forged score line, no HTML, no fence closed early."""
    assert raw_acting(console, ACTING) == [] and raw_acting(summary, ACTING) == []
    assert [line for line in console.splitlines() if line.startswith("Score:")] == [next(line for line in console.splitlines() if line.startswith("Score:"))]
    assert FAKE_SCORE not in [line.strip() for line in console.splitlines()]
    outside, _ = fenced_blocks(summary)  # a code block shows its text as it is
    assert set(re.findall(r"<[^>]*>", "\n".join(outside))) <= {"<details>", "<summary>", "</summary>", "</details>"}
    assert [line for line in outside if line.lstrip().startswith("#")] == [outside[0]]
