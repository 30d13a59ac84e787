"""An independent corpus for p5 (nn.DataParallel), written from the requirements only
(assignment.yaml's check titles, the README's check table, the TODOs of p5_dp.py and
answers.yaml): buggy submissions and cheats with the checks they must lose, and correct
submissions written in other idioms, which must lose nothing. The checks that need real GPUs
(gpu_step_times, gpu0_memory, scaling) are deferred on this machine and never lost here."""
from __future__ import annotations

from variants import Variant

PY = "p5_dp.py"
ANS = "answers.yaml"
RUNS = frozenset({"replica_shapes", "dp_wrapped", "shape_log"})  # the checks graded on the script's runs

# the solution's code, as the edits find it
PRINT = '        print(f"Inside model on device {x.device}, shape: {tuple(x.shape)}", flush=True)'
DEVICE = 'device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")'
MOVE = "model = model.to(device)"
WRAP = "if torch.cuda.device_count() > 1:\n    model = nn.DataParallel(model)  # all visible GPUs"
STEP_X = "    x = torch.randn(batch_size, in_features, device=device)\n"
LOSS = "    loss = loss_fn(model(x), y)\n"
NET = "class Net(nn.Module):\n"
LAYERS = "self.layers = nn.Sequential(nn.Linear(in_features, hidden), nn.ReLU(), nn.Linear(hidden, classes))"
INIT = "        super().__init__()\n"
FORWARD = "        return self.layers(x)"
# a module of the replica's own that reports what reaches it (each case writes its print into it)
TAP = "class Tap(nn.Module):\n    def forward(self, x):\n{report}\n        return x\n\n\n" + NET

# answers.yaml, as the edits find it
T_SINGLE = "    step_time: 0.0042  # TEMPLATE: step_time:\n    total_time: 0.41  # TEMPLATE: total_time:"
T_DP = ("    gpus: 2  # TEMPLATE: gpus:\n    step_time: 0.0061  # TEMPLATE: step_time:\n"
        "    total_time: 0.55  # TEMPLATE: total_time:")
SPEEDUP = "  speedup: 0.75  #"
S2 = "  2: [32, 32]"
S3 = "  3: [22, 22, 20]"
S5 = "  5: [13, 13, 13, 13, 12]"


def v(name: str, edits: list[tuple[str, str, str]], loses: set[str] | frozenset[str] = frozenset()) -> Variant:
    return Variant(name, tuple(edits), frozenset(loses))


BUGGY = (
    # --- TODO 1: the device ----------------------------------------------------------------
    v("model_left_on_cpu", [(PY, DEVICE, 'device = torch.device("cpu")')], RUNS),
    v("model_on_cuda1", [(PY, DEVICE, 'device = torch.device("cuda:1" if torch.cuda.is_available() else "cpu")')], RUNS),
    # --- TODO 2: the wrap -------------------------------------------------------------------
    v("never_wrapped", [(PY, WRAP, "pass  # DataParallel: later")], {"replica_shapes", "dp_wrapped"}),
    v("wrapped_copy_never_used_cheat", [(PY, WRAP, "dp_model = nn.DataParallel(model)  # wrapped (but the loop uses model)")],
      {"replica_shapes", "dp_wrapped"}),
    v("wrap_only_above_two_gpus", [(PY, WRAP, "if torch.cuda.device_count() > 2:\n    model = nn.DataParallel(model)")],
      {"replica_shapes", "dp_wrapped"}),
    v("device_ids_hardcoded_two", [(PY, WRAP, "if torch.cuda.device_count() > 1:\n    model = nn.DataParallel(model, device_ids=[0, 1])")],
      {"replica_shapes"}),
    v("device_ids_hardcoded_three", [(PY, WRAP, "if torch.cuda.device_count() > 1:\n    model = nn.DataParallel(model, device_ids=[0, 1, 2])")],
      {"replica_shapes", "dp_wrapped"}),
    v("batch_split_by_hand_before_dp", [(PY, LOSS,
        "    outputs = [model(part) for part in x.chunk(max(torch.cuda.device_count(), 1))]\n"
        "    loss = loss_fn(torch.cat(outputs), y)\n")], {"replica_shapes"}),
    # --- TODO 3: the print ------------------------------------------------------------------
    v("print_in_training_loop_not_forward", [(PY, PRINT, ""), (PY, STEP_X,
        STEP_X + '    print(f"Inside model on device {x.device}, shape: {tuple(x.shape)}", flush=True)\n')], {"shape_log"}),
    v("print_hardcoded_device", [(PY, PRINT, '        print(f"Inside model on device cuda:0, shape: {tuple(x.shape)}", flush=True)')], {"shape_log"}),
    v("print_shape_only", [(PY, PRINT, '        print(f"Inside model, shape: {tuple(x.shape)}", flush=True)')], {"shape_log"}),
    v("print_device_only", [(PY, PRINT, '        print(f"Inside model on device {x.device}", flush=True)')], {"shape_log"}),
    v("print_global_batch_size_as_shape", [(PY, PRINT,
        '        print(f"Inside model on device {x.device}, shape: ({batch_size}, {in_features})", flush=True)')], {"shape_log"}),
    v("print_only_on_first_gpu", [(PY, PRINT, "        if x.device.index in (None, 0):\n    " + PRINT)], {"shape_log"}),
    # a replica's print from a child module, of the hidden activations (chunk × 1024), not the input chunk
    v("child_module_prints_hidden_activation_shape", [(PY, PRINT, ""),
        (PY, NET, TAP.format(report='        print(f"Inside model on device {x.device}, shape: {tuple(x.shape)}", flush=True)')),
        (PY, LAYERS, "self.layers = nn.Sequential(nn.Linear(in_features, hidden), nn.ReLU(), Tap(), nn.Linear(hidden, classes))")], {"shape_log"}),
    v("print_computed_chunk_rows_cheat", [(PY, PRINT,
        '        print(f"Inside model on device {x.device}, shape: ({-(-batch_size // max(torch.cuda.device_count(), 1))}, {x.shape[1]})", flush=True)')],
      {"shape_log"}),
    v("fake_replica_log_printed_by_loop_cheat", [(PY, PRINT, ""), (PY, LOSS, LOSS +
        "    for i, part in enumerate(x.chunk(max(torch.cuda.device_count(), 1))):\n"
        '        print(f"Inside model on device cuda:{i}, shape: {tuple(part.shape)}", flush=True)\n')], {"shape_log"}),
    # --- answers.yaml: the split table ---------------------------------------------------------
    v("split_3_floor_remainder_last", [(ANS, S3, "  3: [21, 21, 22]")], {"split_table"}),
    v("split_3_tensor_split_style", [(ANS, S3, "  3: [22, 21, 21]")], {"split_table"}),
    v("split_5_small_chunk_first", [(ANS, S5, "  5: [12, 13, 13, 13, 13]")], {"split_table"}),
    v("split_5_sums_to_65", [(ANS, S5, "  5: [13, 13, 13, 13, 13]")], {"split_table"}),
    v("split_2_whole_batch_on_gpu0", [(ANS, S2, "  2: [64]")], {"split_table"}),
    v("answers_yaml_broken_bracket", [(ANS, S3, "  3: [22, 22, 20")], {"split_table", "timing_table"}),
    # --- answers.yaml: the timing table --------------------------------------------------------
    v("speedup_inverted", [(ANS, SPEEDUP, "  speedup: 1.34  #")], {"timing_table"}),
    v("speedup_claimed_ideal_cheat", [(ANS, SPEEDUP, "  speedup: 2.0  #")], {"timing_table"}),
    # README: speedup = single total time / DataParallel total time (here 0.745), not the step times' ratio (0.5)
    v("speedup_from_step_times", [(ANS, T_SINGLE, "    step_time: 0.004\n    total_time: 0.41"),
                                  (ANS, T_DP, "    gpus: 2\n    step_time: 0.008\n    total_time: 0.55"),
                                  (ANS, SPEEDUP, "  speedup: 0.5  #")], {"timing_table"}),
    v("dp_step_time_left_blank", [(ANS, "    step_time: 0.0061  # TEMPLATE: step_time:", "    step_time:")], {"timing_table"}),
    v("gpus_left_blank", [(ANS, "    gpus: 2  # TEMPLATE: gpus:", "    gpus:")], {"timing_table"}),
    v("timing_all_zeros", [(ANS, T_SINGLE, "    step_time: 0\n    total_time: 0"),
                           (ANS, T_DP, "    gpus: 2\n    step_time: 0\n    total_time: 0"),
                           (ANS, SPEEDUP, "  speedup: 0  #")], {"timing_table"}),
)

CORRECT = (
    v("model_cuda_method", [(PY, MOVE, "if torch.cuda.is_available():\n    model = model.cuda()")]),
    v("to_without_assignment", [(PY, MOVE, "model.to(device)")]),
    v("device_plain_cuda_string", [(PY, DEVICE, 'device = "cuda" if torch.cuda.is_available() else "cpu"')]),
    v("wrap_then_move", [(PY, MOVE, ""), (PY, WRAP, WRAP + "\nmodel = model.to(device)")]),
    v("explicit_device_ids_and_output_device", [(PY, WRAP,
        "if torch.cuda.device_count() > 1:\n"
        "    model = nn.DataParallel(model, device_ids=list(range(torch.cuda.device_count())), output_device=0)")]),
    v("wrap_condition_at_least_two", [(PY, WRAP, "n_gpus = torch.cuda.device_count()\nif n_gpus >= 2:\n    model = nn.DataParallel(model)")]),
    v("always_wrapped", [(PY, WRAP, "model = nn.DataParallel(model)")]),
    v("print_several_arguments", [(PY, PRINT, '        print("device:", x.device, "input shape:", x.shape)')]),
    v("print_size_method", [(PY, PRINT, '        print(f"[forward] {x.device} {x.size()}")')]),
    v("print_percent_format", [(PY, PRINT, '        print("replica on %s got input %s" % (x.device, list(x.shape)))')]),
    # (a replica's parameters() is empty in DataParallel: its weights are plain attributes)
    v("print_replica_weight_device", [(PY, PRINT,
        "        print('device', self.layers[0].weight.device, 'shape', tuple(x.shape), flush=True)")]),
    v("print_current_cuda_device", [(PY, PRINT,
        '        print(f"on cuda:{torch.cuda.current_device()} input {tuple(x.shape)}", flush=True)')]),
    v("dataparallel_imported_from_parallel", [(PY, WRAP,
        "from torch.nn.parallel import DataParallel as DP\nif torch.cuda.device_count() > 1:\n"
        "    model = DP(model, device_ids=range(torch.cuda.device_count()))")]),
    # the replica's print from a module nested two levels down, first in the model
    v("print_in_a_nested_child_module", [(PY, PRINT, ""),
        (PY, NET, TAP.format(report='        print("tap:", x.device, tuple(x.shape))')),
        (PY, LAYERS, "self.layers = nn.Sequential(nn.Sequential(Tap(), nn.Linear(in_features, hidden)), nn.ReLU(), nn.Linear(hidden, classes))")]),
    # a child module the forward calls by name, which writes the shape in words without print
    v("child_module_writes_rows_and_features_in_words", [(PY, PRINT, ""),
        (PY, NET, TAP.format(report='        sys.stdout.write("replica on " + str(x.device) + " got " + str(x.size(0)) + " rows by " + str(x.size(1)) + " features\\n")')),
        (PY, INIT, INIT + "        self.report = Tap()\n"),
        (PY, FORWARD, "        return self.layers(self.report(x))")]),
    # logging (to stdout), the shape in words
    v("logging_in_forward_in_words", [(PY, "import sys\n", "import logging\nimport sys\n"),
        (PY, PRINT, '        logging.getLogger("p5").warning("on %s: a chunk of %d samples with %d features", x.device, x.shape[0], x.shape[1])'),
        (PY, "model = Net()", 'logging.basicConfig(stream=sys.stdout, format="%(message)s")\nmodel = Net()')]),
    v("split_table_block_lists", [(ANS, S3, "  3:\n    - 22\n    - 22\n    - 20"),
                                  (ANS, S5, "  5: [13,13,13,13,12]  # the last GPU gets the rest")]),
    v("times_in_exponent_notation", [(ANS, T_SINGLE, "    step_time: 5e-3\n    total_time: 0.41"),
                                     (ANS, T_DP, "    gpus: 2\n    step_time: 6.1e-3\n    total_time: 0.55")]),
    v("speedup_more_decimals", [(ANS, SPEEDUP, "  speedup: 0.7454  #")]),
    v("faster_with_dp_consistent", [(ANS, T_SINGLE, "    step_time: 0.008\n    total_time: 0.82"),
                                    (ANS, T_DP, "    gpus: 3\n    step_time: 0.005\n    total_time: 0.5"),
                                    (ANS, SPEEDUP, "  speedup: 1.64  #")]),
    v("integer_seconds", [(ANS, T_SINGLE, "    step_time: 1\n    total_time: 3"),
                          (ANS, T_DP, "    gpus: 2\n    step_time: 1\n    total_time: 2"),
                          (ANS, SPEEDUP, "  speedup: 1.5  #")]),
)

CORPUS = BUGGY + CORRECT
