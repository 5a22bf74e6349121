"""MMEngine's EMAHook in runs whose structure changes
(hetdpt_mm/hooks/ema_structure.py): the averaged model follows the gates
HetDPTPruneHook closes and a structure loaded at start-up, its checkpoints
agree with their records, the merged and HetDPT+ files are written, and
the run resumes; a structure loaded at start-up is the one the optimizer
trains."""

from pathlib import Path

import pytest
import torch
from helpers import DENSE_CONFIG, REPO, load_tool, small_config

from hetdpt_demo.data import make_classification
from hetdpt_mm.checkpoint.reader import read_backbone_checkpoint
from hetdpt_mm.checkpoint.safe_load import load_checkpoint_file
from hetdpt_mm.spec import META_KEY, PruneSpec

PRUNE_CONFIG = REPO / 'configs/demo/vit-demo_digits_prune.py'
#: Both removals after the first iteration (16 images: one per epoch).
HOOKS = (
    "[dict(type='EMAHook', momentum=0.2), "
    "dict(type='HetDPTPruneHook', counts=dict(attn=1, act=1), "
    "schedule='epoch', prune_epoch=1, stages=None), "
    "dict(type='MergeCheckpointHook'), "
    "dict(type='WidthPruneHook', ratio=0.3, importance='magnitude', "
    'plot=False)]'
)


def train(config, *args):
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return load_tool('train').main([str(config), *args])
    finally:
        torch.set_num_threads(previous)


def ema_module_state(checkpoint):
    return {
        k[len('module.') :]: v
        for k, v in checkpoint['ema_state_dict'].items()
        if k.startswith('module.')
    }


@pytest.fixture(scope='module')
def ema_prune_run(tmp_path_factory):
    root = tmp_path_factory.mktemp('ema_prune')
    make_classification(root / 'cls')
    config = small_config(
        root / 'ema_prune.py', PRUNE_CONFIG, root / 'cls', custom_hooks=HOOKS
    )
    assert train(config, '--work-dir', str(root / 'work')) == 0
    return root, Path(config)


def spec_of(state, meta):
    return read_backbone_checkpoint(dict(state_dict=state, meta=meta)).record


def test_the_averaged_model_follows_the_closed_gates(ema_prune_run):
    root, _ = ema_prune_run
    checkpoint = load_checkpoint_file(root / 'work/epoch_2.pth')
    final = PruneSpec.coerce(checkpoint['meta'][META_KEY]['spec'], 6)
    assert (final.n_attn, final.n_act) == (1, 1)
    for state in (checkpoint['state_dict'], ema_module_state(checkpoint)):
        record = spec_of(state, checkpoint['meta'])
        assert (record.form, record.spec) == ('gated', final)
        closed = {
            k
            for k, v in state.items()
            if k.endswith('hetdpt_gate') and float(v) == 0
        }
        assert len(closed) == 2
    merged = load_checkpoint_file(root / 'work/ema_prune_merged.pth')
    assert spec_of(merged['state_dict'], merged['meta']).spec == final
    assert spec_of(ema_module_state(merged), merged['meta']).form == 'merged'
    plus = load_checkpoint_file(root / 'work/ema_prune_plus.pth')
    widths = read_backbone_checkpoint(plus).record.spec.widths
    assert widths is not None and widths.embed_dims < 96


def test_an_ema_prune_run_resumes(ema_prune_run, tmp_path):
    root, config = ema_prune_run
    work = tmp_path / 'work'
    code = train(
        config,
        '--work-dir',
        str(work),
        '--resume',
        str(root / 'work/epoch_1.pth'),
        '--cfg-options',
        'train_cfg.max_epochs=3',
    )
    assert code == 0
    checkpoint = load_checkpoint_file(work / 'epoch_3.pth')
    assert int(checkpoint['ema_state_dict']['steps']) == 3
    record = spec_of(ema_module_state(checkpoint), checkpoint['meta'])
    assert record.spec == PruneSpec.coerce(
        checkpoint['meta'][META_KEY]['spec'], 6
    )
    assert (record.spec.n_attn, record.spec.n_act) == (1, 1)


@pytest.mark.parametrize('hook', ['HetDPTMetaHook', 'MergeCheckpointHook'])
def test_the_averaged_model_takes_a_structure_loaded_at_start(
    ema_prune_run, hook, tmp_path
):
    """Fine-tuning the merged file through ``load_from``: the dense backbone
    rebuilds to it when the runner loads it, after EMAHook copied the model
    (whose update then met missing parameters)."""
    root, _ = ema_prune_run
    merged = root / 'work/ema_prune_merged.pth'
    config = small_config(
        tmp_path / 'ema_finetune.py',
        DENSE_CONFIG,
        root / 'cls',
        load_from=repr(str(merged)),
        custom_hooks="[dict(type='EMAHook', momentum=0.2), "
        f"dict(type='{hook}')]",
    )
    assert train(config, '--work-dir', str(tmp_path / 'work')) == 0
    checkpoint = load_checkpoint_file(tmp_path / 'work/epoch_2.pth')
    record = spec_of(ema_module_state(checkpoint), checkpoint['meta'])
    assert record.form == 'merged' and (
        record.spec.n_attn,
        record.spec.n_act,
    ) == (1, 1)


def test_a_structure_loaded_at_start_is_what_the_optimizer_trains(
    ema_prune_run, tmp_path
):
    """The runner builds the optimizer before it loads ``load_from``: the
    merged structure must be built from the file first, or the optimizer
    holds the dense parameters the load replaced."""
    root, _ = ema_prune_run
    merged = root / 'work/ema_prune_merged.pth'
    config = small_config(
        tmp_path / 'finetune.py',
        DENSE_CONFIG,
        root / 'cls',
        load_from=repr(str(merged)),
    )
    assert train(config, '--work-dir', str(tmp_path / 'work')) == 0
    start = load_checkpoint_file(merged)['state_dict']
    trained = load_checkpoint_file(tmp_path / 'work/epoch_2.pth')
    record = spec_of(trained['state_dict'], trained['meta'])
    assert record.form == 'merged'
    weights = [
        k
        for k, v in start.items()
        if k.startswith('backbone.blocks.') and v.is_floating_point()
    ]
    unchanged = [
        k for k in weights if torch.equal(start[k], trained['state_dict'][k])
    ]
    assert weights and unchanged == []
