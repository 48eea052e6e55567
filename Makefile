# The two commands of the README:
#   make demo   build everything and run the main job (a short side-by-side
#               benchmark of stock WAL and waldio on a journaled ext4): a
#               headline and a compact table on the terminal, the full record in
#               results/ (BENCH_ARGS=--verbose prints it, --plot DIR draws it)
#   make test   build everything and run every test (C and Python; the C
#               tests also cross-built for aarch64 and run under qemu)
# Both install the Python dependencies they need (pip, PyPI).
# WERROR=ON (what .ci/run uses) makes every compiler warning an error.

BUILD  ?= build
PYTHON ?= python3
BENCH_ARGS ?=
WERROR ?= OFF

.PHONY: all build deps demo test test-c test-aarch64 test-py clean

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
	$(PYTHON) -m pip install -q --disable-pip-version-check -e '.[test,plot,webapp]'
	@mkdir -p $(BUILD) && touch $@

demo: build deps
	$(PYTHON) -m waldio bench $(BENCH_ARGS)

test-c: build
	cd $(BUILD) && ctest --output-on-failure

# The C tests on the phones' CPU: cross-built for aarch64 with Debian's
# toolchain and run under qemu-aarch64 (docs/cross-build.md). Without the
# toolchain they are skipped, saying why; CI installs it (.ci/apt-packages),
# so there a missing piece fails the run instead of skipping it.
ARM_BUILD ?= build-aarch64
ARM_MISSING = $(strip \
  $(if $(shell command -v aarch64-linux-gnu-gcc),,gcc-aarch64-linux-gnu) \
  $(if $(wildcard /usr/lib/aarch64-linux-gnu/libsqlite3.so),,libsqlite3-dev:arm64) \
  $(if $(shell command -v qemu-aarch64),,qemu-user))

test-aarch64:
ifeq ($(ARM_MISSING),)
	cmake -S . -B $(ARM_BUILD) -G Ninja -DCMAKE_TOOLCHAIN_FILE=cmake/toolchain-aarch64-linux-gnu.cmake >/dev/null
	ninja -C $(ARM_BUILD)
	cd $(ARM_BUILD) && ctest --output-on-failure --timeout 600
else
	@echo "test-aarch64: SKIPPED: the aarch64 C tests need the Debian packages" \
	  "$(ARM_MISSING) (after dpkg --add-architecture arm64; .ci/run installs them)"
	@if [ -n "$$CI" ]; then echo "test-aarch64: CI must run them"; exit 1; fi
endif

test-py: build deps
	$(PYTHON) -m pytest tests/py -q -ra

test: test-c test-aarch64 test-py

clean:
	rm -rf $(BUILD) $(ARM_BUILD) python/waldio/_lib
