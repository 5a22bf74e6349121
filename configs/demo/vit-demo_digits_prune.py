# HetDPT on the demo digits: the small ViT of ./vit-demo_digits.py with gates
# (HetDPTViT(gated=True)); HetDPTPruneHook splits a budget of 5 removed layers
# between attention and GELU layers with MAP and closes them one by one
# (progressive schedule), each time the open layer of that type with the
# lowest learned score; the rest of the run fine-tunes the pruned network.
# MergeCheckpointHook writes <work_dir>/vit-demo_digits_prune_merged.pth.
#
#   python tools/make_demo_data.py data/demo
#   python tools/train.py configs/demo/vit-demo_digits_prune.py
#
# The MAP points here are the paper's DeiT-B points (retained ratios, so they
# apply to any depth); use points collected on your own model instead
# (configs/demo/vit-demo_digits_map.py, docs/user_guides/map.md). See
# docs/user_guides/pruning.md.
_base_ = ['./vit-demo_digits.py', '../_base_/gated_ddp.py']

model = dict(backbone=dict(gated=True))

# The paper's DeiT-B points, found from the config's folder.
map_points = '{{ fileDirname }}/../../tests/data/map_points_paper.csv'
custom_hooks = [
    dict(
        type='HetDPTPruneHook',
        map_points=map_points,
        budget=5,
        schedule='progressive',
        stages=[2, 1, 1, 1, 1],
    ),
    dict(type='MergeCheckpointHook'),
]

train_cfg = dict(max_epochs=12, val_interval=3)
default_hooks = dict(checkpoint=dict(interval=1, max_keep_ckpts=2))
