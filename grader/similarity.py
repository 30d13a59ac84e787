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
import os
import stat
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path

from grader.collect import Chosen
from grader.course import Course, CourseError, load_practical
from grader.run.tree import open_beneath
from grader.spec import SpecError
from grader.submit.gitenv import GIT_TIMEOUT_S, refused_config, student_git, student_git_environment

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


def _cell_source(cell: object) -> str:
    """A notebook cell's source, whatever a hand-edited notebook holds there."""
    source = cell.get("source", "") if isinstance(cell, dict) else ""
    if isinstance(source, list):
        return "".join(part for part in source if isinstance(part, str))
    return source if isinstance(source, str) else ""


def code_of(name: str, raw: bytes) -> str:
    """The code of a script, line ends made plain: a notebook's code cells joined (a notebook
    that is not one: its text), anything else as text."""
    text = raw.decode("utf-8", errors="replace").replace("\r\n", "\n")
    if not name.endswith(".ipynb"):
        return text
    try:
        cells = json.loads(text).get("cells", [])
    except (ValueError, AttributeError, RecursionError):
        return text
    if not isinstance(cells, list):
        return text
    return "\n\n".join(_cell_source(c) for c in cells if isinstance(c, dict) and c.get("cell_type") == "code")


def script_bytes(chosen: Chosen, script: str, inbox: Path) -> bytes:
    """The graded commit's script (OSError why it cannot be had)."""
    source = chosen.entry.provenance.get("source") or {}
    path = f"assignments/{chosen.entry.practical}/{script}"
    if isinstance(source, dict) and source.get("kind") == "git":
        repo, blob = str(source.get("repo")), f"{chosen.entry.commit}:{path}"
        refused = refused_config(repo)
        if refused:
            raise OSError(refused)
        size = subprocess.run([*student_git(repo), "cat-file", "-s", blob], capture_output=True, text=True, env=student_git_environment(), timeout=GIT_TIMEOUT_S)
        if size.returncode != 0 or not size.stdout.strip().isdigit():
            raise OSError(size.stderr.strip()[:200] or "git cannot read it")
        if int(size.stdout) > MAX_SCRIPT_BYTES:
            return b"\0" * (MAX_SCRIPT_BYTES + 1)  # too large to compare: its size says so
        done = subprocess.run([*student_git(repo), "cat-file", "blob", blob], capture_output=True, env=student_git_environment(), timeout=GIT_TIMEOUT_S)
        if done.returncode != 0:
            raise OSError(done.stderr.decode(errors="replace").strip()[:200] or "git cannot read it")
        return done.stdout[: MAX_SCRIPT_BYTES + 1]
    folder = inbox / f"{chosen.entry.student}--{chosen.entry.practical}--{chosen.entry.commit}"
    fd = open_beneath(folder, script)  # kept only while it waits to be graded; no link is followed
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise OSError(f"{script} is not a regular file")
        return handle.read(MAX_SCRIPT_BYTES + 1)


def _fingerprint(code: str, boilerplate: list | None):
    from copydetect import CodeFingerprint  # imported here: only staff commands need it

    return CodeFingerprint("submission.py", K_GRAM, WINDOW, boilerplate=boilerplate, fp=io.StringIO(code))


def compare(practical: str, scripts: dict[str, bytes], template: str, name: str, threshold: float) -> tuple[Pair, ...]:
    """The pairs among `scripts` (student -> bytes) at least `threshold` alike, most alike first."""
    from copydetect import compare_files

    template = template.replace("\r\n", "\n")
    boilerplate = list(_fingerprint(template, None).hashes) if template.strip() else []
    prints = {}
    for student, raw in scripts.items():
        code = code_of(name, raw)
        if code.strip() == template.strip():
            continue  # the template itself: alike to every other untouched one, and to no one's work
        fingerprint = _fingerprint(code, boilerplate)
        if len(fingerprint.hashes):  # nothing of its own beyond the template (empty, a comment): no one's work either
            prints[student] = (raw, fingerprint)
    pairs = []
    for (first, (raw1, print1)), (second, (raw2, print2)) in itertools.combinations(sorted(prints.items()), 2):
        _, (share1, share2), _ = compare_files(print1, print2)
        alike = float(max(share1, share2))
        identical = raw1 == raw2
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
            except (OSError, subprocess.SubprocessError, ValueError) as exc:
                left_out.append(f"{practical} {student}: the script cannot be read ({exc})")
                continue
            if len(raw) > MAX_SCRIPT_BYTES:
                left_out.append(f"{practical} {student}: the script is larger than {MAX_SCRIPT_BYTES >> 20} MiB")
                continue
            scripts[student] = raw
        pairs += compare(practical, scripts, templates.get(practical, ""), script, threshold)
    return Findings(tuple(pairs), tuple(left_out))


def similar_in_course(course: Course, table: dict[str, dict[str, Chosen]], inbox: Path, threshold: float = 0.8) -> Findings:
    """`find_similar` for the course's practicals: each one's script and released template (a
    practical that does not load is left out, with a note)."""
    scripts, templates, unreadable = {}, {}, []
    for practical in sorted({p for row in table.values() for p in row}):
        try:
            script = load_practical(course, practical).assignment.script
        except (CourseError, SpecError) as exc:
            unreadable.append(f"{practical}: not compared ({exc})")
            continue
        scripts[practical] = script
        template = course.template_dir(practical) / script
        templates[practical] = code_of(script, template.read_bytes()) if template.is_file() else ""
    found = find_similar(table, scripts, templates, inbox, threshold)
    return replace(found, left_out=(*unreadable, *found.left_out))
