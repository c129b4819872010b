# Two commands on a fresh machine:  `make demo`  and  `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.headroom-installed

.PHONY: setup demo test bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml scripts/install.sh
	bash scripts/install.sh $(VENV)
	touch $(STAMP)

demo: setup
	$(VENV)/bin/headroom profile llama-7b

test: setup
	$(PY) -m pytest -q -p no:cacheprovider tests

bench: setup
	$(PY) benchmarks/bench_loader.py

clean:
	rm -rf $(VENV) build *.egg-info
