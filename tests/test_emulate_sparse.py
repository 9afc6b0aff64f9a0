"""Sparse tensors on the emulated GPU: a graph network's normalised adjacency moved there
and multiplied with a dense operand (``torch.spmm``), as GCN code does on a GPU."""

from __future__ import annotations

import gc
import io
import pickle
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from torchdevmagic.emulate.core import rules as _rules  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:Sparse CSR tensor support:UserWarning")


def _graph(n: int = 40, classes: int = 3, features: int = 12) -> tuple[Any, ...]:
    """A random graph as a GCN's data loader leaves it: row-normalised features, the
    symmetric normalised adjacency D^-1/2 (A + I) D^-1/2 as a sparse COO tensor (CPU)."""
    g = torch.Generator().manual_seed(0)
    edges = torch.randint(0, n, (2, 3 * n), generator=g)
    dense = torch.zeros(n, n)
    dense[edges[0], edges[1]] = 1.0
    dense = ((dense + dense.t()) > 0).float() + torch.eye(n)
    d = dense.sum(1).pow(-0.5)
    adj = (d[:, None] * dense * d[None, :]).to_sparse()
    x = torch.rand(n, features, generator=g)
    x = x / x.sum(1, keepdim=True)
    labels = torch.randint(0, classes, (n,), generator=g)
    return x, adj, labels, torch.arange(0, n // 2)


class GraphConvolution(torch.nn.Module):
    def __init__(self, fan_in: int, fan_out: int) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.empty(fan_in, fan_out))
        self.bias = torch.nn.Parameter(torch.empty(fan_out))
        bound = 1.0 / fan_out**0.5
        self.weight.data.uniform_(-bound, bound)
        self.bias.data.uniform_(-bound, bound)

    def forward(self, x: Any, adj: Any) -> Any:
        support = torch.mm(x, self.weight)
        return torch.spmm(adj, support) + self.bias


class GCN(torch.nn.Module):
    def __init__(self, nfeat: int, nhid: int, nclass: int) -> None:
        super().__init__()
        self.gc1 = GraphConvolution(nfeat, nhid)
        self.gc2 = GraphConvolution(nhid, nclass)

    def forward(self, x: Any, adj: Any) -> Any:
        x = torch.relu(self.gc1(x, adj))
        # (dropout left out: the emulated GPU's generator is not the CPU's, so its masks differ)
        return torch.log_softmax(self.gc2(x, adj), dim=1)


def _train(device: str, steps: int = 5) -> tuple[list[float], Any]:
    torch.manual_seed(0)
    x, adj, labels, idx = _graph()
    model = GCN(x.shape[1], 16, 3)
    if device == "cuda":
        model.cuda()
        x, adj, labels, idx = x.cuda(), adj.cuda(), labels.cuda(), idx.cuda()
    opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.nll_loss(model(x, adj)[idx], labels[idx])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, (model, adj)


def test_a_two_layer_gcn_trains_as_on_the_cpu(emu: Any) -> None:
    """pygcn's shape: ``adj = adj.cuda()``, ``torch.spmm(adj, support)``, Adam, nll_loss.
    The same kernels run, so each step's loss equals the CPU run's bit for bit."""
    cpu, _ = _train("cpu")
    emulated, (model, adj) = _train("cuda")
    assert emulated == cpu
    assert cpu[-1] < cpu[0]
    assert adj.is_cuda and adj.is_sparse and adj.layout == torch.sparse_coo
    assert adj.device == torch.device("cuda:0") and adj.get_device() == 0
    assert all(p.grad is not None and p.grad.device.type == "cuda" for p in model.parameters())


def test_what_gcn_code_does_with_a_sparse_tensor_on_the_gpu(emu: Any) -> None:
    i = torch.tensor([[0, 1, 2, 2, 0], [0, 1, 2, 0, 0]])
    v = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0])
    cpu = torch.sparse_coo_tensor(i, v, (3, 3))
    made = torch.sparse_coo_tensor(i.cuda(), v.cuda(), (3, 3), device="cuda")
    for s in (made, cpu.cuda(), cpu.to("cuda"), cpu.to_dense().cuda().to_sparse()):
        assert s.is_cuda and s.is_sparse and s.device == torch.device("cuda:0")
        assert s.layout == torch.sparse_coo and type(s.cpu()) is torch.Tensor
        assert torch.equal(s.cpu().to_dense(), cpu.to_dense())
    s = cpu.cuda()
    assert s._nnz() == 5 and not s.is_coalesced()
    c = s.coalesce()
    assert c.is_coalesced() and c._nnz() == 4
    for part in (c.indices(), c.values(), s._indices(), s._values(), s.to_dense(), c.t()):
        assert part.is_cuda
    assert torch.equal(c.indices().cpu(), cpu.coalesce().indices())
    assert torch.equal(c.t().cpu().to_dense(), cpu.to_dense().t())
    dense = torch.arange(6.0).reshape(3, 2)
    want = cpu.to_dense() @ dense
    for product in (
        torch.spmm(s, dense.cuda()),
        torch.sparse.mm(s, dense.cuda()),
        s @ dense.cuda(),
        torch.mm(s, dense.cuda()),
    ):
        assert product.is_cuda and not product.is_sparse
        assert torch.equal(product.cpu(), want)
    total = torch.sparse.sum(s)
    assert total.is_cuda and total.item() == 15.0
    by_row = torch.sparse.sum(s, dim=1)
    assert by_row.is_sparse and torch.equal(by_row.cpu().to_dense(), torch.tensor([6.0, 2, 7]))
    for result, expect in ((s * 2, cpu * 2), (s + s, cpu + cpu), (2.5 * s, 2.5 * cpu)):
        assert result.is_cuda and result.is_sparse
        assert torch.equal(result.cpu().to_dense(), expect.to_dense())
    # torch's own layout of a sparse repr, with the device as a GPU's shows it
    assert repr(s) == repr(cpu).replace("size=", "device='cuda:0', size=")
    assert s.type() == "torch.cuda.sparse.FloatTensor"


def test_backward_reaches_the_dense_operand_and_the_sparse_values(emu: Any) -> None:
    i, v = torch.tensor([[0, 1, 2, 2], [0, 1, 2, 0]]), torch.tensor([1.0, 2.0, 3.0, 4.0])
    grads = []
    for device in ("cpu", "cuda"):
        s = torch.sparse_coo_tensor(i, v, (3, 3), device=device, requires_grad=True)
        d = torch.arange(6.0, device=device).reshape(3, 2).requires_grad_()
        (torch.sparse.mm(s, d) ** 2).sum().backward()
        d2 = torch.ones(3, 2, device=device, requires_grad=True)
        torch.spmm(s.detach(), d2).sum().backward()
        assert s.grad.is_sparse and s.grad.device.type == device
        assert d.grad.device.type == device and d2.grad.device.type == device
        grads.append([s.grad.cpu().to_dense(), d.grad.cpu(), d2.grad.cpu()])
    for cpu, emulated in zip(*grads):
        assert torch.equal(cpu, emulated)


def test_a_cpu_sparse_matrix_with_a_gpu_dense_one_fails_as_on_cuda(emu: Any) -> None:
    """Either side on the CPU: the SparseCUDA kernel's generated wrapper refuses the mix
    with the dispatcher's words, naming the argument on the other device."""

    def got(name: str, arg: str, common: str, method: str) -> str:
        return _rules.dispatcher_error(torch.device(common), torch.device(arg), name, method)

    cpu_sparse = torch.eye(3).to_sparse()
    gpu_sparse, gpu_dense = cpu_sparse.cuda(), torch.ones(3, 2, device="cuda")
    cases = [
        (lambda: torch.spmm(cpu_sparse, gpu_dense), got("mat2", "cuda:0", "cpu", "mm")),
        (lambda: cpu_sparse @ gpu_dense, got("mat2", "cuda:0", "cpu", "mm")),
        (lambda: torch.spmm(gpu_sparse, gpu_dense.cpu()), got("mat2", "cpu", "cuda:0", "mm")),
        (lambda: gpu_sparse @ gpu_dense.cpu(), got("mat2", "cpu", "cuda:0", "mm")),
        (lambda: torch.sparse.mm(cpu_sparse, gpu_dense), got("mat1", "cpu", "cuda:0", "addmm")),
        (
            lambda: torch.sparse.mm(gpu_sparse, gpu_dense.cpu()),
            got("mat1", "cuda:0", "cpu", "addmm"),
        ),
    ]
    for call, message in cases:
        with pytest.raises(RuntimeError) as info:
            call()
        method = message.replace("method mm)", "method wrapper_SparseCUDA__mm)")
        method = method.replace("method addmm)", "method wrapper_SparseCUDA__addmm)")
        assert str(info.value) == method
    # CSR goes to the SparseCsrCUDA kernels (C++ cannot read a CSR wrapper's layout: the
    # check reads the CPU tensor's)
    cpu_csr = torch.eye(3).to_sparse_csr()
    gpu_csr = cpu_csr.cuda()
    csr_cases = [
        (lambda: cpu_csr @ gpu_dense, got("mat2", "cuda:0", "cpu", "wrapper_SparseCsrCUDA__mm")),
        (
            lambda: gpu_csr @ gpu_dense.cpu(),
            got("mat2", "cpu", "cuda:0", "wrapper_SparseCsrCUDA__mm"),
        ),
        (
            lambda: torch.addmm(gpu_dense.cpu(), gpu_csr, gpu_dense.cpu()),
            got("mat1", "cuda:0", "cpu", "wrapper_SparseCsrCUDA__addmm"),
        ),
    ]
    for call, message in csr_cases:
        with pytest.raises(RuntimeError) as info:
            call()
        assert str(info.value) == message
    assert torch.equal((gpu_csr @ gpu_dense).cpu(), torch.ones(3, 2))


def test_sparse_sums_and_products_across_devices_fail_as_on_cuda(emu: Any) -> None:
    """add/sub/mul with a sparse argument reach the SparseCUDA kernels, which check devices
    themselves, on an output made from self's options (add) or the sparse argument's (mul)."""
    cpu = torch.eye(3).to_sparse()
    gpu, gpu1 = cpu.cuda(), cpu.to("cuda:1")
    improve = (
        "to be true, but got false.  (Could this error message be improved?  If so, please "
        "report an enhancement request to PyTorch.)"
    )
    cases = [
        (lambda: gpu + cpu, "add: expected 'other' to be CUDA, but got CPU"),
        (lambda: cpu + gpu, "add: expected 'self' to be CUDA, but got CPU"),
        (lambda: gpu - cpu, "add: expected 'other' to be CUDA, but got CPU"),
        (
            lambda: torch.ones(3, 3) + gpu,
            "add: expected 'self' to be a CUDA tensor, but got a CPU tensor",
        ),
        (
            lambda: torch.ones(3, 3, device="cuda") + cpu,
            "add: expected 'other' to be a CUDA tensor, but got a CPU tensor",
        ),
        (
            lambda: gpu + torch.ones(3, 3),
            "add(sparse, dense) is not supported. Use add(dense, sparse) instead.",
        ),
        (lambda: gpu * cpu, "mul: expected 'other' to be CUDA, but got CPU"),
        (lambda: cpu * gpu, "mul: expected 'out' to be CUDA, but got CPU"),
        (lambda: gpu + gpu1, "Expected cuda::check_device({r_, t, src}) " + improve),
        (lambda: gpu * gpu1, "Expected cuda::check_device({r_, t_, src_}) " + improve),
    ]
    for call, message in cases:
        with pytest.raises(RuntimeError) as info:
            call()
        assert str(info.value) == message
    assert torch.equal((torch.ones(3, 3, device="cuda") + gpu).cpu(), torch.ones(3, 3) + cpu)


def test_the_ledger_counts_a_sparse_tensor_s_parts(emu: Any) -> None:
    gc.collect()
    before = torch.cuda.memory_allocated()
    i, v = torch.tensor([[0, 1, 2, 2], [0, 1, 2, 0]]), torch.ones(4)
    s = torch.sparse_coo_tensor(i, v, (3, 3)).cuda()
    assert torch.cuda.memory_allocated() == before + i.nbytes + v.nbytes
    values = s._values()  # a view of the counted values: no new memory
    assert torch.cuda.memory_allocated() == before + i.nbytes + v.nbytes
    del s, values
    gc.collect()
    assert torch.cuda.memory_allocated() == before
    csr = torch.eye(4).to_sparse_csr().cuda()  # its values() is a view: its storage counts
    parts = (csr.crow_indices(), csr.col_indices(), csr.values())
    assert torch.cuda.memory_allocated() == before + sum(p.nbytes for p in parts)
    del csr, parts
    gc.collect()
    assert torch.cuda.memory_allocated() == before


def test_a_sparse_tensor_saves_and_loads_as_a_cuda_one(emu: Any) -> None:
    s = torch.sparse_coo_tensor(torch.tensor([[0, 2], [1, 0]]), torch.tensor([1.0, 2]), (3, 3))
    gpu = s.cuda()
    buf = io.BytesIO()
    torch.save({"adj": gpu, "csr": torch.eye(2).to_sparse_csr().cuda()}, buf)
    buf.seek(0)
    loaded = torch.load(buf)
    assert loaded["adj"].is_cuda and loaded["adj"].is_sparse and loaded["csr"].is_cuda
    assert torch.equal(loaded["adj"].cpu().to_dense(), s.to_dense())
    back = pickle.loads(pickle.dumps(gpu))
    assert back.is_cuda and torch.equal(back.cpu().to_dense(), s.to_dense())
    # torch keeps a sparse tensor unpickled outside torch.load alive in a list until the next
    # load validates it (torch/_utils.py, _sparse_tensors_to_validate), on a GPU too: its
    # memory would stay counted for the tests after this one. Validate it as torch.load does.
    torch._utils._validate_loaded_sparse_tensors()


def test_leaving_to_the_cpu_brings_sparse_tensors_and_frees_their_memory() -> None:
    from torchdevmagic.emulate import start, stop

    start()
    try:
        adj = torch.eye(3).to_sparse().cuda()
        csr = torch.eye(4).to_sparse_csr().cuda()
        dense = torch.ones(2, device="cuda")
        assert torch.cuda.memory_allocated() > 0
    finally:
        stop(to="cpu")
    assert (adj.device.type, csr.device.type, dense.device.type) == ("cpu",) * 3
    assert adj.is_sparse and torch.equal(adj.to_dense(), torch.eye(3))
    assert torch.equal(csr.to_dense(), torch.eye(4))
    start()
    try:
        gc.collect()
        assert torch.cuda.memory_allocated() == 0  # nothing of them is counted any more
    finally:
        stop()


def test_devices_shows_the_sparse_adjacency_on_the_gpu(emu_shell: Any) -> None:
    cell = (
        "import torch\n"
        "i = torch.tensor([[0, 1, 2, 2], [0, 1, 2, 0]])\n"
        "adj = torch.sparse_coo_tensor(i, torch.ones(4), (3, 3))\n"
        "adj = adj.cuda()\n"
        "out = torch.spmm(adj, torch.ones(3, 2).cuda())\n"
        "csr = torch.eye(4).to_sparse_csr().cuda()\n"
        "adj_host, csr_host = adj.cpu(), csr.cpu()\n"
    )
    assert emu_shell.run_cell(cell).error_in_exec is None
    report = emu_shell.run_line_magic("devices", "-o")
    rows = {r.path: r for r in report.rows}
    for name, shape in (("adj", (3, 3)), ("csr", (4, 4))):
        assert rows[name].device == "cuda:0" and rows[name].shape == shape
        assert rows[f"{name}_host"].device == "cpu"
        # counted as the CPU's: each component's storage
        assert rows[name].nbytes == rows[f"{name}_host"].nbytes > 0
    host = emu_shell.user_ns["csr_host"]
    parts = (host.crow_indices(), host.col_indices(), host.values())
    assert rows["csr"].nbytes == sum(p.untyped_storage().nbytes() for p in parts)
    assert rows["adj"].nbytes == 4 * 2 * 8 + 4 * 4  # indices (int64), values (float32)
    assert rows["out"].device == "cuda:0"


def test_the_legacy_sparse_cuda_types_make_sparse_tensors_as_on_a_gpu(emu: Any) -> None:
    """``torch.cuda.sparse.FloatTensor(indices, values, size)`` is ``sparse_coo_tensor`` of
    them (on their device), sizes make an empty sparse tensor on the GPU; ``isinstance``
    tells sparse from dense as torch's types do."""
    i, v = torch.tensor([[0, 1], [1, 0]]), torch.tensor([1.0, 2.0])
    made = torch.cuda.sparse.FloatTensor(i.cuda(), v.cuda(), torch.Size([2, 2]))
    assert made.is_cuda and made.is_sparse
    assert torch.equal(made.cpu().to_dense(), torch.tensor([[0.0, 1.0], [2.0, 0.0]]))
    assert torch.cuda.sparse.FloatTensor(i, v, torch.Size([2, 2])).device.type == "cpu"
    empty = torch.cuda.sparse.DoubleTensor(2, 3)
    assert empty.is_cuda and empty.layout == torch.sparse_coo and empty.shape == (2, 3)
    assert empty.dtype == torch.float64 and empty._nnz() == 0
    assert isinstance(made, torch.cuda.sparse.FloatTensor)
    assert not isinstance(made, torch.cuda.FloatTensor)
    assert not isinstance(torch.ones(2, device="cuda"), torch.cuda.sparse.FloatTensor)
    assert isinstance(torch.ones(2, device="cuda"), torch.cuda.FloatTensor)
    with pytest.raises(RuntimeError, match=r"^legacy constructor expects device type: cuda but"):
        torch.cuda.sparse.FloatTensor(2, device="cpu")
    with pytest.raises(TypeError, match=r"^torch.sparse.SparseTensor\(sequence\) only accepts"):
        torch.cuda.sparse.FloatTensor([1, 2])
