# The README's commands. `make demo` and `make test` work on a fresh machine with only the
# Rust toolchain and Python 3 (they create .venv and install what they need from PyPI).

PY      ?= python3
VENV    ?= .venv
VPY     := $(VENV)/bin/python
CARGO   ?= cargo

.PHONY: demo test venv develop cli rust-test py-test lint fmt bench clean

$(VENV)/.ready:
	$(PY) -m venv $(VENV)
	$(VPY) -m pip install --quiet --upgrade pip
	$(VPY) -m pip install --quiet "maturin>=1.5,<2" "numpy>=1.23" "pytest>=7" ruff mypy
	touch $@

venv: $(VENV)/.ready

# Builds the extension (release) into the venv.
# FEATURES=turbojpeg: JPEG through libjpeg-turbo (needs cmake and nasm on PATH).
FEATURES ?=
develop: venv
	VIRTUAL_ENV=$(CURDIR)/$(VENV) $(VENV)/bin/maturin develop --release --quiet -m crates/stoker-python/Cargo.toml $(if $(FEATURES),--features $(FEATURES))

cli:
	$(CARGO) build --release -p stoker-cli

# Runs the main job (W1 chess-tfrecord and W4 mnist-small) on sample data it generates.
demo: develop
	$(VPY) -m stoker.demo

rust-test:
	$(CARGO) test --workspace --exclude stoker-python

py-test: develop cli
	STOKER_BIN=$(CURDIR)/target/release/stoker $(VPY) -m pytest -q crates/stoker-python/tests

# Every test: Rust unit and integration tests, then the Python suite.
test: rust-test py-test

lint: venv
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(VENV)/bin/ruff check crates/stoker-python/python crates/stoker-python/tests examples bench tests/golden
	$(VENV)/bin/mypy crates/stoker-python/python/stoker --ignore-missing-imports

fmt:
	$(CARGO) fmt --all

# Benchmarks need TensorFlow and PyTorch next to stoker: a separate, larger venv.
BENCH_VENV ?= .venv-bench
$(BENCH_VENV)/.ready:
	$(PY) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(BENCH_VENV)/bin/python -m pip install --quiet "maturin>=1.5,<2" numpy matplotlib tensorflow-cpu torch
	touch $@

bench: $(BENCH_VENV)/.ready cli
	VIRTUAL_ENV=$(abspath $(BENCH_VENV)) $(BENCH_VENV)/bin/maturin develop --release --quiet -m crates/stoker-python/Cargo.toml
	$(BENCH_VENV)/bin/python bench/run.py --workload all --out BENCHMARKS.md

clean:
	rm -rf $(VENV) target
