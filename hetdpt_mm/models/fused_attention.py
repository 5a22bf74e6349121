"""mmdet's DETR with its transformer attention on PyTorch's fused kernels.

mmcv's ``MultiheadAttention`` calls ``nn.MultiheadAttention`` with its
default ``need_weights=True`` and then keeps only the output, so every
(heads x queries x keys) attention map is materialised and softmaxed on its
own.  At DETR's 800x1216 test size the encoder attends over 3,800 tokens and
those maps take about a fifth of the dense model's CPU time, time that no
backbone pruning can remove.  Asking for no weights lets PyTorch run
``scaled_dot_product_attention``; parameters, state dict and outputs (to
float tolerance) stay those of mmdet's DETR, so checkpoints move freely
between ``type='DETR'`` and ``type='FusedAttentionDETR'``.
"""

import torch.nn as nn
from mmcv.cnn.bricks.transformer import MultiheadAttention
from mmdet.models.detectors import DETR


class FusedMultiheadAttention(nn.MultiheadAttention):
    """``nn.MultiheadAttention`` that returns attention weights only when
    asked (``need_weights=False`` by default); same parameters."""

    def forward(
        self,
        query,
        key,
        value,
        key_padding_mask=None,
        need_weights=False,
        attn_mask=None,
        average_attn_weights=True,
        is_causal=False,
    ):
        return super().forward(
            query,
            key,
            value,
            key_padding_mask=key_padding_mask,
            need_weights=need_weights,
            attn_mask=attn_mask,
            average_attn_weights=average_attn_weights,
            is_causal=is_causal,
        )


def use_fused_attention(model: nn.Module) -> None:
    """Switch the ``nn.MultiheadAttention`` inside every mmcv
    ``MultiheadAttention`` of ``model`` (which discards the weights) to
    :class:`FusedMultiheadAttention`, in place."""
    for module in model.modules():
        if (
            isinstance(module, MultiheadAttention)
            and type(module.attn) is nn.MultiheadAttention
        ):
            # A subclass without state of its own: only the forward changes.
            module.attn.__class__ = FusedMultiheadAttention


class FusedAttentionDETR(DETR):
    """mmdet's :class:`DETR` whose encoder and decoder attention run fused
    (see the module docstring); a drop-in ``type`` for any DETR config."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        use_fused_attention(self)
