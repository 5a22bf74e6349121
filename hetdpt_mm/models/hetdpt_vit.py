"""HetDPTViT: a DeiT/ViT backbone whose attention sublayers and FFN GELUs can
be removed (HetDPT), for mmpretrain, mmdet and mmseg."""
import copy
from functools import partial
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
from mmengine.logging import print_log
from mmengine.model import BaseModule
from timm.layers import PatchEmbed, resample_abs_pos_embed, trunc_normal_
from timm.models.vision_transformer import init_weights_vit_timm

from ..checkpoint import CheckpointError, load_checkpoint_file
from ..spec import ACT, ATTN, PruneSpec, read_spec_meta, spec_meta
from .layers import REMOVED_ATTN_OUTPUTS, RESIDUAL_GELU_MODES, build_block
from .state_dict import (GATE_SUFFIXES, StateDictMismatch, convert_state_dict,
                         gate_spec, infer_layout, is_vit_state_dict,
                         resize_pos_embed)

ARCH_PRESETS = {
    'deit-tiny': dict(embed_dims=192, num_layers=12, num_heads=3,
                      mlp_ratio=4.),
    'deit-small': dict(embed_dims=384, num_layers=12, num_heads=6,
                       mlp_ratio=4.),
    'deit-base': dict(embed_dims=768, num_layers=12, num_heads=12,
                      mlp_ratio=4.),
}
#: The behaviour of released HetDPT (stage-2) models, METHOD.md section 1.
RELEASED_SEMANTICS = dict(removed_attn_output='norm',
                          residual_gelu='both_removed')


def resolve_arch(arch: Union[str, Mapping]) -> Dict:
    if isinstance(arch, str):
        if arch not in ARCH_PRESETS:
            raise ValueError(f'unknown arch {arch!r}; choose one of '
                             f'{sorted(ARCH_PRESETS)} or pass a dict')
        return dict(ARCH_PRESETS[arch])
    arch = dict(arch)
    missing = {'embed_dims', 'num_layers', 'num_heads'} - set(arch)
    if missing:
        raise ValueError(f'arch dict is missing {sorted(missing)}')
    if 'feedforward_channels' in arch:  # mmpretrain's spelling
        arch['mlp_ratio'] = arch.pop('feedforward_channels') / \
            arch['embed_dims']
    arch.setdefault('mlp_ratio', 4.)
    unknown = set(arch) - {'embed_dims', 'num_layers', 'num_heads',
                           'mlp_ratio'}
    if unknown:
        raise ValueError(f'unknown arch keys {sorted(unknown)}')
    return arch


def extract_backbone_state_dict(checkpoint: Mapping,
                                prefix: Optional[str] = None,
                                source: str = 'checkpoint'
                                ) -> Tuple[Dict, List[str]]:
    """Find the ViT backbone weights in a checkpoint of any of the layouts we
    load: official DeiT / timm / authors' HetDPT (``{'model': sd}``), MMEngine
    (``{'state_dict': sd}``, backbone under ``prefix``), or a bare state dict.

    Returns the backbone state dict (keys relative to the backbone) and the
    names of the keys that were left out.
    """
    state_dict = checkpoint
    for key in ('state_dict', 'model'):
        if isinstance(checkpoint.get(key), Mapping):
            state_dict = checkpoint[key]
            break
    if prefix is None and not is_vit_state_dict(state_dict) and any(
            k.startswith('backbone.') for k in state_dict):
        prefix = 'backbone.'
    if prefix:
        selected = {k[len(prefix):]: v for k, v in state_dict.items()
                    if k.startswith(prefix)}
        if not selected:
            raise CheckpointError(
                f'{source} has no keys with prefix {prefix!r} (first keys: '
                f'{list(state_dict)[:5]})')
    else:
        selected = dict(state_dict)
    if not is_vit_state_dict(selected):
        raise CheckpointError(
            f'{source} does not hold ViT backbone weights: expected keys like '
            f'pos_embed, patch_embed.proj.weight and blocks.0.norm1.weight'
            f'{" after prefix " + repr(prefix) if prefix else ""}, found '
            f'{list(selected)[:5]}')
    ignored = [k for k in state_dict if not (prefix and k.startswith(prefix))
               ] if prefix else []
    return selected, ignored


def describe_checkpoint(checkpoint: Mapping, backbone_state: Mapping,
                        source: str = 'checkpoint') -> Dict:
    """The HetDPT record of a checkpoint: from ``meta`` when present,
    otherwise from what its keys say (removed attention weights, merged
    FFNs, gates)."""
    record = read_spec_meta(checkpoint)
    if record is not None:
        return dict(record, source=source)
    layout = infer_layout(backbone_state)
    depth = layout['depth']
    if layout['gated']:
        return dict(spec=gate_spec(backbone_state, depth), form='gated')
    if layout['merged']:
        return dict(spec=PruneSpec(depth, layout['attn_missing'],
                                   layout['merged']), form='merged')
    # Unmerged FFNs look the same with or without their GELU: when attention
    # weights are missing (an authors' stage-2 checkpoint), the removed GELUs
    # are unknown and must come from the user.
    return dict(spec=PruneSpec(depth, layout['attn_missing']), form='pruned',
                act_unknown=bool(layout['attn_missing']), source=source)


class HetDPTViT(BaseModule):
    """DeiT/ViT with removable attention sublayers and FFN GELUs (HetDPT).

    Args:
        arch: ``'deit-tiny'``, ``'deit-small'``, ``'deit-base'`` or a dict
            with ``embed_dims``, ``num_layers``, ``num_heads``, ``mlp_ratio``.
        img_size: size the position embedding is stored at; other input
            sizes (non-square, not multiples of the patch size) work through
            on-the-fly interpolation and padding.
        prune_spec: a :class:`PruneSpec`, a dict, or ``None`` to take it from
            the checkpoint named in ``init_cfg`` (dense when there is none).
        gated: build the search form (straight-through gates, METHOD.md §3);
            gates of the spec's removed layers start closed.
        merged: merge activation-free FFNs into one linear each; ``None``
            follows the checkpoint in ``init_cfg`` (``False`` without one).
        removed_attn_output: ``'norm'`` (released models: ``x + LN1(x)``) or
            ``'zero'``; ``None`` follows the checkpoint, else ``'norm'``.
        residual_gelu: when a GELU is applied to the residual stream after a
            block: ``'both_removed'`` (released models), ``'act_removed'``
            (the authors' search), ``'never'``; ``None`` follows the
            checkpoint, else ``'both_removed'``.
        distilled: add DeiT's distillation token.
        out_type: ``'cls_token'`` (mmpretrain heads; ``(cls, dist)`` when
            distilled), ``'featmap'`` (NCHW maps for mmdet / mmseg),
            ``'avg_featmap'`` or ``'raw'`` tokens.
        out_indices: blocks whose outputs are returned.
        final_norm: apply the final LayerNorm to the last block's output.
        output_cls_token: with ``'featmap'``, return ``(featmap, cls_token)``
            per level, like mmseg's ViT.
        pretrained: mmseg-style shortcut for a ``Pretrained`` init_cfg.
        init_cfg: ``dict(type='Pretrained', checkpoint=..., prefix=...)``
            loads DeiT/timm, authors' HetDPT, our own, or mmdet / mmseg /
            mmpretrain checkpoints (converted to this form on the fly).
    """
    OUT_TYPES = ('cls_token', 'featmap', 'avg_featmap', 'raw')

    def __init__(self,
                 arch: Union[str, Mapping] = 'deit-base',
                 img_size: Union[int, Sequence[int]] = 224,
                 patch_size: int = 16,
                 in_channels: int = 3,
                 prune_spec=None,
                 gated: bool = False,
                 merged: Optional[bool] = None,
                 removed_attn_output: Optional[str] = None,
                 residual_gelu: Optional[str] = None,
                 distilled: bool = False,
                 with_cls_token: bool = True,
                 out_type: str = 'cls_token',
                 out_indices: Union[int, Sequence[int]] = -1,
                 final_norm: bool = True,
                 output_cls_token: bool = False,
                 qkv_bias: bool = True,
                 drop_rate: float = 0.,
                 attn_drop_rate: float = 0.,
                 drop_path_rate: float = 0.,
                 interpolate_mode: str = 'bicubic',
                 pretrained: Optional[str] = None,
                 init_cfg: Optional[Union[dict, List[dict]]] = None):
        if pretrained is not None:
            if init_cfg is not None:
                raise ValueError('pass either pretrained or init_cfg, not '
                                 'both')
            init_cfg = dict(type='Pretrained', checkpoint=pretrained)
        super().__init__(init_cfg=init_cfg)
        self.arch_settings = resolve_arch(arch)
        depth = self.arch_settings['num_layers']
        dim = self.arch_settings['embed_dims']
        if out_type not in self.OUT_TYPES:
            raise ValueError(f'unknown out_type {out_type!r}; choose one of '
                             f'{self.OUT_TYPES}')
        if out_type == 'cls_token' and not with_cls_token:
            raise ValueError('out_type="cls_token" needs with_cls_token=True')
        if output_cls_token and not with_cls_token:
            raise ValueError('output_cls_token=True needs with_cls_token=True')
        if distilled and not with_cls_token:
            raise ValueError('a distilled ViT needs with_cls_token=True')

        record = self._checkpoint_record()
        spec, form, semantics = self._resolve_structure(
            depth, prune_spec, gated, merged, removed_attn_output,
            residual_gelu, record)
        self.form = form
        self.semantics = semantics
        self._spec = spec  # fixed for pruned/merged; gates own it if gated

        self.img_size = tuple(img_size) if isinstance(
            img_size, Sequence) else (img_size, img_size)
        self.patch_size = patch_size
        self.distilled = distilled
        self.with_cls_token = with_cls_token
        self.out_type = out_type
        self.final_norm = final_norm
        self.output_cls_token = output_cls_token
        self.interpolate_mode = interpolate_mode
        self._build_args = dict(
            arch=dict(self.arch_settings), img_size=self.img_size,
            patch_size=patch_size, in_channels=in_channels,
            distilled=distilled, with_cls_token=with_cls_token,
            qkv_bias=qkv_bias)

        # Padding makes any input size work; the grid follows the input.
        self.patch_embed = PatchEmbed(
            img_size=self.img_size, patch_size=patch_size,
            in_chans=in_channels, embed_dim=dim, output_fmt='NHWC',
            strict_img_size=False, dynamic_img_pad=True)
        self.patch_grid = self.patch_embed.grid_size
        self.num_prefix_tokens = int(with_cls_token) + int(distilled)
        self.cls_token = nn.Parameter(torch.zeros(
            1, 1, dim)) if with_cls_token else None
        self.dist_token = nn.Parameter(torch.zeros(
            1, 1, dim)) if distilled else None
        num_patches = self.patch_grid[0] * self.patch_grid[1]
        self.pos_embed = nn.Parameter(
            torch.zeros(1, self.num_prefix_tokens + num_patches, dim))
        self.pos_drop = nn.Dropout(drop_rate)

        # Stochastic depth grows linearly with the block index (as timm).
        drop_path = [drop_path_rate * i / max(depth - 1, 1)
                     for i in range(depth)]
        self.blocks = nn.ModuleList([
            build_block(
                dim=dim, num_heads=self.arch_settings['num_heads'],
                mlp_ratio=self.arch_settings['mlp_ratio'], qkv_bias=qkv_bias,
                drop_path=drop_path[i], form=form,
                attn_removed=spec.is_removed(ATTN, i),
                act_removed=spec.is_removed(ACT, i),
                drop_rate=drop_rate, attn_drop_rate=attn_drop_rate,
                norm_layer=partial(nn.LayerNorm, eps=1e-6), **semantics)
            for i in range(depth)
        ])
        self.norm = nn.LayerNorm(dim, eps=1e-6) if final_norm else \
            nn.Identity()

        if isinstance(out_indices, int):
            out_indices = [out_indices]
        self.out_indices = []
        for index in out_indices:
            resolved = index + depth if index < 0 else index
            if not 0 <= resolved < depth:
                raise ValueError(f'out_indices entry {index} is out of range '
                                 f'for {depth} blocks')
            self.out_indices.append(resolved)

    # ------------------------------------------------------------ structure
    def _pretrained_cfg(self) -> Optional[dict]:
        cfgs = self.init_cfg if isinstance(self.init_cfg, list) else [
            self.init_cfg]
        for cfg in cfgs:
            if isinstance(cfg, Mapping) and cfg.get('type') == 'Pretrained':
                return dict(cfg)
        return None

    def _checkpoint_record(self) -> Optional[Dict]:
        """Read the structure of the ``init_cfg`` checkpoint (memory-mapped,
        so only its meta and key names are touched)."""
        cfg = self._pretrained_cfg()
        if cfg is None:
            return None
        source = cfg['checkpoint']
        checkpoint = load_checkpoint_file(source, mmap=True)
        state, _ = extract_backbone_state_dict(checkpoint, cfg.get('prefix'),
                                               source)
        return describe_checkpoint(checkpoint, state, source)

    @staticmethod
    def _resolve_structure(depth, prune_spec, gated, merged,
                           removed_attn_output, residual_gelu, record):
        record = record or {}
        if prune_spec is None and record.get('act_unknown'):
            raise CheckpointError(
                f'{record["source"]} has no attention weights for blocks '
                f'{list(record["spec"].attn_removed)} but no HetDPT spec in '
                'its meta, so its removed GELUs are unknown (e.g. an authors\' '
                'stage-2 checkpoint): pass prune_spec=dict(attn_removed=[...], '
                'act_removed=[...]) to the backbone')
        if prune_spec is None:
            spec = record.get('spec') or PruneSpec(depth)
        else:
            spec = PruneSpec.coerce(prune_spec, depth)
        if spec.depth != depth:
            raise ValueError(
                f'{record.get("source", "the checkpoint")} has {spec.depth} '
                f'blocks but arch has {depth}')
        if gated and merged:
            raise ValueError('a gated (search) backbone cannot be merged')
        if gated:
            form = 'gated'
        elif merged is None:
            form = 'merged' if record.get('form') == 'merged' else 'pruned'
        else:
            form = 'merged' if merged else 'pruned'
        semantics = dict(RELEASED_SEMANTICS)
        semantics.update(record.get('semantics') or {})
        for name, value, allowed in (
                ('removed_attn_output', removed_attn_output,
                 REMOVED_ATTN_OUTPUTS),
                ('residual_gelu', residual_gelu, RESIDUAL_GELU_MODES)):
            if value is not None:
                semantics[name] = value
            if semantics[name] not in allowed:
                raise ValueError(f'{name} must be one of {allowed}, got '
                                 f'{semantics[name]!r}')
        return spec, form, semantics

    @property
    def depth(self) -> int:
        return len(self.blocks)

    @property
    def prune_spec(self) -> PruneSpec:
        """The current structure (read from the gates in the gated form)."""
        if self.form != 'gated':
            return self._spec
        return PruneSpec(
            self.depth,
            [i for i, gate in enumerate(self.gates(ATTN)) if not gate.is_open],
            [i for i, gate in enumerate(self.gates(ACT)) if not gate.is_open])

    def gates(self, kind: str) -> List[nn.Module]:
        """The gated layers of one kind, by block index (gated form only)."""
        if self.form != 'gated':
            raise RuntimeError(f'a {self.form} backbone has no gates; build '
                               'it with gated=True')
        if kind == ATTN:
            return [block.attn for block in self.blocks]
        if kind == ACT:
            return [block.mlp.act for block in self.blocks]
        raise ValueError(f'unknown layer kind {kind!r}')

    def gate_scores(self, kind: str) -> torch.Tensor:
        """Learned importance ``m`` of every layer of ``kind`` (detached)."""
        return torch.stack(
            [gate.hetdpt_score.detach() for gate in self.gates(kind)])

    def set_spec(self, spec) -> None:
        """Open and close the gates to match ``spec`` (gated form only)."""
        spec = PruneSpec.coerce(spec, self.depth)
        for kind in (ATTN, ACT):
            for index, gate in enumerate(self.gates(kind)):
                gate.set_open(not spec.is_removed(kind, index))

    def spec_meta(self, form: Optional[str] = None) -> Dict:
        """The checkpoint ``meta`` record describing this backbone."""
        return spec_meta(self.prune_spec, form or self.form, self._build_args,
                         self.semantics)

    def build_args(self) -> Dict:
        """Constructor arguments that rebuild this network's structure."""
        return dict(copy.deepcopy(self._build_args), **self.semantics,
                    prune_spec=self.prune_spec.to_dict(), final_norm=not
                    isinstance(self.norm, nn.Identity))

    def to_merged(self) -> 'HetDPTViT':
        """A new merged-form backbone computing the same function (eval)."""
        merged = HetDPTViT(**self.build_args(), merged=True,
                           out_type=self.out_type,
                           out_indices=self.out_indices,
                           output_cls_token=self.output_cls_token,
                           interpolate_mode=self.interpolate_mode)
        state = convert_state_dict(self.state_dict(), self.prune_spec,
                                   'merged')
        merged.load_state_dict(state)
        return merged.train(self.training)

    # -------------------------------------------------------------- weights
    def init_weights(self):
        cfg = self._pretrained_cfg()
        if cfg is None:
            if self.init_cfg is not None:
                super().init_weights()
                return
            trunc_normal_(self.pos_embed, std=.02)
            for token in (self.cls_token, self.dist_token):
                if token is not None:
                    nn.init.normal_(token, std=1e-6)
            for block in self.blocks:
                block.apply(init_weights_vit_timm)
            return
        self.load_pretrained(cfg['checkpoint'], cfg.get('prefix'))

    def load_pretrained(self, source: str, prefix: Optional[str] = None):
        """Load backbone weights from any supported checkpoint, converting
        them to this backbone's form and spec; report what was loaded."""
        checkpoint = load_checkpoint_file(source)
        state, _ = extract_backbone_state_dict(checkpoint, prefix, source)
        record = describe_checkpoint(checkpoint, state, source)
        self._check_compatible(record['spec'], source)
        if record['form'] == 'gated':
            # A search checkpoint's weights are those of its own spec.
            state = convert_state_dict(state, record['spec'], 'pruned')
        # Gates follow this backbone's spec, never a pretrained file.
        state = {k: v for k, v in state.items()
                 if not k.endswith('hetdpt_gate')}
        state = convert_state_dict(state, self.prune_spec, self.form)
        if 'pos_embed' in state:
            src_prefix = sum(k in state for k in ('cls_token', 'dist_token'))
            state['pos_embed'] = resize_pos_embed(
                state['pos_embed'], src_prefix, self.num_prefix_tokens,
                self.patch_grid, self.interpolate_mode)
        self._load_checked(state, source)

    def _check_compatible(self, source_spec: PruneSpec, source: str):
        """Weights pruned further than this backbone cannot restore the
        layers they lost; pruning further than the checkpoint is fine."""
        if source_spec.depth != self.depth:
            raise StateDictMismatch(
                f'{source} has {source_spec.depth} blocks, the backbone '
                f'{self.depth}')
        spec = self.prune_spec
        for kind in (ATTN, ACT):
            lost = sorted(set(source_spec.removed(kind)) -
                          set(spec.removed(kind)))
            if lost:
                raise StateDictMismatch(
                    f'{source} was pruned with {kind} layers {lost} removed, '
                    f'but this backbone keeps them: the spec does not match '
                    f'the checkpoint (checkpoint {source_spec}, backbone '
                    f'{spec})')

    def _load_checked(self, state: Mapping, source: str) -> None:
        own = self.state_dict()
        mismatched = [
            f'{k}: checkpoint {tuple(v.shape)} vs backbone '
            f'{tuple(own[k].shape)}' for k, v in state.items()
            if k in own and v.shape != own[k].shape
        ]
        if mismatched:
            raise StateDictMismatch(
                f'{source}: shape mismatch for ' + '; '.join(mismatched))
        unexpected = sorted(k for k in state if k not in own)
        expected = [k for k in own if not k.endswith(GATE_SUFFIXES)]
        missing = [k for k in expected if k not in state]
        if self.form == 'gated':
            # Closed gates never run their layer: no weights needed.
            unused = [k for k in missing if self._belongs_to_closed_gate(k)]
            missing = [k for k in missing if k not in unused]
        else:
            unused = []
        self.load_state_dict(state, strict=False)
        loaded = len(expected) - len(missing) - len(unused)
        lines = [f'HetDPTViT: loaded {loaded}/{len(expected)} backbone '
                 f'tensors from {source} ({self.form}, {self.prune_spec})']
        if missing:
            lines.append(f'  missing in checkpoint (left at init): {missing}')
        if unused:
            lines.append(f'  not in checkpoint, behind closed gates: '
                         f'{len(unused)} tensors')
        if unexpected:
            lines.append(f'  ignored (not part of this backbone): '
                         f'{unexpected}')
        print_log('\n'.join(lines), logger='current',
                  level=30 if missing else 20)

    def _belongs_to_closed_gate(self, key: str) -> bool:
        parts = key.split('.')
        if parts[0] != 'blocks' or parts[2] != 'attn':
            return False
        return not self.blocks[int(parts[1])].attn.is_open

    # -------------------------------------------------------------- forward
    def _pos_embed(self, grid: Tuple[int, int]) -> torch.Tensor:
        if tuple(grid) == tuple(self.patch_grid):
            return self.pos_embed
        return resample_abs_pos_embed(
            self.pos_embed, list(grid), old_size=list(self.patch_grid),
            num_prefix_tokens=self.num_prefix_tokens,
            interpolation=self.interpolate_mode, antialias=False)

    def forward(self, x: torch.Tensor) -> tuple:
        batch, _, height, width = x.shape
        if height < self.patch_size or width < self.patch_size:
            raise ValueError(
                f'input of {height}x{width} pixels is smaller than one '
                f'{self.patch_size}x{self.patch_size} patch')
        x = self.patch_embed(x)
        grid = x.shape[1:3]
        x = x.flatten(1, 2)
        prefix = [token.expand(batch, -1, -1)
                  for token in (self.cls_token, self.dist_token)
                  if token is not None]
        if prefix:
            x = torch.cat(prefix + [x], dim=1)
        x = self.pos_drop(x + self._pos_embed(grid))
        outs = []
        last = len(self.blocks) - 1
        for index, block in enumerate(self.blocks):
            x = block(x)
            if index == last:
                x = self.norm(x)
            if index in self.out_indices:
                outs.append(self._format_output(x, grid))
        return tuple(outs)

    def _format_output(self, x: torch.Tensor, grid):
        if self.out_type == 'raw':
            return x
        if self.out_type == 'cls_token':
            return (x[:, 0], x[:, 1]) if self.distilled else x[:, 0]
        patches = x[:, self.num_prefix_tokens:]
        if self.out_type == 'avg_featmap':
            return patches.mean(dim=1)
        featmap = patches.reshape(x.shape[0], *grid, -1).permute(0, 3, 1, 2)
        if self.output_cls_token:
            return featmap, x[:, 0]
        return featmap
