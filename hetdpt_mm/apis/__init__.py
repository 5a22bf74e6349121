"""What the command-line tools run, as functions and dataclasses:

* :mod:`.benchmark` (``tools/benchmark.py``): dense vs pruned benchmarks;
* :mod:`.train` (``tools/train.py``): training a config;
* :mod:`.merge_ckpt` (``tools/merge_ckpt.py``): a checkpoint converted to
  the merged or pruned form;

Import the submodule a tool needs; nothing is imported here.
"""
