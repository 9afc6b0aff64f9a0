"""pytest plugin: ``pytest --emulate-cuda[=N]`` runs a test suite as if on N GPUs.

Registered through the ``pytest11`` entry point, so installing torchdevmagic is enough. The
emulation starts before collection (module-level ``torch.cuda.is_available()`` checks see the
GPUs) and stops when pytest ends. A failing test's report gets a ``torchdevmagic`` section
with the %%devcheck diagnosis of its device error. Without the option nothing is imported.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

_KEY = pytest.StashKey[object]()  # the running emulation session


def _count(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise pytest.UsageError(f"--emulate-cuda takes a number of GPUs, not {value!r}") from None
    if n < 1:
        raise pytest.UsageError("--emulate-cuda takes at least 1 GPU")
    return n


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("torchdevmagic")
    group.addoption(
        "--emulate-cuda",
        nargs="?",
        const="1",
        default=None,
        metavar="N",
        help="run as if on N CUDA GPUs (default 1), emulated on the CPU by torchdevmagic",
    )
    group.addoption(
        "--emulate-cuda-memory",
        default="16",
        metavar="GiB",
        help="memory of each emulated GPU in GiB (default 16)",
    )


def pytest_configure(config: pytest.Config) -> None:
    value = config.getoption("emulate_cuda", None)
    if value is None:
        return
    count = _count(value)
    try:
        gib = float(config.getoption("emulate_cuda_memory"))
    except ValueError:
        raise pytest.UsageError("--emulate-cuda-memory takes a number of GiB") from None
    from torchdevmagic.emulate.core.errors import EmulationUnsupported
    from torchdevmagic.emulate.fronts import session as _session

    try:
        session = _session.start(count, int(gib * (1 << 30)))
    except EmulationUnsupported as exc:
        raise pytest.UsageError(f"--emulate-cuda: {exc}") from None
    config.stash[_KEY] = session


def pytest_unconfigure(config: pytest.Config) -> None:
    if config.stash.get(_KEY, None) is not None:
        from torchdevmagic.emulate.fronts import session as _session

        _session.end()
        del config.stash[_KEY]


def pytest_report_header(config: pytest.Config) -> Any:
    session = config.stash.get(_KEY, None)
    if session is None:
        return None
    from torchdevmagic.emulate.fronts.session import status

    return f"torchdevmagic: {status().to_text()}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[Any]
) -> Generator[Any, Any, None]:
    outcome = yield
    if call.excinfo is None or item.config.stash.get(_KEY, None) is None:
        return
    report = outcome.get_result()
    try:
        from torchdevmagic.diagnosis import diagnose
        from torchdevmagic.emulate.fronts.namespace import user_globals

        diagnosis = diagnose(call.excinfo.value, user_globals(call.excinfo.value))
    except Exception as exc:  # the test's own failure must stay as it is
        report.sections.append(("torchdevmagic", f"(device-error analysis failed: {exc})"))
        return
    if diagnosis is not None:
        report.sections.append(("torchdevmagic diagnosis", diagnosis.to_text()))
