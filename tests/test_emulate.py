"""The emulated GPU's engine: placement, real values, autograd, optimizers, torch.cuda
stand-ins, checkpoints, limits, and leaving torch exactly as it was."""

from __future__ import annotations

import gc
import io
import sys
import warnings
from typing import Any

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from torchdevmagic.emulate import emulate_cuda, start, stop  # noqa: E402
from torchdevmagic.emulate.cuda import memory as _memory  # noqa: E402

pytestmark = pytest.mark.usefixtures("emulation_never_left_on")


@pytest.fixture(autouse=True)
def _collected() -> None:
    # Emulated tensors that only reference cycles keep (an earlier test's pytest.raises holds
    # its traceback, whose frames hold their arguments) still count until collected: the
    # figures asserted below start from an empty GPU.
    gc.collect()


def _touched_modules() -> list[Any]:
    import torch.nn.parallel._functions
    import torch.nn.parallel.comm
    import torch.optim.optimizer
    import torch.serialization
    import torch.utils._foreach_utils
    import torch.utils.data._utils.pin_memory
    import torch.utils.dlpack

    mods = [
        torch,
        torch.cuda,
        torch.cuda.memory,
        torch.backends.cuda,
        torch.backends.cudnn,
        torch._utils,
        torch.nn.parallel.comm,
        sys.modules["torch.nn.parallel.data_parallel"],
        torch.nn.parallel._functions,
        torch.utils.data._utils.pin_memory,
        torch.serialization,
        sys.modules["torch.optim.optimizer"],
        torch.utils,
        torch.utils._foreach_utils,
        torch._C,
        torch._C._functions,
        torch._C._nested,
        torch.utils.dlpack,
    ]
    for name in ("accelerator", "distributed"):
        if hasattr(torch, name):
            mods.append(getattr(torch, name))
    return mods


def _snapshot() -> dict[str, Any]:
    snap: dict[str, Any] = {}
    for mod in _touched_modules():
        for key, value in list(vars(mod).items()):
            snap[f"{mod.__name__}.{key}"] = id(value)
            if issubclass(type(value), list):  # isinstance reads __class__: reduce_op warns
                snap[f"{mod.__name__}.{key}[]"] = [id(v) for v in value]
    snap["mode stack"] = torch._C._len_torch_function_stack()
    return snap


def test_leaving_restores_every_attribute_by_identity() -> None:
    import torch.distributed as dist

    before = _snapshot()
    originals = (torch.cuda.is_available, torch.compile, torch._utils._rebuild_tensor_v2)
    init_pg = dist.init_process_group
    grouping = torch._C._group_tensors_by_device_and_dtype
    with emulate_cuda(devices=2):
        assert torch.cuda.is_available is not originals[0]
        assert _snapshot() != before
    assert _snapshot() == before
    assert (torch.cuda.is_available, torch.compile, torch._utils._rebuild_tensor_v2) == originals
    assert dist.init_process_group is init_pg
    assert torch._C._group_tensors_by_device_and_dtype is grouping
    assert torch.cuda.is_available() is False


def test_start_stop_and_refusals() -> None:
    session = start(devices=3)
    try:
        assert torch.cuda.device_count() == 3
        with pytest.raises(RuntimeError, match="already on"):
            start()
    finally:
        stop()
    stop()  # idempotent
    assert torch.cuda.is_available() is False
    with pytest.raises(ValueError, match="positive int"):
        start(devices=0)
    for memory in ("64MiB", 0, 1.5, True):  # refused at once, not at the first allocation
        with pytest.raises(ValueError, match=r"^memory must be a positive int of bytes"):
            start(memory=memory)  # type: ignore[arg-type]
    assert torch.cuda.is_available() is False
    assert session.count == 3


def test_cuda_face(emu: Any) -> None:
    assert torch.cuda.is_available() and torch.cuda.device_count() == 2
    assert "mulated" in torch.cuda.get_device_name(0)
    for make in (
        lambda: torch.zeros(3, device="cuda"),
        lambda: torch.zeros(3).cuda(),
        lambda: torch.zeros(3).to("cuda"),
        lambda: torch.zeros(3).to(torch.device("cuda:0")),
        lambda: torch.zeros(3).to(device=0),
        lambda: torch.tensor([1.0, 2.0, 3.0], device=torch.device("cuda")),
    ):
        t = make()
        assert t.device == torch.device("cuda", 0) and t.is_cuda and t.device.type == "cuda"
        assert t.get_device() == 0 and "device='cuda:0'" in repr(t)
    t1 = torch.ones(2, device="cuda:1")
    assert t1.device.index == 1 and "device='cuda:1'" in repr(t1)
    assert torch.zeros(2).to(t1).device == t1.device
    assert t1.cpu().device.type == "cpu" and type(t1.cpu()) is torch.Tensor
    assert t1.to("cpu").tolist() == [1.0, 1.0]
    with torch.cuda.device(1):
        assert torch.zeros(1, device="cuda").device.index == 1
        assert torch.cuda.current_device() == 1
    assert torch.cuda.current_device() == 0


def test_values_equal_the_cpu_bit_for_bit(emu: Any) -> None:
    torch.manual_seed(0)
    a, b = torch.randn(5, 7), torch.randn(7, 3)
    ea, eb = a.cuda(), b.cuda()
    for cpu, emulated in (
        (a @ b, ea @ eb),
        (torch.softmax(a, -1), torch.softmax(ea, -1)),
        (a.sum(0), ea.sum(0)),
        (a[1:, ::2], ea[1:, ::2]),
        (torch.cat([a, a]), torch.cat([ea, ea])),
    ):
        assert emulated.device.type == "cuda"
        assert torch.equal(emulated.cpu(), cpu)
    assert ea[0, 0].item() == a[0, 0].item()
    assert f"{ea[0, 0]:.3f}" == f"{a[0, 0]:.3f}"


def _train(device: str, opt_cls: Any, steps: int = 4, **opt_kwargs: Any) -> list[float]:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 6 * 6, 10)
    ).to(device)
    opt = opt_cls(model.parameters(), lr=1e-2, **opt_kwargs)
    losses = []
    for _ in range(steps):
        # drawn on the CPU and moved: each GPU has its own generator, as on a real one
        x = torch.randn(4, 3, 8, 8).to(device)
        y = torch.randint(0, 10, (4,)).to(device)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize(
    ("opt_cls", "kwargs"),
    [(torch.optim.SGD, {"momentum": 0.9}), (torch.optim.AdamW, {})],
)
def test_training_loop_losses_equal_the_cpu(opt_cls: Any, kwargs: dict[str, Any]) -> None:
    cpu = _train("cpu", opt_cls, **kwargs)
    with emulate_cuda():
        emulated = _train("cuda", opt_cls, **kwargs)
    assert emulated == cpu  # bit for bit


@pytest.mark.emulate_swap
def test_module_to_keeps_parameter_identity_and_optimizer(emu: Any) -> None:
    model = nn.Linear(4, 2)
    weight = model.weight
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model.to("cuda")
    assert model.weight is weight and isinstance(model.weight, nn.Parameter)
    assert model.weight.device.type == "cuda"
    before = model.weight.detach().cpu().clone()
    model(torch.randn(3, 4, device="cuda")).sum().backward()
    assert model.weight.grad is not None and model.weight.grad.device.type == "cuda"
    opt.step()
    assert not torch.equal(model.weight.detach().cpu(), before)


def test_moving_between_emulated_gpus_while_a_graph_holds_the_parameters(emu: Any) -> None:
    # On a GPU, Module.to assigns param.data; swap_tensors would refuse here (the output's
    # graph holds the weight), so emulated-to-emulated moves hand over the CPU tensor instead.
    layer = nn.Linear(2, 2).to("cuda:0")
    out = layer(layer(torch.randn(1, 2, device="cuda:0")))  # the graph holds it twice
    weight = layer.weight
    layer.to("cuda:1")
    assert layer.weight is weight and weight.device == torch.device("cuda", 1)
    assert layer(torch.randn(1, 2, device="cuda:1")).device.index == 1
    assert out.device.index == 0


def test_tensors_made_inside_stay_usable_and_say_so() -> None:
    with emulate_cuda():
        t = torch.arange(3.0, device="cuda")
    assert t.is_emulated and t.device.type == "cuda"
    assert (t + 1).tolist() == [1.0, 2.0, 3.0]
    assert "device='cuda:0'" in repr(t)
    assert t.cpu().tolist() == [0.0, 1.0, 2.0]


def test_memory_accounting_and_out_of_memory() -> None:
    with emulate_cuda(memory=1 << 20):
        assert torch.cuda.memory_allocated() == 0
        t = torch.zeros(1000, device="cuda")
        assert torch.cuda.memory_allocated() == 4000
        view = t[10:]
        assert torch.cuda.memory_allocated() == 4000  # a view holds no new storage
        assert torch.cuda.max_memory_allocated() >= 4000
        assert torch.cuda.memory_reserved() >= 4000
        free, total = torch.cuda.mem_get_info()
        assert total == 1 << 20 and free <= total - 4000
        with pytest.raises(torch.cuda.OutOfMemoryError, match=r"^CUDA out of memory\. Tried"):
            torch.zeros(1 << 20, device="cuda")
        del t, view
        assert torch.cuda.memory_allocated() == 0
        torch.cuda.empty_cache()
        torch.cuda.synchronize()


def test_module_to_counts_its_parameters_once_and_fails_with_cuda_oom() -> None:
    # nn.Parameter(...) inside Module.to detaches the moved tensor: an alias, not a new
    # allocation. Counted twice, a 64 MiB weight on a 96 MiB GPU failed as torch's
    # "_apply(): Couldn't swap Linear.weight" instead of fitting.
    with emulate_cuda(memory=96 << 20):
        layer = torch.nn.Linear(4096, 4096).to("cuda")
        assert layer.weight.device.type == "cuda"
        assert torch.cuda.memory_allocated() == (4096 * 4096 + 4096) * 4
        del layer
    with emulate_cuda(memory=48 << 20):
        with pytest.raises(RuntimeError) as caught:
            torch.nn.Linear(4096, 4096).to("cuda")
        assert type(caught.value) is type(_memory.out_of_memory(0, 1, 0, 1, 0))
        assert str(caught.value).startswith("CUDA out of memory. Tried to allocate 64.00 MiB.")


def test_out_of_memory_reports_free_memory_as_cuda_does_after_releasing_its_cache() -> None:
    # The allocator frees its unused cached blocks before it raises: what the message calls
    # free is the capacity less what stays reserved, as mem_get_info says right after.
    with emulate_cuda(memory=64 << 20):
        big = torch.empty(40 << 20, dtype=torch.uint8, device="cuda")
        keep = torch.empty(3 << 20, dtype=torch.uint8, device="cuda")
        assert torch.cuda.memory_reserved() == 44 << 20  # 2 MiB blocks
        del big  # 40 MiB now cached: reserved, not allocated
        assert torch.cuda.memory_reserved() == 44 << 20
        with pytest.raises(RuntimeError) as caught:
            torch.empty(62 << 20, dtype=torch.uint8, device="cuda")
        text = str(caught.value)
        assert "Tried to allocate 62.00 MiB. GPU 0 has a total capacity of 64.00 MiB" in text
        assert "of which 60.00 MiB is free." in text, text
        assert "3.00 MiB is allocated by PyTorch, and 1.00 MiB is reserved" in text, text
        assert torch.cuda.mem_get_info() == (60 << 20, 64 << 20)
        del keep


def test_activations_the_graph_keeps_and_unread_gradients_count() -> None:
    # The autograd graph lives on the CPU tensors: what it saves for backward is still GPU
    # memory on a real device, and a training step that keeps too much of it runs out.
    with emulate_cuda(memory=64 << 20):
        w = torch.zeros(1 << 20, device="cuda", requires_grad=True)  # 4 MiB
        x = w * 1.0
        for _ in range(5):
            x = x.sin()  # sin saves its input: one 4 MiB activation each
        assert torch.cuda.memory_allocated() == 7 * (4 << 20)  # w, five inputs, x
        loss = x.sum()
        del x
        assert torch.cuda.memory_allocated() >= 6 * (4 << 20)  # kept by loss's graph
        loss.backward()
        del loss
        # The graph is gone; w and its gradient (made by the engine, never read) remain.
        assert torch.cuda.memory_allocated() == 2 * (4 << 20)
        assert w.grad is not None and torch.cuda.memory_allocated() == 2 * (4 << 20)
        with pytest.raises(RuntimeError, match=r"^CUDA out of memory\. Tried to allocate 4\.00"):
            x = w * 1.0
            for _ in range(20):
                x = x.sin()
        del x
    with emulate_cuda(memory=64 << 20):  # on again: w is still on the GPU
        assert torch.cuda.memory_allocated() == 2 * (4 << 20)
        del w
        assert torch.cuda.memory_allocated() == 0


def test_streams_and_events_keep_host_time(emu: Any) -> None:
    s = torch.cuda.Stream()
    start_evt = torch.cuda.Event(enable_timing=True)
    end_evt = torch.cuda.Event(enable_timing=True)
    with torch.cuda.stream(s):
        assert torch.cuda.current_stream() is s
        start_evt.record()
        torch.ones(10, device="cuda").sum()
        end_evt.record()
    assert torch.cuda.current_stream() is not s
    end_evt.synchronize()
    assert end_evt.query() and start_evt.elapsed_time(end_evt) >= 0.0
    assert s.emulated and start_evt.emulated


def test_cuda_checkpoint_round_trip_and_load_without_emulation() -> None:
    # A weights_only load before emulation fills torch's lru_cache of allowed rebuilders.
    warm = io.BytesIO()
    torch.save(torch.ones(1), warm)
    torch.load(io.BytesIO(warm.getvalue()), weights_only=True)
    start(devices=2)
    buf = io.BytesIO()
    torch.save({"w": torch.arange(4.0, device="cuda:1")}, buf)
    data = buf.getvalue()
    loaded = torch.load(io.BytesIO(data))["w"]
    assert loaded.device == torch.device("cuda", 1) and loaded.tolist() == [0, 1, 2, 3]
    on_cpu = torch.load(io.BytesIO(data), map_location="cpu")["w"]
    assert type(on_cpu) is torch.Tensor and on_cpu.device.type == "cpu"
    plain = io.BytesIO()
    torch.save(torch.ones(2), plain)
    mapped = torch.load(io.BytesIO(plain.getvalue()), map_location="cuda")
    assert mapped.device == torch.device("cuda", 0)
    stop()
    with pytest.raises(RuntimeError, match="Attempting to deserialize object on a CUDA device"):
        torch.load(io.BytesIO(data))
    assert torch.load(io.BytesIO(data), map_location="cpu")["w"].tolist() == [0, 1, 2, 3]


def test_numpy_fails_as_on_a_gpu(emu: Any) -> None:
    t = torch.ones(2, device="cuda")
    msg = (
        "can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the tensor "
        "to host memory first."
    )
    with pytest.raises(TypeError) as info:
        t.numpy()
    assert str(info.value) == msg
    assert t.cpu().numpy().tolist() == [1.0, 1.0]


def test_limits_are_one_line_errors(emu: Any) -> None:
    from torchdevmagic.emulate import EmulationUnsupported

    compiled = torch.compile(nn.Linear(2, 2).cuda())
    with pytest.raises(EmulationUnsupported, match=r"^torch\.compile is not emulated"):
        compiled(torch.ones(1, 2, device="cuda"))
    lib = torch.library.Library("tdm_emu_test", "FRAGMENT")
    lib.define("cuda_only(Tensor x) -> Tensor")
    lib.impl("cuda_only", lambda x: x * 2, "CUDA")
    with pytest.raises(EmulationUnsupported, match="has no CPU kernel") as info:
        torch.ops.tdm_emu_test.cuda_only(torch.ones(2, device="cuda"))
    assert "\n" not in str(info.value)


def test_nested_tensors_are_refused_in_one_line(emu: Any) -> None:
    """A GPU holds nested tensors; the emulated GPU does not (sparse ones it does:
    tests/test_emulate_sparse.py). Moving one there is refused in one line naming what is
    not emulated, not with torch's internal words about sizes."""
    from torchdevmagic.emulate import EmulationUnsupported

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the nested API's prototype warning
        nested = torch.nested.nested_tensor([torch.ones(2), torch.ones(3)])
    with pytest.raises(EmulationUnsupported, match=r"^nested tensors on the emulated GPU") as info:
        nested.cuda()
    assert "\n" not in str(info.value) and "to_padded_tensor" in str(info.value)
    with pytest.raises(EmulationUnsupported, match=r"^tensors of layout torch._mkldnn on the"):
        torch.eye(3, device="cuda").to_mkldnn()


def test_autocast_and_grad_scaler_run(emu: Any) -> None:
    if not torch._C._dispatch_has_kernel_for_dispatch_key(
        "aten::_amp_update_scale_", "CPU"
    ):  # GradScaler's two ops run on the CPU tensors
        pytest.skip(f"torch {torch.__version__} has no CPU kernel for GradScaler's ops")
    model = nn.Linear(3, 1).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cuda")
    with torch.autocast("cuda"):
        loss = model(torch.randn(4, 3, device="cuda")).sum()
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    assert scaler.get_scale() > 0


def test_data_parallel_runs_once_the_model_is_on_cuda0(emu: Any) -> None:
    dp = nn.DataParallel(nn.Linear(3, 2).to("cuda:0"))
    out = dp(torch.randn(4, 3))
    assert out.device == torch.device("cuda", 0) and out.shape == (4, 2)
    out.sum().backward()
    assert dp.module.weight.grad is not None
