"""p7: pipeline schedules (GPipe and 1F1B). Checks from grader/checks/pipeline.py and, for
the exit, grader/checks/distributed.py; the reference is single-process training of the
template's model on the grading's batches, cut where the template's stages are cut: for every
step and micro-batch, the activation that crosses each cut forward and its gradient backward
(what the checks compare the sends the grader's hub carried with)."""
from __future__ import annotations

import functools
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Mapping, Sequence

from grader.checks import distributed, pipeline
from grader.checks.pipeline import Crossing, Delivered, PipelineReference
from grader.practicals.reference import global_batch
from grader.spec.model import RunDef

__all__ = ["CHECKS", "references", "template_pipeline_model", "pipeline_training"]

CHECKS = MappingProxyType({**pipeline.CHECKS, "clean_exit": distributed.CHECKS["clean_exit"]})


@dataclass(frozen=True)
class PipelineSettings:
    """What a run's training depends on: its arguments and its number of stages."""

    seed: int
    batch_size: int
    micro_batches: int
    dim: int
    layers: int
    steps: int
    lr: float
    stages: int


def template_pipeline_model(dim: int, layers: int) -> Any:
    """The model of p7's template: `layers` blocks of Linear + Tanh, then a Linear head."""
    from torch import nn

    blocks = [nn.Sequential(nn.Linear(dim, dim), nn.Tanh()) for _ in range(layers)]
    return nn.Sequential(*blocks, nn.Linear(dim, 1))


def _crossing(tensor: Any) -> Crossing:
    return Crossing(int(tensor.shape[0]), float(tensor.sum()), float(tensor.abs().sum()), tensor.detach().reshape(-1).clone())


def pipeline_training(settings: PipelineSettings, deliveries: tuple[Delivered, ...] = ()) -> PipelineReference:
    """Single-process SGD on the whole batch of every step (float64), its micro-batches' losses
    summed and divided by the batch's rows as the template's; what crosses each cut. Where the
    hub delivered a send with values of its own (`deliveries`), the stage after the cut (an
    activation) computes on those values, or the stage before it (a gradient) back-propagates
    those: what each stage then sends follows from what it received, as in the pipeline."""
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(settings.seed)
        model = template_pipeline_model(settings.dim, settings.layers)
    model = model.double()
    bounds = [s * len(model) // settings.stages for s in range(settings.stages + 1)]  # the template's cuts
    given = {(d.step, d.cut, d.forward, d.micro_batch): d.values for d in deliveries}
    activations, gradients = [], []
    for step in range(settings.steps):
        x, y = global_batch(settings.seed, step, settings.batch_size, settings.dim)
        model.zero_grad(set_to_none=True)
        sent: list[list[Crossing]] = [[] for _ in range(settings.stages - 1)]
        returned: list[list[Crossing]] = [[] for _ in range(settings.stages - 1)]
        for micro, (mx, my) in enumerate(zip(x.double().tensor_split(settings.micro_batches), y.double().tensor_split(settings.micro_batches))):
            inputs, outputs, h = [], [], mx
            for stage in range(settings.stages):
                if stage:
                    outputs.append(h)
                    sent[stage - 1].append(_crossing(h.detach()))
                    received = given.get((step, stage - 1, True, micro))
                    h = (h.detach() if received is None else received.reshape(h.shape).to(h.dtype)).clone().requires_grad_()
                    inputs.append(h)
                h = model[bounds[stage] : bounds[stage + 1]](h)
            (torch.nn.functional.mse_loss(h, my, reduction="sum") / settings.batch_size).backward()
            for cut in reversed(range(settings.stages - 1)):
                gradient = inputs[cut].grad
                returned[cut].append(_crossing(gradient))
                received = given.get((step, cut, False, micro))
                outputs[cut].backward(gradient if received is None else received.reshape(gradient.shape).to(gradient.dtype))
        activations.append(tuple(tuple(c) for c in sent))
        gradients.append(tuple(tuple(c) for c in returned))
        with torch.no_grad():
            for p in model.parameters():
                p -= settings.lr * p.grad
    return PipelineReference(
        settings.stages, settings.micro_batches, settings.steps, settings.dim, tuple(activations), tuple(gradients),
        retrain=functools.partial(pipeline_training, settings),
    )


def references(args: Mapping[str, Any], runs: Sequence[RunDef]) -> dict[str, PipelineReference]:
    """Each run's reference: the template's model on the run's settings, in as many stages as
    the run has ranks."""
    result = {}
    for run in runs:
        given = {**args, **run.args}
        settings = PipelineSettings(
            int(given["seed"]), int(given["batch_size"]), int(given["micro_batches"]), int(given["dim"]),
            int(given["layers"]), int(given["steps"]), float(given["lr"]), run.layout.world_size,
        )
        result[run.name] = pipeline_training(settings)
    return result
