"""Run one rank of a job inside a freshly forked process, as `python script.py args` would.

The rank gets exactly the environment the job asks for (torchrun's variables among it), its
own working directory, stdout and stderr files, a fault handler that dumps every thread's
stack on SIGUSR1 (the grader's "where are you stuck?") and on a crash, and the recorder
(grader.probe.recorder.observers) with what grading asks of it: values, the script's variables, the
first steps in detail, a process-group timeout.
The script runs under runpy as `__main__`; how it ended is recorded, then the process exits
with the code Python itself would have used.
"""
from __future__ import annotations

import atexit
import faulthandler
import io
import os
import runpy
import signal
import sys
import traceback
from types import TracebackType

from grader.probe.cloak import cloak, neutral
from grader.probe.messages import RankConfig

PROBE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "")
PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the folder that holds the grader package


def _redirect_stdio(out_path: str, err_path: str, keep: int | None = None) -> None:
    """Point fds 0/1/2 at /dev/null and the rank's files, close every other inherited fd (but
    `keep`, the rank's socket to the grader's hub)."""
    null = os.open(os.devnull, os.O_RDONLY)
    out = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    err = os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    for fd, target in ((null, 0), (out, 1), (err, 2)):
        os.dup2(fd, target)
    most = os.sysconf("SC_OPEN_MAX") if hasattr(os, "sysconf") else 1024
    if keep is None:
        os.closerange(3, most)
    else:
        os.closerange(3, keep)
        os.closerange(keep + 1, most)
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), line_buffering=True, errors="backslashreplace")
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), line_buffering=True, errors="backslashreplace")


def _trim(te: traceback.TracebackException, cwd: str, seen: set[int]) -> None:
    """Drop the launcher's frames (before the script's first frame, and the probe's own) and
    show the student's files relative to their folder, as a plain `python script.py` would."""
    if id(te) in seen:
        return
    seen.add(id(te))
    prefix = os.path.join(cwd, "")
    frames = list(te.stack)
    first = next((i for i, f in enumerate(frames) if f.filename.startswith(prefix)), None)
    if first is not None:
        frames = [
            traceback.FrameSummary(f.filename[len(prefix):] if f.filename.startswith(prefix) else f.filename, f.lineno, f.name, line=f.line)
            for f in frames[first:]
            if not f.filename.startswith(PROBE_DIR)
        ]
        te.stack = traceback.StackSummary.from_list(frames)
    if isinstance(getattr(te, "filename", None), str) and te.filename.startswith(prefix):
        te.filename = te.filename[len(prefix):]
    for chained in (te.__cause__, te.__context__):
        if chained is not None:
            _trim(chained, cwd, seen)


def print_student_traceback(exc: BaseException, cwd: str) -> None:
    """Print the traceback of `exc` to stderr, trimmed to what the student wrote."""
    te = traceback.TracebackException.from_exception(exc)
    _trim(te, cwd, set())
    sys.stderr.write("".join(te.format()))


def _script_namespace(tb: TracebackType | None, script: str) -> dict | None:
    """The script's module globals, taken from a traceback that passed through it."""
    namespace = None
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_filename == script and code.co_name == "<module>":
            namespace = tb.tb_frame.f_globals
        tb = tb.tb_next
    return namespace


def _exit_code(code: object) -> int:
    """The process exit code Python uses for `SystemExit(code)`."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def run_rank(config: RankConfig, hub: int | None = None) -> None:
    """Become one rank and run the student's script; never returns. `hub`: the rank's socket
    to the grader's hub, which then carries its process groups (grader.probe.transport)."""
    code = 1
    try:
        os.environ.clear()
        os.environ.update(config.env)
        os.chdir(config.cwd)  # this is a fresh child process: its cwd is its own
        if hub is not None and hub < 3:  # out of the way of the standard streams
            hub, moved = os.dup(hub), hub
            os.close(moved)
        _redirect_stdio(config.stdout, config.stderr, hub)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        fault_file = open(config.faults, "w")  # noqa: SIM115 - kept open for the fault handler
        faulthandler.enable(file=fault_file, all_threads=True)
        faulthandler.register(signal.SIGUSR1, file=fault_file, all_threads=True)
        code = _run_script(config, hub)
    finally:
        os._exit(code)


def _run_script(config: RankConfig, hub: int | None) -> int:
    import torch  # already imported by the zygote; here for the thread setting

    from grader.probe.recorder.events import Raised
    from grader.probe.recorder.observers import Probe, ProbeOptions, describe_exception

    if os.environ.get("OMP_NUM_THREADS", "").isdigit():
        torch.set_num_threads(max(int(os.environ["OMP_NUM_THREADS"]), 1))
    if hub is not None:
        from grader.probe.transport.client import install as carry

        carry(hub)
    device_of = None
    if config.virtual_gpus:
        from grader.probe.vgpu.install import install

        device_of = install(config.virtual_gpus).device_of
    script = config.script
    options = ProbeOptions(
        script=script,
        watch_globals=config.watch_globals,
        values=True,
        detail_steps=2,
        pg_timeout_s=config.pg_timeout_s,
        virtual_gpus=config.virtual_gpus,
        ddp_options=config.ddp_options,
    )
    probe = Probe(config.observations, options, device_of, config.max_observation_bytes)
    probe.install()
    sys.stdout, sys.stderr = probe.tap(sys.stdout), probe.tap(sys.stderr)
    sys.argv = [script, *config.argv]
    sys.path[0] = os.path.dirname(script)
    probe.open()
    namespace = None
    how, code = "returned", 0
    if not config.driver:
        cloak(PACKAGE_ROOT)
    try:
        extra = {"__grader_emit__": probe.emit} if config.driver else None
        namespace = runpy.run_path(script, init_globals=extra, run_name="__main__")
    except SystemExit as exc:
        namespace = _script_namespace(exc.__traceback__, script)
        how, code = "system_exit", _exit_code(exc.code)
    except BaseException as exc:  # noqa: BLE001 - every failure of student code is recorded
        namespace = _script_namespace(exc.__traceback__, script)
        how, code = "exception", 130 if isinstance(exc, KeyboardInterrupt) else 1
        probe.emit(Raised, **vars(describe_exception(exc, config.cwd)))
        print_student_traceback(exc, config.cwd)
    probe.finish(namespace, how, code)
    try:
        atexit._run_exitfuncs()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        probe.close()
    return code


neutral(run_rank, "_run_module_code")  # under the script, the frames of runpy (grader/probe/cloak.py)
neutral(_run_script, "_run_code")
