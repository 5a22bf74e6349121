"""Constructor arguments every backbone family reads alike."""

from typing import List, Optional, Union

InitCfg = Optional[Union[dict, List[dict]]]


def init_cfg_with_pretrained(
    pretrained: Optional[str], init_cfg: InitCfg
) -> InitCfg:
    """``init_cfg``, or the ``Pretrained`` one that OpenMMLab's older
    ``pretrained=PATH`` argument stands for."""
    if pretrained is None:
        return init_cfg
    if init_cfg is not None:
        raise ValueError('pass either pretrained or init_cfg, not both')
    return dict(type='Pretrained', checkpoint=pretrained)


def check_frozen_stages(frozen_stages: int, stages: int, unit: str) -> None:
    """``frozen_stages`` counts ``stages`` (blocks of a ViT, stages of a
    Swin); -1 freezes nothing."""
    if not -1 <= frozen_stages <= stages:
        raise ValueError(
            f'frozen_stages must be in -1..{stages} ({unit}), '
            f'got {frozen_stages}'
        )
