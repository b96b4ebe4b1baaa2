"""Helpers of the Hub-folder tests (tests/api/test_hub_folder.py, tests/security/test_shard_attacks.py): a small
model with every parameter re-randomised, a populated Hugging Face cache folder built from a saved artifact, and
safetensors header surgery. Everything is built at test time."""

import hashlib
import json
import os
import shutil
import struct

import torch
from torch import nn
import torch.nn.functional as F


class HubNet(nn.Module):
    """Conv (3x3 kernel: MLX and torch layouts differ), batch norm, depthwise conv, linear: several tensors of
    different sizes, so a small shard limit gives several shards."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.dw = nn.Conv2d(8, 8, 3, groups=8)
        self.fc = nn.Linear(8, 5)

    def forward(self, x):
        y = F.relu(self.bn(self.conv(x)))
        y = self.dw(y)
        return self.fc(y.mean((2, 3)))


def hub_net() -> HubNet:
    """Eval mode; batch-norm statistics and affine parameters and every bias away from 0 and 1."""
    torch.manual_seed(0)
    model = HubNet().eval()
    with torch.no_grad():
        model.bn.running_mean.uniform_(-1, 1)
        model.bn.running_var.uniform_(0.5, 2)
        model.bn.weight.uniform_(0.5, 1.5)
        for b in (model.bn.bias, model.conv.bias, model.dw.bias, model.fc.bias):
            b.uniform_(-1, 1)
    return model


def read_header(path):
    """(header dict with ``__metadata__``, data bytes) of a safetensors file."""
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8:8 + n]), data[8 + n:]


def write_header(path, header, body):
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw + body)


def set_metadata(path, metadata):
    """Rewrite the ``__metadata__`` of a safetensors file (``None`` removes it); tensors untouched."""
    header, body = read_header(path)
    header.pop("__metadata__", None)
    if metadata is not None:
        header["__metadata__"] = metadata
    write_header(path, header, body)


def populate_cache(cache_dir, repo_id, folder, commit="0123456789abcdef0123456789abcdef01234567"):
    """Lay ``folder``'s files out as huggingface_hub's cache holds a downloaded repo: content-addressed blobs,
    ``snapshots/<commit>/<file>`` symlinks to them, ``refs/main`` naming the commit. Returns the commit."""
    repo = os.path.join(cache_dir, "models--" + repo_id.replace("/", "--"))
    snapshot = os.path.join(repo, "snapshots", commit)
    os.makedirs(os.path.join(repo, "blobs"), exist_ok=True)
    os.makedirs(snapshot, exist_ok=True)
    os.makedirs(os.path.join(repo, "refs"), exist_ok=True)
    for name in sorted(os.listdir(folder)):
        data = open(os.path.join(folder, name), "rb").read()
        blob = hashlib.sha256(data).hexdigest()
        shutil.copyfile(os.path.join(folder, name), os.path.join(repo, "blobs", blob))
        os.symlink(os.path.join("..", "..", "blobs", blob), os.path.join(snapshot, name))
    with open(os.path.join(repo, "refs", "main"), "w") as f:
        f.write(commit)
    return commit
