"""Your own data with the shipped configs (docs/user_guides/own_dataset.md,
whose commands tests/test_docs.py runs on a generated folder dataset):
another class count than the official files' says what to set."""

import pytest
from helpers import (
    REPO,
    TINY_DEIT_CLASSES,
    build_model,
    write_tiny_config,
    write_tiny_deit_inputs,
)
from mmengine.config import Config

from hetdpt_mm.errors import CheckpointError

CLASSES = TINY_DEIT_CLASSES + 2


def test_another_class_count_says_what_to_set(tmp_path):
    """Issue 60 item 2: the DeiT prune config (tiny) with another
    ``head.num_classes``: the teacher of the file's classes is refused at
    build, the file's head when it loads, each naming the setting."""
    files = write_tiny_deit_inputs(tmp_path)
    cfg = Config.fromfile(
        write_tiny_config(
            REPO / 'configs/hetdpt/deit-b_prune-10l_in1k.py',
            tmp_path,
            files['distilled'],
            teacher=files['dense'],
        )
    )
    cfg.model.head.num_classes = CLASSES
    with pytest.raises(ValueError, match='teacher=None'):
        build_model(cfg)
    cfg.model.teacher = cfg.model.teacher_checkpoint = None
    model = build_model(cfg)
    with pytest.raises(CheckpointError, match='head.init_cfg=None'):
        model.init_weights()
    cfg.model.head.init_cfg = None
    model = build_model(cfg)
    model.init_weights()
    assert model.head.layers.head.out_features == CLASSES
