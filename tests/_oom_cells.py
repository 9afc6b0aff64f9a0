"""pytorch/pytorch#27600's ``oom()``, scaled to a 1 GiB emulated GPU: 64 MiB ``Linear(4096,
4096)`` layers, each made on the device, kept alive by the frame's ``layers`` list. Shared by
tests/test_free.py and tests/test_oom.py. The layers are made on the device (the report makes
them on the CPU and calls ``l.to(1)``): under emulation an OOM inside Module.to surfaces as
torch's "_apply(): Couldn't swap" RuntimeError."""

OOM_27600 = """
def oom(n):
    x = torch.randn(100, 4096, device="cuda")
    layers = []
    for i in range(n):
        l = torch.nn.Linear(4096, 4096, device="cuda")
        layers.append(l)
        x = l(x)
    return x.shape
"""
