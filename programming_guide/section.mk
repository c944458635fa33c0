# Shared by every section's Makefile: `make run` runs the section's DESIGNS for one device.
# make run (npu2) | make run NPU2=1 | make run DEVICE=npu1 (or a partition such as npu2_4col)
# The repository's .venv (made by `make test` or `make demo` at the top) when it exists.
PYTHON ?= $(if $(wildcard ../../.venv/bin/python),../../.venv/bin/python,python3)
DEVICE ?= npu2
ifeq ($(NPU2),1)
override DEVICE := npu2
endif

.PHONY: run
run:
	@for f in $(DESIGNS); do echo "== $$f --device $(DEVICE)"; $(PYTHON) $$f --device $(DEVICE) || exit 1; done
