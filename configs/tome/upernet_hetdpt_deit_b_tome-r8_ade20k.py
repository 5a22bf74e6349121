# UperNet on ADE20K with the merged HetDPT DeiT-B backbone and token merging
# (ToMe), 8 tokens per block; every level is unmerged onto the full grid
# (docs/user_guides/token_merge.md).
_base_ = '../upernet_hetdpt_deit_b_ade20k.py'

model = dict(backbone=dict(token_merge=dict(r=8)))
