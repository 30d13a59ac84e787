"""Identical and near-identical submissions, per practical (`grader similarity`, and the class
report's last table).

Each student's counted submission (grader.collect) of a practical is fingerprinted with
copydetect (k-grams of the tokenised code, winnowed; names and literals are normalised, so
renamed variables still match), with the released template's fingerprints removed as
boilerplate: the lines every student was given never make two submissions alike. A pair is
flagged when the shared fingerprints make up at least `threshold` of either submission's own
code; "identical" when the two scripts are the same bytes. The script is the practical's
`script` from its spec; a notebook's code cells count, not its outputs.

The scripts are read from the students' repositories (the graded commit); a submission that
came as a folder is looked for in the store's inbox and otherwise left out, with a note.
"""
from __future__ import annotations

import io
import itertools
import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

from grader.collect import Chosen
from grader.submit.gitenv import git_free_environment

MAX_SCRIPT_BYTES = 1 << 20  # a script larger than this is not compared (no one writes 1 MiB of p6)
K_GRAM, WINDOW = 25, 1  # copydetect's defaults for code of this size


@dataclass(frozen=True)
class Pair:
    """Two students whose submissions of one practical are alike."""

    practical: str
    first: str
    second: str
    similarity: float  # the larger of the two shares of shared code, 0..1
    identical: bool

    @property
    def describe(self) -> str:
        return "identical" if self.identical else f"{self.similarity:.0%} alike"


@dataclass(frozen=True)
class Findings:
    pairs: tuple[Pair, ...]
    left_out: tuple[str, ...]  # "p6 carol: the script cannot be read (…)"


def code_of(name: str, raw: bytes) -> str:
    """The code of a script: a notebook's code cells joined, anything else as text."""
    text = raw.decode("utf-8", errors="replace")
    if not name.endswith(".ipynb"):
        return text
    try:
        cells = json.loads(text).get("cells", [])
        return "\n\n".join("".join(c.get("source", "")) if isinstance(c.get("source"), list) else str(c.get("source", "")) for c in cells if isinstance(c, dict) and c.get("cell_type") == "code")
    except (ValueError, AttributeError):
        return text


def script_bytes(chosen: Chosen, script: str, inbox: Path) -> bytes:
    """The graded commit's script (OSError why it cannot be had)."""
    source = chosen.entry.provenance.get("source") or {}
    path = f"assignments/{chosen.entry.practical}/{script}"
    if isinstance(source, dict) and source.get("kind") == "git":
        done = subprocess.run(["git", "--git-dir", str(source.get("repo")), "cat-file", "blob", f"{chosen.entry.commit}:{path}"], capture_output=True, env=git_free_environment(), timeout=60)
        if done.returncode != 0:
            raise OSError(done.stderr.decode(errors="replace").strip()[:200] or "git cannot read it")
        return done.stdout[: MAX_SCRIPT_BYTES + 1]
    folder = inbox / f"{chosen.entry.student}--{chosen.entry.practical}--{chosen.entry.commit}"
    with open(folder / script, "rb") as handle:  # kept only while it waits to be graded
        return handle.read(MAX_SCRIPT_BYTES + 1)


def _fingerprint(code: str, boilerplate: list | None):
    from copydetect import CodeFingerprint  # imported here: only staff commands need it

    return CodeFingerprint("submission.py", K_GRAM, WINDOW, boilerplate=boilerplate, fp=io.StringIO(code))


def compare(practical: str, scripts: dict[str, bytes], template: str, name: str, threshold: float) -> tuple[Pair, ...]:
    """The pairs among `scripts` (student -> bytes) at least `threshold` alike, most alike first."""
    from copydetect import compare_files

    boilerplate = list(_fingerprint(template, None).hashes) if template.strip() else []
    prints = {}
    for student, raw in scripts.items():
        code = code_of(name, raw)
        if code.strip() == template.strip():
            continue  # the template itself: alike to every other untouched one, and to no one's work
        prints[student] = (raw, _fingerprint(code, boilerplate))
    pairs = []
    for (first, (raw1, print1)), (second, (raw2, print2)) in itertools.combinations(sorted(prints.items()), 2):
        identical = raw1 == raw2
        if len(print1.hashes) and len(print2.hashes):
            _, (share1, share2), _ = compare_files(print1, print2)
            alike = float(max(share1, share2))
        else:
            alike = 1.0 if identical else 0.0
        if identical or alike >= threshold:
            pairs.append(Pair(practical, first, second, 1.0 if identical else alike, identical))
    return tuple(sorted(pairs, key=lambda p: (-p.similarity, p.first, p.second)))


def find_similar(table: dict[str, dict[str, Chosen]], scripts_of: dict[str, str], templates: dict[str, str], inbox: Path, threshold: float = 0.8) -> Findings:
    """Alike pairs per practical among the counted submissions of `table` (grader.collect);
    `scripts_of`: practical -> its script's name; `templates`: practical -> the template's code."""
    pairs: list[Pair] = []
    left_out: list[str] = []
    for practical, script in sorted(scripts_of.items(), key=lambda item: (len(item[0]), item[0])):
        scripts = {}
        for student, row in sorted(table.items()):
            chosen = row.get(practical)
            if chosen is None:
                continue
            try:
                raw = script_bytes(chosen, script, inbox)
            except (OSError, subprocess.SubprocessError) as exc:
                left_out.append(f"{practical} {student}: the script cannot be read ({exc})")
                continue
            if len(raw) > MAX_SCRIPT_BYTES:
                left_out.append(f"{practical} {student}: the script is larger than {MAX_SCRIPT_BYTES >> 20} MiB")
                continue
            scripts[student] = raw
        pairs += compare(practical, scripts, templates.get(practical, ""), script, threshold)
    return Findings(tuple(pairs), tuple(left_out))
