# Real-program corpus for virtual GPUs (tests/test_real_programs.py).
# Origin: pytorch/tutorials, intermediate_source/pipelining_tutorial.rst @ 2662cca
# ("Introduction to Distributed Pipeline Parallelism", Howard Huang), BSD-3-Clause. A
# rewritten equivalent of the tutorial's code with the same calls in the same forms: device
# cuda:<LOCAL_RANK>, dist.init_process_group() with no backend named, dist.new_group(), the
# manual split of an 8-layer transformer into two stages, PipelineStage(model, stage_index,
# num_stages, device), model.to(device) after building the stage, ScheduleGPipe with 4
# micro-batches and a token-wise cross-entropy; rank 1 prints the micro-batches' losses.
# Changed for this machine: a smaller model and batch (dim 32, 2 heads, vocabulary 100,
# 8 sequences of 16 tokens instead of dim 512, 8 heads, 10000, 32 of 500).
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.pipelining import PipelineStage, ScheduleGPipe


@dataclass
class ModelArgs:
    dim: int = 32
    n_layers: int = 8
    n_heads: int = 2
    vocab_size: int = 100


class Transformer(nn.Module):
    def __init__(self, model_args: ModelArgs):
        super().__init__()
        self.tok_embeddings = nn.Embedding(model_args.vocab_size, model_args.dim)
        # a ModuleDict, so that deleting layers keeps the names of the others
        self.layers = torch.nn.ModuleDict()
        for layer_id in range(model_args.n_layers):
            self.layers[str(layer_id)] = nn.TransformerDecoderLayer(model_args.dim, model_args.n_heads)
        self.norm = nn.LayerNorm(model_args.dim)
        self.output = nn.Linear(model_args.dim, model_args.vocab_size)

    def forward(self, tokens: torch.Tensor):
        # parts set to None by the split are skipped
        h = self.tok_embeddings(tokens) if self.tok_embeddings else tokens
        for layer in self.layers.values():
            h = layer(h, h)
        h = self.norm(h) if self.norm else h
        return self.output(h).clone() if self.output else h


def init_distributed():
    global rank, device, pp_group, stage_index, num_stages
    rank = int(os.environ["LOCAL_RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    device = torch.device(f"cuda:{rank}") if torch.cuda.is_available() else torch.device("cpu")
    dist.init_process_group()
    pp_group = dist.new_group()
    stage_index = rank
    num_stages = world_size


def manual_model_split(model) -> PipelineStage:
    if stage_index == 0:
        for i in range(4, 8):
            del model.layers[str(i)]
        model.norm = None
        model.output = None
    elif stage_index == 1:
        for i in range(4):
            del model.layers[str(i)]
        model.tok_embeddings = None
    return PipelineStage(model, stage_index, num_stages, device)


if __name__ == "__main__":
    init_distributed()
    num_microbatches = 4
    model_args = ModelArgs()
    model = Transformer(model_args)
    x = torch.ones(8, 16, dtype=torch.long)
    y = torch.randint(0, model_args.vocab_size, (8, 16), dtype=torch.long)
    stage = manual_model_split(model)
    model.to(device)
    x = x.to(device)
    y = y.to(device)

    def tokenwise_loss_fn(outputs, targets):
        loss_fn = nn.CrossEntropyLoss()
        return loss_fn(outputs.reshape(-1, model_args.vocab_size), targets.reshape(-1))

    schedule = ScheduleGPipe(stage, n_microbatches=num_microbatches, loss_fn=tokenwise_loss_fn)
    if rank == 0:
        schedule.step(x)
    elif rank == 1:
        losses = []
        output = schedule.step(target=y, losses=losses)
        print(f"losses: {losses}")
    dist.destroy_process_group()
