"""Text from a submission, made safe everywhere the grader shows or stores it: the escaping
functions (grader.results.escape) on hostile input, every renderer of a report whose every
text field is hostile, the CSV files, `grader status`, the observe report, and answers.yaml
files built to explode or to crash the loader. Fast: no torch process is started."""
from __future__ import annotations

import csv
import json
import re
import time
import tracemalloc
from pathlib import Path

import jsonschema
import pytest
import yaml

from grader.cli import main
from grader.collect import collect, write_answers
from grader.grade.answers import MAX_MANUAL_CHARS, load_answers, manual_texts
from grader.observe.report import RunSummary as ObservedRun
from grader.observe.report import render_report
from grader.results.escape import (
    BLOCK_CHARS,
    cap,
    json_safe,
    markdown_block,
    markdown_inline,
    spreadsheet_cell,
    terminal_block,
    terminal_line,
    visible,
)
from grader.results.gradescope import to_gradescope, write_results
from grader.results.model import CheckResult, GradingReport, RunSummary, Status
from grader.results.render import console_table, markdown, overview_text
from grader.store import ResultsStore
from grader.submit.queue import Queue, Submission
from helpers import ROOT, SCHEMA
from hostile_text import BILLION_LAUGHS, DEEP_YAML, FAKE_SCORE, HOSTILE_TEXTS, HUGE_TEXT, acting_characters, fenced_blocks, raw_acting
from observations import header, observed, timed

ALL_HOSTILE = "\n".join(HOSTILE_TEXTS.values())


@pytest.fixture(scope="module")
def acting() -> frozenset[str]:
    return acting_characters()


# ------------------------------------------------------------------ the functions
@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("\x1b[2J\x1b[HScore", "\\x1b[2J\\x1b[HScore"),
        ("a\r\nb\rc", "a\\r\\nb\\rc"),
        ("FAIL\x08\x08PASS", "FAIL\\x08\\x08PASS"),
        ("a\x00b\x7f\x9b\x85", "a\\x00b\\x7f\\x9b\\x85"),
        ("\u202etxt.exe\u202c \u2066x\u2069 \u061c", "\\u202etxt.exe\\u202c \\u2066x\\u2069 \\u061c"),
        ("pa\u200bss\ufeff\u00ad", "pa\\u200bss\\ufeff\\xad"),
        ("one\u2028two\u2029", "one\\u2028two\\u2029"),
        ("bad \ud800 \udfff", "bad \\ud800 \\udfff"),
        ("tag\U000e0041", "tag\\U000e0041"),
        ("a\tb", "a    b"),
        ("Résumé ✓ 2×3 — naïve 日本語 👍 [x] `y` <z>", "Résumé ✓ 2×3 — naïve 日本語 👍 [x] `y` <z>"),
    ],
)
def test_visible_writes_out_what_would_act(text: str, shown: str) -> None:
    assert visible(text) == shown


def test_visible_keeps_newlines_only_when_asked() -> None:
    assert visible("a\r\nb\nc\r", keep_newlines=True) == "a\nb\nc\\r"
    assert visible("a\nb") == "a\\nb"


def test_visible_leaves_no_acting_character_of_unicode(acting: frozenset[str]) -> None:
    shown = visible("".join(sorted(acting)), keep_newlines=True)
    assert raw_acting(shown, acting) == [] and shown.isascii() and shown.isprintable()


def test_cap_says_how_much_it_left_out() -> None:
    assert cap("abcdef", 4) == "abcd… (2 more characters)"
    assert cap("abcd", 4) == "abcd"


def test_terminal_line_is_one_capped_visible_line() -> None:
    assert terminal_line(f"boom\n{FAKE_SCORE}\x1b[2J") == "boom\\nScore: 21 of 21 points\\x1b[2J"
    assert terminal_line("\x00" * 10, 3) == "\\x00\\x00\\x00… (7 more characters)"


def test_terminal_block_puts_every_line_behind_its_gutter() -> None:
    assert terminal_block(f"a\n{FAKE_SCORE}\r\n\x1b[2Jb\n", "    | ") == ["    | a", f"    | {FAKE_SCORE}", "    | \\x1b[2Jb"]
    assert terminal_block("", "  ") == []
    with pytest.raises(ValueError):
        terminal_block("a", "")


def test_markdown_inline_escapes_specials_and_html() -> None:
    text = "a_b|c *d* [e](f) ~g~ `h` \\ <img src=x onerror=alert(1)> & \x1b\n# Heading"
    assert markdown_inline(text) == (
        "a\\_b\\|c \\*d\\* \\[e\\](f) \\~g\\~ \\`h\\` \\\\ &lt;img src=x onerror=alert(1)&gt; &amp; \\\\x1b # Heading"
    )
    assert markdown_inline("Ranks match the launcher") == "Ranks match the launcher"


def test_markdown_block_fence_outgrows_every_backtick_run() -> None:
    assert markdown_block("plain") == "```\nplain\n```"
    assert markdown_block("```\n# Heading\n<img src=x>\n`````\x1b") == "``````\n```\n# Heading\n<img src=x>\n`````\\x1b\n``````"


@pytest.mark.parametrize(
    ("value", "cell"),
    [
        ('=HYPERLINK("http://evil.example","click")', '\'=HYPERLINK("http://evil.example","click")'),
        ("+1", "'+1"),
        ("-2", "'-2"),
        ("@SUM(A1)", "'@SUM(A1)"),
        ("  =1+1", "'  =1+1"),
        ("\t=1+1", "'    =1+1"),
        ("\r=1+1", "\\r=1+1"),
        ("line one\nline two\x1b", "line one\nline two\\x1b"),
        ("alice", "alice"),
        (3, "3"),
    ],
)
def test_spreadsheet_cells_are_never_formulas(value: object, cell: str) -> None:
    assert spreadsheet_cell(value) == cell


def test_json_safe_shows_surrogates_and_drops_what_json_cannot_hold() -> None:
    value = {"a": "bad \ud800", "nan": float("nan"), "inf": float("-inf"), (1, 2): 10 ** 30, "big": 10 ** 5000, "ok": [1, 2.5, True, None]}
    assert json_safe(value) == {
        "a": "bad \\ud800",
        "nan": None,
        "inf": None,
        "(1, 2)": "1000000000000000000000000000000",
        "big": "(a value of type int that cannot be shown)",
        "ok": [1, 2.5, True, None],
    }


def test_json_safe_bounds_strings_items_and_depth() -> None:
    assert json_safe("x" * 10, max_string=4) == "xxxx… (6 more characters)"
    assert json_safe({"k": list(range(50))}, max_total=10) == {"k": [0, 1, 2, 3, 4, 5, 6, 7, "… (42 more items)"]}
    assert json_safe({str(i): i for i in range(50)}, max_total=6) == {"0": 0, "1": 1, "2": 2, "…": "47 more entries"}
    nested: list = []
    for _ in range(100):
        nested = [nested]
    text = json.dumps(json_safe(nested))
    assert text.count("[") == 32 and "nested deeper than 32 levels" in text


# ------------------------------------------------------------------ a hostile report, every renderer
def hostile_report(text: str) -> GradingReport:
    """A report whose every text field holds `text`."""
    gpu = {"index": 0, "name": text, "memory_peak_mib": 1.0, "memory_added_peak_mib": 1.0}
    gpu.update({"utilization_mean_pct": 5.0, "utilization_max_pct": 9})
    telemetry = {"gpus": [gpu], text: text}
    checks = (
        CheckResult("hostile", text, 1, 0.0, 2.0, Status.FAILED, text, (text, text), data={"message": text, text: [text]}),
        CheckResult("plain", "Plain", 2, 2.0, 2.0, Status.PASSED, "ok"),
        CheckResult("later", text, 3, 0.0, 1.0, Status.DEFERRED, text),
    )
    runs = (RunSummary(text, text, 1.0, text, text, telemetry=telemetry),)
    environment = {"host": text, "devices": text, "torch": text, "seed": 1}
    return GradingReport("p6", text, checks, runs, 3.0, environment, error=text, manual=((text, text),), notes=(text, text))


HOSTILE_REPORTS = {"all": ALL_HOSTILE, **HOSTILE_TEXTS, "huge": HUGE_TEXT + ALL_HOSTILE}


def assert_safe_console(text: str, acting: frozenset[str]) -> None:
    assert raw_acting(text, acting) == []
    real = "Score: 2 of 5 points so far — 1 graded in a regrade"
    assert [line for line in text.splitlines() if line.startswith("Score:")] == [real]
    assert len(text) < 200_000


@pytest.mark.parametrize("name", HOSTILE_REPORTS)
def test_console_shows_hostile_text_without_letting_it_act(name: str, acting: frozenset[str]) -> None:
    report = hostile_report(HOSTILE_REPORTS[name])
    assert_safe_console(console_table(report), acting)
    assert_safe_console(overview_text(report), acting)


@pytest.mark.parametrize("name", HOSTILE_REPORTS)
def test_markdown_keeps_hostile_text_inside_its_code_blocks(name: str, acting: frozenset[str]) -> None:
    report = hostile_report(HOSTILE_REPORTS[name])
    text = markdown(report)
    assert raw_acting(text, acting) == [] and len(text) < 200_000
    outside, blocks = fenced_blocks(text)
    failing = (report.checks[0], report.checks[2])
    assert blocks == [visible(cap(check.feedback, BLOCK_CHARS), keep_newlines=True).split("\n") for check in failing]
    assert [line for line in outside if line.lstrip().startswith("#")] == [outside[0]] and outside[0].startswith("### p6: ")
    tags = re.findall(r"<[^>]*>", "\n".join(outside))
    assert set(tags) <= {"<details>", "<summary>", "</summary>", "</details>"}
    assert all(line.count("|") - line.count("\\|") == 5 for line in outside if line.startswith("| "))


@pytest.mark.parametrize("name", HOSTILE_REPORTS)
def test_results_json_is_always_written_valid_and_bounded(name: str, tmp_path: Path, acting: frozenset[str]) -> None:
    path = tmp_path / "results.json"
    write_results(hostile_report(HOSTILE_REPORTS[name]), path)
    raw = path.read_bytes()
    assert len(raw) < 3_000_000
    document = json.loads(raw.decode("utf-8"))
    jsonschema.validate(document, SCHEMA)
    assert [t["score"] for t in document["tests"]] == [0.0, 2.0, 0, 0] and document["tests"][-1]["name"] == "Autograder error"
    assert [text for text in strings_of(document) if raw_acting(text, acting)] == []  # every field, keys too
    assert all(FAKE_SCORE not in line or not line.startswith("Score:") for line in document["output"].splitlines())


def strings_of(value: object) -> list[str]:
    """Every string of a JSON document, its keys included."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [text for key, item in value.items() for text in (key, *strings_of(item))]
    if isinstance(value, list):
        return [text for item in value for text in strings_of(item)]
    return []


def test_a_stored_hostile_result_is_saved_and_read_back(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path)
    store.save(to_gradescope(hostile_report(ALL_HOSTILE)), {"student": "alice", "practical": "p6", "commit": "abc"})
    (entry,) = store.entries()
    answers = entry.document["extra_data"]["manual_answers"]
    assert list(answers.values()) == [visible(ALL_HOSTILE, keep_newlines=True)]  # as the student wrote it, nothing acting


def test_ordinary_text_renders_as_before() -> None:
    summary, details = "ws2: gradients differ at fc.weight[3, 4]", ("ws2: rank 1 differs", "ws3: 'x' != \"y\"")
    checks = (
        CheckResult("rank_setup", "Ranks match the launcher", 1, 2.0, 2.0, Status.PASSED, "ok", ("✓ ws2: all 2 ranks",)),
        CheckResult("grad_sync", "Gradients — 1.2× its time", 2, 0.0, 5.0, Status.FAILED, summary, details),
    )
    output = 'rank 1 stderr (last lines):\n  File "p6_ddp.py", line 3, in <module>\nValueError: boom'
    runs = (RunSummary("ws2", "1 node × 2 ranks", 0.4, "rank 1 raised ValueError: boom", output),)
    notes = ("line 3: the cell magic %%time was ignored",)
    manual = (("questions.faster", "No. It's slower (2 GPUs)."),)
    report = GradingReport("p6", "DDP under torchrun", checks, runs, 12.3, {"host": "vm-1", "seed": 5}, notes=notes, manual=manual)
    assert console_table(report) == (
        "p6: DDP under torchrun\n\n  #  check                         points  result\n  1  Ranks match the launcher         2/2  PASS\n"
        "  2  Gradients — 1.2× its time        0/5  FAIL\n\nScore: 2 of 7 points\ngraded in 12.3 s, on vm-1, seed 5\n"
        "1 of 1 free-text answers collected for manual grading\n\nFeedback:\n  ✓ 1. Ranks match the launcher: ok\n"
        "  ✗ 2. Gradients — 1.2× its time: ws2: gradients differ at fc.weight[3, 4]\n\n"
        "Notes:\n  line 3: the cell magic %%time was ignored\n\n"
        "Output of failing ranks:\n  ws2 (1 node × 2 ranks): rank 1 raised ValueError: boom\n    | rank 1 stderr (last lines):\n"
        '    |   File "p6_ddp.py", line 3, in <module>\n    | ValueError: boom'
    )
    assert markdown(report) == (
        "### p6: DDP under torchrun\n\n**Score: 2 of 7 points** — graded in 12.3 s, on vm-1, seed 5\n\n"
        "- line 3: the cell magic %%time was ignored\n\n"
        "| # | check | points | result |\n|---|---|---|---|\n"
        "| 1 | Ranks match the launcher | 2/2 | ✅ pass |\n| 2 | Gradients — 1.2× its time | 0/5 | ❌ fail |\n\n"
        "<details><summary>Feedback</summary>\n\n"
        "**2. Gradients — 1.2× its time**\n\n"
        "```\nws2: gradients differ at fc.weight[3, 4]\nws2: rank 1 differs\nws3: 'x' != \"y\"\n```\n\n"
        "</details>\n"
    )
    document = to_gradescope(report)
    assert document["tests"][1]["output"] == checks[1].feedback and document["extra_data"]["manual_answers"] == dict(manual)


# ------------------------------------------------------------------ CSV, status, observe
def test_csv_cells_are_visible_and_never_formulas(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path / "store")
    answer = HOSTILE_TEXTS["formula"] + "\n" + HOSTILE_TEXTS["clear_screen"] + HOSTILE_TEXTS["lone_surrogate"]
    report = GradingReport("p6", "DDP", (), manual=(("questions.why", answer),))
    store.save(to_gradescope(report), {"student": "alice", "practical": "p6", "commit": "a1", "submitted_at": "2026-12-01T10:00:00+00:00"})
    path = tmp_path / "answers.csv"
    write_answers(collect(store), path)
    rows = list(csv.reader(path.open(encoding="utf-8", newline="")))
    shown = '\'=HYPERLINK("http://evil.example","click")\n\\x1b[2J\\x1b[HScore: 21 of 21 pointsbad \\ud800 text \\udfff'
    assert rows[1] == ["alice", "p6", "a1", "questions.why", shown]
    assert "\x1b" not in path.read_text(encoding="utf-8")


def test_status_escapes_what_the_store_and_the_queue_hold(tmp_path: Path, capsys: pytest.CaptureFixture, acting: frozenset[str]) -> None:
    store = ResultsStore(tmp_path)
    forged = HOSTILE_TEXTS["clear_screen"] + HOSTILE_TEXTS["forged_line"] + HOSTILE_TEXTS["bidi_override"]
    store.save(to_gradescope(GradingReport("p6", "DDP", ())), {"student": "alice", "practical": "p6", "commit": "a1", "graded_at": forged})
    Queue(store).save(Submission("bob", "p6", "b1", {"kind": "git"}, history=[forged]))
    assert main(["status", "--results-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert raw_acting(out, acting) == [] and not any(line.startswith("Score:") for line in out.splitlines())
    assert len(out.splitlines()) == 2 and "\\x1b[2J" in out


def test_the_observe_report_shows_what_processes_recorded_without_letting_it_act(acting: frozenset[str]) -> None:
    text = ALL_HOSTILE
    process = observed(
        header(0, 1, pid=7),
        timed("init_pg", 0.0, backend=text, requested=text, rank=0, world_size=1),
        timed("model", 0.1, label=text, params=10, devices=(text,)),
        timed("exception", 0.2, type=f"Error\n{FAKE_SCORE}", message=text),
        timed("note", 0.2, text=text),
        timed("comm_hook", 0.2, name=text),
        timed("memory", 0.3, peak=None, why=HUGE_TEXT),
    )
    report = render_report([process], ObservedRun(["python", text], 1, start_error=text))
    assert raw_acting(report, acting) == [] and len(report) < 100_000
    assert not any(line.startswith("Score:") for line in report.splitlines())
    assert "uncaught Error\\nScore: 21 of 21 points: " in report


# ------------------------------------------------------------------ answers.yaml
def load(tmp_path: Path, text: str, encoding_errors: str = "strict") -> tuple:
    (tmp_path / "answers.yaml").write_bytes(text.encode("utf-8", errors=encoding_errors))
    tracemalloc.start()
    started = time.perf_counter()
    try:
        answers = load_answers(tmp_path, "answers.yaml")
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return answers, time.perf_counter() - started, peak


def test_a_billion_laughs_is_refused_at_once(tmp_path: Path) -> None:
    assert 2000 < len(BILLION_LAUGHS) < 3000
    answers, seconds, peak = load(tmp_path, BILLION_LAUGHS)
    assert answers.data is None
    assert answers.problem == "answers.yaml uses YAML anchors/aliases (& and *), which answers files do not need (line 1)"
    assert seconds < 2 and peak < 20 << 20


def test_an_anchor_alone_is_refused_too(tmp_path: Path) -> None:
    answers, _, _ = load(tmp_path, "questions:\n  faster: &a yes\n")
    assert answers.problem == "answers.yaml uses YAML anchors/aliases (& and *), which answers files do not need (line 2)"


def test_deep_nesting_and_too_many_values_are_refused(tmp_path: Path) -> None:
    answers, seconds, peak = load(tmp_path, DEEP_YAML)
    assert answers.problem == "answers.yaml nests deeper than 20 levels (line 2)" and seconds < 5 and peak < 50 << 20
    answers, seconds, _ = load(tmp_path, "q: [" + ", ".join(["1"] * 20_000) + "]\n")
    assert answers.problem == "answers.yaml holds more than 10000 values (line 1)" and seconds < 5


def test_values_python_cannot_hold_are_a_problem_not_an_exception(tmp_path: Path) -> None:
    answers, _, _ = load(tmp_path, "q: " + "1" * 5000 + "\n")
    assert answers.problem is None and answers.get("q") == "1" * 5000  # a number no answer needs stays its text
    answers, _, _ = load(tmp_path, "q: 0x" + "F" * 5000 + "\n")  # beyond Python's digit limit when printed
    assert answers.problem is None and answers.get("q") == "0x" + "F" * 5000 and manual_texts(answers, ("q",))[0][1].startswith("0xFFFF")
    answers, _, _ = load(tmp_path, "q: 2026-13-45\n")
    assert answers.problem == "answers.yaml cannot be read: month must be in 1..12"


def test_a_raw_nul_byte_is_a_problem(tmp_path: Path) -> None:
    answers, _, _ = load(tmp_path, "questions:\n  faster: a\x00b\n")
    assert answers.problem == (
        "answers.yaml is not valid YAML (character 23): unacceptable character #x0000: special characters are not allowed"
    )


def test_escaped_surrogates_and_nuls_are_read_and_shown_safely_in_every_field(tmp_path: Path, acting: frozenset[str]) -> None:
    answers, _, _ = load(tmp_path, 'questions:\n  faster: "bad \\ud800 \\0 \\e[2J"\n  memory: [1, {a: "\\x1b"}]\n')
    texts = manual_texts(answers, ("questions.faster", "questions.memory", "questions.missing"))
    assert texts == (
        ("questions.faster", "bad \ud800 \x00 \x1b[2J"),
        ("questions.memory", "[1, {'a': '\\x1b'}]"),
        ("questions.missing", ""),
    )
    report = GradingReport("p5", "DP", (), manual=texts)
    write_results(report, tmp_path / "results.json")
    document = json.loads((tmp_path / "results.json").read_bytes().decode("utf-8"))
    assert document["extra_data"]["manual_answers"]["questions.faster"] == "bad \\ud800 \\x00 \\x1b[2J"  # the field staff read raw too
    assert "  questions.faster: bad \\ud800 \\x00 \\x1b[2J" in document["output"].splitlines()
    assert raw_acting(document["output"], acting) == []


def test_manual_answers_are_capped(tmp_path: Path) -> None:
    answers, _, _ = load(tmp_path, "questions:\n  faster: " + "y" * 10_000 + "\n  memory: [" + ", ".join(["long words"] * 5000) + "]\n")
    (_, faster), (_, memory) = manual_texts(answers, ("questions.faster", "questions.memory"))
    assert faster == "y" * MAX_MANUAL_CHARS + "… (6000 more characters)"
    assert len(memory) < MAX_MANUAL_CHARS + 40 and memory.endswith("more characters)")


@pytest.mark.parametrize("practical", ["p5", "p10"])
def test_the_reference_answers_load_as_yaml_reads_them(practical: str) -> None:
    folder = ROOT / "solutions" / practical
    answers = load_answers(folder, "answers.yaml")
    assert answers.problem is None and answers.data == yaml.safe_load((folder / "answers.yaml").read_text())
