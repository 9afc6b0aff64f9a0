# ruff: noqa: E501 - the users' code keeps its own long lines
"""%%devcheck on more device bugs from real reports, on the emulated GPU through a real shell:
the cell fails with PyTorch's CUDA message, the printed fix is applied where the tool says (run
before the cell, or a line of the user's function replaced), and the cell then runs."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

from _fixrun import edited, fails_under_devcheck  # noqa: E402

SAME_DEVICE = (
    "Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!"
)


# A normalisation layer whose mean and std are class attributes. No public report of this
# exact pattern was found (the searched reports, e.g. stackoverflow 60908827, hold the tensor
# on the instance): the case is written here. Module.to() moves no class attribute, so
# forward reads CPU tensors.
NORMALIZE = """import torch, torch.nn as nn
class Normalize(nn.Module):
    mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
    def forward(self, x):
        return (x - self.mean) / self.std
device = "cuda"
model = nn.Sequential(Normalize(), nn.Conv2d(3, 4, 3)).to(device)
images = torch.rand(2, 3, 8, 8, device=device)
"""


def test_tensors_a_module_reads_from_its_class_are_moved_on_the_class(emu_shell: Any) -> None:
    """Before: no culprit and no fix ("none of the names on this line holds the odd tensor")."""
    d = fails_under_devcheck(emu_shell, NORMALIZE, "out = model(images)", SAME_DEVICE)
    assert [c.expression for c in d.culprits] == ["model[0].mean", "model[0].std"]
    assert (
        d.fix
        == "Normalize.mean, Normalize.std = Normalize.mean.to(device), Normalize.std.to(device)"
    )
    assert d.fix_lineno is None  # run before the cell
    assert any("of class Normalize" in n and "register_buffer('mean'" in n for n in d.notes)
    assert emu_shell.run_cell(d.fix).error_in_exec is None
    assert emu_shell.run_cell("out = model(images)").error_in_exec is None
    assert emu_shell.user_ns["out"].device.type == "cuda"


# xiaxin1998/DHCN#14 (model.py, HyperConv.forward): np.sum over the list of layer outputs,
# which live on the GPU, inside the module's own forward.
HYPERCONV = """import numpy as np
import torch
from torch.nn import Module
class HyperConv(Module):
    def __init__(self, layers, emb_size=100):
        super(HyperConv, self).__init__()
        self.emb_size = emb_size
        self.layers = layers
    def forward(self, adjacency, embedding):
        item_embeddings = embedding
        item_embedding_layer0 = item_embeddings
        final = [item_embedding_layer0]
        for i in range(self.layers):
            item_embeddings = torch.mm(adjacency, item_embeddings)
            final.append(item_embeddings)
        item_embeddings = np.sum(final, 0)
        return item_embeddings
hyper = HyperConv(2, emb_size=4).cuda()
adjacency = torch.eye(5).cuda()
embedding = torch.randn(5, 4).cuda()
"""


def test_numpy_over_a_list_of_gpu_tensors_in_forward_stays_in_torch(emu_shell: Any) -> None:
    """Before: the culprits were the call's arguments and the fix printed the failing line
    back unchanged (``np.sum(final, 0)`` has an axis, which the stack rewrite refused)."""
    call = "item_embeddings_hg = hyper(adjacency, embedding)"
    d = fails_under_devcheck(
        emu_shell,
        HYPERCONV,
        call,
        "can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the tensor "
        "to host memory first.",
        exc=TypeError,
    )
    assert [c.expression for c in d.culprits] == ["final"]
    assert d.fix == "item_embeddings = torch.stack(final).sum(0)"
    assert (d.fix_lineno, d.fix_insert) == (16, False)
    assert d.fix_scope.startswith("HyperConv.forward (")
    assert emu_shell.run_cell(edited(HYPERCONV, d)).error_in_exec is None
    assert emu_shell.run_cell(call).error_in_exec is None
    emb = emu_shell.user_ns["embedding"]
    expected = emb + emb + emb  # adjacency is the identity: three equal layers
    assert torch.allclose(emu_shell.user_ns["item_embeddings_hg"].cpu(), expected.cpu())


# thesouther/MARL#2 (QMIX/agent.py, policy.py, NN.py): init_hidden makes the policy's
# eval_hidden on the CPU, choose_action slices it and the GRUCell of DRQN.forward reads it.
# Worked before this change; kept for the pattern (a slice of a plain object's tensor).
QMIX = """import numpy as np
import torch, torch.nn as nn
import torch.nn.functional as F
class Conf:
    device = torch.device("cuda")
    n_actions, n_agents, obs_shape, drqn_hidden_dim = 4, 3, 6, 8
    last_action, reuse_network = True, True
class DRQN(nn.Module):
    def __init__(self, input_shape, conf):
        super(DRQN, self).__init__()
        self.conf = conf
        self.fc1 = nn.Linear(input_shape, conf.drqn_hidden_dim)
        self.rnn = nn.GRUCell(conf.drqn_hidden_dim, conf.drqn_hidden_dim)
        self.fc2 = nn.Linear(conf.drqn_hidden_dim, conf.n_actions)
    def forward(self, obs, hidden_state):
        x = F.relu(self.fc1(obs))
        h_in = hidden_state.reshape(-1, self.conf.drqn_hidden_dim)
        h = self.rnn(x, h_in)
        q = self.fc2(h)
        return q, h
class QMIX:
    def __init__(self, conf):
        self.conf = conf
        self.device = self.conf.device
        self.n_agents = self.conf.n_agents
        input_shape = self.conf.obs_shape + self.conf.n_actions + self.n_agents
        self.eval_drqn_net = DRQN(input_shape, self.conf).to(self.device)
        self.eval_hidden = None
    def init_hidden(self, episode_num):
        self.eval_hidden = torch.zeros((episode_num, self.n_agents, self.conf.drqn_hidden_dim))
class Agents:
    def __init__(self, conf):
        self.conf = conf
        self.device = conf.device
        self.n_agents = conf.n_agents
        self.policy = QMIX(conf)
    def choose_action(self, obs, last_action, agent_num, availible_actions, epsilon, evaluate=False):
        inputs = obs.copy()
        availible_actions_idx = np.nonzero(availible_actions)[0]
        agents_id = np.zeros(self.n_agents)
        agents_id[agent_num] = 1.
        if self.conf.last_action:
            inputs = np.hstack((inputs, last_action))
        if self.conf.reuse_network:
            inputs = np.hstack((inputs, agents_id))
        hidden_state = self.policy.eval_hidden[:, agent_num, :]
        inputs = torch.tensor(inputs, dtype=torch.float32).unsqueeze(0).to(self.device)
        availible_actions = torch.tensor(availible_actions, dtype=torch.float32).unsqueeze(0).to(self.device)
        q_value, self.policy.eval_hidden[:, agent_num, :] = self.policy.eval_drqn_net(inputs, hidden_state)
        q_value[availible_actions == 0.0] = -float("inf")
        action = torch.argmax(q_value)
        return action
agents = Agents(Conf())
agents.policy.init_hidden(1)
obs = np.random.rand(6)
last_action = np.zeros(4)
avail = np.array([1, 1, 0, 1])
"""


def test_a_slice_of_a_plain_objects_hidden_state_is_moved_where_the_cell_reads_it(
    emu_shell: Any,
) -> None:
    call = "action = agents.choose_action(obs, last_action, 0, avail, 0.1)"
    d = fails_under_devcheck(
        emu_shell,
        QMIX,
        call,
        "Expected all tensors to be on the same device, but got mat1 is on cpu, different from "
        "other tensors on cuda:0 (when checking argument in method wrapper_CUDA_addmm)",
    )
    assert [c.expression for c in d.culprits] == ["h_in"]
    assert d.fix == "h = self.rnn(x, h_in.to(obs.device))"
    assert d.fix_scope.startswith("DRQN.forward (")
    assert emu_shell.run_cell(edited(QMIX, d)).error_in_exec is None
    assert emu_shell.run_cell(call).error_in_exec is None


# LiQiufu/WaveCNet#9 (DWT_IDWT/DWT_IDWT_layer.py): DWT_2D_tiny builds its matrices on the GPU
# when CUDA is there, and the failing matmul is in an autograd Function's forward; the
# input was left on the CPU. Worked before this change; kept for the pattern.
DWT = """import math
import numpy as np
import torch
from torch.nn import Module
from torch.autograd import Function
class DWTFunction_2D_tiny(Function):
    @staticmethod
    def forward(ctx, input, matrix_Low_0, matrix_Low_1, matrix_High_0, matrix_High_1):
        ctx.save_for_backward(matrix_Low_0, matrix_Low_1, matrix_High_0, matrix_High_1)
        L = torch.matmul(matrix_Low_0, input)
        LL = torch.matmul(L, matrix_Low_1)
        return LL
class DWT_2D_tiny(Module):
    def __init__(self):
        super(DWT_2D_tiny, self).__init__()
        self.band_low = [0.7071067811865476, 0.7071067811865476]
        self.band_length = 2
        self.band_length_half = 1
    def get_matrix(self):
        L1 = np.max((self.input_height, self.input_width))
        L = math.floor(L1 / 2)
        matrix_h = np.zeros((L, L1 + self.band_length - 2))
        index = 0
        for i in range(L):
            for j in range(self.band_length):
                matrix_h[i, index + j] = self.band_low[j]
            index += 2
        matrix_h_0 = matrix_h[0:(math.floor(self.input_height / 2)), 0:(self.input_height + self.band_length - 2)]
        matrix_h_1 = np.transpose(matrix_h[0:(math.floor(self.input_width / 2)), 0:(self.input_width + self.band_length - 2)])
        if torch.cuda.is_available():
            self.matrix_low_0 = torch.Tensor(matrix_h_0).cuda()
            self.matrix_low_1 = torch.Tensor(matrix_h_1).cuda()
            self.matrix_high_0 = torch.Tensor(matrix_h_0).cuda()
            self.matrix_high_1 = torch.Tensor(matrix_h_1).cuda()
        else:
            self.matrix_low_0 = torch.Tensor(matrix_h_0)
            self.matrix_low_1 = torch.Tensor(matrix_h_1)
            self.matrix_high_0 = torch.Tensor(matrix_h_0)
            self.matrix_high_1 = torch.Tensor(matrix_h_1)
    def forward(self, input):
        assert len(input.size()) == 4
        self.input_height = input.size()[-2]
        self.input_width = input.size()[-1]
        self.get_matrix()
        return DWTFunction_2D_tiny.apply(input, self.matrix_low_0, self.matrix_low_1, self.matrix_high_0, self.matrix_high_1)
dwt = DWT_2D_tiny()
image = torch.rand(1, 3, 8, 8)
"""


def test_an_input_left_on_the_cpu_of_an_autograd_function_is_moved(emu_shell: Any) -> None:
    d = fails_under_devcheck(
        emu_shell,
        DWT,
        "lfc = dwt(image)",
        "Expected all tensors to be on the same device, but got mat2 is on cpu, different from "
        "other tensors on cuda:0 (when checking argument in method wrapper_CUDA_bmm)",
    )
    assert [c.expression for c in d.culprits] == ["image"]
    assert d.fix == 'image = image.to("cuda:0")' and d.fix_lineno is None
    assert emu_shell.run_cell(d.fix).error_in_exec is None
    assert emu_shell.run_cell("lfc = dwt(image)").error_in_exec is None
    assert emu_shell.user_ns["lfc"].shape == (1, 3, 4, 4)


# luigibonati/mlcolvar#185 (mlcolvar/core/transform/utils.py, Statistics.update): the running
# mean, M2 and std are made together by setattr in a loop, with torch.zeros(nfeatures) on the
# CPU, then updated from a GPU batch on several lines. The author's own fix: device=x.device
# on the setattr line.
STATISTICS = """import torch
class Statistics(object):
    def __init__(self, X=None):
        self.count = 0
        self.properties = ["mean", "std", "min", "max"]
        for prop in self.properties:
            setattr(self, prop, None)
        setattr(self, "M2", None)
        self.__call__(X)
    def __call__(self, x):
        self.update(x)
    def update(self, x):
        if x is None:
            return
        ndim = x.ndim
        if ndim == 0:
            x = x.reshape(1, 1)
        elif ndim == 1:
            x = x.unsqueeze(1)
        batch_size = x.shape[0]
        nfeatures = x.shape[1]
        new_count = self.count + batch_size
        # Initialize
        if self.mean is None:
            for prop in ["mean", "M2", "std"]:
                setattr(self, prop, torch.zeros(nfeatures))
        sample_mean = torch.mean(x, dim=0)
        sample_m2 = torch.sum((x - sample_mean) ** 2, dim=0)
        delta = sample_mean - self.mean
        self.mean += delta * batch_size / new_count
        corr = batch_size * self.count / new_count
        self.M2 += sample_m2 + delta**2 * corr
        self.count = new_count
        self.std = torch.sqrt(self.M2 / self.count)
        sample_min = torch.min(x, dim=0).values
        sample_max = torch.max(x, dim=0).values
        if self.min is None:
            self.min = sample_min
            self.max = sample_max
        else:
            self.min = torch.min(torch.stack((sample_min, self.min)), dim=0).values
            self.max = torch.max(torch.stack((sample_max, self.max)), dim=0).values
X = torch.randn(16, 3, device="cuda")
"""


def test_attributes_a_setattr_loop_makes_together_get_device_where_made(emu_shell: Any) -> None:
    """Before: the fix moved self.mean on the failing line (``delta = sample_mean -
    self.mean.to(x.device)``), and the next line, ``self.mean += ...``, failed the same way."""
    d = fails_under_devcheck(emu_shell, STATISTICS, "stats = Statistics(X)", SAME_DEVICE)
    assert [c.expression for c in d.culprits] == ["self.mean"]
    assert d.fix == "setattr(self, prop, torch.zeros(nfeatures, device=x.device))"
    assert (d.fix_lineno, d.fix_insert) == (26, False)
    assert d.fix_scope.startswith("Statistics.update (")
    assert any("self.mean, self.M2 and self.std are made in" in n for n in d.notes)
    assert emu_shell.run_cell(edited(STATISTICS, d)).error_in_exec is None
    assert emu_shell.run_cell("stats = Statistics(X)").error_in_exec is None
    stats, x = emu_shell.user_ns["stats"], emu_shell.user_ns["X"]
    assert stats.mean.device.type == "cuda"
    assert torch.allclose(stats.mean.cpu(), x.mean(0).cpu(), atol=1e-5)


# rish-16/aft-pytorch#6 (aft_pytorch/aft_pytorch.py, AFTLocal.forward): forward rebuilds
# self.wbias with torch.Tensor([...]) on the CPU at every call, and the slice temp_wbias made
# from it is read on two lines. (torch.Tensor takes no device= for CUDA: the move goes after.)
AFT_LOCAL = """import torch, math
from torch import nn
class AFTLocal(nn.Module):
    def __init__(self, max_seqlen, dim, hidden_dim=64, s=256):
        super().__init__()
        self.dim = dim
        self.hidden_dim = hidden_dim
        self.to_q = nn.Linear(dim, hidden_dim)
        self.to_k = nn.Linear(dim, hidden_dim)
        self.to_v = nn.Linear(dim, hidden_dim)
        self.project = nn.Linear(hidden_dim, dim)
        self.wbias = nn.Parameter(torch.Tensor(max_seqlen, max_seqlen))
        self.max_seqlen = max_seqlen
        self.s = s
        nn.init.xavier_uniform_(self.wbias)
    def forward(self, x):
        B, T, _ = x.shape
        Q = self.to_q(x).view(B, T, self.hidden_dim)
        K = self.to_k(x).view(B, T, self.hidden_dim)
        V = self.to_v(x).view(B, T, self.hidden_dim)
        self.wbias = nn.Parameter(torch.Tensor([
            [self.wbias[i][j] if math.fabs(i-j) < self.s else 0 for j in range(self.max_seqlen)]
            for i in range(self.max_seqlen)
            ]))
        temp_wbias = self.wbias[:T, :T].unsqueeze(0) # sequences can still be variable length

        '''
        From the paper
        '''
        Q_sig = torch.sigmoid(Q)
        temp = torch.exp(temp_wbias) @ torch.mul(torch.exp(K), V)
        weighted = temp / (torch.exp(temp_wbias) @ torch.exp(K))
        Yt = torch.mul(Q_sig, weighted)
        Yt = Yt.view(B, T, self.hidden_dim)
        Yt = self.project(Yt)
        return Yt
layer = AFTLocal(max_seqlen=6, dim=8, hidden_dim=16, s=2).cuda()
x = torch.rand(2, 6, 8).cuda()
"""


@pytest.mark.filterwarnings("ignore:Converting a tensor with requires_grad=True")
def test_a_local_read_on_several_lines_is_moved_once_where_made(emu_shell: Any) -> None:
    """Before: the fix moved temp_wbias on the failing line only, and the next line failed on
    temp_wbias again."""
    d = fails_under_devcheck(
        emu_shell,
        AFT_LOCAL,
        "y = layer(x)",
        "Expected all tensors to be on the same device, but got mat2 is on cpu, different from "
        "other tensors on cuda:0 (when checking argument in method wrapper_CUDA_mm)",
    )
    assert [c.expression for c in d.culprits] == ["temp_wbias", "layer.wbias"]
    assert d.fix == "temp_wbias = temp_wbias.to(x.device)"
    assert (d.fix_lineno, d.fix_insert) == (27, True)  # right after the line that makes it
    assert d.fix_scope.startswith("AFTLocal.forward (")
    assert emu_shell.run_cell(edited(AFT_LOCAL, d)).error_in_exec is None
    assert emu_shell.run_cell("y = layer(x)").error_in_exec is None
    assert emu_shell.user_ns["y"].shape == (2, 6, 8)
    assert emu_shell.user_ns["y"].device.type == "cuda"


def test_siblings_made_without_a_factory_are_moved_once_before_the_failing_line(
    emu_shell: Any,
) -> None:
    """mlcolvar#185's loop written here with a constructor that takes no device= for CUDA
    (``torch.Tensor(n).zero_()``): the ``for`` ends its block, so one line before the failing
    one moves the three attributes it made."""
    setup = STATISTICS.replace("torch.zeros(nfeatures)", "torch.Tensor(nfeatures).zero_()")
    d = fails_under_devcheck(emu_shell, setup, "stats = Statistics(X)", SAME_DEVICE)
    assert d.fix == (
        "self.mean, self.M2, self.std = "
        "self.mean.to(x.device), self.M2.to(x.device), self.std.to(x.device)"
    )
    assert (d.fix_lineno, d.fix_insert) == (29, True)  # before ``delta = ...``
    assert emu_shell.run_cell(edited(setup, d)).error_in_exec is None
    assert emu_shell.run_cell("stats = Statistics(X)").error_in_exec is None
    assert emu_shell.user_ns["stats"].std.device.type == "cuda"
