"""pytorch/pytorch#27600's ``oom()``, scaled to a 1 GiB emulated GPU: 64 MiB ``Linear(4096,
4096)`` layers, each made on the CPU and moved with ``l.to("cuda")`` as in the report (which
uses ``l.to(1)``, a second GPU), kept alive by the frame's ``layers`` list. Shared by
tests/test_free.py and tests/test_oom.py.
https://github.com/pytorch/pytorch/issues/27600"""

OOM_27600 = """
def oom(n):
    x = torch.randn(100, 4096, device="cuda")
    layers = []
    for i in range(n):
        l = torch.nn.Linear(4096, 4096)
        l.to("cuda")
        layers.append(l)
        x = l(x)
    return x.shape
"""
