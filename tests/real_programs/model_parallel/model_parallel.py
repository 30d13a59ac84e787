# Real-program corpus for virtual GPUs (tests/test_real_programs.py).
# Origin: pytorch/tutorials, intermediate_source/model_parallel_tutorial.py @ 03b2773 ("Model
# Parallel Best Practices", Shen Li), BSD-3-Clause. A rewritten equivalent: the toy model with
# net1 on 'cuda:0' and net2 on 'cuda:1', then a two-stage network split as the tutorial splits
# ResNet-50 (seq1 on cuda:0; seq2 and fc on cuda:1) and its pipelined version (split_size
# micro-batches, s_next/s_prev), trained by the tutorial's train().
# Changed for this machine: torchvision is not installed, so the two stages are a small CNN
# (conv, batch norm, ReLU, pooling) instead of ResNet-50's layers; 3 batches of 12 images of
# 32x32 instead of 120 of 128x128; the timing plots are replaced by a line per model giving
# its outputs' device and its last loss.
import torch
import torch.nn as nn
import torch.optim as optim


class ToyModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.net1 = torch.nn.Linear(10, 10).to("cuda:0")
        self.relu = torch.nn.ReLU()
        self.net2 = torch.nn.Linear(10, 5).to("cuda:1")

    def forward(self, x):
        x = self.relu(self.net1(x.to("cuda:0")))
        return self.net2(x.to("cuda:1"))


model = ToyModel()
loss_fn = nn.MSELoss()
optimizer = optim.SGD(model.parameters(), lr=0.001)
optimizer.zero_grad()
outputs = model(torch.randn(20, 10))
labels = torch.randn(20, 5).to("cuda:1")
loss_fn(outputs, labels).backward()
optimizer.step()
print(f"ToyModel: outputs on {outputs.device}")

num_classes = 10


class ModelParallelCNN(nn.Module):
    """A CNN split over two GPUs the way the tutorial splits ResNet-50."""

    def __init__(self):
        super().__init__()
        self.seq1 = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2)).to("cuda:0")
        self.seq2 = nn.Sequential(nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1)).to("cuda:1")
        self.fc = nn.Linear(16, num_classes).to("cuda:1")

    def forward(self, x):
        x = self.seq2(self.seq1(x).to("cuda:1"))
        return self.fc(x.view(x.size(0), -1))


class PipelineParallelCNN(ModelParallelCNN):
    def __init__(self, split_size=4):
        super().__init__()
        self.split_size = split_size

    def forward(self, x):
        splits = iter(x.split(self.split_size, dim=0))
        s_next = next(splits)
        s_prev = self.seq1(s_next).to("cuda:1")
        ret = []
        for s_next in splits:
            s_prev = self.seq2(s_prev)  # A. s_prev runs on cuda:1
            ret.append(self.fc(s_prev.view(s_prev.size(0), -1)))
            s_prev = self.seq1(s_next).to("cuda:1")  # B. s_next runs on cuda:0, concurrently with A on GPUs
        s_prev = self.seq2(s_prev)
        ret.append(self.fc(s_prev.view(s_prev.size(0), -1)))
        return torch.cat(ret)


num_batches = 3
batch_size = 12
image_w = image_h = 32


def train(model):
    model.train(True)
    loss_fn = nn.MSELoss()
    optimizer = optim.SGD(model.parameters(), lr=0.001)
    one_hot_indices = torch.LongTensor(batch_size).random_(0, num_classes).view(batch_size, 1)
    for _ in range(num_batches):
        inputs = torch.randn(batch_size, 3, image_w, image_h)
        labels = torch.zeros(batch_size, num_classes).scatter_(1, one_hot_indices, 1)
        optimizer.zero_grad()
        outputs = model(inputs.to("cuda:0"))
        labels = labels.to(outputs.device)
        loss = loss_fn(outputs, labels)
        loss.backward()
        optimizer.step()
    return outputs, loss


for name, net in (("Model Parallel", ModelParallelCNN()), ("Pipelining Model Parallel", PipelineParallelCNN())):
    outputs, loss = train(net)
    print(f"{name}: outputs {tuple(outputs.shape)} on {outputs.device}, loss {loss.item():.4f}")
