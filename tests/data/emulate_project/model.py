"""A small project with the device bug CPU-only CI never sees: a tensor made without device=.

The shape of many real reports, e.g. projects asking how to test GPU placement in CPU-only CI
(https://github.com/GFNOrg/torchgfn/issues/33, https://github.com/TorchJD/torchjd/issues/97):
everything follows DEVICE, except one tensor built inside a helper.
"""

import torch
from torch import nn

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


class Classifier(nn.Module):
    def __init__(self, features: int = 8, classes: int = 3) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(features, 16), nn.ReLU(), nn.Linear(16, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def build() -> Classifier:
    return Classifier().to(DEVICE)


def predict(model: Classifier, features: torch.Tensor) -> torch.Tensor:
    features = features.to(DEVICE)
    keep = torch.ones(features.shape[1])  # the bug: made on the CPU
    return model(features * keep).softmax(-1)
