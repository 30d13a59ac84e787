"""Buggy versions of the p5 reference solution and the checks each must lose."""
from __future__ import annotations

from variants import Variant

DP = "p5_dp.py"
ANSWERS = "answers.yaml"
ALL_CHECKS = ("split_table", "replica_shapes", "dp_wrapped", "shape_log", "timing_table")
LOG = '        print(f"Inside model on device {x.device}, shape: {tuple(x.shape)}", flush=True)\n'

VARIANTS = (
    Variant(
        "dataparallel_not_applied",
        ((DP, "    model = nn.DataParallel(model)  # all visible GPUs\n", "    pass  # never wrapped\n"),),
        frozenset({"replica_shapes", "dp_wrapped"}),
        {
            "replica_shapes": "expected rows 32, 32 on cuda:0, cuda:1 (batch 64 over 2 GPUs), but the model ran unwrapped: rows 64 on cuda:0 — is it wrapped in nn.DataParallel?",
            "dp_wrapped": "the model ran as a plain Net on one device with 2 GPUs visible",
        },
    ),
    Variant(
        "shape_log_missing",
        ((DP, LOG, ""),),
        frozenset({"shape_log"}),
        {"shape_log": "no line naming the device and the shape from inside forward for cuda:0 (shape [22, 512]): nothing printed"},
    ),
    Variant(
        "shape_log_of_a_hard_coded_split_table",
        ((DP, LOG, '        print(f"Inside model on device {x.device}, rows per GPU: [22, 22, 20]", flush=True)\n'),),
        frozenset({"shape_log"}),
        {"shape_log": "cuda:0 (shape [22, 512]): printed 'Inside model on device cuda:0, rows per GPU: [22, 22, 20]' — print x.shape"},
    ),
    Variant(
        "model_left_on_the_cpu",
        ((DP, "model = model.to(device)\n", ""),),
        frozenset({"replica_shapes", "dp_wrapped", "shape_log"}),
        {
            "dp_wrapped": "the model's parameters are on cpu, expected cuda:0",
            "replica_shapes": "raised RuntimeError: module must have its parameters and buffers on device cuda:0 (device_ids[0]) but found one of them on device: cpu",
        },
    ),
    Variant(
        "wrong_split_table",
        ((ANSWERS, "  3: [22, 22, 20]", "  3: [21, 21, 22]"),),
        frozenset({"split_table"}),
        {"split_table": "3 GPUs: [21, 21, 22] is not how a batch of 64 is split"},
    ),
    Variant(
        "speedup_not_from_own_times",
        ((ANSWERS, "  speedup: 0.75", "  speedup: 1.9"),),
        frozenset({"timing_table"}),
        {"timing_table": "speedup 1.9 does not match your own times: 0.41 / 0.55 = 0.745"},
    ),
    Variant(
        "answers_not_yaml",
        ((ANSWERS, "  5: [13, 13, 13, 13, 12]", "  5: [13, 13, 13, 13, 12\n  oops: {"),),
        frozenset({"split_table", "timing_table"}),
        {"split_table": "answers.yaml is not valid YAML (line"},
    ),
)


# Correct, written other ways than the reference: each keeps every point.
SHOW_INPUT = """class ShowInput(nn.Module):
    \"\"\"Prints what reaches it: the first layer of the model, so every replica's chunk.\"\"\"

    def forward(self, x):
        print(f"{x.device} {list(x.shape)}", flush=True)
        return x


class Net(nn.Module):
"""

UNUSUAL_VARIANTS = (
    Variant("shape_log_with_several_print_arguments", ((DP, LOG, "        print(x.device, x.shape)\n"),), frozenset()),
    Variant(  # the print in a child module of the replica, not in the model's own forward
        "shape_log_from_a_child_module",
        ((DP, LOG, ""), (DP, "class Net(nn.Module):\n", SHOW_INPUT), (DP, "nn.Sequential(nn.Linear(in_features, hidden)", "nn.Sequential(ShowInput(), nn.Linear(in_features, hidden)")),
        frozenset(),
    ),
    Variant(  # rows × features in words, written without print
        "shape_log_in_words_with_sys_stdout_write",
        ((DP, LOG, '        sys.stdout.write(f"replica {x.device}: {x.shape[0]} samples x {x.shape[1]} features\\n")\n'),),
        frozenset(),
    ),
)
