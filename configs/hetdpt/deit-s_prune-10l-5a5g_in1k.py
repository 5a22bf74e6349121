# deit-s_prune-10l_in1k.py with an explicit split of 5 attention + 5 GELU
# layers (no MAP points needed).
_base_ = './deit-s_prune-10l_in1k.py'

custom_hooks = [
    dict(
        type='HetDPTPruneHook',
        counts=dict(attn=5, act=5),
        schedule='progressive',
    ),
    dict(type='MergeCheckpointHook'),
]
