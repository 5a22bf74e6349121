"""HetDPT+ (issue 17): per-block widths in the structure record, width
pruning with Torch-Pruning's isomorphic pruning, and the result rebuilt from
its checkpoint alone (classification, DETR, UperNet).

Tiny 12-block ViTs (the DETR / UperNet configs' out_indices need 12 blocks)
with random weights, one thread: the whole file takes seconds.
"""

import json
from dataclasses import replace

import pytest
import torch
from helpers import (
    MIXED_SPEC,
    REPO,
    TINY_DEIT_ARCH,
    TINY_DEIT_CLASSES,
    TINY_DEIT_DIMS,
    TINY_DEIT_PATCH,
    build_model,
    detection_batch,
    load_tool,
    randomize_,
    segmentation_batch,
    write_tiny_config,
    write_tiny_deit_inputs,
)
from mmengine.config import Config
from mmengine.optim import build_optim_wrapper
from mmengine.registry import DefaultScope

from hetdpt_mm import PruneSpec
from hetdpt_mm.analysis import count_macs, count_params
from hetdpt_mm.checkpoint.reader import (
    read_backbone_checkpoint,
    read_classifier_heads,
)
from hetdpt_mm.checkpoint.record import with_record
from hetdpt_mm.checkpoint.safe_load import load_checkpoint_file
from hetdpt_mm.models import HetDPTViT
from hetdpt_mm.pruning.width import LinearHeads, prune_width, read_widths
from hetdpt_mm.pruning.width_checkpoint import (
    linear_heads,
    prune_width_checkpoint,
)
from hetdpt_mm.registry import FAMILIES
from hetdpt_mm.runner import follow_backbone_width
from hetdpt_mm.spec import Widths

pytestmark = pytest.mark.usefixtures('one_thread')

TINY = dict(embed_dims=48, num_layers=12, num_heads=4, mlp_ratio=2.0)
IMG = 32
#: depth-only: the merged HetDPT network at its own widths; width-only:
#: the dense one pruned in width (the paper's baseline); depth+width: HetDPT+.
CASES = {
    'depth-only': (MIXED_SPEC, None),
    'width-only': (None, 0.5),
    'depth+width': (MIXED_SPEC, 0.5),
}


def tiny_classifier_checkpoint(spec, seed=0):
    """A distilled tiny ViT classifier checkpoint (mmpretrain layout: the
    backbone under backbone., both DeiT heads)."""
    backbone = randomize_(
        HetDPTViT(
            arch=TINY,
            img_size=IMG,
            patch_size=16,
            distilled=True,
            prune_spec=spec,
            merged=spec is not None,
        ),
        seed,
    )
    generator = torch.Generator().manual_seed(seed)
    state = {'backbone.' + k: v for k, v in backbone.state_dict().items()}
    for name in ('head', 'head_dist'):
        state[f'head.layers.{name}.weight'] = (
            torch.randn(10, TINY['embed_dims'], generator=generator) * 0.02
        )
        state[f'head.layers.{name}.bias'] = torch.zeros(10)
    return {'state_dict': state, 'meta': {}}


def test_widths_validate_and_round_trip():
    widths = Widths(40, [2, 0, 3], [8, 0, 12], [64, 50, None])
    spec = PruneSpec(3, [1], [2], widths)
    assert PruneSpec.from_json(spec.to_json()) == spec
    assert PruneSpec.from_dict(spec.to_dict()).widths.block(2) == (3, 12, None)
    assert 'widths' not in PruneSpec(3, [1]).to_dict()  # old records
    with pytest.raises(ValueError, match='widths of blocks'):
        PruneSpec(3, [], [2], widths)
    with pytest.raises(ValueError, match='widths of blocks'):
        PruneSpec(3, [1], [], widths)
    with pytest.raises(ValueError, match='per block'):
        Widths(40, [2], [8, 8], [64])
    with pytest.raises(ValueError, match='before width pruning'):
        spec.with_removed('attn', 0)


@pytest.mark.parametrize('case', CASES)
def test_torch_pruning_model_equals_network_rebuilt_from_checkpoint(
    case, tmp_path
):
    spec, ratio = CASES[case]
    checkpoint = tiny_classifier_checkpoint(spec)
    path = tmp_path / 'plus.pth'
    pruned = HetDPTViT(
        arch=TINY,
        img_size=IMG,
        patch_size=16,
        distilled=True,
        prune_spec=spec,
        merged=spec is not None,
    )
    state = {
        k[len('backbone.') :]: v
        for k, v in checkpoint['state_dict'].items()
        if k.startswith('backbone.')
    }
    pruned.load_state_dict(state)
    if ratio is None:
        # No width pruning: the explicit widths alone go into the record.
        widths = read_widths(pruned)
        assert widths.num_heads == tuple(
            0 if i in MIXED_SPEC['attn_removed'] else 4 for i in range(12)
        )
        assert widths.ffn_hidden[2] is None and widths.ffn_hidden[0] == 96
        record = replace(
            pruned.record(), spec=pruned.prune_spec.with_widths(widths)
        )
        torch.save({'state_dict': with_record(state, record)}, path)
    else:
        # Torch-Pruning prunes `pruned` in place; the checkpoint holds the
        # network rebuilt from the record.
        heads = linear_heads(read_classifier_heads(checkpoint))
        calibration = [
            torch.randn(
                4, 3, IMG, IMG, generator=torch.Generator().manual_seed(i)
            )
            for i in range(2)
        ]
        result = prune_width(
            pruned,
            heads,
            ratio=ratio,
            importance='taylor',
            calibration=calibration,
        )
        torch.save({'state_dict': result.backbone.state_dict()}, path)
        widths = result.record.spec.widths
        assert widths.embed_dims < TINY['embed_dims']
        assert result.macs_after < result.macs_before / 2
        assert result.rebuild_error <= 1e-5
        assert heads['head_dist'].in_features == widths.embed_dims
        # MACs / params per stage, from the dense network of the same arch.
        dense = LinearHeads(
            HetDPTViT(
                arch=TINY,
                img_size=IMG,
                patch_size=16,
                distilled=True,
                out_type='cls_token',
            ),
            {name: torch.nn.Linear(TINY['embed_dims'], 10) for name in heads},
        )
        dense_cost = (
            count_macs(dense, torch.randn(1, 3, IMG, IMG)).total,
            count_params(dense),
        )
        stages = [(s.stage, s.macs, s.params) for s in result.stages]
        assert stages[0] == ('dense', *dense_cost)
        assert stages[-1] == (
            'width-pruned',
            result.macs_after,
            result.params_after,
        )
        if spec is None:
            assert len(stages) == 2 and dense_cost == (
                result.macs_before,
                result.params_before,
            )
        else:
            assert stages[1] == (
                'depth-pruned (merged)',
                result.macs_before,
                result.params_before,
            )
            assert result.macs_before < dense_cost[0]

    # From the file alone: a config names only the preset-free arch.
    from_file = HetDPTViT(
        arch=TINY,
        img_size=IMG,
        patch_size=16,
        distilled=True,
        init_cfg=dict(type='Pretrained', checkpoint=str(path)),
    )
    from_file.init_weights()
    assert from_file.prune_spec == read_backbone_checkpoint(path).record.spec
    images = torch.randn(3, 3, IMG, IMG)
    pruned.eval(), from_file.eval()
    with torch.no_grad():
        for got, want in zip(from_file(images)[0], pruned(images)[0]):
            assert (got - want).abs().max() <= 1e-5


def test_macs_target_with_magnitude_importance():
    backbone = randomize_(
        HetDPTViT(
            arch=TINY,
            img_size=IMG,
            patch_size=16,
            prune_spec=MIXED_SPEC,
            merged=True,
        )
    )
    heads = {'head': torch.nn.Linear(48, 10)}
    before = count_macs(
        LinearHeads(backbone, heads), torch.randn(1, 3, IMG, IMG)
    ).total
    target = 0.5 * before
    result = prune_width(
        backbone,
        heads,
        target_macs=target,
        importance='magnitude',
        max_ratio=0.8,
        search_steps=4,
    )
    assert result.macs_before == before
    # The smallest ratio tried that meets the target is the one applied.
    assert result.macs_after <= target
    meeting = [t.ratio for t in result.trials if t.macs <= target]
    assert result.ratio == min(meeting)
    assert all(
        t.macs > target for t in result.trials if t.ratio < min(meeting)
    )
    assert len(result.trials) <= 5  # trials emptying an attention: none
    assert result.rebuild_error <= 1e-5
    with pytest.raises(ValueError, match='not reached'):
        prune_width(
            randomize_(HetDPTViT(arch=TINY, img_size=IMG, patch_size=16)),
            target_macs=1e3,
            importance='magnitude',
            max_ratio=0.2,
        )


def test_prune_width_tool(tmp_path, capsys):
    source = tmp_path / 'merged.pth'
    torch.save(tiny_classifier_checkpoint(MIXED_SPEC), source)
    tool = load_tool('prune_width')
    out = tmp_path / 'plus.pth'
    assert (
        tool.main(
            [
                str(source),
                str(source),
                '--ratio',
                '0.3',
                '--importance',
                'magnitude',
            ]
        )
        == 2
    )
    assert 'same file' in capsys.readouterr().err
    assert tool.main([str(source), str(out), '--ratio', '0.3']) == 2
    assert '--calib-dir' in capsys.readouterr().err
    plot, report = tmp_path / 'widths.png', tmp_path / 'report.json'
    assert (
        tool.main(
            [
                str(source),
                str(out),
                '--ratio',
                '0.3',
                '--importance',
                'magnitude',
                '--plot',
                str(plot),
                '--report',
                str(report),
                '--macs-convention',
                'without-attention-products',
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert 'MACs (without-attention-products)' in printed
    assert (
        json.loads(report.read_text())['macs_convention']
        == 'without-attention-products'
    )
    assert '| block | attention | heads x dim | FFN |' in printed
    assert '| depth-pruned (merged) |' in printed
    assert plot.read_bytes().startswith(b'\x89PNG')
    stages = json.loads(report.read_text())['stages']
    assert [s['stage'] for s in stages] == [
        'dense',
        'depth-pruned (merged)',
        'width-pruned',
    ]
    assert stages[0]['macs'] > stages[1]['macs'] > stages[2]['macs']
    assert read_backbone_checkpoint(out).record.spec.widths is not None
    assert (
        tool.main(
            [
                str(source),
                str(out),
                '--ratio',
                '0.3',
                '--importance',
                'magnitude',
            ]
        )
        == 2
    )  # exists
    assert 'already exists' in capsys.readouterr().err


@pytest.mark.parametrize('family', ['swin', 'layerscale_vit'])
def test_families_without_width_pruning_are_named(family, tmp_path, capsys):
    """A Swin or DINOv2 checkpoint is an ``error:`` line, not a TypeError
    from deep in Torch-Pruning."""
    cls = FAMILIES[family]
    source = tmp_path / 'merged.pth'
    torch.save(
        dict(
            state_dict={
                f'backbone.{k}': v
                for k, v in cls(**cls.SMALL_ARGS).state_dict().items()
            }
        ),
        source,
    )
    code = load_tool('prune_width').main(
        [
            str(source),
            str(tmp_path / 'plus.pth'),
            '--ratio',
            '0.3',
            '--importance',
            'magnitude',
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(f'error: {source}: no width pruning')
    assert sorted(p.name for p in tmp_path.iterdir()) == ['merged.pth']


@pytest.fixture(scope='module')
def plus_checkpoint(tmp_path_factory):
    """A HetDPT+ classification checkpoint of the tiny ViT."""
    out, result = prune_width_checkpoint(
        tiny_classifier_checkpoint(MIXED_SPEC),
        ratio=0.4,
        importance='magnitude',
    )
    widths = result.record.spec.widths
    assert out['meta']['hetdpt']['spec']['widths'] == widths.to_dict()
    assert out['meta']['hetdpt']['prefix'] == 'backbone.'
    # The heads' inputs followed the embedding width.
    assert out['state_dict']['head.layers.head_dist.weight'].shape == (
        10,
        widths.embed_dims,
    )
    path = tmp_path_factory.mktemp('plus') / 'plus.pth'
    torch.save(out, path)
    return path, out['meta']['hetdpt']['spec']['widths']['embed_dims']


def dense_prediction_step(config, checkpoint, data):
    """The config as shipped, only the checkpoint swapped (and the tiny
    arch for the 'deit-base' it names): its neck takes the embedding width
    of the checkpoint, and the model trains one step."""
    path, embed_dims = checkpoint
    cfg = Config.fromfile(f'configs/{config}')
    cfg.model.backbone.update(arch=TINY)
    cfg.model.backbone.init_cfg.checkpoint = str(path)
    if 'size' in cfg.model.data_preprocessor:  # mmseg pads to its crop
        cfg.model.data_preprocessor.size = (64, 64)
    follow_backbone_width(cfg)
    assert set(cfg.model.neck.in_channels) == {embed_dims}
    model = build_model(cfg)
    model.init_weights()
    assert model.backbone.embed_dims == embed_dims
    assert model.backbone.prune_spec.widths is not None
    with DefaultScope.overwrite_default_scope(cfg.default_scope):
        optim_wrapper = build_optim_wrapper(model, cfg.optim_wrapper)
    model.train()
    log_vars = model.train_step(data, optim_wrapper)
    assert torch.isfinite(log_vars['loss']) and log_vars['loss'] > 0


def test_detr_trains_on_hetdpt_plus_checkpoint(plus_checkpoint):
    dense_prediction_step(
        'detr_hetdpt_deit_b.py',
        plus_checkpoint,
        detection_batch([(64, 96), (80, 64)], 80),
    )


def test_upernet_trains_on_hetdpt_plus_checkpoint(plus_checkpoint):
    dense_prediction_step(
        'upernet_hetdpt_deit_b_ade20k.py',
        plus_checkpoint,
        segmentation_batch([(64, 64), (64, 64)], 150),
    )


def test_unmerged_width_pruned_checkpoint_merges():
    """Width pruning of the unmerged (pruned-form) network keeps the hidden
    widths of its activation-free FFNs; tools/merge_ckpt.py then merges
    them."""
    from hetdpt_mm.merge import merge_checkpoint

    backbone = randomize_(
        HetDPTViT(
            arch=TINY, img_size=IMG, patch_size=16, prune_spec=MIXED_SPEC
        )
    )
    result = prune_width(backbone, ratio=0.4, importance='magnitude')
    assert result.record.spec.widths.ffn_hidden[2] is not None
    merged, _ = merge_checkpoint({'state_dict': result.backbone.state_dict()})
    network = HetDPTViT(arch=TINY, img_size=IMG, patch_size=16)
    network.load_state_dict(
        {k[9:]: v for k, v in merged['state_dict'].items()}  # 'backbone.'
    )
    assert network.form == 'merged'
    images = torch.randn(2, 3, IMG, IMG)
    network.eval(), result.backbone.eval()
    with torch.no_grad():
        torch.testing.assert_close(
            network(images)[0],
            result.backbone(images)[0],
            atol=1e-5,
            rtol=1e-4,
        )


@pytest.mark.parametrize('importance', ['magnitude', 'taylor'])
def test_width_prune_hook_writes_the_plus_model_after_depth_pruning(
    importance, tmp_path
):
    """WidthPruneHook: the run's merged classifier pruned in width, which a
    classification config (head in_channels from the checkpoint) loads
    whole."""
    from types import SimpleNamespace

    from mmengine.logging import MMLogger
    from mmengine.runner import load_checkpoint
    from mmpretrain.structures import DataSample

    from hetdpt_mm.hooks import WidthPruneHook

    model_cfg = dict(
        type='ImageClassifier',
        backbone=dict(
            type='HetDPTViT',
            arch=TINY,
            img_size=IMG,
            patch_size=16,
            prune_spec=MIXED_SPEC,
        ),
        head=dict(
            type='VisionTransformerClsHead',
            num_classes=10,
            in_channels=TINY['embed_dims'],
        ),
    )
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        classifier = randomize_(
            build_model(
                Config(dict(model=model_cfg, default_scope='mmpretrain'))
            )
        )
    generator = torch.Generator().manual_seed(0)
    batch = dict(
        inputs=[
            torch.randint(
                0, 256, (3, IMG, IMG), dtype=torch.uint8, generator=generator
            )
            for _ in range(4)
        ],
        data_samples=[DataSample().set_gt_label(i % 10) for i in range(4)],
    )
    runner = SimpleNamespace(
        model=classifier,
        epoch=1,
        iter=1,
        work_dir=str(tmp_path),
        cfg=Config(),
        logger=MMLogger.get_current_instance(),
        train_dataloader=type('Loader', (list,), {'dataset': None})(
            [batch, batch]
        ),
    )
    hook = WidthPruneHook(
        ratio=0.4, importance=importance, calib_images=4, name='tiny'
    )
    hook.before_train(runner)
    hook.after_train(runner)
    path = tmp_path / 'tiny_plus.pth'
    assert (
        (tmp_path / 'tiny_plus_widths.png').read_bytes().startswith(b'\x89PNG')
    )
    stages = torch.load(path)['meta']['hetdpt_width']['stages']
    assert [s['stage'] for s in stages] == [
        'dense',
        'depth-pruned (merged)',
        'width-pruned',
    ]
    record = read_backbone_checkpoint(path).record
    assert record.form == 'merged' and record.prefix == 'backbone.'
    embed_dims = record.spec.widths.embed_dims
    assert embed_dims < TINY['embed_dims']

    cfg = Config(dict(model=model_cfg, default_scope='mmpretrain'))
    cfg.model.backbone.update(
        prune_spec=None,
        init_cfg=dict(
            type='Pretrained', checkpoint=str(path), prefix='backbone.'
        ),
    )
    follow_backbone_width(cfg)
    assert cfg.model.head.in_channels == embed_dims
    plus = build_model(cfg)
    load_checkpoint(plus, str(path), strict=True)
    assert plus.backbone.prune_spec == record.spec
    with torch.no_grad():
        assert plus.eval()(
            torch.randn(2, 3, IMG, IMG), mode='tensor'
        ).shape == (2, 10)


def test_necks_follow_a_trained_model_when_the_start_is_gone(
    plus_checkpoint, tmp_path
):
    """tools/test.py with a detector trained from a HetDPT+ classifier that
    is no longer there: the width comes from the model it loads."""
    path, embed_dims = plus_checkpoint
    cfg = Config.fromfile('configs/detr_hetdpt_deit_b.py')
    cfg.model.backbone.init_cfg.checkpoint = str(tmp_path / 'gone.pth')
    cfg.load_from = str(path)  # holds the backbone under backbone.
    follow_backbone_width(cfg)
    assert cfg.model.neck.in_channels == [embed_dims]


# ------------------------------------------ configs/hetdpt_plus, tiny runs
PLUS_CONFIGS = REPO / 'configs' / 'hetdpt_plus'


@pytest.fixture(scope='module')
def tiny_deit(tmp_path_factory):
    root = tmp_path_factory.mktemp('plus_configs')
    return root, write_tiny_deit_inputs(root)


def train_tiny(
    config: str, root, start, teacher, schedule: bool = True, **hooks
) -> dict:
    """``configs/hetdpt_plus/<config>`` as written but tiny (one epoch of two
    iterations, helpers.write_tiny_config, no validation), with ``hooks``'
    arguments updated (by type), without its learning-rate ``schedule`` if
    told, run by tools/train.py; returns the epoch's checkpoint."""
    path = write_tiny_config(PLUS_CONFIGS / config, root, start, teacher)
    cfg = Config.fromfile(path)
    if not schedule:
        cfg.param_scheduler = None
    cfg.train_cfg.val_interval = 2  # no validation: what is checked trains
    for hook in cfg.get('custom_hooks', []):
        hook.update(hooks.get(hook.type, {}))
    cfg.dump(path)
    work_dir = root / path.stem
    assert load_tool('train').main(
        [str(path), '--work-dir', str(work_dir)]
    ) in (None, 0)
    return load_checkpoint_file(work_dir / 'epoch_1.pth')


def assert_fine_tuned(checkpoint, start, teacher):
    """The run trained the start's HetDPT+ network, heads of its width, with
    the teacher's weights loaded (and frozen)."""
    started = read_backbone_checkpoint(load_checkpoint_file(start))
    trained = read_backbone_checkpoint(checkpoint)
    record = trained.record
    assert record.spec == started.record.spec
    embed_dims = record.spec.widths.embed_dims
    state = checkpoint['state_dict']
    assert state['head.layers.head_dist.weight'].shape == (
        TINY_DEIT_CLASSES,
        embed_dims,
    )
    assert all(
        torch.isfinite(v).all()
        for v in state.values()
        if v.is_floating_point()
    )
    kept_attention = next(
        key for key in started.state if key.endswith('attn.qkv.weight')
    )
    assert not torch.equal(
        trained.state[kept_attention], started.state[kept_attention]
    )
    official = load_checkpoint_file(teacher)['model']
    assert torch.equal(
        state['teacher.backbone.blocks.1.attn.qkv.weight'],
        official['blocks.1.attn.qkv.weight'],
    )
    assert bool(state['teacher.hetdpt_ready'])


def test_one_run_plus_config_then_its_fine_tune(tiny_deit):
    """deit-b_prune-10l_plus-2.4g_in1k.py (depth pruning with the dense
    teacher, merge, WidthPruneHook) writes the HetDPT+ checkpoint that
    deit-b_plus-2.4g_finetune_in1k.py fine-tunes with distillation."""
    root, files = tiny_deit
    dense = LinearHeads(
        HetDPTViT(
            arch=TINY_DEIT_ARCH,
            patch_size=TINY_DEIT_PATCH,
            distilled=True,
            out_type='cls_token',
        ),
        {
            name: torch.nn.Linear(TINY_DEIT_DIMS, TINY_DEIT_CLASSES)
            for name in ('head', 'head_dist')
        },
    )
    # 2.4 G of DeiT-B's 17.7 G is too thin for a 48-wide ViT: 40 %, counted
    # as the config counts (without attention products).
    target = (
        0.4
        * count_macs(
            dense, torch.randn(1, 3, 224, 224), attention_products=False
        ).total
    )
    train_tiny(
        'deit-b_prune-10l_plus-2.4g_in1k.py',
        root,
        files['distilled'],
        files['dense'],
        schedule=False,  # its warm-up is 20 epochs
        # All ten removals within the run's two iterations.
        HetDPTPruneHook=dict(schedule='epoch', prune_epoch=1, stages=None),
        WidthPruneHook=dict(target_macs=target, search_steps=3),
    )
    plus = (
        root
        / 'deit-b_prune-10l_plus-2.4g_in1k'
        / 'deit-b_prune-10l_plus-2.4g_in1k_plus.pth'
    )
    checkpoint = load_checkpoint_file(plus)
    record = read_backbone_checkpoint(checkpoint).record
    assert record.form == 'merged'
    assert (record.spec.n_attn, record.spec.n_act) == (5, 5)
    assert record.spec.widths.embed_dims < TINY_DEIT_DIMS
    assert not any(k.startswith('teacher.') for k in checkpoint['state_dict'])
    stages = checkpoint['meta']['hetdpt_width']['stages']
    assert [s['stage'] for s in stages] == [
        'dense',
        'depth-pruned (merged)',
        'width-pruned',
    ]
    assert stages[-1]['macs'] <= target < stages[1]['macs']
    assert (
        checkpoint['meta']['hetdpt_width']['macs_convention']
        == 'without-attention-products'
    )

    assert_fine_tuned(
        train_tiny(
            'deit-b_plus-2.4g_finetune_in1k.py', root, plus, files['dense']
        ),
        plus,
        files['dense'],
    )


def test_width_only_fine_tune_config(tiny_deit):
    """deit-b_width-only-2.6g_finetune_in1k.py from the official distilled
    file pruned in width by tools/prune_width.py's function."""
    root, files = tiny_deit
    pruned, _ = prune_width_checkpoint(
        load_checkpoint_file(files['distilled']),
        arch=TINY_DEIT_ARCH,
        ratio=0.3,
        importance='magnitude',
    )
    start = root / 'width-only.pth'
    torch.save(pruned, start)
    assert_fine_tuned(
        train_tiny(
            'deit-b_width-only-2.6g_finetune_in1k.py',
            root,
            start,
            files['dense'],
        ),
        start,
        files['dense'],
    )
