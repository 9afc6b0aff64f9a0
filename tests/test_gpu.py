"""gpu.device_memory: torch index <-> NVML mapping, N/A paths, no context created, MPS."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from typing import Any, Optional

import pytest
from _gpu_fakes import FakeCuda, FakeGpu, FakePynvml, GiB, fake_torch

from torchdevmagic.gpu import GpuBackend, Nvml, device_memory, visible_devices

UUID_A = "GPU-aaaaaaaa-1111-2222-3333-444444444444"
UUID_B = "GPU-bbbbbbbb-1111-2222-3333-444444444444"
MIG_1 = "MIG-11111111-aaaa-bbbb-cccc-dddddddddddd"
MIG_2 = "MIG-22222222-aaaa-bbbb-cccc-dddddddddddd"


def two_gpus() -> list[FakeGpu]:
    return [
        FakeGpu(UUID_A, name="GPU zero", used=1 * GiB, total=40 * GiB, util=10),
        FakeGpu(UUID_B, name="GPU one", used=3 * GiB, total=80 * GiB, util=55),
    ]


def backend(
    nv: Optional[FakePynvml],
    torch: Any,
    environ: Optional[dict[str, str]] = None,
) -> GpuBackend:
    environ = environ or {}
    cuda = getattr(torch, "cuda", None) if torch is not None else None
    if isinstance(cuda, FakeCuda):  # torch reads the same environment and the same driver
        cuda.environ = environ
        # pynvml missing (nv None) is not the driver's NVML missing; an init error is.
        cuda.nvml_ok = nv is None or not nv.init_error
    return GpuBackend(torch=torch, nvml=Nvml(load=lambda: nv), environ=environ)


def test_visible_devices_index_order_is_respected() -> None:
    nv = FakePynvml(two_gpus())
    cuda = FakeCuda(count=2)
    b = backend(nv, fake_torch(cuda), {"CUDA_VISIBLE_DEVICES": "1,0"})
    records = device_memory({"cuda:0": 123, "cpu": 9}, backend=b)
    assert [r.device for r in records] == ["cuda:0", "cuda:1"]
    first, second = records
    assert (first.uuid, first.name, first.nvml_total_bytes) == (UUID_B, "GPU one", 80 * GiB)
    assert (first.nvml_used_bytes, first.utilization_percent) == (3 * GiB, 55)
    assert (second.uuid, second.name) == (UUID_A, "GPU zero")
    assert first.named_bytes == 123 and second.named_bytes == 0
    # No context yet: the allocator has handed out nothing, and we did not create one.
    assert (first.allocated_bytes, first.reserved_bytes, first.peak_bytes) == (0, 0, 0)
    assert cuda.context_calls == []
    assert "no CUDA context in this process yet" in first.notes


@pytest.mark.parametrize("value", [UUID_B, "GPU-bbbb", "gpu-BBBBBBBB-1111"])
def test_visible_devices_uuid_and_prefix(value: str) -> None:
    nv = FakePynvml(two_gpus())
    b = backend(nv, fake_torch(FakeCuda(count=1)), {"CUDA_VISIBLE_DEVICES": value})
    (record,) = device_memory(backend=b)
    assert record.uuid == UUID_B and record.nvml_total_bytes == 80 * GiB


def test_mig_instance_selected_by_uuid() -> None:
    parent = FakeGpu(
        UUID_A,
        name="A100 MIG",
        mig=[
            FakeGpu(MIG_1, used=1 * GiB, total=10 * GiB),
            FakeGpu(MIG_2, used=2 * GiB, total=20 * GiB),
        ],
    )
    nv = FakePynvml([parent, FakeGpu(UUID_B)])
    cuda = FakeCuda(count=1)
    b = backend(nv, fake_torch(cuda), {"CUDA_VISIBLE_DEVICES": MIG_2})
    (record,) = device_memory(backend=b)
    assert record.uuid == MIG_2
    assert (record.nvml_used_bytes, record.nvml_total_bytes) == (2 * GiB, 20 * GiB)
    assert cuda.context_calls == []


def test_mig_parent_by_index_says_figures_are_whole_gpu() -> None:
    parent = FakeGpu(UUID_A, mig=[FakeGpu(MIG_1)])
    b = backend(FakePynvml([parent]), fake_torch(FakeCuda(count=1)))
    (record,) = device_memory(backend=b)
    assert record.uuid == UUID_A
    assert any("MIG mode" in n for n in record.notes)


def test_initialised_cuda_maps_by_torch_uuid() -> None:
    nv = FakePynvml(two_gpus())
    # torch prints UUIDs bare (no "GPU-" prefix); its order differs from NVML's here.
    cuda = FakeCuda(
        count=2,
        initialised=True,
        uuids=(UUID_B[4:], UUID_A[4:]),
        names=("torch one", "torch zero"),
        allocated=(100, 7),
    )
    records = device_memory(backend=backend(nv, fake_torch(cuda)))
    assert [r.uuid for r in records] == [UUID_B, UUID_A]
    assert [r.name for r in records] == ["torch one", "torch zero"]
    assert (records[0].allocated_bytes, records[0].reserved_bytes, records[0].peak_bytes) == (
        100,
        200,
        300,
    )
    assert records[0].nvml_total_bytes == 80 * GiB
    assert records[0].unnamed_bytes == 100
    assert not any("context" in n for n in records[0].notes)


def test_initialised_uuid_unknown_to_nvml_is_na_with_note() -> None:
    cuda = FakeCuda(count=1, initialised=True, uuids=("deadbeef",), names=("x",), allocated=(5,))
    (record,) = device_memory(backend=backend(FakePynvml(two_gpus()), fake_torch(cuda)))
    assert record.nvml_total_bytes is None and record.allocated_bytes == 5
    assert record.notes == ("NVML has no device with UUID deadbeef",)


def test_nvml_not_installed_gives_na_and_one_note() -> None:
    cuda = FakeCuda(count=2)
    records = device_memory(backend=backend(None, fake_torch(cuda)))
    assert len(records) == 2
    for r in records:
        assert r.nvml_used_bytes is None and r.utilization_percent is None and r.name is None
        assert [n for n in r.notes if "NVML" in n] == [
            "NVML not available: pip install nvidia-ml-py"
        ]
    assert cuda.context_calls == []


def test_nvml_init_failure_is_cached() -> None:
    nv = FakePynvml(two_gpus(), init_error="Driver Not Loaded")
    cuda = FakeCuda(count=1)
    b = backend(nv, fake_torch(cuda))
    device_memory(backend=b)
    device_memory(backend=b)
    assert nv.init_calls == 1 and nv.shutdown_calls == 0
    # Without NVML, torch's count would need cudaGetDeviceCount (cuInit + fork handler): the
    # GPUs are not listed until CUDA is initialised, and fork stays usable.
    assert device_memory(backend=b) == []
    assert not cuda.fork_poisoned and cuda.driver_inits == []
    cuda.initialised = True
    cuda.allocated, cuda.uuids, cuda.names = (0,), ("x",), ("GPU",)
    (first,) = device_memory(backend=b)
    assert "NVML not available (Driver Not Loaded)" in first.notes


def test_nvml_success_initialises_once_and_never_shuts_down() -> None:
    nv = FakePynvml(two_gpus())
    b = backend(nv, fake_torch(FakeCuda(count=2)))
    for _ in range(3):
        device_memory(backend=b)
    assert (nv.init_calls, nv.shutdown_calls) == (1, 0)


def test_pynvml_import_error_is_a_note() -> None:
    def broken() -> Any:
        raise OSError("libnvidia-ml.so.1: cannot open shared object file")

    b = GpuBackend(torch=fake_torch(FakeCuda(count=1)), nvml=Nvml(load=broken), environ={})
    (record,) = device_memory(backend=b)
    assert record.notes[-1].startswith("pynvml failed to import: libnvidia-ml.so.1")


def test_field_refused_by_nvml_is_na_others_kept() -> None:
    nv = FakePynvml(two_gpus(), refuse=("nvmlDeviceGetUtilizationRates",))
    (record,) = device_memory(backend=backend(nv, fake_torch(FakeCuda(count=1))))
    assert record.utilization_percent is None
    assert record.nvml_total_bytes == 40 * GiB and record.name == "GPU zero"
    assert "NVML utilization: Not Supported" in record.notes


@pytest.mark.parametrize("value", ["", "-1", "GPU-ffffffff", "0,0", "7"])
def test_visible_devices_hiding_everything(value: str) -> None:
    visible = visible_devices(value, Nvml(load=lambda: FakePynvml(two_gpus())).devices())
    assert visible.devices == ()
    assert visible.rejected is not None


def test_visible_devices_stop_at_first_invalid_entry() -> None:
    devices = Nvml(load=lambda: FakePynvml(two_gpus())).devices()
    visible = visible_devices("1, 9, 0", devices)
    assert [d.uuid for d in visible.devices] == [UUID_B]
    assert visible.rejected == "9"
    assert [d.uuid for d in visible_devices(None, devices).devices] == [UUID_A, UUID_B]


def test_ambiguous_uuid_prefix_matches_nothing() -> None:
    gpus = [FakeGpu("GPU-abc1-0"), FakeGpu("GPU-abc2-0")]
    devices = Nvml(load=lambda: FakePynvml(gpus)).devices()
    assert visible_devices("GPU-abc", devices).devices == ()
    assert [d.uuid for d in visible_devices("GPU-abc2", devices).devices] == ["GPU-abc2-0"]


def test_cpu_only_torch_lists_nothing_and_skips_nvml() -> None:
    nv = FakePynvml(two_gpus())
    torch = fake_torch(FakeCuda(count=0), cuda_version=None, version="2.13.0+cpu")
    assert device_memory(backend=backend(nv, torch)) == []
    assert nv.init_calls == 0


def test_torch_not_imported_lists_nvml_visible_devices() -> None:
    nv = FakePynvml(two_gpus())
    records = device_memory(backend=backend(nv, None, {"CUDA_VISIBLE_DEVICES": "1"}))
    assert [(r.device, r.uuid, r.allocated_bytes) for r in records] == [("cuda:0", UUID_B, 0)]


def test_torch_not_imported_and_no_nvml_is_empty() -> None:
    assert device_memory(backend=backend(None, None)) == []


def test_mixed_models_by_index_warn_about_device_order() -> None:
    nv = FakePynvml(two_gpus())
    records = device_memory(backend=backend(nv, fake_torch(FakeCuda(count=2))))
    assert all(any("CUDA_DEVICE_ORDER" in n for n in r.notes) for r in records)
    env = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    records = device_memory(backend=backend(nv, fake_torch(FakeCuda(count=2)), env))
    assert not any("CUDA_DEVICE_ORDER" in n for r in records for n in r.notes)


def test_torch_count_beyond_nvml_mapping_is_na() -> None:
    # e.g. a legacy MIG-GPU-<uuid>/<gi>/<ci> entry we cannot map, while torch counts 1 (once
    # CUDA is initialised: before, torch's count would initialise the driver).
    cuda = FakeCuda(count=1, initialised=True, uuids=("x",), names=("GPU",), allocated=(0,))
    b = backend(FakePynvml(two_gpus()), fake_torch(cuda), {"CUDA_VISIBLE_DEVICES": "MIG-GPU-x/1/0"})
    (record,) = device_memory(backend=b)
    assert record.nvml_total_bytes is None and "NVML has no device with UUID x" in record.notes


def test_mps_record() -> None:
    torch = fake_torch(FakeCuda(count=0), cuda_version=None, mps=(1000, 5000))
    (record,) = device_memory({"mps:0": 600}, backend=backend(None, torch))
    assert (record.device, record.allocated_bytes, record.reserved_bytes) == ("mps", 1000, 5000)
    assert record.named_bytes == 600 and record.unnamed_bytes == 400
    assert record.nvml_total_bytes is None


def test_torch_raising_is_never_a_traceback() -> None:
    class Exploding(GpuBackend):
        def device_count(self) -> int:
            raise RuntimeError("CUDA driver version is insufficient")

    b = Exploding(torch=fake_torch(FakeCuda(count=1)), nvml=Nvml(load=lambda: None), environ={})
    assert device_memory(backend=b) == []


# ---------------------------------------------------------------------------- this machine


def test_real_machine_without_gpu() -> None:
    import torch

    records = device_memory({"cpu": 10})
    if not torch.cuda.is_available():
        assert [r for r in records if r.device.startswith("cuda")] == []
    assert torch.cuda.is_initialized() is False or torch.cuda.is_available()


@pytest.mark.slow
def test_real_default_does_not_import_torch_or_init_cuda() -> None:
    code = textwrap.dedent(
        """
        import json, sys
        from torchdevmagic.gpu import device_memory
        first = device_memory()
        torch_imported = "torch" in sys.modules
        import torch
        second = device_memory()
        print(json.dumps([torch_imported, torch.cuda.is_initialized(),
                          torch.cuda.is_available() or first == second == []]))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [False, False, True]


@pytest.mark.cuda
def test_real_gpu_figures_and_uuid_mapping() -> None:
    import torch

    x = torch.empty(256, 1024, 1024, dtype=torch.uint8, device="cuda:0")  # 256 MiB
    records = device_memory({"cuda:0": x.nbytes})
    assert len([r for r in records if r.device.startswith("cuda")]) == torch.cuda.device_count()
    first = records[0]
    assert first.allocated_bytes is not None and first.allocated_bytes >= x.nbytes
    assert first.named_bytes == x.nbytes
    assert first.nvml_total_bytes is not None and first.nvml_used_bytes is not None
    assert first.nvml_used_bytes >= x.nbytes
    assert first.name == torch.cuda.get_device_name(0)
    assert first.uuid is not None
    assert first.uuid.lower().endswith(str(torch.cuda.get_device_properties(0).uuid).lower())
    del x


@pytest.mark.cuda
def test_real_gpu_uninitialised_process_gets_names_without_context() -> None:
    code = textwrap.dedent(
        """
        import json, torch
        from torchdevmagic.gpu import device_memory
        records = device_memory()
        print(json.dumps([torch.cuda.is_initialized(), [r.name for r in records],
                          [r.nvml_total_bytes for r in records]]))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    initialised, names, totals = json.loads(out.stdout.strip().splitlines()[-1])
    assert initialised is False
    assert names and all(names) and all(t and t > 0 for t in totals)


# ------------------------------------------------------------------------ unkind worlds


@pytest.mark.parametrize(
    ("visible", "torch_nvml"),
    [(None, False), (MIG_2, True)],  # torch's NVML probe cannot load; torch skips MIG UUIDs
)
def test_counting_gpus_does_not_initialise_the_driver_or_poison_fork(
    visible: Optional[str], torch_nvml: bool
) -> None:
    """torch.cuda.device_count() falls back to cudaGetDeviceCount (cuInit + torch's fork
    handler) exactly here: our own NVML mapping answers instead."""
    parent = FakeGpu(UUID_A, mig=[FakeGpu(MIG_1), FakeGpu(MIG_2, used=2 * GiB, total=20 * GiB)])
    cuda = FakeCuda(count=1)
    environ = {"CUDA_VISIBLE_DEVICES": visible} if visible else {}
    b = backend(FakePynvml([parent] if visible else two_gpus()), fake_torch(cuda), environ)
    cuda.nvml_ok = torch_nvml
    records = device_memory(backend=b)
    assert cuda.driver_inits == [] and not cuda.fork_poisoned and cuda.context_calls == []
    if visible:
        (record,) = records
        assert record.uuid == MIG_2 and record.nvml_total_bytes == 20 * GiB
    else:
        assert [r.uuid for r in records] == [UUID_A, UUID_B]


def test_nvml_used_is_v2_without_driver_reserved_memory() -> None:
    reserved = 600 * 2**20
    gpu = FakeGpu(UUID_A, used=1 * GiB, reserved=reserved, total=80 * GiB)
    (record,) = device_memory(backend=backend(FakePynvml([gpu]), fake_torch(FakeCuda(count=1))))
    assert record.nvml_used_bytes == 1 * GiB
    assert not [n for n in record.notes if "reserved" in n]
    old_driver = FakePynvml([gpu], memory_v2=False)
    (record,) = device_memory(backend=backend(old_driver, fake_torch(FakeCuda(count=1))))
    assert record.nvml_used_bytes == 1 * GiB + reserved
    assert "NVML used includes driver-reserved memory (this driver has no v2)" in record.notes


def test_nvml_v2_against_the_installed_pynvml() -> None:
    """The fake's v1/v2 shapes are pynvml's: the version constant, the v2 struct's fields."""
    pynvml = pytest.importorskip("pynvml")
    assert pynvml.nvmlMemory_v2 == FakePynvml.nvmlMemory_v2
    fields = [name for name, _ in pynvml.c_nvmlMemory_v2_t._fields_]
    assert fields == ["version", "total", "reserved", "free", "used"]
    assert [name for name, _ in pynvml.c_nvmlMemory_t._fields_] == ["total", "free", "used"]


def test_bytes_uuids_and_mig_mode_zero_on_a_mig_capable_gpu() -> None:
    # nvidia-ml-py 11.x returns bytes; an H100 without MIG answers [0, 0], not "Not Supported".
    nv = FakePynvml([FakeGpu(UUID_A, name="NVIDIA H100 80GB HBM3")], bytes_strings=True)
    cuda = FakeCuda(count=1)
    (record,) = device_memory(
        backend=backend(nv, fake_torch(cuda), {"CUDA_VISIBLE_DEVICES": UUID_A})
    )
    assert record.uuid == UUID_A and record.name == "NVIDIA H100 80GB HBM3"
    assert not [n for n in record.notes if "MIG" in n]
    assert nv.nvmlDeviceGetMigMode(nv.gpus[0]) == [0, 0]
    initialised = FakeCuda(
        count=1, initialised=True, uuids=(UUID_A[4:],), names=("x",), allocated=(1,)
    )
    (record,) = device_memory(backend=backend(nv, fake_torch(initialised)))
    assert record.uuid == UUID_A and record.nvml_total_bytes == 40 * GiB


# -- the one NVML chokepoint ------------------------------------------------------------------

NVML_CALLS = (
    "nvmlDeviceGetCount",
    "nvmlDeviceGetHandleByIndex",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetName",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetUtilizationRates",
    "nvmlDeviceGetCudaComputeCapability",
    "nvmlDeviceGetMigMode",
    "nvmlDeviceGetMaxMigDeviceCount",
    "nvmlSystemGetDriverVersion",
    "nvmlSystemGetCudaDriverVersion",
)


def test_every_nvml_query_answers_a_value_or_why_not() -> None:
    """Nvml's queries never raise: a refused call is a falsy NotAvailable naming the field
    and NVML's reason, NVML missing is one saying why."""
    from torchdevmagic.gpu.nvml import NotAvailable, known

    nv = FakePynvml(two_gpus(), errors=dict.fromkeys(NVML_CALLS, "GPU is lost"))
    nvml = Nvml(load=lambda: nv)
    handle = two_gpus()[0]
    answers = {
        "NVML devices": nvml.devices(),
        "NVML name": nvml.name(handle),
        "NVML memory": nvml.memory(handle),
        "NVML utilization": nvml.utilization(handle),
        "NVML capability": nvml.compute_capability(handle),
        "NVML driver version": nvml.driver_version(),
        "NVML CUDA driver version": nvml.cuda_driver_version(),
    }
    for label, answer in answers.items():
        assert isinstance(answer, NotAvailable) and not answer, (label, answer)
        assert answer.reason == f"{label}: GPU is lost"
        notes: list[str] = []
        assert known(answer, notes) is None and notes == [answer.reason]
    missing = Nvml(load=lambda: None).name(handle)
    assert isinstance(missing, NotAvailable)
    assert missing.reason == "NVML not available: pip install nvidia-ml-py"
    fine = Nvml(load=lambda: FakePynvml(two_gpus()))
    assert known(fine.name(handle)) == "GPU zero"
    assert [d.uuid for d in known(fine.devices()) or []] == [UUID_A, UUID_B]


@pytest.mark.parametrize("call", NVML_CALLS)
def test_any_nvml_call_failing_is_a_note_in_memory_and_env(call: str) -> None:
    """Each pynvml call failing in turn, as a real one can (a lost GPU, an old driver):
    %devices' GPU records and --env's facts are still made, the failure named in a note."""
    from torchdevmagic.env import collect_facts

    nv = FakePynvml(two_gpus(), errors={call: "GPU is lost"})
    torch = fake_torch(FakeCuda(count=2, arch_list=("sm_80",)))
    records = device_memory(backend=backend(nv, torch))
    notes = [n for r in records for n in r.notes]
    facts = collect_facts(
        environ={},
        executable=sys.executable,
        which=lambda name: None,
        nvml=Nvml(load=lambda: FakePynvml(two_gpus(), errors={call: "GPU is lost"})),
        torch_module=fake_torch(FakeCuda(count=2, arch_list=("sm_80",))),
        modules={},
        arch_flags=lambda: "sm_80",
        driver_loaded=lambda: False,
    )
    said = " ".join([*notes, *facts.notes])
    if call in ("nvmlDeviceGetMigMode", "nvmlDeviceGetMaxMigDeviceCount"):
        assert "GPU is lost" not in said  # MIG unknown reads as no MIG, as on old drivers
    else:
        assert "GPU is lost" in said, (call, notes, facts.notes)


def test_no_nvml_error_is_caught_outside_its_wrapper() -> None:
    """Only gpu/nvml.py calls pynvml: callers get values or NotAvailable from it, and wrap
    no NVML call in an error handler of their own."""
    import ast
    from pathlib import Path

    import torchdevmagic

    root = Path(torchdevmagic.__file__).parent
    found = []
    for path in root.rglob("*.py"):
        if path.relative_to(root).as_posix() == "gpu/nvml.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and node.attr.startswith("nvml")
                and (node.attr[4:5].isupper())
            ):
                found.append(f"{path.relative_to(root)}:{node.lineno} calls {node.attr}")
            if isinstance(node, ast.Call):
                text = ast.unparse(node.func)
                wrapped = text in ("_attempt", "_try") and any(
                    "nvml" in ast.unparse(a) for a in node.args
                )
                if wrapped:
                    found.append(f"{path.relative_to(root)}:{node.lineno} {ast.unparse(node)}")
    assert found == []
