"""Why a run did not end cleanly, in one line a student can act on.

When one rank fails, the others usually fail a moment later with a connection error; those
are consequences, so the explanation leads with the root cause (a TODO left, an exception
in the student's code, a hang, a crash) and mentions the rest briefly.
"""
from __future__ import annotations

import re
import signal

from grader.probe.recorder.events import ExceptionInfo, Raised
from grader.probe.transport.traffic import TrafficReport
from grader.run.job import JobResult, RankResult

_CONSEQUENCE = re.compile(
    r"Connection (closed|reset) by peer|Broken pipe|pair closure|Socket Timeout|Timed out|timed out|"
    r"Connection refused|DistBackendError|failed to recv|failed to send|NCCL communicator",
)
_TODO = re.compile(r"^TODO\b")
DAMAGED = "the records of your process are damaged"
HUB_SAYS = re.compile(r"collective \d+ of [^\n]*")  # what the grader's hub answers a collective that cannot complete (grader/probe/transport/hub.py), however torch wraps it
HUB_SAYS_P2P = re.compile(r"rank \d+ received from rank \d+: [^\n]*|(?:send to|recv from) (?:rank \d+|any rank)[^\n]*|(?:send|recv) with rank -?\d+, which [^\n]*")  # … and a send or recv


def exception_of(rank: RankResult) -> Raised | None:
    """The exception a rank's script ended with, as the recorder saw it."""
    return rank.first(Raised)


def _where(exc: ExceptionInfo) -> str:
    if not exc.frames:
        return ""
    last = exc.frames[-1]
    code = f" ({last.code})" if last.code else ""
    return f" at {last.file}:{last.line}{code}"


def todo_of(exc: ExceptionInfo | None) -> str | None:
    """'TODO 1: … (p6_ddp.py:54)' when the exception is an untouched TODO of a template."""
    if exc and exc.type == "NotImplementedError" and _TODO.match(exc.message):
        where = f" ({exc.frames[-1].file}:{exc.frames[-1].line})" if exc.frames else ""
        return f"{exc.message}{where}"
    return None


def todo_stop(rank: RankResult) -> str | None:
    """The TODO a rank stopped at, if it stopped at one."""
    return todo_of(exception_of(rank))


def failure(exc: ExceptionInfo) -> str:
    """'stops at TODO 1: …' or 'raised ValueError: … at file:line (code)'."""
    todo = todo_of(exc)
    return f"stops at {todo}" if todo else f"raised {describe_exception(exc)}"


def is_consequence(exc: ExceptionInfo) -> bool:
    """Whether an exception looks like the echo of another rank's failure."""
    return bool(_CONSEQUENCE.search(f"{exc.type}: {exc.message}"))


HINTS = {
    "Expected all tensors to be on the same device": "a tensor must be on the device of the layer or tensor it meets: move it with .to(device)",
    "CUDA error: invalid device ordinal": "there is no GPU with that number on this node (a rank's GPUs follow LOCAL_RANK, which starts again at 0 on every node, not RANK)",
    "Distributed package doesn't have NCCL built in": "NCCL needs CUDA GPUs, and this rank sees none (nccl when CUDA is available, gloo otherwise)",
    "No backend type associated with device type cpu": (
        "the process group's backend has nothing for CPU tensors: NCCL carries CUDA tensors only "
        "(nccl when CUDA is available, gloo otherwise; with NCCL, the tensors on the rank's GPU)"
    ),
    "The server socket has failed to listen": (
        "the process that calls itself rank 0 starts the rendezvous at MASTER_PORT, and another one already had: "
        "init_process_group must get each process's own rank (the launcher's RANK)"
    ),
}


EMULATION = "grader/probe/vgpu"  # the virtual-GPU emulation's modules, inside the ranks


def raised_in_the_grader(exc: ExceptionInfo) -> bool:
    """Whether the exception came out of the virtual-GPU emulation itself (a line of it that
    is not a `raise`: the errors it raises on purpose are CUDA's, for the student's mistakes),
    not out of torch or the student's code."""
    frame = exc.library_frame
    return frame is not None and EMULATION in frame.file.replace("\\", "/") and not (frame.code or "").startswith("raise")


def describe_exception(exc: ExceptionInfo) -> str:
    message = exc.message.strip().splitlines()
    first = message[0][:300] if message else ""
    if raised_in_the_grader(exc):
        frame = exc.library_frame
        assert frame is not None
        inner = "vgpu" + frame.file.replace("\\", "/").split(EMULATION, 1)[1]
        return (f"{exc.type}: {first} — raised inside the grader's virtual-GPU emulation ({inner}:{frame.line} in {frame.func}), not by torch, "
                f"while running your line{_where(exc)}: if that line is right on a real GPU, this is the grader's fault; tell the course staff")
    hint = next((f" — {text}" for prefix, text in HINTS.items() if first.startswith(prefix)), "")
    return f"{exc.type}: {first}{_where(exc)}{hint}"


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def rank_end(rank: RankResult) -> str | None:
    """One line on how a rank ended badly, or None if it exited 0 with no exception."""
    todo = todo_stop(rank)
    if todo:
        return f"stopped at {todo}"
    exc = exception_of(rank)
    if exc is not None:
        return f"raised {describe_exception(exc)}"
    status = rank.status
    if status is None:
        return "ended without an exit status (its launcher was killed)"
    if status.startswith("signal:"):
        where = f" at {rank.stack[-1].describe()}" if rank.stack else ""
        return f"was killed by {_signal_name(int(status[7:]))}{where}"
    if rank.exit_code:
        return f"exited with status {rank.exit_code}"
    return None


def damaged(run: JobResult) -> str | None:
    """One line on the ranks whose records (event files) are damaged, or None. Damaged
    records explain a run's failure; what they hold is never taken as an observation."""
    found = [r for r in run.ranks if r.record.damaged]
    if not found:
        return None
    who = f"rank {found[0].rank}: " if len(run.ranks) > 1 else ""
    more = f" (and those of {_ranks([r.rank for r in found[1:]])})" if len(found) > 1 else ""
    return f"{who}{DAMAGED}: {found[0].record.damaged}{more}"


def explain(run: JobResult) -> str | None:
    """The root cause of a run's failure in one line, or None when every rank ended cleanly
    and recorded what it did. A cap the kernel saw the job reach (memory, processes, disk)
    leads: it is the cause of whatever the ranks did next. Damaged records come last."""
    cause = _explain(run)
    damage = damaged(run)
    if damage:
        cause = f"{cause}; {damage}" if cause else damage
    if not run.caps_hit:
        return cause
    return "; ".join(run.caps_hit) + (f" — then {cause}" if cause else "")


def hub_ended(run: JobResult) -> str | None:
    """One line on the first rank whose connection the grader's hub ended because of what it
    sent (the hub's own observation, so it leads what the ranks then reported), or None."""
    if not isinstance(run.traffic, TrafficReport):
        return None
    broken = sorted((end for end in run.traffic.ends if end.how.startswith("broken:")), key=lambda end: end.at)
    if not broken:
        return None
    return f"the grader's hub ended rank {broken[0].rank}'s connection: {broken[0].how.removeprefix('broken:').strip()}"


def _explain(run: JobResult) -> str | None:
    cause = _explain_ranks(run)
    hub = hub_ended(run)
    if hub is None:
        return cause
    return f"{hub} — then {cause}" if cause else hub


def _explain_ranks(run: JobResult) -> str | None:
    if run.skipped:
        return f"not run: {run.skipped}"
    if run.error:
        return f"could not be run: {run.error}"
    if run.launcher_lost:
        return "the grader's launcher of the ranks was killed while the script ran (did the script kill its parent or every process?)"
    if run.timed_out:
        return _explain_timeout(run)
    todos = {r.rank: todo_stop(r) for r in run.ranks if todo_stop(r)}
    if todos:
        first = sorted(set(todos.values()))[0]
        who = "every rank" if len(todos) == len(run.ranks) else _ranks(sorted(todos))
        return f"the script stops at {first} ({who})"
    problems = [(r, rank_end(r)) for r in run.ranks]
    problems = [(r, p) for r, p in problems if p]
    if not problems:
        return None
    root = [(r, p) for r, p in problems if not (exception_of(r) and is_consequence(exception_of(r)))]
    if not root:
        return _explain_lost_contact(run, [r for r, _ in problems])
    lead_rank, lead = root[0]
    others = [r.rank for r, _ in problems if r is not lead_rank]
    tail = f"; then {_ranks(others)} failed too" if others else ""
    return f"rank {lead_rank.rank} {lead}{tail}"


def _explain_lost_contact(run: JobResult, failed: list[RankResult]) -> str:
    """Every failure is a broken connection: the ranks disagreed on the collectives to run."""
    exc = exception_of(failed[0]) or ExceptionInfo(type="error", message="")
    gist = _CONSEQUENCE.search(f"{exc.type}: {exc.message}")
    said = next(iter(HUB_SAYS.findall(exc.message)), "")[:400]
    finished = [r.rank for r in run.ranks if rank_end(r) is None]
    others = f"; {_ranks(finished)} had already finished normally" if finished else ""
    sent = next(iter(HUB_SAYS_P2P.findall(exc.message)), "")[:400]
    if sent and not said:
        return f"rank {failed[0].rank} lost contact with the other ranks in a send or recv{_where(exc)} ({sent}){others} — every send must meet a recv from its rank, of its size, in the same order"
    lost = f"rank {failed[0].rank} lost contact with the other ranks in a collective{_where(exc)} ({said or (gist.group(0) if gist else exc.type)}){others}"
    return f"{lost} — every rank must run the same collectives in the same order (e.g. backward() on every rank in every step)"


RENDEZVOUS_HINT = (
    "init_process_group waits for the rendezvous store, which the launcher hosts (as torchrun's agent does) at the "
    "MASTER_ADDR and MASTER_PORT it gives each process: a script that sets them itself, or passes init_method=\"tcp://...\", "
    "waits for a store nobody hosts (take the launcher's: init_method=\"env://\" or none)"
)


COMPUTING_SHARE = 0.5  # of a CPU: a stopped rank that used this much just before was computing, not waiting


def _computing(rank: RankResult) -> bool:
    """Whether a rank stopped at its time limit was still computing, as the kernel counted its
    CPU time just before (grader/run/local.py `cpu_shares`), not waiting for a peer or a message."""
    return rank.cpu_share is not None and rank.cpu_share >= COMPUTING_SHARE


def _explain_timeout(run: JobResult) -> str:
    stuck = [r for r in run.ranks if r.status is None]
    parts = []
    for rank in stuck:
        verb = "is still computing at" if _computing(rank) else "waits at"
        where = f"{verb} {rank.stack[-1].describe()}" if rank.stack else ("is still computing (it gave no stack)" if _computing(rank) else "gave no stack")
        parts.append(f"rank {rank.rank} {where}")
    done = [r for r in run.ranks if r.status is not None]
    if done:
        parts.append(f"{_ranks([r.rank for r in done])} had already ended ({', '.join(sorted({_status_word(r) for r in done}))})")
    if stuck and all(rank.stack and "init_process_group(" in rank.stack[-1].code for rank in stuck):
        parts.append(RENDEZVOUS_HINT)
    if run.stalled_s is not None:
        return f"hung: stopped after {run.wall_s:.1f} s, when none of its processes had used the CPU for {run.stalled_s:g} s (waiting for something that never comes): " + "; ".join(parts)
    computing = any(_computing(rank) for rank in stuck)
    if run.reference_s is not None:
        times = f", {run.spec.timeout_s / run.reference_s:.0f}× its whole run" if run.reference_s > 0 else ""
        question = "still computing: does the loop end?" if computing else "a hang, or far too slow?"
        return f"did not finish within {run.spec.timeout_s:.3g} s, where the reference solution's same run takes {run.reference_s:.2g} s {run.reference_measured}{times} ({question}): " + "; ".join(parts)
    return f"did not finish within {run.spec.timeout_s:.3g} s ({'still computing: does the loop end?' if computing else 'a hang?'}): " + "; ".join(parts)


def _status_word(rank: RankResult) -> str:
    return rank_end(rank) or "exit 0"


def _ranks(numbers: list[int]) -> str:
    if len(numbers) == 1:
        return f"rank {numbers[0]}"
    return "ranks " + ", ".join(str(n) for n in numbers)
