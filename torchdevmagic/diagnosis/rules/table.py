"""The one table of message rules, in the order they are tried: the first that matches wins.

A row (:class:`.row.Row`) says which group of its pattern is the expected device or dtype, the
odd one and the argument; a rule whose Match needs code is a function of :mod:`.coded`, in its
place here. The order is part of the behaviour: device mismatches first (their messages are
the most specific); out of memory before the CUDA runtime rules, since "CUDA error: out of
memory" and cuBLAS/cuDNN allocation failures are shortages, not driver trouble; the companions
(numpy, deserialize, no accelerator, asserts) before the dtype rules; and the catch-all
"CUDA error: ..." last, so every specific rule above it wins.
"""

from __future__ import annotations

from torchdevmagic.diagnosis.rules import coded as c
from torchdevmagic.diagnosis.rules.base import (
    CUDA_RUNTIME,
    DESERIALIZE,
    DEVICE_ASSERT,
    DEVICE_MISMATCH,
    DTYPE_MISMATCH,
    INVALID_DEVICE,
    META_TENSOR,
    NUMPY_GRAD,
    OUT_OF_MEMORY,
    RANK_DEVICE,
    Rule,
)
from torchdevmagic.diagnosis.rules.row import Row

DEVICE, DTYPE = DEVICE_MISMATCH, DTYPE_MISMATCH

# fmt: off
TABLE: tuple[Rule, ...] = (
    # -- the generic checks: dispatcher, TensorIterator, meta/prims, per-op, 0.4-1.x TH
    Row(
        "same_device_found_two",  # 1.6+ TensorIterator (no tail), 1.9-2.7 dispatcher
        r"Expected all tensors to be on the same device, but found at least two devices, "
        r"(\S+?) and (\S+?)!(?: \(when checking (?:argument|arugment) for argument (\w+) "
        r"in method (\w+)\))?",
        DEVICE, expected=1, odd=2, argument=3, method=4,
    ),
    Row(
        "same_device_got_is_on",  # 2.8+ dispatcher
        r"Expected all tensors to be on the same device, but got (\w+) is on (\S+), "
        r"different from other tensors on (\S+) \(when checking argument in method (\w+)\)",
        DEVICE, expected=3, odd=2, argument=1, method=4,
    ),
    Row(
        "per_op_expected",  # sparse/BLAS: ``addmm: expected 'mat2' to be CUDA, but got CPU``
        # (?<!\w): the op name starts a word. Without it every position inside a long run of
        # word characters restarts \w+ and backtracks over the rest of the run: O(n^2)
        # (tests/test_sacred_rules.py).
        r"(?<!\w)(\w+): expected '(\w+)' to be (CUDA|CPU|a (CPU) tensor), but got "
        r"(CPU|CUDA|tensor on (\S+))",
        DEVICE, expected=(4, 3), odd=(6, 5), argument=2, method=1,
    ),
    c.same_device_found_list,
    Row(
        "not_on_expected_device",  # meta/prims (1.13+): expected is the first tensor's
        r"Tensor on device (\S+) is not on the expected device (\S+?)!",
        DEVICE, expected=2, odd=1,
    ),
    Row(
        "cannot_pin",  # DataLoader(pin_memory=True) over batches already on the GPU
        r"cannot pin '(torch\.cuda\.\w+)' only dense CPU tensors can be pinned",
        DEVICE, expected="cpu", odd="cuda",
    ),
    c.index_add_copy_device,
    c.conv_input_weight_type,
    Row(
        "legacy_device_type",  # 1.0-1.9 TH checks
        r"Expected object of (?:device type|backend) (\w+) but got (?:device type|backend) "
        r"(\w+) for (?:argument #\d+ '(\w+)'|sequence element \d+ in sequence argument at "
        r"position #\d+ '(\w+)')",
        DEVICE, expected=1, odd=2, argument=(3, 4),
    ),
    c.legacy_object_type,
    Row(
        "check_same_gpu_cpu",  # 1.x: ``... is on CPU, but expected it to be on GPU``
        r"Tensor for argument #\d+ '(\w+)' is on CPU, but expected (?:it|them) to be on GPU",
        DEVICE, expected="cuda", odd="cpu", argument=1,
    ),
    c.check_same_gpu_index,
    Row(
        "ddp_device_ids_cpu_module",  # DistributedDataParallel(cpu_model, device_ids=[rank])
        r"DistributedDataParallel device_ids and output_device arguments only work with "
        r"single-device/multiple-device GPU modules or CPU modules, but got device_ids "
        r"\[[^\]]*\], output_device \S+, and module parameters \{device\(type='(\w+)'",
        DEVICE, expected="cuda", odd=1, argument="module",
    ),
    # -- device mismatches one op family words its own way
    Row(
        "rnn_device",  # RNN/LSTM/GRU: the hidden state (or the module) is not with the input
        r"Input and (hidden|parameter) tensors are not at the same device, found input tensor "
        r"at (\S+) and \w+ tensor at (\S+)",
        DEVICE, expected=2, odd=3, argument=1,
    ),
    c.indices_device,
    Row(
        "dataparallel_module_device",  # the wrapped module is not (wholly) on device_ids[0]
        r"module must have its parameters and buffers on device (\S+) \(device_ids\[0\]\) but "
        r"found one of them on device: (\S+)",
        DEVICE, expected=1, odd=2, argument="module",
    ),
    Row(
        "mps_placeholder",  # MPS names no tensor: one input of an MPS kernel is on the CPU
        r"Placeholder storage has not been allocated on MPS device!",
        DEVICE, expected="mps", odd="cpu",
    ),
    Row(
        "mps_argument",  # 2.4+ MPS linear: ``Tensor for argument input is on cpu but ...``
        r"Tensor for argument (\w+) is on (\S+) but expected on (mps|\w+)",
        DEVICE, expected=3, odd=2, argument=1,
    ),
    Row(
        "cat_same_device",  # torch.cat on some backends: ``Received cuda:0 and cpu``
        r"(?:torch\.cat\(\): all|All) input tensors must be on the same device\. "
        r"Received (\S+) and (\S+)",
        DEVICE, expected=2, odd=1, argument="tensors",
    ),
    Row(
        "sdpa_device",
        r"Expected query, key, and value to have the same device type, but got query\.device: "
        r"(\S+) key\.device: (\S+) and value\.device: (\S+) instead",
        DEVICE, expected=1, devices=(1, 2, 3),
    ),
    Row(
        "linalg_solve_device",
        r"Expected b and A to be on the same device, but found b on (\S+) and A on (\S+) instead",
        DEVICE, expected=2, odd=1, argument="b",
    ),
    c.where_device,
    Row(
        "generator_device",
        r"Expected a '(\w+)' device type for generator but found '(\w+)'",
        DEVICE, expected=1, odd=2, argument="generator",
    ),
    Row(
        "fake_tensor_propagation",  # torch.compile before 2.13
        r"found two different devices (\S+?), (\S+?)(?:\s|$)",
        DEVICE, expected=1, odd=2,
    ),
    c.pack_padded_lengths,
    Row(
        "stft_window_device",  # torch.stft/istft (1.9+): the window is not with the signal
        r"(i?stft) input and window must be on the same device but got self on (\S+) and "
        r"window on (\S+)",
        DEVICE, expected=2, odd=3, argument="window", method=1,
    ),
    Row(
        "optimizer_state_device",  # 2.0+: a state tensor (step, exp_avg) is not with its param
        r"If capturable=(?:True|False), (?:params and )?state_steps (?:must|should)|"
        r"`fused=True` requires all the params to be|"
        r"Tensors of the same index must be on the same device and the same dtype",
        DEVICE, argument="state",
    ),
    Row(
        "autograd_gradient_device",  # a custom Function's backward: a gradient elsewhere
        r"returned an invalid gradient at index (\d+) - expected device (\S+) but got (\S+)",
        DEVICE, expected=2, odd=3, argument="grad",
    ),
    c.dist_backend_device,
    Row(
        "too_many_cpu_scalars",  # a GPU kernel accepts one 0-dim CPU tensor, not several
        r"Trying to pass too many CPU scalars to non-CPU kernel",
        DEVICE, odd="cpu",
    ),
    Row(
        "dynamo_device_mismatch",  # torch.compile's graph-break explanation
        r"Tensor device mismatch",
        DEVICE,
    ),
    Row(
        "meta_copy_out",  # a meta tensor has shapes only: no values to copy
        r"Cannot copy out of meta tensor|cannot be called on meta tensors",
        META_TENSOR, odd="meta",
    ),
    Row(
        "invalid_device_string",
        r"Expected one of (?:\w+, )+\w+ device type at start of device string: ([^\n]+)|"
        r"Invalid device string: ([^\n]+)",
        INVALID_DEVICE, details={"text": (1, 2)},
    ),
    # -- one GPU per rank: ranks of a machine on one GPU, a rank's module off its GPU
    Row(
        "nccl_duplicate_gpu",  # ncclCommInitRank (NVIDIA/Megatron-LM#661, csguoh/MambaIR#39)
        r"Duplicate GPU detected : rank (\d+) and rank (\d+) both on CUDA device (\w+)",
        RANK_DEVICE, details={"rank": 1, "other": 2, "bus_id": 3},
    ),
    Row(
        "fsdp_inconsistent_device",  # FSDP's _get_compute_device: module vs device_id
        r"Inconsistent compute device and `device_id` on rank (\d+): (\S+) vs (\S+)",
        RANK_DEVICE, devices=(2, 3), expected=3, odd=2,
        details={"rank": 1, "compute": 2, "device_id": 3},
    ),
    Row(
        "barrier_device_unknown",  # dist.barrier() guessing the device (a warning)
        r"barrier\(\): using the device under current context|using GPU (\d+) to perform "
        r"barrier as devices used by this process are currently unknown",
        RANK_DEVICE, details={"guessed": 1},
    ),
    # -- out of memory, then the CUDA runtime failures that are not about placement
    c.out_of_memory,
    Row(
        "cpu_out_of_memory",  # the CPU allocator (a CUDA-less notebook, a GPU-sized batch)
        r"DefaultCPUAllocator: can't allocate memory: you tried to allocate (\d+) bytes",
        OUT_OF_MEMORY, odd="cpu", details={"form": "cpu", "requested_bytes": 1},
    ),
    c.out_of_memory_words,
    Row(
        "notebook_launcher_cuda_initialized",  # accelerate's refusal (huggingface/accelerate#3925)
        r"(?:CUDA|XPU) has been initialized before the `notebook_launcher` could create a "
        r"forked subprocess",
        CUDA_RUNTIME, devices=("cuda",), details={"what": 0},
    ),
    Row(
        "cuda_runtime_error",  # fork, device index, cuBLAS, cuDNN
        r"Cannot re-initialize CUDA in forked subprocess|CUDA error: invalid device ordinal|"
        r"CUBLAS_STATUS_\w+ when calling|CUDNN_STATUS_\w+",
        CUDA_RUNTIME, devices=("cuda",), details={"what": 0},
    ),
    # -- the companions: numpy, checkpoints, no accelerator, device-side asserts
    c.numpy_device,
    Row(
        "numpy_requires_grad",
        r"Can't call numpy\(\) on (?:Tensor|Variable) that requires grad",
        NUMPY_GRAD,
    ),
    c.deserialize_device,
    Row(
        "deserialize_backend_missing",
        r"The (\w+) device module is not registered\. If you are running on a CPU-only",
        DESERIALIZE, odd=1,
    ),
    c.no_accelerator,
    Row(
        "device_side_assert",
        r"device-side assert triggered|Assertion `[^`]+` failed",
        DEVICE_ASSERT, devices=("cuda",),
    ),
    # -- dtype mismatches: the weight's (or the target's) dtype is the expected one
    Row(
        "mat1_mat2_dtype",  # linear/addmm: mat1 is the input, mat2 the weight
        r"(mat1|self) and mat2 must have the same dtype, but got (\w+) and (\w+)",
        DTYPE, expected=3, odd=2, argument=1,
    ),
    Row(
        "mm_dtype",
        r"expected (?:m1|mat1) and (?:m2|mat2) to have the same dtype, but got: (\S+) != (\S+)",
        DTYPE, expected=2, odd=1, argument="mat1",
    ),
    Row(
        "expected_scalar_type",
        r"expected scalar type (\w+) but found (\w+)",
        DTYPE, expected=1, odd=2,
    ),
    Row(
        "legacy_scalar_type",
        r"Expected object of scalar type (\w+) but got scalar type (\w+) for argument #\d+ "
        r"'(\w+)'",
        DTYPE, expected=1, odd=2, argument=3,
    ),
    Row(
        "rnn_input_dtype",
        r"RNN input dtype \((\S+)\) does not match weight dtype \((\S+)\)",
        DTYPE, expected=2, odd=1, argument="input",
    ),
    Row(
        "rnn_input_type",
        r"input must have the type (\S+), got type (\S+)",
        DTYPE, expected=1, odd=2, argument="input",
    ),
    Row(
        "rnn_hidden_dtype",
        r"Input and (\w+) tensors are not the same dtype, found input tensor with (\w+) and \w+ "
        r"tensor with (\w+)",
        DTYPE, expected=2, odd=3, argument=1,
    ),
    Row(
        "target_dtype",
        r"expected target dtype to be Long or Byte, but got (\w+)",
        DTYPE, expected="Long", odd=1, argument="target",
    ),
    Row("found_dtype_expected", r"Found dtype (\w+) but expected (\w+)", DTYPE, expected=2, odd=1),
    # -- two operands that must share a dtype, neither named the expected one: the first is
    # taken as expected; the handler prefers the side that is not float64 (made by NumPy)
    Row(
        "same_dtype_of_type",  # linalg.solve / lu_solve / cholesky_solve
        r"Expected (\w+) and (\w+) to have the same dtype, but found \w+ of type (\w+) and "
        r"\w+ of type (\w+)",
        DTYPE, expected=3, odd=4, argument=2,
    ),
    Row(
        "same_dtype_dtypes",  # linalg.lstsq
        r"Expected (\w+) and (\w+) to have the same dtype, but got \w+'s dtype (\w+) and "
        r"\w+'s dtype (\w+)",
        DTYPE, expected=3, odd=4, argument=2,
    ),
    Row(
        "same_dtype_vectors",  # dot, and matmul of two vectors
        r"expected both vectors to have same dtype, but found (\w+) and (\w+)",
        DTYPE, expected=1, odd=2,
    ),
    Row(
        "same_scalar_type",  # index_add_, index_copy_
        r"(?<!\w)(\w+) \((\w+)\) and (\w+) \((\w+)\) must have the same scalar type",
        DTYPE, expected=2, odd=4, argument=3,
    ),
    Row(
        "same_dtypes_source",  # masked_scatter
        r"expected self and (\w+) to have same dtypes but got ?(\w+) and (\w+)",
        DTYPE, expected=2, odd=3, argument=1,
    ),
    Row(
        "dtype_for_argument",  # lerp
        r"expected dtype (\w+) for `(\w+)` but got dtype (\w+)",
        DTYPE, expected=1, odd=3, argument=2,
    ),
    Row(
        "result_type_cast",  # BCE-with-logits with integer targets, and other integer outputs
        r"result type (\w+) can't be cast to the desired output type (\w+(?: int)?)",
        DTYPE, expected=1, odd=2,
    ),
    Row(
        "indices_scalar_type",  # embedding: floating point (or int32) indices
        r"Expected tensor for argument #\d+ '(\w+)' to have (?:one of the following scalar "
        r"types: [\w, ]+|scalar type \w+); but got (\S+) instead",
        DTYPE, expected="Long", odd=2, argument=1,
    ),
    Row(
        "mps_float64",
        r"Cannot convert a MPS Tensor to float64 dtype",
        DTYPE, expected="float32", odd="float64",
    ),
    # -- last: any other CUDA runtime error (illegal address, launch failure, ...)
    Row(
        "cuda_error_other",
        r"CUDA error: ([^\n]+)",
        CUDA_RUNTIME, devices=("cuda",), details={"what": 1},
    ),
)
# fmt: on
