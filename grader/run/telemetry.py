"""GPU telemetry measured by the grader itself: per-GPU memory and utilisation while a job runs.

Mechanism: NVML (the `pynvml` module of nvidia-ml-py) is opened once per grading in the
grader's process — never in the student's — and a background thread reads every GPU's
memory in use and utilisation every `interval_s` while a launch runs (from just before the
ranks start until they have all ended). A launch's telemetry is, per GPU: the memory in use
before it started (another process's, or the CUDA context of the grader), its peak while it
ran and the peak added by the launch, and the mean and maximum utilisation. NVML sees the
whole device, so on a node shared with other jobs the readings include them: the course's
grading jobs ask Slurm for whole GPUs.

Without NVML (no NVIDIA driver, a CPU machine, the package missing) `open_nvml` says why and
grading goes on without telemetry; checks that need it are then not graded here.
`FakeGpus` replays given readings, for tests.
"""
from __future__ import annotations

import statistics
import threading
from typing import Protocol, Sequence

MIB = 2**20


class GpuSource(Protocol):
    """Where readings come from: one (memory used in bytes, utilisation in %) per GPU."""

    names: tuple[str, ...]
    totals: tuple[int, ...]  # memory per GPU, bytes

    def read(self) -> list[tuple[int, int]]:
        """One reading of every GPU."""

    def close(self) -> None:
        """Release the library."""


class NvmlSource:
    """Readings through NVML. Use `open_nvml()` to get one."""

    def __init__(self, nvml: object) -> None:
        self._nvml = nvml
        count = nvml.nvmlDeviceGetCount()  # type: ignore[attr-defined]
        self._handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]  # type: ignore[attr-defined]
        self.names = tuple(_text(nvml.nvmlDeviceGetName(h)) for h in self._handles)  # type: ignore[attr-defined]
        self.totals = tuple(int(nvml.nvmlDeviceGetMemoryInfo(h).total) for h in self._handles)  # type: ignore[attr-defined]

    def read(self) -> list[tuple[int, int]]:
        nvml = self._nvml
        return [(int(nvml.nvmlDeviceGetMemoryInfo(h).used), int(nvml.nvmlDeviceGetUtilizationRates(h).gpu)) for h in self._handles]  # type: ignore[attr-defined]

    def close(self) -> None:
        try:
            self._nvml.nvmlShutdown()  # type: ignore[attr-defined]
        except Exception:  # noqa: BLE001 - shutting down a library that already failed is not an error
            pass


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def open_nvml() -> NvmlSource | str:
    """NVML's readings of this machine's GPUs, or why there are none."""
    try:
        import pynvml
    except ImportError:
        return "GPU telemetry off: nvidia-ml-py is not installed (pip install nvidia-ml-py)"
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - pynvml raises its own error classes (and OSError)
        return f"GPU telemetry off: NVML cannot be opened here ({exc}); no NVIDIA driver?"
    try:
        source = NvmlSource(pynvml)
    except Exception as exc:  # noqa: BLE001 - a driver that answers init but not queries
        pynvml.nvmlShutdown()
        return f"GPU telemetry off: NVML did not answer ({exc})"
    if not source.names:
        source.close()
        return "GPU telemetry off: NVML sees no GPU"
    return source


class FakeGpus:
    """A source that replays `readings` (one list per read, the last one repeated)."""

    def __init__(self, names: Sequence[str], totals: Sequence[int], readings: Sequence[Sequence[tuple[int, int]]]) -> None:
        self.names, self.totals = tuple(names), tuple(totals)
        self._readings = [list(r) for r in readings]
        self._next = 0
        self.closed = False

    def read(self) -> list[tuple[int, int]]:
        reading = self._readings[min(self._next, len(self._readings) - 1)]
        self._next += 1
        return reading

    def close(self) -> None:
        self.closed = True


def summarise(names: Sequence[str], totals: Sequence[int], samples: Sequence[Sequence[tuple[int, int]]], interval_s: float) -> dict:
    """A launch's telemetry from its readings (the first one taken before the ranks started)."""
    gpus = []
    for index, name in enumerate(names):
        memory = [sample[index][0] for sample in samples]
        busy = [sample[index][1] for sample in samples[1:]] or [sample[index][1] for sample in samples]
        gpus.append(
            {
                "index": index,
                "name": name,
                "memory_total_mib": round(totals[index] / MIB, 1),
                "memory_before_mib": round(memory[0] / MIB, 1),
                "memory_peak_mib": round(max(memory) / MIB, 1),
                "memory_added_peak_mib": round(max(0, max(memory) - memory[0]) / MIB, 1),
                "utilization_mean_pct": round(statistics.fmean(busy), 1),
                "utilization_max_pct": max(busy),
            }
        )
    return {"source": "NVML", "interval_s": interval_s, "samples": len(samples), "gpus": gpus}


def describe(telemetry: dict) -> str:
    """One line per GPU for the feedback."""
    return "\n".join(
        f"GPU {g['index']} ({g['name']}): peak memory {g['memory_peak_mib']:.0f} MiB (+{g['memory_added_peak_mib']:.0f} MiB during the run), "
        f"utilisation {g['utilization_mean_pct']:.0f}% mean, {g['utilization_max_pct']}% max"
        for g in telemetry.get("gpus", [])
    )


class Sampler:
    """Samples `source` in a background thread between `start()` and `stop()`."""

    def __init__(self, source: GpuSource, interval_s: float = 0.05) -> None:
        self.source, self.interval_s = source, interval_s
        self._samples: list[list[tuple[int, int]]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._problem: str | None = None

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._take()

    def _take(self) -> None:
        try:
            self._samples.append(self.source.read())
        except Exception as exc:  # noqa: BLE001 - a driver hiccup ends sampling, never the grading
            self._problem = f"NVML stopped answering: {exc}"
            self._stop.set()

    def start(self) -> None:
        self._take()  # the reading before the launch: what was in use already
        self._thread = threading.Thread(target=self._loop, name="gpu-telemetry", daemon=True)
        self._thread.start()

    def stop(self) -> dict | None:
        """The launch's telemetry (None when not even one reading could be taken)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._problem is None:
            self._take()  # the reading after the last rank ended
        if not self._samples:
            return None
        telemetry = summarise(self.source.names, self.source.totals, self._samples, self.interval_s)
        if self._problem:
            telemetry["problem"] = self._problem
        return telemetry
