"""``--cfg-options`` of tools/train.py and tools/test.py: MMEngine's
``KEY=VALUE`` forms, and values holding a dict (a prune spec typed inline),
which MMEngine's ``DictAction`` splits at their commas or recurses on."""

import pytest
import torch
from helpers import DENSE_CONFIG, REPO, load_tool, small_config

from hetdpt_demo.data import make_classification
from hetdpt_mm.checkpoint.reader import read_backbone_checkpoint
from hetdpt_mm.checkpoint.safe_load import load_checkpoint_file
from hetdpt_mm.runner import load_config
from hetdpt_mm.spec import PruneSpec

SPEC = PruneSpec(6, attn_removed=[1], act_removed=[2, 4])
FINETUNE = REPO / 'configs/hetdpt/deit-b_finetune-10l_in1k.py'
PRUNE_CONFIG = REPO / 'configs/demo/vit-demo_digits_prune.py'


@pytest.fixture(scope='module')
def train():
    return load_tool('train')


def configured_spec(train, config, *options):
    cfg = load_config(
        train.parse_args([str(config), '--cfg-options', *options])
    )
    return cfg.model.backbone.get('prune_spec')


@pytest.mark.parametrize(
    'option',
    [
        'model.backbone.prune_spec={"attn_removed":[1],"act_removed":[2,4]}',
        'model.backbone.prune_spec='
        '{"attn_removed": [1], "act_removed": [2, 4]}',
        'model.backbone.prune_spec='
        "{'attn_removed': [1], 'act_removed': (2, 4)}",
        'model.backbone.prune_spec=dict(attn_removed=[1],act_removed=[2,4])',
    ],
)
def test_a_prune_spec_typed_inline(train, option):
    assert (
        PruneSpec.coerce(configured_spec(train, DENSE_CONFIG, option), 6)
        == SPEC
    )


def test_an_inline_dict_merges_as_a_child_configs_dict(train):
    """Into the config's spec key by key, as MMEngine merges a dict (and
    the one-entry form does); ``_delete_`` replaces it."""
    given = '{"attn_removed": [1, 2]}'
    for option in (
        f'model.backbone.prune_spec={given}',
        'model.backbone.prune_spec.attn_removed=[1,2]',
    ):
        assert configured_spec(train, FINETUNE, option) == dict(
            attn_removed=[1, 2], act_removed=[2, 7, 8, 10, 11]
        )
    assert configured_spec(
        train,
        FINETUNE,
        'model.backbone.prune_spec={"_delete_": true, "attn_removed": [1, 2]}',
    ) == dict(attn_removed=[1, 2])


def test_other_values_are_mmengines(train):
    cfg = load_config(
        train.parse_args(
            [
                str(DENSE_CONFIG),
                '--cfg-options',
                'work_dir=/tmp/{run}',
                'model.head.num_classes=5',
                'train_cfg.max_epochs=2',
                "custom_hooks=[dict(type='EMAHook',momentum=0.5)]",
                'model.backbone.out_indices=[0,1]',
                'randomness.seed=None',
            ]
        )
    )
    assert cfg.work_dir == '/tmp/{run}' and cfg.model.head.num_classes == 5
    assert cfg.custom_hooks == [dict(type='EMAHook', momentum=0.5)]
    assert cfg.model.backbone.out_indices == [0, 1]
    assert cfg.randomness.seed is None


@pytest.mark.parametrize(
    'option, message',
    [
        (
            'model.backbone.prune_spec={attn_removed:[1]}',
            'attn_removed is not a literal',
        ),
        ('model.backbone.prune_spec={"attn_removed":[1]', 'was never closed'),
        ('model.backbone.prune_spec', 'takes KEY=VALUE'),
    ],
)
def test_a_value_that_is_no_dict_names_the_forms(
    train, capsys, option, message
):
    assert train.main([str(DENSE_CONFIG), '--cfg-options', option]) == 2
    err = capsys.readouterr().err
    assert err.startswith('error: ') and message in err, err
    if 'KEY=VALUE' not in message:
        assert 'model.backbone.prune_spec.name=[1,2]' in err


def test_training_with_an_inline_spec(train, tmp_path):
    make_classification(tmp_path / 'cls')
    config = small_config(
        tmp_path / 'dense.py', DENSE_CONFIG, tmp_path / 'cls'
    )
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert (
            train.main(
                [
                    config,
                    '--work-dir',
                    str(tmp_path / 'work'),
                    '--cfg-options',
                    'model.backbone.prune_spec='
                    '{"attn_removed": [1], "act_removed": [2, 4]}',
                ]
            )
            == 0
        )
    finally:
        torch.set_num_threads(previous)
    checkpoint = load_checkpoint_file(tmp_path / 'work/epoch_2.pth')
    assert read_backbone_checkpoint(checkpoint).record.spec == SPEC


def test_an_unknown_arch_lists_every_accepted_name(train, capsys, tmp_path):
    """Ours and mmpretrain's names, and the closest (issue 51 item 7)."""
    option = 'model.backbone.arch=deit-bse'
    args = [str(DENSE_CONFIG), '--work-dir', str(tmp_path), '--cfg-options']
    assert train.main([*args, option]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: unknown arch 'deit-bse'"), err
    assert 'did you mean `deit-base`' in err
    for name in ('deit-base', 'deit-small', 'deit-tiny', 'b', 'base', 'large'):
        assert repr(name) in err


@pytest.mark.parametrize(
    'config, option, message',
    [
        (
            DENSE_CONFIG,
            'model.backbone.prune_spc={"attn_removed":[1]}',
            "HetDPTViT got unexpected keyword arguments ['prune_spc'] "
            '(did you mean `prune_spec`?)',
        ),
        (
            PRUNE_CONFIG,
            'custom_hooks.0.budgt=3',
            'custom_hooks.0: HetDPTPruneHook got unexpected keyword '
            "arguments ['budgt'] (did you mean `budget`?)",
        ),
        (
            PRUNE_CONFIG,
            'custom_hooks.0.zzz=3',
            "HetDPTPruneHook got unexpected keyword arguments ['zzz']; it "
            "takes ['bounds', 'budget', ",
        ),
    ],
)
def test_an_unknown_key_names_its_component_and_the_closest_key(
    train, capsys, tmp_path, config, option, message
):
    """Issue 51 item 8."""
    args = [str(config), '--work-dir', str(tmp_path), '--cfg-options']
    assert train.main([*args, option]) == 2
    err = capsys.readouterr().err
    assert err.startswith('error: ') and message in err, err


def test_a_value_with_spaces_is_kept_or_refused(train, capsys, tmp_path):
    """Issue 59 item 1: MMEngine's DictAction dropped the spaces of a
    path (``my data`` became ``mydata``); a list whose items hold spaces
    cannot be read that way and is refused before anything runs."""
    root = tmp_path / 'my data'
    cfg = load_config(
        train.parse_args(
            [
                str(DENSE_CONFIG),
                '--cfg-options',
                f'test_dataloader.dataset.data_root={root}',
                f"work_dir='{tmp_path}/a, b'",
                'model.backbone.out_indices=[0, 1]',
                f'model.backbone.init_cfg.checkpoint={root} (1)/x.pth',
            ]
        )
    )
    assert cfg.test_dataloader.dataset.data_root == str(root)
    assert cfg.model.backbone.init_cfg.checkpoint == f'{root} (1)/x.pth'
    assert cfg.work_dir == f'{tmp_path}/a, b'
    assert cfg.model.backbone.out_indices == [0, 1]
    before = sorted(tmp_path.iterdir())
    option = f'test_dataloader.dataset.data_root=[{root}, b]'
    args = [str(DENSE_CONFIG), '--work-dir', str(tmp_path / 'w')]
    assert train.main([*args, '--cfg-options', option]) == 2
    err = capsys.readouterr().err
    assert err.startswith('error: ') and 'spaces' in err, err
    assert sorted(tmp_path.iterdir()) == before
