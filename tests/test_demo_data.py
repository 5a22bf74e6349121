"""The demo's pairs datasets: shape matching (the demo's task) and hue
matching (issue 19)."""

import numpy as np
import pytest
from PIL import Image

from hetdpt_demo.data import PAIR_CLASSES, SHAPE_PAIR_CLASSES, make_pairs


def read_split(root, split):
    lines = (root / 'meta' / f'{split}.txt').read_text().split()
    return list(zip(lines[::2], map(int, lines[1::2])))


@pytest.mark.parametrize(
    'match,classes', [('shape', SHAPE_PAIR_CLASSES), ('hue', PAIR_CLASSES)]
)
def test_labels_are_uniform_and_named_by_what_matches(
    tmp_path, match, classes
):
    root = tmp_path / match
    assert make_pairs(
        root, num_train=2 * len(classes), num_val=len(classes), match=match
    )
    assert (root / 'classes.txt').read_text().split() == list(classes)
    for split, count in (('train', 2), ('val', 1)):
        items = read_split(root, split)
        assert np.bincount([label for _, label in items]).tolist() == [
            count
        ] * len(classes)
        for rel, label in items:
            assert rel.split('/')[0] == classes[label]
            image = Image.open(root / split / rel)
            assert image.size == (32, 32) and image.mode == 'RGB'
    # The same settings: kept; other settings: rebuilt.
    assert not make_pairs(
        root, num_train=2 * len(classes), num_val=len(classes), match=match
    )
    other = 'hue' if match == 'shape' else 'shape'
    assert make_pairs(
        root, num_train=2 * len(classes), num_val=len(classes), match=other
    )


def test_unknown_match_is_refused(tmp_path):
    with pytest.raises(ValueError, match="'hue' or 'shape'"):
        make_pairs(tmp_path / 'x', match='size')
    assert not (tmp_path / 'x').exists()
