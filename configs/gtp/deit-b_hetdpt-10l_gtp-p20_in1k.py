# The merged HetDPT DeiT-B (10 layers removed) with graph-based token
# propagation (GTP-ViT), 20 patches per block, a setting of this project:
# only the 7 blocks that keep their attention propagate, 140 of the 196
# patches (the GTP-ViT reference tabulates DeiT-B at 1 to 14 per block, at
# most 168 over its 12 blocks).  Everything else is the stage-2 fine-tuning
# config; docs/user_guides/token_merge.md.
_base_ = '../hetdpt/deit-b_finetune-10l_in1k.py'

model = dict(backbone=dict(graph_propagation=dict(num_prop=20)))
