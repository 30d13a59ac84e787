"""Helpers shared by the tests: running the grader's CLI and reading its results."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = json.loads((Path(__file__).parent / "gradescope_results.schema.json").read_text())


def run_cli(*args: str, cwd: Path = ROOT, timeout: float = 600) -> subprocess.CompletedProcess:
    """`python -m grader ARGS` as a user would run it, in its own process."""
    return subprocess.run([sys.executable, "-m", "grader", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)


def load_results(path: Path) -> dict:
    return json.loads(path.read_text())


def checks_by_id(results: dict) -> dict[str, dict]:
    """Gradescope test entries keyed by check id (the first tag)."""
    return {t["tags"][0]: t for t in results["tests"] if t.get("tags")}
