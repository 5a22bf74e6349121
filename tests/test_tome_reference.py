"""Token merging equals facebookresearch/ToMe: the dense backbone against
logits ToMe's timm patch computed on the same seeded timm weights
(tests/data/README.md says how; issue 50)."""

import json

import pytest
import timm
import torch
from helpers import REPO, randomize_, timm_state_dict

from hetdpt_mm.models import HetDPTViT
from hetdpt_mm.models.token_merge import TokenMerge

torch.set_num_threads(2)

REFERENCE = json.loads(
    (REPO / 'tests' / 'data' / 'tome_reference_logits.json').read_text()
)
ARCHS = {
    'deit_small_patch16_224': ('deit-small', False),
    'deit_base_distilled_patch16_224': ('deit-base', True),
}


def token_merge(r):
    """ToMe's ``model.r`` as the backbone's option: an int, or
    ``[r, inflect]``."""
    if isinstance(r, int):
        return dict(r=r)
    return dict(r=r[0], inflect=float(r[1]))


@pytest.fixture(scope='module', params=sorted(ARCHS))
def reference_model(request, tmp_path_factory):
    """The seeded timm model the reference ran on, and its weights saved
    as a checkpoint the backbone loads."""
    name = request.param
    model = randomize_(
        timm.create_model(
            name, pretrained=False, num_classes=REFERENCE['num_classes']
        ),
        seed=REFERENCE['weights_seed'],
    ).eval()
    path = tmp_path_factory.mktemp('tome') / f'{name}.pth'
    torch.save({'model': timm_state_dict(model)}, path)
    return name, model, path


def test_dense_form_equals_tome(reference_model):
    name, timm_model, path = reference_model
    arch, distilled = ARCHS[name]
    x = torch.randn(
        REFERENCE['batch'],
        3,
        224,
        224,
        generator=torch.Generator().manual_seed(REFERENCE['input_seed']),
    )
    cases = [c for c in REFERENCE['cases'] if c['model'] == name]
    assert len(cases) == 3
    backbone = HetDPTViT(
        arch,
        distilled=distilled,
        out_type='raw',
        init_cfg=dict(type='Pretrained', checkpoint=str(path)),
    )
    backbone.init_weights()
    backbone.eval()
    with torch.no_grad():
        plain = timm_model.forward_head(backbone(x)[0])
        for case in cases:
            backbone.token_merge = TokenMerge.coerce(token_merge(case['r']))
            # Prefix tokens are never merged: the head reads them as timm.
            logits = timm_model.forward_head(backbone(x)[0])
            expected = torch.tensor(case['logits'])
            assert (logits - expected).abs().max() <= 1e-5, case['r']
            assert (plain - expected).abs().max() > 1e-3  # it merged
