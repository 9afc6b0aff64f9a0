"""The emulated tensor: CPU values, a ``cuda:N`` face, CUDA's device rules.

The bottom layer of ``torchdevmagic.emulate``: it imports nothing from ``cuda/`` or
``fronts/``. ``tensor`` is the bottom of the core; its own methods reach the op engine
through slots that ``ops``, ``dispatch``, ``grads`` and ``serialize`` fill when imported.
Importing them all here fills them before any module of the core is used; ``sharing``
registers the tensor with multiprocessing's pickler.
"""

from torchdevmagic.emulate.core import (  # noqa: F401  (each fills the tensor's slots)
    autograd_function,
    dispatch,
    grads,
    ops,
    serialize,
    sharing,
)
