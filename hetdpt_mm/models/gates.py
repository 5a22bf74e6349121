"""The straight-through gates of the search form (docs/method.md section 3):
each removable layer of a gated network sits behind one (attention
sublayers, FFN activations and, under whole-branch removal, whole FFN
branches)."""

import torch
import torch.nn as nn
from timm.layers import Attention, GluMlp, Mlp

#: Names of a gate's parameters (score ``m``) and buffers (gate ``b``).
GATE_SUFFIXES = ('hetdpt_score', 'hetdpt_gate')


class StraightThroughGate:
    """Mixin: a hard 0/1 gate ``b`` with a learnable importance score ``m``.

    The forward pass uses ``b``; the gradient with respect to the gate is
    routed to ``m`` (straight-through).  For ``out = b * f(x) + (1 - b) * x``
    that gradient is ``sum((f(x) - x) * dL/dout)`` (docs/method.md section 3).
    ``m`` starts at 0 and is trained like any weight (without weight decay);
    a closed gate skips ``f`` entirely, so ``m`` then stops changing.
    """

    def init_gate(self) -> None:
        self.hetdpt_score = nn.Parameter(torch.zeros(()))
        self.register_buffer('hetdpt_gate', torch.ones(()))
        self.is_open = True

    def set_open(self, is_open: bool) -> None:
        self.hetdpt_gate.fill_(float(is_open))
        self.is_open = bool(is_open)

    def gate_value(self) -> torch.Tensor:
        score = self.hetdpt_score
        return self.hetdpt_gate + score - score.detach()

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        # Keep the Python flag that forward() reads in step with the buffer.
        self.is_open = bool(self.hetdpt_gate.item() > 0.5)


class GatedResidualBranch(StraightThroughGate):
    """Mixin for an attention sublayer behind a straight-through gate
    (search form), whatever the family's attention computes and takes.

    ``passthrough`` selects what the closed layer leaves: its input (released
    HetDPT models: ``x + LN1(x)``) or nothing.
    """

    passthrough = True

    def forward(self, x, *args, **kwargs):
        if not self.is_open:
            return self.bypass(x)
        return self.blend(super().forward(x, *args, **kwargs), x)

    def bypass(self, x):
        """What the closed layer leaves for input ``x``."""
        return x if self.passthrough else torch.zeros_like(x)

    def blend(self, out, x):
        """The gated output for the open layer's output ``out``."""
        gate = self.gate_value()
        return gate * out + (1 - gate) * self.bypass(x)


class GatedAttention(GatedResidualBranch, Attention):
    """timm Attention behind a straight-through gate (search form)."""

    def __init__(self, *args, **kwargs):
        Attention.__init__(self, *args, **kwargs)
        self.init_gate()


class GatedMlp(GatedResidualBranch, Mlp):
    """A whole FFN branch behind a straight-through gate (search form of
    whole-branch removal): a closed gate leaves nothing, so the block
    leaves ``x``."""

    passthrough = False

    def __init__(self, *args, **kwargs):
        Mlp.__init__(self, *args, **kwargs)
        self.init_gate()


class GatedSwiGLU(GatedResidualBranch, GluMlp):
    """DINOv2-g's packed SwiGLU FFN (timm's ``SwiGLUPacked``) behind a
    straight-through gate, as :class:`GatedMlp`."""

    passthrough = False

    def __init__(self, *args, **kwargs):
        kwargs.update(act_layer=nn.SiLU, gate_last=False)
        GluMlp.__init__(self, *args, **kwargs)
        self.init_gate()


class GatedGELU(StraightThroughGate, nn.GELU):
    """The FFN activation behind a straight-through gate (search form)."""

    def __init__(self):
        nn.GELU.__init__(self)
        self.init_gate()

    def forward(self, x):
        if not self.is_open:
            return x
        gate = self.gate_value()
        return gate * nn.GELU.forward(self, x) + (1 - gate) * x
