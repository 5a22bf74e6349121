"""The Swin family (``HetDPTSwin``): the module and its blocks, its codec
and checkpoint layouts, the stock arguments and arch table."""
