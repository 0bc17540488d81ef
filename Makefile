# `make demo` and `make test` do all set-up on a fresh machine: a virtualenv in
# .venv, PyTorch pinned to the CPU build through constraints.txt, this package
# with its test extras, and Graphviz's `dot` (Debian package) when missing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PIP_FLAGS := --disable-pip-version-check --progress-bar off -q

.PHONY: setup demo test test-capabilities test-gpu gpu-wheels gpu-emulate graphviz browser clean

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

# The numerical test files (those comparing through tests/numerics.py) under each of ATen's CPU kernel sets: a
# cheap stand-in for another machine's CPU. Each set gets an inductor cache of its own: inductor's does not tell
# them apart, and code compiled for AVX-512 fails to build under ATEN_CPU_CAPABILITY=default.
test-capabilities: setup
	@for cap in default avx2 avx512; do echo "== ATEN_CPU_CAPABILITY=$$cap"; \
	  ATEN_CPU_CAPABILITY=$$cap TORCHINDUCTOR_CACHE_DIR=$$(mktemp -d) $(PY) -m pytest -q -p no:cacheprovider \
	    $$(grep -l "from numerics import" tests/test_*.py) || exit 1; done

# The GPU tier (tests marked gpu; skipped by `make test` where there is no CUDA), on a machine with CUDA
# such as the device machine. That machine reaches no package index, and the CUDA wheel of the pinned
# torch 2.13.0 is far larger than what can be carried to it, so the tier runs on the machine's own CUDA
# build of PyTorch (its version is printed first) with tfspec from this checkout; the few small packages
# that machine lacks travel as wheels in .whl/ (`make gpu-wheels`, here, fetches them; carry .whl).
# TFSPEC_GPU_DEVICE=cpu runs the tier's logic on a CPU (`make gpu-emulate`).
GPU_PYTHON ?= python3
GPU_WHEELS := lark pydantic graphviz
export TFSPEC_GPU_DEVICE

test-gpu:
	@$(GPU_PYTHON) -c "import os, sys, torch; print('torch', torch.__version__, 'CUDA', torch.version.cuda, torch.cuda.get_device_name() if torch.cuda.is_available() else ''); sys.exit(0 if torch.cuda.is_available() or os.environ.get('TFSPEC_GPU_DEVICE') == 'cpu' else 'no CUDA device here: the GPU tier needs one (TFSPEC_GPU_DEVICE=cpu: its logic on the CPU)')"
	test ! -d .whl || $(GPU_PYTHON) -m pip install -q --no-index --no-deps --no-compile --upgrade --target .gpu-site .whl/*.whl
	@PYTHONPATH=.gpu-site:. $(GPU_PYTHON) -c "import lark, pydantic, graphviz" 2>/dev/null || { echo "lark, pydantic or graphviz is missing here, and there is no .whl/ to install them from: run 'make gpu-wheels' where a package index is reached and carry .whl (the device tool: carry=['.whl'])"; exit 1; }
	PYTHONPATH=.gpu-site:. $(GPU_PYTHON) -m pytest -q -m gpu -p no:cacheprovider tests

# The wheels the GPU machine lacks, for its Python (3.12), resolved together: pydantic with the one pydantic-core
# it requires (their versions must match exactly), and what each depends on.
gpu-wheels:
	rm -rf .whl && $(PY) -m pip download $(PIP_FLAGS) --only-binary=:all: --python-version 3.12 \
	  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
	  --platform manylinux2014_x86_64 -d .whl $(GPU_WHEELS)

# The GPU machine's software, emulated on this CPU: a Python 3.12 virtualenv (.venv-gpu) with torch 2.11 and
# transformers 5.17 as that machine has them (PyPI's build of torch, with its CUDA libraries as packages: about
# 5 GB once), without lark, pydantic and graphviz, which come from .whl/ as they do there; then the whole tier,
# TFSPEC_GPU_DEVICE=cpu. GPU_EMULATION_PYTHON: a Python 3.12 (found in PATH or pyenv by default).
GPU_EMULATION_VENV := .venv-gpu
GPU_EMULATION_PACKAGES := torch==2.11.0 transformers==5.17.0 numpy safetensors tokenizers networkx hypothesis \
  pytest matplotlib tqdm

gpu-emulate: gpu-wheels
	@test -x $(GPU_EMULATION_VENV)/bin/python || { \
	  python=$${GPU_EMULATION_PYTHON:-$$(command -v python3.12 >/dev/null 2>&1 && python3.12 -c 'print(1)' >/dev/null 2>&1 && echo python3.12 || ls -d $$HOME/.pyenv/versions/3.12*/bin/python 2>/dev/null | tail -1)}; \
	  test -n "$$python" || { echo "no Python 3.12 here: install one (pyenv install 3.12, or apt-get install python3.12) or name it with GPU_EMULATION_PYTHON=..."; exit 1; }; \
	  $$python -m venv $(GPU_EMULATION_VENV); }
	$(GPU_EMULATION_VENV)/bin/python -m pip install $(PIP_FLAGS) $(GPU_EMULATION_PACKAGES) 2>&1 | grep -v "is ignored: it is neither" || true
	$(GPU_EMULATION_VENV)/bin/python -c "import torch, transformers; assert torch.__version__.startswith('2.11.'), torch.__version__; assert transformers.__version__.startswith('5.17.'), transformers.__version__"
	$(MAKE) test-gpu GPU_PYTHON=$(GPU_EMULATION_VENV)/bin/python TFSPEC_GPU_DEVICE=cpu

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis .gpu-site .venv-gpu .whl
