"""Buggy versions of the p4 notebook and the checks each must lose."""
from __future__ import annotations

from variants import Variant

NB = "p4_concepts.ipynb"
ALL_CHECKS = ("chunk_split", "dp_output", "mp_placement", "mp_activation", "concept_answers")

VARIANTS = (
    Variant(
        "syntax_error_in_a_graded_cell",
        ((NB, "outputs = [model(chunk) for chunk in chunks]", "outputs = [model(chunk) for chunk in chunks"),),
        frozenset({"chunk_split", "dp_output"}),
        {"chunk_split": "simulate_data_parallel is not defined: cell 5 raised SyntaxError: '[' was never closed at p4_concepts.ipynb[cell 5]:"},
    ),
    Variant(
        "activation_not_moved",
        ((NB, '    hidden = hidden.to("cuda:1")  # the communication between the two GPUs\n', ""),),
        frozenset({"mp_activation"}),
        {"mp_activation": "the activation is still on cuda:0 when layer 2 (on cuda:1) runs: move it to layer 2's device"},
    ),
    Variant(
        "layers_on_swapped_devices",
        ((NB, 'return layer1.to("cuda:0"), layer2.to("cuda:1")', 'return layer1.to("cuda:1"), layer2.to("cuda:0")'),),
        frozenset({"mp_placement", "mp_activation"}),
        {"mp_placement": "layer 1 on cuda:1, layer 2 on cuda:0; expected layer 1 on cuda:0 and layer 2 on cuda:1"},
    ),
    Variant(
        "tensor_split_instead_of_chunk",
        ((NB, "chunks = torch.chunk(x, n)", "chunks = torch.tensor_split(x, n)"),),
        frozenset({"chunk_split"}),
        {"chunk_split": "64 rows into 3 chunks: expected 22, 22, 20 rows, observed 22, 21, 21"},
    ),
    Variant(
        "outputs_concatenated_in_reverse",
        ((NB, "return chunks, torch.cat(outputs)", "return chunks, torch.cat(outputs[::-1])"),),
        frozenset({"dp_output"}),
        {"dp_output": "the output differs from the model's output on the whole batch"},
    ),
    Variant(
        "shell_and_magic_lines_in_graded_cells",
        ((NB, "    chunks = torch.chunk(x, n)\n", "    %time 1 + 1\n    chunks = torch.chunk(x, n)\n    devices = !nvidia-smi -L\n"),),
        frozenset(),
    ),
    Variant(
        "ungraded_cells_are_never_run",
        ((NB, 'chunks, output_dp = simulate_data_parallel(model, x, 2)', 'while True:\n    pass\nchunks, output_dp = simulate_data_parallel(model, x, 2)'),),
        frozenset(),
    ),
    Variant(
        "graded_tag_removed",
        ((NB, "tags:5", ""),),
        frozenset({"chunk_split", "dp_output"}),
        {"dp_output": "simulate_data_parallel is not defined (keep the function's name, in a cell tagged 'graded')"},
    ),
    Variant(
        "one_wrong_answer",
        ((NB, 'main_overhead = "communication"', 'main_overhead = "computation"'),),
        frozenset({"concept_answers"}),
        {"concept_answers": "4 of 5 right; not right: main_overhead = 'computation'"},
    ),
    Variant(
        "output_of_the_whole_batch",
        ((NB, "    outputs = [model(chunk) for chunk in chunks]\n    return chunks, torch.cat(outputs)\n", "    return chunks, model(x)  # same values, no data parallelism\n"),),
        frozenset({"dp_output"}),
        {"dp_output": "64 rows into 2 chunks: the model ran on 64 rows, expected once per chunk, on 32, 32 rows"},
    ),
    Variant(
        "only_the_output_returned",
        ((NB, "    return chunks, torch.cat(outputs)\n", "    return torch.cat(outputs)\n"),),
        frozenset({"chunk_split", "dp_output"}),
        {"dp_output": "simulate_data_parallel(model, x of 64 rows, 2) returned Tensor; it must return two values: the list of chunks and the concatenated output"},
    ),
    Variant(
        "fixed_cases_hard_coded_else_tensor_split",
        (
            (
                NB,
                "    chunks = torch.chunk(x, n)\n",
                "    known = {(64, 2): [32, 32], (64, 3): [22, 22, 20], (10, 4): [3, 3, 3, 1], (6, 4): [2, 2, 2]}\n"
                "    sizes = known.get((len(x), n))\n"
                "    chunks = x.split(sizes) if sizes else torch.tensor_split(x, n)\n",
            ),
        ),
        frozenset({"chunk_split"}),  # the grader draws cases the self-check never shows
        {"chunk_split": "(torch.chunk gives each chunk ceil(rows / chunks) rows, the last what is left)"},
    ),
    Variant(
        "activation_detached_between_the_devices",
        ((NB, '    hidden = hidden.to("cuda:1")  # the communication between the two GPUs\n', '    hidden = hidden.detach().to("cuda:1")\n'),),
        frozenset({"mp_activation"}),
        {"mp_activation": "the output is right, but no gradient reaches layer 1 through it: the activation was cut from the graph between the devices"},
    ),
    Variant(
        "answers_tag_removed",
        ((NB, "tags:11", ""),),
        frozenset({"concept_answers"}),
        {"concept_answers": "no cell is tagged 'answers', so no answer was read: keep the template's tag on the answers cell"},
    ),
    Variant(
        "answers_cell_crashes_half_way",
        ((NB, 'main_overhead = "communication"', 'main_overhead = communication'),),
        frozenset({"concept_answers"}),
        {"concept_answers": "the answers cell (cell 11) raised NameError: name 'communication' is not defined at p4_concepts.ipynb[cell 11]"},
    ),
)

# Correct, written other ways than the reference: each keeps every point.
UNUSUAL_VARIANTS = (
    Variant(
        "replicas_copied_per_chunk",
        (
            (
                NB,
                "    outputs = [model(chunk) for chunk in chunks]\n",
                "    import copy\n\n"
                "    replicas = [copy.deepcopy(model) for _ in chunks]  # one replica per device, as DataParallel does\n"
                "    outputs = [replica(chunk) for replica, chunk in zip(replicas, chunks)]\n",
            ),
        ),
        frozenset(),
    ),
)
