"""The sandbox itself, and what happens where there is none."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from grader.run import procs
from grader.run.sandbox import Limits, Sandbox, open_sandbox
from helpers import ROOT, load_results, run_cli

NO_BWRAP = {**os.environ, "PATH": "/nonexistent"}  # bwrap (and every other tool) out of reach


def sandbox_or_skip() -> Sandbox:
    sandbox = open_sandbox(Limits(cpu_s=60))
    if isinstance(sandbox, str):
        pytest.skip(f"no sandbox here: {sandbox}")
    return sandbox


def test_the_command_isolates_limits_and_drops_privileges() -> None:
    sandbox = Sandbox(bwrap="/usr/bin/bwrap", uid=61234, drop=True, python="/venv/bin/python", read_only=("/venv",), devices=("/dev/nvidia0", "/dev/nvidiactl"), limits=Limits(cpu_s=99, memory_mb=100))
    command = sandbox.command(["/venv/bin/python", "-c", "pass"], Path("/tmp/grading"))
    text = " ".join(command)
    assert command[0] == "prlimit" and "--cpu=99" in command and f"--as={100 << 20}" in command and "--core=0" in command
    assert "setpriv --reuid=61234 --regid=61234 --clear-groups --inh-caps=-all --bounding-set=-all" in text
    assert "--unshare-all --unshare-user --disable-userns --die-with-parent --new-session" in text
    assert "--ro-bind /venv /venv" in text and "--bind /tmp/grading /tmp/grading --ro-bind /tmp/grading/lib /tmp/grading/lib" in text
    assert "--dev-bind /dev/nvidia0 /dev/nvidia0 --dev-bind /dev/nvidiactl /dev/nvidiactl" in text
    assert command[-3:] == ["/venv/bin/python", "-c", "pass"]
    assert "--remount-ro /" in text and "/work" not in text
    assert "--bind /tmp/grading/tmp /tmp" in text and "--bind /tmp/grading/shm /dev/shm" in text and "--tmpfs" not in text


def test_concurrent_sandboxes_get_distinct_uids() -> None:
    first = sandbox_or_skip()
    second = sandbox_or_skip()
    try:
        assert first.uid != second.uid or not first.drop
    finally:
        first.release()
        second.release()


def test_a_uid_goes_back_to_the_pool_only_when_none_of_its_processes_is_left() -> None:
    sandbox = sandbox_or_skip()
    if not sandbox.drop:
        sandbox.release()
        pytest.skip("the grader is not root: the sandbox runs as the grader's own uid")
    straggler = subprocess.Popen(["setpriv", f"--reuid={sandbox.uid}", f"--regid={sandbox.uid}", "--clear-groups", "sleep", "600"], start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while procs.pids_of_uids(range(sandbox.uid, sandbox.uid + 1)) != [straggler.pid] and time.monotonic() < deadline:
            time.sleep(0.02)
        assert procs.pids_of_uids(range(sandbox.uid, sandbox.uid + 1)) == [straggler.pid]
        sandbox.release()
        assert straggler.wait(timeout=5) == -signal.SIGKILL
    finally:
        straggler.kill()
        straggler.wait()


def test_inside_only_the_work_folder_is_writable_and_the_grader_is_absent() -> None:
    sandbox = sandbox_or_skip()
    root = sandbox.new_root("grader-test-")  # reachable by the sandbox's user, unlike pytest's
    try:
        sandbox.prepare_root(root)
        work = root / "work"
        work.mkdir()
        if sandbox.owner is not None:
            os.chown(work, sandbox.owner, sandbox.owner)
        script = (
            "import os\n"
            f"open('{work}/ok', 'w').write('x')\n"
            "for path in ('" + str(root / "lib" / "grader" / "x") + "', '/usr/x', '/etc/x'):\n"
            "    try:\n        open(path, 'w')\n        print('WROTE', path)\n    except OSError:\n        pass\n"
            f"print('grader visible' if os.path.exists('{ROOT}/grader/checks') else 'grader absent')\n"
            "import grader.probe\nprint(os.getuid())\n"
        )
        done = subprocess.run(sandbox.command([sandbox.python, "-c", script], root), capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root / "lib")})
        assert done.returncode == 0, done.stderr
        lines = done.stdout.split()
        assert "WROTE" not in done.stdout and "grader absent" in done.stdout
        assert (work / "ok").read_text() == "x"
        if sandbox.drop:
            assert int(lines[-1]) == sandbox.uid
    finally:
        sandbox.release()
        shutil.rmtree(root, ignore_errors=True)


def test_the_grading_folder_is_a_capped_tmpfs_until_the_sandbox_is_released() -> None:
    sandbox = open_sandbox(Limits(cpu_s=60, disk_mb=64, inodes=1000))
    if isinstance(sandbox, str) or not sandbox.drop:
        pytest.skip(f"only root mounts a tmpfs: {sandbox if isinstance(sandbox, str) else 'not root'}")
    root = sandbox.new_root("grader-test-")
    try:
        sandbox.prepare_root(root)
        assert sandbox.mounts == (root,) and "64 MiB per job in all (tmpfs)" in sandbox.describe()
        info = os.statvfs(root)
        assert info.f_blocks * info.f_frsize == 64 << 20 and info.f_files == 1000
        assert [(p.name, oct(p.stat().st_mode & 0o7777)) for p in sorted(root.iterdir()) if p.name != "lib"] == [("shm", "0o1777"), ("tmp", "0o1777")]
        sandbox.release()
        assert sandbox.mounts == () and os.statvfs(root).f_blocks != info.f_blocks
    finally:
        sandbox.release()
        shutil.rmtree(root, ignore_errors=True)


def test_a_grading_folder_the_sandbox_cannot_reach_is_refused_clearly(tmp_path: Path) -> None:
    sandbox = sandbox_or_skip()
    try:
        if not sandbox.drop:
            pytest.skip("only root drops to another uid")
        with pytest.raises(ValueError, match="must be reachable by the sandbox's user, but .* is not searchable by others"):
            sandbox.prepare_root(tmp_path)
    finally:
        sandbox.release()


def test_official_grading_refuses_to_run_without_a_sandbox(tmp_path: Path) -> None:
    results = tmp_path / "r.json"
    done = run_cli("grade", "p6", "solutions/p6", "--official", "--results", str(results), env=NO_BWRAP)
    assert done.returncode == 1
    output = load_results(results)["tests"][0]["output"]
    assert "official grading runs student code only in the sandbox, and there is none here: bubblewrap (bwrap) is not installed" in output


def test_a_spec_can_require_the_sandbox(tmp_path: Path) -> None:
    course = tmp_path / "course"
    shutil.copytree(ROOT / "assignments" / "p6", course / "assignments" / "p6")
    (course / "course.yaml").write_text("course: a copy\npracticals: [p6]\n")
    spec = course / "assignments" / "p6" / "assignment.yaml"
    spec.write_text(spec.read_text() + "sandbox: required\n")
    done = run_cli("--course-root", str(course), "grade", "p6", str(ROOT / "solutions" / "p6"), "--results", str(tmp_path / "r.json"), env=NO_BWRAP)
    assert done.returncode == 1 and "official grading runs student code only in the sandbox" in done.stdout


@pytest.mark.slow
def test_the_self_check_without_a_sandbox_warns_once_and_runs(tmp_path: Path) -> None:
    done = run_cli("check", "p6", "solutions/p6", "--world-size", "2", "--results", str(tmp_path / "r.json"), env=NO_BWRAP)
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if line.startswith("warning:")]
    assert warnings == ["warning: no sandbox (bubblewrap (bwrap) is not installed; on Debian/Ubuntu: apt-get install bubblewrap); the code runs with your own rights — fine for a self-check, refused by official grading"]
    results = load_results(tmp_path / "r.json")
    assert results["score"] == 14  # every public check (params_sync is hidden until the due date)
    assert results["extra_data"]["environment"]["isolation"].startswith("none: the submission ran with the grader's rights")
