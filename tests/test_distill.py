"""Self-distillation: KD losses, the teacher snapshot, DeiT's distillation
token, and a teacher loaded from a checkpoint."""

import pytest
import torch
import torch.nn.functional as F
from helpers import randomize_
from mmengine.registry import DefaultScope
from mmpretrain.registry import MODELS
from mmpretrain.structures import DataSample

import hetdpt_mm  # noqa: F401  registers modules
from hetdpt_mm.models.distill import HetDPTDistillClassifier, kd_loss

DIM = 48
ALPHA = 0.25


def backbone_cfg(distilled=False):
    return dict(
        type='HetDPTViT',
        arch=dict(embed_dims=DIM, num_layers=2, num_heads=3),
        img_size=32,
        patch_size=4,
        gated=True,
        distilled=distilled,
    )


def head_cfg(distilled=False):
    return dict(
        type='DeiTClsHead' if distilled else 'VisionTransformerClsHead',
        num_classes=10,
        in_channels=DIM,
    )


@pytest.fixture(autouse=True)
def mmpretrain_scope():
    """Registries resolve types in the current default scope, which other
    test modules may have left at mmdet or mmseg."""
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        yield


def build(distilled=False, **kwargs) -> HetDPTDistillClassifier:
    kwargs.setdefault(
        'distill', dict(mode='soft', alpha=ALPHA, temperature=2.0)
    )
    model = MODELS.build(
        dict(
            type='HetDPTDistillClassifier',
            backbone=backbone_cfg(distilled),
            head=head_cfg(distilled),
            **kwargs,
        )
    )
    return randomize_(model, seed=1, std=0.2)


def batch(n=6, seed=0):
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randn(n, 3, 32, 32, generator=generator)
    labels = torch.randint(0, 10, (n,), generator=generator)
    samples = [DataSample().set_gt_label(int(label)) for label in labels]
    return inputs, samples, labels


def test_soft_kd_is_the_tempered_kl_divergence():
    student, teacher = torch.randn(5, 10), torch.randn(5, 10)
    t = 3.0
    p = F.softmax(teacher / t, dim=1)
    expected = (
        (p * (p.log() - F.log_softmax(student / t, dim=1))).sum(1).mean()
        * t
        * t
    )
    assert torch.allclose(
        kd_loss(student, teacher, 'soft', t), expected, atol=1e-6
    )
    assert kd_loss(teacher, teacher, 'soft', t).abs() < 1e-6


def test_hard_kd_is_cross_entropy_to_the_teacher_class():
    student, teacher = torch.randn(5, 10), torch.randn(5, 10)
    expected = F.cross_entropy(student, teacher.argmax(1))
    assert torch.allclose(kd_loss(student, teacher, 'hard'), expected)
    with pytest.raises(ValueError, match='unknown distillation mode'):
        kd_loss(student, teacher, 'medium')


@pytest.mark.parametrize(
    'distill, message',
    [
        (dict(mode='medium'), 'mode must be one of'),
        (dict(alpha=1.5), '0 <= alpha <= 1'),
        (dict(temperature=0), 'temperature > 0'),
        (dict(beta=1), 'unknown distill keys'),
    ],
)
def test_bad_distill_settings_are_rejected(distill, message):
    with pytest.raises(ValueError, match=message):
        build(distill=distill)


def test_before_the_snapshot_the_loss_is_the_classification_loss():
    model = build()
    assert model.wants_teacher_snapshot and not model.teacher_ready
    inputs, samples, labels = batch()
    losses = model.loss(inputs, samples)
    assert set(losses) == {'loss_cls'}
    logits = model.head(model.extract_feat(inputs))
    # The head's default loss module is cross-entropy.
    assert torch.allclose(
        losses['loss_cls'], F.cross_entropy(logits, labels), atol=1e-6
    )


def test_snapshot_freezes_a_copy_of_the_model():
    model = build()
    model.snapshot_teacher()
    assert model.teacher_ready and not model.wants_teacher_snapshot
    for name in ('backbone', 'head'):
        student = getattr(model, name).state_dict()
        teacher = getattr(model.teacher, name).state_dict()
        assert student.keys() == teacher.keys()
        assert all(torch.equal(student[k], teacher[k]) for k in student)
    assert not any(p.requires_grad for p in model.teacher.parameters())
    model.train()
    assert model.backbone.training and not model.teacher.training

    inputs, samples, labels = batch()
    losses = model.loss(inputs, samples)
    # The student equals its teacher: the soft KD term vanishes.
    assert losses['loss_kd'].abs() < 1e-6
    logits = model.head(model.extract_feat(inputs))
    assert torch.allclose(
        losses['loss_cls'],
        (1 - ALPHA) * F.cross_entropy(logits, labels),
        atol=1e-6,
    )
    sum(losses[k] for k in ('loss_cls', 'loss_kd')).backward()
    assert model.backbone.patch_embed.proj.weight.grad is not None
    assert all(p.grad is None for p in model.teacher.parameters())


def test_hard_kd_with_the_distillation_token():
    """DeiT: labels supervise the class token's head, the teacher's class
    supervises the distillation token's head."""
    model = build(distilled=True, distill=dict(mode='hard', alpha=ALPHA))
    inputs, samples, labels = batch()
    feats = model.extract_feat(inputs)
    cls_token, dist_token = model.head.pre_logits(feats)
    cls_logits = model.head.layers.head(cls_token)
    dist_logits = model.head.layers.head_dist(dist_token)

    before = model.loss(inputs, samples)  # no teacher yet: labels for both
    assert torch.allclose(
        before['loss_cls'],
        (1 - ALPHA) * F.cross_entropy(cls_logits, labels),
        atol=1e-6,
    )
    assert torch.allclose(
        before['loss_kd'],
        ALPHA * F.cross_entropy(dist_logits, labels),
        atol=1e-6,
    )

    model.snapshot_teacher()
    with torch.no_grad():  # the student moves away from its teacher
        model.head.layers.head_dist.weight.mul_(-1)
    dist_logits = model.head.layers.head_dist(dist_token)
    teacher_logits = model.teacher.eval()(inputs, mode='tensor')
    after = model.loss(inputs, samples)
    assert torch.allclose(
        after['loss_kd'],
        ALPHA * F.cross_entropy(dist_logits, teacher_logits.argmax(1)),
        atol=1e-6,
    )
    assert torch.allclose(after['loss_cls'], before['loss_cls'])


def test_teacher_from_a_checkpoint(tmp_path):
    source = randomize_(
        MODELS.build(
            dict(
                type='ImageClassifier',
                backbone=backbone_cfg(),
                head=head_cfg(),
            )
        ),
        seed=7,
    )
    path = tmp_path / 'teacher.pth'
    torch.save(dict(state_dict=source.state_dict()), path)
    model = MODELS.build(
        dict(
            type='HetDPTDistillClassifier',
            backbone=backbone_cfg(),
            head=head_cfg(),
            teacher_checkpoint=str(path),
        )
    )
    model.init_weights()
    assert model.teacher_ready and not model.wants_teacher_snapshot
    for key, value in source.state_dict().items():
        assert torch.equal(model.teacher.state_dict()[key], value), key
