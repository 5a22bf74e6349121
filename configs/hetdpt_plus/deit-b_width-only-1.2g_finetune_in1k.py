# The width-only baseline (Isomorphic Pruning alone) at its 1.2 GMACs
# operating point (5.7 M params in the paper; docs/user_guides/reproduce.md):
# the fine-tune of ./deit-b_width-only-2.6g_finetune_in1k.py from dense DeiT-B
# weights pruned in width to 1.2 GMACs, counted as Isomorphic Pruning
# counts them (with attention's token x token products):
#
#   python tools/prune_width.py \
#       checkpoints/deit_base_distilled_patch16_224-df68dfff.pth \
#       checkpoints/width-only_deit-b_1.2g.pth --target-macs 1.2G \
#       --macs-convention with-attention-products \
#       --importance taylor --calib-dir data/imagenet/train
_base_ = './deit-b_width-only-2.6g_finetune_in1k.py'

hetdpt_checkpoint = 'checkpoints/width-only_deit-b_1.2g.pth'
model = dict(
    backbone=dict(init_cfg=dict(checkpoint=hetdpt_checkpoint)),
    head=dict(init_cfg=dict(checkpoint=hetdpt_checkpoint)),
)
