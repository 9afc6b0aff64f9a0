"""pytest plugin: ``pytest --emulate-cuda[=N]`` runs a test suite as if on N GPUs.

Registered through the ``pytest11`` entry point, so installing torchdevmagic is enough. The
emulation starts before pytest imports the first ``conftest.py`` (``pytest_load_initial_conftests``,
first of all), so a root conftest that asks ``torch.cuda.is_available()`` to choose its test
devices sees the GPUs, and stops when pytest ends. The terminal summary says how many tests
made a tensor on an emulated GPU. A failing test's report gets a ``torchdevmagic`` section
with the %%devcheck diagnosis of its device error. Without the option nothing is imported.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

_KEY = pytest.StashKey[object]()  # the running emulation session
_TALLY = pytest.StashKey[list[int]]()  # tests run while emulating, tests that used it


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


def _unswallow(args: list[str], parser: pytest.Parser, early_config: pytest.Config) -> None:
    """``--emulate-cuda tests/test_x.py``: the option's value is optional, so argparse takes
    the path that follows as the number of GPUs. A value that is not a number is given back
    to the paths (``--emulate-cuda=1`` and the path), in ``args``, which pytest parses again,
    and in the early namespace, whose paths choose the initial conftests."""
    for i, arg in enumerate(args[:-1]):
        if arg == "--emulate-cuda" and not args[i + 1].lstrip("+-").isdigit():
            if args[i + 1].startswith("-"):
                continue  # another option: the value was never taken
            args[i] = "--emulate-cuda=1"
            ns = early_config.known_args_namespace
            ns.emulate_cuda = "1"
            ns.file_or_dir = parser.parse_known_args(args).file_or_dir


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(
    early_config: pytest.Config, parser: pytest.Parser, args: list[str]
) -> None:
    _unswallow(args, parser, early_config)
    ns = early_config.known_args_namespace
    value = getattr(ns, "emulate_cuda", None)
    if value is None or early_config.stash.get(_KEY, None) is not None:
        return
    count = _count(value)
    try:
        gib = float(getattr(ns, "emulate_cuda_memory", "16"))
    except ValueError:
        raise pytest.UsageError("--emulate-cuda-memory takes a number of GiB") from None
    from torchdevmagic.emulate.core.errors import EmulationUnsupported
    from torchdevmagic.emulate.fronts import session as _session

    try:
        session = _session.start(count, int(gib * (1 << 30)))
    except EmulationUnsupported as exc:
        raise pytest.UsageError(f"--emulate-cuda: {exc}") from None
    early_config.stash[_KEY] = session
    early_config.stash[_TALLY] = [0, 0]
    early_config.add_cleanup(_end)


def _end() -> None:
    from torchdevmagic.emulate.fronts import session as _session

    _session.end()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: Any) -> Generator[None, Any, None]:
    """Tally the tests run while emulating, and those that made a tensor on an emulated GPU
    (a fresh storage, counted by the memory ledger, in setup, call or teardown)."""
    session: Any = item.config.stash.get(_KEY, None)
    before = None if session is None else session.ledger.made
    yield
    if session is not None:
        tally = item.config.stash[_TALLY]
        tally[0] += 1
        tally[1] += session.ledger.made > before


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    session: Any = config.stash.get(_KEY, None)
    if session is None:
        return
    ran, used = config.stash[_TALLY]
    terminalreporter.write_line(
        f"torchdevmagic: {used} of {ran} tests made tensors on an emulated GPU "
        f"({session.count} emulated GPU{'s' if session.count != 1 else ''}, on the CPU)"
    )


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
