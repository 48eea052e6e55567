# The two commands of the README:
#   make demo   build everything and run the main job (a short side-by-side
#               benchmark of stock WAL and waldio on a journaled ext4): a
#               headline and a compact table on the terminal, the full record in
#               results/ (BENCH_ARGS=--verbose prints it, --plot DIR draws it)
#   make test   build everything and run every test (C and Python)
# Both install the Python dependencies they need (pip, PyPI).
# WERROR=ON (what .ci/run uses) makes every compiler warning an error.

BUILD  ?= build
PYTHON ?= python3
BENCH_ARGS ?=
WERROR ?= OFF

.PHONY: all build deps demo test test-c test-py clean

all: demo

build:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	      -DWALDIO_WERROR=$(WERROR) >/dev/null
	ninja -C $(BUILD)

# An editable install (scikit-build-core compiles the C pieces into
# site-packages; `make build` copies fresher ones into python/waldio/_lib,
# which win). Redone only when pyproject.toml changes.
DEPS_STAMP = $(BUILD)/.python-deps

deps: $(DEPS_STAMP)

$(DEPS_STAMP): pyproject.toml
	$(PYTHON) -m pip install -q --disable-pip-version-check -e '.[test,plot]'
	@mkdir -p $(BUILD) && touch $@

demo: build deps
	$(PYTHON) -m waldio bench $(BENCH_ARGS)

test-c: build
	cd $(BUILD) && ctest --output-on-failure

test-py: build deps
	$(PYTHON) -m pytest tests/py -q -ra

test: test-c test-py

clean:
	rm -rf $(BUILD) python/waldio/_lib
