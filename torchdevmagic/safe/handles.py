"""Handles on torch internals, resolved once per scan (or once per torch for :func:`handles`).

Tensor metadata is read through ``torch._C.TensorBase``'s own descriptors and storages
through ``torch._C.StorageBase``'s: safe on any tensor, subclass or not, whatever user code
patched onto ``torch.Tensor`` or ``UntypedStorage``.
"""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple, Optional

from torchdevmagic._torch import torch_if_imported
from torchdevmagic.safe.objects import _type_dict


@dataclass
class Torch:
    """Handles on torch internals; built only when the user already imported torch."""

    module_: Any
    tensor: type
    module: type
    optimizer: type
    parameter: type
    fake_types: tuple[type, ...]
    # TensorBase's (and StorageBase's) own descriptors: safe on any tensor, subclass or not.
    # get.storage_key is the identity of the StorageImpl, for alias detection.
    get: Readers
    get_layout: Callable[[Any], Any]
    get_grad_fn: Callable[[Any], Any]
    get_base: Callable[[Any], Any]  # a view's base tensor (None for no view)
    storage: Callable[[Any], Any]
    storage_nbytes: Callable[[Any], int]
    strided: Any
    mkldnn: Any  # torch._mkldnn (None on a build without it)
    script_tables: tuple[type, ...]  # TorchScript's C++ ParameterDict and BufferDict
    no_subclass_dispatch: Callable[[], Any]
    uninitialized: tuple[type, ...]
    refuse_dispatch: Callable[[], Any]  # a context in which any __torch_dispatch__ raises
    default_dispatch: Any  # torch.Tensor's own __torch_dispatch__ (subclasses may differ)

    @classmethod
    def from_module(cls, torch: Any) -> Torch:
        # torch 2.1 names it _TensorBase (2.2 renamed it and kept the old name as an alias).
        base = getattr(torch._C, "TensorBase", None) or torch._C._TensorBase
        no_dispatch = getattr(torch._C, "DisableTorchFunctionSubclass", None)
        fakes: tuple[type, ...] = ()
        fake_mod = sys.modules.get("torch._subclasses.fake_tensor")
        if fake_mod is not None:
            fakes = (fake_mod.FakeTensor,)
        uninit: tuple[type, ...] = ()
        with contextlib.suppress(Exception):
            from torch.nn.parameter import UninitializedTensorMixin  # type: ignore[attr-defined]

            uninit = (UninitializedTensorMixin,)
        get = Readers(
            shape=base.shape.__get__,
            dtype=base.dtype.__get__,
            device=base.device.__get__,
            nbytes=base.nbytes.__get__,
            requires_grad=base.requires_grad.__get__,
            grad=base.grad.__get__,
            storage_key=torch._C.StorageBase._cdata.__get__,
        )
        return cls(
            module_=torch,
            tensor=torch.Tensor,
            module=torch.nn.Module,
            optimizer=torch.optim.Optimizer,
            parameter=torch.nn.Parameter,
            fake_types=fakes,
            get=get,
            get_layout=base.layout.__get__,
            get_grad_fn=base.grad_fn.__get__,
            get_base=base._base.__get__,
            storage=base.untyped_storage,
            storage_nbytes=torch._C.StorageBase.nbytes,
            strided=torch.strided,
            mkldnn=getattr(torch, "_mkldnn", None),
            script_tables=tuple(
                getattr(torch._C, name)
                for name in ("ParameterDict", "BufferDict")
                if hasattr(torch._C, name)
            ),
            no_subclass_dispatch=no_dispatch or contextlib.nullcontext,
            uninitialized=uninit,
            refuse_dispatch=_refusing_mode(),
            default_dispatch=_type_dict(torch.Tensor).get("__torch_dispatch__"),
        )


class Readers(NamedTuple):
    """TensorBase's (and StorageBase's) own descriptors' ``__get__``: they read the C
    fields whatever Python classes between a tensor's type and TensorBase define."""

    shape: Callable[[Any], Any]
    dtype: Callable[[Any], Any]
    device: Callable[[Any], Any]
    nbytes: Callable[[Any], int]
    requires_grad: Callable[[Any], bool]
    grad: Callable[[Any], Any]
    storage_key: Callable[[Any], int]


class DispatchRefused(Exception):
    """A read would have called a ``__torch_dispatch__``: refused before it ran."""


_REFUSE: Optional[type] = None


def _refusing_mode() -> Callable[[], Any]:
    """A ``TorchDispatchMode`` that raises :class:`DispatchRefused` on any call. Modes come
    before subclasses: a read that would reach a subclass's ``__torch_dispatch__`` (a
    wrapper subclass made with ``dispatch_device=True`` or ``dispatch_sizes_strides_policy``
    dispatches its ``device`` and ``shape``) meets this mode instead, so no user code runs."""
    global _REFUSE
    if _REFUSE is None:
        try:
            from torch.utils._python_dispatch import TorchDispatchMode
        except Exception:  # pragma: no cover - every supported torch has it
            return contextlib.nullcontext

        class RefuseDispatch(TorchDispatchMode):  # type: ignore[no-untyped-call]  # torch
            def __torch_dispatch__(
                self, func: Any, types: Any, args: Any = (), kwargs: Any = None
            ) -> Any:
                raise DispatchRefused(str(func))

        _REFUSE = RefuseDispatch
    return _REFUSE


def handles() -> Optional[Torch]:
    """Fresh :class:`Torch` handles when the user imported torch, else ``None``."""
    torch = torch_if_imported()
    return None if torch is None else Torch.from_module(torch)


def is_tensor(obj: Any) -> bool:
    """Whether ``obj``'s class derives from ``torch.Tensor`` (False when torch is absent)."""
    torch = torch_if_imported()
    return torch is not None and issubclass(type(obj), torch.Tensor)


def is_module(obj: Any) -> bool:
    """Whether ``obj``'s class derives from ``torch.nn.Module``."""
    torch = torch_if_imported()
    return torch is not None and issubclass(type(obj), torch.nn.Module)


def is_optimizer(obj: Any) -> bool:
    """Whether ``obj``'s class derives from ``torch.optim.Optimizer``."""
    torch = torch_if_imported()
    return torch is not None and issubclass(type(obj), torch.optim.Optimizer)
