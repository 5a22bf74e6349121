# MAP data collection for DeiT-S on ImageNet-1k: deit-b_map-collect_in1k.py
# (one removal per `interval` epochs chosen by the transfer-entropy score,
# fine-tuning on a fixed 10% subset, one run per schedule) with the DeiT-S
# model and batch of deit-s_dense_in1k.py:
#
#   python tools/train.py configs/hetdpt/deit-s_map-collect_in1k.py \
#       --work-dir work_dirs/deit-s_map-collect_in1k/interleaved
#   ... --work-dir work_dirs/deit-s_map-collect_in1k/attn \
#       --cfg-options custom_hooks.0.schedule=attn   (and the same for act)
_base_ = './deit-b_map-collect_in1k.py'

# https://dl.fbaipublicfiles.com/deit/deit_small_distilled_patch16_224-649709d9.pth
pretrained_checkpoint = (
    'checkpoints/deit_small_distilled_patch16_224-649709d9.pth'
)
# A dense DeiT-S in this layout with trained heads, e.g. a checkpoint of
# deit-s_dense_in1k.py after a few epochs.
load_from = 'work_dirs/deit-s_dense_in1k/epoch_10.pth'

model = dict(
    backbone=dict(arch='deit-small', drop_path_rate=0.0),
    head=dict(
        in_channels=384, init_cfg=dict(checkpoint=pretrained_checkpoint)
    ),
)
train_dataloader = dict(batch_size=256)
