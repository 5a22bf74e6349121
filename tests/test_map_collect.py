"""MAP data collection: TE score, subset sampler, MAPCollectHook (issue 4)."""

import csv
import math
import shutil
import uuid

import pytest
import torch
from helpers import randomize_
from mmengine.config import Config
from mmengine.runner import Runner

from hetdpt_demo.data import make_classification
from hetdpt_mm.checkpoint.safe_load import load_checkpoint_file
from hetdpt_mm.errors import UsageError
from hetdpt_mm.hooks.map_collect_hook import (
    POINT_COLUMNS,
    STATE_KEY,
    MAPCollectHook,
    SubsetSampler,
    select_subset,
)
from hetdpt_mm.models import HetDPTViT
from hetdpt_mm.pruning import load_points
from hetdpt_mm.pruning.schedules import build_collect_schedule
from hetdpt_mm.pruning.transfer_entropy import (
    class_features,
    gaussian_entropy,
    te_select,
)

TINY_ARCH = dict(embed_dims=48, num_layers=4, num_heads=3, mlp_ratio=2)
DEPTH = TINY_ARCH['num_layers']


pytestmark = pytest.mark.usefixtures('one_thread')


# ------------------------------------------------------------------ TE score
def test_gaussian_entropy_is_sum_of_log_stds():
    stds = torch.tensor([0.5, 1.0, 2.0, 7.0], dtype=torch.float64)
    means = torch.tensor([3.0, -1.0, 0.0, 10.0], dtype=torch.float64)
    # +-std around the mean: the population std is exactly `stds`.
    signs = torch.tensor([1.0, -1.0] * 50, dtype=torch.float64)[:, None]
    features = means + signs * stds
    assert gaussian_entropy(features) == pytest.approx(
        float(torch.log(stds).sum()), abs=1e-12
    )
    # Scaling every channel by s adds C * log(s); shifting changes nothing.
    assert gaussian_entropy(3 * features + 5) == pytest.approx(
        gaussian_entropy(features) + 4 * math.log(3), abs=1e-9
    )
    # Sampled Gaussians estimate the same value.
    sampled = (
        torch.randn(
            200_000,
            4,
            generator=torch.Generator().manual_seed(0),
            dtype=torch.float64,
        )
        * stds
        + means
    )
    assert gaussian_entropy(sampled) == pytest.approx(
        float(torch.log(stds).sum()), abs=0.02
    )


def test_gaussian_entropy_rejects_bad_shapes():
    with pytest.raises(ValueError, match='N x C'):
        gaussian_entropy(torch.zeros(4, 3, 2))
    with pytest.raises(ValueError, match='N >= 2'):
        gaussian_entropy(torch.zeros(1, 3))


def tiny_gated_backbone(**kwargs):
    backbone = HetDPTViT(
        TINY_ARCH, img_size=32, patch_size=8, gated=True, **kwargs
    )
    return randomize_(backbone, std=0.2)


def calibration_batches():
    generator = torch.Generator().manual_seed(1)
    return [torch.randn(16, 3, 32, 32, generator=generator) for _ in range(2)]


@pytest.mark.parametrize('kind,block', [('attn', 2), ('act', 1)])
def test_te_removes_the_layer_that_changes_the_entropy_least(kind, block):
    # A removed attention contributes nothing here ('zero'), so an attention
    # with a zero output projection is exactly a removed one; an FFN whose
    # fc2 is zero outputs its bias with or without the GELU.  Removing that
    # layer leaves the features, hence H, unchanged.
    backbone = tiny_gated_backbone(removed_attn_output='zero').train()
    with torch.no_grad():
        if kind == 'attn':
            backbone.blocks[block].attn.proj.weight.zero_()
            backbone.blocks[block].attn.proj.bias.zero_()
        else:
            backbone.blocks[block].mlp.fc2.weight.zero_()
    backbone.set_spec(
        dict(act_removed=[3]) if kind == 'attn' else dict(attn_removed=[0])
    )
    before = backbone.prune_spec
    batches = calibration_batches()

    selection = te_select(backbone, batches, kind)

    assert selection.chosen.index == block
    assert selection.chosen.score == 0.0
    others = [c for c in selection.candidates if c.index != block]
    assert [c.index for c in selection.candidates] == list(range(DEPTH))
    assert min(c.score for c in others) > 1e-2
    # Scoring leaves the gates and the train mode as they were.
    assert backbone.prune_spec == before and backbone.training
    # Each score is |H(candidate removed) - H(current)|, recomputed by hand.
    backbone.eval()
    base = gaussian_entropy(class_features(backbone, batches))
    assert selection.base_entropy == pytest.approx(base, abs=1e-9)
    trial = others[0]
    backbone.set_spec(before.with_removed(kind, trial.index))
    removed = gaussian_entropy(class_features(backbone, batches))
    assert trial.score == pytest.approx(abs(removed - base), abs=1e-9)
    marked = [
        line
        for line in selection.format_table().splitlines()
        if line.endswith('<- removed')
    ]
    assert len(marked) == 1 and int(marked[0].split()[0]) == block


def test_te_select_errors():
    backbone = tiny_gated_backbone()
    batches = calibration_batches()
    with pytest.raises(ValueError, match='unknown layer kind'):
        te_select(backbone, batches, 'mlp')
    with pytest.raises(ValueError, match=r'\[1, 2\] are not open'):
        backbone.set_spec(dict(attn_removed=[2]))
        te_select(backbone, batches, 'attn', candidates=[1, 2])
    backbone.set_spec(dict(attn_removed=list(range(DEPTH))))
    with pytest.raises(ValueError, match='attn candidates'):
        te_select(backbone, batches, 'attn')
    dense = HetDPTViT(TINY_ARCH, img_size=32, patch_size=8)
    with pytest.raises(ValueError, match='gated=True'):
        te_select(dense, batches, 'act')


# ------------------------------------------------------------------ subsets
def test_select_subset_is_deterministic_and_validated():
    subset = select_subset(100, 0.25, seed=3)
    assert len(subset) == 25 and subset == sorted(set(subset))
    assert subset == select_subset(100, 25, seed=3)
    assert subset != select_subset(100, 25, seed=4)
    assert select_subset(10, 1.0) == list(range(10))
    assert len(select_subset(10, 0.01)) == 1
    for bad, error in (
        (0, ValueError),
        (11, ValueError),
        (0.0, ValueError),
        (1.5, ValueError),
        ('half', TypeError),
        (True, TypeError),
    ):
        with pytest.raises(error, match='subset'):
            select_subset(10, bad)


def test_subset_sampler_draws_only_its_subset():
    sampler = SubsetSampler(list(range(50)), subset=0.2, subset_seed=1, seed=0)
    expected = select_subset(50, 0.2, seed=1)
    assert len(sampler) == 10
    first = list(sampler)
    assert sorted(first) == expected
    sampler.set_epoch(1)
    second = list(sampler)
    assert sorted(second) == expected and second != first


# ---------------------------------------------------------------- the hook
@pytest.fixture(scope='module')
def digits_root(tmp_path_factory):
    root = tmp_path_factory.mktemp('demo') / 'cls'
    make_classification(root)
    return str(root)


def run_cfg(work_dir, data_root, hook, max_epochs, gated=True, **overrides):
    pipeline = [dict(type='LoadImageFromFile'), dict(type='PackInputs')]

    def dataset(split, **kwargs):
        return dict(
            type='CustomDataset',
            data_root=data_root,
            ann_file=f'meta/{split}.txt',
            data_prefix=split,
            pipeline=pipeline,
            **kwargs,
        )

    cfg = dict(
        default_scope='mmpretrain',
        experiment_name=f'map_collect_{uuid.uuid4().hex[:8]}',
        work_dir=str(work_dir),
        model=dict(
            type='ImageClassifier',
            data_preprocessor=dict(
                type='ClsDataPreprocessor',
                num_classes=10,
                mean=[127.5] * 3,
                std=[127.5] * 3,
            ),
            backbone=dict(
                type='HetDPTViT',
                arch=TINY_ARCH,
                img_size=32,
                patch_size=8,
                gated=gated,
            ),
            head=dict(
                type='VisionTransformerClsHead',
                num_classes=10,
                in_channels=TINY_ARCH['embed_dims'],
            ),
        ),
        train_dataloader=dict(
            batch_size=8,
            num_workers=0,
            dataset=dataset('train'),
            sampler=dict(type='SubsetSampler', subset=16, shuffle=True),
        ),
        val_dataloader=dict(
            batch_size=64,
            num_workers=0,
            dataset=dataset('val', indices=64),
            sampler=dict(type='DefaultSampler', shuffle=False),
        ),
        val_evaluator=dict(type='Accuracy', topk=(1,)),
        val_cfg=dict(),
        train_cfg=dict(
            by_epoch=True, max_epochs=max_epochs, val_begin=1_000_000
        ),
        optim_wrapper=dict(optimizer=dict(type='AdamW', lr=1e-3)),
        default_hooks=dict(
            logger=dict(type='LoggerHook', interval=1),
            checkpoint=dict(type='CheckpointHook', interval=1),
        ),
        custom_hooks=[
            dict(
                dict(
                    type='MAPCollectHook', calib_images=32, calib_batch_size=16
                ),
                **hook,
            )
        ],
        randomness=dict(seed=0),
        env_cfg=dict(dist_cfg=dict(backend='gloo')),
        log_level='WARNING',
    )
    cfg.update(overrides)
    return Config(cfg)


def read_rows(path):
    with open(path, newline='') as file:
        reader = csv.DictReader(file)
        assert tuple(reader.fieldnames) == POINT_COLUMNS
        return list(reader)


def indices(text):
    return [int(i) for i in text.split()]


@pytest.mark.parametrize(
    'schedule,steps', [('attn', 2), ('act', 2), ('interleaved', 3)]
)
def test_hook_writes_one_point_per_step(
    tmp_path, digits_root, schedule, steps
):
    # More epochs than the steps need: the hook stops training after them.
    runner = Runner.from_cfg(
        run_cfg(
            tmp_path,
            digits_root,
            dict(schedule=schedule, interval=1, max_removed=steps),
            max_epochs=steps + 2,
        )
    )
    runner.train()

    assert runner.epoch == steps
    rows = read_rows(tmp_path / 'map_points.csv')
    assert [int(row['step']) for row in rows] == list(range(steps + 1))
    kinds = build_collect_schedule(schedule).kinds(steps)
    previous = dict(attn=[], act=[])
    for step, row in enumerate(rows):
        n_attn = kinds[:step].count('attn')
        n_act = kinds[:step].count('act')
        assert row['schedule'] == schedule
        assert (int(row['n_attn']), int(row['n_act'])) == (n_attn, n_act)
        assert float(row['a']) == pytest.approx((DEPTH - n_attn) / DEPTH)
        assert float(row['t']) == pytest.approx((DEPTH - n_act) / DEPTH)
        assert 0.0 <= float(row['accuracy']) <= 100.0
        removed = dict(
            attn=indices(row['removed_attn']), act=indices(row['removed_act'])
        )
        assert (len(removed['attn']), len(removed['act'])) == (n_attn, n_act)
        for kind in ('attn', 'act'):  # each step adds exactly one layer
            assert set(previous[kind]) <= set(removed[kind])
        previous = removed
    backbone = runner.model.backbone
    assert backbone.prune_spec.attn_removed == tuple(previous['attn'])
    assert backbone.prune_spec.act_removed == tuple(previous['act'])
    # The last point is the accuracy of the final network on the val set.
    metrics = runner.val_loop.run()
    assert float(rows[-1]['accuracy']) == pytest.approx(
        metrics['accuracy/top1'], abs=1e-4
    )
    points = load_points(tmp_path / 'map_points.csv', depth=DEPTH)
    assert [(p.a, p.t) for p in points] == [
        (float(r['a']), float(r['t'])) for r in rows
    ]


def test_hook_takes_any_selection_policy_and_schedule(tmp_path, digits_root):
    """The gate scores' policy and a custom pattern, from the config."""
    hook = dict(
        schedule=dict(type='cyclic', kinds=['act', 'act', 'attn']),
        interval=1,
        max_removed=3,
        calib_images=None,
        calib_batch_size=None,
        selection=dict(type='LowestGateScore'),
    )
    optim_wrapper = dict(
        optimizer=dict(type='AdamW', lr=1e-3, weight_decay=0.05),
        paramwise_cfg=dict(custom_keys={'hetdpt_score': dict(decay_mult=0.0)}),
    )
    runner = Runner.from_cfg(
        run_cfg(tmp_path, digits_root, hook, 3, optim_wrapper=optim_wrapper)
    )
    runner.train()

    rows = read_rows(tmp_path / 'map_points.csv')
    assert [
        (row['schedule'], row['n_attn'], row['n_act']) for row in rows
    ] == [
        ('act-act-attn', '0', '0'),
        ('act-act-attn', '0', '1'),
        ('act-act-attn', '0', '2'),
        ('act-act-attn', '1', '2'),
    ]
    state = load_checkpoint_file(tmp_path / 'epoch_3.pth')['meta'][STATE_KEY]
    assert (state['version'], state['selection'], state['schedule']) == (
        2,
        'LowestGateScore',
        'act-act-attn',
    )
    assert [kind for kind, _ in state['removed']] == ['act', 'act', 'attn']


def test_resume_neither_duplicates_nor_loses_points(tmp_path, digits_root):
    hook = dict(schedule='interleaved', interval=2, max_removed=2)
    work_dir = tmp_path / 'run'
    Runner.from_cfg(run_cfg(work_dir, digits_root, hook, 4)).train()
    complete = read_rows(work_dir / 'map_points.csv')
    assert len(complete) == 3
    checkpoints = tmp_path / 'checkpoints'
    shutil.copytree(
        work_dir, checkpoints, ignore=shutil.ignore_patterns('2*')
    )  # not the logs

    # Epoch 3 is inside step 2, epoch 2 ends step 1; either way the points
    # file holds the point of step 2 that the checkpoint does not know of
    # (as after a crash right after writing it): it must be replaced.
    for epoch in (3, 2):
        runner = Runner.from_cfg(
            run_cfg(
                work_dir,
                digits_root,
                hook,
                4,
                resume=True,
                load_from=str(checkpoints / f'epoch_{epoch}.pth'),
            )
        )
        runner.train()
        assert runner.epoch == 4
        assert read_rows(work_dir / 'map_points.csv') == complete

    # Resuming a finished collection trains no further.
    runner = Runner.from_cfg(
        run_cfg(
            work_dir,
            digits_root,
            hook,
            4,
            resume=True,
            load_from=str(checkpoints / 'epoch_4.pth'),
        )
    )
    runner.train()
    assert runner.epoch == 4
    assert read_rows(work_dir / 'map_points.csv') == complete

    # A resume must keep the schedule it was collected with.
    runner = Runner.from_cfg(
        run_cfg(
            work_dir,
            digits_root,
            dict(hook, schedule='act'),
            4,
            resume=True,
            load_from=str(checkpoints / 'epoch_2.pth'),
        )
    )
    with pytest.raises(ValueError, match="schedule='interleaved'"):
        runner.train()


def test_hook_arguments_are_validated():
    with pytest.raises(ValueError, match="unknown schedule 'attention'"):
        MAPCollectHook(schedule='attention')
    with pytest.raises(ValueError, match='interval must be a positive'):
        MAPCollectHook(interval=0)
    with pytest.raises(ValueError, match='max_removed must be a positive'):
        MAPCollectHook(max_removed=1.5)


@pytest.mark.parametrize(
    'hook,max_epochs,overrides,error,message',
    [
        (
            dict(schedule='act', interval=2, max_removed=3),
            5,
            {},
            ValueError,
            'max_epochs >= 6',
        ),
        (
            dict(schedule='attn', interval=1, max_removed=5),
            5,
            {},
            ValueError,
            'removes 5 attn layers',
        ),
        (
            dict(schedule='attn', interval=3),
            2,
            {},
            ValueError,
            'no step fits',
        ),
        (
            dict(schedule='attn'),
            2,
            dict(gated=False),
            UsageError,
            'gated=True.*pruned form',
        ),
        (
            dict(schedule='attn', calib_images=5000),
            2,
            {},
            ValueError,
            'calib_images=5000',
        ),
    ],
)
def test_bad_configs_fail_before_any_point_is_written(
    tmp_path, digits_root, hook, max_epochs, overrides, error, message
):
    hook = dict(dict(interval=1), **hook)
    runner = Runner.from_cfg(
        run_cfg(tmp_path, digits_root, hook, max_epochs, **overrides)
    )
    with pytest.raises(error, match=message):
        runner.train()
    assert not (tmp_path / 'map_points.csv').exists()


def test_existing_points_are_not_overwritten(tmp_path, digits_root):
    (tmp_path / 'map_points.csv').write_text('earlier run\n')
    runner = Runner.from_cfg(
        run_cfg(tmp_path, digits_root, dict(schedule='attn', interval=1), 1)
    )
    with pytest.raises(FileExistsError, match='--resume'):
        runner.train()
    assert (tmp_path / 'map_points.csv').read_text() == 'earlier run\n'


def test_iteration_based_runs_are_rejected(tmp_path, digits_root):
    cfg = run_cfg(tmp_path, digits_root, dict(schedule='attn', interval=1), 1)
    cfg.train_cfg = dict(by_epoch=False, max_iters=2)
    with pytest.raises(TypeError, match='epoch based train loop'):
        Runner.from_cfg(cfg).train()


# ------------------------------------------------------------ other families
#: A small Swin (8 blocks over four stages) as mmpretrain's Swin classifier:
#: the normed last stage, global average pooling, a linear head.
SWIN_ARCH = dict(embed_dims=16, depths=[2, 2, 2, 2], num_heads=[1, 2, 2, 4])
SWIN_CLASSIFIER = dict(
    type='ImageClassifier',
    data_preprocessor=dict(
        type='ClsDataPreprocessor',
        num_classes=10,
        mean=[127.5] * 3,
        std=[127.5] * 3,
    ),
    backbone=dict(
        type='HetDPTSwin',
        arch=SWIN_ARCH,
        window_size=4,
        out_indices=(3,),
        gated=True,
        drop_path_rate=0.0,
    ),
    neck=dict(type='GlobalAveragePooling'),
    head=dict(type='LinearClsHead', num_classes=10, in_channels=128),
)


def test_swin_class_feature_is_what_its_head_reads():
    from mmpretrain.registry import MODELS

    model = MODELS.build(SWIN_CLASSIFIER).eval()
    randomize_(model.backbone)
    images = torch.randn(
        3, 3, 32, 32, generator=torch.Generator().manual_seed(0)
    )
    with torch.no_grad():
        neck_output = model.extract_feat(images)[-1]
    features = class_features(model.backbone, [images[:2], images[2:]])
    assert features.shape == (3, 128)
    torch.testing.assert_close(features, neck_output, atol=1e-6, rtol=1e-6)
    model.backbone.out_indices = [2]  # a detector's stage, not the last
    with pytest.raises(ValueError, match=r'out_indices=\(3, \)'):
        class_features(model.backbone, [images])


def test_hook_collects_points_on_a_swin(tmp_path, digits_root):
    """MAPCollectHook drives a Swin classifier through the family
    interface: one point per step, the removals chosen by its default TE
    selection on the pooled class feature (checked above)."""
    runner = Runner.from_cfg(
        run_cfg(
            tmp_path,
            digits_root,
            dict(schedule='interleaved', interval=1, max_removed=2),
            max_epochs=3,
            model=SWIN_CLASSIFIER,
        )
    )
    backbone = runner.model.backbone
    runner.train()
    rows = read_rows(tmp_path / 'map_points.csv')
    assert [int(row['step']) for row in rows] == [0, 1, 2]
    depth = 8
    spec = backbone.prune_spec
    assert (spec.n_attn, spec.n_act) == (1, 1)
    last = rows[-1]
    assert float(last['a']) == pytest.approx((depth - 1) / depth)
    assert float(last['t']) == pytest.approx((depth - 1) / depth)
    assert indices(last['removed_attn']) == list(spec.attn_removed)
    assert indices(last['removed_act']) == list(spec.act_removed)
    metrics = runner.val_loop.run()
    assert float(last['accuracy']) == pytest.approx(
        metrics['accuracy/top1'], abs=1e-4
    )


# ---------------------------------------------------- whole-branch removal
#: A gated SwiGLU LayerScale ViT (DINOv2's FFN) under whole-branch removal:
#: attention and FFN branches are gated, SwiGLU activations are not.
SWIGLU_CLASSIFIER = dict(
    type='ImageClassifier',
    data_preprocessor=dict(
        type='ClsDataPreprocessor',
        num_classes=10,
        mean=[127.5] * 3,
        std=[127.5] * 3,
    ),
    backbone=dict(
        type='HetDPTLayerScaleViT',
        arch=dict(TINY_ARCH, mlp_ratio=2.66667 * 2, ffn='swiglu'),
        img_size=32,
        patch_size=8,
        gated=True,
        removed_attn_output='identity',
    ),
    head=dict(
        type='LinearClsHead',
        num_classes=10,
        in_channels=TINY_ARCH['embed_dims'],
    ),
)


@pytest.mark.parametrize(
    'schedule,kinds',
    [
        (dict(type='cyclic', kinds=['attn', 'ffn']), ['attn', 'ffn'] * 2),
        ('ffn', ['ffn'] * 4),
    ],
)
def test_hook_collects_ffn_branch_points(
    tmp_path, digits_root, schedule, kinds
):
    """FFN branches are a layer kind like the others: one point per step,
    t counting the FFN branches kept, every block keeping one branch, and
    the points give HetDPTPruneHook's MAP over (attn, ffn)."""
    from hetdpt_mm.hooks import HetDPTPruneHook
    from hetdpt_mm.hooks.map_collect_hook import BRANCH_POINT_COLUMNS

    runner = Runner.from_cfg(
        run_cfg(
            tmp_path,
            digits_root,
            dict(schedule=schedule, interval=1, max_removed=4),
            max_epochs=4,
            model=SWIGLU_CLASSIFIER,
        )
    )
    runner.train()

    with open(tmp_path / 'map_points.csv', newline='') as file:
        reader = csv.DictReader(file)
        assert tuple(reader.fieldnames) == BRANCH_POINT_COLUMNS
        rows = list(reader)
    assert [int(row['step']) for row in rows] == [0, 1, 2, 3, 4]
    previous = dict(attn=[], ffn=[])
    for step, row in enumerate(rows):
        n_attn, n_ffn = (kinds[:step].count(kind) for kind in ('attn', 'ffn'))
        assert (int(row['n_attn']), int(row['n_ffn'])) == (n_attn, n_ffn)
        assert float(row['a']) == pytest.approx((DEPTH - n_attn) / DEPTH)
        assert float(row['t']) == pytest.approx((DEPTH - n_ffn) / DEPTH)
        removed = dict(
            attn=indices(row['removed_attn']), ffn=indices(row['removed_ffn'])
        )
        assert not set(removed['attn']) & set(removed['ffn'])
        for kind in ('attn', 'ffn'):
            assert set(previous[kind]) <= set(removed[kind])
        previous = removed
    spec = runner.model.backbone.prune_spec
    assert (list(spec.attn_removed), list(spec.ffn_removed)) == (
        previous['attn'],
        previous['ffn'],
    )
    assert spec.act_removed == ()
    metrics = runner.val_loop.run()
    assert float(rows[-1]['accuracy']) == pytest.approx(
        metrics['accuracy/top1'], abs=1e-4
    )
    points = load_points(tmp_path / 'map_points.csv', depth=DEPTH)
    assert [(p.a, p.t) for p in points] == [
        (float(r['a']), float(r['t'])) for r in rows
    ]
    if 'attn' in kinds:  # points off the a = 1 line: MAP fits
        hook = HetDPTPruneHook(
            map_points=str(tmp_path / 'map_points.csv'),
            budget=2,
            map_kinds=('attn', 'ffn'),
            degrees=(1,),
        )
        counts = hook._resolve_counts(DEPTH, runner.logger)
        assert counts['act'] == 0 and counts['attn'] + counts['ffn'] == 2


@pytest.mark.parametrize(
    'hook,backbone,error,message',
    [
        # FFN branches are gated only under whole-branch removal.
        (
            dict(schedule='ffn'),
            dict(removed_attn_output='norm'),
            'UsageError',
            'no ffn gates',
        ),
        # A SwiGLU FFN has no GELU.
        (dict(schedule='act'), {}, 'UsageError', r'no act gates'),
        # MAP's t counts GELUs or FFN branches (a GELU ViT gates both).
        (
            dict(schedule=dict(type='cyclic', kinds=['ffn', 'act'])),
            dict(type='HetDPTViT', arch=TINY_ARCH),
            'ValueError',
            'act or ffn',
        ),
        # A block keeps one of its two branches: 4 blocks, 5 branches.
        (
            dict(
                schedule=dict(type='cyclic', kinds=['attn', 'ffn']),
                max_removed=5,
            ),
            {},
            'ValueError',
            'removes 5 branches of 4 blocks',
        ),
    ],
)
def test_ffn_schedules_are_checked_before_any_point(
    tmp_path, digits_root, hook, backbone, error, message
):

    model = dict(
        SWIGLU_CLASSIFIER,
        backbone=dict(SWIGLU_CLASSIFIER['backbone'], **backbone),
    )
    errors = dict(UsageError=UsageError, ValueError=ValueError)
    runner = Runner.from_cfg(
        run_cfg(
            tmp_path,
            digits_root,
            dict(dict(interval=1), **hook),
            5,
            model=model,
        )
    )
    with pytest.raises(errors[error], match=message):
        runner.train()
    assert not (tmp_path / 'map_points.csv').exists()
