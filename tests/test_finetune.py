"""ViT fine-tuning options with the toolboxes' semantics (issue 18 item 5):
gradient checkpointing, frozen stages, norm_eval, layer-wise learning-rate
decay, and the CIFAR-100 fine-tuning and linear-probing configs."""

import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn as nn
from helpers import MIXED_SPEC, randomize_
from mmengine.config import Config
from mmengine.optim import build_optim_wrapper
from mmengine.registry import MODELS, DefaultScope

from hetdpt_mm import PruneSpec
from hetdpt_mm.models import HetDPTViT
from hetdpt_mm.runner import build_runner

ROOT = Path(__file__).resolve().parents[1]
TINY = dict(embed_dims=48, num_layers=12, num_heads=3)


def tiny_vit(**kwargs):
    return randomize_(HetDPTViT(TINY, img_size=32, patch_size=8, **kwargs))


@pytest.mark.parametrize('form', ['pruned', 'merged', 'gated'])
def test_with_cp_computes_the_same_outputs_and_gradients(form):
    structure = dict(
        prune_spec=MIXED_SPEC, merged=form == 'merged', gated=form == 'gated'
    )
    plain = tiny_vit(**structure, drop_path_rate=0.1)
    checkpointed = tiny_vit(**structure, drop_path_rate=0.1, with_cp=True)
    checkpointed.load_state_dict(plain.state_dict())
    image = torch.randn(2, 3, 32, 32)
    outputs = []
    for model in (plain, checkpointed):
        model.train()
        torch.manual_seed(0)  # the same drop-path draws
        output = model(image)[0]
        output.square().sum().backward()
        outputs.append(output)
    torch.testing.assert_close(outputs[0], outputs[1])
    for (name, a), b in zip(
        plain.named_parameters(), checkpointed.parameters()
    ):
        if a.grad is None:
            assert b.grad is None, name
        else:
            torch.testing.assert_close(a.grad, b.grad, msg=name)


def frozen_names(model):
    return {
        name for name, p in model.named_parameters() if not p.requires_grad
    }


def test_frozen_stages_freeze_the_stem_and_first_blocks():
    backbone = tiny_vit(
        prune_spec=MIXED_SPEC, merged=True, distilled=True, frozen_stages=3
    )
    frozen = frozen_names(backbone)
    stem = {
        'cls_token',
        'dist_token',
        'pos_embed',
        'patch_embed.proj.weight',
        'patch_embed.proj.bias',
    }
    blocks = {
        name
        for name, _ in backbone.named_parameters()
        if name.split('.')[:2]
        in (['blocks', '0'], ['blocks', '1'], ['blocks', '2'])
    }
    assert frozen == stem | blocks
    backbone.train()
    for index, block in enumerate(backbone.blocks):
        assert all(m.training == (index >= 3) for m in block.modules())
    assert not backbone.patch_embed.training
    assert backbone.norm.training

    # A linear probe: everything frozen, in eval mode while training.
    probe = tiny_vit(frozen_stages=12).train()
    assert all(not p.requires_grad for p in probe.parameters())
    assert not any(
        m.training for m in probe.modules() if not list(m.children())
    )


def test_frozen_stages_hold_after_a_loaded_structure_rebuilds_the_blocks():
    merged = tiny_vit(prune_spec=MIXED_SPEC, merged=True)
    backbone = HetDPTViT(TINY, img_size=32, patch_size=8, frozen_stages=2)
    backbone.load_state_dict(merged.state_dict())
    assert backbone.form == 'merged'
    backbone.train()
    for index, block in enumerate(backbone.blocks):
        assert all(p.requires_grad == (index >= 2) for p in block.parameters())
        assert block.training == (index >= 2)


def test_norm_eval_keeps_layer_norms_in_eval_mode():
    backbone = tiny_vit(norm_eval=True).train()
    norms = [m for m in backbone.modules() if isinstance(m, nn.LayerNorm)]
    assert norms and not any(m.training for m in norms)
    assert backbone.blocks[0].attn.training


def test_frozen_stages_are_checked():
    with pytest.raises(ValueError, match='frozen_stages must be in -1..12'):
        HetDPTViT(TINY, frozen_stages=13)


def test_get_layer_depth_follows_mmpretrain_vit():
    backbone = HetDPTViT(
        TINY, prune_spec=MIXED_SPEC, merged=True, distilled=True
    )
    assert backbone.get_layer_depth('backbone.pos_embed', 'backbone.') == (
        0,
        14,
    )
    assert backbone.get_layer_depth('dist_token') == (0, 14)
    assert backbone.get_layer_depth('patch_embed.proj.weight') == (0, 14)
    # Block 0 lost its attention, block 11 both layers: same depths.
    assert backbone.get_layer_depth('blocks.0.norm1.weight') == (1, 14)
    assert backbone.get_layer_depth('blocks.11.mlp.fc.weight') == (12, 14)
    assert backbone.get_layer_depth('norm.weight') == (13, 14)
    assert backbone.get_layer_depth('head.fc.weight', 'backbone.') == (13, 14)


def layer_lrs(model, optim_wrapper_cfg):
    wrapper = build_optim_wrapper(model, optim_wrapper_cfg)
    return {
        name: group['lr']
        for group in wrapper.optimizer.param_groups
        for name in [group['param_name']]
    }


def test_layer_decay_with_mmpretrain_and_for_detectors_and_segmentors():
    decay, base_lr = 0.5, 1.0
    classifier_cfg = Config.fromfile(
        ROOT / 'configs/demo/vit-demo_digits.py'
    ).model
    classifier_cfg.backbone.prune_spec = dict(attn_removed=[0])
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        classifier = MODELS.build(classifier_cfg)
        lrs = layer_lrs(
            classifier,
            dict(
                optimizer=dict(type='AdamW', lr=base_lr, weight_decay=0.05),
                constructor='LearningRateDecayOptimWrapperConstructor',
                paramwise_cfg=dict(layer_decay_rate=decay),
            ),
        )
    # 6 blocks: depths 0 (embeddings) .. 7 (head), scale decay^(7 - d).
    assert lrs['backbone.pos_embed'] == pytest.approx(decay**7)
    assert lrs['backbone.blocks.0.norm1.weight'] == pytest.approx(decay**6)
    assert lrs['backbone.blocks.5.mlp.fc1.weight'] == pytest.approx(decay)
    assert lrs['head.layers.head.weight'] == pytest.approx(1.0)

    for config, scope, head in (
        ('detr_hetdpt_demo.py', 'mmdet', 'bbox_head.fc_cls.weight'),
        ('upernet_hetdpt_demo.py', 'mmseg', 'decode_head.conv_seg.weight'),
    ):
        cfg = Config.fromfile(ROOT / 'configs/demo' / config)
        cfg.model.backbone.init_cfg = None
        with DefaultScope.overwrite_default_scope(scope):
            model = MODELS.build(cfg.model)
            # mmseg's paramwise_cfg (num_layers) is read too.
            lrs = layer_lrs(
                model,
                dict(
                    optimizer=dict(
                        type='AdamW', lr=base_lr, weight_decay=0.05
                    ),
                    constructor='HetDPTLayerDecayOptimWrapperConstructor',
                    paramwise_cfg=dict(num_layers=6, layer_decay_rate=decay),
                ),
            )
        assert lrs['backbone.cls_token'] == pytest.approx(decay**7)
        assert lrs['backbone.blocks.2.attn.qkv.weight'] == pytest.approx(
            decay**4
        )
        assert lrs[head] == pytest.approx(1.0)


# --------------------------------------------------------- CIFAR-100 configs
def write_fake_cifar100(root: Path, monkeypatch, num_images: int = 4):
    """mmpretrain's CIFAR-100 layout with a few random images (the dataset
    checks the real files' md5 sums: the test lists the fake files
    without)."""
    from mmpretrain.datasets import CIFAR100

    folder = root / 'data/cifar100' / CIFAR100.base_folder
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for split in ('train', 'test'):
        entry = dict(
            data=rng.integers(0, 256, (num_images, 3072), dtype=np.uint8),
            fine_labels=list(range(num_images)),
        )
        (folder / split).write_bytes(pickle.dumps(entry))
    monkeypatch.setattr(CIFAR100, 'train_list', [['train', None]])
    monkeypatch.setattr(CIFAR100, 'test_list', [['test', None]])


@pytest.mark.parametrize('mode', ['finetune', 'linear-probe'])
def test_cifar100_transfer_configs_train_one_step(
    mode, tmp_path, monkeypatch, one_thread
):
    write_fake_cifar100(tmp_path, monkeypatch)
    monkeypatch.chdir(tmp_path)
    merged = HetDPTViT(
        TINY, distilled=True, prune_spec=MIXED_SPEC, merged=True
    )
    torch.save(
        dict(
            state_dict={
                f'backbone.{k}': v
                for k, v in randomize_(merged).state_dict().items()
            }
        ),
        tmp_path / 'merged.pth',
    )
    cfg = Config.fromfile(
        ROOT / f'configs/hetdpt/deit-b_prune-10l_{mode}_cifar100.py'
    )
    # The recipe as written, on a narrow 12-block ViT, one step of 4 images.
    cfg.model.backbone.update(
        arch=TINY,
        init_cfg=dict(
            type='Pretrained', checkpoint=str(tmp_path / 'merged.pth')
        ),
    )
    cfg.model.head.in_channels = TINY['embed_dims']
    cfg.train_dataloader.update(
        batch_size=4, num_workers=0, persistent_workers=False
    )
    cfg.train_cfg.update(max_epochs=1, val_interval=10)
    cfg.param_scheduler = None
    cfg.work_dir = str(tmp_path / 'work_dir')
    runner = build_runner(cfg)
    model = runner.model
    assert model.backbone.form == 'merged'
    assert model.backbone.prune_spec == PruneSpec(12, **MIXED_SPEC)
    runner.train()
    trained = model.state_dict()
    # init_weights ran inside train(): compare with the loaded file.
    start = torch.load(tmp_path / 'merged.pth')['state_dict']
    changed = {
        k
        for k, v in start.items()
        if k in trained
        and v.dtype.is_floating_point
        and not torch.equal(v, trained[k])
    }
    assert model.head.layers.head.weight.abs().sum() > 0
    if mode == 'linear-probe':
        assert not changed
        assert all(not p.requires_grad for p in model.backbone.parameters())
    else:
        # (The zero-initialised DeiT head passes no gradient on at the
        # first step; weight decay still moves the weights.)
        assert 'backbone.blocks.1.attn.qkv.weight' in changed
        assert all(p.requires_grad for p in model.backbone.parameters())
