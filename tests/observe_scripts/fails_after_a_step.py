"""Fails on purpose after one training step: `python -m grader observe` must still report what
it saw, write the timeline and the trace, and exit with this script's status."""
import torch

model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model(torch.randn(3, 4)).sum().backward()
optimizer.step()
model(torch.randn(5, 4))
raise RuntimeError("deliberate failure after one step")
