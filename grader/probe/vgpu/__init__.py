"""Virtual GPUs: unmodified code believes N CUDA devices exist, on a machine without them.

Modules:
    install        -- puts every part in place (`install(n)`), in a rank or under `grader run`.
    devices        -- the torch-function mode that tags CPU tensors with their virtual device.
    api            -- torch.cuda and torch.accelerator as N devices answer.
    errors         -- CUDA's own wording for a device mismatch or a missing device.
    autograd, amp, parallel, serialization, dist
                   -- the parts of torch that run below the mode or decide on their own that
                      there is no GPU: autograd callbacks, autocast, DataParallel, checkpoints,
                      torch.distributed (NCCL on gloo, barriers, RPC, DTensor),
                      torch.multiprocessing (tensors sent to other processes).
"""
