"""The demo's shapes task (hetdpt_demo.data.make_pairs)."""

import numpy as np
from PIL import Image

from hetdpt_demo.data import SHAPE_PAIR_CLASSES, make_pairs


def read_split(root, split):
    lines = (root / 'meta' / f'{split}.txt').read_text().split()
    return list(zip(lines[::2], map(int, lines[1::2])))


def test_labels_are_uniform_and_named_by_the_shapes(tmp_path):
    tmp_path = tmp_path / 'shapes'
    classes = SHAPE_PAIR_CLASSES
    size = dict(num_train=2 * len(classes), num_val=len(classes))
    assert make_pairs(tmp_path, **size)
    assert (tmp_path / 'classes.txt').read_text().split() == list(classes)
    for split, count in (('train', 2), ('val', 1)):
        items = read_split(tmp_path, split)
        labels = np.bincount([label for _, label in items]).tolist()
        assert labels == [count] * len(classes)
        for rel, label in items:
            assert rel.split('/')[0] == classes[label]
            image = Image.open(tmp_path / split / rel)
            assert image.size == (32, 32) and image.mode == 'RGB'
    # The same settings: kept; other settings: rebuilt.
    assert not make_pairs(tmp_path, **size)
    assert make_pairs(tmp_path, **size, glyph_size=10)
