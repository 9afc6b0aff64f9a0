"""``%cuda_env``: the CUDA environment verdict (also reachable as ``%devices --env``)."""

from __future__ import annotations

from typing import Any, Optional

from IPython.core.magic import Magics, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from torchdevmagic.magics._show import show


def env_magic_body(shell: Any, *, return_result: bool = False) -> Optional[Any]:
    """Check the environment, show the report; return it when ``return_result`` (``-o``).

    Shared by ``%cuda_env`` and ``%devices --env`` so both behave the same.
    """
    from torchdevmagic.env import check_environment

    report = check_environment()
    show(shell, report)
    return report if return_result else None


@magics_class
class EnvMagics(Magics):
    @magic_arguments()
    @argument("-o", "--output", action="store_true", help="return the EnvReport object")
    @line_magic
    def cuda_env(self, line: str = "") -> Optional[Any]:
        """Why is the GPU (not) there? A verdict, its one-line fix, then the facts.

        Usage: %cuda_env [-o]

          -o  return the EnvReport (fields: code, headline, fix, also, facts, raw; to_dict())

        Verdicts: ok, cpu_build_with_driver, no_driver, devices_hidden, driver_too_old,
        arch_missing, pip_mismatch (plus cpu_only and torch_missing). Never creates a CUDA
        context: before CUDA is initialised, device names and capabilities come from NVML.

        Example:
            report = %cuda_env -o
            report.code, report.fix
        """
        args = parse_argstring(self.cuda_env, line)
        return env_magic_body(self.shell, return_result=args.output)
