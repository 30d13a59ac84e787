# Real-program corpus for virtual GPUs (tests/test_real_programs.py).
# Origin: pytorch/examples, distributed/FSDP2/checkpoint.py @ 77f55b9, BSD-3-Clause. A rewritten
# equivalent of its DTensor path: rank 0 saves full (gathered) model and optimizer state
# dicts with torch.save under checkpoints/dtensor_api/<time>/; a later run loads them with
# torch.load(mmap=True, weights_only=True, map_location="cpu") and distribute_tensor()s each
# tensor back onto the mesh.
# Changed: the DCP path (--dcp-api) is left out.
import os
import time

import torch
import torch.nn as nn
from torch.distributed.checkpoint.state_dict import _init_optim_state
from torch.distributed.fsdp import FSDPModule
from torch.distributed.tensor import DTensor, distribute_tensor

MODEL_CHECKPOINT = "model_state_dict.pt"
OPTIM_CHECKPOINT = "optim_state_dict.pt"
PARAMS = "params"


def get_latest_checkpoint_folder(path):
    if not os.path.exists(path):
        return None
    times = [int(name) for name in os.listdir(path) if name.isdigit() and os.path.isdir(os.path.join(path, name))]
    return max(times, default=None)


class Checkpointer:
    def __init__(self, folder: str):
        self.folder = f"{folder}/dtensor_api"
        self.last_training_time = get_latest_checkpoint_folder(self.folder)

    def _load(self, name):
        return torch.load(f"{self.folder}/{self.last_training_time}/{name}", mmap=True, weights_only=True, map_location="cpu")

    def load_model(self, model: FSDPModule):
        meta_sharded_sd = model.state_dict()
        sharded_sd = {}
        for param_name, full_tensor in self._load(MODEL_CHECKPOINT).items():
            meta_param = meta_sharded_sd.get(param_name)
            sharded_sd[param_name] = nn.Parameter(distribute_tensor(full_tensor, meta_param.device_mesh, meta_param.placements))
        model.load_state_dict(sharded_sd, strict=False, assign=True)  # assign: the model is still on the meta device

    def load_optim(self, model: FSDPModule, opt: torch.optim.Optimizer):
        full_sd = self._load(OPTIM_CHECKPOINT)
        _init_optim_state(opt)
        param_groups, state = opt.state_dict()["param_groups"], opt.state_dict()["state"]
        for param_group, full_param_group in zip(param_groups, full_sd["param_groups"]):
            param_group.update({k: v for k, v in full_param_group.items() if k != PARAMS})
            for pid, full_pid in zip(param_group[PARAMS], full_param_group[PARAMS]):
                if pid not in state:
                    continue
                for attr, full_tensor in full_sd["state"][full_pid].items():
                    sharded = state[pid][attr]
                    state[pid][attr] = (
                        distribute_tensor(full_tensor, sharded.device_mesh, sharded.placements)
                        if isinstance(sharded, DTensor)
                        else full_tensor
                    )
        opt.load_state_dict({"param_groups": param_groups, "state": state})

    def _full_model_state_dict(self, model: FSDPModule):
        cpu_state_dict = {}
        for param_name, sharded_param in model.state_dict().items():
            full_param = sharded_param.full_tensor()
            if torch.distributed.get_rank() == 0:
                cpu_state_dict[param_name] = full_param.cpu()
        return cpu_state_dict

    def _full_optimizer_state_dict(self, opt: torch.optim.Optimizer):
        sharded_sd = opt.state_dict()
        full_state = {}
        for group_id, sharded_group in sharded_sd["state"].items():
            group_state = {}
            for attr, sharded_tensor in sharded_group.items():
                full_tensor = sharded_tensor.full_tensor() if isinstance(sharded_tensor, DTensor) else sharded_tensor
                group_state[attr] = full_tensor.cpu()
            full_state[group_id] = group_state
        return {"param_groups": sharded_sd["param_groups"], "state": full_state} if torch.distributed.get_rank() == 0 else {}

    def save(self, model: FSDPModule, optim: torch.optim.Optimizer):
        model_state_dict = self._full_model_state_dict(model)
        optim_state_dict = self._full_optimizer_state_dict(optim)
        if torch.distributed.get_rank() == 0:
            folder = f"{self.folder}/{int(time.time() * 1000)}"
            os.makedirs(folder, exist_ok=True)
            torch.save(model_state_dict, f"{folder}/{MODEL_CHECKPOINT}")
            torch.save(optim_state_dict, f"{folder}/{OPTIM_CHECKPOINT}")
