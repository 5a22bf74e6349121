# Two commands on a fresh machine with Python 3.11:
#   make demo   # the whole method end to end on the embedded CPU demo
#   make test   # the test suite
# Both install what is missing first (into .venv, or into PY=/path/to/python).
# HETDPT_WHEELHOUSE=DIR points the install at a prebuilt mmcv 2.1.0 wheel.

VENV ?= .venv
PY ?= $(VENV)/bin/python
BOOTSTRAP_PYTHON ?= python3.11
STAMP := $(dir $(PY)).hetdpt_mm-installed
INSTALL_INPUTS := setup.py tools/install_deps.sh $(wildcard requirements/*.txt)
# The stamp holds a checksum of the inputs' content, not a time: a fresh clone
# (newer files, same content) that shares PY finds the install done.  The
# checkout path is left out: make's targets import the clone's own package.
INSTALL_KEY := $(shell cat $(INSTALL_INPUTS) | cksum)

.PHONY: install test demo demo-quick clean-venv

install:
	@if [ "$$(cat $(STAMP) 2>/dev/null)" = "$(INSTALL_KEY)" ]; then \
	  echo "[install] $(PY): installed, inputs unchanged"; \
	else \
	  { [ -x $(PY) ] || { echo "[install] creating virtual environment $(VENV)"; \
	    $(BOOTSTRAP_PYTHON) -m venv $(VENV); }; } && \
	  PYTHON=$(PY) bash tools/install_deps.sh && \
	  echo "$(INSTALL_KEY)" > $(STAMP); \
	fi

test: install
	$(PY) -m pytest tests

demo: install
	$(PY) tools/demo.py

demo-quick: install
	$(PY) tools/demo.py --quick

clean-venv:
	rm -rf $(VENV)
