# HetDPT pruning (./hetdpt_prune-10l.py: 10 layers split by MAP, removed
# progressively, merged checkpoint) on the 400-epoch DeiT schedule: the
# pruned network is fine-tuned until epoch 400.
_base_ = ['./imagenet_bs1024_adamw_400e.py', './hetdpt_prune-10l.py']
