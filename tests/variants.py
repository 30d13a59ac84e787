"""Buggy versions of reference solutions, made by exact text edits of the solution's files so
they follow the solution when it changes (an edit that no longer matches fails loudly)."""
from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Variant:
    name: str
    edits: tuple[tuple[str, str, str], ...]  # (file, old text, new text); old text '' adds a new file
    loses: frozenset[str]  # the checks it must fail; it must pass all the others
    messages: dict = field(default_factory=dict)  # check id -> a fragment its feedback must contain
    timeout_s: float | None = None  # a shorter run timeout for variants that hang

    def write(self, folder: Path, practical: str) -> Path:
        """The solution of `practical` with the edits applied, in `folder`."""
        shutil.copytree(ROOT / "solutions" / practical, folder)
        for name, old, new in self.edits:
            path = folder / name
            if name.endswith(".ipynb"):
                self._edit_notebook(path, old, new)
                continue
            if not old and not path.exists():  # a file of its own
                path.write_text(new)
                continue
            text = path.read_text()
            assert text.count(old) == 1, f"variant {self.name}: {old!r} is not exactly once in {name}"
            path.write_text(text.replace(old, new))
        return folder

    def _edit_notebook(self, path: Path, old: str, new: str) -> None:
        """Edit the one cell whose source holds `old` (the file's JSON escapes the text); an
        `old` of the form 'tags:N' replaces the tags of cell N (1-based) with `new`, comma-separated."""
        import nbformat

        notebook = nbformat.read(path, as_version=4)
        if old.startswith("tags:"):
            notebook.cells[int(old[5:]) - 1].metadata["tags"] = [t for t in new.split(",") if t]
        else:
            cells = [c for c in notebook.cells if old in c.source]
            assert len(cells) == 1 and cells[0].source.count(old) == 1, f"variant {self.name}: {old!r} is not exactly once in {path.name}"
            cells[0].source = cells[0].source.replace(old, new)
        nbformat.write(notebook, path)
