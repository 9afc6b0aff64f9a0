"""Fakes for pynvml and torch.cuda, shared by the gpu and env tests.

They mimic the real APIs' shapes (pynvml function names and error class, torch.cuda calls), so
the code under test runs its real paths: only the world underneath is fake. They are as unkind
as the real thing (checked against torch 2.13's torch/cuda/__init__.py and
torch/backends/cudnn/__init__.py, and nvidia-ml-py 13.615's pynvml.py):

* ``torch.cuda.is_available()`` runs ``cudaGetDeviceCount`` (driver initialisation + torch's
  fork handler) unless ``PYTORCH_NVML_BASED_CUDA_CHECK=1``; ``device_count()`` does so only when
  its NVML-based count fails (NVML not loadable, a ``MIG-`` UUID in ``CUDA_VISIBLE_DEVICES``);
  ``torch._C._cuda_getArchFlags()`` registers the fork handler too;
  ``torch.backends.cudnn.version()`` calls ``is_available()`` and ``get_device_capability(i)``.
* pynvml: MIG mode ``[0, 0]`` on A100/H100/H200 without MIG (``Not Supported`` only on GPUs that
  have no MIG), bytes UUIDs and names (nvidia-ml-py 11.x), ``nvmlDeviceGetMemoryInfo`` v1 whose
  ``used`` includes driver-reserved memory, and v2 (``version=nvmlMemory_v2``) that splits it out.
"""

from __future__ import annotations

from collections.abc import Mapping
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
    reserved: int = 0  # driver-reserved memory: in v1's "used", a separate field in v2
    mig_capable: bool = True  # A100/H100/H200 answer [0, 0] without MIG; others "Not Supported"


class FakePynvml:
    """The subset of pynvml that torchdevmagic calls."""

    NVMLError = FakeNVMLError

    def __init__(
        self,
        gpus: list[FakeGpu],
        *,
        init_error: Optional[str] = None,
        refuse: tuple[str, ...] = (),
        errors: Optional[dict[str, str]] = None,
        driver: str = "550.54.15",
        cuda_driver: int = 12040,
        bytes_strings: bool = False,
        memory_v2: bool = True,
    ) -> None:
        self.gpus = gpus
        self.init_error = init_error
        self.refuse = set(refuse)  # pynvml function names that raise "Not Supported"
        # pynvml function name -> the NVMLError it raises ("GPU is lost", "Unknown Error")
        self.errors = dict(errors or {})
        self.driver = driver
        self.cuda_driver = cuda_driver
        self.bytes_strings = bytes_strings  # nvidia-ml-py 11.x returned bytes, not str
        self.memory_v2 = memory_v2  # False: a driver without nvmlDeviceGetMemoryInfo_v2
        self.init_calls = 0
        self.shutdown_calls = 0

    nvmlMemory_v2 = 0x02000028  # pynvml's constant

    def _string(self, text: str) -> Any:
        return text.encode() if self.bytes_strings else text

    def _check(self, fn: str) -> None:
        """As pynvml: any call may raise an NVMLError, the device list's included."""
        if fn in self.errors:
            raise FakeNVMLError(self.errors[fn])
        if fn in self.refuse:
            raise FakeNVMLError("Not Supported")

    def nvmlInit(self) -> None:
        self.init_calls += 1
        if self.init_error:
            raise FakeNVMLError(self.init_error)

    def nvmlShutdown(self) -> None:
        self.shutdown_calls += 1

    def nvmlDeviceGetCount(self) -> int:
        self._check("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        self._check("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self.gpus):
            raise FakeNVMLError("Invalid Argument")  # NVML's answer, not an IndexError
        return self.gpus[index]

    def nvmlDeviceGetUUID(self, handle: FakeGpu) -> Any:
        self._check("nvmlDeviceGetUUID")
        return self._string(handle.uuid)

    def nvmlDeviceGetName(self, handle: FakeGpu) -> Any:
        self._check("nvmlDeviceGetName")
        return self._string(handle.name)

    def nvmlDeviceGetMemoryInfo(self, handle: FakeGpu, version: Optional[int] = None) -> Any:
        """v1 (no version): ``used`` = allocated + driver-reserved. v2: ``reserved`` apart."""
        self._check("nvmlDeviceGetMemoryInfo")
        free = handle.total - handle.used - handle.reserved
        if not version:
            return SimpleNamespace(
                used=handle.used + handle.reserved, total=handle.total, free=free
            )
        if not self.memory_v2:
            raise FakeNVMLError("Function Not Found")  # NVMLError_FunctionNotFound
        return SimpleNamespace(
            version=version,
            used=handle.used,
            reserved=handle.reserved,
            total=handle.total,
            free=free,
        )

    def nvmlDeviceGetUtilizationRates(self, handle: FakeGpu) -> Any:
        self._check("nvmlDeviceGetUtilizationRates")
        return SimpleNamespace(gpu=handle.util, memory=0)

    def nvmlDeviceGetCudaComputeCapability(self, handle: FakeGpu) -> tuple[int, int]:
        self._check("nvmlDeviceGetCudaComputeCapability")
        return handle.cc

    def nvmlDeviceGetMigMode(self, handle: FakeGpu) -> list[int]:
        self._check("nvmlDeviceGetMigMode")
        if not handle.mig and not handle.mig_capable:
            raise FakeNVMLError("Not Supported")
        return [1, 1] if handle.mig else [0, 0]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: FakeGpu) -> int:
        self._check("nvmlDeviceGetMaxMigDeviceCount")
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
    and raise when CUDA is not initialised, so a test fails if we would create a context.

    ``driver_inits`` lists the calls that ran ``cudaGetDeviceCount`` (``cuInit``);
    ``fork_poisoned`` is set by every call that registers torch's fork handler. ``environ`` is
    the process environment torch reads (``CUDA_VISIBLE_DEVICES``,
    ``PYTORCH_NVML_BASED_CUDA_CHECK``); ``nvml_ok`` says whether torch's own NVML probe loads.
    """

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
        nvml_ok: bool = True,
        environ: Optional[Mapping[str, str]] = None,
    ) -> None:
        self.count = count
        self.nvml_ok = nvml_ok
        self.environ: Mapping[str, str] = environ if environ is not None else {}
        self.driver_inits: list[str] = []
        self.fork_poisoned = False
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

    def _cuda_get_device_count(self, caller: str) -> int:
        """torch._C._cuda_getDeviceCount: cuInit, and torch's fork handler is registered."""
        self.driver_inits.append(caller)
        self.fork_poisoned = True
        return self.count if self.available else 0

    def _cuda_get_arch_flags(self) -> str:
        """torch._C._cuda_getArchFlags: a constant of the build, but it poisons fork."""
        self.fork_poisoned = True
        return " ".join(self.arch_list)

    def _device_count_nvml(self) -> int:
        """torch.cuda._device_count_nvml: -1 when NVML cannot say (no side effects)."""
        visible = self.environ.get("CUDA_VISIBLE_DEVICES")
        if visible is not None and visible.strip().upper().startswith("MIG-"):
            return -1  # torch skips MIG parsing
        return self.count if self.nvml_ok else -1

    def is_available(self) -> bool:
        if self.environ.get("PYTORCH_NVML_BASED_CUDA_CHECK") == "1":
            return self.device_count() > 0
        return self._cuda_get_device_count("is_available") > 0

    def device_count(self) -> int:
        if self.initialised:
            return self.count
        nvml = self._device_count_nvml()
        return self._cuda_get_device_count("device_count") if nvml < 0 else nvml

    def get_arch_list(self) -> list[str]:
        return self._cuda_get_arch_flags().split()

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

    def cudnn_version() -> Optional[int]:
        # torch.backends.cudnn.version() -> _init(): getVersionInt(), then a capability check
        # of every device when is_available(): the driver is initialised, then CUDA itself.
        if not built or cudnn is None:
            return None
        if cuda.is_available() and not hip:
            min(cuda.get_device_capability(i) for i in range(cuda.device_count()))
        return cudnn

    c_module = SimpleNamespace()
    if built:
        c_module._cuda_getArchFlags = cuda._cuda_get_arch_flags
    if built and cudnn is not None:
        c_module._cudnn = SimpleNamespace(getVersionInt=lambda: cudnn)
    return SimpleNamespace(
        _C=c_module,
        __version__=version,
        cuda=cuda,
        version=SimpleNamespace(cuda=cuda_version, hip=hip),
        backends=SimpleNamespace(
            cuda=SimpleNamespace(is_built=lambda: built),
            mps=SimpleNamespace(is_available=lambda: mps is not None),
            cudnn=SimpleNamespace(version=cudnn_version),
        ),
        mps=SimpleNamespace(
            current_allocated_memory=lambda: mps[0] if mps else 0,
            driver_allocated_memory=lambda: mps[1] if mps else 0,
        ),
        xpu=SimpleNamespace(is_available=lambda: xpu),
    )
