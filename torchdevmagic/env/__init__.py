"""CUDA environment verdicts: why the GPU is not there, and the one line that fixes it.

``torch.utils.collect_env`` lists facts; :func:`check_environment` also gives the verdict::

    from torchdevmagic.env.report import check_environment
    print(check_environment())

Facts are gathered by :func:`collect_facts`, with everything injectable (environment,
``sys.executable``, ``shutil.which``, NVML, the torch module, platform), so every verdict can be
driven on a CPU-only machine. Verdicts are small functions tried in order (:data:`VERDICTS`).

Looking never creates a CUDA context. Until CUDA is initialised we read device names and
compute capabilities from NVML, and "available" from ``torch.cuda.device_count()`` (NVML-based;
it falls back to ``cudaGetDeviceCount`` only when NVML itself fails) rather than from
``torch.cuda.is_available()``, which initialises the CUDA driver. The arch list comes from the
build's compile flags. Once CUDA is initialised, torch's own answers are used.

Modules: :mod:`.facts` (collect), :mod:`.verdicts` (decide), :mod:`.report` (the report users
hold: ``check_environment()``; its words are :mod:`torchdevmagic.render.env`'s, which imports
this package's records, so this package does not import the report). Which
error messages a verdict explains is the diagnosis's side of that seam
(:mod:`torchdevmagic.diagnosis.environment`): it imports this package, never the reverse.
"""

from __future__ import annotations

from torchdevmagic.env.facts import EnvFacts, GpuFact, collect_facts
from torchdevmagic.env.verdicts import VERDICTS, Verdict, _arch_supports, decide

__all__ = [
    "VERDICTS",
    "EnvFacts",
    "GpuFact",
    "Verdict",
    "_arch_supports",
    "collect_facts",
    "decide",
]
