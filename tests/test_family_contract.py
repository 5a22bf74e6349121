"""One contract over every family of the family table (registry.FAMILIES):
what the hooks, the merge, the record and the loaders rely on.  A new
family is held to it by being defined; its own test file covers the rest
(its checkpoint layouts, its semantics)."""

import importlib

import pytest
import torch
from helpers import randomize_
from mmengine.registry import DefaultScope

from hetdpt_mm.checkpoint.record import (
    EXTRA_STATE_KEY,
    HetDPTRecord,
    decode_record,
    encode_record,
)
from hetdpt_mm.errors import CheckpointError
from hetdpt_mm.registry import FAMILIES
from hetdpt_mm.spec import PruneSpec

#: The project's families (tests define toy ones of their own).
PROJECT_FAMILIES = sorted(
    name
    for name, cls in FAMILIES.items()
    if cls.__module__.startswith('hetdpt_mm.')
)


def small(family: str, **kwargs):
    cls = FAMILIES[family]
    return randomize_(cls(**cls.SMALL_ARGS, **kwargs)).eval()


def spec_of(depth: int) -> PruneSpec:
    """Blocks of all four kinds: both kept, attention or GELU removed, both
    removed."""
    return PruneSpec(
        depth, attn_removed=[0, depth - 1], act_removed=[1, depth - 1]
    )


def outputs(network, image):
    with torch.no_grad():
        return [o for o in network(image) if isinstance(o, torch.Tensor)]


@pytest.fixture(params=PROJECT_FAMILIES)
def family(request, one_thread):
    return request.param


def test_small_args_build_and_arch_keys_are_the_build_args(family):
    cls = FAMILIES[family]
    network = small(family)
    # Some build args are given only where they differ from the default
    # (a ViT's norm_cfg), so that other records keep their keys.
    assert set(network.build_args()) <= cls.RECORD_ARCH_KEYS
    assert network.family == family
    assert network.prune_spec == PruneSpec(network.depth)
    assert cls.codec.arch_depth(network.build_args()['arch']) == network.depth
    assert cls.codec.arch_depth(cls.DEFAULT_ARCH) >= 1


def test_gated_pruned_and_merged_compute_the_same_function(family):
    """The search network with the spec's gates closed, the pruned one and
    the merged one, from the same weights."""
    gated = small(family, gated=True)
    spec = spec_of(gated.depth)
    gated.set_spec(spec)
    assert gated.prune_spec == spec
    image = torch.randn(2, 3, 32, 32)
    expected = outputs(gated, image)
    cls = FAMILIES[family]
    for form in ('pruned', 'merged'):
        network = cls.from_record(gated.record(form))
        state = cls.codec.convert_state_dict(gated.state_dict(), spec, form)
        network.load_state_dict(
            {k: v for k, v in state.items() if k != EXTRA_STATE_KEY},
            strict=False,
        )
        network.eval()
        assert (network.form, network.prune_spec) == (form, spec)
        for got, want in zip(outputs(network, image), expected, strict=True):
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    merged = gated.to_merged().eval()
    for got, want in zip(outputs(merged, image), expected, strict=True):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert merged.semantics == gated.semantics
    # The same tensors without the gated record keep a dense network's
    # structure, which computes another function (the comparison above is
    # not trivially equal) with more parameters than the merged one.
    dense = cls(**cls.SMALL_ARGS).eval()
    state = gated.state_dict()
    del state[EXTRA_STATE_KEY]
    dense.load_state_dict(state, strict=False)
    assert dense.form == 'pruned' and dense.prune_spec == PruneSpec(
        dense.depth
    )
    assert (outputs(dense, image)[-1] - expected[-1]).abs().max() > 1e-2
    assert count(merged) < count(dense)


def count(network) -> int:
    return sum(p.numel() for p in network.parameters())


def test_straight_through_gradient_reaches_open_gates_only(family):
    """A closed gate passes no gradient to its score, an open one does."""
    gated = small(family, gated=True).train()
    spec = spec_of(gated.depth)
    gated.set_spec(spec)
    image = torch.randn(2, 3, 32, 32)
    [o for o in gated(image) if isinstance(o, torch.Tensor)][-1].pow(
        2
    ).sum().backward()
    for kind in ('attn', 'act'):
        for index, gate in enumerate(gated.gates(kind)):
            reached = gate.hetdpt_score.grad is not None
            assert reached != spec.is_removed(kind, index), (kind, index)
    assert gated.gate_scores('attn').shape == (gated.depth,)


@pytest.mark.parametrize('form', ['gated', 'pruned', 'merged'])
def test_records_verify_against_their_tensors_and_rebuild(family, form):
    """A state dict's record passes the one check, and an unconfigured
    backbone of the family takes its structure from it; the tensors alone
    say the structure where they can (the merged form)."""
    cls = FAMILIES[family]
    reference = cls.from_record(small(family).record(form))
    spec = spec_of(reference.depth)
    if form == 'gated':
        reference.set_spec(spec)
    else:
        reference = cls.from_record(
            HetDPTRecord(
                spec=spec,
                form=form,
                family=family,
                arch=reference.build_args(),
                semantics=reference.semantics,
            )
        )
    state = reference.state_dict()
    record = reference.record()
    cls.verify_record(
        record, {k: v for k, v in state.items() if k != EXTRA_STATE_KEY}
    )
    rebuilt = cls(**cls.SMALL_ARGS)
    rebuilt.load_state_dict(state)
    assert (rebuilt.form, rebuilt.prune_spec) == (form, spec)
    found = cls.codec.record_from_tensors(
        {k: v for k, v in state.items() if k != EXTRA_STATE_KEY}, 'state'
    )
    assert found.form == form
    assert found.spec.attn_removed == spec.attn_removed
    if form != 'pruned':  # unmerged FFNs do not show their GELU
        assert found.spec == spec


def test_a_backbone_rebuilt_by_loading_keeps_its_mode(family):
    """Blocks built anew for a loaded structure run as the rest of the
    network: an evaluating network keeps no dropout or drop path."""
    cls = FAMILIES[family]
    dense = small(family)
    merged = cls.from_record(
        HetDPTRecord(
            spec=spec_of(dense.depth),
            form='merged',
            family=family,
            arch=dense.build_args(),
            semantics=dense.semantics,
        )
    )
    for mode in (False, True):
        network = cls(**cls.SMALL_ARGS).train(mode)
        network.load_state_dict(merged.state_dict())
        assert network.form == 'merged'
        assert {module.training for module in network.modules()} == {mode}


def test_a_record_contradicting_the_tensors_is_refused(family):
    """Every family's loading runs the check, non-strict loading too."""
    cls = FAMILIES[family]
    network = cls.from_record(small(family).record('merged'))
    state = network.state_dict()
    record = decode_record(state[EXTRA_STATE_KEY])
    record['spec']['attn_removed'] = [1]
    lying = {**state, EXTRA_STATE_KEY: encode_record(record)}
    with pytest.raises(CheckpointError, match='does not match the tensors'):
        cls(**cls.SMALL_ARGS).load_state_dict(lying, strict=False)


def test_layer_macs_count_every_block(family):
    """MACs per block for the analytic cost: one entry per block and kind,
    removing a layer never adds MACs."""
    cls = FAMILIES[family]
    network = small(family)
    macs = cls.codec.layer_macs(network.build_args(), (32, 32))
    for kind in ('attn', 'ffn', 'merged_ffn'):
        assert len(macs[kind]) == network.depth
    assert all(
        m <= f for m, f in zip(macs['merged_ffn'], macs['ffn'], strict=True)
    )
    assert macs['rest'] >= 0


@pytest.mark.parametrize('scope', ['mmpretrain', 'mmdet', 'mmseg'])
def test_builds_from_every_toolbox_registry(family, scope):
    """Each toolbox's registry builds the family under its default scope
    (test_backbone's and test_swin's per-family tests)."""
    cls = FAMILIES[family]
    spec = spec_of(small(family).depth)
    registry = importlib.import_module(f'{scope}.registry').MODELS
    with DefaultScope.overwrite_default_scope(scope):
        assert DefaultScope.get_current_instance().scope_name == scope
        backbone = registry.build(
            dict(
                type=cls.__name__,
                **cls.SMALL_ARGS,
                prune_spec=spec.to_dict(),
                merged=True,
            )
        )
    assert isinstance(backbone, cls)
    assert (backbone.form, backbone.prune_spec) == ('merged', spec)


@pytest.mark.parametrize('name', ['no_such_argument', 'embed_dim'])
def test_unknown_arguments_are_a_type_error(family, name):
    """As for any Python class (``embed_dim``: the ViT spelling that the
    stock backbones spell ``embed_dims``)."""
    with pytest.raises(
        TypeError, match=rf"unexpected keyword arguments \['{name}'\]"
    ):
        FAMILIES[family](**{name: 8})
