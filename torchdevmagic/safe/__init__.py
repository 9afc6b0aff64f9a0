"""The only code that touches user objects. Everything here runs no user code.

Rules (each one paid for by a bug; see docs/architecture.md):

* A class is ``type(obj)`` (never ``obj.__class__``), tested with ``issubclass`` (never
  ``isinstance``, which falls back to ``__class__``); its MRO, name, module and namespace
  come from ``type``'s own descriptors, so a metaclass's code never runs.
* Containers are read through the C methods of their base type (``dict.items(d)``,
  ``list.__getitem__``), so an overridden ``items``/``__iter__``/``__len__`` never runs;
  dict keys are never hashed or compared again, and a key that is not exactly a ``str`` has
  no method called (its text is ``repr`` only for int/float/bool/None and tuples of them).
* Instance attributes come from the instance ``__dict__`` (through the class's C getset: a
  ``__dict__`` property is refused, not called) and ``__slots__`` member descriptors;
  properties and ``__getattr__`` are never touched.
* Tensor metadata is read through ``torch._C.TensorBase``'s descriptors and storages
  through ``torch._C.StorageBase``'s (whatever is patched onto ``torch.Tensor``), with
  ``__torch_function__`` disabled; no tensor value is read.
* A tensor subclass with its own ``__torch_dispatch__`` is read inside a mode that refuses
  any dispatch (safe/tensors.py); its memory is that of the tensors it holds. A class
  attribute ``__torchdevmagic_device__`` (``True``: the instance-dict key
  ``_emulated_device``; or a key name) gives an emulated tensor's Python-visible device.
* Every read of one object is inside ``try``: an object that refuses is skipped.

The surface (``torch`` is the one the user imported; functions return ``None``/empty when
it is not imported, and never raise for a hostile object):

Classes and attributes
    ``class_of(obj)``, ``type_name(obj)``, ``class_name(cls)``, ``mro(cls)``,
    ``module_name(cls)``, ``class_attribute(cls, name)`` (static: no descriptor runs),
    ``instance_attributes(obj)`` (the ``__dict__`` or ``None``), ``slot_values(obj)``,
    ``default_argument(code, places, object_id)`` (the parameter a default value is for),
    ``is_tensor(obj)``, ``is_module(obj)``, ``is_optimizer(obj)``.
Containers
    ``container_items(obj, limit)`` (dict/list/tuple/set, subclasses too, through base
    methods; ``None`` for anything else), ``table_items(d)`` (a dict in its own order,
    OrderedDict included), ``module_table(ns, "_parameters")``.
Paths
    ``attribute_path(path, name)``, ``module_child_path(path, name)``,
    ``item_path(path, key)``, ``key_text(key)``.
Tensors
    ``tensor_facts(t)`` -> :class:`TensorFacts` (device, dtype, shape, storage_key,
    storage_bytes, view_bytes, requires_grad, has_grad_fn, note) or ``None``;
    ``storage_bytes(t)`` (the whole storage: a view of a big tensor counts all of it),
    ``tensor_device(t)``, ``tensor_grad(t)``, ``tensor_base(t)`` (a view's base).
    Batch: ``facts_columns(values, tt)`` / ``placement_columns(values, tt)`` give the same
    facts column-wise for plain tensors (``None``: take the one-at-a-time path); ``tt`` is
    ``handles()``. ``read_facts(t, tt)`` is the one-at-a-time reader they are checked
    against (the caller holds ``no_torch_function``).
Modules
    ``module_tensors(mod, path)`` -> :class:`ModuleTensor` (path, tensor, role:
    ``"parameter"``, ``"buffer"`` or ``"attribute"``) for the whole tree;
    ``module_tree``/``owned_tensors``/``plain_tensor_attributes`` are its pieces, with a
    :class:`Classifier` (per-class caches) for a walk that meets many objects.
"""

from __future__ import annotations

from torchdevmagic.safe.batch import (
    Columns,
    Placement,
    all_exactly,
    columns_of,
    facts_columns,
    placement_columns,
)
from torchdevmagic.safe.classes import Classifier, classify
from torchdevmagic.safe.containers import container_items, module_table, table_items
from torchdevmagic.safe.handles import Torch, handles, is_module, is_optimizer, is_tensor
from torchdevmagic.safe.modules import (
    ModuleTensor,
    module_tensors,
    module_tree,
    owned_tensors,
    plain_tensor_attributes,
)
from torchdevmagic.safe.objects import (
    class_attribute,
    class_name,
    class_of,
    dict_descriptor,
    instance_attributes,
    module_name,
    mro,
    slot_values,
    type_name,
)
from torchdevmagic.safe.paths import attribute_path, item_path, key_text, module_child_path
from torchdevmagic.safe.tensors import (
    TensorFacts,
    device_text,
    dtype_text,
    read_facts,
    storage_bytes,
    tensor_base,
    tensor_device,
    tensor_facts,
    tensor_grad,
)

__all__ = [
    "Classifier",
    "Columns",
    "ModuleTensor",
    "Placement",
    "TensorFacts",
    "Torch",
    "all_exactly",
    "attribute_path",
    "class_attribute",
    "class_name",
    "class_of",
    "classify",
    "columns_of",
    "container_items",
    "device_text",
    "dict_descriptor",
    "dtype_text",
    "facts_columns",
    "handles",
    "instance_attributes",
    "is_module",
    "is_optimizer",
    "is_tensor",
    "item_path",
    "key_text",
    "module_child_path",
    "module_name",
    "module_table",
    "module_tensors",
    "module_tree",
    "mro",
    "owned_tensors",
    "placement_columns",
    "plain_tensor_attributes",
    "read_facts",
    "slot_values",
    "storage_bytes",
    "table_items",
    "tensor_base",
    "tensor_device",
    "tensor_facts",
    "tensor_grad",
    "type_name",
]
