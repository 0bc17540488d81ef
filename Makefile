# `make demo` and `make test` do all set-up on a fresh machine: a virtualenv in
# .venv, PyTorch pinned to the CPU build through constraints.txt, this package
# with its test extras, and Graphviz's `dot` (Debian package) when missing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PIP_FLAGS := --disable-pip-version-check --progress-bar off -q

.PHONY: setup demo test test-gpu gpu-wheels graphviz browser clean

setup: $(STAMP) graphviz browser

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install $(PIP_FLAGS) -c constraints.txt -e '.[test]' 2>&1 | grep -v "is ignored: it is neither" || true
	$(PY) -c "import torch, lark, networkx, pydantic, graphviz, hypothesis, transformers, matplotlib, safetensors, tqdm, pygls, onnxscript, onnxruntime, tensorboard, peft, playwright, mkdocs; assert torch.__version__.startswith('2.13.0'), torch.__version__"
	touch $(STAMP)

graphviz:
	@command -v dot >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing Graphviz (Debian package graphviz)"; \
	    (apt-get install -y -q graphviz >/dev/null 2>&1 || (apt-get update -q >/dev/null && apt-get install -y -q graphviz >/dev/null)) \
	      || echo "warning: could not install graphviz; diagrams other than .dot need it"; \
	  else \
	    echo "note: Graphviz's 'dot' is missing; install it with: sudo apt-get install graphviz (diagrams other than .dot need it)"; \
	  fi; }

# A headless browser for the report page's test (Debian package chromium); without one that test is skipped.
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing Chromium (Debian package chromium), for the report page's browser test"; \
	    (apt-get install -y -q --no-install-recommends chromium >/dev/null 2>&1 || (apt-get update -q >/dev/null && \
	     apt-get install -y -q --no-install-recommends chromium >/dev/null)) \
	      || echo "warning: could not install chromium; the report page's browser test will be skipped"; \
	  else \
	    echo "note: no chromium; install it with: sudo apt-get install chromium (the report page's browser test needs it)"; \
	  fi; }

# The tour: check the examples, summarise and draw vaswani_base, train examples/reverse.tfs
# to reverse sequences, decode with it; everything lands in out/demo.
demo: setup
	$(VENV)/bin/tfspec demo --out out/demo

test: setup
	$(PY) -m pytest -q

# The GPU tier (tests marked gpu; skipped by `make test` where there is no CUDA), on a machine with CUDA
# such as the device machine. That machine reaches no package index, and the CUDA wheel of the pinned
# torch 2.13.0 is far larger than what can be carried to it, so the tier runs on the machine's own CUDA
# build of PyTorch (its version is printed first) with tfspec from this checkout; the few small packages
# that machine lacks travel as wheels in .whl/ (`make gpu-wheels`, here, fetches them).
GPU_PYTHON ?= python3
GPU_WHEELS := lark pydantic pydantic-core annotated-types typing-inspection typing-extensions graphviz

test-gpu:
	@$(GPU_PYTHON) -c "import sys, torch; print('torch', torch.__version__, 'CUDA', torch.version.cuda, torch.cuda.get_device_name() if torch.cuda.is_available() else ''); sys.exit(0 if torch.cuda.is_available() else 'no CUDA device here: the GPU tier needs one')"
	test ! -d .whl || $(GPU_PYTHON) -m pip install -q --no-index --no-deps --no-compile --upgrade --target .gpu-site .whl/*.whl
	PYTHONPATH=.gpu-site:. $(GPU_PYTHON) -m pytest -q -m gpu -p no:cacheprovider tests

gpu-wheels:
	rm -rf .whl && $(PY) -m pip download $(PIP_FLAGS) --no-deps --only-binary=:all: --python-version 3.12 \
	  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
	  --platform manylinux2014_x86_64 -d .whl $(GPU_WHEELS)

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis .gpu-site
