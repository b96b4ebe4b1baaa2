"""Error-case oracle: torch must reject the call, and Porter must reject it with torch's wording.

Used by the layer tests next to :func:`helpers.check_against_torch`, so that an error test also runs torch and
cannot drift from it: the expected text is read from torch's exception, not copied into the test.
"""

from __future__ import annotations

from typing import Callable, Optional

import pytest


def torch_error(torch_call: Callable) -> BaseException:
    """Run ``torch_call`` and return the exception it raises (the test fails if torch accepts the call)."""
    try:
        torch_call()
    except Exception as err:  # noqa: BLE001 - any torch error type is the oracle
        return err
    raise AssertionError("torch accepted the call, so it is not an error case")


def check_error_against_torch(
    torch_call: Callable,
    porter_call: Callable,
    *,
    match: Optional[str] = None,
    porter_type: type = (ValueError, TypeError),
    layer: Optional[str] = None,
) -> str:
    """Both calls must fail; Porter with ``ValueError``/``TypeError`` whose message contains torch's.

    ``match``: compare only this part of torch's message (it must occur in torch's message too), for messages
    that print shapes in torch's layout. ``layer``: the name Porter's message must start with (``[AvgPool2d]``).
    Returns Porter's message.
    """
    expected = str(torch_error(torch_call)).split("\n")[0]
    if match is not None:
        assert match in expected, f"the match text {match!r} is not in torch's message {expected!r}"
        expected = match
    with pytest.raises(porter_type) as info:
        porter_call()
    got = str(info.value)
    assert expected in got, f"porter's message {got!r} does not contain torch's {expected!r}"
    if layer is not None:
        assert got.startswith(f"[{layer}]"), f"porter's message {got!r} does not name the layer {layer!r}"
    return got
