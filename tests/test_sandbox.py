"""The sandbox itself, and what happens where there is none."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from grader.run import procs
from grader.run.sandbox import Limits, Sandbox, open_sandbox
from helpers import ROOT, load_results, run_cli

if TYPE_CHECKING:
    from grader.run.job import JobSpec

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
    assert command[0] == "prlimit" and "--cpu=99" in command and "--core=0" in command
    assert not any(part.startswith("--as=") for part in command)  # CUDA reserves more address space than it uses
    assert f"--as={100 << 20}" in replace(sandbox, devices=()).command(["/venv/bin/python"], Path("/tmp/grading"))
    assert "setpriv --reuid=61234 --regid=61234 --clear-groups --inh-caps=-all --bounding-set=-all" in text
    assert "--unshare-all --unshare-user --disable-userns --die-with-parent --new-session" in text
    assert "--ro-bind /venv /venv" in text and "--bind /tmp/grading /tmp/grading --ro-bind /tmp/grading/lib /tmp/grading/lib" in text
    assert "--dev-bind /dev/nvidia0 /dev/nvidia0 --dev-bind /dev/nvidiactl /dev/nvidiactl" in text
    assert command[-3:] == ["/venv/bin/python", "-c", "pass"]
    assert "--remount-ro /" in text and "/work" not in text
    assert "--bind /tmp/grading/tmp /tmp" in text and "--bind /tmp/grading/shm /dev/shm" in text and "--tmpfs" not in text


def test_device_files_and_folders_of_them_are_passed_through() -> None:
    """On GPU nodes /dev/nvidia* holds a folder (nvidia-caps): binding it needs a writable /dev
    (measured on an H100 node: "Can't mkdir /dev/nvidia-caps: Read-only file system")."""
    folders = [path for path in ("/dev/cpu", "/dev/net", "/dev/pts") if os.path.isdir(path)][:1]
    sandbox = sandbox_or_skip()
    try:
        passed = replace(sandbox, devices=("/dev/full", *folders))
        root = passed.new_root("grader-test-")
        try:
            passed.prepare_root(root)
            probe = "import os, sys\nfor path in sys.argv[1:]:\n    print(path, os.path.exists(path))\nopen('/dev/x', 'w')\n"
            done = subprocess.run(passed.command([passed.python, "-c", probe, "/dev/full", *folders], root), capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
            assert all(f"{path} True" in done.stdout for path in ("/dev/full", *folders)), done.stderr
            assert "Read-only file system" in done.stderr  # /dev is still read-only once they are bound
        finally:
            shutil.rmtree(root, ignore_errors=True)
    finally:
        sandbox.release()


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


WHERE_AM_I = """import getpass, json, os
print(json.dumps({"uid": os.getuid(), "user": getpass.getuser(), "pid_ns": os.readlink("/proc/self/ns/pid"), "cwd": os.getcwd(), "others": OTHERS}))
"""

ESCAPE = """import os, sys
LINK = '''
import os, sys, time
depth = int(sys.argv[1])
if depth > 0 and os.fork() == 0:
    os.setsid()
    os.execve(sys.executable, [sys.executable, "-c", sys.argv[2], str(depth - 1), sys.argv[2]], {})
if depth == 0:
    open("chain-complete", "w").close()
time.sleep(300)
'''
if os.fork() == 0:  # a chain of 40 live processes, each a new program with an empty environment in a session of its own
    os.execve(sys.executable, [sys.executable, "-c", LINK, "40", LINK], {})
import time
while not os.path.exists("chain-complete"):
    time.sleep(0.05)
"""


def _job(folder: Path, name: str, source: str, private: bool = False) -> "JobSpec":
    from grader.run.job import JobSpec, Layout

    folder.mkdir(parents=True)
    (folder / "main.py").write_text(source)
    return JobSpec(name=name, submission=folder, script="main.py", argv=(), layout=Layout(1, 1), timeout_s=60, private=private)


def test_the_reference_runs_in_a_domain_of_its_own(tmp_path: Path) -> None:
    """A private job (the reference solution) has another uid, another pid namespace and another
    grading folder than the submission's jobs, and neither can see the other's folder."""
    import json

    from grader.run.local import LocalRunner

    sandbox = sandbox_or_skip()
    root = sandbox.new_root("grader-test-")
    try:
        with LocalRunner(root, sandbox=sandbox) as runner:
            own = runner.run(_job(tmp_path / "own", "own", WHERE_AM_I.replace("OTHERS", "sorted(os.listdir(os.path.dirname(os.path.dirname(os.getcwd()))))")))
            seen = json.loads(own.ranks[0].stdout_tail)
            probe = WHERE_AM_I.replace("OTHERS", f"os.path.exists({str(root)!r})")
            trusted = json.loads(runner.run(_job(tmp_path / "ref", "ref", probe, private=True)).ranks[0].stdout_tail)
        assert trusted["uid"] != seen["uid"] or not sandbox.drop
        assert seen["user"] == trusted["user"] == "student"  # a uid without a passwd entry still has a name (torch asks for it)
        assert trusted["pid_ns"] != seen["pid_ns"]
        assert not trusted["cwd"].startswith(str(root) + "/") and trusted["others"] is False
        assert not any("trusted" in name for name in seen["others"])  # the grading folders beside its own are not in its view
    finally:
        sandbox.release()
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize("cgroups", [True, False], ids=["cgroup per job", "launcher restarted per job"])
def test_a_process_that_hid_from_its_job_ends_with_the_job(cgroups: bool, tmp_path: Path) -> None:
    """A chain of processes deeper than any walk of the tree, each re-executed with an empty
    environment in a session of its own, is gone when the job ends: killed with the job's
    cgroup, or with the launcher's pid namespace where there are no cgroups."""
    from grader.run.local import LocalRunner, LocalRunnerOptions

    sandbox = sandbox_or_skip()
    if not sandbox.drop:
        sandbox.release()
        pytest.skip("the grader is not root: no uid of its own to look for")
    root = sandbox.new_root("grader-test-")
    try:
        with LocalRunner(root, LocalRunnerOptions(cgroups=cgroups), sandbox=sandbox) as runner:
            assert ("each job in a cgroup of its own" in runner.isolation) is cgroups
            result = runner.run(_job(tmp_path / "escape", "escape", ESCAPE))
            assert result.ranks[0].status == "exit:0" and result.leftovers >= 1
            left = [pid for pid in procs.pids_of_uids(range(sandbox.uid, sandbox.uid + 1)) if "time.sleep(300)" in procs.cmdline(pid)]
            assert left == []
    finally:
        sandbox.release()
        shutil.rmtree(root, ignore_errors=True)


def test_the_seccomp_program_refuses_tracing_and_keyrings_on_known_machines_only() -> None:
    from grader.run import seccomp

    assert seccomp.program("riscv64") is None
    for machine in ("x86_64", "aarch64"):
        rules = seccomp.program(machine)
        calls = len(seccomp._REFUSED)
        assert rules is not None and len(rules) == 8 * (3 + calls + (machine == "x86_64") + 2)  # load, check arch, load, [x32], calls, allow, refuse
    command = Sandbox(bwrap="/usr/bin/bwrap", uid=1, drop=True, python="/p", read_only=(), devices=()).command(["/p"], Path("/tmp/g"), seccomp_fd=7)
    assert "--seccomp 7" in " ".join(command) and "--as-pid-1" in command


def test_a_python_environment_under_tmp_is_refused_with_the_reason() -> None:
    """The sandbox's /tmp is its own: a venv under the host's /tmp would be missing inside, and
    bwrap would only say 'execvp … No such file or directory'."""
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    problem = open_sandbox(python="/tmp/a-checkout/.venv/bin/python")
    assert isinstance(problem, str) and "is under /tmp or /dev/shm, which the sandbox replaces by its own" in problem, problem


# --- the unprivileged-uid tier: where bubblewrap cannot run -------------------------------------

@pytest.fixture
def uid_tier(monkeypatch: pytest.MonkeyPatch) -> Sandbox:
    """The second tier, as open_sandbox gives it where bwrap is missing (the grader as root)."""
    from grader.run import sandbox as module

    if os.geteuid() != 0:
        pytest.skip("the unprivileged-uid tier needs the grader to be root")
    which = shutil.which
    monkeypatch.setattr(module.shutil, "which", lambda name, *a, **k: None if name == "bwrap" else which(name, *a, **k))
    opened = open_sandbox(Limits(cpu_s=60), fallback=True)
    assert not isinstance(opened, str), opened
    yield opened
    opened.release()


def test_without_bubblewrap_the_uid_tier_limits_and_drops_privileges_without_namespaces() -> None:
    sandbox = Sandbox(bwrap=None, uid=61234, drop=True, python="/venv/bin/python", read_only=("/venv",), devices=(), limits=Limits(cpu_s=99), no_bubblewrap="not installed")
    command = sandbox.command(["/venv/bin/python", "-c", "pass"], Path("/var/tmp/grading"))
    assert command[0] == "prlimit" and "--cpu=99" in command and command[-3:] == ["/venv/bin/python", "-c", "pass"]
    assert "setpriv --reuid=61234 --regid=61234 --clear-groups --inh-caps=-all --bounding-set=-all --" in " ".join(command)
    assert not any("bwrap" in part or "unshare" in part for part in command)
    assert sandbox.describe().startswith("unprivileged uid 61234 (no bubblewrap: not installed)") and not sandbox.private_scratch


def test_the_uid_tier_keeps_the_reference_folder_and_the_submissions_apart(uid_tier: Sandbox, tmp_path: Path) -> None:
    """No namespace hides the trusted domain's folder: its mode (0700, its own uid) does."""
    import json

    from grader.run.local import LocalRunner

    root = uid_tier.new_root("grader-test-")
    try:
        with LocalRunner(root, sandbox=uid_tier) as runner:
            assert runner.isolation.startswith("unprivileged uid ")
            trusted = json.loads(runner.run(_job(tmp_path / "ref", "ref", WHERE_AM_I.replace("OTHERS", "0"), private=True)).ranks[0].stdout_tail)
            spy = f"import os\nOTHERS = []\nfor act in (lambda: os.listdir({os.path.dirname(os.path.dirname(trusted['cwd']))!r}), lambda: os.rename({str(root / 'lib')!r}, {str(root / 'mine')!r})):\n    try:\n        act()\n    except OSError as exc:\n        OTHERS.append(type(exc).__name__)\n"
            seen = json.loads(runner.run(_job(tmp_path / "own", "own", spy + WHERE_AM_I)).ranks[0].stdout_tail)
        assert trusted["uid"] != seen["uid"] and uid_tier.uid == seen["uid"]
        assert seen["others"] == ["PermissionError", "PermissionError"]  # the reference's folder; the grader's entries of its own folder
        info = os.stat(root)
        assert seen["cwd"].startswith(str(root) + "/") and (info.st_uid, info.st_gid, info.st_mode & 0o777) == (0, uid_tier.uid, 0o750)
    finally:
        shutil.rmtree(root, ignore_errors=True)


LEAVE_BEHIND = """import ctypes.util, os, sys, time
open("/tmp/left-in-tmp", "w").write("x")
open("/dev/shm/left-in-shm", "w").write("x")
os.mkdir("/var/tmp/left-in-var-tmp")
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
print(libc.shmget(0x5eed, 4096, 0o1600))  # IPC_CREAT | 0600
rt = ctypes.CDLL(ctypes.util.find_library("rt") or None, use_errno=True)
assert rt.mq_open(b"/left-queue", os.O_CREAT | os.O_RDWR, 0o600, None) >= 0
if os.fork() == 0:
    os.setsid()
    os.execve(sys.executable, [sys.executable, "-c", "import time; time.sleep(300)"], {})
"""

FIND_LEFT = """import os, ctypes, ctypes.util
libc = ctypes.CDLL(None, use_errno=True)
rt = ctypes.CDLL(ctypes.util.find_library("rt") or None, use_errno=True)
print([p for p in ("/tmp/left-in-tmp", "/dev/shm/left-in-shm", "/var/tmp/left-in-var-tmp") if os.path.exists(p)], libc.shmget(0x5eed, 0, 0), rt.mq_open(b"/left-queue", os.O_RDONLY))
"""


def test_the_uid_tier_ends_what_a_job_left_on_the_shared_machine(uid_tier: Sandbox, tmp_path: Path) -> None:
    """A daemon with an empty environment, files in the machine's /tmp, /var/tmp and /dev/shm,
    a SysV segment and a POSIX message queue: each is found by the uid and gone before the next
    job starts."""
    from grader.run.local import LocalRunner, LocalRunnerOptions

    root = uid_tier.new_root("grader-test-")
    try:
        with LocalRunner(root, LocalRunnerOptions(cgroups=False), sandbox=uid_tier) as runner:
            assert "a job's processes are found by its uid" in runner.isolation
            left = runner.run(_job(tmp_path / "leave", "leave", LEAVE_BEHIND))
            assert left.ranks[0].status == "exit:0" and int(left.ranks[0].stdout_tail) >= 0 and left.leftovers >= 1
            assert [pid for pid in procs.pids_of_uids(range(uid_tier.uid, uid_tier.uid + 1)) if "time.sleep(300)" in procs.cmdline(pid)] == []
            found = runner.run(_job(tmp_path / "find", "find", FIND_LEFT))
            assert found.ranks[0].stdout_tail.strip() == "[] -1 -1", found.ranks[0].stderr_tail
    finally:
        shutil.rmtree(root, ignore_errors=True)


KEYS = """import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
add_key, keyctl = {calls}
if sys.argv[1] == "add":  # a key in the uid's user keyring (@u), which outlives every process of the uid
    print(libc.syscall(add_key, b"user", b"left-by-a-job", b"secret", 6, -4), os.strerror(ctypes.get_errno()))
else:  # how many bytes of key ids @u holds (KEYCTL_READ = 11 of KEYCTL_GET_KEYRING_ID = 0)
    buffer = ctypes.create_string_buffer(4096)
    print(libc.syscall(keyctl, 11, libc.syscall(keyctl, 0, -4, 0), buffer, 4096))
"""


def test_the_uid_tier_refuses_keyrings_to_a_job_and_empties_them_after_it(uid_tier: Sandbox, tmp_path: Path) -> None:
    """The uid tier loads the seccomp filter bubblewrap would (no namespaces needed): a job's
    add_key fails with EPERM. A key the uid holds all the same (here made by the test, outside
    any job: a machine whose call numbers the filter does not know) is gone once the job has
    ended: a keyring outlives every process of its uid, and the uid's next job may be another
    student's."""
    from grader.run import seccomp
    from grader.run.local import LocalRunner, LocalRunnerOptions

    numbers = seccomp._ARCHITECTURES.get(os.uname().machine)
    if numbers is None:
        pytest.skip("keyctl's numbers are not known on this machine")
    script = KEYS.format(calls=(numbers[1]["add_key"], numbers[1]["keyctl"]))
    as_uid = ["setpriv", f"--reuid={uid_tier.uid}", f"--regid={uid_tier.uid}", "--clear-groups", sys.executable, "-c", script]
    made = subprocess.run([*as_uid, "add"], capture_output=True, text=True, timeout=30).stdout.split()
    if not made or int(made[0]) < 0:
        pytest.skip(f"no keyrings here: {' '.join(made)}")
    root = uid_tier.new_root("grader-test-")
    try:
        with LocalRunner(root, LocalRunnerOptions(cgroups=False), sandbox=uid_tier) as runner:
            job = runner.run(_job(tmp_path / "keys", "keys", script.replace('sys.argv[1] == "add"', "True")))
            assert job.ranks[0].stdout_tail.strip() == "-1 Operation not permitted", job.ranks[0].stdout_tail + job.ranks[0].stderr_tail
        assert "keyrings refused (seccomp)" in uid_tier.describe()
        assert subprocess.run([*as_uid, "count"], capture_output=True, text=True, timeout=30).stdout.strip() == "0"
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_the_uid_tier_closes_the_course_but_the_python_environment(tmp_path: Path) -> None:
    from grader.run.sandbox import hide_from_others

    course = tmp_path / "course"
    for folder in ("solutions/p6", ".venv/lib", "grader", "tools/env/bin"):
        (course / folder).mkdir(parents=True)
    for path in (course, *course.rglob("*")):
        path.chmod(0o755)
    (course / "solutions" / "p6" / "p6_ddp.py").write_text("reference")
    (course / "README.md").write_text("readme")
    (course / "README.md").chmod(0o644)
    closed = hide_from_others(course, (str(course / ".venv"), str(course / "tools" / "env")))
    assert sorted(p.relative_to(course).as_posix() for p in closed) == ["README.md", "grader", "solutions"]
    assert [(course / name).stat().st_mode & 0o777 for name in ("solutions", "README.md", ".venv", "tools", "tools/env")] == [0o700, 0o600, 0o755, 0o755, 0o755]
    assert hide_from_others(course, (str(course / ".venv"), str(course / "tools" / "env"))) == []  # closed already
    assert hide_from_others(course / ".venv", (str(course / ".venv"),)) == []  # inside what is kept: untouched


def test_a_shared_folder_someone_else_made_first_is_refused(tmp_path: Path) -> None:
    """In the uid tier the submission shares /tmp and /var/tmp with the grader: a folder of the
    grader's own there that it made first, or a link in its place, is not used."""
    from grader.run.sandbox import private_folder

    assert private_folder(tmp_path / "mine", 0o700) == tmp_path / "mine"
    (tmp_path / "link").symlink_to(tmp_path / "mine")
    (tmp_path / "open").mkdir(mode=0o777)
    (tmp_path / "open").chmod(0o777)
    for name in ("link", "open"):
        with pytest.raises(OSError, match="is not a folder of the grader's own that only it may write"):
            private_folder(tmp_path / name, 0o700)


def test_sysv_objects_are_found_by_their_creator_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A submission may hand a SysV object it made to another owner (IPC_SET): its creator's
    uid still finds it."""
    from grader.run import sandbox as module

    header = "       key      shmid perms                  size  cpid  lpid nattch   uid   gid  cuid  cgid      atime      dtime      ctime        rss       swap"
    rows = ["     24301         11   666                  4096   100   100      0     0     0 61000 61000          0          0 1700000000       4096          0",
            "     24302         12   600                  4096   100   100      0 61000 61000 61000 61000          0          0 1700000000       4096          0",
            "     24303         13   600                  4096   100   100      0     0     0     0     0          0          0 1700000000       4096          0"]
    (tmp_path / "shm").write_text("\n".join([header, *rows]) + "\n")
    calls = []
    monkeypatch.setattr(module.subprocess, "run", lambda argv, **kw: calls.append(argv))
    module.remove_sysv_of(61000, tmp_path)
    assert calls == [["ipcrm", "-m", "11", "-m", "12"]]


def test_as_root_a_grading_that_gets_no_isolation_tier_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """run_autograder runs as root: were even the uid tier to fail, the submission would run
    with root's rights beside the solutions. It is not run (the self-check still is)."""
    from grader.course import load_course, load_practical
    from grader.grade import session
    from grader.grade.pipeline import GradeOptions
    from grader.run.sandbox import SandboxMissing

    if os.geteuid() != 0:
        pytest.skip("the grader is not root here")
    monkeypatch.setattr(session, "open_sandbox", lambda *args, **kwargs: SandboxMissing("setpriv refused"))
    executed = session.execute_folder(load_practical(load_course(ROOT), "p6"), ROOT / "solutions" / "p6", GradeOptions())
    assert executed.execution.error == "the grader runs as root and no isolation tier can start here (setpriv refused); a submission is not run with root's rights (--no-sandbox would, knowingly)"
