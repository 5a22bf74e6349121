import importlib
import subprocess
import sys
from pathlib import Path

import mmdet


def test_stack_imports():
    import hetdpt_mm

    for name in ('mmdet.models', 'mmseg.models', 'mmpretrain.models', 'timm'):
        importlib.import_module(name)
    from mmcv.ops import nms  # noqa: F401  compiled ops are present

    assert hetdpt_mm.__version__


def test_the_toolboxes_own_tools_start():
    """psutil (a requirement) is what mmdet's analysis tools import first."""
    tool = (
        Path(mmdet.__file__).parent
        / '.mim'
        / 'tools'
        / 'analysis_tools'
        / 'benchmark.py'
    )
    result = subprocess.run(
        [sys.executable, str(tool), '-h'], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr[-2000:]


def test_tensorboard_backend_writes_events(tmp_path):
    """The `vis` extra: mmengine's TensorboardVisBackend logs scalars."""
    from mmengine.visualization import TensorboardVisBackend

    backend = TensorboardVisBackend(save_dir=str(tmp_path))
    backend.add_scalar('loss', 0.5, step=1)
    backend.close()
    assert list(tmp_path.glob('**/events.out.tfevents.*'))
