# HetDPT stage 1, step 2 on DeiT-S: deit-b_search-10l_in1k.py with the
# non-distilled DeiT-S and a budget of 8 layers.  The paper and the release
# give no DeiT-S spec or counts, so the counts are MAP's allocation of 8 on
# DeiT-S's own points (deit-s_map-collect_in1k.py, docs/user_guides/map.md); 8
# removals on the authors' schedule end after epoch 81.  Writes
# <work_dir>/found_spec.json for deit-s_finetune-8l_in1k.py.
#
#   bash tools/dist_train.sh configs/hetdpt/deit-s_search-8l_in1k.py 8
_base_ = './deit-b_search-10l_in1k.py'

# https://dl.fbaipublicfiles.com/deit/deit_small_patch16_224-cd65a155.pth
search_checkpoint = 'checkpoints/deit_small_patch16_224-cd65a155.pth'
map_points = 'work_dirs/deit-s_map-collect_in1k/map_points.csv'

model = dict(
    # drop path 0.1: their script's default for any model.
    backbone=dict(
        arch='deit-small',
        drop_path_rate=0.1,
        init_cfg=dict(checkpoint=search_checkpoint),
    ),
    head=dict(in_channels=384, init_cfg=dict(checkpoint=search_checkpoint)),
)

custom_hooks = [
    dict(
        type='HetDPTPruneHook',
        map_points=map_points,
        budget=8,
        schedule='progressive',
        stages=[4, 5, 7, 9, 11, 13, 15, 17],
        spec_file='found_spec.json',
    ),
]
train_cfg = dict(max_epochs=81)
