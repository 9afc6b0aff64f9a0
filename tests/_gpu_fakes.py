"""Fakes for pynvml and torch.cuda, shared by the gpu and env tests.

They mimic the real APIs' shapes (pynvml function names and error class, torch.cuda calls), so
the code under test runs its real paths: only the world underneath is fake.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Optional

GiB = 1024**3


class FakeNVMLError(Exception):
    """Like pynvml.NVMLError: str() is NVML's error string."""


@dataclass
class FakeGpu:
    uuid: str
    name: str = "NVIDIA A100-SXM4-40GB"
    used: int = 1 * GiB
    total: int = 40 * GiB
    util: int = 7
    cc: tuple[int, int] = (8, 0)
    mig: list[FakeGpu] = field(default_factory=list)  # MIG instances (only uuid/used/total used)


class FakePynvml:
    """The subset of pynvml that torchdevmagic calls."""

    NVMLError = FakeNVMLError

    def __init__(
        self,
        gpus: list[FakeGpu],
        *,
        init_error: Optional[str] = None,
        refuse: tuple[str, ...] = (),
        driver: str = "550.54.15",
        cuda_driver: int = 12040,
    ) -> None:
        self.gpus = gpus
        self.init_error = init_error
        self.refuse = set(refuse)  # pynvml function names that raise "Not Supported"
        self.driver = driver
        self.cuda_driver = cuda_driver
        self.init_calls = 0
        self.shutdown_calls = 0

    def _check(self, fn: str) -> None:
        if fn in self.refuse:
            raise FakeNVMLError("Not Supported")

    def nvmlInit(self) -> None:
        self.init_calls += 1
        if self.init_error:
            raise FakeNVMLError(self.init_error)

    def nvmlShutdown(self) -> None:
        self.shutdown_calls += 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        return self.gpus[index]

    def nvmlDeviceGetUUID(self, handle: FakeGpu) -> str:
        return handle.uuid

    def nvmlDeviceGetName(self, handle: FakeGpu) -> bytes:
        self._check("nvmlDeviceGetName")
        return handle.name.encode()  # old nvidia-ml-py returned bytes

    def nvmlDeviceGetMemoryInfo(self, handle: FakeGpu) -> Any:
        self._check("nvmlDeviceGetMemoryInfo")
        return SimpleNamespace(
            used=handle.used, total=handle.total, free=handle.total - handle.used
        )

    def nvmlDeviceGetUtilizationRates(self, handle: FakeGpu) -> Any:
        self._check("nvmlDeviceGetUtilizationRates")
        return SimpleNamespace(gpu=handle.util, memory=0)

    def nvmlDeviceGetCudaComputeCapability(self, handle: FakeGpu) -> tuple[int, int]:
        self._check("nvmlDeviceGetCudaComputeCapability")
        return handle.cc

    def nvmlDeviceGetMigMode(self, handle: FakeGpu) -> tuple[int, int]:
        if not handle.mig:
            raise FakeNVMLError("Not Supported")
        return (1, 1)

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: FakeGpu) -> int:
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: FakeGpu, slot: int) -> FakeGpu:
        if slot >= len(handle.mig):
            raise FakeNVMLError("Not Found")
        return handle.mig[slot]

    def nvmlSystemGetDriverVersion(self) -> str:
        self._check("nvmlSystemGetDriverVersion")
        return self.driver

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._check("nvmlSystemGetCudaDriverVersion")
        return self.cuda_driver


class ContextCreated(AssertionError):
    """A fake torch.cuda call that would create a CUDA context was made."""


class FakeCuda:
    """torch.cuda as seen before/after initialisation. Context-creating calls are recorded,
    and raise when CUDA is not initialised, so a test fails if we would create a context."""

    def __init__(
        self,
        *,
        count: int = 0,
        initialised: bool = False,
        uuids: tuple[str, ...] = (),
        names: tuple[str, ...] = (),
        allocated: tuple[int, ...] = (),
        capabilities: tuple[tuple[int, int], ...] = (),
        arch_list: tuple[str, ...] = (),
        available: Optional[bool] = None,
    ) -> None:
        self.count = count
        self.initialised = initialised
        self.uuids = uuids
        self.names = names
        self.allocated = allocated
        self.capabilities = capabilities
        self.arch_list = list(arch_list)
        self.available = count > 0 if available is None else available
        self.context_calls: list[str] = []

    def _context(self, what: str) -> None:
        self.context_calls.append(what)
        if not self.initialised:
            raise ContextCreated(f"{what} would create a CUDA context")

    def is_initialized(self) -> bool:
        return self.initialised

    def is_available(self) -> bool:
        return self.available

    def device_count(self) -> int:
        return self.count

    def get_arch_list(self) -> list[str]:
        return list(self.arch_list)

    def get_device_properties(self, index: int) -> Any:
        self._context("get_device_properties")
        return SimpleNamespace(uuid=self.uuids[index], name=self.names[index])

    def get_device_name(self, index: int) -> str:
        self._context("get_device_name")
        return self.names[index]

    def get_device_capability(self, index: int) -> tuple[int, int]:
        self._context("get_device_capability")
        return self.capabilities[index]

    def memory_allocated(self, index: int) -> int:
        return self.allocated[index] if self.initialised else 0

    def memory_reserved(self, index: int) -> int:
        return 2 * self.allocated[index] if self.initialised else 0

    def max_memory_allocated(self, index: int) -> int:
        return 3 * self.allocated[index] if self.initialised else 0


def fake_torch(
    cuda: Optional[FakeCuda] = None,
    *,
    version: str = "2.13.0+cu124",
    cuda_version: Optional[str] = "12.4",
    hip: Optional[str] = None,
    mps: Optional[tuple[int, int]] = None,
    cudnn: Optional[int] = 90100,
    xpu: bool = False,
) -> Any:
    """A namespace shaped like the parts of the torch module we read."""
    cuda = cuda if cuda is not None else FakeCuda()
    built = cuda_version is not None or hip is not None
    return SimpleNamespace(
        __version__=version,
        cuda=cuda,
        version=SimpleNamespace(cuda=cuda_version, hip=hip),
        backends=SimpleNamespace(
            cuda=SimpleNamespace(is_built=lambda: built),
            mps=SimpleNamespace(is_available=lambda: mps is not None),
            cudnn=SimpleNamespace(version=lambda: cudnn if built else None),
        ),
        mps=SimpleNamespace(
            current_allocated_memory=lambda: mps[0] if mps else 0,
            driver_allocated_memory=lambda: mps[1] if mps else 0,
        ),
        xpu=SimpleNamespace(is_available=lambda: xpu),
    )
