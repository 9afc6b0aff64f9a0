"""Shared fixtures: a real IPython shell with the extension loaded, and the cuda marker."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

ERRORS_FILE = Path(__file__).parent / "data" / "device_errors.jsonl"


def _cuda_available() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:
        return False


def _fake_cuda_works() -> bool:
    """Whether this torch builds a FakeTensor on cuda without a CUDA driver (2.1 cannot)."""
    try:
        import torch
        from torch._subclasses.fake_tensor import FakeTensorMode

        with FakeTensorMode(allow_non_fake_inputs=True):
            torch.empty(1, device="cuda")
        return True
    except Exception:
        return False


def _module_to_swaps_parameters() -> bool:
    """Whether nn.Module.to() swaps parameters in place (torch.utils.swap_tensors, 2.3+): on
    older torch it makes new Parameters, so an optimizer built before .to("cuda") under
    emulation keeps the old CPU ones."""
    try:
        import torch

        from torchdevmagic.emulate import emulate_cuda

        with emulate_cuda():
            model = torch.nn.Linear(2, 2)
            weight = model.weight
            model.to("cuda")
            return model.weight is weight and model.weight.device.type == "cuda"
    except Exception:
        return False


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "emulate_swap: needs nn.Module.to to keep Parameter identity (torch 2.3+)"
    )
    config.addinivalue_line(
        "markers", "emulate: turns CUDA emulation on, which needs torch 2.3+ (swap_tensors)"
    )


# --- the two tiers -----------------------------------------------------------------------------
# `python -m pytest`, bare, runs the quick tier; `python -m pytest --full` runs every test (CI
# does, in every leg). Naming files, folders or node ids, or selecting with -k or -m, selects
# from every test: what a developer names is what runs. `-m quick` selects the quick tier.
#
# The quick tier was chosen from each test's measured CPU time (a full run with a per-test
# CPU clock; `python benchmarks/time_tests.py` times a whole run): the test files whose tests
# are cheap, whole; one or a few tests of each other file, so that every test file, and
# through it every module, is exercised; and tests/test_smoke.py, a smoke test of each magic
# through a real shell and a real kernel. Tests marked ``slow`` (a kernel, a browser, a
# subprocess, the wheel) stay out of a whole file unless named below. tests/test_tiers.py
# checks the smoke tests are kept, every name below matches a test, and every test file is
# here or in FULL_ONLY_FILES.

#: Test files in the quick tier whole (but their ``slow`` tests).
QUICK_FILES = frozenset(
    {
        "test_cell.py",
        "test_cell_syntax_errors.py",
        "test_citations.py",
        "test_cuda_time_cells.py",
        "test_cuda_time_gpu_truth.py",
        "test_cuda_time_loop.py",
        "test_cuda_time_magic.py",
        "test_cuda_time_plot.py",
        "test_devcheck_checkpoint_wrappers.py",
        "test_devcheck_distributed.py",
        "test_devcheck_fix_texts.py",
        "test_devcheck_fixcell.py",
        "test_devcheck_fixsource.py",
        "test_devcheck_heldout.py",
        "test_devcheck_meta_model.py",
        "test_devcheck_planner.py",
        "test_device.py",
        "test_devices_diff.py",
        "test_devices_emulated.py",
        "test_devices_history.py",
        "test_devices_proxies_and_keys.py",
        "test_devices_ranks.py",
        "test_diagnosis_add_rule.py",
        "test_diagnosis_corpus.py",
        "test_diagnosis_render.py",
        "test_diagnosis_rules.py",
        "test_diagnosis_seams.py",
        "test_emulate_autocast.py",
        "test_emulate_autograd.py",
        "test_emulate_children.py",
        "test_emulate_cpp_functions.py",
        "test_emulate_data_parallel_devices.py",
        "test_emulate_default_argument.py",
        "test_emulate_distributed.py",
        "test_emulate_events.py",
        "test_emulate_opinfo.py",
        "test_emulate_sync_debug.py",
        "test_emulate_faults.py",
        "test_emulate_fork.py",
        "test_emulate_function.py",
        "test_emulate_kernel_checks.py",
        "test_emulate_kernel_refusals.py",
        "test_emulate_layers.py",
        "test_emulate_leaving.py",
        "test_emulate_machine.py",
        "test_emulate_memory_fraction.py",
        "test_emulate_messages.py",
        "test_emulate_notebooks.py",
        "test_emulate_packed.py",
        "test_emulate_plugin_conftest.py",
        "test_emulate_rules.py",
        "test_emulate_support.py",
        "test_emulate_tensor_like.py",
        "test_emulate_torchscript.py",
        "test_env.py",
        "test_env_pyenv.py",
        "test_format.py",
        "test_gpu.py",
        "test_import_layers.py",
        "test_module_rows.py",
        "test_package.py",
        "test_readme_first_lines.py",
        "test_render_bars.py",
        "test_render_lines.py",
        "test_scan.py",
        "test_scan_equivalence.py",
        "test_scan_layers.py",
        "test_scan_safe.py",
        "test_scan_subclasses.py",
        "test_smoke.py",
        "test_terminal_figures.py",
        "test_timing.py",
        "test_words_at_the_edges.py",
    }
)

#: Single tests in the quick tier, ``file::function`` (every parameter) or ``file::name[id]``.
QUICK_TESTS = frozenset(
    {
        # the smoke tests through a real kernel (slow: one kernel runs them all)
        "test_smoke.py::test_in_a_real_kernel",
        "test_devcheck_helpers.py::"
        "test_a_loss_defined_elsewhere_names_the_weight_where_the_call_reads_it[partial_keyword]",
        "test_devcheck_magic.py::test_index_tensor_created_without_device",
        "test_devcheck_unseen_shapes.py::test_messages_of_two_operands_of_one_dtype_are_read",
        "test_devcheck_unseen_shapes.py::"
        "test_a_tensor_a_helper_returns_without_device_is_moved_where_read",
        "test_devcheck_magic.py::test_success_is_silent_and_keeps_values",
        "test_devcheck_magic.py::test_exception_notes_and_same_object",
        "test_devcheck_magic.py::test_unrecognised_errors_are_untouched",
        "test_devcheck_magic.py::test_oom_names_biggest_variables_and_shape_bug",
        "test_devcheck_magic.py::test_diagnose_keeps_no_reference_to_tensors_or_frames",
        "test_devcheck_magic.py::test_inspection_runs_no_user_code",
        "test_devcheck_magic.py::test_paths_of_keys_that_are_not_str",
        "test_devcheck_real.py::test_case_set_is_large_and_cited",
        "test_devcheck_real.py::test_real_case[ce_weight_left_on_cpu]",
        "test_devcheck_real_fixes.py::test_fix_variant[item_of_a_dict_the_cell_creates]",
        "test_devcheck_real_more.py::test_numpy_over_a_list_of_gpu_tensors_in_forward_stays_in_torch",
        "test_devcheck_real_safety.py::test_oom_ranking_counts_each_storage_once",
        "test_devcheck_tb.py::test_before_any_error",
        "test_devices_limits.py::test_nesting_past_the_depth_limit_is_said_in_text_html_and_rich",
        "test_devices_magic.py::test_devices_prints_rows_for_the_users_variables",
        "test_devices_magic.py::test_dash_o_returns_the_report_object",
        "test_devices_magic.py::test_terminal_shell_gets_rich_output",
        "test_emulate.py::test_numpy_fails_as_on_a_gpu",
        "test_emulate.py::test_start_stop_and_refusals",
        "test_emulate_devcheck.py::test_numpy_of_a_named_gpu_tensor",
        "test_emulate_frontdoors.py::test_command_usage_errors",
        "test_emulate_frontdoors.py::test_magic_twice_on_and_unload_stops",
        "test_emulate_frontdoors.py::test_pytest11_entry_point_is_declared",
        "test_emulate_grads.py::test_moved_and_copied_parameters_keep_their_gradients_mirrored",
        "test_emulate_dtypes.py::test_every_row_names_an_op_and_functions_of_the_installed_torch",
        "test_emulate_dtypes.py::test_a_dtype_the_cpu_lacks_computes_as_on_a_gpu",
        "test_emulate_interop.py::test_dlpack_inside_torch_stays_on_the_gpu_and_shares_memory",
        "test_emulate_interop.py::test_numpy_refuses_an_emulated_tensor_as_a_gpu_one",
        "test_emulate_hooks.py::test_module_backward_hooks_as_on_a_gpu",
        "test_emulate_passed_in.py::test_lengths_passed_in_are_not_said_to_be_made_in_the_helper",
        "test_emulate_placement.py::test_module_cuda_type_and_the_tutorial_lines",
        "test_emulate_placement.py::test_a_meta_module_cannot_be_copied_to_the_gpu",
        "test_emulate_random.py::test_a_generator_of_the_other_device_type_is_refused",
        "test_emulate_pinned.py::test_non_blocking_copies",
        "test_emulate_refusals.py::test_out_of_memory_is_cuda_s_before_the_cpu_allocates[empty]",
        "test_emulate_sparse.py::test_what_gcn_code_does_with_a_sparse_tensor_on_the_gpu",
        "test_env_doors.py::test_an_api_report_outside_ipython_is_for_a_script",
        "test_env_doors.py::test_ipython_fix_lines_run_in_a_cell[no_gpu]",
        "test_finding_fixes.py::test_split_sequential_fix_names_the_odd_index",
        "test_free.py::test_the_result_of_the_cell_just_before_comes_back",
        "test_front_door_words.py::"
        "test_a_timer_speaks_of_calls_and_keywords_the_magic_of_cells_and_options",
        "test_magic_help.py::test_devcheck_on_confirms_in_one_line",
        "test_oom.py::test_every_form_is_out_of_memory",
        "test_oom.py::test_other_cublas_failures_stay_runtime_errors",
        "test_optimizer_rows.py::test_an_sgd_subclass_is_read_without_running_its_code",
        "test_option_conflicts.py::test_devices_modes_keep_the_options_they_read",
        "test_sacred_exception.py::test_the_exception_leaves_as_it_came_in",
        "test_sacred_magics.py::test_the_limit_itself_is_accepted",
        "test_sacred_memory.py::test_the_advice_frees_a_tensor_pinned_by_the_last_traceback[-scan]",
        "test_sacred_rules.py::test_the_cap_keeps_the_head_and_the_tail_of_a_message",
        "test_readme_first_lines.py::"
        "test_the_run_line_prints_the_table_in_any_shell_from_any_folder[sh]",
        "test_selfcheck.py::test_compiled_judgement",
        "test_selfcheck.py::test_cpu_only_run_skips_every_check_with_the_reason",
        "test_terminal_width.py::test_every_line_fits_in_80_columns",
    }
)

#: Test files with no test in the quick tier, and why.
FULL_ONLY_FILES = {
    "test_cuda_time_kernel.py": "each test starts a Jupyter kernel (test_smoke.py has one)",
    "test_devcheck_kernel.py": "a Jupyter kernel (test_smoke.py has one)",
    "test_devcheck_terminal.py": "terminal IPython in tmux",
    "test_emulate_ddp.py": "two-rank DDP training in spawned processes: about 60 s",
    "test_emulate_launch.py": "runs scripts in N ranks through the launcher: about 30 s",
    "test_emulate_ranks.py": "two ranks through the launcher, and notebook_launcher in a kernel",
    "test_free_accounts.py": "each test trains an emulated model: about 6 s of CPU",
    "test_kernel_sacred.py": "a Jupyter kernel (test_smoke.py has one)",
    "test_notebook.py": "runs the demo notebook in a kernel and renders it in Chromium",
    "test_oom_fragmentation_gpu.py": "needs a CUDA GPU",
    "test_tiers.py": "collects the whole suite three times, in subprocesses",
    "test_terminal_env_width.py": "terminal IPython in a pty, about 15 s",
    "test_wheel.py": "builds the wheel and the sdist",
}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--full",
        action="store_true",
        default=False,
        help="run every test (what CI runs). A bare `python -m pytest` runs the quick tier, "
        "the tests marked quick; files, node ids, -k or -m select from every test.",
    )


def quick_tier_applies(config: pytest.Config) -> bool:
    """Whether this run is the bare command: no --full, no files or node ids, no -k, no -m."""
    if config.getoption("full"):
        return False
    if config.args_source is pytest.Config.ArgsSource.ARGS:
        return False  # files, folders or node ids named on the command line
    return not (config.getoption("keyword") or config.getoption("markexpr"))


def _quick_names(item: pytest.Item) -> set[str]:
    base = item.path.name
    return {f"{base}::{item.name}", f"{base}::{getattr(item, 'originalname', item.name)}"}


_TIER_KEY = pytest.StashKey[str]()


def _mark_tier(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the quick tier's tests ``quick``; on a bare run, keep only them."""
    named: set[str] = set()
    for item in items:
        names = _quick_names(item) & QUICK_TESTS
        named |= names
        whole = item.path.name in QUICK_FILES and not item.get_closest_marker("slow")
        if names or whole:
            item.add_marker(pytest.mark.quick)
    if config.getoption("full"):
        config.stash[_TIER_KEY] = f"full run: all {len(items)} tests"
    if not quick_tier_applies(config):
        return
    quick = [item for item in items if item.get_closest_marker("quick")]
    left = [item for item in items if not item.get_closest_marker("quick")]
    if left:
        config.hook.pytest_deselected(items=left)
        items[:] = quick
    line = (
        f"quick tier: {len(quick)} of {len(quick) + len(left)} tests "
        "(python -m pytest --full runs them all)"
    )
    unmatched = sorted(QUICK_TESTS - named)
    if unmatched:
        line += "; QUICK_TESTS names no test: " + ", ".join(unmatched)
    config.stash[_TIER_KEY] = line


def pytest_report_collectionfinish(config: pytest.Config) -> list[str]:
    return [config.stash[_TIER_KEY]] if _TIER_KEY in config.stash else []


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    if _TIER_KEY in config.stash:
        terminalreporter.write_line(config.stash[_TIER_KEY])


# Test files that run the emulated GPU throughout (the demo notebook has a section on it).
_EMULATING_FILES = ("test_emulate", "test_notebook")
_STARTING_FIXTURES = frozenset({"emu", "emu_shell"})  # fixtures that turn emulation on


def _emulation_supported() -> bool:
    from torchdevmagic.emulate.fronts.session import supported

    return supported()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip, with the reason, the tests this machine or this torch cannot run: ``cuda``
    tests without a GPU; on old torch (2.1), the two stand-ins for a GPU that it lacks. A bare
    `python -m pytest` keeps the quick tier only (above)."""
    import importlib.metadata

    _mark_tier(config, items)

    try:
        torch_version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch_version = "(not installed)"
    skips = {
        "cuda": (
            _cuda_available,
            "needs a CUDA GPU (run on a GPU machine: pytest -m cuda)",
        ),
        "no_cuda": (
            lambda: not _cuda_available(),
            "asserts the no-GPU path, and this machine has a CUDA GPU",
        ),
        "fake_cuda": (
            _fake_cuda_works,
            f"torch {torch_version} cannot build a FakeTensor on cuda without a CUDA driver",
        ),
        "emulate_swap": (
            _module_to_swaps_parameters,
            f"torch {torch_version}: nn.Module.to makes new Parameters under emulation "
            "(no torch.utils.swap_tensors), so optimizers keep the old ones",
        ),
    }
    skips["emulate"] = (
        _emulation_supported,
        f"torch {torch_version}: CUDA emulation needs torch 2.3+ (torch.utils.swap_tensors); "
        "start() refuses it, see test_emulation_refuses_a_torch_it_cannot_emulate",
    )
    for item in items:
        # whole files of emulation tests, and any test taking an ``emu`` or ``emu_shell``
        # fixture (it starts it); test_emulate_support.py is the refusal test that runs where
        # emulation is refused
        emulating = item.path.name.startswith(_EMULATING_FILES)
        starts = _STARTING_FIXTURES.intersection(getattr(item, "fixturenames", ()))
        if (emulating and item.path.name != "test_emulate_support.py") or starts:
            item.add_marker(pytest.mark.emulate)
    for marker, (works, reason) in skips.items():
        marked = [item for item in items if marker in item.keywords]
        if marked and not works():
            for item in marked:
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def _ipython() -> Any:
    from IPython.core.interactiveshell import InteractiveShell

    return InteractiveShell.instance()


@pytest.fixture
def shell(_ipython: Any) -> Any:
    """A real InteractiveShell, fresh namespace, torchdevmagic loaded; unloaded afterwards.

    Fresh also means no last traceback: an earlier test's failed cell leaves one (IPython's
    ``sys.last_*`` and its formatter's ``tb``), and its frames' locals would be what
    ``%devices --free`` finds pinned, depending on which tests ran before."""
    import sys

    _ipython.reset(new_session=False)
    _ipython.InteractiveTB.tb = None
    for name in ("last_type", "last_value", "last_traceback", "last_exc"):
        if hasattr(sys, name):
            setattr(sys, name, None)
    _ipython.extension_manager.load_extension("torchdevmagic")
    yield _ipython
    _ipython.extension_manager.unload_extension("torchdevmagic")
    _ipython.reset(new_session=False)


@pytest.fixture
def emu() -> Any:
    """Two emulated GPUs for one test (a test that takes it is marked ``emulate``, above)."""
    from torchdevmagic.emulate import emulate_cuda

    with emulate_cuda(devices=2) as session:
        yield session


@pytest.fixture
def emu_shell(shell: Any) -> Any:
    """The real shell with ``%emulate_cuda on`` (one emulated GPU), stopped afterwards.

    A failed cell's traceback (frames holding emulated tensors) must not stay on the
    emulated GPU for later tests that measure its memory: IPython keeps the last result and
    the last traceback (for %tb and %debug), as it would on a GPU."""
    import sys

    from torchdevmagic.emulate import stop

    shell.run_line_magic("emulate_cuda", "on")
    yield shell
    stop()
    shell.run_cell("pass")
    shell.InteractiveTB.tb = None
    for name in ("last_type", "last_value", "last_traceback", "last_exc"):
        if hasattr(sys, name):
            setattr(sys, name, None)


@pytest.fixture
def emulation_never_left_on() -> Any:
    """The emulation stopped after the test: a failing one must not leave it on for the
    next ones (the emulation files use it for every test, through ``pytestmark``)."""
    yield
    from torchdevmagic.emulate import stop

    stop()


@pytest.fixture(scope="session")
def pytorch_errors() -> list[dict[str, Any]]:
    """The verbatim PyTorch error messages (tests/data/device_errors.jsonl)."""
    with ERRORS_FILE.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]
