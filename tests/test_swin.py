"""HetDPTSwin (issue 16): the three forms compute the same function, the
dense form is mmdet's, mmpretrain's and timm's Swin (each checkpoint layout
converted), the prune hook, the merge and the benchmark drive it through the
family interface, and it works in mmdet / mmseg models."""

import json
from pathlib import Path

import pytest
import torch
from helpers import fake_runner, randomize_, timm_state_dict
from mmengine.config import Config

from hetdpt_benchmark.builders import make_test_batch
from hetdpt_benchmark.options import BenchmarkOptions, resolve_options
from hetdpt_benchmark.run import run_benchmark
from hetdpt_mm import PruneSpec
from hetdpt_mm.analysis import analytic_macs
from hetdpt_mm.checkpoint.reader import read_backbone_checkpoint
from hetdpt_mm.deploy.networks import build_from_config
from hetdpt_mm.errors import UsageError
from hetdpt_mm.hooks import HetDPTPruneHook
from hetdpt_mm.merge import merge_checkpoint
from hetdpt_mm.models import HetDPTSwin
from hetdpt_mm.models.swin.state_dict import (
    resize_relative_position_bias_table,
)

ROOT = Path(__file__).resolve().parents[1]
#: A small Swin: four stages (8 blocks), every stage with both a W-MSA and
#: an SW-MSA block, two heads in the first stage.
SMALL_ARCH = dict(embed_dims=16, depths=[2, 2, 2, 2], num_heads=[2, 2, 4, 4])
#: Blocks of all four kinds, over all stages (global block indices).
SMALL_SPEC = dict(attn_removed=[0, 3, 5, 7], act_removed=[1, 3, 4, 7])
#: Non-square, not a multiple of the patch or of the windows: padding runs
#: everywhere (maps 15x21, 8x11, 4x6, 2x3).
ODD_SIZE = (58, 83)


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    pass


def swin(**kwargs) -> HetDPTSwin:
    args = dict(arch=SMALL_ARCH, drop_path_rate=0.0)
    args.update(kwargs)
    return HetDPTSwin(**args).eval()


def images(*size, batch=2, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(batch, 3, *size, generator=generator)


def assert_outputs_close(ours, theirs, atol=1e-5):
    assert len(ours) == len(theirs)
    for mine, other in zip(ours, theirs):
        assert mine.shape == other.shape
        torch.testing.assert_close(mine, other, atol=atol, rtol=1e-5)


def loaded(path, **kwargs) -> HetDPTSwin:
    """A backbone built and initialised from ``path`` as a config does."""
    backbone = swin(
        init_cfg=dict(type='Pretrained', checkpoint=str(path)), **kwargs
    )
    backbone.init_weights()
    return backbone.eval()


@pytest.mark.parametrize(
    'semantics',
    [{}, dict(removed_attn_output='zero', residual_gelu='act_removed')],
)
def test_gated_pruned_merged_compute_the_same(semantics, tmp_path):
    dense = randomize_(swin())
    torch.save(timm_state_dict(dense), tmp_path / 'dense.pth')
    gated = loaded(
        tmp_path / 'dense.pth', gated=True, prune_spec=SMALL_SPEC, **semantics
    )
    pruned = loaded(tmp_path / 'dense.pth', prune_spec=SMALL_SPEC, **semantics)
    merged = pruned.to_merged()
    x = images(*ODD_SIZE)
    with torch.no_grad():
        outs = [model(x) for model in (gated, pruned, merged)]
    assert_outputs_close(outs[0], outs[1])
    assert_outputs_close(outs[1], outs[2])
    spec = PruneSpec.coerce(SMALL_SPEC, 8)
    assert gated.prune_spec == merged.prune_spec == spec
    # Global block 5 is the second block of stage 2.
    assert (
        type(merged.stages[2].blocks[1].attn).__name__ == 'AttentionBypass'
        if not semantics
        else 'AttentionZero'
    )
    assert hasattr(merged.stages[2].blocks[0].mlp, 'fc')
    assert merged.semantics == pruned.semantics == gated.semantics
    # Removed layers change the function and a fresh backbone takes the
    # merged weights' structure: tests/test_family_contract.py.


def test_prune_hook_and_merge_drive_a_swin_classifier(tmp_path):
    """The family interface is all the hooks and the merge need: a gated
    Swin in an mmpretrain classifier is pruned by HetDPTPruneHook (lowest
    score within a type), and its checkpoint merges to a network computing
    the same."""
    from mmpretrain.registry import MODELS

    model = MODELS.build(
        dict(
            type='ImageClassifier',
            backbone=dict(
                type='HetDPTSwin',
                arch=SMALL_ARCH,
                gated=True,
                out_indices=(3,),
                drop_path_rate=0.0,
            ),
            neck=dict(type='GlobalAveragePooling'),
            head=dict(type='LinearClsHead', num_classes=10, in_channels=128),
        )
    )
    backbone = randomize_(model.backbone)
    runner = fake_runner(model)
    hook = HetDPTPruneHook(counts=dict(attn=1, act=2), stages=1)
    hook.before_train(runner)
    with torch.no_grad():
        backbone.gates('act')[6].hetdpt_score.fill_(-1.0)
        backbone.gates('act')[2].hetdpt_score.fill_(-0.5)
        backbone.gates('attn')[5].hetdpt_score.fill_(-1.0)
    for runner.iter in range(12):
        hook.after_train_iter(runner, runner.iter)
    assert backbone.prune_spec == PruneSpec(8, [5], [2, 6])
    merged_file, _ = merge_checkpoint(dict(state_dict=model.state_dict()))
    merged = HetDPTSwin(arch=SMALL_ARCH, out_indices=(3,))
    merged.load_state_dict(
        {
            k[len('backbone.') :]: v
            for k, v in merged_file['state_dict'].items()
            if k.startswith('backbone.')
        }
    )
    assert merged.form == 'merged' and merged.prune_spec == backbone.prune_spec
    x = images(32, 32)
    with torch.no_grad():
        assert_outputs_close(merged.eval()(x), backbone.eval()(x))


def mmdet_swin(**kwargs):
    from mmdet.models.backbones import SwinTransformer

    model = SwinTransformer(
        embed_dims=16,
        depths=[2, 2, 2, 2],
        num_heads=[2, 2, 4, 4],
        window_size=7,
        drop_path_rate=0.0,
        **kwargs,
    )
    model.eval()  # mmdet's train() returns nothing
    return model


def test_dense_equals_mmdet_swin(tmp_path):
    reference = randomize_(mmdet_swin())
    torch.save(
        dict(
            state_dict={
                f'backbone.{k}': v for k, v in reference.state_dict().items()
            }
        ),
        tmp_path / 'mmdet.pth',
    )
    ours = loaded(tmp_path / 'mmdet.pth', pad_small_map=True)
    assert (
        read_backbone_checkpoint(str(tmp_path / 'mmdet.pth')).record.family
        == 'swin'
    )
    x = images(*ODD_SIZE)
    with torch.no_grad():
        assert_outputs_close(ours(x), reference(x))
    # out_indices and the norm of each output, as mmdet's.
    partial = loaded(
        tmp_path / 'mmdet.pth', pad_small_map=True, out_indices=(1, 3)
    )
    with torch.no_grad():
        expected = reference(x)
        assert_outputs_close(partial(x), (expected[1], expected[3]))


def test_dense_equals_mmpretrain_swin(tmp_path):
    from mmpretrain.models.backbones import SwinTransformer

    reference = randomize_(
        SwinTransformer(
            arch=SMALL_ARCH,
            img_size=224,
            window_size=7,
            drop_path_rate=0.0,
            out_indices=(0, 1, 2, 3),
        )
    )
    reference.eval()  # mmpretrain's train() returns nothing
    # An ImageClassifier's checkpoint: backbone, neck-less head.
    state = {f'backbone.{k}': v for k, v in reference.state_dict().items()}
    state['head.fc.weight'] = torch.zeros(10, 128)
    torch.save(dict(state_dict=state), tmp_path / 'mmpretrain.pth')
    ours = loaded(tmp_path / 'mmpretrain.pth')
    # 224: the last map is one window, which is not shifted (as in the
    # official code; mmpretrain refuses smaller maps without padding).
    x = images(224, 224, batch=1)
    with torch.no_grad():
        assert_outputs_close(ours(x), reference(x))


def timm_swin(img_size: int = 224, window_size: int = 7):
    from timm.models.swin_transformer import SwinTransformer

    return randomize_(
        SwinTransformer(
            img_size=img_size,
            embed_dim=16,
            depths=(2, 2, 2, 2),
            num_heads=(2, 2, 4, 4),
            window_size=window_size,
            num_classes=10,
        ).eval()
    )


def official_layout(timm_state):
    """timm's tensors as the official Microsoft release saves them: patch
    merging at the end of the stage before, the head as one linear."""
    state = {}
    for key, value in timm_state.items():
        parts = key.split('.')
        if parts[0] == 'layers' and parts[2] == 'downsample':
            parts[1] = str(int(parts[1]) - 1)
        key = '.'.join(parts).replace('head.fc.', 'head.')
        state[key] = value
    return dict(model=state)


@pytest.mark.parametrize('layout', ['timm', 'official'])
@pytest.mark.parametrize('size, window', [(224, 7), (32, 4)])
def test_dense_equals_timm_swin(layout, size, window, tmp_path):
    """At 32² timm shrinks the windows of the last two stages (4 -> 2,
    1) and their bias tables."""
    reference = timm_swin(size, window)
    state = reference.state_dict()
    torch.save(
        official_layout(state) if layout == 'official' else state,
        tmp_path / 'swin.pth',
    )
    ours = loaded(tmp_path / 'swin.pth', out_indices=(3,), window_size=window)
    x = images(size, size, batch=1)
    with torch.no_grad():
        expected = reference.forward_features(x).permute(0, 3, 1, 2)
        assert_outputs_close(ours(x), (expected,))


def test_spec_from_official_weights_and_merge(tmp_path):
    """An official file cut to a spec, in a backbone and by
    ``merge_checkpoint`` (tools/merge_ckpt.py): the pruned and merged
    networks compute the same, and the merged file's record rebuilds it for
    a detector's four outputs."""
    official = official_layout(timm_swin().state_dict())
    torch.save(official, tmp_path / 'official.pth')
    pruned = loaded(tmp_path / 'official.pth', prune_spec=SMALL_SPEC)
    merged = loaded(
        tmp_path / 'official.pth', prune_spec=SMALL_SPEC, merged=True
    )
    x = images(64, 64)
    with torch.no_grad():
        assert_outputs_close(pruned(x), merged(x))
    merged_file, summary = merge_checkpoint(official, spec=SMALL_SPEC)
    assert summary.backbone_after < summary.backbone_before
    torch.save(merged_file, tmp_path / 'merged.pth')
    record = read_backbone_checkpoint(str(tmp_path / 'merged.pth')).record
    assert (record.family, record.form) == ('swin', 'merged')
    assert record.spec == merged.prune_spec
    assert record.arch['out_indices'] == [3]  # the official final norm
    assert HetDPTSwin.from_record(record).build_args() == record.arch
    detector_backbone = loaded(tmp_path / 'merged.pth')
    assert detector_backbone.form == 'merged'
    with torch.no_grad():
        assert_outputs_close(detector_backbone(x)[3:], merged(x)[3:])


def test_multi_scale_outputs_and_frozen_stages():
    backbone = swin(frozen_stages=2)
    shapes = [tuple(out.shape) for out in backbone(images(*ODD_SIZE))]
    assert shapes == [
        (2, 16, 15, 21),
        (2, 32, 8, 11),
        (2, 64, 4, 6),
        (2, 128, 2, 3),
    ]
    backbone.train()
    frozen = [
        backbone.patch_embed,
        backbone.stages[0],
        backbone.stages[1],
        backbone.norm0,
        backbone.norm1,
    ]
    assert all(not m.training for m in frozen)
    assert all(not p.requires_grad for m in frozen for p in m.parameters())
    assert backbone.stages[2].training and backbone.norm2.weight.requires_grad
    # Frozen stages stay frozen when loaded weights rebuild the blocks.
    merged = swin(prune_spec=SMALL_SPEC, merged=True)
    backbone.load_state_dict(merged.state_dict())
    assert backbone.form == 'merged'
    assert not any(p.requires_grad for p in backbone.stages[0].parameters())
    with pytest.raises(ValueError, match='frozen_stages must be in -1..4'):
        swin(frozen_stages=5)
    with pytest.raises(ValueError, match='out_indices'):
        swin(out_indices=(4,))


def test_with_cp_matches_and_analytic_macs():
    backbone = randomize_(swin(with_cp=True)).train()
    x = images(32, 32)
    out = backbone(x)[3]
    out.sum().backward()
    assert backbone.stages[0].blocks[0].attn.qkv.weight.grad is not None
    with torch.no_grad():
        assert_outputs_close((out,), (backbone.eval()(x)[3],))
    # MACs per block: Swin-B at 224, 15.4 G dense as published.
    base = HetDPTSwin(arch='base')
    assert abs(analytic_macs(base, (224, 224)) / 1e9 - 15.4) < 0.1


def test_relative_position_bias_table_resizing(tmp_path):
    table = torch.randn(13 * 13, 2)
    assert resize_relative_position_bias_table(table, 7) is table
    constant = torch.full((13 * 13, 2), 0.5)
    resized = resize_relative_position_bias_table(constant, 12)
    assert resized.shape == (23 * 23, 2)
    torch.testing.assert_close(resized, torch.full((23 * 23, 2), 0.5))
    # Window-7 weights into a window-12 backbone (as the 384² models).
    torch.save(timm_state_dict(randomize_(swin())), tmp_path / 'w7.pth')
    backbone = loaded(tmp_path / 'w7.pth', window_size=12)
    assert backbone.stages[0].blocks[
        0
    ].attn.relative_position_bias_table.shape == (23 * 23, 2)
    assert backbone(images(96, 96))[0].shape == (2, 16, 24, 24)


@pytest.mark.parametrize(
    'name, stage_widths',
    [
        ('mask-rcnn_hetdpt_swin-t_fpn_1x_coco.py', [96, 192, 384, 768]),
        ('upernet_hetdpt_swin-b_ade20k.py', [128, 256, 512, 1024]),
    ],
)
def test_configs_with_a_small_merged_swin(name, stage_widths, tmp_path):
    """The configs as written (mmdet's / mmseg's Swin configs, their
    backbone dict with only its type and checkpoint changed) with a small
    merged Swin in place of the real one: they build through the toolbox,
    pad small maps as the toolbox does, take the checkpoint's structure and
    predict."""
    cfg = Config.fromfile(ROOT / 'configs' / name)
    backbone_cfg = cfg.model.backbone
    assert backbone_cfg.type == 'HetDPTSwin' and 'arch' not in backbone_cfg
    neck_or_head = cfg.model.get('neck') or cfg.model.decode_head
    assert list(neck_or_head.in_channels) == stage_widths
    merged = swin(prune_spec=SMALL_SPEC, merged=True)
    torch.save(
        dict(
            state_dict={
                f'backbone.{k}': v for k, v in merged.state_dict().items()
            }
        ),
        tmp_path / 'merged.pth',
    )
    backbone_cfg.update(SMALL_ARCH)  # the stock dict's own keys
    backbone_cfg.init_cfg.checkpoint = str(tmp_path / 'merged.pth')
    widths = [16, 32, 64, 128]
    if 'neck' in cfg.model:
        cfg.model.neck.in_channels = widths
    else:
        cfg.model.decode_head.in_channels = widths
        cfg.model.auxiliary_head.in_channels = widths[2]
    model = build_from_config(cfg)
    model.init_weights()
    assert model.backbone.form == 'merged' and model.backbone.pad_small_map
    assert model.backbone.prune_spec == merged.prune_spec
    with torch.no_grad():
        results = model.test_step(
            make_test_batch(cfg.default_scope, 1, (96, 128))
        )
    assert len(results) == 1


def test_backbone_benchmark_of_a_swin():
    """tools/benchmark.py backbone --family swin: traced matrix-product MACs
    equal the per-block analytic ones in every form."""
    options = resolve_options(
        BenchmarkOptions(
            'backbone',
            family='swin',
            arch=json.dumps(SMALL_ARCH),
            spec=json.dumps(SMALL_SPEC),
            img_size=[64],
            batch_size=1,
            repeats=1,
            warmup=0,
            threads=1,
        )
    )
    result = run_benchmark(options)
    dense, pruned, merged = result['models']
    for model in result['models']:
        assert model['macs']['matmul'] == model['backbone_analytic_macs']
    assert merged['speedup']['macs'] > pruned['speedup']['macs'] > 1.0
    assert merged['description'].startswith('HetDPTSwin pruned and merged')
    with pytest.raises(UsageError, match='--family swin is for the backbone'):
        resolve_options(BenchmarkOptions('upernet', family='swin'))
    with pytest.raises(UsageError, match='give its --spec'):
        resolve_options(BenchmarkOptions('backbone', family='swin'))


def layer_location(name: str) -> str:
    """What a parameter belongs to, in both Swin layouts: a block
    (``stages.s.blocks.j``), a patch merging (``stages.s.downsample``) or
    a top-level module (``patch_embed``, ``norm3``, ``head``)."""
    parts = name.split('.')
    if parts[1] == 'stages':
        return '.'.join(parts[1:5] if parts[3] == 'blocks' else parts[1:4])
    return parts[1] if parts[0] == 'backbone' else parts[0]


def swin_classifiers(**structure):
    """The same small Swin as mmpretrain's ``SwinTransformer`` and as ours
    (``structure``: HetDPT form and spec) in mmpretrain classifiers."""
    from mmengine.registry import DefaultScope
    from mmpretrain.registry import MODELS

    models = []
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        for backbone in (
            dict(
                type='SwinTransformer',
                arch=SMALL_ARCH,
                img_size=32,
                out_indices=(0, 1, 2, 3),
            ),
            dict(
                type='HetDPTSwin',
                arch=SMALL_ARCH,
                out_indices=(0, 1, 2, 3),
                **structure,
            ),
        ):
            models.append(
                MODELS.build(
                    dict(
                        type='ImageClassifier',
                        backbone=backbone,
                        neck=dict(type='GlobalAveragePooling'),
                        head=dict(
                            type='LinearClsHead',
                            num_classes=10,
                            in_channels=128,
                        ),
                    )
                )
            )
    return models


@pytest.mark.parametrize(
    'structure',
    [
        {},
        dict(prune_spec=SMALL_SPEC),
        dict(prune_spec=SMALL_SPEC, merged=True),
        dict(gated=True),
    ],
)
def test_get_layer_depth_follows_mmpretrain_swin(structure):
    """Every parameter gets the depth mmpretrain's SwinTransformer gives the
    same module (patch embedding 0, block = its global index + 1, patch
    merging = its stage's last block, output norms and head the last of
    depth + 2); removed layers change no depth."""
    reference, model = swin_classifiers(**structure)
    expected = {}
    for name, _ in reference.named_parameters():
        depth = reference.get_layer_depth(name)
        # Names are the same where the modules are (our rule on theirs).
        assert model.get_layer_depth(name) == depth, name
        assert expected.setdefault(layer_location(name), depth) == depth
    ours = {
        name: model.get_layer_depth(name)
        for name, _ in model.named_parameters()
    }
    assert {layer_location(name) for name in ours} == set(expected)
    for name, depth in ours.items():
        assert depth == expected[layer_location(name)], name
    # 8 blocks of 2 + 2 + 2 + 2: depths 0 .. 9.
    backbone = model.backbone
    assert backbone.get_layer_depth('patch_embed.proj.weight') == (0, 10)
    assert backbone.get_layer_depth('stages.0.blocks.0.norm1.weight') == (
        1,
        10,
    )
    assert backbone.get_layer_depth(
        'backbone.stages.1.blocks.1.mlp.fc2.weight', 'backbone.'
    ) == (4, 10)
    assert backbone.get_layer_depth(
        'stages.1.downsample.reduction.weight'
    ) == (4, 10)
    assert backbone.get_layer_depth('stages.3.blocks.1.norm2.bias') == (8, 10)
    assert backbone.get_layer_depth('norm3.weight') == (9, 10)
    assert backbone.get_layer_depth('head.fc.weight', 'backbone.') == (9, 10)


def test_layer_decay_of_a_swin_with_both_constructors():
    """mmpretrain's constructor (through the classifier) and ours (for
    models without get_layer_depth, as mmdet's and mmseg's) give every
    module the learning rate mmpretrain gives its own Swin's."""
    from mmengine.optim import build_optim_wrapper
    from mmengine.registry import DefaultScope

    decay = 0.5

    def lrs(model, constructor):
        with DefaultScope.overwrite_default_scope('mmpretrain'):
            wrapper = build_optim_wrapper(
                model,
                dict(
                    optimizer=dict(type='AdamW', lr=1.0, weight_decay=0.05),
                    constructor=constructor,
                    paramwise_cfg=dict(layer_decay_rate=decay),
                ),
            )
        return {
            group['param_name']: group['lr']
            for group in wrapper.optimizer.param_groups
        }

    reference, model = swin_classifiers(prune_spec=SMALL_SPEC, merged=True)
    expected = {
        layer_location(name): lr
        for name, lr in lrs(
            reference, 'LearningRateDecayOptimWrapperConstructor'
        ).items()
    }
    assert expected['stages.0.blocks.0'] == pytest.approx(decay**8)
    assert expected['head'] == 1.0

    class Segmentor(torch.nn.Module):  # no get_layer_depth
        def __init__(self, backbone, head):
            super().__init__()
            self.backbone, self.head = backbone, head

    for built, constructor in (
        (model, 'LearningRateDecayOptimWrapperConstructor'),
        (
            Segmentor(model.backbone, model.head),
            'HetDPTLayerDecayOptimWrapperConstructor',
        ),
    ):
        found = lrs(built, constructor)
        assert 'backbone.stages.0.blocks.1.mlp.fc.weight' in found
        for name, lr in found.items():
            assert lr == pytest.approx(expected[layer_location(name)]), name


def write_fake_imagenet(root: Path, num_images: int = 4) -> None:
    """mmpretrain's ImageNet layout (``meta/{split}.txt`` and the images
    it lists) with a few small random images."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for split in ('train', 'val'):
        (root / split / 'n0').mkdir(parents=True)
        lines = []
        for index in range(num_images):
            name = f'n0/{index}.JPEG'
            Image.fromarray(
                rng.integers(0, 256, (40, 48, 3), dtype=np.uint8)
            ).save(root / split / name)
            lines.append(f'{name} {index}')
        (root / 'meta').mkdir(exist_ok=True)
        (root / 'meta' / f'{split}.txt').write_text('\n'.join(lines) + '\n')


#: Swin-S/B's 24 blocks (2 + 2 + 18 + 2) at SMALL_ARCH's widths.
TALL_ARCH = dict(SMALL_ARCH, depths=[2, 2, 18, 2])


def run_on_a_narrow_swin(cfg: Config, tmp_path: Path, monkeypatch) -> dict:
    """Point an ImageNet Swin config at a narrow 24-block Swin classifier in
    official layout (heads included; its state is returned) and at four fake
    ImageNet images, for one epoch without validation."""
    state = timm_state_dict(randomize_(swin(arch=TALL_ARCH)))
    state['head.weight'] = torch.randn(1000, 128) * 0.02
    state['head.bias'] = torch.zeros(1000)
    torch.save(official_layout(state), tmp_path / 'official.pth')
    cfg.model.backbone.update(
        arch=TALL_ARCH,
        init_cfg=dict(
            type='Pretrained', checkpoint=str(tmp_path / 'official.pth')
        ),
    )
    cfg.model.head.update(
        in_channels=128,
        init_cfg=dict(
            type='PretrainedHeads', checkpoint=str(tmp_path / 'official.pth')
        ),
    )
    write_fake_imagenet(tmp_path / 'imagenet')
    for loader in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
        cfg[loader].update(
            batch_size=4, num_workers=0, persistent_workers=False
        )
        cfg[loader].dataset.data_root = str(tmp_path / 'imagenet')
    cfg.train_cfg.update(max_epochs=1, val_interval=1000)
    cfg.param_scheduler = None
    cfg.default_hooks.checkpoint.interval = 1000
    cfg.work_dir = str(tmp_path / 'work_dir')
    # The runner logs and dumps its config formatted by yapf: seconds for
    # these configs, and nothing here reads it.
    monkeypatch.setattr(
        Config, 'pretty_text', property(lambda config: str(config.to_dict()))
    )
    return state


@pytest.mark.parametrize(
    'name, arch, drop_path, width, counts, last',
    [
        ('swin-s_prune-10l_in1k.py', 'small', 0.3, 768, (6, 4), 120),
        ('swin-b_prune-17l_in1k.py', 'base', 0.5, 1024, (8, 9), 136),
    ],
)
def test_imagenet_prune_configs_train(
    name, arch, drop_path, width, counts, last, tmp_path, monkeypatch
):
    """The Swin-S / Swin-B prune configs as written (mmpretrain's Swin
    recipes, backbone swapped for a gated HetDPTSwin, MAP budget, prune and
    merge hooks) with a narrow 24-block Swin in official layout (heads
    included) in place of the real one: they build, MAP splits the budget
    over the 24 blocks, and one training step (4 fake images) removes them
    and writes the merged checkpoint."""
    from hetdpt_mm.runner import build_runner

    cfg = Config.fromfile(ROOT / 'configs/hetdpt' / name)
    backbone_cfg = cfg.model.backbone
    assert (
        backbone_cfg.type,
        backbone_cfg.arch,
        backbone_cfg.gated,
        backbone_cfg.drop_path_rate,
    ) == ('HetDPTSwin', arch, True, drop_path)
    assert cfg.model.head.in_channels == width
    assert cfg.model_wrapper_cfg.find_unused_parameters is True
    custom_keys = cfg.optim_wrapper.paramwise_cfg.custom_keys
    assert custom_keys['hetdpt_score'] == dict(decay_mult=0.0)
    assert custom_keys['.relative_position_bias_table'] == dict(decay_mult=0.0)
    assert cfg.optim_wrapper.clip_grad == dict(max_norm=5.0)
    assert cfg.train_cfg.max_epochs == 300
    prune, merge = cfg.custom_hooks
    assert (prune.type, prune.budget, merge.type) == (
        'HetDPTPruneHook',
        sum(counts),
        'MergeCheckpointHook',
    )
    hook = HetDPTPruneHook(**{k: v for k, v in prune.items() if k != 'type'})
    # Epoch after which the last removal happens: inside the 300 epochs.
    assert hook.schedule.iterations(sum(counts), 1)[-1] == last

    state = run_on_a_narrow_swin(cfg, tmp_path, monkeypatch)
    # Every removal after the first step (the progressive schedule's
    # stages are checked above).
    cfg.custom_hooks[0] = dict(
        type='HetDPTPruneHook',
        map_points=str(ROOT / prune.map_points),
        budget=prune.budget,
        schedule='epoch',
        prune_epoch=1,
    )
    runner = build_runner(cfg)
    runner.train()
    # The official head was loaded (and took one AdamW step of lr 1e-3).
    torch.testing.assert_close(
        runner.model.head.fc.weight, state['head.weight'], atol=3e-3, rtol=0
    )
    spec = runner.model.backbone.prune_spec
    assert (len(spec.attn_removed), len(spec.act_removed)) == counts
    merged = read_backbone_checkpoint(
        str(tmp_path / 'work_dir' / name.replace('.py', '_merged.pth'))
    )
    assert merged.record.form == 'merged' and merged.record.spec == spec


FINETUNE_CONFIGS = {
    'swin-s_finetune-10l_in1k.py': 'swin-s_prune-10l_in1k.py',
    'swin-b_finetune-17l_in1k.py': 'swin-b_prune-17l_in1k.py',
}


def test_imagenet_finetune_configs_train(tmp_path, monkeypatch):
    """The fixed-spec Swin configs (the paper's rows as guessed specs,
    tests/test_swin_paper_rows.py): the prune config's recipe without
    gates or prune hook; with a narrow 24-block Swin in official layout,
    one training step of Swin-B's pruned form (Swin-S's config differs in
    its spec only), and the merged checkpoint has the config's spec."""
    from hetdpt_mm.runner import build_runner

    for name, prune_config in FINETUNE_CONFIGS.items():
        cfg = Config.fromfile(ROOT / 'configs/hetdpt' / name)
        prune_cfg = Config.fromfile(ROOT / 'configs/hetdpt' / prune_config)
        assert cfg.optim_wrapper == prune_cfg.optim_wrapper
        assert cfg.train_cfg == prune_cfg.train_cfg
        assert cfg.model.head == prune_cfg.model.head
        backbone = dict(
            prune_cfg.model.backbone,
            gated=False,
            prune_spec=cfg.model.backbone.prune_spec,
        )
        assert cfg.model.backbone == backbone
        assert [hook.type for hook in cfg.custom_hooks] == [
            'MergeCheckpointHook'
        ]
        assert 'find_unused_parameters' not in cfg.model_wrapper_cfg
    spec = PruneSpec.coerce(cfg.model.backbone.prune_spec, 24)
    run_on_a_narrow_swin(cfg, tmp_path, monkeypatch)
    runner = build_runner(cfg)
    runner.train()
    assert runner.model.backbone.form == 'pruned'
    merged = read_backbone_checkpoint(
        str(tmp_path / 'work_dir' / name.replace('.py', '_merged.pth'))
    )
    assert merged.record.form == 'merged' and merged.record.spec == spec


@pytest.mark.parametrize(
    'name, arch, width, prune_config',
    [
        (
            'swin-s_map-collect_in1k.py',
            'small',
            768,
            'swin-s_prune-10l_in1k.py',
        ),
        (
            'swin-b_map-collect_in1k.py',
            'base',
            1024,
            'swin-b_prune-17l_in1k.py',
        ),
    ],
)
def test_map_collect_configs_collect(
    name, arch, width, prune_config, tmp_path, monkeypatch
):
    """The Swin MAP collection configs: the prune config's model (official
    dense classifier, heads included) under MAPCollectHook, as many steps as
    the prune budget, at a constant learning rate on a fixed subset; with a
    narrow Swin in official layout, one step writes the dense point and
    the first removal's."""
    from hetdpt_mm.runner import build_runner

    cfg = Config.fromfile(ROOT / 'configs/hetdpt' / name)
    prune_cfg = Config.fromfile(ROOT / 'configs/hetdpt' / prune_config)
    assert (cfg.model.backbone.arch, cfg.model.head.in_channels) == (
        arch,
        width,
    )
    assert (
        cfg.model.backbone.init_cfg.checkpoint
        == prune_cfg.model.backbone.init_cfg.checkpoint
    )
    assert (
        cfg.model.backbone.drop_path_rate
        == prune_cfg.model.backbone.drop_path_rate
    )
    (hook,) = cfg.custom_hooks
    assert (hook.type, hook.schedule, hook.max_removed) == (
        'MAPCollectHook',
        'interleaved',
        prune_cfg.budget,
    )
    assert cfg.train_cfg.max_epochs == hook.interval * hook.max_removed
    assert cfg.param_scheduler == [
        dict(type='ConstantLR', factor=1.0, by_epoch=True)
    ]
    assert cfg.train_dataloader.sampler.subset == 0.1

    run_on_a_narrow_swin(cfg, tmp_path, monkeypatch)
    cfg.custom_hooks[0].update(
        interval=1, max_removed=1, calib_images=4, calib_batch_size=4
    )
    cfg.train_dataloader.sampler.subset = 4
    build_runner(cfg).train()
    points = (tmp_path / 'work_dir' / 'map_points.csv').read_text()
    assert len(points.strip().splitlines()) == 3  # header, dense, one step
