"""Small torch models the CLI tests save as real checkpoints (importable as ``tinynets`` via --model)."""

import torch
from torch import nn


class TinyNet(nn.Module):
    """conv-bn-relu-maxpool-conv-avgpool-linear on (N, C, H, W); any H, W >= 4."""

    def __init__(self, in_channels: int = 3, num_classes: int = 5, width: int = 8):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, width, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU()
        self.pool = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(width, width, 3, padding=1, bias=False)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(width, num_classes)

    def forward(self, x):
        x = self.pool(self.relu(self.bn1(self.conv1(x))))
        x = self.relu(self.conv2(x))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def tiny_net(**kwargs) -> TinyNet:
    """A factory function, as `--model tests.cli.tinynets:tiny_net` names it."""
    return TinyNet(**kwargs)


def seeded(seed: int = 0, **kwargs) -> TinyNet:
    """TinyNet with seeded random weights and non-trivial BatchNorm statistics, in eval mode."""
    torch.manual_seed(seed)
    model = TinyNet(**kwargs)
    with torch.no_grad():
        model.bn1.running_mean.uniform_(-0.5, 0.5)
        model.bn1.running_var.uniform_(0.5, 2.0)
        model.bn1.weight.uniform_(0.5, 1.5)
    return model.eval()


class NeedsUnsupported(nn.Module):
    """Uses ops no converter is expected to support, to exercise the unsupported-ops error."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x):
        y = self.conv(x)
        return torch.igamma(y.abs() + 1, y.abs()) + torch.special.airy_ai(y)


class TwoInputs(nn.Module):
    """Two image inputs of different channel counts, summed after a conv each."""

    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 4, 3, padding=1)
        self.b = nn.Conv2d(1, 4, 3, padding=1)

    def forward(self, x, y):
        return torch.relu(self.a(x) + self.b(y))


class TokenNet(nn.Module):
    """transformers-style keyword inputs: ``input_ids`` ``(N, L)``, optional ``attention_mask`` and
    ``token_type_ids`` (for ``--input-shape token_type_ids=1,7:int64``)."""

    def __init__(self, vocab: int = 20):
        super().__init__()
        self.word = nn.Embedding(vocab, 8)
        self.types = nn.Embedding(2, 8)
        self.out = nn.Linear(8, 3)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None):
        h = self.word(input_ids)
        if token_type_ids is not None:
            h = h + self.types(token_type_ids)
        if attention_mask is not None:
            h = h * attention_mask[..., None]
        return self.out(torch.tanh(h))


def token_net() -> TokenNet:
    torch.manual_seed(0)
    return TokenNet()
