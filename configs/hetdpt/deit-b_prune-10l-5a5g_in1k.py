# deit-b_prune-10l_in1k.py with the split given instead of predicted by MAP:
# 5 attention + 5 GELU layers, the authors' released DeiT-B model's counts.
_base_ = './deit-b_prune-10l_in1k.py'

custom_hooks = [
    dict(
        type='HetDPTPruneHook',
        counts=dict(attn=5, act=5),
        schedule='progressive',
    ),
    dict(type='MergeCheckpointHook'),
]
