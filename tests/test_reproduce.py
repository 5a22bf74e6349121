"""The authors' two-stage pipeline as configs (issue 13,
docs/user_guides/reproduce.md): the stage-2 config holds every value of their
recipe on an 8-GPU launch, and both stages run end to end on tiny data, search
spec -> fine-tune -> merged checkpoint."""

import json
import math

import numpy as np
import pytest
import torch
from helpers import (
    MIXED_SPEC,
    REPO,
    TINY_DEIT_ARCH,
    TINY_DEIT_CLASSES,
    TINY_DEIT_DIMS,
    TINY_DEIT_PATCH,
    load_tool,
    write_tiny_config,
    write_tiny_deit_inputs,
)
from mmengine.config import Config

from hetdpt_mm.checkpoint.reader import read_backbone_checkpoint
from hetdpt_mm.checkpoint.safe_load import load_checkpoint_file
from hetdpt_mm.models import HetDPTViT
from hetdpt_mm.spec import META_KEY, PruneSpec

CONFIGS = REPO / 'configs' / 'hetdpt'
GPUS = 8


def assert_close_to_timm_schedule(
    schedulers, lr, warmup_lr, warmup, min_lr, epochs
):
    from mmengine.registry import PARAM_SCHEDULERS
    from timm.scheduler import CosineLRScheduler

    ours, theirs = (
        torch.optim.AdamW([torch.zeros(1, requires_grad=True)], lr=lr)
        for _ in range(2)
    )
    built = [
        PARAM_SCHEDULERS.build(dict(s, optimizer=ours)) for s in schedulers
    ]
    assert all(s.by_epoch for s in built)  # timm steps once per epoch
    timm = CosineLRScheduler(
        theirs,
        t_initial=epochs,
        lr_min=min_lr,
        warmup_lr_init=warmup_lr,
        warmup_t=warmup,
    )
    for epoch in range(epochs):
        want = theirs.param_groups[0]['lr']
        assert ours.param_groups[0]['lr'] == pytest.approx(want, rel=2e-3)
        ours.step()  # (the order torch expects)
        for scheduler in built:
            scheduler.step()
        timm.step(epoch + 1)


def test_stage2_config_is_the_authors_recipe_on_8_gpus():
    """Every row of the stage-2 table of docs/user_guides/reproduce.md, read
    from the dumped config (what tools/train.py runs)."""
    cfg = Config.fromstring(
        Config.fromfile(CONFIGS / 'deit-b_finetune-10l_in1k.py').pretty_text,
        '.py',
    )
    batch = GPUS * cfg.train_dataloader.batch_size
    assert batch == 4096  # 512 per GPU: their script and their log's run
    optimizer = cfg.optim_wrapper.optimizer
    # lr 5e-5 per 512 images, scaled linearly (--auto-scale-lr keeps it).
    assert optimizer.type == 'AdamW'
    assert optimizer.lr == pytest.approx(5e-5 * batch / 512)
    assert (
        optimizer.lr * batch / cfg.auto_scale_lr.base_batch_size
        == pytest.approx(4e-4)
    )
    assert optimizer.weight_decay == 0.08 and optimizer.eps == 1e-8
    assert cfg.optim_wrapper.clip_grad is None
    # 10 warm-up epochs from 1e-6, cosine to 1e-5 at epoch 400, per epoch:
    # timm's CosineLRScheduler with their arguments, epoch by epoch.
    assert cfg.train_cfg.max_epochs == 400
    assert_close_to_timm_schedule(
        cfg.param_scheduler,
        optimizer.lr,
        warmup_lr=1e-6,
        warmup=10,
        min_lr=1e-5,
        epochs=400,
    )
    assert cfg.train_dataloader.sampler.type == 'RepeatAugSampler'
    assert cfg.train_dataloader.sampler.num_repeats == 3
    assert cfg.randomness.seed == 42
    assert not any(h.type == 'EMAHook' for h in cfg.custom_hooks)

    model = cfg.model
    assert model.backbone.drop_path_rate == 0.1
    assert model.backbone.distilled
    assert model.backbone.prune_spec == MIXED_SPEC
    start = 'checkpoints/deit_base_distilled_patch16_224-df68dfff.pth'
    assert model.backbone.init_cfg == dict(type='Pretrained', checkpoint=start)
    assert model.head.init_cfg == dict(
        type='PretrainedHeads', checkpoint=start
    )
    assert model.type == 'HetDPTDistillClassifier'
    assert model.distill == dict(mode='hard', alpha=0.5)
    assert (
        model.teacher_checkpoint
        == 'checkpoints/deit_base_patch16_224-b5f2ef4d.pth'
    )
    assert model.teacher.backbone.arch == 'deit-base'
    assert not model.teacher.backbone.get('distilled', False)
    assert model.head.loss.label_smooth_val == 0.1
    assert [a.type for a in model.train_cfg.augments] == ['Mixup', 'CutMix']
    assert [a.alpha for a in model.train_cfg.augments] == [0.8, 1.0]


def test_search_config_is_the_authors_search():
    cfg = Config.fromfile(CONFIGS / 'deit-b_search-10l_in1k.py')
    backbone = cfg.model.backbone
    assert not backbone.distilled and backbone.gated
    assert backbone.residual_gelu == 'act_removed'
    assert backbone.init_cfg.checkpoint.endswith(
        'deit_base_patch16_224-b5f2ef4d.pth'
    )
    assert cfg.model.head.init_cfg.type == 'PretrainedHeads'
    (hook,) = cfg.custom_hooks
    assert hook.counts == dict(attn=5, act=5)
    # Removal k after (k + 1)^2 completed epochs; the last ends the run.
    ends = np.cumsum(hook.stages)
    assert list(ends) == [(k + 1) ** 2 for k in range(1, 11)]
    assert cfg.train_cfg.max_epochs == ends[-1] == 121
    # Their cyclecosine: 1e-6 in the first epoch, then 1e-5 throughout.
    assert cfg.optim_wrapper.optimizer.lr == 1e-5
    (first,) = cfg.param_scheduler
    assert (first.type, first.factor, first.end) == ('ConstantLR', 0.1, 1)
    assert cfg.optim_wrapper.paramwise_cfg.custom_keys['hetdpt_score'] == dict(
        decay_mult=0.0
    )


@pytest.mark.parametrize(
    'name, teacher',
    [
        ('deit-b_prune-10l_in1k.py', 'deit_base_patch16_224-b5f2ef4d.pth'),
        ('deit-s_prune-10l_in1k.py', 'deit_small_patch16_224-cd65a155.pth'),
    ],
)
def test_one_run_configs_load_heads_and_the_dense_teacher(name, teacher):
    model = Config.fromfile(CONFIGS / name).model
    assert model.head.init_cfg.type == 'PretrainedHeads'
    assert model.head.init_cfg.checkpoint == model.backbone.init_cfg.checkpoint
    assert model.teacher_checkpoint == f'checkpoints/{teacher}'
    assert not model.teacher.backbone.get('distilled', False)


# ------------------------------------------------------- tiny CPU run
@pytest.fixture(scope='module')
def tiny_inputs(tmp_path_factory):
    root = tmp_path_factory.mktemp('reproduce')
    return root, write_tiny_deit_inputs(root)


def tiny_config(name, root, start, teacher=None):
    return write_tiny_config(CONFIGS / name, root, start, teacher)


def test_search_then_finetune_reaches_the_merged_checkpoint(tiny_inputs):
    root, files = tiny_inputs
    train = load_tool('train')
    search = tiny_config('deit-b_search-10l_in1k.py', root, files['dense'])
    cfg = Config.fromfile(search)
    # All ten removals within the run's two iterations.
    cfg.custom_hooks[0].update(schedule='epoch', prune_epoch=1, stages=None)
    cfg.dump(search)
    train.main([str(search), '--work-dir', str(root / 'search')])
    spec_file = root / 'search' / 'found_spec.json'
    found = PruneSpec.from_dict(json.loads(spec_file.read_text()))
    assert (found.n_attn, found.n_act) == (5, 5)
    checkpoint = load_checkpoint_file(root / 'search' / 'epoch_1.pth')
    record = read_backbone_checkpoint(checkpoint).record
    assert record.spec == found and record.form == 'gated'
    assert PruneSpec.from_dict(checkpoint['meta'][META_KEY]['spec']) == found
    assert record.semantics['residual_gelu'] == 'act_removed'

    finetune = tiny_config(
        'deit-b_finetune-10l_in1k.py',
        root,
        files['distilled'],
        teacher=files['dense'],
    )
    train.main(
        [
            str(finetune),
            '--work-dir',
            str(root / 'finetune'),
            '--cfg-options',
            f'model.backbone.prune_spec={spec_file}',
        ]
    )
    merged = root / 'finetune' / 'deit-b_finetune-10l_in1k_merged.pth'
    checkpoint = load_checkpoint_file(merged)
    record = read_backbone_checkpoint(checkpoint).record
    assert record.form == 'merged' and record.spec == found
    assert record.semantics['residual_gelu'] == 'both_removed'
    assert not any(k.startswith('teacher.') for k in checkpoint['state_dict'])
    assert checkpoint['state_dict']['head.layers.head_dist.weight'].shape == (
        TINY_DEIT_CLASSES,
        TINY_DEIT_DIMS,
    )
    backbone = HetDPTViT(
        arch=TINY_DEIT_ARCH,
        patch_size=TINY_DEIT_PATCH,
        distilled=True,
        init_cfg=dict(
            type='Pretrained', checkpoint=str(merged), prefix='backbone.'
        ),
    )
    backbone.init_weights()
    cls_token, dist_token = backbone.eval()(torch.randn(1, 3, 224, 224))[-1]
    assert math.isfinite(cls_token.sum().item())
