"""What the command-line tools run, as functions and dataclasses:

* :mod:`.benchmark` (``tools/benchmark.py``): dense vs pruned benchmarks;
* :mod:`.fit_map` (``tools/fit_map.py``): MAP fit and budget split;
* :mod:`.train` (``tools/train.py``), :mod:`.evaluate` (``tools/test.py``):
  training and evaluating a config;
* :mod:`.merge_ckpt` (``tools/merge_ckpt.py``): a checkpoint converted to
  the merged or pruned form;

Import the submodule a tool needs; nothing is imported here.
"""
