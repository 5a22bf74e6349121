"""The LayerScale ViT family (``HetDPTLayerScaleViT``: DeiT-III, DINOv2):
the module, its codec with the arch table, its checkpoint layouts and
mmpretrain's ``DeiT3`` arguments."""
