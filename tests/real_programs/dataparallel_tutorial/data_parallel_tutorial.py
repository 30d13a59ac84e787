# Real-program corpus for virtual GPUs (tests/test_real_programs.py).
# Origin: pytorch/tutorials, beginner_source/blitz/data_parallel_tutorial.py @ 0ad33d6
# ("Optional: Data Parallelism", Sung Kim and Jenny Kang), BSD-3-Clause. A rewritten
# equivalent with the same calls in the same forms (device "cuda:0", nn.DataParallel(model)
# when torch.cuda.device_count() > 1, model.to(device), data.to(device)) and the same printed
# lines, whose output for 2, 3 and 8 GPUs the tutorial shows.
# Changed for this machine: nothing.
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset

input_size = 5
output_size = 2
batch_size = 30
data_size = 100

device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")


class RandomDataset(Dataset):
    def __init__(self, size, length):
        self.len = length
        self.data = torch.randn(length, size)

    def __getitem__(self, index):
        return self.data[index]

    def __len__(self):
        return self.len


rand_loader = DataLoader(dataset=RandomDataset(input_size, data_size), batch_size=batch_size, shuffle=True)


class Model(nn.Module):
    def __init__(self, input_size, output_size):
        super().__init__()
        self.fc = nn.Linear(input_size, output_size)

    def forward(self, input):
        output = self.fc(input)
        print("\tIn Model: input size", input.size(), "output size", output.size())
        return output


model = Model(input_size, output_size)
if torch.cuda.device_count() > 1:
    print("Let's use", torch.cuda.device_count(), "GPUs!")
    model = nn.DataParallel(model)
model.to(device)

for data in rand_loader:
    input = data.to(device)
    output = model(input)
    print("Outside: input size", input.size(), "output_size", output.size())
