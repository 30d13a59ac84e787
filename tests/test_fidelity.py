"""Virtual GPUs against what real CUDA does: the programs of fidelity/cases.py must give the
observations and errors known from PyTorch's sources and from measurements on GPUs
(shared/notes/facts.md). The same expectations are checked on a real GPU when there is one."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import ROOT

CASES = Path(__file__).parent / "fidelity" / "cases.py"
SAME_DEVICE = "Expected all tensors to be on the same device"


def checked(argument: str, device: str, common: str, method: str) -> str:
    """CUDA's message when a kernel that checks its arguments one by one meets one on another device."""
    return (
        f"{SAME_DEVICE}, but got {argument} is on {device}, different from other tensors on {common} "
        f"(when checking argument in method {method})"
    )


# case -> the observation ("value") or the error type and how its message starts (one of several ways)
EXPECTED: dict[str, dict] = {
    # DataParallel scatters with torch.chunk: ceil(B/n) rows, the last smaller, maybe fewer chunks
    "dataparallel_64_over_2": {"value": [["cuda:0", 32], ["cuda:1", 32], ["output", "cuda:0", [64, 3]]]},
    "dataparallel_64_over_3": {"value": [["cuda:0", 22], ["cuda:1", 22], ["cuda:2", 20], ["output", "cuda:0", [64, 3]]]},
    "dataparallel_64_over_5": {"value": [["cuda:0", 13], ["cuda:1", 13], ["cuda:2", 13], ["cuda:3", 13], ["cuda:4", 12], ["output", "cuda:0", [64, 3]]]},
    "dataparallel_6_over_4_uses_3": {"value": [["cuda:0", 2], ["cuda:1", 2], ["cuda:2", 2], ["output", "cuda:0", [6, 3]]]},
    "dataparallel_10_over_4": {"value": [["cuda:0", 3], ["cuda:1", 3], ["cuda:2", 3], ["cuda:3", 1], ["output", "cuda:0", [10, 3]]]},
    "dataparallel_1_over_2": {"value": [["cuda:0", 1], ["output", "cuda:0", [1, 3]]]},
    "dataparallel_matches_one_device": {"value": [True, True, "cuda:0"]},
    "dataparallel_needs_the_model_on_device_0": {"error": "RuntimeError", "message": "module must have its parameters and buffers on device cuda:0 (device_ids[0]) but found one of them on device: cpu"},
    "mixing_two_gpus": {"error": "RuntimeError", "message": SAME_DEVICE},
    "linear_on_gpu_input_on_cpu": {"error": "RuntimeError", "message": checked("mat1", "cpu", "cuda:0", "wrapper_CUDA_addmm")},
    "cpu_scalar_with_gpu_tensor": {"value": "cuda:0"},
    # current CUDA builds raise torch.AcceleratorError (a RuntimeError) for CUDA's own errors
    "device_ordinal_out_of_range": {"error": "AcceleratorError", "message": "CUDA error: invalid device ordinal"},
    "set_device_out_of_range": {"error": "AcceleratorError", "message": "CUDA error: invalid device ordinal"},
    "numpy_of_a_gpu_tensor": {"error": "TypeError", "message": "can't convert cuda:0 device type tensor to numpy"},
    "placement_and_current_device": {
        "value": {
            "x": "cpu",
            "y": ["cuda:1", True, 1],
            "z": "cuda:0",
            "params": ["cuda:1"],
            "output": "cuda:1",
            "current": ["cuda:1", 0],
            "back": ["cpu", -1],
            "repr": True,
        }
    },
    "model_parallel_needs_the_move": {"value": ["cuda:1", [5, 2], "same-device error"]},
    "optimizer_over_two_devices": {"value": [["cuda:0", "cuda:1"], ["cuda:0", "cuda:1"]]},
    "memory_statistics": {"value": [True, True, True, True]},
    "memory_counted_in_the_caching_allocators_blocks": {"value": [[16 << 20, 12 << 20, 1024], True]},
    "memory_of_ddp_buckets_and_gradients": {"value": [True, True]},
    "memory_of_fsdp1_shards": {"value": [[True, True], [True, True]]},
    "sharded_tensor_on_the_current_gpu": {"value": ["cuda:0", True]},
    "gpu0_carries_more_under_dataparallel": {"value": True},
    "timing_events": {"value": True},
    "every_way_of_naming_a_device": {
        "value": {
            name: "cuda:1"
            for name in (
                "Module.to(1)", "Module.to(device=1)", "Module.to(device='cuda:1')", "Module.to(device=torch.device)",
                "Module.to(torch.device, dtype)", "Module.cuda(1)", "Module.to_empty(device=1)", "Tensor.to(1)", "Tensor.to(device=1)",
                "Tensor.cuda(device=1)", "zeros(device=1)", "new_ones(device=1)",
            )
        }
    },
    "module_moved_by_keyword_trains_there": {"value": ["cuda:1", "cuda:1"]},
    "generator_on_a_gpu": {"value": ["cuda:1", "cuda:1", True]},
    "default_device_set_by_the_program": {"value": ["cuda:1", "cuda:1", "cuda:1"]},
    "checkpoint_map_location_in_every_form": {
        "value": {
            "none": ["cuda:1"],
            "'cuda:1'": ["cuda:1"],
            "torch.device": ["cuda:1"],
            "dict": ["cuda:1"],
            "function": ["cuda:1"],
            "'cpu'": ["cpu"],
            "identity": ["cpu"],
            "saved on cpu": ["cpu"],
        }
    },
    "checkpoint_onto_a_missing_gpu": {"error": "RuntimeError", "message": "Attempting to deserialize object on CUDA device"},
    "custom_function_backward_on_the_gpu": {"value": [["cuda:1"], "cuda:1", [2.0, 2.0, 2.0]]},
    "gradient_hooks_see_the_gpu": {"value": [["module hook", "cuda:1"], ["tensor hook", "cuda:1"]]},
    "accelerator_queries": {
        "value": {
            "available": True, "count": True, "accelerator": "cuda", "module": "torch.cuda", "backend": "nccl", "index": [0, [1, 1], 0],
        }
    },
    "unnamed_backend_between_two_ranks": {"value": [["cuda:0", [1.0, 1.0], [1.0, 1.0]], ["cuda:1", [0.0, 0.0], [1.0, 1.0]]]},
    "visible_devices_set_by_the_program": {"value": "1 cuda:0"},
    # torch.cuda._lazy_init in a child forked after CUDA's fork handler was registered (torch/csrc/cuda/Module.cpp)
    "cuda_in_a_forked_child": {
        "value": str([
            "cuda:0",
            "cuda:0",
            "Cannot re-initialize CUDA in forked subprocess. To use CUDA with multiprocessing, you must use the 'spawn' start method",
            "((2,), 'cuda:0', True, True)",
        ])
    },
    # kernels that check their arguments one by one name the argument and the kernel
    "linear_input_on_another_gpu": {"error": "RuntimeError", "message": checked("mat1", "cuda:1", "cuda:0", "wrapper_CUDA_addmm")},
    "linear_without_bias_input_on_cpu": {"error": "RuntimeError", "message": checked("mat2", "cuda:0", "cpu", "wrapper_CUDA_mm")},
    "embedding_indices_on_cpu": {"error": "RuntimeError", "message": checked("index", "cpu", "cuda:0", "wrapper_CUDA__index_select")},
    "cross_entropy_target_on_cpu": {
        "error": "RuntimeError", "message": checked("target", "cpu", "cuda:0", "wrapper_CUDA_nll_loss_forward"),
    },
    # TensorIterator kernels name the first non-CPU device first
    "cpu_tensor_meets_gpu_tensor": {"error": "RuntimeError", "message": f"{SAME_DEVICE}, but found at least two devices, cuda:0 and cpu!"},
    # cuDNN's convolution compares the types; torch 2.11 on an H100 (2026-11-24) took the slow
    # kernel, which checks the devices argument by argument: either message is CUDA's
    "conv_input_on_cpu": {
        "error": "RuntimeError",
        "message": (
            "Input type (torch.FloatTensor) and weight type (torch.cuda.FloatTensor) should be the same "
            "or input should be a MKLDNN tensor and weight is a dense tensor",
            checked("weight", "cuda:0", "cpu", "wrapper_CUDA___slow_conv2d_forward"),
        ),
    },
}


def observations(command: list[str]) -> dict[str, dict]:
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return {record["case"]: record for record in map(json.loads, done.stdout.splitlines())}


def matches(record: dict, expected: dict) -> bool:
    if "value" in expected:
        return record.get("value") == expected["value"]
    messages = expected["message"] if isinstance(expected["message"], tuple) else (expected["message"],)
    return record.get("error") == expected["error"] and record.get("message", "").startswith(messages)


def compare(found: dict[str, dict]) -> list[str]:
    return [f"{name}: expected {want}, observed {found[name]}" for name, want in EXPECTED.items() if "skipped" not in found[name] and not matches(found[name], want)]


def test_every_case_has_an_expectation() -> None:
    found = observations([sys.executable, str(CASES)])
    assert set(found) == set(EXPECTED)


def test_virtual_gpus_behave_like_cuda() -> None:
    found = observations([sys.executable, "-m", "grader", "run", "--virtual-gpus", "5", "--", sys.executable, str(CASES)])
    assert not [name for name, record in found.items() if "skipped" in record]
    assert compare(found) == []


@pytest.mark.gpu
def test_real_gpus_behave_as_expected() -> None:
    found = observations([sys.executable, str(CASES)])
    assert compare(found) == []
