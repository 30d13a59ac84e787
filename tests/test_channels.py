"""Feedback channels: one interface for every way a report reaches people (grader/results/channels/).
A new channel is one file; one that fails never stops the others, and the results are written."""
from __future__ import annotations

import io
import json
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import grader.results.channels as channels
from grader.cli import _asked_routes, _emit, _parser
from grader.results.channels import Delivered, Outcome, Problem, Route, available, deliver_all
from grader.results.channels.markdown import SummaryFile
from grader.results.model import CheckResult, GradingReport, Later, Status


def report() -> GradingReport:
    checks = (
        CheckResult("rank_setup", "Ranks", 1, 2.0, 2.0, Status.PASSED, "ok"),
        CheckResult("grad_sync", "Sync", 2, 0.0, 5.0, Status.FAILED, "gradients differ \x1b[2J"),
    )
    return GradingReport("p6", "DDP", checks)


@dataclass
class FakeChannel:
    """Records what it was given; answers as a real channel does."""

    name: str = "fake"
    received: list[tuple[GradingReport, object]] = field(default_factory=list)

    def deliver(self, report: GradingReport, destination: object) -> Outcome:
        self.received.append((report, destination))
        return Delivered(self.name, str(destination))


@dataclass
class BrokenChannel:
    """Fails as a channel nobody expected to fail does."""

    name: str = "broken"

    def deliver(self, report: GradingReport, destination: object) -> Outcome:
        raise RuntimeError(f"no route to {destination} \x1b[2J")


def test_every_existing_path_is_a_channel() -> None:
    assert set(available()) == {"console", "gradescope", "markdown", "classroom", "git-branch"}


def test_a_failing_channel_does_not_stop_the_others() -> None:
    first, last = FakeChannel("first"), FakeChannel("last")
    refusing = Problem("refusing", "the disk is full")

    @dataclass
    class Refusing:
        name: str = "refusing"

        def deliver(self, report: GradingReport, destination: object) -> Outcome:
            return refusing

    outcomes = deliver_all(report(), [Route(first, "a"), Route(BrokenChannel(), "b"), Route(Refusing(), "c"), Route(last, "d")])
    assert outcomes == (Delivered("first", "a"), Problem("broken", "RuntimeError: no route to b \x1b[2J"), refusing, Delivered("last", "d"))
    assert [d for _, d in first.received] == ["a"] and [d for _, d in last.received] == ["d"]


def test_a_new_channel_in_one_file_receives_the_report_and_a_broken_one_stops_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """The channel is one file in the channels' package; `--deliver NAME=DEST` asks for it."""
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "recorder.py").write_text(textwrap.dedent('''
        from dataclasses import dataclass
        from pathlib import Path

        from grader.results.channels import Delivered


        @dataclass(frozen=True)
        class Recorder:
            name: str = "recorder"

            def destination_from(self, text):
                return Path(text)

            def deliver(self, report, destination):
                destination.write_text(f"{report.practical} {report.score:g}/{report.max_score:g}")
                return Delivered(self.name, str(destination))


        CHANNEL = Recorder()
    '''))
    (plugins / "exploding.py").write_text(textwrap.dedent('''
        from dataclasses import dataclass


        @dataclass(frozen=True)
        class Exploding:
            name: str = "exploding"

            def destination_from(self, text):
                return text

            def deliver(self, report, destination):
                raise OSError(f"cannot reach {destination}")


        CHANNEL = Exploding()
    '''))
    monkeypatch.setattr(channels, "__path__", [*channels.__path__, str(plugins)])
    for name in ("recorder", "exploding"):
        monkeypatch.delitem(sys.modules, f"grader.results.channels.{name}", raising=False)
    assert {"recorder", "exploding"} <= set(available())
    out, summary, results = tmp_path / "recorded.txt", tmp_path / "summary.md", tmp_path / "r" / "results.json"
    args = _parser().parse_args(["check", "p6", "--deliver", "exploding=somewhere", "--deliver", f"recorder={out}", "--markdown", str(summary)])
    routes = [Route(available()["markdown"], SummaryFile(args.markdown)), Route(available()["console"], sys.stdout), *_asked_routes(args)]
    assert _emit(report(), results, routes, with_views=False) is False  # one channel failed
    assert out.read_text() == "p6 2/7"  # the new channel got the report, after the broken one
    assert json.loads(results.read_text())["score"] == 2.0 and "| 2 | Sync | 0/5 | ❌ fail |" in summary.read_text()
    printed = capsys.readouterr()
    assert "Score: 2 of 7 points" in printed.out and f"results written to {results}" in printed.out
    assert printed.err.strip() == "error: exploding: OSError: cannot reach somewhere"
    for name in ("recorder", "exploding"):
        monkeypatch.delitem(sys.modules, f"grader.results.channels.{name}", raising=False)


def test_an_unknown_channel_is_named_before_any_grading() -> None:
    args = _parser().parse_args(["check", "p6", "--deliver", "slack=#course"])
    with pytest.raises(ValueError, match="no feedback channel 'slack'.*classroom, gradescope, markdown"):
        _asked_routes(args)
    with pytest.raises(SystemExit):
        _parser().parse_args(["check", "p6", "--deliver", "markdown"])  # NAME=DEST


def test_the_built_in_channels_write_what_their_renderers_write(tmp_path: Path) -> None:
    """Each channel wraps its renderer: the same text as before, and a problem, not an
    exception, when its destination cannot be written."""
    from grader.results.classroom import classroom_encoded
    from grader.results.render import console_table, markdown

    found = available()
    stream = io.StringIO()
    outcomes = deliver_all(report(), [
        Route(found["console"], stream),
        Route(found["markdown"], SummaryFile(tmp_path / "s.md", graded_commit="abc1234")),
        Route(found["classroom"], tmp_path / "c.txt"),
        Route(found["gradescope"], tmp_path / "missing" / "deeper" / "results.json"),
        Route(found["classroom"], tmp_path / "no-such-folder" / "c.txt"),
    ])
    assert stream.getvalue() == console_table(report()) + "\n"
    assert (tmp_path / "s.md").read_text() == markdown(report()) + "\nGraded commit: abc1234\n"
    assert (tmp_path / "c.txt").read_text() == classroom_encoded(report()) + "\n"
    assert [type(o).__name__ for o in outcomes] == ["Delivered", "Delivered", "Delivered", "Delivered", "Problem"]
    assert outcomes[-1].channel == "classroom" and "no-such-folder" in outcomes[-1].message


def test_the_worker_delivers_to_the_feedback_branch_through_its_channel(tmp_path: Path) -> None:
    """What the worker says of the git channel's outcome, delivered or not."""
    import subprocess

    from grader.course import load_course
    from grader.store import ResultsStore
    from grader.submit.queue import Submission
    from grader.submit.worker import deliver
    from helpers import ROOT

    course, store = load_course(ROOT), ResultsStore(tmp_path / "store")
    bare = tmp_path / "alice.git"
    subprocess.run(["git", "init", "-q", "--bare", str(bare)], check=True)
    pushed = Submission("alice", "p6", "a" * 40, {"kind": "git", "repo": str(bare)})
    assert deliver(store, course, pushed, report()) == "; feedback on the repository's feedback branch"
    assert "Graded commit: " + "a" * 40 in subprocess.run(["git", "--git-dir", str(bare), "show", "feedback:p6.md"], capture_output=True, text=True, check=True).stdout
    missing = Submission("bob", "p6", "b" * 40, {"kind": "git", "repo": str(tmp_path / "bob.git")})
    assert deliver(store, course, missing, report()).startswith("; feedback not delivered to the repository: git ")


def test_verify_delivers_each_reference_grading_to_the_console_and_its_results_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """`grader verify` (the README's main command) goes through the channels as `grade` does:
    the table on the console, the results file where asked, its verdict per practical."""
    import grader.cli as cli

    busy = "timed: the machine was busy: in 4 of 4 rounds of launches other processes used more than 10% of the machine's CPU time"
    full = GradingReport("p6", "DDP", (CheckResult("rank_setup", "Ranks", 1, 2.0, 2.0, Status.PASSED, "ok"), CheckResult("efficiency", "Speed", 2, 0.0, 2.0, Status.DEFERRED, busy, later=Later.QUIET_MACHINE)))
    monkeypatch.setattr(cli, "_grade_folder", lambda *args, **kwargs: full if args[0].id == "p6" else report())
    assert cli.main(["verify", "p6", "p10", "--results-dir", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "==> p6: 2 of 4 points so far — 2 graded on a quiet machine: FULL MARKS (deferred, not graded here: efficiency)" in out and "the machine was busy" in out
    assert "==> p10: 2 of 7 points: NOT FULL MARKS" in out and "reference solutions below full marks: p10" in out
    assert "Score: 2 of 4 points so far — 2 graded on a quiet machine" in out  # the console channel's table
    assert json.loads((tmp_path / "p6.json").read_text())["score"] == 2
