"""The benchmark program (``tools/benchmark.py``): dense vs HetDPT-pruned
models timed in one process, with their MACs and parameters.

* :mod:`.options`: the tool's options, all checked before anything is built;
* :mod:`.builders`: the stock and HetDPT models compared;
* :mod:`.entries`: the models under test;
* :mod:`.runtimes`: a backbone in PyTorch, ``torch.compile`` or an ONNX
  runtime;
* :mod:`.timing`, :mod:`.machine`: the timing loop and what it runs on;
* :mod:`.run`: the timing, the MAC counts and the outputs;
* :mod:`.report`: the Markdown report.

It is a program on the library (not installed with it; MAC counts:
:mod:`hetdpt_mm.analysis`); how to run it: docs/user_guides/benchmark.md.
"""
