"""Backbones with a ``prune_spec`` built on the meta device, as big-model
initialisation builds them (``torch.device('meta')``; mmengine's
``MetaTensorContext`` under FSDP's ``skip_init_weights``), then given memory
and weights: the network of the same spec, the same outputs."""

import pytest
import torch
from helpers import randomize_
from mmengine._strategy.utils import MetaTensorContext

from hetdpt_mm.models import HetDPTLayerScaleViT, HetDPTViT

TINY = dict(
    embed_dims=32, num_layers=3, num_heads=2, img_size=32, patch_size=8
)
SPEC = dict(attn_removed=[0], act_removed=[1])
FORMS = [
    dict(),
    dict(merged=True),
    dict(gated=True),
    dict(
        prune_spec=dict(SPEC, ffn_removed=[2]), removed_attn_output='identity'
    ),
]
META_CONTEXTS = {
    'device': lambda: torch.device('meta'),
    'mmengine': MetaTensorContext,
}


def same_outputs(ours, reference):
    x = torch.randn(2, 3, 32, 40)
    with torch.no_grad():
        diff = (ours.eval()(x)[0] - reference.eval()(x)[0]).abs().max()
    assert diff <= 1e-6
    assert ours.record() == reference.record()


@pytest.mark.parametrize('context', sorted(META_CONTEXTS))
@pytest.mark.parametrize('form', FORMS)
@pytest.mark.parametrize('family', [HetDPTViT, HetDPTLayerScaleViT])
def test_a_spec_built_on_the_meta_device(family, form, context):
    args = dict(TINY, **{'prune_spec': SPEC, **form})
    reference = randomize_(family(**args))
    with META_CONTEXTS[context]():
        ours = family(**args)
    assert all(p.is_meta for p in ours.parameters())
    assert ours.prune_spec == reference.prune_spec
    ours.to_empty(device='cpu')
    ours.load_state_dict(reference.state_dict())
    same_outputs(ours, reference)


@pytest.mark.parametrize('prune_spec', [None, SPEC])
def test_init_cfg_read_while_building_on_the_meta_device(prune_spec, tmp_path):
    """The checkpoint's record is read at construction: its tensors are real
    under a meta dispatch mode too."""
    reference = randomize_(HetDPTViT(**TINY, prune_spec=SPEC, merged=True))
    path = tmp_path / 'merged.pth'
    torch.save(dict(state_dict=reference.state_dict()), path)
    with MetaTensorContext():
        ours = HetDPTViT(
            **TINY,
            prune_spec=prune_spec,
            init_cfg=dict(type='Pretrained', checkpoint=str(path)),
        )
    assert ours.form == 'merged' and ours.prune_spec == reference.prune_spec
    ours.to_empty(device='cpu')
    ours.init_weights()
    same_outputs(ours, reference)
