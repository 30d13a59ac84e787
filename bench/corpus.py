"""Grades the independent corpora (tests/corpus_p4.py, corpus_p5.py, corpus_p6.py, corpus_p10.py,
those that exist): each case, one at a time, in a temporary folder, without the speed checks
(as tests/helpers.grade_in_process grades), against the checks it must lose. Not a test: a whole
corpus of p6 or p10 takes about 6 minutes here, all four about 18.

    python bench/corpus.py [PRACTICAL ...] [--only NAME ...] [--details DIR]

Prints one line per case (practical:name, the checks it must lose, the checks it lost, OK or
MISMATCH, seconds) and, under a mismatch, the feedback of the checks in question; exits 1 when
any case does not lose exactly its checks (or its feedback lacks a fragment it must contain).
A mismatch the corpus lists in its DISAGREEMENTS (a grader defect, kept with the requirement's
expectation) is marked as known, and still counts.
--details DIR keeps each case's results.json as DIR/<practical>/<name>.json.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # tests/ is not a package: its modules import each other by name

from helpers import checks_by_id, grade_in_process  # noqa: E402 - after the path is set

PRACTICALS = ("p4", "p5", "p6", "p10")


def corpora(wanted: list[str]) -> dict[str, tuple[tuple, dict]]:
    """practical -> its CORPUS and its DISAGREEMENTS (the cases the grader is known to get wrong,
    if the module names any), for the corpora present (of `wanted`, or all)."""
    found = {}
    for practical in wanted or PRACTICALS:
        if (ROOT / "tests" / f"corpus_{practical}.py").exists():
            module = importlib.import_module(f"corpus_{practical}")
            found[practical] = module.CORPUS, getattr(module, "DISAGREEMENTS", {})
        elif wanted:
            raise SystemExit(f"no tests/corpus_{practical}.py")
    return found


@contextlib.contextmanager
def quiet(log: Path):
    """The grading's console output (this process's and its children's) into `log`."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(log, "w") as sink:
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


def names(checks) -> str:
    return "{" + ", ".join(sorted(checks)) + "}"


def indented(text: str, lines: int = 8) -> str:
    shown = text.splitlines()
    more = f"\n        … {len(shown) - lines} more lines" if len(shown) > lines else ""
    return "\n".join("        " + line for line in shown[:lines]) + more


def grade_case(practical: str, variant, work: Path, details: Path | None, known: str | None = None) -> tuple[bool, str]:
    """Grade one case; (as expected?, the line and, on a mismatch, the feedback in question)."""
    folder = variant.write(work / variant.name, practical)
    extra = ["--timeout", str(variant.timeout_s)] if variant.timeout_s else []
    started = time.perf_counter()
    try:
        with quiet(work / f"{variant.name}.log"):
            results = grade_in_process(practical, folder, work / f"{variant.name}.json", *extra)
    except BaseException as error:  # noqa: BLE001 - a broken grading is reported, and the next case still runs
        if isinstance(error, KeyboardInterrupt):
            raise
        seconds = time.perf_counter() - started
        tail = (work / f"{variant.name}.log").read_text(errors="replace")[-2000:]
        return False, f"{practical}:{variant.name}  expected {names(variant.loses)}  ERROR {type(error).__name__}: {error}  {seconds:.1f}s\n{indented(tail, 30)}"
    seconds = time.perf_counter() - started
    if details:
        (details / practical).mkdir(parents=True, exist_ok=True)
        (details / practical / f"{variant.name}.json").write_text(json.dumps(results, indent=1))
    checks = checks_by_id(results)
    lost = {check_id for check_id, entry in checks.items() if entry.get("status") == "failed"}
    missing = {check_id: fragment for check_id, fragment in variant.messages.items() if fragment not in checks.get(check_id, {}).get("output", "")}
    good = lost == set(variant.loses) and not missing
    verdict = "OK" if good else "MISMATCH (a known grader disagreement)" if known else "MISMATCH"
    line = f"{practical}:{variant.name}  expected {names(variant.loses)}  lost {names(lost)}  {verdict}  {seconds:.1f}s"
    if not good:
        for check_id in sorted(lost ^ set(variant.loses)):
            entry = checks.get(check_id, {})
            line += f"\n    {check_id}: {entry.get('status', 'absent')} ({entry.get('score')} / {entry.get('max_score')})\n{indented(entry.get('output', ''))}"
        for check_id, fragment in missing.items():
            line += f"\n    {check_id}: the feedback lacks {fragment!r}"
    return good, line


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("practicals", nargs="*", help=f"of {', '.join(PRACTICALS)} (default: every corpus present)")
    parser.add_argument("--only", nargs="+", default=[], metavar="NAME", help="only the cases of these names")
    parser.add_argument("--details", type=Path, help="keep each case's results.json under this folder")
    args = parser.parse_args()

    cases = [(practical, variant, known.get(variant.name)) for practical, (corpus, known) in corpora(args.practicals).items()
             for variant in corpus if not args.only or variant.name in args.only]
    if not cases:
        raise SystemExit("no cases")
    started = time.perf_counter()
    failures = []
    with tempfile.TemporaryDirectory(prefix="corpus-") as tmp:
        for number, (practical, variant, known) in enumerate(cases, 1):
            work = Path(tmp) / f"{number:03d}"
            work.mkdir()
            good, line = grade_case(practical, variant, work, args.details, known)
            print(f"[{number}/{len(cases)}] {line}", flush=True)
            if not good:
                failures.append(f"{practical}:{variant.name}")
    minutes = (time.perf_counter() - started) / 60
    print(f"\n{len(cases) - len(failures)} of {len(cases)} cases as expected in {minutes:.1f} min", flush=True)
    if failures:
        print("not as expected: " + ", ".join(failures), flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
