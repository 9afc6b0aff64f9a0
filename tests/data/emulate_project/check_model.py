import torch
from model import DEVICE, build, predict


def test_predict_gives_probabilities():
    probs = predict(build(), torch.randn(4, 8))
    assert probs.shape == (4, 3)
    assert torch.allclose(probs.sum(-1).cpu(), torch.ones(4))


def test_model_follows_device():
    assert next(build().parameters()).device.type == DEVICE.type
