"""FFTs (``torch.fft.*``: ATen's ``_fft_r2c`` / ``_fft_c2c`` / ``_fft_c2r``), ``stft`` (through torch's
decomposition and ``Tensor.unfold``) and an FNet block, against torch at two sizes, every ``norm``, odd lengths,
gradients, and the float64 refusal."""

import mlx.core as mx
import numpy as np
import pytest
import torch
import torch.nn as nn

import porter
from tests.converter_check import check_converted

torch.manual_seed(0)


class Transforms(nn.Module):
    def forward(self, x):
        a = torch.fft.rfft(x, dim=-1)
        c = torch.fft.fft2(x, norm="ortho")
        return (a.real, a.imag, torch.fft.irfft(a, n=x.shape[-1]), c.abs(),
                torch.fft.ifft(c, dim=1, norm="forward").real,
                torch.fft.rfftn(x, dim=(1, 2), norm="backward").abs(), torch.fft.irfft2(torch.fft.rfft2(x)),
                torch.fft.hfft(a, norm="ortho"), torch.fft.fftshift(x))


@pytest.mark.parametrize("shape", [(2, 6, 7), (3, 5, 9), (1, 4, 8)])
def test_transforms_match_torch_at_odd_and_even_sizes(shape):
    # .real / .imag of a complex result make torch guard on strides in a form Porter checks as static: one port
    # per size here (FNet and the spectrogram below run one port at two sizes)
    check_converted(Transforms().eval(), torch.randn(*shape))


class Spectrogram(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("window", torch.hann_window(32))

    def forward(self, wave):
        spec = torch.stft(wave, 32, 8, window=self.window, return_complex=True)
        return torch.log1p(spec.abs() ** 2), wave.unfold(-1, 16, 5)


def test_spectrogram_matches_torch_at_two_lengths():
    check_converted(Spectrogram().eval(), torch.randn(2, 400), torch.randn(1, 513))


class FNetBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(16)
        self.ff = nn.Linear(16, 16)

    def forward(self, x):
        return self.ff(self.norm(x + torch.fft.fft(torch.fft.fft(x, dim=-1), dim=-2).real))


def test_fnet_block_matches_torch_and_its_gradients():
    from tests.converters.test_ops_math import _assert_input_grads

    model = FNetBlock().eval()
    ported = check_converted(model, torch.randn(2, 7, 16), torch.randn(1, 4, 16))
    _assert_input_grads(ported, model, (torch.randn(2, 5, 16),))


@pytest.mark.parametrize("fn, dtype", [(lambda x: torch.fft.rfft(x).abs(), "float64"),
                                       (lambda x: torch.fft.irfft(x), "complex128"),
                                       (lambda x: torch.fft.fftn(x).imag, "complex128")])
def test_float64_ffts_are_refused_at_conversion(fn, dtype):
    """MLX's FFTs have no float64/complex128: refused when converting (a port used to convert and then fail on its
    first call, for the inverse transforms with "unknown dtype 'complex128'")."""
    class Double(nn.Module):
        def forward(self, x):
            return fn(x)

    with pytest.raises(NotImplementedError, match=f"a {dtype} FFT"):
        porter.convert(Double().eval(), torch.randn(2, 8, dtype=torch.float64), io_layout="torch")


def test_a_port_cast_to_float64_refuses_its_ffts_when_run():
    class Single(nn.Module):
        def forward(self, x):
            return torch.fft.rfft(x).abs()

    ported = porter.convert(Single().eval(), torch.randn(2, 8), io_layout="torch")
    with pytest.raises(ValueError, match="float64"):
        ported(mx.array(np.zeros((2, 8)), dtype=mx.float64))
