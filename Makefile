# `make demo` and `make test` do all set-up on a fresh machine: a virtualenv in
# .venv, PyTorch pinned to the CPU build through constraints.txt, this package
# with its test extras, and Graphviz's `dot` (Debian package) when missing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PIP_FLAGS := --disable-pip-version-check --progress-bar off -q

.PHONY: setup demo test graphviz clean

setup: $(STAMP) graphviz

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install $(PIP_FLAGS) -c constraints.txt -e '.[test]' 2>&1 | grep -v "is ignored: it is neither" || true
	$(PY) -c "import torch, lark, networkx, pydantic, graphviz, hypothesis, transformers, matplotlib, safetensors, tqdm; assert torch.__version__.startswith('2.13.0'), torch.__version__"
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

# The tour: check the examples, summarise and draw vaswani_base, train examples/reverse.tfs
# to reverse sequences, decode with it; everything lands in out/demo.
demo: setup
	$(VENV)/bin/tfspec demo --out out/demo

test: setup
	$(PY) -m pytest -q

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis
