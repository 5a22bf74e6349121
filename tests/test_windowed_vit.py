"""The windowed ViT family (HetDPTWindowedViT, issue 61): SAM's image
encoder and ViTDet's backbone compute as mmpretrain's ``ViTSAM`` and timm's
``samvit_*`` on the same random weights, dense and with layers removed
(the references cut as docs/method.md section 1 says: a removed attention
leaves ``x + LN1(x)``, a removed GELU an identity, both a residual GELU),
pruned and merged; every checkpoint layout loads whole; the family's own
rules (refusals, layer-wise decay, MACs).  The family contract:
test_family_contract.py."""

import numpy as np
import pytest
import timm
import torch
import torch.nn as nn
import torch.nn.functional as F
from mmengine.registry import DefaultScope

from hetdpt_mm.analysis import count_macs
from hetdpt_mm.checkpoint.reader import read_backbone_checkpoint
from hetdpt_mm.checkpoint.record import with_record
from hetdpt_mm.deploy.networks import BackboneNet, output_names
from hetdpt_mm.deploy.runtimes import export_onnx, make_session
from hetdpt_mm.models import HetDPTWindowedViT
from hetdpt_mm.models.windowed_vit.backbone import build_vitdet
from hetdpt_mm.spec import PruneSpec

CODEC = HetDPTWindowedViT.codec
#: mmpretrain's ViTSAM arch dict, tiny: blocks 1 and 3 global.
ARCH = dict(
    embed_dims=48,
    num_layers=4,
    num_heads=3,
    feedforward_channels=192,
    global_attn_indexes=[1, 3],
)
#: Windows of 3 on an 8x8 map: padded windows.
SIZES = dict(img_size=64, patch_size=8, window_size=3)
#: Block 0 (windowed) loses its GELU, block 1 (global) its attention,
#: block 3 (global) both.
SPEC = PruneSpec(4, attn_removed=[1, 3], act_removed=[0, 3])
#: timm samvit's LayerNorms (nn.LayerNorm's default epsilon).
TIMM_NORM = dict(type='LN', eps=1e-5)


@pytest.fixture(autouse=True)
def threads(one_thread):
    yield


def randomize(module: nn.Module, seed: int = 0) -> nn.Module:
    """Weights of a realistic scale, position tensors large enough to
    matter; norms around 1."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for owner in module.modules():
            for name, param in owner.named_parameters(recurse=False):
                noise = torch.randn(param.shape, generator=generator)
                if isinstance(owner, nn.LayerNorm) and name == 'weight':
                    param.copy_(1 + 0.1 * noise)
                elif 'pos' in name:
                    param.copy_(0.5 * noise)
                else:
                    param.copy_(0.05 * noise)
    return module


def cut(blocks, spec: PruneSpec, attn: str, act) -> None:
    """Remove ``spec``'s layers from a reference's blocks in place."""
    for index in range(spec.depth):
        block = blocks[index]
        if spec.is_removed('attn', index):
            setattr(block, attn, nn.Identity())
        if spec.is_removed('act', index):
            act(block)
        if spec.is_removed('attn', index) and spec.is_removed('act', index):
            blocks[index] = nn.Sequential(block, nn.GELU())


def ours(state, spec=None, form='pruned', **args):
    """Our network of ``form`` with the reference ``state`` converted."""
    spec = spec or PruneSpec(4)
    network = HetDPTWindowedViT(
        prune_spec=spec, merged=form == 'merged', **args
    )
    state = CODEC.convert_state_dict(CODEC.canonical_state(state), spec, form)
    network.load_state_dict(with_record(state, network.record()))
    return network.eval()


def close(got, want, atol=1e-5) -> None:
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, atol=atol, rtol=1e-5)


# ------------------------------------------------------ mmpretrain ViTSAM
def vitsam(**args):
    from mmpretrain.registry import MODELS

    cfg = dict(
        type='ViTSAM', arch=ARCH, out_channels=32, out_indices=(1, 3), **SIZES
    )
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        reference = randomize(MODELS.build(dict(cfg, **args)))
        # The stock config with only the type changed.
        swapped = MODELS.build(dict(cfg, type='HetDPTWindowedViT', **args))
    reference.eval()
    return reference, swapped


@pytest.mark.parametrize('shape', [(2, 3, 64, 64), (1, 3, 40, 56)])
def test_type_swapped_vitsam_computes_as_stock(shape):
    reference, swapped = vitsam()
    state = CODEC.canonical_state(reference.state_dict())
    swapped.load_state_dict(with_record(state, swapped.record()))
    image = torch.randn(shape)
    with torch.no_grad():
        close(swapped.eval()(image), reference(image))


@pytest.mark.parametrize('form', ['pruned', 'merged'])
def test_pruned_and_merged_equal_the_cut_vitsam(form):
    reference, swapped = vitsam()
    network = ours(
        reference.state_dict(),
        SPEC,
        form,
        arch=ARCH,
        out_channels=32,
        out_indices=(1, 3),
        pos_embed_antialias=False,
        **SIZES,
    )

    def no_gelu(layer):
        layer.ffn.layers[0][1] = nn.Identity()

    cut(reference.layers, SPEC, 'attn', no_gelu)
    image = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        close(network(image), reference(image))


# ------------------------------------------------------ timm samvit_*
def samvit(**args):
    reference = timm.create_model(
        'samvit_base_patch16', pretrained=False, num_classes=0, **args
    )
    return randomize(reference).eval()


def timm_cut(reference, spec):
    def no_gelu(block):
        block.mlp.act = nn.Identity()

    cut(reference.blocks, spec, 'attn', no_gelu)


TINY_TIMM = dict(
    img_size=64,
    patch_size=8,
    embed_dim=48,
    depth=4,
    num_heads=3,
    window_size=3,
    global_attn_indexes=[1, 3],
    neck_chans=32,
)


@pytest.mark.parametrize('form', ['dense', 'pruned', 'merged'])
def test_tiny_samvit_dense_pruned_merged(form):
    reference = samvit(**TINY_TIMM)
    spec = PruneSpec(4) if form == 'dense' else SPEC
    network = ours(
        reference.state_dict(),
        spec,
        'merged' if form == 'merged' else 'pruned',
        arch=ARCH,
        out_channels=32,
        norm_cfg=TIMM_NORM,
        **SIZES,
    )
    timm_cut(reference, spec)
    image = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        close(network(image), [reference.forward_features(image)])


def test_sam_b_at_1024_merged_equals_the_cut_samvit():
    """SAM ViT-B at its own size, batch 1: two global attentions and four
    GELUs removed, merged (the suite's one large test)."""
    reference = samvit()
    spec = PruneSpec(12, attn_removed=[5, 11], act_removed=[0, 1, 3, 11])
    network = ours(reference.state_dict(), spec, 'merged', norm_cfg=TIMM_NORM)
    timm_cut(reference, spec)
    image = torch.randn(
        1, 3, 1024, 1024, generator=torch.Generator().manual_seed(0)
    )
    # The merged FFNs sum in another order over 4,096 tokens and 12 blocks:
    # up to 1.3e-5 on outputs near 1 (seeds 0-2), over 1e-5 on a few.
    with torch.no_grad():
        close(network(image), [reference.forward_features(image)], 2e-5)


# ------------------------------------------------------------ layouts
def test_official_sam_checkpoint_loads_whole(tmp_path):
    """The official release holds the whole SAM (``image_encoder.*`` with
    ``mlp.lin1`` / ``lin2``, the prompt encoder and mask decoder beside);
    read without a record, the arch comes from the tensors."""
    reference = samvit(**TINY_TIMM)
    official = {
        'image_encoder.' + key.replace('mlp.fc', 'mlp.lin'): value
        for key, value in reference.state_dict().items()
    }
    official['prompt_encoder.point_embeddings.0.weight'] = torch.zeros(1, 8)
    torch.save(official, tmp_path / 'sam.pth')
    record = read_backbone_checkpoint(tmp_path / 'sam.pth').record
    assert record.family == 'windowed_vit' and record.spec.is_dense
    arch = CODEC.build_args_from_tensors(
        read_backbone_checkpoint(tmp_path / 'sam.pth').state
    )
    assert arch['arch']['global_attn_indexes'] == [1, 3]
    assert arch['arch']['num_heads'] == 3 and arch['window_size'] == 3
    network = HetDPTWindowedViT(
        arch=ARCH,
        out_channels=32,
        norm_cfg=TIMM_NORM,
        prune_spec=SPEC,
        merged=True,
        init_cfg=dict(type='Pretrained', checkpoint=str(tmp_path / 'sam.pth')),
        **SIZES,
    )
    network.init_weights()
    timm_cut(reference, SPEC)
    image = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        close(network.eval()(image), [reference.forward_features(image)])


VITDET = dict(
    img_size=64,
    patch_size=8,
    embed_dim=48,
    depth=4,
    num_heads=3,
    window_size=3,
    window_block_indexes=[0, 2],
    use_rel_pos=True,
    pretrain_img_size=32,
    norm_cfg=dict(type='LN', requires_grad=True),
)


@pytest.mark.parametrize('layout', ['detectron2', 'mmdet'])
def test_vitdet_checkpoints_load_whole(layout, tmp_path):
    """ViTDet's weights: the position embedding of MAE's size with the
    class token's slot, resampled to every input; detectron2 wraps the ViT
    as ``backbone.net``, mmdet's checkpoint has it as ``backbone``."""
    trained = randomize(build_vitdet(**VITDET)).eval()
    state = dict(trained.state_dict())
    del state['_extra_state']
    grid = state['pos_embed']
    state['pos_embed'] = torch.cat(
        [torch.zeros(1, 1, 48), grid.flatten(1, 2)], dim=1
    )
    prefix = 'backbone.net.' if layout == 'detectron2' else 'backbone.'
    checkpoint = {prefix + key: value for key, value in state.items()}
    checkpoint['roi_heads.box_head.fc1.weight'] = torch.zeros(2, 2)
    torch.save(dict(model=checkpoint), tmp_path / 'vitdet.pth')
    loaded = build_vitdet(
        **VITDET,
        init_cfg=dict(
            type='Pretrained',
            checkpoint=str(tmp_path / 'vitdet.pth'),
            prefix=prefix.rstrip('.'),
        ),
    )
    loaded.init_weights()
    image = torch.randn(1, 3, 48, 72)
    with torch.no_grad():
        close(loaded.eval()(image), trained(image))


def test_a_plain_vit_starts_a_vitdet(tmp_path):
    """MAE's weights (a plain ViT: class token, final norm) start a dense
    ViTDet backbone, its relative position tables at zero: it computes as
    timm's samvit of those blocks with zero tables and the position grid
    resampled as ViTDet's ``get_abs_pos`` does (bicubic, no antialias)."""
    mae = timm.create_model(
        'vit_base_patch16_224',
        pretrained=False,
        img_size=32,
        patch_size=8,
        embed_dim=48,
        depth=4,
        num_heads=3,
        num_classes=0,
    )
    torch.save(dict(model=randomize(mae).state_dict()), tmp_path / 'mae.pth')
    start = build_vitdet(
        **VITDET,
        init_cfg=dict(type='Pretrained', checkpoint=str(tmp_path / 'mae.pth')),
    )
    start.init_weights()
    reference = timm.create_model(
        'samvit_base_patch16', pretrained=False, **TINY_TIMM
    )
    state = {
        k: v
        for k, v in mae.state_dict().items()
        if k not in ('cls_token', 'norm.weight', 'norm.bias')
    }
    grid = state['pos_embed'][:, 1:].reshape(1, 4, 4, 48).permute(0, 3, 1, 2)
    state['pos_embed'] = F.interpolate(
        grid, size=(8, 8), mode='bicubic', align_corners=False
    ).permute(0, 2, 3, 1)
    assert not reference.load_state_dict(state, strict=False).unexpected_keys
    image = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        want = reference.eval().forward_intermediates(
            image, indices=[3], intermediates_only=True
        )
        close(start.eval()(image), want)


# ------------------------------------------------------ the family's rules
def test_token_merging_and_whole_branch_removal_are_refused():
    with pytest.raises(ValueError, match='window'):
        HetDPTWindowedViT(arch=ARCH, token_merge=dict(r=2), **SIZES)
    with pytest.raises(ValueError, match='whole-branch'):
        HetDPTWindowedViT(arch=ARCH, removed_attn_output='identity', **SIZES)


def test_layer_decay_depths_follow_the_removals():
    """A merged network's parameters keep their block's depth, the dense
    one's (a merged FFN that of its fc1 / fc2)."""
    args = dict(arch=ARCH, out_channels=32, **SIZES)
    dense = HetDPTWindowedViT(**args)
    merged = HetDPTWindowedViT(**args, prune_spec=SPEC, merged=True)
    depths = {
        renamed: dense.get_layer_depth(name)
        for name, _ in dense.named_parameters()
        for renamed in (name, name.replace('.fc1.', '.fc.'))
    }
    for name, _ in merged.named_parameters():
        assert merged.get_layer_depth(name) == depths[name], name
    assert merged.get_layer_depth('blocks.3.mlp.fc.weight') == (4, 6)
    assert merged.get_layer_depth('neck.0.weight') == (5, 6)


@pytest.mark.parametrize('spec', [PruneSpec(4), SPEC])
def test_layer_macs_are_the_traced_matmuls(spec):
    """The analytic count the cost-aware budget reads, against mmengine's
    traced count of the merged network (windows padded)."""
    network = HetDPTWindowedViT(
        arch=ARCH, out_channels=32, prune_spec=spec, merged=True, **SIZES
    ).eval()
    macs = CODEC.layer_macs(network.build_args(), (64, 64))
    analytic = macs['rest'] + sum(
        (0 if spec.is_removed('attn', i) else macs['attn'][i])
        + macs['merged_ffn' if spec.is_removed('act', i) else 'ffn'][i]
        for i in range(4)
    )
    traced = count_macs(network, torch.randn(1, 3, 64, 64)).matmul
    assert analytic == traced


def test_exports_to_onnx_runtime_and_openvino(tmp_path):
    """The merged network's graph, at a size whose windows are padded and
    whose global tables are resampled (dynamic batch; a dynamic size exports
    too, in minutes: docs/user_guides/sam_vitdet.md), in both runtimes.
    OpenVINO resamples antialiased bicubic otherwise than PyTorch: the
    position embedding as mmpretrain's and ViTDet's."""
    network = HetDPTWindowedViT(
        **HetDPTWindowedViT.SMALL_ARGS,
        prune_spec=dict(attn_removed=[1, 5], act_removed=[0, 5]),
        merged=True,
        out_indices=(2, 5),
        pos_embed_antialias=False,
    )
    net = BackboneNet(randomize(network)).eval()
    path = tmp_path / 'windowed.onnx'
    size = (40, 48)
    export_onnx(
        net,
        torch.randn(2, 3, *size),
        path,
        output_names('backbone', 2),
        dynamic_hw=False,
    )
    for runtime in ('onnxruntime', 'openvino'):
        run = make_session(path, runtime)
        for batch in (1, 3):
            image = torch.randn(batch, 3, *size)
            with torch.no_grad():
                want = net(image)
            for got, expected in zip(run(image.numpy()), want, strict=True):
                np.testing.assert_allclose(got, expected, atol=1e-4)
