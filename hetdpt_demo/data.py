"""Small datasets for the CPU demo and the tests, in the real layouts.

* ``cls/``: scikit-learn's 8x8 handwritten digits (real data that ships inside
  the PyPI package), upscaled to 32x32 RGB, in ImageNet folder layout
  (``train/<class>/*.png``, ``val/<class>/*.png``, ``meta/{train,val}.txt``).
* ``shapes/``: the demo's classification task: two small glyphs far apart
  on a noisy 32x32 background; the label says whether they have the same
  shape, and which (:func:`make_pairs`); ImageNet folder layout.
* ``coco/``: procedurally drawn shapes with exact boxes and instance masks
  (compressed RLE of the visible part), COCO 2017 layout (``train2017/``,
  ``val2017/``, ``annotations/instances_{train,val}2017.json``).
* ``ade/``: the same kind of scenes with exact masks, ADE20K layout
  (``images/{training,validation}/*.jpg``,
  ``annotations/{training,validation}/*.png``; label 0 is "other", as in
  ADE20K, so configs use ``reduce_zero_label=True``).

Everything is deterministic from the seed.  Each part is built in a
temporary directory and renamed into place, so a reader never sees half a
dataset, and an existing part with the same settings is kept.
"""

import json
import shutil
import tempfile
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np
from PIL import Image, ImageDraw
from pycocotools import mask as mask_utils

DIGIT_CLASSES = tuple(f'digit_{i}' for i in range(10))
SHAPE_CLASSES = ('rectangle', 'ellipse', 'triangle')
#: Colours of the glyphs of the pairs task (six hues 60 degrees apart,
#: saturation 0.8, value 0.9), drawn at random.
PAIR_COLOURS = dict(
    red=(229, 45, 45),
    yellow=(229, 229, 45),
    green=(45, 229, 45),
    cyan=(45, 229, 229),
    blue=(45, 45, 229),
    magenta=(229, 45, 229),
)
PAIR_GLYPHS = ('square', 'disc', 'triangle', 'cross')
#: Labels of the pairs: the same shape (which), or different shapes.
SHAPE_PAIR_CLASSES = tuple(f'same_{glyph}' for glyph in PAIR_GLYPHS) + (
    'different',
)
#: The demo's classification task (docs/user_guides/demo.md): 12-pixel
#: glyphs, 3 to 4 patches of 4 across; 3,000 validation images (a binomial
#: standard error of 0.6 points at 90 %).
SHAPES_TASK = dict(glyph_size=12, num_train=4000, num_val=3000)
#: ADE-style segmentation classes (label value = index + 1; 0 = other).
SEG_CLASSES = ('background',) + SHAPE_CLASSES
MANIFEST = 'hetdpt_demo.json'


def _build_atomically(target: Path, settings: Dict, build) -> bool:
    """Run ``build(tmp_dir)`` and rename the result to ``target``; skip when
    ``target`` already holds a dataset made with the same settings."""
    manifest = target / MANIFEST
    if manifest.exists() and json.loads(manifest.read_text()) == settings:
        return False
    if target.exists() and not manifest.exists():
        raise FileExistsError(
            f'{target} exists and is not a hetdpt_mm demo dataset; '
            'refusing to replace it'
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f'.{target.name}.', dir=target.parent))
    try:
        build(tmp)
        (tmp / MANIFEST).write_text(json.dumps(settings, indent=1))
        if target.exists():
            shutil.rmtree(target)
        tmp.rename(target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return True


# -------------------------------------------------------------- classification
def make_classification(
    root, seed: int = 0, val_fraction: float = 0.2, size: int = 32
) -> bool:
    """Digits in ImageNet layout; returns False if it was already there."""
    settings = dict(
        kind='classification', seed=seed, val_fraction=val_fraction, size=size
    )

    def build(out: Path):
        from sklearn.datasets import load_digits

        digits = load_digits()
        rng = np.random.default_rng(seed)
        order = rng.permutation(len(digits.target))
        num_val = int(round(len(order) * val_fraction))
        splits = dict(val=order[:num_val], train=order[num_val:])
        (out / 'meta').mkdir(parents=True)
        for split, indices in splits.items():
            lines = []
            for index in sorted(indices):
                label = int(digits.target[index])
                # 0..16 ink -> white digit on black, bilinear upscale.
                pixels = (digits.images[index] * (255 / 16)).astype(np.uint8)
                image = (
                    Image.fromarray(pixels)
                    .resize((size, size), Image.BILINEAR)
                    .convert('RGB')
                )
                rel = f'{DIGIT_CLASSES[label]}/{index:04d}.png'
                path = out / split / rel
                path.parent.mkdir(parents=True, exist_ok=True)
                image.save(path)
                lines.append(f'{rel} {label}')
            (out / 'meta' / f'{split}.txt').write_text('\n'.join(lines) + '\n')
        (out / 'classes.txt').write_text('\n'.join(DIGIT_CLASSES) + '\n')

    return _build_atomically(Path(root), settings, build)


def _draw_glyph(draw, glyph: str, x0: int, y0: int, size: int, colour):
    x1, y1 = x0 + size - 1, y0 + size - 1
    if glyph == 'square':
        draw.rectangle([x0, y0, x1, y1], fill=colour)
    elif glyph == 'disc':
        draw.ellipse([x0, y0, x1, y1], fill=colour)
    elif glyph == 'triangle':
        draw.polygon([(x0, y1), (x1, y1), ((x0 + x1) // 2, y0)], fill=colour)
    else:  # cross: two bars through the centre
        mid, half = (x0 + x1) // 2, max(1, size // 6)
        draw.rectangle([mid - half, y0, mid + half, y1], fill=colour)
        mid = (y0 + y1) // 2
        draw.rectangle([x0, mid - half, x1, mid + half], fill=colour)


def make_pairs(
    root,
    seed: int = 0,
    num_train: int = 1000,
    num_val: int = 600,
    size: int = 32,
    glyph_size: int = 8,
    min_distance: int = 14,
    colour_jitter: float = 25.0,
) -> bool:
    """Two glyphs (``PAIR_GLYPHS``) at random positions at least
    ``min_distance`` pixels apart on a noisy background, each in a random
    one of ``PAIR_COLOURS`` plus Gaussian noise of std ``colour_jitter``;
    the label (``SHAPE_PAIR_CLASSES``, uniform) says whether they have the
    same shape, and which.  No single patch gives it: attention must
    gather both glyphs and the blocks tell their shapes at any offset to
    the patches.  ImageNet folder layout."""
    colours = list(PAIR_COLOURS.values())
    settings = dict(
        kind='pairs',
        seed=seed,
        num_train=num_train,
        num_val=num_val,
        size=size,
        glyph_size=glyph_size,
        min_distance=min_distance,
        colours=[list(colour) for colour in colours],
        colour_jitter=colour_jitter,
        match='shape',
    )

    def build(out: Path):
        rng = np.random.default_rng(seed + 2)
        (out / 'meta').mkdir(parents=True)
        classes = SHAPE_PAIR_CLASSES
        for split, count in (('train', num_train), ('val', num_val)):
            lines = []
            for index in range(count):
                label = index % len(classes)
                if label < len(PAIR_GLYPHS):
                    pair = (label, label)
                else:
                    pair = tuple(
                        rng.choice(len(PAIR_GLYPHS), 2, replace=False)
                    )
                noise = rng.normal(0, 10, size=(size, size, 3))
                canvas = rng.integers(20, 60, size=3) + noise
                image = Image.fromarray(
                    np.clip(canvas, 0, 255).astype(np.uint8)
                )
                draw = ImageDraw.Draw(image)
                while True:
                    corners = rng.integers(0, size - glyph_size + 1, (2, 2))
                    if np.hypot(*(corners[0] - corners[1])) >= min_distance:
                        break
                for glyph, (x0, y0) in zip(pair, corners):
                    colour = colours[int(rng.integers(len(colours)))]
                    side = glyph_size - int(rng.integers(0, 3))
                    rgb = np.clip(
                        np.array(colour) + rng.normal(0, colour_jitter, 3),
                        0,
                        255,
                    )
                    _draw_glyph(
                        draw,
                        PAIR_GLYPHS[glyph],
                        int(x0),
                        int(y0),
                        side,
                        tuple(int(value) for value in rgb),
                    )
                rel = f'{classes[label]}/{index:05d}.png'
                (out / split / rel).parent.mkdir(parents=True, exist_ok=True)
                image.save(out / split / rel)
                lines.append(f'{rel} {label}')
            (out / 'meta' / f'{split}.txt').write_text('\n'.join(lines) + '\n')
        (out / 'classes.txt').write_text('\n'.join(classes) + '\n')

    return _build_atomically(Path(root), settings, build)


# ------------------------------------------------------------------ scenes
def _draw_scene(
    rng: np.random.Generator,
    height: int,
    width: int,
    max_objects: int,
    object_size: Tuple[float, float] = (1 / 6, 1 / 2),
) -> Tuple[Image.Image, List[Dict], np.ndarray]:
    """A noisy background with 1..max_objects filled shapes (they may
    overlap), each side between ``object_size`` fractions of the image's;
    returns the image, the objects (class index, exact box and mask of the
    visible part) and a label map (SEG_CLASSES index + 1 per pixel)."""
    background = rng.integers(40, 90, size=3)
    noise = rng.normal(0, 12, size=(height, width, 3))
    canvas = np.clip(background + noise, 0, 255).astype(np.uint8)
    image = Image.fromarray(canvas)
    labels = np.full(
        (height, width), SEG_CLASSES.index('background') + 1, dtype=np.uint8
    )
    instance = np.zeros((height, width), dtype=np.int32)
    draw = ImageDraw.Draw(image)
    objects = []
    for obj_id in range(1, int(rng.integers(1, max_objects + 1)) + 1):
        cls = int(rng.integers(len(SHAPE_CLASSES)))
        w, h = (
            int(rng.integers(int(n * object_size[0]), int(n * object_size[1])))
            for n in (width, height)
        )
        x0 = int(rng.integers(0, width - w))
        y0 = int(rng.integers(0, height - h))
        colour = tuple(int(c) for c in rng.integers(130, 256, size=3))
        mask_image = Image.new('L', (width, height), 0)
        mask_draw = ImageDraw.Draw(mask_image)
        triangle = [
            (x0, y0 + h - 1),
            (x0 + w - 1, y0 + h - 1),
            (x0 + w // 2, y0),
        ]
        shape = dict(
            rectangle=('rectangle', [x0, y0, x0 + w - 1, y0 + h - 1]),
            ellipse=('ellipse', [x0, y0, x0 + w - 1, y0 + h - 1]),
            triangle=('polygon', triangle),
        )[SHAPE_CLASSES[cls]]
        getattr(draw, shape[0])(shape[1], fill=colour)
        getattr(mask_draw, shape[0])(shape[1], fill=1)
        mask = np.asarray(mask_image, dtype=bool)
        labels[mask] = SEG_CLASSES.index(SHAPE_CLASSES[cls]) + 1
        instance[mask] = obj_id
        objects.append(dict(id=obj_id, category=cls))
    # Boxes from the visible part of each shape (occlusion included).
    visible = []
    for obj in objects:
        ys, xs = np.nonzero(instance == obj['id'])
        if len(xs) < 16:
            continue
        x0, y0, x1, y1 = xs.min(), ys.min(), xs.max() + 1, ys.max() + 1
        visible.append(
            dict(
                category=obj['category'],
                bbox=[float(x0), float(y0), float(x1 - x0), float(y1 - y0)],
                area=float(len(xs)),
                mask=instance == obj['id'],
            )
        )
    return image, visible, labels


def _rle(mask: np.ndarray) -> Dict:
    """COCO's compressed RLE of a boolean mask, as JSON."""
    rle = mask_utils.encode(np.asfortranarray(mask.astype(np.uint8)))
    return dict(size=rle['size'], counts=rle['counts'].decode('ascii'))


def make_detection(
    root,
    seed: int = 0,
    num_train: int = 512,
    num_val: int = 64,
    size: Tuple[int, int] = (128, 128),
    max_objects: int = 2,
    object_size: Tuple[float, float] = (1 / 4, 1 / 2),
) -> bool:
    """Shapes with exact boxes and masks in COCO 2017 layout.

    The defaults give DETR (configs/demo/detr_hetdpt_demo.py) a set it
    learns in a few CPU minutes: few, large shapes, and enough images for
    its 1,500 steps not to memorise them.
    """
    # masks: datasets made before the masks were added are rebuilt.
    settings = dict(
        kind='detection',
        masks='rle',
        seed=seed,
        num_train=num_train,
        num_val=num_val,
        size=list(size),
        max_objects=max_objects,
        object_size=list(object_size),
    )

    def build(out: Path):
        rng = np.random.default_rng(seed)
        (out / 'annotations').mkdir(parents=True)
        categories = [
            dict(id=i + 1, name=name, supercategory='shape')
            for i, name in enumerate(SHAPE_CLASSES)
        ]
        for split, count in (('train2017', num_train), ('val2017', num_val)):
            (out / split).mkdir()
            images, annotations = [], []
            for index in range(count):
                image, objects, _ = _draw_scene(
                    rng, *size, max_objects, object_size
                )
                file_name = f'{index:012d}.jpg'
                image.save(out / split / file_name, quality=95)
                image_id = index + 1
                image = dict(id=image_id, file_name=file_name)
                images.append(dict(image, height=size[0], width=size[1]))
                for obj in objects:
                    annotations.append(
                        dict(
                            id=len(annotations) + 1,
                            image_id=image_id,
                            category_id=obj['category'] + 1,
                            bbox=obj['bbox'],
                            area=obj['area'],
                            iscrowd=0,
                            segmentation=_rle(obj['mask']),
                        )
                    )
            ann_file = out / 'annotations' / f'instances_{split}.json'
            coco = dict(images=images, annotations=annotations)
            ann_file.write_text(json.dumps(dict(coco, categories=categories)))

    return _build_atomically(Path(root), settings, build)


def make_segmentation(
    root,
    seed: int = 0,
    num_train: int = 64,
    num_val: int = 16,
    size: Tuple[int, int] = (128, 128),
    max_objects: int = 3,
) -> bool:
    """Shapes with exact masks in ADE20K layout."""
    settings = dict(
        kind='segmentation',
        seed=seed,
        num_train=num_train,
        num_val=num_val,
        size=list(size),
        max_objects=max_objects,
    )

    def build(out: Path):
        rng = np.random.default_rng(seed + 1)
        for split, count, prefix in (
            ('training', num_train, 'train'),
            ('validation', num_val, 'val'),
        ):
            (out / 'images' / split).mkdir(parents=True)
            (out / 'annotations' / split).mkdir(parents=True)
            for index in range(count):
                image, _, labels = _draw_scene(rng, *size, max_objects)
                stem = f'ADE_{prefix}_{index + 1:08d}'
                image.save(out / 'images' / split / f'{stem}.jpg', quality=95)
                Image.fromarray(labels).save(
                    out / 'annotations' / split / f'{stem}.png'
                )

    return _build_atomically(Path(root), settings, build)


def make_all(root, seed: int = 0) -> Dict[str, Path]:
    """All four demo datasets under ``root``; returns their directories."""
    root = Path(root)
    paths = {name: root / name for name in ('cls', 'shapes', 'coco', 'ade')}
    make_classification(paths['cls'], seed)
    make_pairs(paths['shapes'], seed, **SHAPES_TASK)
    make_detection(paths['coco'], seed)
    make_segmentation(paths['ade'], seed)
    return paths
