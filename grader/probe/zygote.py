"""A fork server for ranks: `python -c "from grader.probe.zygote import main; ..." MODULE...` (grader/run/local.py ZYGOTE).

Why: importing torch costs about 2 s of CPU, and DistributedDataParallel's first construction
another 2 s (it imports torch._dynamo). A grading starts 10 to 20 ranks, so the zygote pays
for those imports once and forks every rank from the warm interpreter; torch starts no threads
at import and CUDA is never touched here, so forking is safe (the same reason torchrun's
workers could be forked).

Protocol (JSON lines, each message defined in grader/probe/messages.py and checked where it
arrives): the zygote prints `ready` once warm, then for each `job` request on stdin it forks a
job *leader* that becomes a session leader and a child subreaper. With `hold`, the leader waits
before it forks anything: the zygote prints `forked` and reads one more line, `go` (the grader
has moved the leader into the job's cgroup, so that every process of the job is born inside
it) or anything else (the leader exits at once). Then the leader forks the ranks, and the
zygote prints `started` (their pids), `rank_exit` as each rank ends, and `exited` when every
rank has ended (processes a rank left behind are killed then). A job
with a `carrier` gets the grader's hub (grader/probe/transport/hub.py): the leader makes a
socket pair per rank, forks the hub with one end of each and every rank with the other end of
its own pair only; the hub carries the ranks' process groups and prints its report as
`traffic` answers once every rank's connection has ended (after the ranks, it has
HUB_GRACE_S before it is told to stop, and as long again before it is killed). The zygote prints
`leader_exit` when the leader is gone, however it ended (the grader kills the leader's whole
session on a timeout), with the number of processes the job left running that the zygote
killed then. A request it cannot read is answered with `error`.
"""
from __future__ import annotations

import ctypes
import importlib
import os
import select
import signal
import socket
import sys
import time
from dataclasses import replace
from typing import NoReturn

from grader.probe.cloak import neutral
from grader.probe.transport.wire import pass_credentials
from grader.probe.messages import (
    Answer,
    BadMessage,
    Exited,
    Forked,
    Go,
    JobRequest,
    LauncherError,
    LeaderExited,
    RankExited,
    RankPid,
    Ready,
    Started,
    TrafficPart,
    answer_line,
    parse_request,
)

HUB_GRACE_S = 2.0  # after the script's ranks ended, for the hub to end by itself (then to send its report when told)
PR_SET_CHILD_SUBREAPER = 36
PR_SET_DUMPABLE = 4
KEYCTL_JOIN_SESSION_KEYRING = 1
KEYCTL_SYSCALL = {"x86_64": 250, "aarch64": 219}  # keyctl(2), which glibc does not wrap


def _say(answer: Answer) -> None:
    """One line on fd 1, written with a single write so lines from leaders never interleave."""
    os.write(1, (answer_line(answer) + "\n").encode())


def _status(raw: int) -> str:
    if os.WIFSIGNALED(raw):
        return f"signal:{os.WTERMSIG(raw)}"
    return f"exit:{os.WEXITSTATUS(raw)}"


def _prctl(option: int, value: int) -> bool:
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def leave_session_keyring() -> bool:
    """Join a new, empty session keyring: the grader's own (a systemd service or a PAM login
    gives it one) would otherwise be in reach of every rank, whatever its uid, as a keyring
    it possesses. False where this machine's keyctl number is not known."""
    number = KEYCTL_SYSCALL.get(os.uname().machine)
    if number is None:
        return False
    try:
        return ctypes.CDLL(None, use_errno=True).syscall(number, KEYCTL_JOIN_SESSION_KEYRING, None) >= 0
    except (OSError, AttributeError):
        return False


def become_subreaper() -> bool:
    """Adopt orphaned descendants (Linux); False where the kernel has no such option."""
    return _prctl(PR_SET_CHILD_SUBREAPER, 1)


def children_of(pid: int) -> list[int]:
    """Processes whose parent is `pid`, from /proc."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(entry))
    return found


def kill_children(rounds: int = 20) -> int:
    """Kill and reap every child of this process (orphans adopted as a subreaper) until none
    is left: a dying process can hand its own children over a moment later. Returns how many
    were still running (zombies only needed reaping)."""
    running = 0
    for _ in range(rounds):
        children = children_of(os.getpid())
        if not children:
            break
        for pid in children:
            try:
                with open(f"/proc/{pid}/stat", "rb") as stat:
                    running += stat.read().rsplit(b")", 1)[1].split()[0] != b"Z"
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (OSError, ChildProcessError):
                pass
        time.sleep(0.01)
    return running


def _signal(pid: int, number: int) -> None:
    try:
        os.kill(pid, number)
    except OSError:
        pass


def _lead(job: JobRequest, gate: int | None) -> None:
    """The job leader: wait at the `gate` (a pipe) when there is one, fork the ranks, wait for
    them, clear up what they left; never returns."""
    os.setsid()
    become_subreaper()
    if gate is not None:
        opened = os.read(gate, 1)
        os.close(gate)
        if not opened:
            os._exit(70)
    from grader.probe.rank import run_rank

    store = _fork_store(job)
    ranks = job.ranks if store is not None else tuple(replace(config, env={**config.env, AGENT_STORE: "False"}) for config in job.ranks)
    pairs = {config.rank: socket.socketpair() for config in ranks} if job.carrier else {}
    for hub_end, _ in pairs.values():
        pass_credentials(hub_end)  # before any rank exists: the hub learns who wrote each frame (grader/probe/transport/hub.py)
    hub = _fork_hub(job, pairs) if pairs else None
    pids = {}
    for config in ranks:
        pid = os.fork()
        if pid == 0:
            run_rank(config, _own_end(pairs, config.rank))
        pids[pid] = config.rank
    for hub_end, rank_end in pairs.values():
        hub_end.close()
        rank_end.close()
    _say(Started(job=job.id, leader=os.getpid(), pids=tuple(RankPid(rank, pid) for pid, rank in pids.items())))
    status = {}
    hub_until = None  # once the ranks ended: when the hub is told to stop (then, once told, killed)
    hub_told = False
    while len(status) < len(pids) or hub is not None:
        if hub is not None and hub_until is None and len(status) == len(pids):
            hub_until = time.monotonic() + HUB_GRACE_S
        pid, raw = os.waitpid(-1, os.WNOHANG if hub_until is not None else 0)
        if pid == 0:
            now = time.monotonic()
            if hub is not None and hub_until is not None and now > hub_until:
                _signal(hub, signal.SIGKILL if hub_told else signal.SIGTERM)
                hub_until, hub_told = now + HUB_GRACE_S, True
            time.sleep(0.01)
            continue
        if pid == hub:
            hub = None
        elif pid == store:
            store = None
        elif pid in pids:
            status[str(pids[pid])] = _status(raw)
            _say(RankExited(job=job.id, rank=pids[pid], status=status[str(pids[pid])]))
    if store is not None:  # the ranks have ended: their store has served
        _signal(store, signal.SIGKILL)
        os.waitpid(store, 0)
    _say(Exited(job=job.id, status=status, leftovers=kill_children()))
    os._exit(0)


AGENT_STORE = "TORCHELASTIC_USE_AGENT_STORE"  # torchrun's variable: "True" when its agent hosts the rendezvous store
STORE_READY_S = 10.0  # how long the leader waits for the store to listen before rank 0 hosts it instead


def _fork_store(job: JobRequest) -> int | None:
    """Fork the job's rendezvous store, as torchrun's agent hosts it, where the ranks are told
    so (AGENT_STORE "True", grader/run/torchrun_env.py): a TCPStore server at their
    MASTER_PORT, listening before any rank starts, every rank its client. Its pid; None where
    the ranks host their own (rank 0) or it could not listen (they are then told to host it).

    Why: with rank 0 as the server, a rank that connects before rank 0 listens retries after
    a back-off, and init_process_group took 0.45 s longer in one launch in seven (measured on
    p10's timed launches): time before the first timed step, which the speed checks read."""
    first = job.ranks[0].env if job.ranks else {}
    if first.get(AGENT_STORE) != "True" or not first.get("MASTER_PORT", "").isdigit():
        return None
    ready, told = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:  # whatever happens here, the store's process never returns into the leader's code
            os.close(ready)
            null = os.open(os.devnull, os.O_RDWR)
            os.dup2(null, 0)  # the zygote's requests are not the store's to read
            os.close(null)
            from torch.distributed import TCPStore

            server = TCPStore("127.0.0.1", int(first["MASTER_PORT"]), is_master=True, multi_tenant=True, wait_for_workers=False)
            os.write(told, b"r")
            os.close(told)
            while server is not None:  # serves from its own threads until the leader ends it
                signal.pause()
        finally:
            os._exit(71)
    os.close(told)
    readable, _, _ = select.select([ready], [], [], STORE_READY_S)
    listening = bool(readable) and os.read(ready, 1) == b"r"
    os.close(ready)
    if listening:
        return pid
    _signal(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return None


def _own_end(pairs: dict[int, tuple[socket.socket, socket.socket]], rank: int) -> int | None:
    """In a forked rank: close every end of the hub's socket pairs but its own, and return that."""
    own = None
    for other, (hub_end, rank_end) in pairs.items():
        hub_end.close()
        if other == rank:
            own = rank_end.detach()
        else:
            rank_end.close()
    return own


def _fork_hub(job: JobRequest, pairs: dict[int, tuple[socket.socket, socket.socket]]) -> int:
    """Fork the job's hub with the hub's end of every pair; its pid."""
    pid = os.fork()
    if pid != 0:
        return pid
    from grader.probe.transport.hub import run_hub

    for _, rank_end in pairs.values():
        rank_end.close()
    assert job.carrier is not None
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)  # the zygote's requests are not the hub's to read
    os.close(null)
    run_hub(job.id, {rank: hub_end for rank, (hub_end, _) in pairs.items()}, job.carrier, lambda name, part, parts, chunk: _say(TrafficPart(job=name, part=part, parts=parts, data=chunk)))
    os._exit(0)


def _opens_the_gate(line: str) -> bool:
    """Whether the grader's answer to `forked` is `go` (anything else keeps the gate shut)."""
    try:
        return bool(line) and isinstance(parse_request(line), Go)
    except BadMessage as exc:
        _say(LauncherError(message=f"the answer to a held job could not be read: {exc}"))
        return False


def main(argv: list[str]) -> NoReturn:
    """Warm up, then serve job requests from stdin until it closes; then end at once (the
    interpreter's teardown with torch loaded takes about a second, which every grading waited
    for, and there is nothing left to do: every job has ended)."""
    leave_session_keyring()
    for name in argv:
        importlib.import_module(name)
    become_subreaper()
    # not dumpable: processes of the same uid (the ranks) cannot open /proc/<pid>/fd of this
    # process or its forks, so they cannot write into the grader's pipe; forked ranks inherit it
    _prctl(PR_SET_DUMPABLE, 0)
    _say(Ready(pid=os.getpid()))
    while line := sys.stdin.readline():
        try:
            request = parse_request(line)
        except BadMessage as exc:
            _say(LauncherError(message=f"a request could not be read: {exc}"))
            continue
        if not isinstance(request, JobRequest):
            _say(LauncherError(message=f"a {request.op!r} request came without a job waiting for it"))
            continue
        sys.stdout.flush()
        sys.stderr.flush()
        gate, opener = os.pipe() if request.hold else (None, None)
        leader = os.fork()
        if leader == 0:
            try:
                if opener is not None:
                    os.close(opener)
                _lead(request, gate)
            finally:
                os._exit(70)
        if opener is not None:
            os.close(gate)
            _say(Forked(job=request.id, leader=leader))
            if _opens_the_gate(sys.stdin.readline()):
                os.write(opener, b"g")
            os.close(opener)
        _, raw = os.waitpid(leader, 0)
        _say(LeaderExited(job=request.id, status=_status(raw), orphans=kill_children()))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


neutral(main, "_run_module_as_main")  # under a rank's script, the frames of runpy (grader/probe/cloak.py)
neutral(_lead, "_run_module_code")

if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
