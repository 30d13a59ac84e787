"""How the grader runs git on a student's repository. The repository is the student's: where
they can write more than their pushes (its config, its hooks), git must not run what they put
there with the grader's rights. So every such command runs with no hooks (core.hooksPath), no
network or helper transport (protocol.allow=never: a lazy fetch of a "partial clone" would run
a remote helper), no lazy fetching, no system or global config; and a repository whose own
config sets what makes git run a program (a filter driver that `git archive` would call, an
fsmonitor, includes of other files, a partial clone's remote, an ssh command) is refused
before any other git command reads it (`refused_config`)."""
from __future__ import annotations

import os
import subprocess

HARDENED = ("-c", "core.hooksPath=/dev/null", "-c", "protocol.allow=never", "-c", "core.fsmonitor=false")
GIT_TIMEOUT_S = 60  # one git command on a student's repository (a repository that big or that slow is refused as broken)
RISKY_CONFIG = ("filter.", "include.", "includeif.", "core.fsmonitor", "core.sshcommand", "core.gitproxy", "extensions.partialclone", "uploadpack.", "core.askpass", "credential.")


def git_free_environment() -> dict[str, str]:
    """This environment without git's hook variables (GIT_DIR=. and the like), which would
    point every git command of the grader at the student's repository."""
    return {name: value for name, value in os.environ.items() if not name.startswith("GIT_")}


def student_git_environment() -> dict[str, str]:
    """The environment of a git command on a student's repository."""
    return {**git_free_environment(), "GIT_NO_LAZY_FETCH": "1", "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_TERMINAL_PROMPT": "0"}


def student_git(repo: str) -> list[str]:
    """The start of a git command on the student's bare repository `repo`."""
    return ["git", *HARDENED, "--git-dir", repo]


def refused_config(repo: str) -> str | None:
    """Why the grader will not run git on `repo` (its own config sets something that makes git
    run a program), or None."""
    try:
        done = subprocess.run([*student_git(repo), "config", "--local", "--name-only", "--list"], capture_output=True, text=True, env=student_git_environment(), timeout=GIT_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"its git config cannot be read: {exc}"
    risky = sorted({name for name in done.stdout.lower().split() if name.startswith(RISKY_CONFIG)})
    if risky:
        return f"its git config sets {', '.join(risky[:3])}, which would make git run a program: the grader does not read such a repository"
    return None
