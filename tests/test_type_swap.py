"""A stock config with only the backbone ``type`` changed to ours computes
and trains as the stock module, or says at build time what differs
(issue 51 items 2, 3 and 6)."""

import pytest

from hetdpt_mm.models import HetDPTSwin


def test_an_unknown_swin_argument_names_the_closest():
    with pytest.raises(TypeError) as error:
        HetDPTSwin(**HetDPTSwin.SMALL_ARGS, window_sise=7)
    assert str(error.value) == (
        "HetDPTSwin got unexpected keyword arguments ['window_sise'] "
        '(did you mean `window_size`?)'
    )
