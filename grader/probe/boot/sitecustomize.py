"""Started by every Python process of `python -m grader run --virtual-gpus N -- CMD`.

This folder is put first on PYTHONPATH by that command and holds nothing else, so Python's
start-up imports this file: with GRADER_VIRTUAL_GPUS=N set, the process (torchrun's launcher
and each of its workers alike) sees N CPU-backed CUDA devices before the script runs.
"""
import os

if os.environ.get("GRADER_VIRTUAL_GPUS", "").isdigit() and int(os.environ["GRADER_VIRTUAL_GPUS"]) > 0:
    from grader.probe.virtual import install

    install(int(os.environ["GRADER_VIRTUAL_GPUS"]))
