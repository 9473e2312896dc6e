"""The one-hot encoder of token tasks: the values of ``F.one_hot(x).float()``, alone and
inside an ensemble's vmap."""

import torch
from torch.func import vmap

from rnnlab.model import OneHot


def test_one_hot_encoder_equals_torch_one_hot():
    x = torch.randint(0, 7, (3, 4, 5), generator=torch.Generator().manual_seed(0))
    enc = OneHot(7)
    ref = torch.nn.functional.one_hot(x, 7).float()
    assert enc(x).dtype == torch.float32 and torch.equal(enc(x), ref)
    assert torch.equal(vmap(enc)(x), ref)
