import importlib


def test_stack_imports():
    import hetdpt_mm
    for name in ('mmdet.models', 'mmseg.models', 'mmpretrain.models', 'timm'):
        importlib.import_module(name)
    from mmcv.ops import nms  # noqa: F401  compiled ops are present
    assert hetdpt_mm.__version__
