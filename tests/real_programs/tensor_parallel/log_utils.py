# Real-program corpus for virtual GPUs (tests/test_real_programs.py).
# Origin: pytorch/examples, distributed/tensor_parallelism/log_utils.py @ 77f55b9, BSD-3-Clause.
# A rewritten equivalent: INFO logging with a time stamp, rank 0 only, and the GPU check
# through the accelerator API.
import logging

import torch

logging.basicConfig(format="%(asctime)s %(message)s", datefmt="%m/%d/%Y %I:%M:%S %p", level=logging.INFO)


def get_logger():
    return logging.getLogger(__name__)


def rank_log(_rank, logger, msg):
    """helper function to log only on global rank 0"""
    if _rank == 0:
        logger.info(f" {msg}")


def verify_min_gpu_count(min_gpus: int = 2) -> bool:
    """verification that we have at least 2 gpus to run dist examples"""
    return torch.accelerator.is_available() and torch.accelerator.device_count() >= min_gpus
