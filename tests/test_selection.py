"""Selection policies and removal schedules as objects, and the hooks'
independence of them: each policy alone on a tiny gated HetDPTViT, the
schedules, a policy swapped in through the config, versioned hook state."""

import numpy as np
import pytest
import torch
from helpers import fake_runner, randomize_
from mmengine.dataset import pseudo_collate
from mmengine.registry import DATASETS
from mmpretrain.registry import MODELS
from PIL import Image

from hetdpt_mm.datasets import select_subset
from hetdpt_mm.hooks import HetDPTPruneHook, MAPCollectHook
from hetdpt_mm.hooks.map_collect_hook import STATE_KEY as MAP_STATE_KEY
from hetdpt_mm.hooks.prune_hook import STATE_KEY
from hetdpt_mm.pruning.schedules import (
    CyclicSchedule,
    ProgressiveSchedule,
    build_collect_schedule,
    build_prune_schedule,
)
from hetdpt_mm.pruning.selection import (
    Decision,
    LowestGateScore,
    SelectionPolicy,
    TransferEntropy,
    build_selection,
)
from hetdpt_mm.pruning.transfer_entropy import te_select
from hetdpt_mm.registry import SELECTION_POLICIES
from hetdpt_mm.spec import PruneSpec

DIM, DEPTH = 48, 4
ITERS_PER_EPOCH = 4
CALIB_IMAGES = 12


pytestmark = pytest.mark.usefixtures('one_thread')


def tiny_classifier():
    model = MODELS.build(
        dict(
            type='ImageClassifier',
            data_preprocessor=dict(
                type='ClsDataPreprocessor',
                num_classes=10,
                mean=[127.5] * 3,
                std=[127.5] * 3,
            ),
            backbone=dict(
                type='HetDPTViT',
                arch=dict(embed_dims=DIM, num_layers=DEPTH, num_heads=3),
                img_size=32,
                patch_size=8,
                gated=True,
            ),
            head=dict(
                type='VisionTransformerClsHead',
                num_classes=10,
                in_channels=DIM,
            ),
        )
    )
    randomize_(model.backbone, std=0.2)
    return model


def set_scores(backbone, kind, scores):
    with torch.no_grad():
        for gate, score in zip(backbone.gates(kind), scores):
            gate.hetdpt_score.fill_(score)


def run_removals(hook, runner):
    """Call the hook after every iteration that holds a removal."""
    for position in hook.positions:
        runner.iter, runner.epoch = (
            position - 1,
            (position - 1) // ITERS_PER_EPOCH,
        )
        hook.after_train_iter(runner, batch_idx=0)


@pytest.fixture(scope='module')
def calib_dataset(tmp_path_factory):
    """A CustomDataset config of a few random 32x32 images."""
    root = tmp_path_factory.mktemp('calib')
    (root / 'train').mkdir()
    rng = np.random.default_rng(0)
    lines = []
    for i in range(CALIB_IMAGES + 4):
        pixels = rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(root / 'train' / f'{i:02d}.png')
        lines.append(f'{i:02d}.png {i % 10}')
    (root / 'train.txt').write_text('\n'.join(lines) + '\n')
    return dict(
        _scope_='mmpretrain',
        type='CustomDataset',
        data_root=str(root),
        ann_file='train.txt',
        data_prefix='train',
        with_label=True,
        pipeline=[dict(type='LoadImageFromFile'), dict(type='PackInputs')],
    )


def calibration_batches(model, dataset_cfg, batch_size):
    """The calibration images as TransferEntropy should see them: the
    seeded subset, batched in order, through the model's preprocessor."""
    dataset = DATASETS.build(dict(dataset_cfg))
    indices = select_subset(len(dataset), CALIB_IMAGES, 0)
    items = [dataset[i] for i in indices]
    return [
        model.data_preprocessor(
            pseudo_collate(items[i : i + batch_size]), False
        )['inputs']
        for i in range(0, len(items), batch_size)
    ]


# -------------------------------------------------------------- policies
def test_lowest_gate_score_within_the_open_candidates_ties_to_lower_index():
    backbone = tiny_classifier().backbone
    set_scores(backbone, 'attn', [0.5, -0.25, -0.25, 0.125])
    # Lower than every attention score: kinds are never compared.
    set_scores(backbone, 'act', [-1.0, -1.0, -1.0, -1.0])
    policy = LowestGateScore()
    assert policy.runs_on_every_rank and policy.name == 'LowestGateScore'

    decision = policy.select(backbone, 'attn', [0, 1, 2, 3])
    assert decision == Decision(
        'attn',
        1,
        (0.5, -0.25, -0.25, 0.125),
        'the lowest score among the 4 open attn candidates; attn scores m: '
        '0: +0.500000, 1: -0.250000 <- lowest, 2: -0.250000, 3: +0.125000',
    )

    backbone.set_spec(dict(attn_removed=[1]))
    decision = policy.select(backbone, 'attn', [0, 3])
    assert decision.index == 3
    assert decision.table == (
        'the lowest score among the 2 open attn candidates; attn scores m: '
        '0: +0.500000, 1: -0.250000 (closed), 2: -0.250000 (not a '
        'candidate), 3: +0.125000 <- lowest'
    )
    assert backbone.prune_spec == PruneSpec(DEPTH, [1])  # select changes none


def test_transfer_entropy_scores_its_seeded_calibration_subset(calib_dataset):
    model = tiny_classifier()
    backbone = model.backbone
    backbone.set_spec(dict(act_removed=[2]))
    policy = TransferEntropy(
        calib_images=CALIB_IMAGES,
        calib_batch_size=5,
        calib_dataset=calib_dataset,
    )
    assert not policy.runs_on_every_rank
    policy.setup(fake_runner(model), backbone)

    decision = policy.select(backbone, 'act', [0, 1, 3])

    expected = te_select(
        backbone,
        calibration_batches(model, calib_dataset, 5),
        'act',
        [0, 1, 3],
    )
    trials = {trial.index: trial.score for trial in expected.candidates}
    assert decision == Decision(
        'act',
        expected.chosen.index,
        (trials[0], trials[1], None, trials[3]),
        expected.format_table(),
    )
    assert backbone.prune_spec == PruneSpec(DEPTH, act_removed=[2])


def test_transfer_entropy_checks_its_calibration_set(calib_dataset):
    model = tiny_classifier()
    policy = TransferEntropy(calib_images=100, calib_dataset=calib_dataset)
    with pytest.raises(ValueError, match='calib_images=100'):
        policy.setup(fake_runner(model), model.backbone)
    with pytest.raises(ValueError, match='cannot derive the calibration'):
        TransferEntropy().setup(fake_runner(model), model.backbone)
    with pytest.raises(
        ValueError, match='calib_batch_size must be a positive integer, got 0'
    ):
        TransferEntropy(calib_batch_size=0)


def test_build_selection():
    assert type(build_selection('LowestGateScore')) is LowestGateScore
    built = build_selection(dict(type='TransferEntropy', calib_images=8))
    assert (type(built), built.calib_images) == (TransferEntropy, 8)
    assert build_selection(built) is built
    with pytest.raises(
        ValueError, match="'Random' is not a registered selection policy"
    ):
        build_selection(dict(type='Random'))


# ------------------------------------------------------------- schedules
def test_prune_schedules_from_names_dicts_and_objects():
    progressive = build_prune_schedule(
        'progressive', stages=[1, 2], by_epoch=False
    )
    assert (type(progressive), progressive.stages, progressive.by_epoch) == (
        ProgressiveSchedule,
        [1, 2],
        False,
    )
    assert progressive.order(dict(attn=1, act=1)) == ['act', 'attn']
    assert progressive.iterations(2, 10) == [1, 3]
    epoch = build_prune_schedule(dict(type='epoch', prune_epoch=3))
    assert (epoch.name, epoch.by_epoch) == ('epoch', True)
    assert epoch.iterations(4, 6) == [14, 15, 17, 18]
    assert build_prune_schedule(epoch) is epoch
    with pytest.raises(ValueError, match=r"not \['stages'\]"):
        build_prune_schedule('epoch', stages=2, prune_epoch=1)
    with pytest.raises(ValueError, match=r"give \['stages'\] inside"):
        build_prune_schedule(dict(type='progressive'), stages=2)
    with pytest.raises(ValueError, match='needs a PruneSchedule'):
        build_prune_schedule(dict(type='cyclic', kinds=['act']))


def test_collect_schedules():
    assert build_collect_schedule('attn').kinds(3) == ['attn'] * 3
    assert build_collect_schedule('act').kinds(2) == ['act'] * 2
    interleaved = build_collect_schedule('interleaved')
    assert (interleaved.name, interleaved.kinds(5)) == (
        'interleaved',
        ['attn', 'act', 'attn', 'act', 'attn'],
    )
    custom = build_collect_schedule(
        dict(type='cyclic', kinds=['act', 'act', 'attn'])
    )
    assert (custom.name, custom.kinds(4)) == (
        'act-act-attn',
        ['act', 'act', 'attn', 'act'],
    )
    assert CyclicSchedule(['attn', 'act']).name == 'interleaved'
    with pytest.raises(ValueError, match='kinds must be'):
        CyclicSchedule(['mlp'])
    with pytest.raises(ValueError, match='needs a CollectSchedule'):
        build_collect_schedule(dict(type='epoch', prune_epoch=1))


# --------------------------------------------- the hooks take any policy
class HighestIndex(SelectionPolicy):
    """A test policy: the candidate with the highest block index."""

    def select(self, backbone, kind, candidates):
        index = max(candidates)
        return Decision(
            kind,
            index,
            tuple(
                float(i) if i in candidates else None
                for i in range(backbone.depth)
            ),
            f'highest of {candidates}',
        )


@pytest.fixture
def highest_index():
    SELECTION_POLICIES.register_module(module=HighestIndex, force=True)
    yield
    SELECTION_POLICIES.module_dict.pop('HighestIndex')


def test_prune_hook_follows_a_policy_from_the_config(highest_index):
    runner = fake_runner(tiny_classifier())
    hook = HetDPTPruneHook(
        counts=dict(attn=1, act=2),
        stages=1,
        candidates=dict(act=[0, 1, 2]),
        selection=dict(type='HighestIndex'),
    )
    hook.before_train(runner)
    run_removals(hook, runner)

    assert [
        (d['kind'], d['index'], d['candidates'], d['rank_choices'])
        for d in hook.decisions
    ] == [
        ('act', 2, [0, 1, 2], None),
        ('attn', 3, [0, 1, 2, 3], None),
        ('act', 1, [0, 1], None),
    ]
    assert hook.decisions[2]['scores'] == [0.0, 1.0, None, None]
    assert runner.model.backbone.prune_spec == PruneSpec(DEPTH, [3], [1, 2])

    checkpoint = dict(meta=dict())
    hook.before_save_checkpoint(runner, checkpoint)
    state = checkpoint['meta'][STATE_KEY]
    assert (state['version'], state['selection'], state['schedule']) == (
        2,
        'HighestIndex',
        'progressive',
    )

    # A resume must select the same way.
    resumed = HetDPTPruneHook(
        counts=dict(attn=1, act=2), stages=1, candidates=dict(act=[0, 1, 2])
    )
    resumed.after_load_checkpoint(runner, checkpoint)
    with pytest.raises(
        ValueError,
        match="selection='HighestIndex'",
    ):
        resumed.before_train(runner)


def test_prune_hook_with_transfer_entropy(calib_dataset):
    model = tiny_classifier()
    runner = fake_runner(model)
    hook = HetDPTPruneHook(
        counts=dict(attn=1, act=1),
        stages=1,
        selection=dict(
            type='TransferEntropy',
            calib_images=CALIB_IMAGES,
            calib_batch_size=CALIB_IMAGES,
            calib_dataset=calib_dataset,
        ),
    )
    hook.before_train(runner)
    batches = calibration_batches(model, calib_dataset, CALIB_IMAGES)
    expected = []
    for position, kind in zip(hook.positions, hook.order):
        expected.append(te_select(model.backbone, batches, kind).chosen.index)
        runner.iter = position - 1
        hook.after_train_iter(runner, batch_idx=0)
    assert [d['index'] for d in hook.decisions] == expected
    assert [d['rank_choices'] for d in hook.decisions] == [None, None]


def test_map_hook_takes_the_selection_or_the_calibration_arguments():
    assert MAPCollectHook(calib_images=32).selection.calib_images == 32
    hook = MAPCollectHook(selection=dict(type='LowestGateScore'))
    assert type(hook.selection) is LowestGateScore
    with pytest.raises(ValueError, match='calib_images'):
        MAPCollectHook(calib_images=32, selection='LowestGateScore')


# ------------------------------------------------------ versioned state
def test_version_1_states_load_with_their_policy():
    prune_v1 = dict(
        counts=dict(attn=1, act=0),
        order=['attn'],
        positions=[4],
        decisions=[],
        schedule='progressive',
    )
    hook = HetDPTPruneHook(counts=dict(attn=1, act=0))
    hook.after_load_checkpoint(None, dict(meta={STATE_KEY: prune_v1}))
    assert hook.resumed_state() == dict(prune_v1, selection='LowestGateScore')

    map_v1 = dict(
        version=1,
        schedule='attn',
        interval=1,
        max_removed=1,
        start_spec=PruneSpec(DEPTH).to_dict(),
        removed=[],
        rows=[],
    )
    hook = MAPCollectHook()
    hook.after_load_checkpoint(None, dict(meta={MAP_STATE_KEY: map_v1}))
    expected = dict(map_v1, selection='TransferEntropy')
    del expected['version']
    assert hook.resumed_state() == expected

    hook.after_load_checkpoint(
        None, dict(meta={MAP_STATE_KEY: dict(map_v1, version=3)})
    )
    with pytest.raises(ValueError, match='unsupported state version 3'):
        hook.resumed_state()
