"""The ViT family (``HetDPTViT``, DeiT / timm / mmpretrain / mmseg ViTs):
the module, its codec and checkpoint layouts, the stock arguments."""
