"""What stands in for CUDA around the emulated tensor while a session runs: the placement
mode (``device="cuda"``), ``torch.cuda``'s functions and classes, memory, pinned memory,
autocast regions, DataParallel's collectives, and torch's other patched attributes.

Imports the core (``core/``), never ``fronts/``.
"""
