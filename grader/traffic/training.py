"""Data-parallel training as the grader's hub saw it: which all-reduces carried each step's
gradients, what they delivered, and what each rank contributed.

The grader recomputes each step itself (a `Workload`: the template's model on the grading's
data) and reads the hub's record of the ranks' all-reduces (grader.traffic.report). Step k is
data-parallel training when, after step k-1's reductions:

  * some all-reduces deliver, between them, every parameter's full-batch gradient at the
    step's parameters, times one scale (a mean or a summed loss; averaged by DDP or summed by
    hand): `locate` finds each parameter's gradient in them by its values, whatever the
    bucket layout;
  * what each rank sent to them (summed over the step's reductions of those buckets, earlier
    micro-batches' included) differs from the other ranks' exactly as its shard's gradient
    differs from theirs: each rank computed the gradient of its own equal share of the batch,
    not of nothing. (Every rank's the whole batch's is a step too, on the whole batch: the
    training is single-process training's, and only the split is wrong, batch_shard's verdict.)

"The step's parameters" are single-process training's (`at_reference`), or else, where its
records claim other parameters before the step (a script whose update differs), those: a claim
fits only if every rank sent the gradients of exactly those parameters, which takes the work.
"Its shard" is the rows the rank's records say it fed, where they form an equal split of the
batch, else each layout a correct script may use (grader.traffic.shards). Records only choose
what is tried: nothing passes that the traffic does not show.

What a step cannot show is whether the update after the last step was applied; the checks
say where they rest on records for it (grader.checks.distributed).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Iterator, Mapping, Protocol, Sequence

from grader.probe.transport.traffic import TrafficReport
from grader.traffic.locate import Located, floor, locate
from grader.traffic.report import Reduction, kept_tensors, others, reductions
from grader.traffic.shards import SHARD_LAYOUTS, WHOLE_BATCH, shard_rows

if TYPE_CHECKING:  # torch comes with the data: the grader's command line starts without it
    import torch

Params = Mapping[str, "torch.Tensor"]  # parameter name -> values, flat float64


class Workload(Protocol):
    """The grader's own computation of a data-parallel run (grader.practicals.reference)."""

    names: tuple[str, ...]
    world: int
    batch_size: int
    steps: int

    def gradient(self, theta: Params, step: int, rows: Sequence[int]) -> dict[str, torch.Tensor]:
        """The mean loss's gradient over `rows` of step `step`'s batch at parameters `theta`."""

    def gradients(self, theta: Params, step: int, rows: Sequence[int]) -> list[dict[str, torch.Tensor]]:
        """`gradient` first, then what else float32's rounding may make of it (a ReLU input
        near zero on its other side)."""

    def parameters(self, used: Sequence[Sequence[int]]) -> Params:
        """Single-process training's parameters after len(used) steps, step i on rows used[i]."""


@dataclass(frozen=True)
class Claims:
    """What the ranks' records say, to choose what is tried (never believed on its own)."""

    rows: Mapping[int, Mapping[int, tuple[int, ...]]] = field(default_factory=dict)  # rank -> step -> the rows it fed
    params: Mapping[int, Params] = field(default_factory=dict)  # step -> rank 0's parameters before it
    own: Mapping[int, Mapping[int, Params]] = field(default_factory=dict)  # rank -> step -> its parameters before it (ranks that drifted apart)


@dataclass(frozen=True)
class StepSeen:
    """One training step in the traffic."""

    step: int
    syncs: tuple[int, ...]  # positions in the report of the all-reduces that carried its gradients
    final: tuple[int, ...]  # those of them that delivered the whole of it
    scale: float  # what they delivered = scale × the full-batch gradient
    rows: tuple[tuple[int, ...], ...]  # each rank's shard, as its contribution shows
    layout: str  # "records" (the rows the ranks' records name) or a layout of grader.traffic.shards
    at_reference: bool  # at single-process training's parameters
    end: float  # the hub's clock when its last sync was delivered
    rtol: float = 1e-4  # the tolerance it was found with (more where a comm hook sent float16)


@dataclass(frozen=True)
class TrainingSeen:
    """Every step the traffic shows, and why it shows no more (None: all of them)."""

    steps: tuple[StepSeen, ...]
    problem: str | None
    others: tuple[str, ...]  # the other operations, described (a loss all-reduced for the log, a barrier, ...)
    reductions: int  # all-reduces of floating-point values in all
    shards_wrong: bool = False  # the problem: the full-batch gradient arrived, but not every rank sent its shard's
    cut: str | None = None  # why the steps stop where the hub kept no more data (its plan's keep_bytes): a timed launch's usual end
    started: bool = False  # rank 0 broadcast the model's initial parameters before the first step (as DDP does when it is built)

    def syncs_per_step(self) -> list[int]:
        return [len(step.syncs) for step in self.steps]

    @property
    def whole_batch(self) -> bool:
        """Some step's contributions were every rank's gradient of the whole batch."""
        return any(step.layout == WHOLE_BATCH for step in self.steps)


@dataclass(frozen=True)
class _Try:
    rows: tuple[tuple[int, ...], ...]
    layout: str
    theta: Params
    at_reference: bool


def _equal_split(rows: Sequence[Sequence[int]], batch: int, world: int) -> bool:
    want = batch // world
    flat = [r for shard in rows for r in shard]
    return len(rows) == world and all(len(shard) == want for shard in rows) and len(set(flat)) == len(flat) and all(0 <= r < batch for r in flat)


def _shards(workload: Workload, claims: Claims, step: int) -> list[tuple[tuple[tuple[int, ...], ...], str]]:
    """The splits to try for a step: the records' (when an equal split), then every layout, then
    the whole batch on every rank (not a split: batch_shard's concern, not the training's)."""
    world, batch = workload.world, workload.batch_size
    tried = []
    recorded = tuple(claims.rows.get(rank, {}).get(step, ()) for rank in range(world))
    if _equal_split(recorded, batch, world):
        tried.append((recorded, "records"))
    for layout in SHARD_LAYOUTS:
        split = tuple(tuple(shard_rows(layout, batch, world, rank)) for rank in range(world))
        if all(split != known for known, _ in tried):
            tried.append((split, layout))
    if world > 1:
        tried.append(((tuple(range(batch)),) * world, WHOLE_BATCH))
    return tried


def _mean(grads: Sequence[Mapping[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    import torch

    return {name: torch.stack([g[name] for g in grads]).mean(0) for name in grads[0]}


@dataclass(frozen=True)
class _Scan:
    located: dict[str, tuple[int, Located]]  # name -> (index in the reductions, where)
    final: list[int]
    sizes: dict[str, int]  # name -> its gradient's size
    rtol: float  # the tolerance its coarsest reduction allows (a float16 comm hook's rounding)

    @property
    def first(self) -> int:
        return self.final[0]

    @property
    def last(self) -> int:
        return self.final[-1]

    @property
    def scale(self) -> float:
        return next(iter(self.located.values()))[1].scale


def _scan(reds: Sequence[Reduction], start: int, full: Mapping[str, torch.Tensor], rtol: float) -> _Scan | None:
    """The reductions from `start` that deliver every parameter of `full` (one scale for all);
    None when they never do."""
    located: dict[str, tuple[int, Located]] = {}
    final: list[int] = []
    scale = None
    for index in range(start, len(reds)):
        red = reds[index]
        if len(located) == len(full):
            break  # the step is whole: a one-element gradient would fit some value of the next by chance
        if not red.kept:
            continue
        here = locate(red.delivered, full, tolerance(red, rtol), scale=scale)
        if scale is None and here:
            scale = next(iter(here.values())).scale
        if not here:
            continue
        located.update({name: (index, at) for name, at in here.items()})
        final.append(index)
    if len(located) < len(full) or not final:
        return None
    return _Scan(located, final, {name: want.numel() for name, want in full.items()}, max(tolerance(reds[i], rtol) for i in final))


def tolerance(red: Reduction, rtol: float) -> float:
    """The relative tolerance for what `red` carried: `rtol`, or where its type is coarser
    (DDP's fp16_compress_hook sends float16) what rounding to it allows, summed over the ranks."""
    return max(rtol, 16 * red.roundoff)


def _contributions(reds: Sequence[Reduction], scan: _Scan, start: int, ranks: Sequence[int], first: Mapping[str, int] | None = None) -> tuple[dict[int, dict[str, torch.Tensor]], list[int]]:
    """What each rank sent towards each parameter in the step: in the reduction that delivered
    it, and in the earlier ones of the same size since `start` that delivered nothing whole (a
    sync per micro-batch, each a part of the step's gradient); and the positions of every
    reduction that counted. Each parameter lies where the delivering reduction has it, but in
    the first earlier one where `first` (name -> offset) says: DDP builds its buckets anew
    after its first backward pass, in another order."""
    sizes = {reds[i].numel for i in scan.final}
    earlier = [i for i in range(start, scan.first) if reds[i].kept and reds[i].numel in sizes]
    sent: dict[int, dict[str, torch.Tensor]] = {rank: {} for rank in ranks}
    for name, (index, at) in scan.located.items():
        for i in [*earlier, index]:
            if reds[i].numel != reds[index].numel:
                continue
            offset = first[name] if first is not None and earlier and i == earlier[0] else at.offset
            for rank in ranks:
                piece = reds[i].summed(rank)[offset : offset + scan.sizes[name]]
                sent[rank][name] = sent[rank].get(name, 0) + piece
    return sent, sorted({*earlier, *scan.final})


def _orders(sizes: Mapping[str, int]) -> list[dict[str, int] | None]:
    """The layouts to try for a step's first earlier reduction: the delivering one's, then the
    parameters one after the other in their order and in reverse (DDP's buckets before it
    rebuilds them)."""
    tried: list[dict[str, int] | None] = [None]
    for names in (list(sizes), list(reversed(sizes))):
        offsets, at = {}, 0
        for name in names:
            offsets[name] = at
            at += sizes[name]
        tried.append(offsets)
    return tried


def _per_rank(sent: Mapping[int, Mapping[str, torch.Tensor]], shards: Sequence[Mapping[str, torch.Tensor]], scale: float, ranks: Sequence[int], rtol: float, atol: float) -> str | None:
    """Why what a rank sent is not its shard's gradient (each rank's deviation from the ranks'
    mean, against its shard's deviation from theirs, at the delivered scale); None when all are."""
    world = len(ranks)
    if world < 2:
        return None
    atol = max(atol, max(floor(shard, rtol) for shard in shards))  # a bias's sum of terms near zero keeps their float32 error
    for name in shards[0]:
        mean_sent = sum(sent[r][name] for r in ranks) / world
        mean_shard = sum(s[name] for s in shards) / world
        for position, rank in enumerate(ranks):
            want = (scale / world) * (shards[position][name] - mean_shard)
            got = sent[rank][name] - mean_sent
            bound = rtol * abs(scale / world) * float(shards[position][name].norm()) + atol * abs(scale) * got.numel() ** 0.5
            if float((got - want).norm()) > bound:
                return f"rank {rank} sent {_what(sent[rank][name], shards, position, scale, world)} for `{name}`"
    return None


def _what(sent: torch.Tensor, shards: Sequence[Mapping[str, torch.Tensor]], position: int, scale: float, world: int) -> str:
    """What a rank's contribution looks like, for the message: its shard's gradient, the whole batch's, or neither."""
    name = next(n for n in shards[0] if shards[0][n].numel() == sent.numel())
    whole = (scale / world) * sum(s[name] for s in shards) / world
    if float(whole.norm()) and float((sent - whole).norm()) <= 1e-3 * float(whole.norm()):
        return "the gradient of the whole batch, not of its shard"
    if float(sent.norm()) == 0.0:
        return "zeros"
    return "something other than its shard's gradient"


def analyse(report: TrafficReport, workload: Workload, claims: Claims = Claims(), rtol: float = 1e-4, atol: float = 1e-7, steps: int | None = None) -> TrainingSeen:
    """The steps of data-parallel training the traffic shows (the module docstring), up to
    `steps` (the workload's by default)."""
    reds = [r for r in reductions(report) if len(r.sent) == workload.world or not r.kept]
    ranks = list(range(workload.world))
    seen: list[StepSeen] = []
    used: list[tuple[int, ...]] = []
    start = 0
    problem, shards_wrong, cut = None, False, None
    for step in range(workload.steps if steps is None else steps):
        reference = workload.parameters(used)
        thetas = _thetas(reference, claims, step, workload.world)
        outcome = _step(reds, start, step, thetas, _shards(workload, claims, step), workload, ranks, rtol, atol)
        if isinstance(outcome, _Miss):
            if outcome.unkept:
                cut = f"{outcome.why} (it kept the first {report.kept_bytes / 2**20:.3g} MiB of the floating-point data your ranks sent)"
                if not seen:  # not one step in what it kept: nothing to time or judge by
                    problem = cut
            else:
                problem, shards_wrong = outcome.why, outcome.shards
            break
        seen.append(outcome)
        used.append(tuple(sorted({r for shard in outcome.rows for r in shard})))
        start = max(outcome.syncs) + 1
    first = reds[seen[0].syncs[0]].position if seen else len(report.carried)
    started = _broadcast_start(report, first, workload.parameters([]), rtol)
    used_positions = [reds[i].position for s in seen for i in s.syncs]
    return TrainingSeen(tuple(_positions(seen, reds)), problem, others(report, used_positions), len(reds), shards_wrong, cut, started)


def _broadcast_start(report: TrafficReport, before: int, initial: Params, rtol: float) -> bool:
    """Whether rank 0 broadcast every initial parameter (as it is before any step) before
    position `before`: what DistributedDataParallel does when it is built."""
    missing = {name: values for name, values in initial.items() if bool(values.abs().max() > 0)}  # zeros fit anywhere: nothing to find
    for carried in report.carried[:before]:
        if carried.kind == "broadcast" and carried.root == 0 and not carried.error:
            data = kept_tensors(carried, 0)
            if data is not None:
                for name in locate(data, missing, rtol, scale=1.0):
                    missing.pop(name)
    return not missing


def _positions(seen: Sequence[StepSeen], reds: Sequence[Reduction]) -> list[StepSeen]:
    """The steps with their reductions named by their positions in the report."""
    return [replace(s, syncs=tuple(reds[i].position for i in s.syncs), final=tuple(reds[i].position for i in s.final)) for s in seen]


MAX_ROUNDINGS = 16  # combinations of the ranks' shard gradients tried (`_roundings`)


def _roundings(options: Sequence[Sequence[Params]]) -> Iterator[list[Params]]:
    """Each rank's shard gradient as the grader computes it, then the other combinations of
    what float32's rounding may make of each (Workload.gradients), up to MAX_ROUNDINGS."""
    yield from (list(choice) for choice in itertools.islice(itertools.product(*options), MAX_ROUNDINGS))


@dataclass(frozen=True)
class _Miss:
    why: str
    shards: bool = False  # the full-batch gradient arrived, but some rank did not send its shard's
    unkept: bool = False  # what is left was not kept by the hub: nothing to judge by


def _thetas(reference: Params, claims: Claims, step: int, world: int) -> list[tuple[tuple[Params, ...], bool]]:
    """The parameters each rank may have computed step `step`'s gradient at, each choice with
    whether it is single-process training's: the reference's; rank 0's as its records claim them
    (a script whose update differs); each rank's own claim (ranks whose parameters drifted apart:
    the gradients are still synchronised, the parameters are not)."""
    tried = [((reference,) * world, True)]
    if step in claims.params:
        tried.append(((claims.params[step],) * world, False))
    if world > 1 and any(step in claims.own.get(rank, {}) for rank in range(world)):
        tried.append((tuple(_latest(claims.own.get(rank, {}), step, reference) for rank in range(world)), False))
    return tried


def _latest(own: Mapping[int, Params], step: int, otherwise: Params) -> Params:
    """A rank's parameters before `step` as its records claim them: after its last update before
    it (a rank that skipped an update kept its parameters), or `otherwise` where none is claimed."""
    earlier = [s for s in own if s <= step]
    return own[max(earlier)] if earlier else otherwise


def _step(reds: Sequence[Reduction], start: int, step: int, thetas: Sequence[tuple[tuple[Params, ...], bool]], splits: Sequence[tuple[tuple[tuple[int, ...], ...], str]], workload: Workload, ranks: Sequence[int], rtol: float, atol: float) -> StepSeen | _Miss:
    """Step `step` as the reductions from `start` show it, or why they do not."""
    delivered_but = None
    for theta, at_reference in thetas:
        for rows, layout in splits:
            for shards in _roundings([workload.gradients(theta[position], step, shard) for position, shard in enumerate(rows)]):
                full = _mean(shards)
                scan = _scan(reds, start, full, rtol)
                if scan is None:
                    continue
                for first in _orders(scan.sizes):
                    sent, counted = _contributions(reds, scan, start, ranks, first)
                    wrong = _per_rank(sent, shards, scan.scale, ranks, scan.rtol, atol)
                    if not wrong or len(counted) == len(scan.final):
                        break
                if wrong:
                    delivered_but = delivered_but or f"step {step}: your ranks' all-reduces delivered the full-batch gradient, but {wrong}"
                    continue
                return StepSeen(step, tuple(counted), tuple(scan.final), scan.scale, rows, layout, at_reference, reds[scan.last].at, scan.rtol)
    if delivered_but:
        return _Miss(delivered_but, shards=True)
    left = [r for r in reds[start:] if r.kept]
    if any(not r.kept for r in reds[start:]):  # the data ran out (the plan's keep_bytes) before the step was whole
        kept = f"none of the {len(left)} all-reduce(s) of yours that the grader's hub kept from here on delivered the full-batch gradient at the step's parameters" if left else "the grader's hub kept none of your all-reduces from here on"
        return _Miss(f"step {step}: {kept}", unkept=True)
    if not left:
        return _Miss(f"step {step}: your ranks made no all-reduce that could carry its gradients" + (" (none at all)" if not reds else f" after step {step - 1}'s" if step else ""))
    return _Miss(f"step {step}: none of your ranks' {len(left)} all-reduce(s) from here on delivered the full-batch gradient at the step's parameters")


def delivers(report: TrafficReport, full: Mapping[str, torch.Tensor], rtol: float = 1e-4) -> bool:
    """Whether some all-reduces of `report` deliver every gradient of `full` (one scale for all):
    a diagnosis, for a gradient the grader computes another way (a convention a script got wrong)."""
    return _scan(reductions(report), 0, full, rtol) is not None


def step_ends(report: TrafficReport, seen: TrainingSeen, steps: int) -> tuple[float, ...] | str:
    """When each of `steps` steps ended by the hub's clock: the delivery of its last gradient
    all-reduce. The steps `seen` shows give theirs; each later step is the next all-reduces
    that, together, reduce as many values as the last seen step's did (every gradient, once
    per bucket and per sync), passing over those that would reduce more (a loss for the log
    between them): DDP may group the buckets anew after a step, never the gradients' total."""
    if not seen.steps:
        return "no step's gradients were found in what the ranks all-reduced"
    reds = reductions(report)
    at = {red.position: index for index, red in enumerate(reds)}
    target = sum(reds[at[position]].numel for position in seen.steps[-1].syncs)
    return _sized_steps(reds, target, at[seen.steps[-1].syncs[-1]] + 1, [step.end for step in seen.steps], steps)


def sized_step_ends(report: TrafficReport, workload: Workload, steps: int | None = None) -> tuple[float, ...] | str:
    """When each of `steps` (the workload's by default) steps of a launch of the grader's own
    code (a reference solution's timed launch, of which the hub keeps no data) ended by the
    hub's clock: each step is the all-reduces that together reduce every gradient of the
    workload's model once, as step_ends finds the steps after those it saw."""
    numel = sum(values.numel() for values in workload.parameters(()).values())
    return _sized_steps(reductions(report), numel, 0, [], steps or workload.steps)


def _sized_steps(reds: list[Reduction], target: int, index: int, ends: list[float], steps: int) -> tuple[float, ...] | str:
    """`ends` and the ends of the next steps up to `steps`, each the next all-reduces from
    `index` on that reduce `target` values together (step_ends, `_next_step`)."""
    while len(ends) < steps:
        found = _next_step(reds, target, index)
        if found is None:
            return f"step {len(ends)}: your ranks made no more all-reduces of the size of a step's gradients ({len(ends)} of {steps} steps found)"
        index = found
        ends.append(reds[index - 1].at)
    return tuple(ends)


BETWEEN_STEPS = 16  # all-reduces that may come before a step's first (a loss reduced for the log, a metric): `_next_step`


def _next_step(reds: list[Reduction], target: int, index: int) -> int | None:
    """Where the next step's all-reduces end (the index after its last): the earliest end of
    the all-reduces that reduce `target` values together, counted from `index` or from one of
    the BETWEEN_STEPS after it, passing over those that would reduce more. Counted only from
    `index`, a loss all-reduced for the log after each step's gradients was counted in, and
    the next step's gradients, then too many, passed over (a correct p6 that logs its mean
    loss could not be timed); None where no start reaches `target`."""
    best = None
    for start in range(index, min(index + BETWEEN_STEPS + 1, len(reds))):
        if best is not None and start >= best:
            break
        total, at = 0, start
        while at < len(reds) and total < target and (best is None or at < best):
            if total + reds[at].numel <= target:
                total += reds[at].numel
            at += 1
        if total == target:
            best = at
    return best


def whole_syncs(report: TrafficReport, numel: int) -> int:
    """How many all-reduces of floating-point values summed `numel` values (the size of every
    gradient of the model together: DDP's one bucket), whatever they held: how often gradients
    were synchronised, where their values show no training to follow."""
    return sum(1 for red in reductions(report) if red.numel == numel)
