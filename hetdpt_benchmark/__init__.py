"""The benchmark program (``tools/benchmark.py``): dense vs HetDPT-pruned
models timed in one process, with their MACs and parameters.

* :mod:`.options`: the tool's options, all checked before anything is built;
* :mod:`.entries`: the models under test;
* :mod:`.run`: the timing, the MAC counts and the outputs;
* :mod:`.report`: the Markdown report.

It is a program on the library (not installed with it): the timing loop,
MAC counts and model builders it uses are :mod:`hetdpt_mm.speed`; how to run
it: docs/user_guides/benchmark.md.
"""
