"""porter/_meminfo.py: the one /proc/meminfo reader behind porter.load's weight check (RAM + free swap, 2**62 when
nothing is known) and the checkpoint budget (RAM only, 2**40). Fake meminfo files stand in for odd kernels."""

import os

import pytest

from porter import _meminfo
from porter.checkpoints import budget
from porter.converters import limits

KIB = 1024
FULL = "MemTotal:       24000000 kB\nMemFree:  100 kB\nMemAvailable:   2000000 kB\nSwapTotal: 9 kB\nSwapFree:  300 kB\n"


def _physical():
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


@pytest.fixture
def fake_meminfo(tmp_path, monkeypatch):
    """``fake_meminfo(text)``: both callers read ``text`` as /proc/meminfo (``None``: the file is missing)."""

    def use(text):
        path = tmp_path / "meminfo"
        if text is not None:
            path.write_text(text)
        monkeypatch.setattr(_meminfo, "MEMINFO", str(path))

    return use


# (meminfo text, limits.available_memory (swap added), budget.available_bytes (RAM only)); "phys": physical memory
CASES = [
    (FULL, (2000000 + 300) * KIB, 2000000 * KIB),
    ("SwapFree: 300 kB\nMemAvailable: 5 kB\n", 305 * KIB, 5 * KIB),  # order does not matter
    ("MemAvailable: 7 kB\n", 7 * KIB, 7 * KIB),  # no swap line: no swap
    ("MemTotal: 8 kB\nSwapFree: 300 kB\n", "phys", "phys"),  # old kernel without MemAvailable
    ("MemAvailable: lots kB\nSwapFree: 300 kB\n", "phys", "phys"),  # unparsable
    ("MemAvailable:\n", "phys", "phys"),  # no number
    ("MemAvailable: 7 kB\nSwapFree: many\n", "phys", 7 * KIB),  # a bad swap line matters only where swap is read
    ("", "phys", "phys"),
    (None, "phys", "phys"),  # no /proc (macOS)
]


@pytest.mark.parametrize("text, with_swap, ram_only", CASES)
def test_both_callers_read_the_same_file(fake_meminfo, text, with_swap, ram_only):
    fake_meminfo(text)
    assert limits.available_memory() == (_physical() if with_swap == "phys" else with_swap)
    assert budget.available_bytes() == (_physical() if ram_only == "phys" else ram_only)


def test_unknown_memory_gives_each_callers_own_default(fake_meminfo, monkeypatch):
    fake_meminfo(None)

    def no_sysconf(name):
        raise ValueError(f"unrecognized configuration name {name!r}")

    monkeypatch.setattr(os, "sysconf", no_sysconf)
    assert limits.available_memory() == 1 << 62
    assert budget.available_bytes() == 1 << 40
    assert _meminfo.available_memory(swap=True, unknown=123) == 123


@pytest.mark.skipif(not os.path.exists("/proc/meminfo"), reason="Linux only: the real /proc/meminfo")
def test_the_real_meminfo():
    fields = {}
    with open("/proc/meminfo") as fh:
        for line in fh:
            key, _, rest = line.partition(":")
            fields[key] = int(rest.split()[0]) * KIB
    # memory moves between two reads: compare within 256 MiB
    assert abs(budget.available_bytes() - fields["MemAvailable"]) < 1 << 28
    assert abs(limits.available_memory() - fields["MemAvailable"] - fields.get("SwapFree", 0)) < 1 << 28
