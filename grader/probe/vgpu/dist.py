"""torch.distributed on virtual GPUs: what would run on NCCL runs on gloo.

NCCL needs real GPUs; gloo does the same collectives on the CPU tensors behind the virtual
devices (its process groups serve "cpu" and "cuda" tensors alike). init_process_group is
replaced everywhere torch holds it (DeviceMesh calls it by its own name):

  * a backend that is or includes NCCL ("nccl", "cpu:gloo,cuda:nccl") becomes "gloo";
  * no backend: on a CUDA build torch picks NCCL for the accelerator (and DeviceMesh calls
    init_process_group() so), so it becomes "gloo" too;
  * device_id: torch validates it against the virtual devices, as on CUDA (an int names
    cuda:k), and binds the group to it.

dist.get_backend() then answers "gloo": NCCL itself is not emulated.

An all-gather into one tensor (all_gather_into_tensor) takes, as on NCCL, any contiguous output
of the group's size times the input's elements: gloo wants the inputs stacked along the first
dimension, and gets a view of the program's output so shaped (accelerate gathers a [1, 2]
tensor into a flat one, since its backend reports NCCL).

A barrier is a collective on a one-byte tensor that C++ makes on the barrier's device: the
group's bound device (init_process_group's device_id) or barrier's `device_ids`, so cuda:k,
which a CPU build cannot allocate. ProcessGroup.barrier makes it on the CPU instead (gloo
synchronizes the same way on either), after checking k against the virtual devices as CUDA
would.

Splitting a group bound to a GPU (dist.split_group, which DeviceMesh uses for the sub-meshes
of a mesh of 2 or more dimensions when init_process_group had a device_id) is not emulated:
torch deep-copies the parent's backend options, which gloo's cannot be, and gloo's split is
not one torch runs itself; it stops with a "not emulated" error instead of a TypeError.

torch.distributed.rpc runs a remote caller's Python function on a thread of its C++ agent,
which no Python Thread started: the torch-function mode (thread-local) is not active there.
The function torch calls for it (rpc.internal._run_function) enters the mode first. A tensor
on a virtual GPU sent over RPC (an argument of a Python function or of one of torch's ops, a
result) stops with a "not emulated" error: TensorPipe refuses CUDA tensors without a device
map and moves them to the mapped GPU with one, and neither is emulated (the CPU tensor behind
it would arrive on the CPU).

FullyShardedDataParallel (FSDP1) meets three things a CPU build does differently:

  * `device_id=k` (an int) means cuda:k on a CUDA build; torch.device(k) asks the accelerator,
    which a CPU build has not: FSDP's initialisation gets torch.device("cuda", k);
  * where the module gives it no GPU (the root of an auto-wrapped model keeps no parameters of
    its own, a model on the CPU or the meta device), FSDP takes torch.device of its device
    handle's current_device(), an int: its handle on torch.cuda names the device instead;
  * its post-backward hook, on each flat parameter's AccumulateGrad node (a C++ node, whose
    hooks grader.probe.vgpu.autograd cannot wrap), runs in the mode, where its unsharded
    parameter is on the compute GPU (without the mode FSDP asserts that it is on the CPU).

DTensor (tensor parallelism, FSDP2) runs its ops in C++ and Python below the torch-function
mode, on the CPU tensors behind the virtual devices. A DTensor on a "cuda" mesh reports its
rank's GPU (grader.probe.vgpu.devices); where DTensor's own code would make CUDA tensors from the
mesh's device type, it works as on a CPU mesh:

  * sharding propagation runs each op on fake tensors of the mesh's device type: CPU ones here
    (only their shapes, strides and dtypes are used);
  * random ops draw from each rank's CPU generator: DTensor's CUDA RNG tracker offsets the
    Philox state of a real GPU's generator, which the virtual devices do not have;
  * scaled_dot_product_attention runs the CPU's flash-attention kernel, for which DTensor has
    no sharding strategy: it gets the ones DTensor has for CUDA's (replicated, sharded on the
    heads or on the batch), so that tensor-parallel attention works as on GPUs.
"""

from __future__ import annotations

import functools
import inspect
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable

import torch
import torch.distributed.distributed_c10d as c10d

from grader.probe.patching import after_import, dressed, replace_in_torch
from grader.probe.vgpu.autograd import in_mode
from grader.probe.vgpu.devices import is_index, tensors_in
from grader.probe.vgpu.errors import TAG, invalid_ordinal

if TYPE_CHECKING:
    from grader.probe.vgpu.devices import VirtualCuda


def gloo_backend(backend: Any) -> Any:
    """The backend that runs `backend` here: gloo where NCCL (named or implied) would run."""
    if backend is None or str(backend).lower() in ("undefined", "") or "nccl" in str(backend).lower():
        return "gloo"
    return backend


def _on_gloo(original: Callable) -> Callable:
    def init_process_group(backend: Any = None, *args: Any, **kwargs: Any) -> Any:
        return original(gloo_backend(backend), *args, **kwargs)

    return init_process_group


def _like_a_cpu_mesh(dtensor: ModuleType) -> None:
    """DTensor's fake tensors and random ops on a cuda mesh as on a CPU mesh."""
    random, schema = dtensor._random, dtensor._op_schema
    supported = random.is_rng_supported_mesh
    replace_in_torch(random, "is_rng_supported_mesh", lambda device_mesh: device_mesh.device_type != "cuda" and supported(device_mesh))

    def fake_tensor(arg: Any) -> Any:
        if arg.tensor_meta is None:
            raise AssertionError("DTensorSpec does not contain tensor_meta.")
        meta = arg.tensor_meta
        device = "cpu" if arg.mesh.device_type == "cuda" else arg.mesh.device_type
        return torch.empty_strided(meta.shape, meta.stride, dtype=meta.dtype, device=device)

    replace_in_torch(schema, "_rebuild_tensor_from_dtensor_meta", fake_tensor)
    _cpu_attention_strategies()


def _sharded_attention(outputs: int, sharded: int) -> Callable:
    """A DTensor sharding strategy for an attention op with `outputs` outputs whose first
    `sharded` tensor inputs share the outputs' sharding (other inputs, an attention mask, are
    replicated): all replicated, or all sharded on the heads (dim 1), or on the batch (dim 0)."""
    from torch.distributed.tensor._op_schema import OpStrategy
    from torch.distributed.tensor._ops.utils import expand_to_full_mesh_op_strategy
    from torch.distributed.tensor.placement_types import Replicate, Shard

    def strategy(op_schema: Any) -> Any:
        inputs = [s for s in (*op_schema.args_schema, *op_schema.kwargs_schema.values()) if isinstance(s, OpStrategy)]
        others = [Replicate()] * (len(inputs) - sharded)
        placements = [[Replicate()] * (outputs + len(inputs))] + [[Shard(dim)] * (outputs + sharded) + others for dim in (1, 0)]
        return expand_to_full_mesh_op_strategy(op_schema.get_mesh_from_args(), op_schema, placements, input_index=outputs)

    return strategy


def _cpu_attention_strategies() -> None:
    """Sharding strategies for the CPU's flash attention, forward and backward."""
    from torch.distributed.tensor._op_schema import RuntimeSchemaInfo
    from torch.distributed.tensor._ops.utils import register_op_strategy

    aten = torch.ops.aten
    register_op_strategy(aten._scaled_dot_product_flash_attention_for_cpu.default, schema_info=RuntimeSchemaInfo(3))(
        _sharded_attention(2, 3)
    )
    register_op_strategy(aten._scaled_dot_product_flash_attention_for_cpu_backward.default, schema_info=RuntimeSchemaInfo(6))(
        _sharded_attention(3, 6)
    )


def _barrier_on_cpu(vcuda: VirtualCuda, original: Callable) -> Callable:
    """ProcessGroup.barrier whose token tensor is made on the CPU where it would be on a GPU."""
    from torch._C._distributed_c10d import BarrierOptions

    def barrier(self: Any, *args: Any, **kwargs: Any) -> Any:
        opts = kwargs.get("opts", args[0] if args else None)
        device = getattr(opts, "device", None) if isinstance(opts, BarrierOptions) else None
        if device is None or device.type != "cuda":
            return original(self, *args, **kwargs)
        if device.index is not None and not 0 <= device.index < vcuda.count:
            raise invalid_ordinal()
        on_cpu = BarrierOptions()
        on_cpu.device, on_cpu.device_ids = torch.device("cpu"), list(opts.device_ids)
        on_cpu.timeout, on_cpu.asyncOp = opts.timeout, opts.asyncOp
        return original(self, on_cpu)

    return barrier


def nccl_gather_output(output: torch.Tensor, input: torch.Tensor, size: int) -> torch.Tensor:
    """The output of an all-gather into one tensor as gloo wants it — the group's inputs stacked
    along the first dimension — where NCCL takes any contiguous output of the group's size times
    the input's elements (accelerate gathers a [1, 2] tensor into a flat [2] one): a view of it,
    so the gathered values land where the program looks. Anything else is left as it is, for
    gloo to refuse as NCCL would."""
    wanted = (size * input.shape[0], *input.shape[1:]) if input.dim() else (size,)
    if tuple(output.shape) == wanted or output.numel() != size * input.numel() or not output.is_contiguous():
        return output
    return output.view(wanted)


def _gather_sizes_as_nccl(original: Callable, many: bool = False) -> Callable:
    """ProcessGroup._allgather_base (or its coalesced form, `many`) with NCCL's size rule."""

    def gather(self: Any, output: Any, input: Any, *args: Any, **kwargs: Any) -> Any:
        size = self.size()
        if many:
            output = [nccl_gather_output(o, i, size) for o, i in zip(output, input)]
        else:
            output = nccl_gather_output(output, input, size)
        return original(self, output, input, *args, **kwargs)

    return gather


SPLIT_BOUND = (
    "not emulated on virtual GPUs: dist.split_group of a process group bound to a GPU "
    "(init_process_group(device_id=...)), which DeviceMesh uses for a mesh of 2 or more dimensions; "
    "gloo runs NCCL's groups here and cannot split one. Without device_id, DeviceMesh makes its groups with new_group, which is emulated"
)


def _split_not_emulated(split_group: Callable) -> Callable:
    """dist.split_group, stopped as not emulated where it would split a bound gloo group."""

    def split(parent_pg: Any = None, split_ranks: Any = None, timeout: Any = None, pg_options: Any = None, *args: Any, **kwargs: Any) -> Any:
        parent = parent_pg if parent_pg is not None else c10d._get_default_group()
        if pg_options is None and getattr(parent, "bound_device_id", None) is not None and c10d.get_backend(parent) == "gloo":
            raise RuntimeError(SPLIT_BOUND)
        return split_group(parent_pg, split_ranks, timeout, pg_options, *args, **kwargs)

    return split


RPC_GPU_TENSOR = (
    "not emulated on virtual GPUs: sending a tensor on cuda:{index} over torch.distributed.rpc "
    "(TensorPipe's CUDA device maps); move it to the CPU first (.cpu()), as TensorPipe requires without a device map"
)


def _refuse_on_gpu(tensor: torch.Tensor) -> None:
    """Stop, as not emulated, before a tensor on a virtual GPU is sent over RPC."""
    index = getattr(tensor, TAG, None)
    if index is not None and index >= 0:
        raise RuntimeError(RPC_GPU_TENSOR.format(index=index))


def _rpc_on_virtual_gpus(vcuda: VirtualCuda, internal: ModuleType) -> None:
    """rpc.internal._run_function (the callee's entry for a Python function) in the mode; RPC's
    pickler refuses tensors on virtual GPUs (see the module docstring)."""
    run_function = internal._run_function
    table = internal._internal_rpc_pickler._dispatch_table
    reduce = table[torch.Tensor]

    def tensor_reducer(tensor: torch.Tensor) -> Any:
        _refuse_on_gpu(tensor)
        return reduce(tensor)

    table[torch.Tensor] = tensor_reducer

    def in_mode(python_udf: Any) -> Any:
        with vcuda.active():
            return run_function(python_udf)

    replace_in_torch(internal, "_run_function", in_mode)


def _builtin_refusing_gpu_tensors(invoke: Callable) -> Callable:
    """rpc's call of one of torch's ops on another worker (its arguments are serialized in C++)."""

    def invoke_builtin(dst: Any, name: str, timeout: Any, *args: Any, **kwargs: Any) -> Any:
        for tensor in tensors_in((args, kwargs)):
            _refuse_on_gpu(tensor)
        return invoke(dst, name, timeout, *args, **kwargs)

    return invoke_builtin


def _rpc_api(api: ModuleType) -> None:
    """rpc's calls of torch's ops refuse tensors on virtual GPUs (see the module docstring)."""
    for name in ("_invoke_rpc_builtin", "_invoke_remote_builtin"):
        replace_in_torch(api, name, _builtin_refusing_gpu_tensors(getattr(api, name)))


class _CudaHandle:
    """torch.cuda as FSDP1's device handle, but for current_device(), which names the current GPU
    (torch.device("cuda", k)): FSDP1 reads it as torch.device(handle.current_device())."""

    def __getattr__(self, name: str) -> Any:
        return getattr(torch.cuda, name)

    @staticmethod
    def current_device() -> torch.device:
        return torch.device("cuda", torch.cuda.current_device())


def _device_id_on_cuda(function: Callable) -> Callable:
    """`function`, its `device_id` argument an int k taken as cuda:k (as a CUDA build reads it)."""
    signature = inspect.signature(function)

    def call(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        if is_index(bound.arguments.get("device_id")):
            bound.arguments["device_id"] = torch.device("cuda", bound.arguments["device_id"])
        return function(*bound.args, **bound.kwargs)

    return call


def _fsdp1_on_virtual_gpus(vcuda: VirtualCuda, init_utils: ModuleType) -> None:
    """FullyShardedDataParallel's device_id, device handle and post-backward hook (see the module docstring)."""
    from torch.distributed.fsdp import _common_utils, _runtime_utils

    for name in ("_init_device_handle", "_get_device_from_device_id"):
        replace_in_torch(init_utils, name, _device_id_on_cuda(getattr(init_utils, name)))
    handle = _common_utils._FSDPDeviceHandle
    from_device = handle.from_device
    handle.from_device = classmethod(lambda cls, device: _CudaHandle() if device.type == "cuda" else from_device(device))
    replace_in_torch(_runtime_utils, "_post_backward_hook", in_mode(vcuda, _runtime_utils._post_backward_hook))


def _ddp_buckets_counted(vcuda: VirtualCuda, distributed: ModuleType) -> None:
    """DistributedDataParallel's gradient buckets, which its C++ reducer allocates on the
    module's GPU, counted in that GPU's memory statistics while the DDP module lives (the sizes
    DDP logs). With gradient_as_bucket_view the gradients are views of the buckets: counted once
    they appear, after the first backward."""
    ddp = distributed.DistributedDataParallel
    build = ddp.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        build(self, *args, **kwargs)
        device = next((getattr(p, TAG, None) for p in self.module.parameters() if p.requires_grad), None)
        if not isinstance(device, int) or device < 0 or self.gradient_as_bucket_view:
            return
        sizes = str(self._get_ddp_logging_data().get("bucket_sizes", ""))
        for size in sizes.split(","):
            if size.strip().isdigit():
                vcuda.count_block(self, device, int(size))

    ddp.__init__ = dressed(__init__, build)


class _DeviceType(type):
    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, torch.device)

    def __subclasscheck__(cls, subclass: type) -> bool:
        return issubclass(subclass, torch.device)


class _CudaIndexDevice(metaclass=_DeviceType):
    """torch.device as a CUDA build reads it: torch.device(k), a bare int, is cuda:k (a CPU
    build asks the accelerator, which is absent); isinstance() accepts torch's own devices."""

    def __new__(cls, *args: Any, **kwargs: Any) -> torch.device:  # type: ignore[misc]
        if len(args) == 1 and not kwargs and is_index(args[0]):
            return torch.device("cuda", args[0])
        return torch.device(*args, **kwargs)


class _TorchReadingIntsAsCuda(ModuleType):
    """torch, for a module of torch's that writes torch.device(int): its `device` is _CudaIndexDevice."""

    device = _CudaIndexDevice

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)


def _sharded_tensor_on_cuda(vcuda: VirtualCuda, module: ModuleType) -> None:
    """ShardedTensor's code makes torch.device(torch.cuda.current_device()) (its .cuda(), the
    device of an empty shard's results) and torch.device(torch.accelerator.current_device_index())
    (torch.equal and allclose of sharded tensors): the module's `torch` reads an int as cuda:k.
    ShardedTensor's own ops (its __torch_function__, which torch calls outside the mode) run in the mode."""
    module.torch = _TorchReadingIntsAsCuda("torch")  # type: ignore[attr-defined]
    sharded = getattr(module, "ShardedTensor", None)
    if sharded is not None and "__torch_function__" in vars(sharded):
        function = sharded.__torch_function__.__func__

        def __torch_function__(cls: type, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            with vcuda.active():
                return function(cls, func, types, args, kwargs)

        sharded.__torch_function__ = classmethod(functools.update_wrapper(__torch_function__, function))


def _local_results_on_the_mesh(vcuda: VirtualCuda, dispatch: ModuleType) -> None:
    """DTensor computes an op's local results below the torch-function mode (its dispatch), on
    the CPU tensors behind the virtual devices, so they come out untagged and `to_local()` would
    say cpu (then rotary embeddings' view_as_complex, or attention's query against a key of the
    GPU, fail as mixed devices). Where it wraps them (OpDispatcher.wrap) on a cuda mesh they are
    put on this thread's GPU, as CUDA's DTensor computes on the current device."""
    dispatcher = dispatch.OpDispatcher
    wrap = dispatcher.wrap

    def wrapped(res: object, spec: Any) -> object:
        specs = spec if isinstance(spec, (list, tuple)) else (spec,)
        if any(getattr(getattr(s, "mesh", None), "device_type", None) == "cuda" for s in specs):
            for tensor in tensors_in(res):
                if getattr(tensor, TAG, None) is None:
                    vcuda.tag(tensor, vcuda.current)
        return wrap(res, spec)

    dispatcher.wrap = staticmethod(dressed(wrapped, wrap))


def install_distributed(vcuda: VirtualCuda) -> None:
    """Run NCCL's process groups on gloo, barriers on the CPU, DTensor's random ops as on the CPU,
    RPC's remote functions in the mode, FSDP1 on the virtual GPUs (see the module docstring)."""
    replace_in_torch(c10d, "init_process_group", _on_gloo(c10d.init_process_group))
    process_group = torch._C._distributed_c10d.ProcessGroup
    process_group.barrier = dressed(_barrier_on_cpu(vcuda, process_group.barrier), process_group.barrier)
    for name, many in (("_allgather_base", False), ("all_gather_single", False), ("allgather_into_tensor_coalesced", True), ("all_gather_single_coalesced", True)):
        if hasattr(process_group, name):  # the names of an all-gather into one tensor, by torch version
            setattr(process_group, name, dressed(_gather_sizes_as_nccl(getattr(process_group, name), many), getattr(process_group, name)))
    replace_in_torch(c10d, "split_group", _split_not_emulated(c10d.split_group))
    after_import("torch.distributed.tensor", _like_a_cpu_mesh)
    after_import("torch.distributed.tensor._dispatch", lambda dispatch: _local_results_on_the_mesh(vcuda, dispatch))
    after_import("torch.distributed.rpc.internal", lambda internal: _rpc_on_virtual_gpus(vcuda, internal))
    after_import("torch.distributed.rpc.api", _rpc_api)
    after_import("torch.distributed.fsdp._init_utils", lambda init_utils: _fsdp1_on_virtual_gpus(vcuda, init_utils))
    after_import("torch.nn.parallel.distributed", lambda distributed: _ddp_buckets_counted(vcuda, distributed))
    for name in ("api", "_ops.tensor_ops", "_ops.binary_cmp"):
        after_import(f"torch.distributed._shard.sharded_tensor.{name}", lambda module: _sharded_tensor_on_cuda(vcuda, module))
