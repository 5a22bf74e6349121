"""The run options shared by tools/train.py and tools/test.py, and atomic
outputs' file modes."""
import os

import pytest
from helpers import REPO, load_tool
from mmengine.config import Config

from hetdpt_mm.fileio import atomic_write_text
from hetdpt_mm.runner import apply_resume


def test_resume_with_nothing_to_resume_keeps_the_starting_weights(tmp_path):
    cfg = Config(dict(work_dir=str(tmp_path), load_from='start.pth'))
    apply_resume(cfg, 'auto')  # killed before the first save
    assert cfg.load_from == 'start.pth' and not cfg.get('resume')
    (tmp_path / 'epoch_1.pth').write_bytes(b'')
    (tmp_path / 'last_checkpoint').write_text(str(tmp_path / 'epoch_1.pth'))
    apply_resume(cfg, 'auto')
    assert cfg.resume and cfg.load_from is None  # MMEngine finds epoch_1
    apply_resume(cfg, 'other.pth')
    assert cfg.resume and cfg.load_from == 'other.pth'


def test_outputs_get_ordinary_file_modes(tmp_path):
    previous = os.umask(0o022)
    try:
        new = tmp_path / 'new.json'
        atomic_write_text(new, '{}')
        assert new.stat().st_mode & 0o777 == 0o644
        kept = tmp_path / 'kept.json'
        kept.write_text('old')
        kept.chmod(0o640)
        atomic_write_text(kept, '{}')  # replacing keeps the mode
        assert kept.stat().st_mode & 0o777 == 0o640
    finally:
        os.umask(previous)


def test_test_tool_never_writes_over_its_inputs(tmp_path):
    checkpoint = tmp_path / 'model.pth'
    checkpoint.write_bytes(b'weights')
    link = tmp_path / 'link.json'
    link.symlink_to(checkpoint)
    config = REPO / 'configs/demo/vit-demo_digits.py'
    for option, out in (('--out-metrics', checkpoint), ('--out', link),
                        ('--out-metrics', config)):
        with pytest.raises(SystemExit, match=r'^error: output .* is the same '
                           'file as input'):
            load_tool('test').main([str(config), str(checkpoint), option,
                                    str(out)])
    assert checkpoint.read_bytes() == b'weights'


def test_merge_tool_never_writes_over_its_spec(tmp_path, capsys):
    spec = tmp_path / 'spec.json'
    spec.write_text('{"attn_removed": [0]}')
    code = load_tool('merge_ckpt').main(
        [str(tmp_path / 'in.pth'), str(spec), '--spec', str(spec), '--force'])
    assert code == 2 and 'same file as input' in capsys.readouterr().err
    assert spec.read_text() == '{"attn_removed": [0]}'
