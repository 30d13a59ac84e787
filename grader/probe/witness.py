"""The grader's witness: a rank of the submission's job that runs the grader's code, not the
student's, so that what it sees is something the submission cannot write.

Mechanism: the job leader forks it like any rank (grader/probe/zygote.py), as the last rank of
the run. It joins the process group the launcher's environment names, waits for the
submission's rank 0 to announce its DDP options (the recorder's `ddp_args` event, written
before DDP's first collective: options such as find_unused_parameters change which collectives
DDP makes, and the witness must make the same ones), builds the template's model in a DDP of
its own with those options, and trains on its shard of the grader's data, one forward pass
for each of rank 0's (`ddp_forward` events say whether each was inside no_sync), one
optimizer step for each of rank 0's, and an all-reduce of the reduction's identity for each
one rank 0 calls itself (`allreduce_call`: a loss all-reduced for the log). What the collectives deliver to it is the average of
every rank's contribution: it equals the grader's full-batch gradient only if the submission's
ranks really computed their shards' gradients and sent them in backward. Its communication
hook counts the all-reduces of each backward pass; its own clock times each step, and in a
synchronous all-reduce it waits for the slowest rank. Records that lie about when rank 0
synchronises only make the witness's collectives mismatch the ranks' (a timeout, reported).

What protects it: it is forked from the launcher, which is not dumpable, so processes of the
submission (the same uid in the same sandbox) can neither read nor write its memory nor open
its descriptors (and ptrace is refused by the sandbox's seccomp filter); its report goes to
the grader through the launcher's pipe, which the ranks do not hold. A submission can kill
it or starve it: then no report arrives, and the checks that need one fail.
"""
from __future__ import annotations

import base64
import ctypes
import datetime
import faulthandler
import itertools
import math
import os
import select
import signal
import socket
import time
import zlib
from collections import deque
from contextlib import nullcontext
from typing import Any, Callable, Iterable

from grader.probe.events import LEADING_ROWS, AllReduceCall, Backward, DamagedRecords, DdpArgs, DdpForward, DestroyPg, EndState, Exit, Optimizer, parse_line
from grader.probe.messages import WITNESS_PART_CHARS, DdpOptions, Digest, WitnessPart, WitnessPlan, WitnessReport, WitnessStage, answer_line, witness_report_line
from grader.probe.typed import clip

PEER_READ_BYTES = 64 << 20  # of the submission's event file: what the witness follows comes early in it
PEER_CHUNK_BYTES = 1 << 20  # read at once
POLL_S = 0.0005  # between looks at the file where inotify is not to be had
WAKE_S = 0.05  # the longest wait for inotify's word before the file is read again anyway
IN_MODIFY, IN_CREATE, IN_NONBLOCK, IN_CLOEXEC = 0x2, 0x100, 0o4000, 0o2000000
# events of rank 0 that come after DDP is built, in a script that builds one: seen first, there is none
WITHOUT_DDP = {Backward: "ran backward", Optimizer: "took an optimizer step", Exit: "ended", EndState: "ended"}
MAX_MIRRORED_NUMEL = 1 << 24  # of an all-reduce of the script's own that the witness takes part in


class GaveUp(Exception):
    """The witness stops following the script: the message says why, as its report's error."""


def global_batch(seed: int, step: int, batch_size: int, dim: int) -> Any:
    """The templates' global batch of one step: x, y ~ N(0, 1) from a generator seeded with
    seed * 1000 + step (the grader's reference training uses it too)."""
    import torch

    g = torch.Generator().manual_seed(seed * 1000 + step)
    return torch.randn(batch_size, dim, generator=g), torch.randn(batch_size, 1, generator=g)


def training_digest(before: Iterable[Any], after: Iterable[Any]) -> Digest:
    """Per parameter tensor, the sum and the sum of squares (in float64) of what training changed
    in it, `after` - `before`: what the witness reports of a timed run (its parameters from DDP's
    start to its last step) and what the grader computes of its own training on the same inputs
    (grader/practicals/reference.py). The change, not the values: 20 small steps move a
    parameter by a thousandth of its size, which a digest of the values would not tell apart."""
    digest = []
    for old, new in zip(before, after):
        change = new.detach().double() - old.detach().double()
        digest.append((float(change.sum()), float(change.square().sum())))
    return tuple(digest)


SHARD_LAYOUTS = ("contiguous", "strided", "sampler")
SAMPLER_SEARCH = 4096  # DistributedSampler shuffles (seed + epoch) below this are tried when the usual ones do not fit


def sampler_key(layout: str) -> int | None:
    """The shuffle (DistributedSampler's seed + epoch) of a "sampler" or "sampler:K" layout."""
    if layout == "sampler":
        return 0
    name, _, key = layout.partition(":")
    return int(key) if name == "sampler" and key.isdigit() and len(key) <= 18 else None


def sampler_layout(key: int) -> str:
    """The layout of DistributedSampler's shuffle `key` (seed + epoch): "sampler" for the default."""
    return "sampler" if key == 0 else f"sampler:{key}"


def shard_rows(layout: str, batch: int, world: int, rank: int) -> list[int]:
    """The rows of the global batch a rank keeps when the ranks split it `layout`'s way:
    "contiguous" (the templates' TODO: shard rows from rank * shard), "strided" (as
    DistributedSampler(shuffle=False) does: every world-th row from the rank's number),
    "sampler" (DistributedSampler's default: a shuffle seeded 0, epoch 0, the remainder
    dropped) or "sampler:K" (its shuffle with seed + epoch = K: `seed=` given, or `set_epoch`).
    Any of them is a right split; the witness takes its rows the ranks' way."""
    shard = batch // world
    if layout == "strided":
        return list(range(rank, shard * world, world))
    key = sampler_key(layout)
    if key is not None:
        import torch

        return torch.randperm(batch, generator=torch.Generator().manual_seed(key)).tolist()[: shard * world][rank::world]
    return list(range(rank * shard, (rank + 1) * shard))


def sampler_keys(seed: int, step: int, previous: int | None = None, search: bool = True) -> list[int]:
    """The shuffles to try for a step, likeliest first: one more than the last step's
    (set_epoch(step)), the same, the default, the step, the script's seed (DistributedSampler(
    seed=seed)) and with the step added; then, with `search`, every small one."""
    usual = ([previous + 1, previous] if previous is not None else []) + [0, step, seed, seed + step]
    return list(dict.fromkeys([*usual, *(range(SAMPLER_SEARCH) if search else ())]))


def layout_of(first_rows: tuple[float, ...] | None, row_sums: list[float], batch: int, world: int, seed: int = 0, step: int = 0, previous: str | None = None) -> str:
    """The layout whose rows for rank 0 begin with the rows rank 0's first training pass of the
    step fed (`first_rows`, each summed as the recorder sums them, from its DdpForward record; `row_sums`, the grader's sums
    of that step's batch); `previous`, the last step's; "contiguous" when none does or the
    records hold no rows."""
    if not first_rows:
        return "contiguous"
    seen = first_rows[:LEADING_ROWS]

    def fits(layout: str) -> bool:
        expected = [row_sums[i] for i in shard_rows(layout, batch, world, 0)[: len(seen)]]
        return len(expected) == len(seen) and all(abs(a - b) <= 1e-9 * (1 + abs(b)) for a, b in zip(seen, expected))

    for layout in ("contiguous", "strided"):
        if fits(layout):
            return layout
    # the wide search only on LEADING_ROWS rows: on fewer, one of thousands of shuffles fits by chance
    for key in sampler_keys(seed, step, sampler_key(previous) if previous else None, search=len(seen) >= LEADING_ROWS):
        layout = sampler_layout(key)
        if fits(layout):
            return layout
    return "contiguous"


def template_mlp(dim: int, hidden: int) -> Any:
    """The model of p6's template."""
    from torch import nn

    return nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, 1))


def template_two_stage(dim: int, hidden: int) -> Any:
    """The model of p10's template, parameter names included, its stages on one device."""
    from torch import nn

    class TwoStageModel(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stage1 = nn.Sequential(nn.Linear(dim, hidden), nn.ReLU())
            self.stage2 = nn.Linear(hidden, 1)

        def forward(self, x: Any) -> Any:
            return self.stage2(self.stage1(x))

    return TwoStageModel()


MODELS: dict[str, Callable[[int, int], Any]] = {"mlp": template_mlp, "two_stage": template_two_stage}


class Wakeups:
    """Wake as soon as a file in `folder` is written (Linux's inotify, through libc), so that
    the witness follows rank 0 without a polling interval's delay and without spending a core
    on polling; where inotify cannot be had, wake every POLL_S."""

    def __init__(self, folder: str) -> None:
        self.fd = -1
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
            if fd >= 0 and libc.inotify_add_watch(fd, folder.encode(), IN_MODIFY | IN_CREATE) >= 0:
                self.fd = fd
            elif fd >= 0:
                os.close(fd)
        except (OSError, AttributeError):
            self.fd = -1

    def wait(self, timeout_s: float) -> None:
        """Until a file of the folder is written (or created), at most `timeout_s`."""
        if self.fd < 0:
            time.sleep(min(timeout_s, POLL_S))
            return
        ready, _, _ = select.select([self.fd], [], [], min(timeout_s, WAKE_S))
        if ready:
            try:
                os.read(self.fd, 1 << 16)
            except OSError:
                pass

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class PeerRecords:
    """The submission's rank 0 event file, read as it grows (up to PEER_READ_BYTES). The file is
    the submission's to write: lines that are not events the recorder writes are passed over,
    and what the witness follows in it only decides when the witness takes part in a
    collective, never what it computes (a forged line can only make the collectives mismatch)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.done = 0  # bytes of whole lines already read
        self.fd: int | None = None
        self.pending: deque[bytes] = deque()
        self.wakeups = Wakeups(os.path.dirname(path) or ".")

    def _more(self) -> None:
        if self.fd is None:
            try:
                self.fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)  # a FIFO put there must not block the witness
            except OSError:
                return
        try:
            data = os.pread(self.fd, min(PEER_CHUNK_BYTES, PEER_READ_BYTES - self.done), self.done)
        except OSError:
            return
        lines = data.split(b"\n")[:-1]  # a last line without its end is still being written
        self.done += sum(len(line) + 1 for line in lines)
        self.pending.extend(lines)

    def next(self, kinds: tuple[type, ...], wait_s: float) -> Any:
        """The next event of one of `kinds` (those of other kinds are skipped), or None when none
        came within `wait_s`."""
        names = [kind.kind.encode() for kind in kinds]
        deadline = time.monotonic() + wait_s
        while True:
            while self.pending:
                line = self.pending.popleft()
                if not any(name in line for name in names):
                    continue
                try:
                    event = parse_line(line)
                except DamagedRecords:
                    continue
                if isinstance(event, kinds):
                    return event
            now = time.monotonic()
            if now >= deadline:
                return None
            self._more()
            if not self.pending:
                self.wakeups.wait(deadline - now)

    def close(self) -> None:
        self.wakeups.close()
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def peer_ddp_args(records: PeerRecords, wait_s: float, along: Callable[[AllReduceCall], None] = lambda call: None) -> DdpArgs | str:
    """The first DDP options the submission's rank 0 announced, waiting up to `wait_s` (taking
    part in rank 0's own all-reduces before them, through `along`); or why none will come: the
    time passed, or rank 0 already trains (or ended) without DDP."""
    while True:
        event = records.next((DdpArgs, AllReduceCall, *WITHOUT_DDP), wait_s)
        if not isinstance(event, AllReduceCall):
            break
        along(event)
    if event is None:
        return f"your rank 0 built no DistributedDataParallel within {wait_s:g} s of joining the process group"
    if isinstance(event, DdpArgs):
        return event
    return f"your rank 0 {WITHOUT_DDP[type(event)]} without DistributedDataParallel"


def mirror_all_reduce(call: AllReduceCall) -> None:
    """Take part in an all-reduce the script makes itself (a loss all-reduced for the log), with
    the reduction's identity: what the witness adds changes nothing of the script's result."""
    import torch
    import torch.distributed as dist

    dtype = getattr(torch, call.dtype, None)
    op = getattr(dist.ReduceOp, call.op, None)
    if not call.default_group:
        raise GaveUp("your rank 0 all-reduced on a process group of its own, which the witness does not join")
    if not isinstance(dtype, torch.dtype) or op is None or any(n < 0 for n in call.shape) or math.prod(call.shape) > MAX_MIRRORED_NUMEL:
        raise GaveUp(f"your rank 0 all-reduced what the witness cannot take part in: {call.shape} {call.dtype} {call.op}")
    limits = torch.finfo(dtype) if dtype.is_floating_point else torch.iinfo(dtype) if dtype != torch.bool else None
    identity = {"PRODUCT": 1, "MIN": limits.max if limits else True, "MAX": limits.min if limits else False, "BAND": -1 if limits else True}.get(call.op, 0)
    dist.all_reduce(torch.full(call.shape, identity, dtype=dtype), op=op)


def await_store(host: str, port: int, wait_s: float) -> None:
    """Wait (up to `wait_s`) until rank 0's store listens: the witness starts before the script's
    ranks have imported anything, and a store client that comes too early backs off for up to a
    second before it tries again (measured: 0.4-0.7 s added to a launch)."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=POLL_S):
                return
        except OSError:
            time.sleep(POLL_S / 2)


def witness_parts(job: str, report: WitnessReport) -> list[str]:
    """The report as `witness` answer lines (each with its newline)."""
    data = base64.b64encode(zlib.compress(witness_report_line(report).encode(), 6)).decode()
    chunks = [data[i : i + WITNESS_PART_CHARS] for i in range(0, len(data), WITNESS_PART_CHARS)] or [""]
    return [answer_line(WitnessPart(job=job, part=i, parts=len(chunks), data=chunk)) + "\n" for i, chunk in enumerate(chunks)]


def _values(tensor: Any) -> tuple[float, ...]:
    return tuple(tensor.detach().double().reshape(-1).tolist())


def train(plan: WitnessPlan, rank: int, reached: Callable[[str], None], send: Callable[[WitnessReport], None]) -> None:
    """Join the job's process group and train as the plan says, following rank 0's forward
    passes and optimizer steps; `send` the report of what was seen once the plan's steps are
    taken (or `error` set, when something stopped it), then follow rank 0 to its end.

    Each forward pass of rank 0's DDP (with gradients on) is mirrored by one of the witness's,
    inside no_sync exactly when rank 0's was (DDP decides at forward whether its backward
    all-reduces), and each optimizer step by one of its own. The witness cuts its shard into
    the plan's micro-batches: the k-th pass of a step inside no_sync feeds the k-th (none past
    the last), a pass that all-reduces feeds every row not fed yet. All-reduces average, so the
    gradient after the step's last all-reduce is the average of every rank's whole-shard
    gradient however the ranks cut their shards (fewer pieces than asked included), and the
    witness computes about as much as a rank between two of the ranks' collectives (measured:
    the whole shard in the first pass made a script with a collective of its own in every
    micro-batch wait for it, 1.7× slower)."""
    import torch
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
    from torch.nn.parallel import DistributedDataParallel

    seen: dict[str, Any] = {"options": None, "allreduces": [], "ends": [], "grads": [], "names": (), "params": (), "layouts": [], "digest": ()}

    def report(error: str | None) -> WitnessReport:
        return WitnessReport(
            rank=rank,
            ddp_options=seen["options"],
            allreduces=tuple(tuple(step) for step in seen["allreduces"]),
            step_ends=tuple(seen["ends"]),
            names=tuple(seen["names"]),
            grads=tuple(seen["grads"]),
            params=tuple(seen["params"]),
            error=clip(error, 2000) if error else None,
            layout=seen["layouts"][0] if seen["layouts"] else "contiguous",
            layouts=tuple(seen["layouts"]),
            digest=seen["digest"],
        )

    if plan.model not in MODELS:
        return send(report(f"the grader has no model {plan.model!r}"))
    if os.environ.get("OMP_NUM_THREADS", "").isdigit():  # as the ranks do (grader/probe/rank.py)
        torch.set_num_threads(max(int(os.environ["OMP_NUM_THREADS"]), 1))
    timeout = datetime.timedelta(seconds=plan.wait_s)
    try:
        await_store(os.environ.get("MASTER_ADDR", "127.0.0.1"), int(os.environ.get("MASTER_PORT", "0") or 0), plan.wait_s)
        dist.init_process_group("gloo", timeout=timeout)
    except Exception as exc:  # noqa: BLE001 - whatever stops the witness is its report
        return send(report(f"it could not join your process group: {explain(exc, plan.wait_s)}"))
    reached("joined")
    records = PeerRecords(plan.peer_records)
    try:
        options = peer_ddp_args(records, plan.wait_s, mirror_all_reduce)
        if isinstance(options, str):
            return send(report(options))
        chosen = DdpOptions(options.find_unused_parameters, options.static_graph, options.gradient_as_bucket_view, options.bucket_cap_mb)
        seen["options"] = chosen
        torch.manual_seed(plan.seed)
        model = MODELS[plan.model](plan.dim, plan.hidden)
        ddp = DistributedDataParallel(model, device_ids=None, **chosen.as_kwargs())
        start = [p.detach().clone() for p in model.parameters()]  # rank 0's, as DDP broadcast them
        counts = {"calls": 0}

        def counted(state, bucket):  # type: ignore[no-untyped-def] # DDP refuses a bucket annotated other than dist.GradBucket
            counts["calls"] += 1
            return allreduce_hook(state, bucket)

        reached("ddp")
        ddp.register_comm_hook(None, counted)
        optimizer = torch.optim.SGD(ddp.parameters(), lr=plan.lr)
        seen["names"] = tuple(name for name, _ in model.named_parameters())
        pieces = torch.arange(plan.rows).tensor_split(max(plan.micro_batches, 1))
        piece_ends = list(itertools.accumulate(len(piece) for piece in pieces))  # where each micro-batch of the shard ends
        passes: list[int] = []  # all-reduces of each backward pass of the step under way
        fed = {"to": 0}  # rows of the shard fed in this step so far
        own: dict[str, Any] = {}  # the witness's rows of every batch, once rank 0's first pass shows the split

        def forward(sync: bool, first: tuple[float, ...] | None) -> None:
            step = len(seen["ends"])
            x, y = global_batch(plan.seed, step, plan.batch_size, plan.dim)
            if len(seen["layouts"]) <= step:  # the step's first pass: which rows are the witness's
                last = seen["layouts"][-1] if seen["layouts"] else None
                # a sampler may shuffle anew in every step (set_epoch); a step recorded without its rows
                # (an input that is no floating-point CPU tensor) keeps the last step's split
                if last is None or (sampler_key(last) is not None and first):
                    layout = layout_of(first, x.double().sum(1).tolist(), plan.batch_size, plan.world_size, plan.seed, step, last)
                    if layout != last:
                        own["rows"] = torch.tensor(shard_rows(layout, plan.batch_size, plan.world_size, rank), dtype=torch.long)
                    last = layout
                seen["layouts"].append(last)
            upto = piece_ends[-1] if sync or len(passes) >= len(piece_ends) else piece_ends[len(passes)]
            mine = own["rows"][fed["to"] : max(upto, fed["to"])]
            fed["to"] = max(upto, fed["to"])
            counts["calls"] = 0
            with nullcontext() if sync else ddp.no_sync():
                loss = torch.nn.functional.mse_loss(ddp(x[mine]), y[mine], reduction="sum") / max(plan.rows, 1)
                loss.backward()
            passes.append(counts["calls"])

        def step() -> None:
            seen["allreduces"].append(tuple(passes))
            if plan.values and len(seen["ends"]) < plan.steps:
                seen["grads"].append(tuple(_values(p.grad) if p.grad is not None else () for p in model.parameters()))
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            seen["ends"].append(time.monotonic())
            passes.clear()
            fed["to"] = 0

        def take(event: DdpForward | AllReduceCall | Optimizer) -> None:
            """Do as rank 0 recorded: a forward pass, an all-reduce of its own, an optimizer step."""
            if isinstance(event, DdpForward):
                forward(event.sync, event.rows)
            elif isinstance(event, AllReduceCall):
                mirror_all_reduce(event)
            else:
                step()

        while len(seen["ends"]) < plan.steps:
            event = records.next((DdpForward, Optimizer, AllReduceCall, Exit, EndState), plan.wait_s)
            taken = len(seen["ends"])
            if isinstance(event, (Exit, EndState)):
                return send(report(f"your rank 0 ended after {taken} of {plan.steps} optimizer steps"))
            if event is None:
                return send(report(
                    f"your rank 0 recorded no forward pass of its DDP and no optimizer step for {plan.wait_s:g} s, after {taken} of {plan.steps} steps: "
                    "was it waiting in a collective other than DDP's all-reduces and dist.all_reduce?"
                ))
            take(event)
        if plan.values:
            seen["params"] = tuple(_values(p) for p in model.parameters())
        seen["digest"] = training_digest(start, model.parameters())
        send(report(None))
        follow(records, take)
    except Exception as exc:  # noqa: BLE001 - whatever stops the witness is its report
        return send(report(explain(exc, plan.wait_s)))
    finally:
        records.close()
    # no destroy_process_group: it talks to the store, which your rank 0 holds and may
    # already have closed (then it waits out the timeout); the witness's exit ends its group


GLOO_LOST = ("Connection closed by peer", "Connection reset by peer", "Broken pipe")


def explain(exc: BaseException, wait_s: float) -> str:
    """A sentence for what stopped the witness in a collective (gloo's own text, cut, after it)."""
    if isinstance(exc, GaveUp):
        return str(exc)
    text = str(exc)
    first = text.strip().splitlines()[0][:240] if text.strip() else type(exc).__name__
    if any(sign in text for sign in GLOO_LOST):
        return "your ranks ended or dropped their connections while it waited in a collective: they did not all-reduce what DDP does in every backward pass"
    if "Timed out" in text or "timeout" in text.lower():
        return f"your ranks made no matching collective within {wait_s:g} s: they did not all-reduce what DDP does in every backward pass"
    return f"{type(exc).__name__}: {first}"


LINGER_QUIET_S = 0.5  # after its report, rank 0 recording nothing this long: the witness meets a final barrier, if any


def follow(records: PeerRecords, take: Callable[[Any], None]) -> None:
    """After the report: keep taking part as rank 0 records (`take` does what a record says), so
    that a script that goes on training (more optimizer steps than asked) is not left waiting
    for the witness, and meet a final `dist.barrier()` (many scripts make one before
    destroy_process_group). Ends when rank 0 destroys its process group or ends, or after a
    barrier; an error ends it quietly (the report is sent)."""
    import torch.distributed as dist

    try:
        while True:
            event = records.next((DdpForward, Optimizer, AllReduceCall, DestroyPg, Exit, EndState), LINGER_QUIET_S)
            if event is None:
                dist.barrier()
                return
            if isinstance(event, (DestroyPg, Exit, EndState)):
                return
            take(event)
    except Exception:  # noqa: BLE001 - the ranks left or did something else: nothing more to report
        return


def run_witness(job: str, rank: int, env: dict[str, str], plan: WitnessPlan, stdout: str, stderr: str) -> None:
    """Become the witness rank: train, send the report through the launcher's pipe (fd 1 of the
    leader), exit; never returns."""
    try:
        channel = os.dup(1)
        os.environ.clear()
        os.environ.update(env)
        for fd, path in ((1, stdout), (2, stderr)):
            target = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW)
            os.dup2(target, fd)
            os.close(target)
        faulthandler.register(signal.SIGUSR1, all_threads=True)  # its stack on the grader's timeout, as a rank's

        def reached(stage: str) -> None:
            os.write(channel, (answer_line(WitnessStage(job=job, stage=stage)) + "\n").encode())

        def send(report: WitnessReport) -> None:
            for line in witness_parts(job, report):
                os.write(channel, line.encode())

        train(plan, rank, reached, send)
    finally:
        os._exit(0)
