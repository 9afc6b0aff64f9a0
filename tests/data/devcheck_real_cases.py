# ruff: noqa: E501 - the users' code keeps its own long lines
"""Device bugs from public reports, shrunk to a few lines with the users' own names.

Each case runs on a CPU-only machine: ``DEVICE = torch.device("cuda")`` on the emulated GPU
(``%emulate_cuda on``: CUDA's own device-mismatch messages, values computed on the CPU),
and the no-CUDA cases (kinds ``no_cuda``, ``deserialize_device``) without it, on this
build's own messages. A case is *fully solved* when ``%%devcheck`` names the right kind and
culprit and its one-line fix, applied where the tool says, makes the cell run.

Fields: ``setup`` runs first (as a cell); ``helper`` is a ``(module file, source)`` written to a
temporary directory on ``sys.path`` (``library=True``: under a ``site-packages`` folder, so it
counts as library code); ``cell`` is the failing cell's body (``%%devcheck`` is added);
``culprit`` is the expression the tool must name first (``None``: no culprit expected).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

PRE = """import torch, torch.nn as nn, numpy as np
import torch.nn.functional as F
DEVICE = torch.device("cuda")
"""


@dataclass(frozen=True)
class Case:
    name: str
    url: str
    setup: str
    cell: str
    kind: str
    culprit: Optional[str]
    helper: Optional[tuple[str, str]] = None
    library: bool = False


CASES = [
    # --- errors raised in the user's own forward / helper -----------------------------
    Case(
        "gru_h0_in_forward",
        "https://github.com/Lightning-AI/pytorch-lightning/issues/3738",
        PRE
        + """class RNN(nn.Module):
    def __init__(self, input_size, hidden_size, n_layers):
        super().__init__()
        self.n_layers, self.hidden_size = n_layers, hidden_size
        self.gru = nn.GRU(input_size, hidden_size, n_layers, batch_first=True)
    def forward(self, batch_of_letter):
        hidden = torch.zeros(self.n_layers, batch_of_letter.size(0), self.hidden_size)
        out, hidden = self.gru(batch_of_letter, hidden)
        return out
model = RNN(8, 16, 2).to(DEVICE)
letters = torch.randn(4, 5, 8, device=DEVICE)
""",
        "out = model(letters)",
        "device_mismatch",
        "hidden",
    ),
    Case(
        "lstm_hidden_made_in_cell",
        "https://github.com/Lightning-AI/pytorch-lightning/issues/3738",
        PRE
        + """lstm = nn.LSTM(8, 16, 1).to(DEVICE)
seq = torch.randn(5, 4, 8, device=DEVICE)
""",
        "hidden = (torch.zeros(1, 4, 16), torch.zeros(1, 4, 16))\nout, hidden = lstm(seq, hidden)",
        "device_mismatch",
        "hidden",
    ),
    Case(
        "positional_encoding_plain_attribute",
        "https://discuss.pytorch.org/t/what-does-register-buffer-do/121091",
        PRE
        + """class PositionalEncoding(nn.Module):
    def __init__(self, d_model, max_len=64):
        super().__init__()
        pe = torch.zeros(max_len, d_model)
        self.pe = pe.unsqueeze(0)   # not register_buffer: .to() leaves it behind
    def forward(self, x):
        x = x + self.pe[:, :x.size(1)]
        return x
class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(8, 8)
        self.pos_enc = PositionalEncoding(8)
    def forward(self, x):
        return self.pos_enc(self.embed(x))
model = Encoder().to(DEVICE)
src = torch.randn(2, 10, 8, device=DEVICE)
""",
        "out = model(src)",
        "device_mismatch",
        "model.pos_enc.pe",
    ),
    Case(
        "cached_penc_local_alias",
        "https://github.com/tatp22/multidim-positional-encoding/pull/19",
        PRE
        + """class PositionalEncoding1D(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.channels = channels
        self.cached_penc = None
    def forward(self, tensor):
        if self.cached_penc is not None and self.cached_penc.shape == tensor.shape:
            penc = self.cached_penc
            return tensor + penc
        self.cached_penc = torch.zeros(tensor.shape)
        return tensor + self.cached_penc.to(tensor.device)
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(6, 6)
        self.pos_enc = PositionalEncoding1D(6)
    def forward(self, x):
        return self.pos_enc(self.lin(x))
model = Net()
x = torch.randn(2, 3, 6)
model(x)             # first call on the CPU fills the cache
model.to(DEVICE)
x = x.to(DEVICE)
""",
        "y = model(x)",
        "device_mismatch",
        "model.pos_enc.cached_penc",
    ),
    Case(
        "criterions_plain_list",
        "https://github.com/Lightning-AI/pytorch-lightning/issues/2984",
        PRE
        + """class JJG_Transformer(nn.Module):
    def __init__(self, n_positions):
        super().__init__()
        self.proj = nn.Linear(8, 94)
        self.criterions = []
        for _ in range(n_positions):
            weight = torch.ones(94)
            self.criterions.append(torch.nn.CrossEntropyLoss(weight=weight))
    def validation_step(self, batch, batch_idx):
        batch_im, batch_true_value_NT = batch
        out_NTA = self.proj(batch_im)
        loss0 = self.criterions[0](out_NTA[:, 0, :], batch_true_value_NT[:, 0])
        loss1 = self.criterions[1](out_NTA[:, 1, :], batch_true_value_NT[:, 1])
        return loss0 + loss1
model = JJG_Transformer(2).to(DEVICE)
batch = (torch.randn(3, 2, 8, device=DEVICE), torch.zeros(3, 2, dtype=torch.long, device=DEVICE))
""",
        "loss = model.validation_step(batch, 0)",
        "device_mismatch",
        "model.criterions",
    ),
    Case(
        "conv1d_plain_list",
        "https://github.com/pytorch/pytorch/issues/1053",
        PRE
        + """WORD_VEC_SIZE = 8
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1d = [nn.Linear(WORD_VEC_SIZE, 1), nn.Linear(WORD_VEC_SIZE, 1), nn.Linear(WORD_VEC_SIZE, 1)]
        self.out = nn.Linear(3, 2)
    def forward(self, x):
        feats = [conv(x) for conv in self.conv1d]
        return self.out(torch.cat(feats, dim=1))
a = Net().to(DEVICE)
words = torch.randn(4, WORD_VEC_SIZE, device=DEVICE)
""",
        "logits = a(words)",
        "device_mismatch",
        "a.conv1d",
    ),
    Case(
        "params_plain_list_loop_variable",
        "https://github.com/pytorch/pytorch/issues/632",
        PRE
        + """class Gate(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("bias", torch.zeros(4))
        self.params = [torch.ones(4), torch.ones(4)]   # beside a registered buffer
    def forward(self, x):
        x = x + self.bias
        for p in self.params:
            x = x * p
        return x
gate = Gate().to(DEVICE)
h = torch.randn(2, 4, device=DEVICE)
""",
        "y = gate(h)",
        "device_mismatch",
        "gate.params",
    ),
    Case(
        "layers_plain_list_hids",
        "https://github.com/pytorch/pytorch/issues/715",
        PRE
        + """class SNLINet(nn.Module):
    def __init__(self, n_layers, n_hid):
        super().__init__()
        self.hids = []
        for li in range(n_layers):
            self.hids.append(nn.Linear(n_hid, n_hid))
        self.classifier = nn.Linear(n_hid, 3)
    def forward(self, x):
        for layer in self.hids:
            x = torch.relu(layer(x))
        return self.classifier(x)
net = SNLINet(2, 16).to(DEVICE)
pair = torch.randn(5, 16, device=DEVICE)
""",
        "scores = net(pair)",
        "device_mismatch",
        "net.hids",
    ),
    Case(
        "causal_mask_created_in_forward",
        "https://github.com/rasbt/LLMs-from-scratch/issues/279",
        PRE
        + """class CausalAttention(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out, bias=False)
        self.W_key = nn.Linear(d_in, d_out, bias=False)
    def forward(self, x):
        b, num_tokens, d_in = x.shape
        queries, keys = self.W_query(x), self.W_key(x)
        attn_scores = queries @ keys.transpose(1, 2)
        mask = torch.triu(torch.ones(num_tokens, num_tokens), diagonal=1).bool()
        attn_scores = attn_scores.masked_fill(mask, -torch.inf)
        return torch.softmax(attn_scores, dim=-1)
ca = CausalAttention(6, 4).to(DEVICE)
inputs = torch.randn(2, 5, 6, device=DEVICE)
""",
        "context_vecs = ca(inputs)",
        "device_mismatch",
        "mask",
    ),
    Case(
        "causal_mask_plain_attribute",
        "https://github.com/rasbt/LLMs-from-scratch/issues/279",
        PRE
        + """class MultiHeadAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out, bias=False)
        self.mask = torch.triu(torch.ones(context_length, context_length), diagonal=1)
    def forward(self, x):
        b, num_tokens, d_in = x.shape
        q = self.W_query(x)
        attn_scores = q @ q.transpose(1, 2)
        attn_scores = attn_scores.masked_fill(self.mask.bool()[:num_tokens, :num_tokens], -torch.inf)
        return attn_scores
class GPTModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.att = MultiHeadAttention(6, 6, 8)
    def forward(self, in_idx):
        return self.att(in_idx)
model = GPTModel().to(DEVICE)
batch = torch.randn(2, 4, 6, device=DEVICE)
""",
        "logits = model(batch)",
        "device_mismatch",
        "model.att.mask",
    ),
    Case(
        "stft_window_made_in_forward",
        "https://github.com/usc-sail/gard-adversarial-speaker-id/issues/2",
        PRE
        + """class hp:
    n_fft, hop_length, win_length = 64, 16, 64
class Preprocessor(nn.Module):
    def forward(self, x):
        x = torch.stft(x, hp.n_fft, hp.hop_length, hp.win_length, window=torch.hann_window(hp.win_length), return_complex=True)
        return x.abs()
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.prep = Preprocessor()
    def encode(self, x):
        x = self.prep(x.squeeze(1))
        return x
model = Model().to(DEVICE)
inputs = torch.randn(2, 1, 400, device=DEVICE)
""",
        "real_feature = model.encode(inputs)",
        "device_mismatch",
        "torch.hann_window(hp.win_length)",
    ),
    Case(
        "stft_window_global_input_on_cpu",
        "https://github.com/2noise/ChatTTS/issues/603",
        PRE
        + """window = torch.hann_window(1024, device=DEVICE)
def sample_audio_speaker(wav):
    spec = torch.stft(wav, 1024, 256, window=window, return_complex=True)
    return spec.abs().mean()
""",
        "wav = torch.from_numpy(np.zeros(16000, dtype=np.float32))\nspk_emb = sample_audio_speaker(wav)",
        "device_mismatch",
        "wav",
    ),
    Case(
        # Two tensors of the cell off the device: a fix for the first alone fails on the
        # second, so the one line moves both.
        "njode_cat_of_time_features",
        "https://github.com/HerreraKrachTeichmann/NJODE/issues/14",
        PRE
        + """class ODEFunc(nn.Module):
    def __init__(self, input_size, hidden_size):
        super().__init__()
        self.f = nn.Linear(input_size + hidden_size + 2, hidden_size)
    def forward(self, x, h, tau, tdiff):
        input_f = torch.cat([torch.tanh(x), torch.tanh(h), tau, tdiff], dim=1)
        return self.f(input_f)
odefunc = ODEFunc(3, 5).to(DEVICE)
x = torch.randn(4, 3, device=DEVICE)
h = torch.randn(4, 5, device=DEVICE)
""",
        "tau = torch.tensor([[0.5]]).repeat(4, 1)\ntdiff = torch.tensor([[0.1]]).repeat(4, 1)\n"
        "out = odefunc(x, h, tau, tdiff)",
        "device_mismatch",
        "tau",
    ),
    Case(
        "pack_padded_lengths_on_device",
        "https://github.com/pytorch/pytorch/issues/43227",
        PRE
        + """from torch.nn.utils.rnn import pack_padded_sequence
embedded = torch.randn(3, 7, 8, device=DEVICE)
""",
        "input_lengths = torch.tensor([7, 5, 2]).to(DEVICE)\npacked = pack_padded_sequence(embedded, input_lengths, batch_first=True)",
        "device_mismatch",
        "input_lengths",
    ),
    Case(
        "pack_padded_in_encoder_forward",
        "https://github.com/clovaai/ClovaCall/pull/15",
        PRE
        + """class EncoderRNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(8, 8, batch_first=True)
    def forward(self, input_var, input_lengths):
        x = nn.utils.rnn.pack_padded_sequence(input_var, input_lengths, batch_first=True)
        return x
encoder = EncoderRNN().to(DEVICE)
feats = torch.randn(3, 9, 8, device=DEVICE)
output_lengths = torch.tensor([9, 6, 3], device=DEVICE)
""",
        "packed = encoder(feats, output_lengths)",
        "device_mismatch",
        "output_lengths",
    ),
    # --- inputs that never reached the device -----------------------------------------
    Case(
        "loop_over_plain_list_of_batches",
        "https://github.com/Comfy-Org/ComfyUI/issues/2363",
        PRE
        + """model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3)).to(DEVICE)
criterion = nn.CrossEntropyLoss()
loader = [(torch.randn(5, 4), torch.zeros(5, dtype=torch.long)) for _ in range(2)]
""",
        "for inputs, labels in loader:\n    outputs = model(inputs)\n    loss = criterion(outputs, labels)",
        "device_mismatch",
        "inputs",
    ),
    Case(
        "ce_weight_left_on_cpu",
        "https://github.com/pytorch/pytorch/issues/122757",
        PRE
        + """model_output = torch.randn(10, 5, device=DEVICE)
labels = torch.randint(0, 5, (10,), device=DEVICE)
weights = torch.randn(5)
loss_fn = torch.nn.CrossEntropyLoss(weight=weights)
""",
        "loss = loss_fn(input=model_output, target=labels)",
        "device_mismatch",
        "loss_fn",
    ),
    Case(
        "pyg_subgraph_node_mask",
        "https://github.com/pyg-team/pytorch_geometric/issues/8817",
        PRE
        + """edge_index = torch.tensor([[0, 1, 2], [1, 2, 3]], device=DEVICE)
x = torch.randn(4, 3, device=DEVICE)
""",
        "node_mask = torch.tensor([True, True, False, True])\nedge_mask = x[edge_index[0]].sum(1) * node_mask[edge_index[1]]",
        "device_mismatch",
        "node_mask",
    ),
    Case(
        "gcn_edge_index_of_data_object",
        "https://github.com/snap-stanford/ogb/issues/68",
        PRE
        + """class Data:
    def __init__(self, x, edge_index):
        self.x, self.edge_index = x, edge_index
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
    def forward(self, x, edge_index):
        x = self.lin(x)
        agg = torch.zeros_like(x).index_add_(0, edge_index[1], x[edge_index[0]])
        return agg
data = Data(torch.randn(4, 3), torch.tensor([[0, 1, 2], [1, 2, 3]]))
model = Net().to(DEVICE)
""",
        "out = model(data.x.to(DEVICE), data.edge_index)",
        "device_mismatch",
        "data.edge_index",
    ),
    Case(
        "generate_with_batch_encoding",
        "https://github.com/huggingface/transformers/issues/27103",
        PRE
        + """import minilm
tokenizer = minilm.AutoTokenizer()
model = minilm.AutoModelForSeq2SeqLM().to(DEVICE)
""",
        'inputs = tokenizer(["Hello there", "General Kenobi"], return_tensors="pt")\ntranslated = model.generate(**inputs)',
        "device_mismatch",
        "inputs",
        helper=(
            "minilm.py",
            """import torch, torch.nn as nn
from collections import UserDict
class BatchEncoding(UserDict):
    def to(self, device):
        self.data = {k: v.to(device) for k, v in self.data.items()}
        return self
class AutoTokenizer:
    def __call__(self, texts, return_tensors=None):
        ids = torch.ones(len(texts), 4, dtype=torch.long)
        return BatchEncoding({"input_ids": ids, "attention_mask": torch.ones(len(texts), 4)})
class AutoModelForSeq2SeqLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 6)
    def generate(self, input_ids, attention_mask=None):
        hidden = self.embed(input_ids)
        return hidden * attention_mask[..., None]
""",
        ),
        library=True,
    ),
    Case(
        "train_step_in_helper_file",
        "https://github.com/pytorch/examples/issues/435",
        PRE
        + """import trainlib
model = nn.Linear(4, 2).to(DEVICE)
criterion = nn.MSELoss()
xb, yb = torch.randn(8, 4), torch.randn(8, 2)
""",
        "loss = trainlib.train_step(model, (xb, yb), criterion)",
        "device_mismatch",
        "xb",
        helper=(
            "trainlib.py",
            """def train_step(model, batch, criterion):
    x, y = batch
    out = model(x)
    return criterion(out, y)
""",
        ),
    ),
    Case(
        "gan_noise_in_helper_file",
        "https://github.com/pytorch/examples/issues/435",
        PRE
        + """import ganlib
netG = nn.Sequential(nn.Linear(16, 32), nn.Tanh()).to(DEVICE)
real = torch.randn(8, 32, device=DEVICE)
""",
        "fake = ganlib.generate_fake(netG, real)",
        "device_mismatch",
        "noise",
        helper=(
            "ganlib.py",
            """import torch
def generate_fake(netG, real):
    b_size = real.size(0)
    noise = torch.randn(b_size, 16)
    fake = netG(noise)
    return fake
""",
        ),
    ),
    Case(
        "device_map_split_model_custom_head",
        "https://github.com/huggingface/accelerate/issues/1613",
        PRE
        + """class Backbone(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer0 = nn.Linear(4, 4)
        self.layer1 = nn.Linear(4, 4).to(DEVICE)   # split on purpose, as device_map does
        self.hf_device_map = {"layer0": "cpu", "layer1": "cuda:0"}
    def forward(self, x):
        h = self.layer0(x)
        return self.layer1(h.to(self.layer1.weight.device))
class Classifier(nn.Module):
    def __init__(self, backbone):
        super().__init__()
        self.backbone = backbone
        self.score = nn.Linear(4, 2)
    def forward(self, x):
        hidden_states = self.backbone(x)
        return self.score(hidden_states)
clf = Classifier(Backbone())
x = torch.randn(3, 4)
""",
        "logits = clf(x)",
        "device_mismatch",
        "clf.score",
    ),
    # --- NumPy over anonymous tensors ---------------------------------------------------
    Case(
        "np_sum_over_list_comprehension",
        "https://github.com/swz30/MPRNet/issues/91",
        PRE
        + """criterion_char = nn.L1Loss()
restored = [torch.randn(2, 3, device=DEVICE) for _ in range(3)]
target = torch.randn(2, 3, device=DEVICE)
""",
        "loss_char = np.sum([criterion_char(restored[j], target) for j in range(len(restored))])",
        "numpy_device",
        "criterion_char(restored[j], target)",
    ),
    Case(
        "np_sum_of_loss_list",
        "https://github.com/HCIILAB/Scene-Text-Recognition-Recommendations/issues/2",
        PRE
        + """losses = [torch.tensor(0.5, device=DEVICE) for _ in range(4)]
batch_size = 2
""",
        "losses = np.sum(losses) / (1.0 * 3 * batch_size)",
        "numpy_device",
        "losses",
    ),
    Case(
        "np_array_of_loss_arr",
        "https://github.com/TaoShuchang/G-NIA/issues/2",
        PRE + "loss_arr = [torch.tensor(1.0, device=DEVICE), torch.tensor(2.0, device=DEVICE)]\n",
        "train_loss = np.array(loss_arr).sum()",
        "numpy_device",
        "loss_arr",
    ),
    Case(
        "np_array_of_metric_tensors",
        "https://github.com/wengong-jin/hgraph2graph/issues/40",
        PRE
        + """meters = np.zeros(3)
kl_div = 0.1
wacc, iacc = torch.tensor(0.5, device=DEVICE), torch.tensor(0.7, device=DEVICE)
""",
        "meters = meters + np.array([kl_div, wacc * 100, iacc * 100])",
        "numpy_device",
        "wacc",
    ),
    # --- dtype of variables the cell creates --------------------------------------------
    Case(
        "dtype_double_from_numpy",
        "https://openillumi.com/en/en-fix-mat1-mat2-dtype-error-pytorch",
        PRE + "model = nn.Linear(2, 1)\nvalues = np.random.rand(6, 2)\n",
        "X = torch.tensor(values)\ny_pred = model(X)",
        "dtype_mismatch",
        "X",
    ),
    Case(
        "dtype_bce_long_target",
        "https://github.com/PacktPublishing/Mastering-PyTorch/issues/4",
        PRE + "loss_func = nn.BCEWithLogitsLoss()\npreds = torch.randn(3)\n",
        "sentiment = torch.empty(3).random_(2).long()\nloss = loss_func(preds, sentiment)",
        "dtype_mismatch",
        "sentiment",
    ),
    Case(
        "dtype_int_class_target",
        "https://github.com/skorch-dev/skorch/issues/813",
        PRE
        + "net = nn.Linear(4, 3)\nX_train = torch.randn(5, 4)\ny_np = np.array([0, 1, 2, 1, 0], dtype=np.int32)\n",
        "y_train = torch.from_numpy(y_np)\nloss = F.cross_entropy(net(X_train), y_train)",
        "dtype_mismatch",
        "y_train",
    ),
    # --- no CUDA in this build ------------------------------------------------------------
    Case(
        "cuda_set_device_on_cpu_build",
        "https://github.com/insilicomedicine/GENTRL/issues/36",
        PRE,
        "torch.cuda.set_device(1)",
        "no_cuda",
        None,
    ),
    Case(
        "type_cuda_float_tensor_on_cpu_build",
        "https://github.com/tamarott/SinGAN/issues/127",
        PRE + "x = torch.from_numpy(np.zeros((1, 3, 8, 8))).float()\n",
        "x = x.type(torch.cuda.FloatTensor)",
        "no_cuda",
        None,
    ),
    Case(
        "set_default_tensor_type_cuda",
        "https://github.com/yenchenlin/nerf-pytorch/issues/48",
        PRE,
        "torch.set_default_tensor_type('torch.cuda.FloatTensor')",
        "no_cuda",
        None,
    ),
    Case(
        "module_cuda_on_cpu_machine",
        "https://github.com/svip-lab/GazeFollowing/issues/7",
        PRE + "net = nn.Conv2d(3, 8, 3)\n",
        "net.cuda()",
        "no_cuda",
        None,
    ),
    Case(
        "torch_load_cuda_checkpoint_in_helper",
        "https://github.com/keunsoo-ko/CMT/issues/1",
        PRE
        + """import ckptutils, os, tempfile
import torch.serialization as ser
tagging = {"on": True}  # tag the storages as saved on cuda:0, as a GPU machine does
# The tagger stays registered in torch for the whole process: it holds its own switch (no
# name of this namespace), so it tags nothing once the checkpoint is written.
ser.register_package(-(id(tagging) % 10**9), lambda obj, on=tagging: "cuda:0" if on["on"] else None, lambda o, loc: None)
ckpt_path = os.path.join(tempfile.mkdtemp(), "Place2.pth")
try:
    torch.save({"w": torch.ones(2)}, ckpt_path)
finally:
    tagging["on"] = False
""",
        "checkpoint = ckptutils.load_checkpoint(ckpt_path)",
        "deserialize_device",
        None,
        helper=(
            "ckptutils.py",
            """import torch
def _load(checkpoint_path):
    checkpoint = torch.load(checkpoint_path)
    return checkpoint
def load_checkpoint(path):
    return _load(path)
""",
        ),
    ),
]
