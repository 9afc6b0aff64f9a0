"""The ways in: ``start()``/``stop()``/``emulate_cuda()``/``status()`` (``session``), what
leaving the emulated GPU leaves (``leaving``) and the ``python -m torchdevmagic.emulate``
command. The ``%emulate_cuda`` magic
(``torchdevmagic/magics/emulate.py``) and the pytest plugin (``emulate/plugin.py``) call
these.

Imports ``cuda/`` and ``core/``; nothing below imports this layer.
"""
