"""The environment every git command of the grader runs in."""
from __future__ import annotations

import os


def git_free_environment() -> dict[str, str]:
    """This environment without git's hook variables (GIT_DIR=. and the like), which would
    point every git command of the grader at the student's repository."""
    return {name: value for name, value in os.environ.items() if not name.startswith("GIT_")}
