"""An independent corpus for p4 (the concepts notebook), written from the requirements only
(assignment.yaml's check titles, the README's check table, the notebook's TODOs): buggy
submissions and cheats with the checks they must lose, and correct submissions written in
other idioms, which must lose nothing."""
from __future__ import annotations

from variants import Variant

NB = "p4_concepts.ipynb"
ALL = frozenset({"chunk_split", "dp_output", "mp_placement", "mp_activation", "concept_answers"})

# the solution's code, as the edits find it
SPLIT = "    chunks = torch.chunk(x, n)\n    outputs = [model(chunk) for chunk in chunks]\n    return chunks, torch.cat(outputs)"
CHUNK_LINE = "    chunks = torch.chunk(x, n)\n"
CAT_LINE = "    return chunks, torch.cat(outputs)"
PLACE = '    return layer1.to("cuda:0"), layer2.to("cuda:1")'
FWD = '    hidden = layer1(x)\n    hidden = hidden.to("cuda:1")  # the communication between the two GPUs\n    return layer2(hidden)'
MOVE = '    hidden = hidden.to("cuda:1")  # the communication between the two GPUs'


def v(name: str, edits: list[tuple[str, str]], loses: set[str] | frozenset[str] = frozenset()) -> Variant:
    return Variant(name, tuple((NB, old, new) for old, new in edits), frozenset(loses))


BUGGY = (
    # --- TODO 1: the split --------------------------------------------------------------
    v("tensor_split_instead_of_chunk", [(CHUNK_LINE, "    chunks = torch.tensor_split(x, n)\n")], {"chunk_split"}),
    v("split_size_n_instead_of_n_chunks", [(CHUNK_LINE, "    chunks = torch.split(x, n)\n")], {"chunk_split"}),
    v("floor_sizes_remainder_in_last", [(CHUNK_LINE,
        "    size = x.shape[0] // n\n"
        "    sizes = [size] * (n - 1) + [x.shape[0] - size * (n - 1)]\n"
        "    chunks = torch.split(x, sizes)\n")], {"chunk_split"}),
    v("always_two_chunks", [(CHUNK_LINE, "    chunks = torch.chunk(x, 2)\n")], {"chunk_split"}),
    v("hardcoded_selfcheck_sizes", [(CHUNK_LINE,
        "    known = {(64, 2): [32, 32], (64, 3): [22, 22, 20], (10, 4): [3, 3, 3, 1], (6, 4): [2, 2, 2]}\n"
        "    if (x.shape[0], n) in known:\n"
        "        chunks = torch.split(x, known[(x.shape[0], n)])\n"
        "    else:\n"
        "        chunks = torch.tensor_split(x, n)\n")], {"chunk_split"}),
    v("chunk_along_features", [(CHUNK_LINE, "    chunks = torch.chunk(x, n, dim=1)\n")], {"chunk_split", "dp_output"}),
    v("returns_output_then_chunks", [(CAT_LINE, "    return torch.cat(outputs), chunks")], {"chunk_split", "dp_output"}),
    v("stack_then_reshape_breaks_on_uneven", [(CAT_LINE, "    return chunks, torch.stack(outputs).reshape(-1, outputs[0].shape[1])")],
      {"chunk_split", "dp_output"}),
    v("graded_tag_lost_on_dp_cell", [("tags:5", "")], {"chunk_split", "dp_output"}),
    # --- TODO 1: the outputs --------------------------------------------------------------
    v("whole_batch_output_cheat", [(SPLIT, "    chunks = torch.chunk(x, n)\n    return chunks, model(x)")], {"dp_output"}),
    v("chunks_run_but_whole_batch_returned", [(CAT_LINE, "    return chunks, model(x)")], {"dp_output"}),
    v("sanity_check_on_whole_batch_inside", [(CAT_LINE,
        "    output = torch.cat(outputs)\n"
        "    assert torch.allclose(output, model(x), atol=1e-5)\n"
        "    return chunks, output")], {"dp_output"}),
    v("outputs_concatenated_in_reverse", [(CAT_LINE, "    return chunks, torch.cat(outputs[::-1])")], {"dp_output"}),
    # uneven chunks cannot be concatenated along the features: the call raises, so nothing is split
    v("outputs_concatenated_along_dim1", [(CAT_LINE, "    return chunks, torch.cat(outputs, dim=1)")], {"chunk_split", "dp_output"}),
    v("inputs_concatenated_not_outputs", [(CAT_LINE, "    return chunks, torch.cat(chunks)")], {"dp_output"}),
    v("model_run_on_other_chunks_cheat", [("    outputs = [model(chunk) for chunk in chunks]",
        "    outputs = [model(chunk) for chunk in torch.chunk(x, 2)]")], {"dp_output"}),
    v("whole_batch_through_forward_method_cheat", [(CAT_LINE, "    return chunks, model.forward(x)")], {"dp_output"}),
    v("whole_batch_through_model_copy_cheat", [(CAT_LINE, "    import copy\n    return chunks, copy.deepcopy(model)(x)")], {"dp_output"}),
    # --- TODO 2: placement ---------------------------------------------------------------
    v("layers_swapped", [(PLACE, '    return layer1.to("cuda:1"), layer2.to("cuda:0")')], {"mp_placement", "mp_activation"}),
    v("both_layers_on_cuda0", [(PLACE, '    return layer1.to("cuda:0"), layer2.to("cuda:0")')], {"mp_placement", "mp_activation"}),
    v("layer1_left_on_cpu", [(PLACE, '    return layer1, layer2.to("cuda:1")')], {"mp_placement", "mp_activation"}),
    # --- TODO 3: the forward -------------------------------------------------------------
    v("activation_not_moved", [(FWD, "    return layer2(layer1(x))")], {"mp_activation"}),
    v("activation_detached", [(MOVE, '    hidden = hidden.detach().to("cuda:1")')], {"mp_activation"}),
    v("activation_through_python_list", [(MOVE, '    hidden = torch.tensor(hidden.tolist(), device="cuda:1")')], {"mp_activation"}),
    v("relu_added_between_layers", [("    return layer2(hidden)", "    return layer2(torch.relu(hidden))")], {"mp_activation"}),
    v("layer2_pulled_to_cuda0_cheat", [(FWD,
        '    hidden = layer1(x)\n    out = layer2.to("cuda:0")(hidden)\n    return out.to("cuda:1")')], {"mp_activation"}),
    v("layer1_moved_to_cuda1_inside_forward_cheat", [(FWD, '    return layer2(layer1.to("cuda:1")(x.to("cuda:1")))')], {"mp_activation"}),
    v("layer1_run_without_grad", [("    hidden = layer1(x)\n", "    with torch.no_grad():\n        hidden = layer1(x)\n")], {"mp_activation"}),
    # --- answers -------------------------------------------------------------------------
    v("overhead_answered_memory", [('main_overhead = "communication"', 'main_overhead = "memory"')], {"concept_answers"}),
    v("data_and_model_swapped", [('easier_to_implement = "data"', 'easier_to_implement = "model"'),
                                 ('helps_large_model = "model"', 'helps_large_model = "data"')], {"concept_answers"}),
    v("tensor_split_answer_for_10_by_4", [("chunks_of_10_by_4 = [3, 3, 3, 1]", "chunks_of_10_by_4 = [3, 3, 2, 2]")], {"concept_answers"}),
    v("floor_split_answer_for_64_by_3", [("chunks_of_64_by_3 = [22, 22, 20]", "chunks_of_64_by_3 = [21, 21, 22]")], {"concept_answers"}),
    v("answers_tag_lost", [("tags:11", "")], {"concept_answers"}),
    v("answers_cell_raises", [('main_overhead = "communication"', "main_overhead = communication")], {"concept_answers"}),
    v("answers_left_empty", [('easier_to_implement = "data"', 'easier_to_implement = ""'),
                             ('helps_large_model = "model"', 'helps_large_model = ""'),
                             ('main_overhead = "communication"', 'main_overhead = ""'),
                             ("chunks_of_64_by_3 = [22, 22, 20]", "chunks_of_64_by_3 = []"),
                             ("chunks_of_10_by_4 = [3, 3, 3, 1]", "chunks_of_10_by_4 = []")], {"concept_answers"}),
)

CORRECT = (
    v("chunk_as_tensor_method", [(CHUNK_LINE, "    chunks = x.chunk(n, dim=0)\n")]),
    v("explicit_loop_with_append", [("    outputs = [model(chunk) for chunk in chunks]",
        "    outputs = []\n    for i in range(len(chunks)):\n        out = model(chunks[i])\n        outputs.append(out)")]),
    v("manual_ceil_slicing", [(CHUNK_LINE,
        "    import math\n"
        "    size = math.ceil(x.shape[0] / n)\n"
        "    chunks = [x[i:i + size] for i in range(0, x.shape[0], size)]\n")]),
    v("split_with_ceil_size", [(CHUNK_LINE, "    chunks = torch.split(x, -(-x.size(0) // n))\n")]),
    v("concat_with_torch_concat", [(CAT_LINE, "    return chunks, torch.concat(outputs, dim=0)")]),
    v("vstack_of_mapped_outputs", [(SPLIT,
        "    chunks = torch.chunk(x, n)\n    return chunks, torch.vstack(list(map(model, chunks)))")]),
    v("model_copied_per_chunk", [("    outputs = [model(chunk) for chunk in chunks]",
        "    import copy\n    outputs = [copy.deepcopy(model)(chunk) for chunk in chunks]")]),
    v("self_test_in_graded_cell", [(CAT_LINE, CAT_LINE + "\n\n\n"
        "_chunks, _out = simulate_data_parallel(nn.Linear(4, 2), torch.randn(10, 4), 4)\n"
        "print('self-test:', [len(c) for c in _chunks], tuple(_out.shape))")]),
    v("cuda_method_with_int_ids", [(PLACE, "    return layer1.cuda(0), layer2.cuda(1)"),
                                   (MOVE, "    hidden = hidden.cuda(1)")]),
    v("int_device_ids_in_to", [(PLACE, "    return layer1.to(0), layer2.to(1)"), (MOVE, "    hidden = hidden.to(1)")]),
    v("torch_device_objects_and_weight_device", [(PLACE,
        '    return layer1.to(torch.device("cuda", 0)), layer2.to(device=torch.device("cuda:1"))'),
        (MOVE, "    hidden = hidden.to(layer2.weight.device)")]),
    v("one_liner_with_parameter_device", [(FWD, "    return layer2(layer1(x).to(next(layer2.parameters()).device))")]),
    v("non_blocking_copy", [(MOVE, '    hidden = hidden.to("cuda:1", non_blocking=True)')]),
    v("place_in_place_then_return", [(PLACE,
        '    layer1.to("cuda:0")\n    layer2.to("cuda:1")\n    return layer1, layer2')]),
    v("plain_cuda_for_layer1", [(PLACE, '    return layer1.to("cuda"), layer2.to("cuda:1")')]),
    v("activation_staged_through_cpu", [(MOVE, '    hidden = hidden.cpu().to("cuda:1")')]),
    v("chunks_cloned_before_use", [(CHUNK_LINE, "    chunks = [c.clone() for c in torch.chunk(x, n)]\n")]),
    v("shell_line_in_graded_cell", [(PLACE, "    !nvidia-smi\n" + PLACE)]),
    v("answers_other_casing_and_words", [('easier_to_implement = "data"', 'easier_to_implement = "Data parallelism"'),
                                         ('helps_large_model = "model"', 'helps_large_model = " Model "'),
                                         ('main_overhead = "communication"', 'main_overhead = "COMMUNICATION"')]),
    v("answers_computed_with_torch_chunk", [
        ("chunks_of_64_by_3 = [22, 22, 20]", "chunks_of_64_by_3 = [len(c) for c in torch.chunk(torch.arange(64), 3)]"),
        ("chunks_of_10_by_4 = [3, 3, 3, 1]", "chunks_of_10_by_4 = [c.shape[0] for c in torch.arange(10).chunk(4)]")]),
    v("answers_as_tuples", [("chunks_of_64_by_3 = [22, 22, 20]", "chunks_of_64_by_3 = (22, 22, 20)"),
                            ("chunks_of_10_by_4 = [3, 3, 3, 1]", "chunks_of_10_by_4 = (3, 3, 3, 1)")]),
)

CORPUS = BUGGY + CORRECT
