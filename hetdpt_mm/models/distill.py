"""Self-distillation for the HetDPT fine-tune (docs/method.md section 4):
mmpretrain's ``ImageClassifier`` plus a frozen teacher and DeiT's
distillation loss (docs/user_guides/pruning.md, *Self-distillation*).

Importing this module pulls in all of mmpretrain's models, so ``import
hetdpt_mm`` does not; configs that use the classifier import it::

    custom_imports = dict(imports=['hetdpt_mm', 'hetdpt_mm.models.distill'])"""

import copy
from typing import List, Optional

import torch
import torch.nn.functional as F
from mmpretrain.models.classifiers import ImageClassifier
from mmpretrain.models.heads import DeiTClsHead
from mmpretrain.registry import MODELS

from ..checkpoint.record import RecordInStateDict

KD_MODES = ('hard', 'soft')


def kd_loss(
    student: torch.Tensor,
    teacher: torch.Tensor,
    mode: str,
    temperature: float = 1.0,
) -> torch.Tensor:
    """DeiT's distillation losses between logits (batch mean)."""
    if mode == 'hard':
        return F.cross_entropy(student, teacher.argmax(dim=1))
    if mode == 'soft':
        t = temperature
        return (
            F.kl_div(
                F.log_softmax(student / t, dim=1),
                F.log_softmax(teacher / t, dim=1),
                reduction='batchmean',
                log_target=True,
            )
            * t
            * t
        )
    raise ValueError(
        f'unknown distillation mode {mode!r}; use one of {KD_MODES}'
    )


def teacher_init_cfg(teacher: dict, checkpoint: str) -> None:
    """Make ``teacher`` (a classifier config) start from ``checkpoint``.

    A HetDPTViT teacher loads its backbone and heads from a checkpoint of
    any layout (an official DeiT file, mmpretrain's, ours), the backbone
    through its ``Pretrained`` init_cfg and the heads through
    ``PretrainedHeads``; any other classifier loads the whole file by key
    names (mmengine's ``Pretrained``).
    """
    backbone = teacher.get('backbone') or {}
    if backbone.get('type') != 'HetDPTViT':
        teacher['init_cfg'] = dict(type='Pretrained', checkpoint=checkpoint)
        return
    teacher['backbone'] = dict(
        backbone, init_cfg=dict(type='Pretrained', checkpoint=checkpoint)
    )
    teacher['head'] = dict(
        teacher['head'],
        init_cfg=dict(type='PretrainedHeads', checkpoint=checkpoint),
    )


def _teacher_is_optional(
    model: 'HetDPTDistillClassifier', incompatible_keys
) -> None:
    """Loading weights without a teacher's into a model that has one (a
    merged checkpoint at the start of a fine-tune) keeps the teacher's own
    (``teacher_checkpoint``, or the snapshot still to be taken); a loaded
    teacher without a model to take it (testing, inference) is skipped."""
    teacher = model._teacher_keys_skipped
    if teacher is None:
        return
    for keys in incompatible_keys:
        keys[:] = [key for key in keys if not key.startswith(teacher)]


@MODELS.register_module()
class HetDPTDistillClassifier(RecordInStateDict, ImageClassifier):
    """ImageClassifier with a frozen teacher and a KD loss.  The teacher is
    training state: built when training starts (``init_weights``) or by the
    snapshot, and in no model that only tests or infers, so the model of a
    merged file is the student alone in every API.

    Args:
        backbone, neck, head, ...: as for ``ImageClassifier``.
        distill: ``dict(mode='hard'|'soft', alpha=0.5, temperature=1.0)``.
        teacher: model config of the teacher (an mmpretrain classifier);
            default the student's own structure.
        teacher_checkpoint: weights of the teacher (see
            :func:`teacher_init_cfg`); without it the teacher is a snapshot
            of the student taken by ``HetDPTPruneHook`` before its first
            removal.
    """

    def __init__(
        self,
        backbone: dict,
        head: dict,
        neck: Optional[dict] = None,
        distill: Optional[dict] = None,
        teacher: Optional[dict] = None,
        teacher_checkpoint: Optional[str] = None,
        **kwargs,
    ):
        super().__init__(backbone=backbone, neck=neck, head=head, **kwargs)
        distill = dict(
            dict(mode='hard', alpha=0.5, temperature=1.0), **(distill or {})
        )
        unknown = set(distill) - {'mode', 'alpha', 'temperature'}
        if unknown:
            raise ValueError(
                f'unknown distill keys {sorted(unknown)}; use '
                'mode, alpha, temperature'
            )
        if distill['mode'] not in KD_MODES:
            raise ValueError(
                f'distill mode must be one of {KD_MODES}, got '
                f'{distill["mode"]!r}'
            )
        if not 0 <= distill['alpha'] <= 1 or distill['temperature'] <= 0:
            raise ValueError(
                'distill needs 0 <= alpha <= 1 and '
                f'temperature > 0, got {distill}'
            )
        self.distill = distill
        if teacher is None and teacher_checkpoint is None:
            self.teacher_source = 'snapshot'
        else:
            self.teacher_source = teacher_checkpoint or 'config'
        if teacher is None:
            teacher = dict(
                type='ImageClassifier', backbone=backbone, neck=neck, head=head
            )
        teacher = copy.deepcopy(dict(teacher))
        teacher_classes = (teacher.get('head') or {}).get('num_classes')
        if teacher_classes != head.get('num_classes'):
            raise ValueError(
                f'the teacher classifies {teacher_classes} classes, the '
                f'model {head.get("num_classes")}: give a teacher of these '
                'classes or none (teacher=None, teacher_checkpoint=None: a '
                'snapshot of the model; docs/user_guides/own_dataset.md)'
            )
        if teacher_checkpoint is not None:
            teacher_init_cfg(teacher, teacher_checkpoint)
        self._teacher_cfg = teacher
        # Training state, built when training starts (init_weights, which
        # MMEngine's runners call after building the optimizer: the frozen
        # teacher is in none of its parameter groups) or by the snapshot;
        # testing and inference never build it, so the model of a merged
        # file is the student alone.
        self.teacher = None
        self._teacher_keys_skipped = None
        self.register_load_state_dict_post_hook(_teacher_is_optional)

    def state_record(self) -> dict:
        # Travels with the weights, so that any reader of the checkpoint
        # (the merge) knows which tensors are the teacher's.
        return dict(teacher_prefix='teacher.')

    def build_teacher(self) -> None:
        """Build the frozen teacher on the model's device (its weights:
        ``init_weights`` or :meth:`snapshot_teacher`), once."""
        if self.teacher is not None:
            return
        teacher = MODELS.build(self._teacher_cfg).requires_grad_(False)
        # Saved with the teacher's weights (so a resumed run knows whether
        # the snapshot was taken) and dropped with them on merging.
        teacher.register_buffer(
            'hetdpt_ready', torch.tensor(self.teacher_source != 'snapshot')
        )
        self.teacher = teacher.to(next(self.parameters()).device).eval()

    def init_weights(self) -> None:
        self.build_teacher()
        super().init_weights()

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # A file without a teacher keeps the model's (a merged checkpoint at
        # the start of a fine-tune); a file's teacher loads into the
        # model's, and is skipped where there is none (testing, inference).
        teacher = prefix + 'teacher.'
        holds_teacher = any(key.startswith(teacher) for key in state_dict)
        self._teacher_keys_skipped = (
            teacher if holds_teacher != (self.teacher is not None) else None
        )
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    @property
    def teacher_ready(self) -> bool:
        return self.teacher is not None and bool(self.teacher.hetdpt_ready)

    @property
    def wants_teacher_snapshot(self) -> bool:
        return self.teacher_source == 'snapshot' and not self.teacher_ready

    @torch.no_grad()
    def snapshot_teacher(self) -> None:
        """Make the teacher a frozen copy of the model as it is now."""
        self.build_teacher()
        for name in ('backbone', 'neck', 'head'):
            student = getattr(self, name, None)
            if student is not None:
                getattr(self.teacher, name).load_state_dict(
                    student.state_dict()
                )
        self.teacher.hetdpt_ready.fill_(True)

    def train(self, mode: bool = True):
        super().train(mode)
        if self.teacher is not None:
            self.teacher.eval()  # frozen: no dropout, no statistics updates
        return self

    def loss(self, inputs: torch.Tensor, data_samples: List) -> dict:
        feats = self.extract_feat(inputs)
        distilled = isinstance(self.head, DeiTClsHead)
        if distilled:
            cls_token, dist_token = self.head.pre_logits(feats)
            logits = self.head.layers.head(cls_token)
            kd_logits = self.head.layers.head_dist(dist_token)
        else:
            logits = kd_logits = self.head(feats)
        losses = self.head._get_loss(logits, data_samples)
        # Renamed: MMEngine logs the sum of all loss terms as `loss`.
        cls_loss = losses.pop('loss')
        if self.teacher_ready:
            with torch.no_grad():
                teacher_logits = self.teacher(inputs, mode='tensor')
            kd = kd_loss(
                kd_logits,
                teacher_logits,
                self.distill['mode'],
                self.distill['temperature'],
            )
        elif distilled:
            # No teacher yet: the distillation token learns the labels.
            kd = self.head._get_loss(kd_logits, data_samples)['loss']
        else:
            # (1 - alpha) * CE + alpha * CE to the labels
            losses['loss_cls'] = cls_loss
            return losses
        alpha = self.distill['alpha']
        losses['loss_cls'] = (1 - alpha) * cls_loss
        losses['loss_kd'] = alpha * kd
        return losses
