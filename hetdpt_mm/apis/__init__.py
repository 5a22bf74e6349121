"""What the command-line tools run, as functions and dataclasses:

* :mod:`.train` (``tools/train.py``): training a config;
* :mod:`.merge_ckpt` (``tools/merge_ckpt.py``): a checkpoint converted to
  the merged or pruned form;
* :mod:`.prune_width` (``tools/prune_width.py``): HetDPT+ width pruning;

Import the submodule a tool needs; nothing is imported here.
"""
