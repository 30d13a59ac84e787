"""grader/traffic on hand-made traffic: finding gradients by their values, and where the data
the hub kept runs out."""
from __future__ import annotations

from dataclasses import replace

import torch
from observations import FakeWorkload, _part, contiguous, ddp_traffic

from grader.probe.transport.traffic import Part
from grader.traffic.locate import Located, locate
from grader.traffic.training import analyse, sized_step_ends


def test_a_one_element_gradient_is_found_beside_its_bucket_neighbour_not_where_a_value_matches_by_chance() -> None:
    """Before the bucket that holds the weight and the bias, another value lies within rtol of
    the bias's gradient by chance: the bias is the element next to the weight."""
    generator = torch.Generator().manual_seed(3)
    weight = torch.randn(4000, generator=generator, dtype=torch.float64)
    bias = torch.tensor([0.4321], dtype=torch.float64)
    other = torch.randn(5, generator=generator, dtype=torch.float64)
    other[2] = 0.43211  # within 1e-4 of the bias, not its place
    delivered = torch.cat([other, weight, bias]).to(torch.float32).double()  # not where the usual layouts look
    found = locate(delivered, {"weight": weight, "bias": bias}, rtol=1e-4)
    assert found["weight"].offset == 5 and found["bias"].offset == 4005


def test_without_a_neighbour_the_closest_value_wins() -> None:
    weight = torch.linspace(1.0, 2.0, 300, dtype=torch.float64)
    bias = torch.tensor([0.5], dtype=torch.float64)
    delivered = torch.cat([weight, torch.tensor([9.0, 0.50004, 7.0, 0.5000001, 8.0], dtype=torch.float64)])
    found = locate(delivered, {"weight": weight, "bias": bias}, rtol=1e-4)
    assert found["bias"].offset == 303


def _cut_from(report, position: int):
    """`report` as the hub sends it when its keep_bytes ran out at carried operation `position`."""
    carried = tuple(c if c.index < position or c.kind != "all_reduce" else replace(c, members=tuple(Part(p.rank, p.at, p.inputs, "", p.sums) for p in c.members)) for c in report.carried)
    return replace(report, carried=carried, kept_bytes=3 << 20)


def test_steps_stop_where_the_kept_data_ends_and_no_step_at_all_is_a_problem() -> None:
    workload = FakeWorkload(2, steps=3)
    report = ddp_traffic(workload, contiguous(2))  # a broadcast, then one all-reduce per step
    whole = analyse(report, workload)
    assert len(whole.steps) == 3 and whole.problem is None and whole.cut is None
    cut = analyse(_cut_from(report, 3), workload)  # steps 0 and 1 kept (operations 1 and 2), step 2 only by its size
    assert len(cut.steps) == 1 + 1 and cut.problem is None
    assert cut.cut == "step 2: the grader's hub kept none of your all-reduces from here on (it kept the first 3 MiB of the floating-point data your ranks sent)"
    nothing = analyse(_cut_from(report, 0), workload)
    assert not nothing.steps and nothing.problem == nothing.cut and nothing.cut.startswith("step 0: the grader's hub kept none")


def test_a_step_is_whole_once_every_gradient_is_found_and_later_values_do_not_move_it() -> None:
    """A loss all-reduced for the log after step 0 that equals, by chance, step 0's one-element
    gradient (each rank sent half of it, not its shard's part) does not take its place: step 0
    was whole before it."""
    workload = FakeWorkload(2, steps=2)
    report = ddp_traffic(workload, contiguous(2))
    bias = analyse(report, workload)
    full = workload.gradient(workload.parameters([]), 0, range(64))["0.bias"]
    first = next(i for i, c in enumerate(report.carried) if c.kind == "all_reduce")
    log = replace(report.carried[first], index=first + 1, members=tuple(_part(rank, [full / 2], 0.15) for rank in range(2)))
    later = tuple(replace(c, index=c.index + 1) for c in report.carried[first + 1 :])
    logged = replace(report, carried=(*report.carried[: first + 1], log, *later))
    seen = analyse(logged, workload)
    assert bias.problem is None and seen.problem is None, seen.problem
    assert [len(step.syncs) for step in seen.steps] == [1, 1]
    assert any("all_reduce" in other for other in seen.others), seen.others


def test_a_gradient_near_zero_keeps_the_float32_error_of_its_terms() -> None:
    """A bias's gradient that sums its rows' terms to -2.05e-5 arrives as -2.056e-5 (measured:
    p6 in one process, a DistributedSampler's order): off by 1e-3 of itself, 1e-7 of a typical
    element; it is found."""
    weight = torch.linspace(-0.05, 0.05, 2048, dtype=torch.float64)
    bias = torch.tensor([-2.0541041e-05], dtype=torch.float64)
    delivered = torch.cat([torch.tensor([-2.0563602e-05], dtype=torch.float64), weight])
    assert locate(delivered, {"weight": weight, "bias": bias}, rtol=1e-4) == {"weight": Located(1, 1.0), "bias": Located(0, 1.0)}
    assert "bias" not in locate(delivered, {"weight": weight, "bias": bias * 2}, rtol=1e-4)


def test_steps_found_by_their_sizes_pass_over_a_loss_all_reduced_for_the_log_after_each() -> None:
    """A timed launch's steps beyond those the hub kept are found by their all-reduces' sizes: a
    loss averaged over the ranks after each step's gradients (one float) is passed over, and
    every step ends at its gradients' all-reduce (counted from the loss, the next step's
    gradients were too many and a correct p6 could not be timed)."""
    workload = FakeWorkload(2, steps=4)
    report = ddp_traffic(workload, contiguous(2), logged_loss=True)
    ends = sized_step_ends(report, workload)
    assert isinstance(ends, tuple) and all(abs(end - (0.1 * (step + 1) + 0.01)) < 1e-9 for step, end in enumerate(ends)) and len(ends) == 4, ends  # each at its gradients' all-reduce, none at a loss's
    assert sized_step_ends(report, workload, 5) == "step 4: your ranks made no more all-reduces of the size of a step's gradients (4 of 5 steps found)"


def test_a_relu_input_rounding_puts_on_the_other_side_of_its_kink_is_taken_either_way() -> None:
    """p10's first stage, one sample's input to one ReLU unit 1e-7 above zero in float64 (as a
    timed launch met it: the rank's float32 micro-batch had it at -5.2e-8, so the unit passed no
    gradient): the rank's gradient is among the workload's `gradients`, not its `gradient` (27
    times the tolerance off: the launch could not be timed); an input 1e-3 from zero has one side."""
    from grader.practicals.reference import DataParallelWorkload, template_two_stage

    workload = DataParallelWorkload(lambda: template_two_stage(8, 16), {"seed": 5, "batch_size": 8, "dim": 8, "hidden": 16, "steps": 1, "lr": 0.1}, 2)
    x, _ = workload.batch(0)
    rows = (4, 5, 6, 7)
    for gap, sides in ((1e-7, 2), (1e-3, 1)):
        theta = dict(workload.parameters([]))
        weight = theta["stage1.0.weight"].reshape(16, 8)
        bias = theta["stage1.0.bias"].clone()
        bias[3] = gap - float(x[7].double() @ weight[3])  # sample 7, unit 3: `gap` above the kink
        theta["stage1.0.bias"] = bias
        rank = workload.gradient({**theta, "stage1.0.bias": bias - 2 * gap * (torch.arange(16) == 3)}, 0, rows)  # the unit on the other side for sample 7
        others = [g for g in workload.gradients(theta, 0, rows) if float((g["stage1.0.weight"] - rank["stage1.0.weight"]).norm()) < 1e-6]
        default = workload.gradient(theta, 0, rows)
        assert len(workload.gradients(theta, 0, rows)) == sides
        assert bool(others) == (sides == 2) and float((default["stage1.0.weight"] - rank["stage1.0.weight"]).norm()) > 1e-4
