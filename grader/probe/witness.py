"""The grader's witness: a rank of the submission's job that runs the grader's code, not the
student's, so that what it sees is something the submission cannot write.

Mechanism: the job leader forks it like any rank (grader/probe/zygote.py), as the last rank of
the run. It joins the process group the launcher's environment names, waits for the
submission's rank 0 to announce its DDP options (the recorder's `ddp_args` event, written
before DDP's first collective: options such as find_unused_parameters change which collectives
DDP makes, and the witness must make the same ones), builds the template's model in a DDP of
its own with those options, and trains on its shard of the grader's data. What the collectives
deliver to it is the average of every rank's contribution: it equals the grader's full-batch
gradient only if the submission's ranks really computed their shards' gradients and sent them
in backward. Its communication hook counts the all-reduces of each backward pass; its own
clock times each step, and in a synchronous all-reduce it waits for the slowest rank.

What protects it: it is forked from the launcher, which is not dumpable, so processes of the
submission (the same uid in the same sandbox) can neither read nor write its memory nor open
its descriptors (and ptrace is refused by the sandbox's seccomp filter); its report goes to
the grader through the launcher's pipe, which the ranks do not hold. A submission can kill
it or starve it: then no report arrives, and the checks that need one fail.
"""
from __future__ import annotations

import base64
import datetime
import faulthandler
import math
import os
import signal
import socket
import time
import zlib
from typing import Any, Callable

from grader.probe.events import AllReduce, Backward, DamagedRecords, DdpArgs, EndState, Exit, Optimizer, parse_line
from grader.probe.messages import WITNESS_PART_CHARS, WitnessPart, WitnessPlan, WitnessReport, WitnessStage, answer_line, witness_report_line
from grader.probe.typed import clip

PEER_READ_BYTES = 4 << 20  # of the submission's event file, while looking for its DDP options
POLL_S = 0.02
# events of rank 0 that come after DDP is built, in a script that builds one: seen first, there is none
WITHOUT_DDP = {Backward: "ran backward", AllReduce: "all-reduced", Optimizer: "took an optimizer step", Exit: "ended", EndState: "ended"}


def global_batch(seed: int, step: int, batch_size: int, dim: int) -> Any:
    """The templates' global batch of one step: x, y ~ N(0, 1) from a generator seeded with
    seed * 1000 + step (the grader's reference training uses it too)."""
    import torch

    g = torch.Generator().manual_seed(seed * 1000 + step)
    return torch.randn(batch_size, dim, generator=g), torch.randn(batch_size, 1, generator=g)


def template_mlp(dim: int, hidden: int) -> Any:
    """The model of the data-parallel templates."""
    from torch import nn

    return nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, 1))


def peer_ddp_args(path: str, wait_s: float) -> DdpArgs | str:
    """The first DDP options the submission's rank 0 announced in its event file, waiting up to
    `wait_s`; or why none will come: the time passed, or rank 0 already trains (or ended)
    without DDP. The file is the submission's to write: lines that are not events the recorder
    writes are passed over (a forged line can only make the witness give up sooner)."""
    deadline = time.monotonic() + wait_s
    done = 0  # bytes of whole lines already read
    while True:
        try:
            with open(path, "rb") as handle:
                handle.seek(done)
                lines = handle.read(max(PEER_READ_BYTES - done, 0)).split(b"\n")[:-1]  # a last line without its end is still being written
        except OSError:
            lines = []
        done += sum(len(line) + 1 for line in lines)
        for line in lines:
            try:
                event = parse_line(line)
            except DamagedRecords:
                continue
            if isinstance(event, DdpArgs):
                return event
            if isinstance(event, tuple(WITHOUT_DDP)):
                return f"your rank 0 {WITHOUT_DDP[type(event)]} without DistributedDataParallel"
        if time.monotonic() >= deadline:
            return f"your rank 0 built no DistributedDataParallel within {wait_s:g} s of joining the process group"
        time.sleep(POLL_S)


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


def train(plan: WitnessPlan, rank: int, reached: Callable[[str], None]) -> WitnessReport:
    """Join the job's process group and train as the plan says; the report of what was seen
    (with `error` set when something stopped it)."""
    import torch
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
    from torch.nn.parallel import DistributedDataParallel

    seen: dict[str, Any] = {"options": {}, "allreduces": [], "ends": [], "grads": [], "names": (), "params": ()}

    def report(error: str | None) -> WitnessReport:
        return WitnessReport(
            rank=rank,
            ddp_options=seen["options"],
            allreduces=tuple(seen["allreduces"]),
            step_ends=tuple(seen["ends"]),
            names=tuple(seen["names"]),
            grads=tuple(seen["grads"]),
            params=tuple(seen["params"]),
            error=clip(error, 2000) if error else None,
        )

    if os.environ.get("OMP_NUM_THREADS", "").isdigit():  # as the ranks do (grader/probe/rank.py)
        torch.set_num_threads(max(int(os.environ["OMP_NUM_THREADS"]), 1))
    timeout = datetime.timedelta(seconds=plan.wait_s)
    try:
        await_store(os.environ.get("MASTER_ADDR", "127.0.0.1"), int(os.environ.get("MASTER_PORT", "0") or 0), plan.wait_s)
        dist.init_process_group("gloo", timeout=timeout)
    except Exception as exc:  # noqa: BLE001 - whatever stops the witness is its report
        return report(f"it could not join your process group: {explain(exc, plan.wait_s)}")
    reached("joined")
    try:
        options = peer_ddp_args(plan.peer_records, plan.wait_s)
        if isinstance(options, str):
            return report(options)
        chosen = {"find_unused_parameters": options.find_unused_parameters, "static_graph": options.static_graph, "gradient_as_bucket_view": options.gradient_as_bucket_view}
        if options.bucket_cap_mb is not None and math.isfinite(options.bucket_cap_mb) and options.bucket_cap_mb > 0:
            chosen["bucket_cap_mb"] = options.bucket_cap_mb
        seen["options"] = {key: str(value) for key, value in chosen.items()}
        torch.manual_seed(plan.seed)
        model = template_mlp(plan.dim, plan.hidden)
        ddp = DistributedDataParallel(model, device_ids=None, **chosen)
        counts = {"calls": 0}

        def counted(state, bucket):  # type: ignore[no-untyped-def] # DDP refuses a bucket annotated other than dist.GradBucket
            counts["calls"] += 1
            return allreduce_hook(state, bucket)

        reached("ddp")
        ddp.register_comm_hook(None, counted)
        optimizer = torch.optim.SGD(ddp.parameters(), lr=plan.lr)
        names = [name for name, _ in model.named_parameters()]
        seen["names"] = tuple(names)
        rows = slice(plan.first_row, plan.first_row + plan.rows)
        for step in range(plan.steps):
            x, y = global_batch(plan.seed, step, plan.batch_size, plan.dim)
            loss = torch.nn.functional.mse_loss(ddp(x[rows]), y[rows])
            optimizer.zero_grad(set_to_none=True)
            counts["calls"] = 0
            loss.backward()
            seen["allreduces"].append(counts["calls"])
            if plan.values:
                seen["grads"].append(tuple(_values(p.grad) if p.grad is not None else () for p in model.parameters()))
            optimizer.step()
            seen["ends"].append(time.monotonic())
        if plan.values:
            seen["params"] = tuple(_values(p) for p in model.parameters())
        # no destroy_process_group: it talks to the store, which your rank 0 holds and may
        # already have closed (then it waits out the timeout); the witness's exit ends its group
        return report(None)
    except Exception as exc:  # noqa: BLE001 - whatever stops the witness is its report
        return report(explain(exc, plan.wait_s))


GLOO_LOST = ("Connection closed by peer", "Connection reset by peer", "Broken pipe")


def explain(exc: BaseException, wait_s: float) -> str:
    """A sentence for what stopped the witness in a collective (gloo's own text, cut, after it)."""
    text = str(exc)
    first = text.strip().splitlines()[0][:240] if text.strip() else type(exc).__name__
    if any(sign in text for sign in GLOO_LOST):
        return "your ranks ended or dropped their connections while it waited in a collective: they did not all-reduce what DDP does in every backward pass"
    if "Timed out" in text or "timeout" in text.lower():
        return f"your ranks made no matching collective within {wait_s:g} s: they did not all-reduce what DDP does in every backward pass"
    return f"{type(exc).__name__}: {first}"


def linger() -> None:
    """Meet a final barrier of the submission's ranks, if they make one (many scripts do before
    destroy_process_group); when they make none, their exit ends it. The report is sent by then."""
    import torch.distributed as dist

    try:
        dist.barrier()
    except Exception:  # noqa: BLE001 - the ranks left without a barrier: nothing more to see
        pass


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

        outcome = train(plan, rank, reached)
        for line in witness_parts(job, outcome):
            os.write(channel, line.encode())
        if outcome.error is None:
            linger()
    finally:
        os._exit(0)
