"""The independent corpora (tests/corpus_p4.py, corpus_p5.py, corpus_p6.py, corpus_p10.py),
written from the requirements without reading the checks: each case must lose exactly the
checks its requirement says it must. The speed checks are left out (grade_in_process defers
them), so a verdict never depends on the machine's load; p5's real-GPU checks are deferred here.
The suite grades a sample of each corpus, spread evenly over it; bench/corpus.py grades every
case (a p6 or p10 grading takes 6-9 s here, a p4 or p5 one 3-6 s).

Cases where the grader disagrees with the requirement are kept with the requirement's
expectation and marked as strict xfails (the corpus's DISAGREEMENTS), so a fix of the grader
shows."""
from __future__ import annotations

from pathlib import Path

import pytest

import corpus_p4
import corpus_p5
import corpus_p6
import corpus_p10
from helpers import assert_loses_exactly, grade_in_process
from variants import Variant

pytestmark = pytest.mark.slow

CORPORA = {"p4": corpus_p4, "p5": corpus_p5, "p6": corpus_p6, "p10": corpus_p10}

# Graded in the suite, per practical: buggy cases (cheats among them), correct ones, spread
# evenly over the corpus; and the cases that once found a defect (the p4 corpus's first run
# found two: a whole-batch output through model.forward(x), and layer 1 moved to cuda:1).
SAMPLE = {"p4": (9, 0, 4), "p5": (9, 0, 4), "p6": (3, 1, 2), "p10": (3, 1, 2)}  # (buggy, cheats, correct)
FOUND_DEFECTS = ("p4:whole_batch_through_forward_method_cheat", "p4:layer1_moved_to_cuda1_inside_forward_cheat")


def spread(cases: tuple[Variant, ...], count: int) -> list[Variant]:
    """`count` cases (or all, when fewer) at evenly spaced places of `cases`."""
    return [cases[i * len(cases) // count] for i in range(count)] if len(cases) > count else list(cases)


def _cases() -> list:
    cases = []
    for practical, module in CORPORA.items():
        disagreements = getattr(module, "DISAGREEMENTS", {})
        buggy, cheats, correct = SAMPLE[practical]
        failing = [v for v in module.CORPUS if v.loses]
        chosen = spread(tuple(v for v in failing if not cheats or not v.name.endswith("_cheat")), buggy)
        chosen += spread(tuple(v for v in failing if v.name.endswith("_cheat")), cheats)
        chosen += spread(tuple(v for v in module.CORPUS if not v.loses), correct)
        chosen += [v for v in module.CORPUS if f"{practical}:{v.name}" in FOUND_DEFECTS and v not in chosen]
        for variant in chosen:
            marks = [pytest.mark.xfail(reason=f"grader defect: {disagreements[variant.name]}", strict=True)] if variant.name in disagreements else []
            cases.append(pytest.param(practical, variant, id=f"{practical}:{variant.name}", marks=marks))
    return cases


def test_corpus_names_are_unique_and_large_enough() -> None:
    for corpus in (module.CORPUS for module in CORPORA.values()):
        assert len({v.name for v in corpus}) == len(corpus)
        assert sum(1 for v in corpus if v.loses) >= 20
        assert sum(1 for v in corpus if not v.loses) >= 10


@pytest.mark.parametrize(("practical", "variant"), _cases())
def test_case_loses_exactly_its_checks(practical: str, variant: Variant, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    extra = ["--timeout", str(variant.timeout_s)] if variant.timeout_s else []
    results = grade_in_process(practical, variant.write(tmp_path / variant.name, practical), tmp_path / "r.json", *extra)
    capsys.readouterr()
    assert_loses_exactly(results, variant.loses, variant.messages)
