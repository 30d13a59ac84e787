# Real-program corpus for virtual GPUs (tests/test_real_programs.py).
# Origin: pytorch/examples, distributed/rpc/parameter_server/rpc_parameter_server.py (a
# parameter server holds the model on two GPUs; trainers run it over torch.distributed.rpc,
# backward through distributed autograd, a DistributedOptimizer steps it), BSD-3-Clause.
# A rewritten equivalent with the same calls in the same forms: rpc.init_rpc per process,
# rpc.remote("parameter_server", get_parameter_server), rpc_sync to call methods on the
# RRef's owner, the model's convolutions on accelerator 0 and the rest on accelerator 1,
# inputs and outputs moved to and from the GPU on the server (RPC carries CPU tensors),
# dist_autograd.context / backward / get_gradients, DistributedOptimizer(optim.SGD, param
# rrefs), mp.set_start_method("spawn") and one mp.Process per launch; the same printed lines.
# Changed for this machine: MNIST-shaped random data (no download, no torchvision), of
# --train-size and --test-size samples.
import argparse
import os
from threading import Lock

import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
from torch import optim
from torch.distributed.optim import DistributedOptimizer


class Net(nn.Module):
    def __init__(self, num_gpus=0):
        super(Net, self).__init__()
        print(f"Using {num_gpus} GPUs to train")
        self.num_gpus = num_gpus
        if torch.accelerator.is_available() and self.num_gpus > 0:
            acc = torch.accelerator.current_accelerator()
            device = torch.device(f"{acc}:0")
        else:
            device = torch.device("cpu")
        print(f"Putting first 2 convs on {str(device)}")
        self.conv1 = nn.Conv2d(1, 32, 3, 1).to(device)
        self.conv2 = nn.Conv2d(32, 64, 3, 1).to(device)
        if torch.accelerator.is_available() and self.num_gpus > 0:
            acc = torch.accelerator.current_accelerator()
            device = torch.device(f"{acc}:1")
        print(f"Putting rest of layers on {str(device)}")
        self.dropout1 = nn.Dropout2d(0.25).to(device)
        self.dropout2 = nn.Dropout2d(0.5).to(device)
        self.fc1 = nn.Linear(9216, 128).to(device)
        self.fc2 = nn.Linear(128, 10).to(device)

    def forward(self, x):
        x = self.conv1(x)
        x = F.relu(x)
        x = self.conv2(x)
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        next_device = next(self.fc1.parameters()).device
        x = x.to(next_device)
        x = self.fc1(x)
        x = F.relu(x)
        x = self.dropout2(x)
        x = self.fc2(x)
        return F.log_softmax(x, dim=1)


def call_method(method, rref, *args, **kwargs):
    return method(rref.local_value(), *args, **kwargs)


def remote_method(method, rref, *args, **kwargs):
    args = [method, rref] + list(args)
    return rpc.rpc_sync(rref.owner(), call_method, args=args, kwargs=kwargs)


class ParameterServer(nn.Module):
    def __init__(self, num_gpus=0):
        super().__init__()
        self.model = Net(num_gpus=num_gpus)
        if torch.accelerator.is_available() and num_gpus > 0:
            acc = torch.accelerator.current_accelerator()
            self.input_device = torch.device(f"{acc}:0")
        else:
            self.input_device = torch.device("cpu")

    def forward(self, inp):
        inp = inp.to(self.input_device)
        out = self.model(inp)
        # RPC carries CPU tensors: the output leaves the GPU here
        return out.to("cpu")

    def get_dist_gradients(self, cid):
        grads = dist_autograd.get_gradients(cid)
        cpu_grads = {}
        for k, v in grads.items():
            k_cpu, v_cpu = k.to("cpu"), v.to("cpu")
            cpu_grads[k_cpu] = v_cpu
        return cpu_grads

    def get_param_rrefs(self):
        return [rpc.RRef(param) for param in self.model.parameters()]


param_server = None
global_lock = Lock()


def get_parameter_server(num_gpus=0):
    global param_server
    with global_lock:
        if not param_server:
            param_server = ParameterServer(num_gpus=num_gpus)
        return param_server


def run_parameter_server(rank, world_size):
    print("PS master initializing RPC")
    rpc.init_rpc(name="parameter_server", rank=rank, world_size=world_size)
    print("RPC initialized! Running parameter server...")
    rpc.shutdown()
    print("RPC shutdown on parameter server.")


class TrainerNet(nn.Module):
    def __init__(self, num_gpus=0):
        super().__init__()
        self.num_gpus = num_gpus
        self.param_server_rref = rpc.remote("parameter_server", get_parameter_server, args=(num_gpus,))

    def get_global_param_rrefs(self):
        return remote_method(ParameterServer.get_param_rrefs, self.param_server_rref)

    def forward(self, x):
        return remote_method(ParameterServer.forward, self.param_server_rref, x)


def run_training_loop(rank, num_gpus, train_loader, test_loader):
    net = TrainerNet(num_gpus=num_gpus)
    param_rrefs = net.get_global_param_rrefs()
    opt = DistributedOptimizer(optim.SGD, param_rrefs, lr=0.03)
    for i, (data, target) in enumerate(train_loader):
        with dist_autograd.context() as cid:
            model_output = net(data)
            target = target.to(model_output.device)
            loss = F.nll_loss(model_output, target)
            if i % 5 == 0:
                print(f"Rank {rank} training batch {i} loss {loss.item()}")
            dist_autograd.backward(cid, [loss])
            assert remote_method(ParameterServer.get_dist_gradients, net.param_server_rref, cid) != {}
            opt.step(cid)
    print("Training complete!")
    print("Getting accuracy....")
    get_accuracy(test_loader, net)


def get_accuracy(test_loader, model):
    model.eval()
    correct_sum = 0
    if torch.accelerator.is_available() and model.num_gpus > 0:
        acc = torch.accelerator.current_accelerator()
        device = torch.device(f"{acc}:0")
    else:
        device = torch.device("cpu")
    with torch.no_grad():
        for i, (data, target) in enumerate(test_loader):
            out = model(data)
            pred = out.argmax(dim=1, keepdim=True)
            pred, target = pred.to(device), target.to(device)
            correct = pred.eq(target.view_as(pred)).sum().item()
            correct_sum += correct
    print(f"Accuracy {correct_sum / len(test_loader.dataset)}")


def run_worker(rank, world_size, num_gpus, train_loader, test_loader):
    print(f"Worker rank {rank} initializing RPC")
    rpc.init_rpc(name=f"trainer_{rank}", rank=rank, world_size=world_size)
    print(f"Worker {rank} done initializing RPC")
    run_training_loop(rank, num_gpus, train_loader, test_loader)
    rpc.shutdown()


def mnist_like(samples, seed):
    """Random MNIST-shaped images and labels (this machine has no MNIST)."""
    generator = torch.Generator().manual_seed(seed)
    images = torch.randn(samples, 1, 28, 28, generator=generator)
    labels = torch.randint(0, 10, (samples,), generator=generator)
    return torch.utils.data.TensorDataset(images, labels)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Parameter-Server RPC based training")
    parser.add_argument("--world_size", type=int, default=4, help="Total number of participating processes.")
    parser.add_argument("--rank", type=int, default=None, help="Global rank of this process. Pass in 0 for master.")
    parser.add_argument("--num_gpus", type=int, default=0, help="Number of GPUs to use for training, between 0 and 2.")
    parser.add_argument("--master_addr", type=str, default="localhost", help="Address of master.")
    parser.add_argument("--master_port", type=str, default="29500", help="Port that master is listening on.")
    parser.add_argument("--train-size", type=int, default=60000, help="samples of the (random) training set")
    parser.add_argument("--test-size", type=int, default=10000, help="samples of the (random) test set")
    args = parser.parse_args()
    assert args.rank is not None, "must provide rank argument."
    assert args.num_gpus <= 3, f"Only 0-2 GPUs currently supported (got {args.num_gpus})."
    os.environ["MASTER_ADDR"] = args.master_addr
    os.environ["MASTER_PORT"] = args.master_port
    processes = []
    world_size = args.world_size
    mp.set_start_method("spawn")
    if args.rank == 0:
        p = mp.Process(target=run_parameter_server, args=(0, world_size))
        p.start()
        processes.append(p)
    else:
        train_loader = torch.utils.data.DataLoader(mnist_like(args.train_size, 0), batch_size=32, shuffle=True)
        test_loader = torch.utils.data.DataLoader(mnist_like(args.test_size, 1), batch_size=32, shuffle=True)
        p = mp.Process(target=run_worker, args=(args.rank, world_size, args.num_gpus, train_loader, test_loader))
        p.start()
        processes.append(p)
    for p in processes:
        p.join()
