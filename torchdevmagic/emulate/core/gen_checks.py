"""Writes ``_checks.json`` from the installed torch's own codegen inputs (developer tool).

CUDA enforces "all tensors on one device" in two places: the dispatcher wrapper that torchgen
generates for each CUDA kernel (``check_and_update_common_device`` over the out and positional
tensor arguments, unless the op says ``device_check: NoCheck``), and the kernels that opted out
and check for themselves (TensorIterator, indexing, copies). This reads native_functions.yaml
with torchgen, generates each CUDA wrapper exactly as torch's build does, and records which
arguments it checks under which method name. Run with the torch whose table you want::

    python -m torchdevmagic.emulate.core.gen_checks
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

_CHECK = re.compile(r'check_and_update_common_device\(common_device, (\w+), "(\w+)", "(\w+)"\)')


def build() -> dict[str, object]:
    import torchgen
    from torchgen.dest.register_dispatch_key import (
        RegisterDispatchKey,
        StructuredRegisterDispatchKey,
    )
    from torchgen.gen import parse_native_yaml
    from torchgen.model import DispatchKey, NativeFunctionsGroup
    from torchgen.selective_build.selector import SelectiveBuilder
    from torchgen.utils import Target

    root = Path(torchgen.__file__).parent / "packaged" / "ATen" / "native"
    parsed = parse_native_yaml(str(root / "native_functions.yaml"), str(root / "tags.yaml"))
    cuda = parsed.backend_indices[DispatchKey.CUDA]
    selector = SelectiveBuilder.get_nop_selector()
    gen = RegisterDispatchKey(
        cuda,
        Target.ANONYMOUS_DEFINITION,
        selector,
        rocm=False,
        symint=True,
        class_method_name=None,
        skip_dispatcher_op_registration=False,
    )
    groups: dict[object, NativeFunctionsGroup] = {}
    from torchgen.gen import get_grouped_native_functions

    for item in get_grouped_native_functions(parsed.native_functions):
        if isinstance(item, NativeFunctionsGroup):
            for f in item.functions():
                groups[f.func.name] = item
    checked: dict[str, list[object]] = {}
    own: list[str] = []
    for f in parsed.native_functions:
        name = f"{f.func.name.name}.{f.func.name.overload_name or 'default'}"
        g = groups.get(f.func.name)
        text = None
        if g is not None and g.structured and cuda.get_kernel(g) is not None:
            text = StructuredRegisterDispatchKey(
                cuda,
                Target.ANONYMOUS_DEFINITION,
                selector,
                rocm=False,
                symint=True,
                class_method_name=None,
                skip_dispatcher_op_registration=False,
                g=g,
            ).gen_one(f)
        elif cuda.has_kernel(f):
            text = gen.gen_unstructured(f, g)
        if not text:
            continue
        found = _CHECK.findall(text)
        if found:
            checked[name] = [found[0][1], [arg for arg, _, _ in found]]
        else:
            own.append(name)
    return {"checked": checked, "own_checks": sorted(own)}


if __name__ == "__main__":
    import torch

    table: dict[str, Any] = build()
    table["torch"] = torch.__version__
    out = Path(__file__).with_name("_checks.json")
    out.write_text(json.dumps(table, sort_keys=True, separators=(",", ":")) + "\n")
    print(f"{out}: {len(table['checked'])} checked, {len(table['own_checks'])} own checks")
