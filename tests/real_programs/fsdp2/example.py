# Real-program corpus for virtual GPUs (tests/test_real_programs.py).
# Origin: pytorch/examples, distributed/FSDP2/example.py @ 77f55b9, BSD-3-Clause. A rewritten
# equivalent with the same calls in the same forms: the GPU check through torch.accelerator,
# device = torch.device(f"{torch.accelerator.current_accelerator()}:{LOCAL_RANK}"),
# init_process_group(backend=get_default_backend_for_device(device), device_id=device), the
# model built on the meta device, fully_shard per layer and on the root (optionally with a
# bfloat16 MixedPrecisionPolicy and explicit prefetching), to_empty(device=device) and
# reset_parameters() on a first run, the checkpoint loaded on a later one, Adam, gradient
# clipping; the same printed lines (README.md: the first run saves checkpoints, the second
# loads them).
# Changed for this machine: a smaller model and batch (2 layers, vocabulary 64, 4 sequences
# of 16 tokens instead of 10 layers, 1024, 32 of 64); the DCP path (--dcp-api) is left out; a
# line says when a checkpoint is loaded (the README says that a second run loads one).
import argparse
import os

import torch
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from checkpoint import Checkpointer
from model import ModelArgs, Transformer
from utils import inspect_mixed_precision, inspect_model


def verify_min_gpu_count(min_gpus: int = 2) -> bool:
    """verification that we have at least 2 gpus to run dist examples"""
    return torch.accelerator.is_available() and torch.accelerator.device_count() >= min_gpus


def set_modules_to_forward_prefetch(model, num_to_forward_prefetch):
    for i, layer in enumerate(model.layers):
        if i >= len(model.layers) - num_to_forward_prefetch:
            break
        layer.set_modules_to_forward_prefetch([model.layers[i + j] for j in range(1, num_to_forward_prefetch + 1)])


def set_modules_to_backward_prefetch(model, num_to_backward_prefetch):
    for i, layer in enumerate(model.layers):
        if i >= num_to_backward_prefetch:
            layer.set_modules_to_backward_prefetch([model.layers[i - j] for j in range(1, num_to_backward_prefetch + 1)])


def main(args):
    _min_gpu_count = 2
    if not verify_min_gpu_count(min_gpus=_min_gpu_count):
        print(f"Unable to locate sufficient {_min_gpu_count} gpus to run this example. Exiting.")
        exit()
    rank = int(os.environ["LOCAL_RANK"])
    device_type = torch.accelerator.current_accelerator()
    device = torch.device(f"{device_type}:{rank}")
    print(f"Running on rank {rank} on device {device}")
    backend = torch.distributed.get_default_backend_for_device(device)
    torch.distributed.init_process_group(backend=backend, device_id=device)

    torch.manual_seed(0)
    vocab_size, batch_size, seq_len = 64, 4, 16
    model_args = ModelArgs(n_layers=2, n_heads=4, vocab_size=vocab_size, max_seq_len=seq_len, dropout_p=0)
    with torch.device("meta"):
        model = Transformer(model_args)
    fsdp_kwargs = {}
    if args.mixed_precision:
        fsdp_kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in model.layers:
        fully_shard(layer, **fsdp_kwargs)
    fully_shard(model, **fsdp_kwargs)
    inspect_model(model)
    if args.explicit_prefetching:
        set_modules_to_forward_prefetch(model, num_to_forward_prefetch=2)
        set_modules_to_backward_prefetch(model, num_to_backward_prefetch=2)

    checkpointer = Checkpointer("checkpoints")
    if checkpointer.last_training_time is None:
        model.to_empty(device=device)
        model.reset_parameters()
    else:
        print(f"Loading checkpoint {checkpointer.last_training_time}")
        checkpointer.load_model(model)
    if args.mixed_precision:
        inspect_mixed_precision(model)

    optim = torch.optim.Adam(model.parameters(), lr=1e-2)
    if checkpointer.last_training_time is not None:
        checkpointer.load_optim(model, optim)

    for _ in range(10):
        if args.explicit_prefetching:
            model.unshard()
        x = torch.randint(0, vocab_size, (batch_size, seq_len), device=device)
        loss = model(x).sum()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        optim.step()
        optim.zero_grad()
    checkpointer.save(model, optim)
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="PyTorch FSDP2 example")
    parser.add_argument("--explicit-prefetching", action="store_true", default=False)
    parser.add_argument("--mixed-precision", action="store_true", default=False)
    main(parser.parse_args())
