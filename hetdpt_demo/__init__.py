"""HetDPT end to end on the embedded CPU demo (``tools/demo.py``).

The classification task is shape matching (:func:`~hetdpt_demo.data.
make_pairs` with ``SHAPES_TASK``: do two distant glyphs have the
same shape, and which), on which token mixing and the GELUs matter; the
classifier configs were written for the digits and are pointed at it, at
patch size 8, with ``--cfg-options`` (the detectors' too).

Stages (each runs the project's own tools, exactly the commands a user
would type: training and tests as subprocesses, the short tools in this
process (``Job.in_process``); they are printed, logged under
``<work-dir>/logs/`` and listed in the report):

1. make the demo datasets (digits, shapes, toy COCO, toy ADE20K) if missing;
2. train the dense classifier (``configs/demo/vit-demo_digits.py``);
3. collect MAP points with ``MAPCollectHook`` from the dense checkpoint,
   schedules attn / act / interleaved
   (``configs/demo/vit-demo_digits_map.py``);
4. recovery asymmetry: remove the first attention layer and the first GELU
   the MAP schedules removed (``tools/merge_ckpt.py --spec``), validate
   at once, fine-tune a few epochs validating after each;
5. fit MAP and split the budget (``tools/fit_map.py``, plot; the split is
   read from its ``--save-allocation`` output);
6. prune with ``HetDPTPruneHook`` and fine-tune
   (``configs/demo/vit-demo_digits_hetdpt.py``): the MAP split (the main
   run), and for the comparison the attention-only and GELU-only splits of
   the same budget, once per seed; every run logs the gate-score
   gradients;
7. the naive split (the lowest raw gate scores, both types ranked
   together) pruned the same way;
8. merge (``tools/merge_ckpt.py``);
9. DETR and UperNet from the merged backbone: validate before training,
   train, validate after (``configs/demo/{detr,upernet}_hetdpt_demo.py``);
   test the merged classifier;
10. HetDPT+: width-prune the merged classifier, fine-tune it;
11. benchmark dense vs pruned vs merged, and every compared split
    (``tools/benchmark.py``);
12. token merging (ToMe, not in ``--quick``): the dense and the merged
    classifier tested (``tools/test.py``) and timed at several ``r``,
    blocks without attention merging on their normed tokens or not at all;
    DETR and UperNet tested and benchmarked with ToMe;
13. write ``report.md``, ``summary.json`` and the plots.

Each stage writes a typed record into :class:`~hetdpt_demo.results.
DemoResults` (kept in the state file); the report computes its claims from
them as data (:mod:`hetdpt_demo.claims`) and words them
(:mod:`hetdpt_demo.report`).

Hook options are set by hook type, not by list position: a job whose hook
needs other options runs a config generated under ``<work-dir>/configs/``
that inherits the demo config (:func:`write_hook_config`).

The independent jobs of a stage run side by side (``--jobs``, default one
more than the cores, at most 3).  Threads per job (``--threads``) default
to the cores shared out among the stage's jobs, never to the load or
``--jobs``: the thread count changes a run's floating-point reductions, so
the same command gives the same results on an idle or a busy machine
(:func:`~hetdpt_demo.jobs.stage_threads`).  A new run replaces the
outputs of an earlier demo run in the work dir; ``--resume`` continues one
instead, skipping its finished stages.
``--quick`` is the CI variant: the same stages on tiny subsets and
schedules (minutes; its accuracies mean nothing).  See
docs/user_guides/demo.md.
"""

from .pipeline import Demo
from .settings import (
    DEFAULT_DATA_ROOT,
    FULL,
    QUICK,
    DemoError,
    DemoInputError,
    DemoOptions,
    Settings,
)

__all__ = [
    'DEFAULT_DATA_ROOT',
    'FULL',
    'QUICK',
    'Demo',
    'DemoError',
    'DemoInputError',
    'DemoOptions',
    'Settings',
]
