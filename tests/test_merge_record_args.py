"""Merging a pruned backbone rebuilds it with the build arguments of the
checkpoint's record (issue 33): stock arguments the tensors cannot say
(Swin's ``qk_scale``, a ViT's norm eps), or say only roughly (an MLP ratio
that is not an integer), survive the merge; an ``--arch`` that contradicts
the record is refused before anything is written."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import randomize_

from hetdpt_mm.checkpoint.record import HetDPTRecord
from hetdpt_mm.merge import merge_checkpoint
from hetdpt_mm.models import HetDPTSwin, HetDPTViT
from hetdpt_mm.spec import META_KEY

ROOT = Path(__file__).resolve().parents[1]
#: Hidden widths int(16 * 1.3) = 20 in stage 0 and int(32 * 1.3) = 41 in
#: stage 1: the first stage's ratio, 1.25, does not give the second's.
ARCH = dict(
    embed_dims=16, depths=[2, 2, 2, 2], num_heads=[2, 2, 4, 4], mlp_ratio=1.3
)
STOCK_ARGS = dict(qk_scale=0.25, out_after_downsample=True)
SPEC = dict(attn_removed=[0, 3, 5], act_removed=[1, 3, 4])


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    pass


def pruned_checkpoint() -> tuple:
    pruned = randomize_(
        HetDPTSwin(
            arch=ARCH,
            window_size=3,
            drop_path_rate=0.0,
            prune_spec=SPEC,
            **STOCK_ARGS,
        )
    ).eval()
    state = {f'backbone.{k}': v for k, v in pruned.state_dict().items()}
    return pruned, dict(
        state_dict=state, meta={META_KEY: pruned.record().to_dict()}
    )


def test_merge_keeps_the_records_stock_arguments():
    pruned, checkpoint = pruned_checkpoint()
    record = assert_merged_computes_as(pruned, checkpoint, (40, 56))
    for name, value in STOCK_ARGS.items():
        assert record.arch[name] == value
    assert record.arch['arch']['mlp_ratio'] == 1.3


def assert_merged_computes_as(pruned, checkpoint, size) -> HetDPTRecord:
    """The merged file's record rebuilds a network computing as
    ``pruned`` with ``pruned``'s build arguments; returns the record."""
    merged_file, _ = merge_checkpoint(checkpoint)
    record = HetDPTRecord.from_dict(merged_file['meta'][META_KEY])
    assert record.form == 'merged'
    merged = type(pruned).from_record(record)
    merged.load_state_dict(
        {
            k[len('backbone.') :]: v
            for k, v in merged_file['state_dict'].items()
        }
    )
    assert merged.build_args() == dict(pruned.build_args())
    x = torch.randn(2, 3, *size, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected, got = pruned(x), merged.eval()(x)
    assert len(got) == len(expected)
    for mine, theirs in zip(got, expected):
        torch.testing.assert_close(mine, theirs, atol=1e-5, rtol=0)
    return record


def test_merge_keeps_a_vits_norm_eps():
    pruned = randomize_(
        HetDPTViT(
            arch=dict(embed_dims=16, num_layers=4, num_heads=2, mlp_ratio=2.5),
            img_size=32,
            patch_size=8,
            norm_cfg=dict(type='LN', eps=1e-3),
            prune_spec=dict(attn_removed=[1], act_removed=[2]),
        )
    ).eval()
    checkpoint = dict(
        state_dict={
            f'backbone.{k}': v for k, v in pruned.state_dict().items()
        },
        meta={META_KEY: pruned.record().to_dict()},
    )
    record = assert_merged_computes_as(pruned, checkpoint, (32, 32))
    assert record.arch['norm_cfg'] == dict(type='LN', eps=1e-3)


def test_an_arch_other_than_the_records_is_an_error(tmp_path):
    _, checkpoint = pruned_checkpoint()
    other = dict(ARCH, num_heads=[1, 2, 4, 4])
    with pytest.raises(ValueError, match='--arch'):
        merge_checkpoint(checkpoint, arch=other)
    source, out = tmp_path / 'pruned.pth', tmp_path / 'merged.pth'
    torch.save(checkpoint, source)
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / 'tools' / 'merge_ckpt.py'),
            str(source),
            str(out),
            '--arch',
            '{"embed_dims": 16, "depths": [2, 2, 2, 2], '
            '"num_heads": [1, 2, 4, 4], "mlp_ratio": 1.3}',
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith('error: ') and 'Traceback' not in (
        result.stderr
    )
    assert not out.exists()
