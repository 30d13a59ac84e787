"""p5's shape log on the replicas' calls as the recorder writes them: the ways a student prints
a device and a shape pass, a log that does not name this replica's own fails, saying why."""
from __future__ import annotations

import pytest

from grader.checks.dataparallel import replica_log_problem
from grader.probe.recorder.events import Forward, TensorInfo

REPLICA = Forward(
    t=0.0, seq=1, step=0, dur=0.001, module="Net", name=None, label="Net", role="replica", depth=1, call=1,
    has_params=False, replica=True, inputs=(TensorInfo(shape=(22, 10), device="cuda:1"),), devices=None,
)


@pytest.mark.parametrize(
    "writes",
    [
        ["cuda:1", "torch.Size([22, 10])"],  # print(x.device, x.shape): one write per argument
        ["Inside model on device cuda:1, shape: (22, 10)"],
        ["(device(type='cuda', index=1), torch.Size([22, 10]))"],  # print((x.device, x.shape))
        ["replica on cuda:1 got a 22x10 batch"],
        ["device=cuda:1", "shape=[22, 10]"],
    ],
)
def test_the_ways_a_student_prints_device_and_shape_pass(writes: list[str]) -> None:
    assert replica_log_problem(REPLICA, writes) is None


@pytest.mark.parametrize(
    ("writes", "why"),
    [
        ([], "cuda:1 (shape [22, 10]): nothing printed"),
        (["got a batch of 22 rows"], "printed 'got a batch of 22 rows' — print the device x is on (x.device)"),
        (["cuda:1 rows per GPU: [22, 22, 20]"], "— print x.shape (this replica's rows and features)"),
        (["cuda:0 cuda:1 cuda:2 (22, 10) (22, 10) (20, 10)"], "it names cuda:0, cuda:2 too: print this replica's x.device only"),
        (["cuda:1 (22, 10) (20, 10)"], "it names other shapes too: print this replica's x.shape only"),
    ],
)
def test_a_log_that_is_not_this_replicas_fails_and_says_why(writes: list[str], why: str) -> None:
    problem = replica_log_problem(REPLICA, writes)
    assert problem is not None and why in problem, problem
