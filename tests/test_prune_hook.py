"""HetDPTPruneHook: schedules, MAP counts, within-type lowest-score
decisions, resume, two-rank DDP, validation, and the merged checkpoint of a
real (tiny) training run on the demo digits."""

import json
import math
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from helpers import REPO, fake_runner, load_tool
from mmengine.config import Config
from mmengine.runner import load_checkpoint
from mmpretrain.registry import MODELS

import hetdpt_mm  # noqa: F401  registers modules
from hetdpt_demo.data import make_classification
from hetdpt_mm.checkpoint.record import decode_record
from hetdpt_mm.checkpoint.safe_load import load_checkpoint_file
from hetdpt_mm.hooks import HetDPTMetaHook, HetDPTPruneHook
from hetdpt_mm.hooks.prune_hook import STATE_KEY
from hetdpt_mm.pruning import allocate, fit_map, load_points
from hetdpt_mm.pruning.schedules import (
    EpochSchedule,
    ProgressiveSchedule,
    authors_stages,
    removal_order,
)
from hetdpt_mm.spec import META_KEY, PruneSpec

PRUNE_CONFIG = REPO / 'configs' / 'demo' / 'vit-demo_digits_prune.py'
PAPER_POINTS = REPO / 'tests' / 'data' / 'map_points_paper.csv'
DIM, DEPTH, BUDGET = 48, 4, 3
#: 64 training images, batch 16: 4 iterations per epoch.
ITERS_PER_EPOCH = 4


# ---------------------------------------------------------------- schedule
def test_removal_order_interleaves_larger_type_first_ties_to_gelu():
    assert removal_order(dict(attn=2, act=3)) == [
        'act',
        'attn',
        'act',
        'attn',
        'act',
    ]
    assert removal_order(dict(attn=2, act=2)) == ['act', 'attn', 'act', 'attn']
    assert removal_order(dict(attn=4, act=1)) == [
        'attn',
        'act',
        'attn',
        'attn',
        'attn',
    ]
    assert removal_order(dict(attn=0, act=2)) == ['act', 'act']


def test_removal_iterations():
    # The authors' DeiT-B schedule: prune after epochs 3, 8, ..., 80.
    assert authors_stages(8) == [3, 5, 7, 9, 11, 13, 15, 17]
    assert ProgressiveSchedule().iterations(8, 10) == [
        e * 10 for e in (3, 8, 15, 24, 35, 48, 63, 80)
    ]
    assert ProgressiveSchedule(stages=2).iterations(3, 10) == [20, 40, 60]
    assert ProgressiveSchedule(by_epoch=False, stages=[5, 7, 99]).iterations(
        2, 10
    ) == [5, 12]
    # One prune epoch (the 2nd): spread over its 10 iterations, the last at
    # its end.
    assert EpochSchedule(prune_epoch=2).iterations(3, 10) == [14, 17, 20]
    with pytest.raises(ValueError, match='2 stages for 3 removals'):
        ProgressiveSchedule(stages=[1, 1]).iterations(3, 10)


@pytest.mark.parametrize(
    'kwargs, message',
    [
        (dict(), 'exactly one of counts, map_points or map_fit'),
        (
            dict(counts=dict(attn=1, act=1), map_points='p.csv', budget=2),
            'exactly one of',
        ),
        (dict(map_points='p.csv'), 'needs a budget'),
        (dict(counts=dict(attn=1)), 'counts must be dict'),
        (
            dict(counts=dict(attn=1, act=1), schedule='fast'),
            'schedule must be',
        ),
        (
            dict(counts=dict(attn=1, act=1), schedule='epoch'),
            'prune_epoch must',
        ),
        (dict(counts=dict(attn=1, act=1), stages=[1, 0]), 'positive integer'),
        (
            dict(counts=dict(attn=1, act=1), by_epoch=False),
            'by_epoch=False needs stages',
        ),
        (
            dict(counts=dict(attn=1, act=1), candidates=dict(mlp=[0])),
            'candidates keys',
        ),
    ],
)
def test_hook_arguments_are_validated(kwargs, message):
    with pytest.raises(ValueError, match=message):
        HetDPTPruneHook(**kwargs)


# ------------------------------------------------- validation before train
def tiny_classifier(gated=True):
    return MODELS.build(
        dict(
            type='ImageClassifier',
            backbone=dict(
                type='HetDPTViT',
                arch=dict(embed_dims=DIM, num_layers=DEPTH, num_heads=3),
                img_size=32,
                patch_size=4,
                gated=gated,
            ),
            head=dict(
                type='VisionTransformerClsHead',
                num_classes=10,
                in_channels=DIM,
            ),
        )
    )


def test_validation_accepts_a_good_setup():
    runner = fake_runner(tiny_classifier())
    hook = HetDPTPruneHook(counts=dict(attn=1, act=2), stages=1)
    hook.before_train(runner)
    assert hook.order == ['act', 'attn', 'act']
    assert hook.positions == [4, 8, 12]


def test_schedule_longer_than_the_run_is_rejected():
    runner = fake_runner(tiny_classifier(), max_epochs=2)
    hook = HetDPTPruneHook(counts=dict(attn=1, act=2), stages=1)
    with pytest.raises(ValueError, match='longer than the run'):
        hook.before_train(runner)


def test_weight_decay_on_scores_is_rejected():
    runner = fake_runner(tiny_classifier(), paramwise_cfg=dict())
    hook = HetDPTPruneHook(counts=dict(attn=1, act=1), stages=1)
    with pytest.raises(ValueError, match='weight_decay'):
        hook.before_train(runner)


def test_backbone_must_be_gated_and_start_dense():
    hook = HetDPTPruneHook(counts=dict(attn=1, act=1), stages=1)
    with pytest.raises(ValueError, match='gated=True'):
        hook.before_train(fake_runner(tiny_classifier(gated=False)))
    model = tiny_classifier()
    model.backbone.set_spec(dict(attn_removed=[1]))
    with pytest.raises(ValueError, match='closed gates'):
        hook.before_train(fake_runner(model))


def test_candidates_must_cover_the_counts():
    hook = HetDPTPruneHook(
        counts=dict(attn=2, act=1), stages=1, candidates=dict(attn=[3])
    )
    with pytest.raises(ValueError, match=r"candidates\['attn'\]"):
        hook.before_train(fake_runner(tiny_classifier()))


def test_counts_of_types_the_backbone_lacks_are_refused():
    """A plain ViT has no windowed attention to count."""
    hook = HetDPTPruneHook(counts=dict(attn=1, act=1, attn_window=1))
    with pytest.raises(ValueError, match='attn_window'):
        hook.before_train(fake_runner(tiny_classifier()))


def test_ddp_without_find_unused_parameters_is_rejected(tmp_path):
    store = torch.distributed.FileStore(str(tmp_path / 'store'), 1)
    torch.distributed.init_process_group(
        'gloo', store=store, rank=0, world_size=1
    )
    try:
        model = tiny_classifier()
        hook = HetDPTPruneHook(counts=dict(attn=1, act=1), stages=1)
        strict = torch.nn.parallel.DistributedDataParallel(model)
        with pytest.raises(ValueError, match='find_unused_parameters=True'):
            hook.before_train(fake_runner(strict))
        tolerant = torch.nn.parallel.DistributedDataParallel(
            model, find_unused_parameters=True
        )
        hook.before_train(fake_runner(tolerant))
    finally:
        torch.distributed.destroy_process_group()


def test_the_record_travels_without_hooks_and_the_meta_hook_copies_it():
    model = tiny_classifier(gated=False)
    # Any runner's checkpoint (mim train, mmdet's tools/train.py) holds it.
    record = decode_record(model.state_dict()['backbone._extra_state'])
    assert (
        record['form'] == 'pruned'
        and record['spec'] == PruneSpec(DEPTH).to_dict()
    )
    runner = SimpleNamespace(model=model)
    checkpoint = dict(meta=dict(epoch=1))
    HetDPTMetaHook().before_save_checkpoint(runner, checkpoint)
    meta = checkpoint['meta'][META_KEY]
    assert meta['prefix'] == 'backbone.' and meta['form'] == 'pruned'
    assert meta['spec'] == PruneSpec(DEPTH).to_dict()
    plain = dict(meta=dict(epoch=1))
    HetDPTMetaHook().before_save_checkpoint(
        SimpleNamespace(model=torch.nn.Linear(2, 2)), plain
    )
    assert META_KEY not in plain['meta']


# ------------------------------------------------------ a real tiny run
@pytest.fixture(scope='module')
def single_thread():
    """One intra-op thread: on a shared 2-core box, OpenMP threads fighting
    for cores make a tiny model 10x slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope='module')
def digits(tmp_path_factory):
    root = tmp_path_factory.mktemp('data') / 'cls'
    make_classification(root)
    return root


def write_config(
    path: Path,
    data_root: Path,
    hooks: str,
    max_epochs: int = 4,
    indices: int = 64,
    model: str = "type='HetDPTDistillClassifier', "
    "distill=dict(mode='soft', alpha=0.5, temperature=2.0), ",
) -> Path:
    """A tiny, deterministic variant of the demo prune config."""
    path.write_text(f"""
_base_ = [{str(PRUNE_CONFIG)!r}]
custom_imports = dict(imports=['hetdpt_mm', 'hetdpt_mm.models.distill'],
                      allow_failed_imports=False)
data_root = {str(data_root)!r}
model = dict({model}
    backbone=dict(arch=dict(embed_dims={DIM}, num_layers={DEPTH},
                            num_heads=3)),
    head=dict(in_channels={DIM}))
# The demo's random augmentation (RandomCrop): resume must be exact with it.
train_dataloader = dict(batch_size=16, dataset=dict(
    data_root=data_root, indices={indices}))
val_dataloader = dict(dataset=dict(data_root=data_root, indices=32))
test_dataloader = val_dataloader
custom_hooks = {hooks}
train_cfg = dict(max_epochs={max_epochs}, val_interval={max_epochs})
default_hooks = dict(logger=dict(interval=1),
                     checkpoint=dict(interval=1, max_keep_ckpts=5))
randomness = dict(seed=0, deterministic=True)
""")
    return path


MAP_HOOKS = f"""[
    dict(type='HetDPTPruneHook', map_points={str(PAPER_POINTS)!r},
         budget={BUDGET}, schedule='progressive', stages=[1, 1, 1],
         log_score_grads=True),
    dict(type='MergeCheckpointHook'),
]"""


def train_losses(work_dir: Path):
    """Logged training losses by iteration (LocalVisBackend's scalars)."""
    scalars = list(work_dir.glob('*/vis_data/scalars.json'))
    assert len(scalars) == 1, scalars
    rows = [
        json.loads(line)
        for line in scalars[0].read_text().split('\n')
        if line.strip()
    ]
    return {
        row['iter']: (row['loss'], row.get('loss_kd'))
        for row in rows
        if 'loss' in row
    }


@pytest.fixture(scope='module')
def map_run(tmp_path_factory, digits, single_thread):
    """4 epochs; the hook takes counts from MAP (paper points, budget 3 at
    depth 4) and removes one layer after each of epochs 1-3."""
    root = tmp_path_factory.mktemp('map_run')
    config = write_config(root / 'prune_map.py', digits, MAP_HOOKS)
    assert (
        load_tool('train').main(
            [str(config), '--work-dir', str(root / 'work')]
        )
        == 0
    )
    return SimpleNamespace(
        root=root, config=config, work=root / 'work', digits=digits
    )


def test_counts_come_from_map_and_each_closed_gate_had_the_lowest_score(
    map_run,
):
    fit = fit_map(load_points(PAPER_POINTS, depth=DEPTH))
    allocation = allocate(fit, BUDGET, DEPTH)
    assert (allocation.n_attn, allocation.n_act) == (1, 2)  # non-trivial
    checkpoint = load_checkpoint_file(map_run.work / 'epoch_4.pth')
    state = checkpoint['meta'][STATE_KEY]
    assert state['counts'] == dict(attn=1, act=2)
    assert state['order'] == ['act', 'attn', 'act']  # larger count first
    assert state['positions'] == [4, 8, 12]

    spec = PruneSpec.from_dict(checkpoint['meta'][META_KEY]['spec'])
    assert (spec.n_attn, spec.n_act) == (allocation.n_attn, allocation.n_act)
    sd = checkpoint['state_dict']
    closed = {
        kind: [
            i
            for i in range(DEPTH)
            if sd[f'backbone.blocks.{i}.{path}.hetdpt_gate'] < 0.5
        ]
        for kind, path in (('attn', 'attn'), ('act', 'mlp.act'))
    }
    assert closed == dict(
        attn=list(spec.attn_removed), act=list(spec.act_removed)
    )

    for decision in state['decisions']:
        open_scores = {
            i: decision['scores'][i] for i in decision['candidates']
        }
        assert decision['index'] == min(
            open_scores, key=open_scores.__getitem__
        )
        assert decision['closed_before'] == sorted(
            set(range(DEPTH)) - set(decision['candidates'])
        )
        assert len(decision['scores']) == DEPTH  # one type's scores only
    assert [d['kind'] for d in state['decisions']] == state['order']
    assert [d['iter'] for d in state['decisions']] == [4, 8, 12]

    log = next(map_run.work.glob('*/*.log')).read_text()
    assert 'chosen (lowest CV RMSE)' in log
    assert 'HetDPT prune counts (MAP): attn=1 act=2' in log
    assert log.count('<- lowest') == 3
    assert 'HetDPT self-distillation: the teacher is a frozen copy' in log
    # the paper's ImageNet points on the digits: their units are said
    assert '"predicted" is in the units of the points\' accuracies' in log
    assert log.count('requires_grad=False') == 0  # the teacher's neither


def test_score_gradients_are_logged_and_decisions_keep_every_score(map_run):
    scalars = next(map_run.work.glob('*/vis_data/scalars.json'))
    rows = [
        json.loads(line)
        for line in scalars.read_text().split('\n')
        if line.strip()
    ]
    train = [row for row in rows if 'loss' in row]
    for kind in ('attn', 'act'):
        grads = [row[f'score_grad_{kind}'] for row in train]
        # Logged every iteration (interval 1), |dL/dm| of the open layers.
        assert len(grads) == len(train) == 16
        assert all(math.isfinite(g) and g > 0 for g in grads)
    state = load_checkpoint_file(map_run.work / 'epoch_4.pth')['meta'][
        STATE_KEY
    ]
    for decision in state['decisions']:
        assert set(decision['gate_scores']) == {'attn', 'act'}
        assert decision['gate_scores'][decision['kind']] == pytest.approx(
            decision['scores']
        )


def test_teacher_is_the_unpruned_model_and_is_saved(map_run):
    sd = load_checkpoint_file(map_run.work / 'epoch_4.pth')['state_dict']
    assert bool(sd['teacher.hetdpt_ready'])
    teacher_gates = [
        v
        for k, v in sd.items()
        if k.startswith('teacher.') and k.endswith('hetdpt_gate')
    ]
    assert len(teacher_gates) == 2 * DEPTH
    assert all(float(g) == 1.0 for g in teacher_gates)  # snapshot was dense


def test_resume_after_the_first_removal_continues_identically(map_run):
    """Kill after epoch 1 (first removal done) and --resume: same spec, same
    schedule position, and the same logged losses as the uninterrupted run."""
    work = map_run.root / 'resumed'
    work.mkdir()
    shutil.copy(map_run.work / 'epoch_1.pth', work / 'epoch_1.pth')
    config = shutil.copy(map_run.config, map_run.root / 'prune_resume.py')
    assert (
        load_tool('train').main(
            [
                str(config),
                '--work-dir',
                str(work),
                '--resume',
                str(work / 'epoch_1.pth'),
            ]
        )
        == 0
    )

    log = next(work.glob('*/*.log')).read_text()
    assert (
        'HetDPT prune state restored: PruneSpec(depth=4, attn_removed=[]'
        ', act_removed=[' in log
    )
    assert '1 of 3 removals done' in log
    full, resumed = train_losses(map_run.work), train_losses(work)
    assert sorted(resumed) == list(range(ITERS_PER_EPOCH + 1, 17))
    for step in resumed:
        assert resumed[step] == full[step], step
    first = load_checkpoint_file(map_run.work / 'epoch_4.pth')['meta']
    second = load_checkpoint_file(work / 'epoch_4.pth')['meta']
    assert second[META_KEY]['spec'] == first[META_KEY]['spec']
    assert second[STATE_KEY]['decisions'] == first[STATE_KEY]['decisions']


#: Runs tools/train.py and kills its own process (SIGKILL, no cleanup) at a
#: chosen point: after iteration N, right after the N-th prune decision, or
#: half-way through writing the N-th checkpoint.
KILLER = """
import os, runpy, signal, sys
point, number = sys.argv[1], int(sys.argv[2])
sys.argv = ['tools/train.py'] + sys.argv[3:]
calls = []

def die():
    os.kill(os.getpid(), signal.SIGKILL)

if point == 'iter':
    from hetdpt_mm.hooks import EpochSeedHook
    def after_train_iter(self, runner, *args, **kwargs):
        if runner.iter + 1 == number:
            die()
    EpochSeedHook.after_train_iter = after_train_iter
elif point == 'decision':
    from hetdpt_mm.hooks import HetDPTPruneHook
    remove = HetDPTPruneHook._remove_next
    def remove_then_die(self, runner, step):
        remove(self, runner, step)
        if len(self.decisions) == number:
            die()
    HetDPTPruneHook._remove_next = remove_then_die
elif point == 'save':
    from hetdpt_mm.fileio import AtomicLocalBackend, atomic_path
    put = AtomicLocalBackend.put
    def put_half_then_die(self, obj, filepath):
        calls.append(filepath)
        if str(filepath).endswith('.pth') and len(calls) == number:
            with atomic_path(filepath) as tmp:
                tmp.write_bytes(obj[:len(obj) // 2])
                die()
        put(self, obj, filepath)
    AtomicLocalBackend.put = put_half_then_die
runpy.run_path(sys.argv[0], run_name='__main__')
"""


@pytest.mark.parametrize(
    'point, number',
    [
        ('iter', 6),  # during epoch 2
        ('decision', 2),  # right after the 2nd removal, before epoch_2.pth
        ('save', 3),  # half of epoch_3.pth written
    ],
)
def test_killed_runs_resume_to_the_same_weights(
    map_run, tmp_path, point, number
):
    """kill -9 at a chosen point, then --resume: the same final spec and
    bit-identical weights as the uninterrupted run, and no half-written file
    left in the work dir."""
    work = tmp_path / 'work'
    killer = tmp_path / 'killer.py'
    killer.write_text(KILLER)
    killed = subprocess.run(
        [
            sys.executable,
            str(killer),
            point,
            str(number),
            str(map_run.config),
            '--work-dir',
            str(work),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, OMP_NUM_THREADS='1', PYTHONPATH=str(REPO)),
    )
    assert killed.returncode == -9, killed.stderr[-3000:]
    assert not (work / 'epoch_4.pth').exists()
    for path in work.glob('*.pth'):
        load_checkpoint_file(path)  # no partial file at a final path

    assert (
        load_tool('train').main(
            [str(map_run.config), '--work-dir', str(work), '--resume']
        )
        == 0
    )
    # The killed save's temporary file is gone too.
    assert not [p.name for p in work.iterdir() if p.name.endswith('.tmp')]
    full = load_checkpoint_file(map_run.work / 'epoch_4.pth')
    resumed = load_checkpoint_file(work / 'epoch_4.pth')
    assert resumed['meta'][META_KEY]['spec'] == full['meta'][META_KEY]['spec']
    assert resumed['state_dict'].keys() == full['state_dict'].keys()
    for key, value in full['state_dict'].items():
        assert torch.equal(resumed['state_dict'][key], value), key


def test_resume_from_a_version_1_checkpoint(map_run):
    """A checkpoint whose prune state predates versioning (no `version`, no
    `selection`) resumes like a current one."""
    work = map_run.root / 'resumed_v1'
    work.mkdir()
    checkpoint = load_checkpoint_file(map_run.work / 'epoch_1.pth')
    state = checkpoint['meta'][STATE_KEY]
    del state['version'], state['selection']
    torch.save(checkpoint, work / 'epoch_1.pth')
    config = shutil.copy(map_run.config, map_run.root / 'prune_resume_v1.py')
    assert (
        load_tool('train').main(
            [
                str(config),
                '--work-dir',
                str(work),
                '--resume',
                str(work / 'epoch_1.pth'),
            ]
        )
        == 0
    )

    first = load_checkpoint_file(map_run.work / 'epoch_4.pth')['meta']
    second = load_checkpoint_file(work / 'epoch_4.pth')['meta']
    assert second[STATE_KEY] == first[STATE_KEY]
    assert second[STATE_KEY]['version'] == 2


def test_merged_checkpoint_reproduces_the_gated_model(map_run):
    """MergeCheckpointHook's file: loadable with no structure arguments,
    outputs of the gated model to <= 1e-5, the expected parameter count."""
    merged_path = map_run.work / 'prune_map_merged.pth'
    merged_ckpt = load_checkpoint_file(merged_path)
    assert set(merged_ckpt) == {'state_dict', 'meta'}
    record = merged_ckpt['meta'][META_KEY]
    assert record['form'] == 'merged' and record['prefix'] == 'backbone.'
    assert not any(k.startswith('teacher') for k in merged_ckpt['state_dict'])

    cfg = Config.fromfile(map_run.config)
    gated = MODELS.build(cfg.model)
    load_checkpoint(gated, str(map_run.work / 'epoch_4.pth'), strict=True)
    merged = MODELS.build(
        dict(
            type='ImageClassifier',
            backbone=dict(
                type='HetDPTViT',
                arch=dict(embed_dims=DIM, num_layers=DEPTH, num_heads=3),
                img_size=32,
                patch_size=4,
                init_cfg=dict(
                    type='Pretrained',
                    checkpoint=str(merged_path),
                    prefix='backbone.',
                ),
            ),
            head=dict(
                type='VisionTransformerClsHead',
                num_classes=10,
                in_channels=DIM,
            ),
        )
    )
    merged.init_weights()
    assert merged.backbone.form == 'merged'
    load_checkpoint(merged, str(merged_path), strict=True)  # head as well

    x = torch.randn(8, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = gated.eval()(x, mode='tensor')
        actual = merged.eval()(x, mode='tensor')
    assert (actual - expected).abs().max() <= 1e-5

    spec = merged.backbone.prune_spec
    assert (spec.n_attn, spec.n_act) == (1, 2)
    hidden = 4 * DIM
    dense = sum(p.numel() for p in tiny_classifier(gated=False).parameters())
    attention = 3 * DIM * DIM + 3 * DIM + DIM * DIM + DIM
    ffn_saving = (DIM * hidden + hidden + hidden * DIM + DIM) - (
        DIM * DIM + DIM
    )
    expected_params = dense - spec.n_attn * attention - spec.n_act * ffn_saving
    assert sum(p.numel() for p in merged.parameters()) == expected_params
    assert (
        sum(
            v.numel()
            for k, v in merged_ckpt['state_dict'].items()
            if not k.endswith('_extra_state')
        )
        == expected_params
    )


# ------------------------------------------------------------ two ranks
def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


def dist_train(config: Path, work_dir: Path, *options: str) -> None:
    """tools/dist_train.sh with 2 processes (gloo on CPU)."""
    env = dict(
        os.environ,
        PYTHON=sys.executable,
        PORT=str(free_port()),
        OMP_NUM_THREADS='1',
    )
    result = subprocess.run(
        [
            'bash',
            str(REPO / 'tools' / 'dist_train.sh'),
            str(config),
            '2',
            '--work-dir',
            str(work_dir),
            *options,
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, (
        result.stdout[-3000:] + result.stderr[-3000:]
    )


def test_two_ranks_make_identical_decisions(tmp_path, digits):
    """tools/dist_train.sh, 2 processes, gloo on CPU: the epoch schedule's
    three removals; every rank's own lowest-score choice agrees.  Resumed
    after epoch 1 on 2 ranks, the run ends with bit-identical weights (the
    demo's random augmentation included)."""
    hooks = """[dict(type='HetDPTPruneHook', counts=dict(attn=1, act=2),
                 schedule='epoch', prune_epoch=1)]"""
    config = write_config(
        tmp_path / 'prune_ddp.py',
        digits,
        hooks,
        max_epochs=3,
        indices=128,
        model="type='ImageClassifier',",
    )
    dist_train(config, tmp_path / 'work')
    resumed = tmp_path / 'resumed'
    resumed.mkdir()
    shutil.copy(tmp_path / 'work' / 'epoch_1.pth', resumed / 'epoch_1.pth')
    dist_train(config, resumed, '--resume', str(resumed / 'epoch_1.pth'))
    full = load_checkpoint_file(tmp_path / 'work' / 'epoch_3.pth')
    again = load_checkpoint_file(resumed / 'epoch_3.pth')
    for key, value in full['state_dict'].items():
        assert torch.equal(again['state_dict'][key], value), key
    meta = load_checkpoint_file(tmp_path / 'work' / 'epoch_3.pth')['meta']
    decisions = meta[STATE_KEY]['decisions']
    # 128 images over 2 ranks, batch 16: 4 iterations per epoch per rank.
    assert [d['iter'] for d in decisions] == [2, 3, 4]
    for decision in decisions:
        assert decision['rank_choices'] == [decision['index']] * 2
    spec = PruneSpec.from_dict(meta[META_KEY]['spec'])
    assert (spec.n_attn, spec.n_act) == (1, 2)
    log = next((tmp_path / 'work').glob('*/*.log')).read_text()
    assert 'on 2 rank(s)' in log


def test_a_merged_file_into_the_gated_config_names_the_fix_error(
    tmp_path, capsys
):
    """Issue 51 item 8: the error says to start from a dense or gated
    checkpoint, and names the hook, not its object's address."""
    from helpers import small_config

    from hetdpt_mm.merge import merge_checkpoint
    from hetdpt_mm.models import HetDPTViT

    arch = dict(embed_dims=96, num_layers=6, num_heads=3, mlp_ratio=4)
    dense = HetDPTViT(arch=arch, img_size=32, patch_size=4)
    state = {'backbone.' + k: v for k, v in dense.state_dict().items()}
    merged, _ = merge_checkpoint(
        {'state_dict': state},
        spec=dict(attn_removed=[1], act_removed=[2]),
        prefix='backbone.',
        arch=arch,
    )
    torch.save(merged, tmp_path / 'merged.pth')
    make_classification(tmp_path / 'cls')
    config = small_config(
        tmp_path / 'prune.py', PRUNE_CONFIG, tmp_path / 'cls'
    )
    code = load_tool('train').main(
        [
            config,
            '--work-dir',
            str(tmp_path / 'work'),
            '--cfg-options',
            f'load_from={tmp_path / "merged.pth"}',
        ]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert 'HetDPTViT in the merged form' in err
    assert 'gated=True' in err
    assert 'object at 0x' not in err
