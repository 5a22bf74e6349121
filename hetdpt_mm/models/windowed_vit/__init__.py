"""The windowed plain-ViT family (``HetDPTWindowedViT``): SAM's image
encoder and ViTDet's backbone, windowed and global attention with decomposed
relative positions; its module and blocks, codec and checkpoint layouts,
stock arguments and arch table."""
