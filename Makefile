# Two commands on a fresh machine:  `make demo`  and  `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.headroom-installed

.PHONY: setup demo test test-slow lint bench bench-check figures readme clean

setup: $(STAMP)

$(STAMP): pyproject.toml scripts/install.sh headroom/trace/_scan.c
	bash scripts/install.sh $(VENV)
	touch $(STAMP)

demo: setup
	$(VENV)/bin/headroom profile llama-7b

# The lint (ruff check and ruff format --check), then the suite without the campaigns marked `slow` (under 10
# minutes on 2 cores): first what runs side by side on two workers, then the `serial` tests alone (they time
# something or take both cores: tests/conftest.py). `make test-slow` runs the campaigns (CI runs both: .ci/run).
test: lint
	$(PY) -m pytest -q -p no:cacheprovider -m "not slow and not serial" -n 2 --dist loadfile tests
	$(PY) -m pytest -q -p no:cacheprovider -m "not slow and serial" tests

test-slow: setup
	$(PY) -m pytest -q -p no:cacheprovider -m slow tests

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

bench: setup
	$(PY) benchmarks/bench_loader.py

# The loader's regression check: fails when the loader costs 20% more, against a reference read of the same
# trace in the same rounds, than the committed baseline says (benchmarks/regression.py, docs/benchmarks.md).
bench-check: setup
	$(PY) benchmarks/regression.py

# The README figure and the scaling chart, from the shipped traces; FIGURE.json beside each holds the
# numbers drawn (tests/test_figures.py checks them against a fresh computation).
figures: setup
	$(VENV)/bin/headroom plot traces/ --figure addressable --format png --numbers --out docs/figures
	$(VENV)/bin/headroom plot traces/llama-7b.infer.prefill.json.gz traces/scaling/ --figure scaling --format png \
		--numbers --out docs/figures

# README's shown command output, regenerated from the commands.
readme: setup
	$(PY) scripts/readme_output.py

clean:
	rm -rf $(VENV) build *.egg-info
