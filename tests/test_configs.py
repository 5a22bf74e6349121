"""Every config under configs/ parses and builds its model (issue 6), and
every file under configs/_base_/ is a base of some config (issue 15).

The configs name checkpoints that a test machine does not have (or has from
some earlier run).  Each backbone checkpoint is replaced by a stand-in file
holding only what the backbone reads while it is built (key names and
``meta``), so the configs build exactly as written and the structure a
pruned checkpoint's ``meta`` describes is checked too:

* a config's ``hetdpt_checkpoint`` stands for a merged HetDPT checkpoint with a
  mixed spec in its meta -> the built backbone must be merged with that spec;
* any other backbone checkpoint stands for an official dense DeiT file
  (``{'model': state_dict}``, no meta) -> the built backbone must be dense.
"""

import ast
import os.path as osp
from pathlib import Path

import pytest
import torch
import torch.nn as nn
from mmengine.config import Config
from mmengine.registry import HOOKS, MODELS, DefaultScope
from mmengine.utils import import_modules_from_strings

from hetdpt_mm import META_KEY, PruneSpec
from hetdpt_mm.checkpoint.record import HetDPTRecord
from hetdpt_mm.models.vit.codec import RELEASED_SEMANTICS, resolve_arch

torch.set_num_threads(2)

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = sorted(
    str(path.relative_to(ROOT / 'configs'))
    for path in (ROOT / 'configs').rglob('*.py')
    if '_base_' not in path.parts
)
#: The other families' configs build in their own tests (test_swin.py,
#: test_layerscale.py, test_windowed_vit_detection.py): this module writes
#: stand-ins for ViT checkpoints.
OTHER_FAMILIES = ('swin', 'dinov2', 'vitdet', 'sam-b')
VIT_CONFIGS = [
    name for name in CONFIGS if not any(key in name for key in OTHER_FAMILIES)
]
BASES = sorted(
    str(path.relative_to(ROOT / 'configs'))
    for path in (ROOT / 'configs' / '_base_').rglob('*.py')
)


def local_bases(path: Path) -> set:
    """The files under configs/ that `path` inherits, directly or through
    its bases (a toolbox's ``pkg::`` bases are not followed)."""
    for node in ast.parse(path.read_text()).body:
        if (
            isinstance(node, ast.Assign)
            and getattr(node.targets[0], 'id', None) == '_base_'
        ):
            names = ast.literal_eval(node.value)
            break
    else:
        return set()
    found = set()
    for name in [names] if isinstance(names, str) else names:
        if '::' in name:
            continue
        base = (path.parent / name).resolve()
        found |= {base} | local_bases(base)
    return found


def mixed_spec(depth: int) -> PruneSpec:
    """Blocks of all four kinds (full, attention removed, GELU removed,
    both removed) for any depth >= 4."""
    half = depth // 2
    return PruneSpec(
        depth, attn_removed=[0, half], act_removed=[half, depth - 1]
    )


def write_stand_in(path: Path, depth: int, spec=None) -> None:
    """A file that reads like a ViT checkpoint while the backbone is built
    (names and meta; the tensors are empty, as weights load only in
    init_weights, which building does not call)."""
    keys = ['cls_token', 'pos_embed', 'patch_embed.proj.weight']
    for i in range(depth):
        keys.append(f'blocks.{i}.norm1.weight')
        if spec is None or not spec.is_removed('attn', i):
            keys.append(f'blocks.{i}.attn.qkv.weight')
        if spec is not None and spec.is_removed('act', i):
            keys.append(f'blocks.{i}.mlp.fc.weight')
        else:
            keys.append(f'blocks.{i}.mlp.fc1.weight')
    state = {key: torch.empty(0) for key in keys}
    if spec is None:  # an official DeiT file
        torch.save(dict(model=state), path)
        return
    torch.save(
        dict(
            state_dict={f'backbone.{k}': v for k, v in state.items()},
            meta={
                META_KEY: HetDPTRecord(
                    spec,
                    'merged',
                    semantics=RELEASED_SEMANTICS,
                    prefix='backbone.',
                ).to_dict()
            },
        ),
        path,
    )


def test_configs_are_found():
    assert 'detr_hetdpt_deit_b.py' in CONFIGS
    assert 'upernet_hetdpt_deit_b_ade20k.py' in CONFIGS
    assert osp.join('demo', 'detr_hetdpt_demo.py') in CONFIGS


def test_configs_load_and_every_base_is_used():
    used = set()
    for name in CONFIGS:
        path = ROOT / 'configs' / name
        Config.fromfile(path)
        used |= local_bases(path)
    used = {str(path.relative_to(ROOT / 'configs')) for path in used}
    unused = set(BASES) - used
    assert not unused, f'no config inherits {sorted(unused)}'


def test_configs_run_from_any_folder_and_under_any_runner(
    tmp_path, monkeypatch
):
    """The files a config names in the repository are found from its own
    folder (MMEngine's ``{{ fileDirname }}``), not the working directory;
    a loader without workers has no persistent ones, which mmpretrain's,
    mmdet's and mmseg's own tools/train.py refuse."""
    monkeypatch.chdir(tmp_path)
    for name in CONFIGS:
        cfg = Config.fromfile(ROOT / 'configs' / name)
        points = [
            hook['map_points']
            for hook in cfg.get('custom_hooks', [])
            if 'map_points' in hook
        ]
        for path in points:
            if 'work_dirs' not in path:  # written by a MAP collection run
                assert Path(path).is_file(), (name, path)
        for loader in (
            'train_dataloader',
            'val_dataloader',
            'test_dataloader',
        ):
            settings = cfg.get(loader) or {}
            if settings.get('num_workers') == 0:
                assert settings.get('persistent_workers') is False, (
                    name,
                    loader,
                )


@pytest.mark.parametrize('name', VIT_CONFIGS)
def test_config_builds(name, tmp_path):
    cfg = Config.fromfile(ROOT / 'configs' / name)
    assert 'hetdpt_mm' in cfg.custom_imports['imports']
    import_modules_from_strings(**cfg.custom_imports)
    backbone_cfg = cfg.model.backbone
    assert backbone_cfg.type == 'HetDPTViT'
    depth = resolve_arch(backbone_cfg.arch)['num_layers']

    expected_spec, expected_form = PruneSpec(depth), 'pruned'
    init_cfg = backbone_cfg.get('init_cfg')
    if init_cfg is not None:
        stand_in = tmp_path / 'backbone.pth'
        if init_cfg.checkpoint == cfg.get('hetdpt_checkpoint'):
            expected_spec, expected_form = mixed_spec(depth), 'merged'
            write_stand_in(stand_in, depth, expected_spec)
        else:
            write_stand_in(stand_in, depth)
        init_cfg.checkpoint = str(stand_in)
    if backbone_cfg.get('gated'):
        expected_form = 'gated'
    if isinstance(backbone_cfg.get('prune_spec'), str):
        # The spec file a search run writes (a stage-2 config's input).
        spec_file = tmp_path / 'found_spec.json'
        spec_file.write_text(mixed_spec(depth).to_json())
        backbone_cfg.prune_spec = str(spec_file)
    if backbone_cfg.get('prune_spec') is not None:
        expected_spec = PruneSpec.coerce(backbone_cfg.prune_spec, depth)

    with DefaultScope.overwrite_default_scope(cfg.default_scope):
        model = MODELS.build(cfg.model)
    backbone = model.backbone
    assert backbone.form == expected_form
    assert backbone.prune_spec == expected_spec
    if expected_form == 'merged':
        removed = expected_spec.act_removed[0]
        assert isinstance(backbone.blocks[removed].mlp.fc, nn.Linear)

    if expected_form == 'gated':
        # Closed gates skip their layer, so DDP must allow unused
        # parameters, and the learned importances get no weight decay.
        wrapper = cfg.get('model_wrapper_cfg') or {}
        assert (
            wrapper.get(
                'find_unused_parameters', cfg.get('find_unused_parameters')
            )
            is True
        )
        custom_keys = cfg.optim_wrapper.paramwise_cfg.custom_keys
        assert custom_keys['hetdpt_score'] == dict(decay_mult=0.0)
    for hook in cfg.get('custom_hooks', []):
        assert HOOKS.get(hook['type']) is not None, hook['type']
