"""Started by every Python process of `python -m grader run --virtual-gpus N -- CMD` and of
`python -m grader observe ... -- CMD`.

This folder is put first on PYTHONPATH by those commands and holds nothing else, so Python's
start-up imports this file: with GRADER_VIRTUAL_GPUS=N set, the process (torchrun's launcher
and each of its workers alike) sees N CPU-backed CUDA devices before the script runs; with
GRADER_OBSERVE_DIR set, it also records what it does into that folder (the recorder,
grader.probe.recorder.observers, as `grade`, `check` and `run` use it in each rank).
"""
import os


def _boot() -> None:
    virtual = None
    if os.environ.get("GRADER_VIRTUAL_GPUS", "").isdigit() and int(os.environ["GRADER_VIRTUAL_GPUS"]) > 0:
        from grader.probe.vgpu.install import install

        virtual = install(int(os.environ["GRADER_VIRTUAL_GPUS"]))
    if os.environ.get("GRADER_OBSERVE_DIR"):
        from grader.probe.recorder.observers import start_observing

        start_observing(os.environ["GRADER_OBSERVE_DIR"], virtual)


_boot()
