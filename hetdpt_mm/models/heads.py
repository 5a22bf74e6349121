"""``init_cfg=dict(type='PretrainedHeads', checkpoint=...)``: a classifier
head starts from the heads of a checkpoint (docs/method.md section 4: the
authors fine-tune the official classifier, heads included).

mmengine's ``Pretrained`` loads keys as they are named, so the heads of a
timm / DeiT / authors' file (``head``, ``head_dist``) never reach
mmpretrain's ``DeiTClsHead`` (``layers.head``, ``layers.head_dist``).  This
initializer reads the heads of any layout
(:func:`~hetdpt_mm.checkpoint.reader.read_classifier_heads`) and copies
them into the linears of the head module it initialises: ``DeiTClsHead``,
``VisionTransformerClsHead``, ``LinearClsHead`` or a bare ``nn.Linear``.
"""

import logging
from typing import Dict

import torch
import torch.nn as nn
from mmengine.logging import print_log
from mmengine.registry import WEIGHT_INITIALIZERS

from ..checkpoint.reader import CLASS_HEAD, DIST_HEAD, read_classifier_heads
from ..errors import CheckpointError


def head_linears(module: nn.Module) -> Dict[str, nn.Linear]:
    """The linears of a classifier head by canonical name (``'head'``,
    ``'head_dist'``)."""
    layers = getattr(module, 'layers', None)
    if isinstance(layers, nn.Module) and isinstance(
        getattr(layers, CLASS_HEAD, None), nn.Linear
    ):
        # VisionTransformerClsHead / DeiTClsHead
        return {
            name: getattr(layers, name)
            for name in (CLASS_HEAD, DIST_HEAD)
            if isinstance(getattr(layers, name, None), nn.Linear)
        }
    if isinstance(getattr(module, 'fc', None), nn.Linear):
        return {CLASS_HEAD: module.fc}  # LinearClsHead
    if isinstance(module, nn.Linear):
        return {CLASS_HEAD: module}
    raise TypeError(
        f'PretrainedHeads initialises DeiTClsHead, VisionTransformerClsHead, '
        f'LinearClsHead or nn.Linear, not {type(module).__name__}'
    )


@WEIGHT_INITIALIZERS.register_module(name='PretrainedHeads')
class PretrainedHeadsInit:
    """Copy the classifier heads of ``checkpoint`` (file or URL) into the
    head module.  A head of the module that the file lacks (a distillation
    head from a non-distilled file) keeps its initialisation, and a file's
    head the module lacks is dropped, each with a warning; a shape mismatch
    (another number of classes) is an error."""

    def __init__(self, checkpoint: str):
        self.checkpoint = checkpoint

    @torch.no_grad()
    def __call__(self, module: nn.Module) -> None:
        targets = head_linears(module)
        heads = read_classifier_heads(self.checkpoint)
        for name, linear in targets.items():
            tensors = heads.get(name)
            if tensors is None:
                continue
            for key, value in tensors.items():
                own = getattr(linear, key)
                if own is None or own.shape != value.shape:
                    other_classes = own is not None and (
                        own.shape[1:] == value.shape[1:]
                    )
                    raise CheckpointError(
                        f'{self.checkpoint}: {name}.{key} has shape '
                        f"{tuple(value.shape)}, the classifier's "
                        f'{None if own is None else tuple(own.shape)} '
                        + (
                            '(another number of classes: start the head '
                            'anew, head.init_cfg=None, and distil from a '
                            'teacher of these classes or none, teacher=None '
                            'teacher_checkpoint=None; '
                            'docs/user_guides/own_dataset.md)'
                            if other_classes
                            else '(check in_channels)'
                        )
                    )
                own.copy_(value)
        loaded = sorted(set(targets) & set(heads))
        lines = [f'PretrainedHeads: loaded {loaded} from {self.checkpoint}']
        absent = sorted(set(targets) - set(heads))
        dropped = sorted(set(heads) - set(targets))
        if absent:
            lines.append(f'  not in the checkpoint (left at init): {absent}')
        if dropped:
            lines.append(f'  not in this classifier (dropped): {dropped}')
        print_log(
            '\n'.join(lines),
            logger='current',
            level=logging.WARNING if absent or dropped else logging.INFO,
        )

    def _get_init_info(self) -> str:
        return f'PretrainedHeads: classifier heads from {self.checkpoint}'
