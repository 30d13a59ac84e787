"""The grader's own training for the data-parallel practicals (p6, p10): the templates'
models and data, single-process SGD on the whole batch, and each shard's gradient at any
parameters (what grader.traffic.training compares the ranks' all-reduces with)."""
from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from grader.probe.transport.traffic import TrafficReport
from grader.run.job import JobResult
from grader.spec.model import RunDef
from grader.traffic.training import Claims, TrainingSeen, analyse

SETTINGS = ("seed", "batch_size", "dim", "hidden", "steps", "lr")


def global_batch(seed: int, step: int, batch_size: int, dim: int) -> Any:
    """The templates' global batch of one step: x, y ~ N(0, 1) from a generator seeded with
    seed * 1000 + step."""
    import torch

    g = torch.Generator().manual_seed(seed * 1000 + step)
    return torch.randn(batch_size, dim, generator=g), torch.randn(batch_size, 1, generator=g)


def template_mlp(dim: int, hidden: int) -> Any:
    """The model of p6's template."""
    from torch import nn

    return nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, 1))


def template_two_stage(dim: int, hidden: int) -> Any:
    """The model of p10's template, parameter names included, its stages on one device."""
    from torch import nn

    class TwoStageModel(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stage1 = nn.Sequential(nn.Linear(dim, hidden), nn.ReLU())
            self.stage2 = nn.Linear(hidden, 1)

        def forward(self, x: Any) -> Any:
            return self.stage2(self.stage1(x))

    return TwoStageModel()


KINK = 2e-6  # a ReLU input this close to zero may lie on either side in float32 (`DataParallelWorkload.gradients`)
MAX_KINKS = 3  # of them, the nearest take both sides: 2**3 gradients at most


class DataParallelWorkload:
    """A run's training as the grader computes it (grader.traffic.training.Workload): the
    template's model from `build()`, the grading's data and SGD; single-process parameters are
    computed once per sequence of used rows."""

    def __init__(self, build: Callable[[], Any], settings: Mapping[str, Any], world: int) -> None:
        import torch

        self.build = build
        self.seed, self.batch_size, self.dim = int(settings["seed"]), int(settings["batch_size"]), int(settings["dim"])
        self.steps, self.lr, self.world = int(settings["steps"]), float(settings["lr"]), world
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            model = build()
        self._start = {name: p.detach().clone() for name, p in model.named_parameters()}
        self.names = tuple(self._start)
        self._trained: dict[tuple, dict[str, Any]] = {(): self._start}
        self._batches: dict[int, tuple[Any, Any]] = {}

    def batch(self, step: int) -> tuple[Any, Any]:
        if step not in self._batches:
            self._batches[step] = global_batch(self.seed, step, self.batch_size, self.dim)
        return self._batches[step]

    def row_sums(self, step: int) -> list[float]:
        """Each row of the step's batch, summed in float64 (as the recorder sums the rows a rank fed)."""
        return self.batch(step)[0].double().sum(1).tolist()

    def _model(self, values: Mapping[str, Any], double: bool) -> Any:
        import torch

        model = self.build()
        with torch.no_grad():
            for name, p in model.named_parameters():
                p.copy_(values[name].reshape(p.shape))
        return model.double() if double else model

    def gradient(self, theta: Mapping[str, Any], step: int, rows: Sequence[int]) -> dict[str, Any]:
        """The mean squared error's gradient over `rows` of the step's batch at `theta`, in float64."""
        return self._backward(theta, step, rows)[0]

    def gradients(self, theta: Mapping[str, Any], step: int, rows: Sequence[int]) -> list[dict[str, Any]]:
        """`gradient`, then the same with each choice of side for the ReLU inputs within KINK
        of zero (at most MAX_KINKS of them, the nearest): float32's rounding in the rank's
        summation order may put such an input on the other side of the kink than float64 does,
        and the unit's gradient then passes or not (measured: an input of 1.1e-7 in float64
        came out -5.2e-8 in the rank's float32 micro-batch; one element of 131,072 changed
        p10's first-stage gradient by 0.27%, 27 times the tolerance, in one timed launch in 25)."""
        import itertools

        exact, inputs = self._backward(theta, step, rows)
        near = sorted((float(z[at].abs()), layer, at) for layer, z in enumerate(inputs) for at in (z.abs() < KINK).nonzero().reshape(-1).tolist())[:MAX_KINKS]
        variants = [exact]
        for flips in itertools.islice(itertools.product((False, True), repeat=len(near)), 1, None):  # the first, none flipped, is `exact`
            masks = [(z > 0).double() for z in inputs]
            for flip, (_, layer, at) in zip(flips, near):
                if flip:
                    masks[layer][at] = 1.0 - masks[layer][at]
            variants.append(self._backward(theta, step, rows, masks)[0])
        return variants

    def _backward(self, theta: Mapping[str, Any], step: int, rows: Sequence[int], masks: Sequence[Any] | None = None) -> tuple[dict[str, Any], list[Any]]:
        """The float64 gradient over `rows` at `theta` and each ReLU's input (flat), with the
        ReLUs' gradient masks replaced by `masks` where given (their forward values stay:
        an input within KINK of zero is zero's neighbour either way)."""
        import torch

        x, y = self.batch(step)
        index = torch.tensor(list(rows), dtype=torch.long)
        model = self._model(theta, double=True)
        inputs: list[Any] = []

        def seen(module: Any, given: tuple[Any, ...], out: Any) -> Any:
            inputs.append(given[0].detach().reshape(-1))
            return None if masks is None else given[0] * masks[len(inputs) - 1].reshape(given[0].shape)

        for relu in (module for module in model.modules() if isinstance(module, torch.nn.ReLU)):
            relu.register_forward_hook(seen)
        torch.nn.functional.mse_loss(model(x[index].double()), y[index].double()).backward()
        return {name: p.grad.reshape(-1).clone() for name, p in model.named_parameters()}, inputs

    def parameters(self, used: Sequence[Sequence[int]]) -> dict[str, Any]:
        """Single-process SGD's parameters after len(used) steps, step i on rows used[i] (float32
        training, as the templates train; values as float64)."""
        import torch

        key = tuple(tuple(rows) for rows in used)
        if key not in self._trained:
            before = self.parameters(used[:-1])
            model = self._model(before, double=False)
            x, y = self.batch(len(used) - 1)
            index = torch.tensor(list(used[-1]), dtype=torch.long)
            torch.nn.functional.mse_loss(model(x[index]), y[index]).backward()
            with torch.no_grad():
                self._trained[key] = {name: (p - self.lr * p.grad).detach().clone() for name, p in model.named_parameters()}
        return {name: value.reshape(-1).double() for name, value in self._trained[key].items()}


class DataParallelReference:
    """The grader's side of one data-parallel run: its workload, and the analysis of a launch's
    traffic (grader.traffic.training), made once per launch."""

    def __init__(self, workload: DataParallelWorkload) -> None:
        self.workload = workload
        self._seen: dict[int, tuple[JobResult, TrainingSeen]] = {}

    def seen(self, run: JobResult, claims: Callable[[], Claims], rtol: float = 1e-4, atol: float = 1e-7) -> TrainingSeen | str | None:
        """What `run`'s traffic shows of training (`claims`: what its records say, made when
        needed), or why the run has none to show (None: no hub carried it)."""
        if not isinstance(run.traffic, TrafficReport):
            return run.traffic
        if id(run) not in self._seen:
            self._seen[id(run)] = (run, analyse(run.traffic, self.workload, claims(), rtol, atol))
        return self._seen[id(run)][1]


def data_parallel_references(args: Mapping[str, Any], runs: Sequence[RunDef], build: Callable[[int, int], Any]) -> dict[str, DataParallelReference]:
    """Each run's reference: the template's model (`build(dim, hidden)`) on the run's settings."""
    result = {}
    for run in runs:
        settings = {key: {**args, **run.args}[key] for key in SETTINGS}
        widths = int(settings["dim"]), int(settings["hidden"])
        result[run.name] = DataParallelReference(DataParallelWorkload(lambda widths=widths: build(*widths), settings, run.layout.world_size))
    return result
