"""The demo's settings (full and ``--quick``), options, file names and
errors."""

import dataclasses
from pathlib import Path
from typing import Dict, Optional, Tuple, Union

from .data import SHAPE_PAIR_CLASSES

DENSE_CONFIG = 'configs/demo/vit-demo_digits.py'
MAP_CONFIG = 'configs/demo/vit-demo_digits_map.py'
PRUNE_CONFIG = 'configs/demo/vit-demo_digits_hetdpt.py'
#: The dense-prediction tasks the demo classifier's backbone goes into:
#: their configs and the metric each is judged by.
TRANSFER_CONFIGS = dict(
    detr='configs/demo/detr_hetdpt_demo.py',
    upernet='configs/demo/upernet_hetdpt_demo.py',
)
TRANSFER_METRICS = dict(detr='coco/bbox_mAP', upernet='mIoU')
DEFAULT_DATA_ROOT = 'data/demo'
#: The classification task of the demo (``make_pairs``): its directory in
#: the data root and its number of classes (the configs' are the digits').
CLS_DATA = 'shapes'
CLS_CLASSES = len(SHAPE_PAIR_CLASSES)
#: ``--cfg-options`` for every model the demo classifier's backbone goes
#: into: patch 8 (the configs' 4 is the digits'): a 12-pixel glyph then
#: spans up to four patches at any offset, so telling its shape takes the
#: blocks' GELUs and attention, and the steps are about 2.4x cheaper.
#: UperNet's neck scales give its strides 4, 8, 16, 32 again.
CLS_PATCH_SIZE = 8
BACKBONE_OPTIONS = dict(
    cls=[f'model.backbone.patch_size={CLS_PATCH_SIZE}'],
    detr=[f'model.backbone.patch_size={CLS_PATCH_SIZE}'],
    upernet=[
        f'model.backbone.patch_size={CLS_PATCH_SIZE}',
        'model.neck.scales=[2,1,0.5,0.25]',
    ],
)
STATE_FILE = 'demo_state.json'
# Raised whenever the state's form changes: an older state is refused.
STATE_VERSION = 8
#: What a demo run creates in its work dir (all of it is replaced by a new
#: run; nothing else there is touched).
OUTPUTS = (
    'configs',
    'vit-demo_digits',
    'map',
    'recovery',
    'compare',
    'vit-demo_digits_hetdpt',
    'detr_hetdpt_demo',
    'upernet_hetdpt_demo',
    'vit-demo_digits_plus',
    'benchmark',
    'tome',
    'logs',
    'report.md',
    'summary.json',
    'accuracy_vs_speedup.png',
    'losses.png',
    'score_grads.png',
    'recovery.png',
    'comparison.png',
    'tome.png',
    'fig8.png',
    'demo.log',
    STATE_FILE,
)
MAP_SCHEDULES = ('attn', 'act', 'interleaved')


class DemoError(Exception):
    """A stage failed or the inputs are unusable; the message says which."""


class DemoInputError(DemoError):
    """The work dir or the saved state of an earlier run is unusable: bad
    input, found before anything runs."""


@dataclasses.dataclass(frozen=True)
class Settings:
    """Sizes of one demo variant.  ``None`` keeps the config's value."""

    dense_epochs: Optional[int]
    dense_train_images: Optional[int]  # the first N images only
    map_steps: Dict[str, int]  # removal steps per schedule
    map_interval: int  # fine-tuning epochs per step
    map_subset: Union[int, float]  # fast fine-tune: images or fraction
    map_lr: float  # fast fine-tune: its constant learning rate
    map_calib_images: int  # TE score
    budget: int  # layers to remove, split by MAP
    prune_epochs: Optional[int]
    prune_train_images: Optional[int]  # and the recovery runs'
    detr_epochs: Optional[int]
    detr_train_images: Optional[int]
    upernet_iters: Optional[int]
    transfer_log_interval: Optional[int]  # iterations per logged loss
    bench_batch: int
    bench_repeats: int
    context_bench: bool  # also time DeiT-S at 224 (context)
    plus_ratio: float  # HetDPT+: channel ratio of the width pruning
    plus_epochs: int  # HetDPT+: fine-tuning epochs (>= 2: 1 of warm-up)
    plus_train_images: Optional[int]
    recovery_epochs: int  # after one removal (>= 2: 1 of warm-up)
    seeds: Tuple[int, ...]  # one prune run of every compared split each
    #: ToMe r of the classifiers (dense and HetDPT) and of the DETR and
    #: UperNet (besides r=0); empty: no token-merging stage
    tome_r: Tuple[int, ...]
    tome_transfer_r: Dict[str, Tuple[int, ...]]
    #: Fig. 8's further operating points of the classifiers: ToMe's
    #: (r, inflect) schedules besides the constant tome_r, and GTP-ViT's
    #: num_prop besides 0 (more than 15 per model's propagating blocks
    #: meets the library's cap: later blocks keep one patch)
    fig8_schedules: Tuple[Tuple[int, float], ...]
    fig8_num_prop: Tuple[int, ...]


# Sized for 13 minutes on 2 idle cores: the dense model learns the shapes
# in 20 epochs on all 4,000 training images; a MAP step fine-tunes two
# epochs on all of them at 2e-4 (one left the 4-attention point on a cliff
# the fit could not predict: CV RMSE 0.66 of the points' spread, 0.31 with
# two; the MAP config's 5e-4 gave points far off their neighbours; 500
# images, noise-level points), the recovery, prune and HetDPT+ runs on the
# first half.  A budget of 6, half the removable layers, removed one per
# epoch and then fine-tuned 4 epochs: there MAP's mixed split beats both
# single-type splits by more than the seed spread (a budget of 3, 4 or 5,
# or 6 without the fine-tuning epochs, left its lead over GELU only within
# the spread: docs/results.md).  3 seeds per
# compared split (2 left a 4.75-point half range); DETR and UperNet train
# long enough to show that the pruned backbone transfers and improves
# (their configs' full schedules: 12 epochs, 400 iterations).  ToMe: the
# classifier has 16 patch tokens in 6 blocks, so r=3 leaves one in the
# last block; DETR and UperNet test on 36 and 64 patches.  --quick skips it.
FULL = Settings(
    dense_epochs=20,
    dense_train_images=None,
    map_steps=dict(attn=5, act=5, interleaved=5),
    map_interval=2,
    map_subset=1.0,
    map_lr=2e-4,
    map_calib_images=128,
    budget=6,
    prune_epochs=10,
    prune_train_images=2000,
    detr_epochs=5,
    detr_train_images=None,
    upernet_iters=200,
    transfer_log_interval=None,
    bench_batch=64,
    bench_repeats=15,
    context_bench=True,
    plus_ratio=0.3,
    plus_epochs=3,
    plus_train_images=2000,
    recovery_epochs=2,
    seeds=(0, 1, 2),
    tome_r=(0, 1, 2, 3),
    tome_transfer_r=dict(detr=(2, 4), upernet=(4, 8)),
    fig8_schedules=((1, -1), (2, -1), (3, -1)),
    fig8_num_prop=(1, 2, 3, 4),
)
QUICK = Settings(
    dense_epochs=2,
    dense_train_images=256,
    map_steps=dict(attn=2, act=2, interleaved=2),
    map_interval=1,
    map_subset=64,
    map_lr=2e-4,
    map_calib_images=64,
    budget=2,
    prune_epochs=3,
    prune_train_images=128,
    detr_epochs=1,
    detr_train_images=16,
    upernet_iters=4,
    transfer_log_interval=1,
    bench_batch=16,
    bench_repeats=2,
    context_bench=False,
    plus_ratio=0.3,
    plus_epochs=2,
    plus_train_images=128,
    recovery_epochs=2,
    seeds=(0,),
    tome_r=(),
    tome_transfer_r={},
    fig8_schedules=(),
    fig8_num_prop=(),
)


@dataclasses.dataclass(frozen=True)
class DemoOptions:
    """One demo run as ``tools/demo.py`` was asked for it."""

    repo: Path  # the checkout whose tools and configs the jobs run
    work_dir: Path
    data_root: Path
    quick: bool = False
    budget: Optional[int] = None  # None: the variant's (FULL or QUICK)
    seeds: Optional[Tuple[int, ...]] = None  # None: the variant's
    jobs: int = 1  # independent jobs side by side
    threads: Optional[int] = None  # per job; None: stage_threads
    resume: bool = False
    command: str = ''  # how it was started, for the report

    @property
    def mode(self) -> str:
        return 'quick' if self.quick else 'full'

    @property
    def settings(self) -> Settings:
        variant = QUICK if self.quick else FULL
        chosen = dict(budget=self.budget, seeds=self.seeds)
        return dataclasses.replace(
            variant, **{k: v for k, v in chosen.items() if v is not None}
        )


# -------------------------------------------------------------------- demo
