"""The results store: every grading of every submission, one file each, never overwritten
in place.

Layout (under the store's root):

    <student>/<practical>/<commit>.json     the Gradescope results.json of that commit, with
                                            extra_data.provenance (below)
    <student>/<practical>/history/<commit>.<n>.json   earlier results of it (`grader regrade`)
    queue/<student>--<practical>--<commit>.json   submissions waiting to be graded (or retried)
    inbox/<student>--<practical>--<commit>/       the files of a `grader submit` until graded
    logs/<student>--<practical>--<commit>.log     the grading job's output (and .sbatch script)
    repositories/<student>.json                   a student's repository (`hook install`), for reconciliation
    feedback/<student>--<practical>--<commit>     the feedback shown after the deadline was delivered
    problems/<id>.json                            a problem of the grading that staff must fix (submit/problems.py)

provenance: student, practical, commit, submitted_at (ISO 8601), graded_at, grader version,
spec digest (sha256 of the assignment.yaml it was graded by), template version (the released
template's commit, when known), node, GPUs, attempt, source (where the files came from).
Files are written to a temporary name in the same folder and renamed, so a reader sees a
whole file or none. Results and their folders are the staff's (FILE_MODE, FOLDER_MODE, the
root's group); so are the grading jobs' logs.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from grader.files import write_atomically
from grader.results.gradescope import document_text, provenance_of, read_document, with_provenance

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,127}$")
RESERVED = frozenset({"queue", "inbox", "logs", "repositories", "feedback", "problems", "requests"})  # the store's own folders, never a student
# Results are the staff's: a student reads their own feedback through their repository only.
# Folders 0750 and results 0640, in the group of the store's root (make it the staff's group).
FILE_MODE, FOLDER_MODE = 0o640, 0o750


class StoreError(ValueError):
    """A name that cannot be a folder or file of the store."""


def safe_name(value: str, what: str) -> str:
    """`value` if it can name a folder (no '/', no '..', no hidden file)."""
    if not _NAME.fullmatch(value) or ".." in value:  # fullmatch: "$" alone would let a final newline through
        raise StoreError(f"{what} {value!r} cannot be used as a file name (letters, digits, . _ @ - only)")
    return value


@dataclass(frozen=True)
class Entry:
    """One stored grading."""

    student: str
    practical: str
    commit: str
    document: dict  # the Gradescope results, provenance in extra_data

    @property
    def provenance(self) -> dict:
        return provenance_of(self.document)


class ResultsStore:
    """A folder of results, laid out as the module docstring says."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def path_for(self, student: str, practical: str, commit: str) -> Path:
        if student in RESERVED:
            raise StoreError(f"student {student!r} is a name the results store keeps for itself")
        return self.root / safe_name(student, "student") / safe_name(practical, "practical") / f"{safe_name(commit, 'commit')}.json"

    def has(self, student: str, practical: str, commit: str) -> bool:
        return self.path_for(student, practical, commit).is_file()

    def save(self, document: dict, provenance: dict[str, Any]) -> Path:
        """Store a results document under its provenance (student, practical, commit)."""
        path = self.path_for(provenance["student"], provenance["practical"], provenance["commit"])
        document = with_provenance(document, provenance)
        self.staff_folder(path.parent)
        write_atomically(path, document_text(document), mode=FILE_MODE)
        self._staff_group(path)
        return path

    def staff_folder(self, folder: Path) -> None:
        """Make `folder` (inside the store) and the folders above it, up to the root, the
        staff's: mode 0750 and the root's group."""
        parts = folder.relative_to(self.root).parts
        for depth in range(1, len(parts) + 1):
            current = self.root.joinpath(*parts[:depth])
            current.mkdir(parents=True, exist_ok=True)
            os.chmod(current, FOLDER_MODE)
            self._staff_group(current)

    def _staff_group(self, path: Path) -> None:
        """Give `path` the group of the store's root: the course staff's, set by the admin
        (no change where the grader is not in that group)."""
        try:
            os.chown(path, -1, self.root.stat().st_gid, follow_symlinks=False)
        except PermissionError:
            pass

    def retire(self, student: str, practical: str, commit: str) -> Path:
        """Move the stored result of a commit into its history (<student>/<practical>/history/
        <commit>.<n>.json, n counting up), so that it can be graded again; returns where it went."""
        path = self.path_for(student, practical, commit)
        target = self._next_in_history(path)
        path.rename(target)
        return target

    def replace(self, document: dict, provenance: dict[str, Any]) -> Path:
        """Store `document` in place of the commit's stored result, a copy of which goes into its
        history first (the result is never missing meanwhile: a reader, or reconciliation, sees
        the earlier whole file or the new one); returns where the earlier one went."""
        path = self.path_for(provenance["student"], provenance["practical"], provenance["commit"])
        target = self._next_in_history(path)
        write_atomically(target, path.read_text(encoding="utf-8"), mode=FILE_MODE)
        self._staff_group(target)
        self.save(document, provenance)
        return target

    def _next_in_history(self, path: Path) -> Path:
        """Where the next earlier result of `path` goes in its history folder (made the staff's)."""
        history = path.parent / "history"
        self.staff_folder(history)
        number = 1 + max((int(old.suffixes[-2].lstrip(".")) for old in history.glob(f"{path.stem}.*.json") if old.suffixes[-2].lstrip(".").isdigit()), default=0)
        return history / f"{path.stem}.{number}.json"

    def history(self, student: str, practical: str, commit: str) -> list[Path]:
        """The earlier results of a commit, oldest first."""
        path = self.path_for(student, practical, commit)
        return sorted((path.parent / "history").glob(f"{path.stem}.*.json"), key=lambda old: int(old.suffixes[-2].lstrip(".")))

    def graded(self) -> Iterator[tuple[str, str, str]]:
        """(student, practical, commit) of every stored result, without reading them."""
        for path in sorted(self.root.glob("*/*/*.json")):
            if path.parent.parent.name not in RESERVED:
                yield path.parent.parent.name, path.parent.name, path.stem

    def entry(self, student: str, practical: str, commit: str) -> Entry | None:
        """The stored grading of a commit (None when it cannot be read)."""
        document = read_document(self.path_for(student, practical, commit))
        return None if document is None else Entry(student=student, practical=practical, commit=commit, document=document)

    def entries(self) -> Iterator[Entry]:
        """Every stored grading (files that cannot be read are passed over)."""
        for student, practical, commit in self.graded():
            try:
                found = self.entry(student, practical, commit)
            except StoreError:
                continue
            if found is not None:
                yield found
