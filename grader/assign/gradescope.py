"""`python -m grader gradescope PRACTICAL --out autograder.zip`: an autograder for Gradescope.

Gradescope unpacks the zip into /autograder/source on its Ubuntu image and runs `setup.sh`
there once, as root, when it builds the image; then, for every submission, it runs
`/autograder/run_autograder` with the student's files in /autograder/submission and reads
/autograder/results/results.json.

  setup.sh          apt-get: Python, bubblewrap, util-linux; then scripts/setup.sh (.venv with
                    torch's CPU build and the grader, as on any machine)
  run_autograder    `grader grade PRACTICAL` on the submission (the files themselves, or a
                    repository holding assignments/PRACTICAL/); results.json is written even
                    when grading fails
  the rest          the grader, the practical's released folder and its reference solution
                    (with the solutions its runs name): the zip is the staff's, never a student's

The runs that need GPUs run on virtual GPUs as everywhere without CUDA, and the checks that
need real GPUs are deferred. The sandbox is used where the image allows unprivileged user
namespaces; where it does not, the submission runs as an unprivileged uid with the autograder's
files closed to it (grader/run/sandbox.py, the uid tier), and the results name the tier and say
why (`extra_data.environment.isolation`).
"""
from __future__ import annotations

import io
import zipfile
from pathlib import Path

from grader.assign.release import SKIPPED_PARTS
from grader.course import Course, load_practical

RUN_AUTOGRADER = """#!/usr/bin/env bash
# Gradescope runs this for every submission: the student's files are in /autograder/submission;
# the results go to /autograder/results/results.json (written even when grading fails).
set -uo pipefail
root="${{AUTOGRADER_ROOT:-/autograder}}"
python="${{PYTHON:-$root/source/.venv/bin/python}}"
submission="$root/submission"
# an upload of the whole repository (GitHub, or a zip of it) rather than the files themselves
if [ -d "$submission/assignments/{practical}" ]; then submission="$submission/assignments/{practical}"; fi
mkdir -p "$root/results"
# the submission runs as an unprivileged uid (bubblewrap's or the uid tier's), which must reach the
# Python environment in source/.venv: the folders on the way open for passing through only (the
# grader closes source/'s own entries to other users before the submission runs)
chmod o+x "$root" "$root/source" 2>/dev/null || true
cd "$root/source" && "$python" -m grader grade {practical} "$submission" --results "$root/results/results.json" --no-views
"""

SETUP = """#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder's image (Ubuntu).
set -euo pipefail
cd "$(dirname "$0")"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q >/dev/null
apt-get install -y -q python3 python3-venv python3-pip bubblewrap util-linux >/dev/null
bash scripts/setup.sh
"""


def gradescope_files(course: Course, practical: str) -> dict[str, bytes]:
    """The autograder's files (path in the zip -> content)."""
    spec = load_practical(course, practical).assignment  # a bad spec stops here, named
    solutions = sorted({practical, *(run.solution for run in spec.runs if run.solution)})
    files: dict[str, bytes] = {"setup.sh": SETUP.encode(), "run_autograder": RUN_AUTOGRADER.format(practical=practical).encode()}
    folders = [course.root / "grader", course.template_dir(practical), *(course.solution_dir(name) for name in solutions)]
    for folder in folders:
        for path in sorted(folder.rglob("*")):
            relative = path.relative_to(course.root)
            if path.is_file() and not SKIPPED_PARTS.intersection(relative.parts) and path.suffix != ".pyc":
                files[relative.as_posix()] = path.read_bytes()
    for name in ("pyproject.toml", "README.md", "scripts/setup.sh", f"calibration/{practical}.yaml"):
        if (course.root / name).is_file():
            files[name] = (course.root / name).read_bytes()
    files["course.yaml"] = f"# The practical this autograder grades.\ncourse: {course.title}\npracticals: [{practical}]\n".encode()
    return files


def write_zip(files: dict[str, bytes], out: Path) -> None:
    """The zip Gradescope takes: the scripts executable, fixed timestamps (the same files make
    the same zip)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, content in sorted(files.items()):
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            executable = name in ("setup.sh", "run_autograder") or name.endswith(".sh")
            info.external_attr = (0o100755 if executable else 0o100644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, content)
    out.write_bytes(buffer.getvalue())
