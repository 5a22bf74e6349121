"""HetDPT end to end on the embedded CPU demo (``tools/demo.py``): the
project's tools run stage by stage (:mod:`.stages`) on the configs in
``configs/demo/``; the report (:mod:`.report`) reads their outputs back
(:mod:`.results`) and states each claim by the verdicts of
:mod:`.verdicts`.  docs/user_guides/demo.md describes the stages."""
