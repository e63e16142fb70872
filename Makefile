# The README's commands. `make demo` and `make test` work on a fresh machine with only the
# Rust toolchain and Python 3 (they create .venv and install what they need from PyPI).

PY      ?= python3
VENV    ?= .venv
VPY     := $(VENV)/bin/python
CARGO   ?= cargo

.PHONY: demo test venv develop cli wheel wheel-test rust-test py-test lint fmt bench clean fuzz fuzz-cmin miri tsan

$(VENV)/.ready:
	$(PY) -m venv $(VENV)
	$(VPY) -m pip install --quiet --upgrade pip
	$(VPY) -m pip install --quiet "maturin>=1.5,<2" "numpy>=1.23" "pytest>=7" ruff mypy
	touch $@

# The framework adapters' tests need the frameworks (CPU use only); convert's Ray tests, Ray;
# `decode_on`'s tests, torchvision (its decoder is the device half's, and its CPU stand-in).
# torch (with its CUDA libraries) and TensorFlow are downloaded one at a time, so that their
# wheels do not all wait on disk at once; the last call resolves the whole set together.
$(VENV)/.frameworks: $(VENV)/.ready
	$(VPY) -m pip install --quiet torch
	$(VPY) -m pip install --quiet torch tensorflow-cpu
	$(VPY) -m pip install --quiet torch torchvision jax tensorflow-cpu "ray>=2.9"
	touch $@

venv: $(VENV)/.ready

# JPEG decoder: libjpeg-turbo by default (built from source: cmake goes into the venv, nasm
# comes from Debian's packages, see tools/jpeg-tools.sh); JPEG=zune builds the pure-Rust
# zune-jpeg decoder instead and needs neither.
JPEG ?= turbo
ifeq ($(JPEG),zune)
NO_TURBO := --no-default-features
JPEG_TOOLS := $(VENV)/.ready
else
NO_TURBO :=
JPEG_TOOLS := $(VENV)/.jpeg-tools
endif
# cargo finds the venv's cmake.
BUILD_ENV := PATH="$(CURDIR)/$(VENV)/bin:$$PATH"

$(VENV)/.jpeg-tools: $(VENV)/.ready tools/jpeg-tools.sh
	tools/jpeg-tools.sh $(VENV)
	touch $@

# Builds the extension (release) into the venv. The module is abi3 (`_stoker.abi3.so`); a
# module built for one Python version (`_stoker.cpython-3XX-...so`), left by an older build,
# would be imported before it.
develop: $(JPEG_TOOLS)
	rm -f crates/stoker-python/python/stoker/_stoker.cpython-*.so
	$(BUILD_ENV) VIRTUAL_ENV=$(CURDIR)/$(VENV) $(VENV)/bin/maturin develop --release --quiet -m crates/stoker-python/Cargo.toml $(NO_TURBO) $(if $(NO_TURBO),--features extension-module)

cli: $(JPEG_TOOLS)
	$(BUILD_ENV) $(CARGO) build --release -p stoker-cli $(NO_TURBO)

# A portable wheel into target/wheels (README, "Install"): abi3, so one wheel serves every
# CPython from 3.9 on; linked by zig (the `ziglang` package) against glibc 2.28's symbols
# whatever this machine's glibc, so it is manylinux_2_28; libjpeg-turbo linked in statically;
# the `stoker` command as a console script. `auditwheel show` prints the tag it qualifies for.
WHEEL_PLATFORM ?= manylinux_2_28
$(VENV)/.wheel-tools: $(VENV)/.ready
	$(VPY) -m pip install --quiet "ziglang>=0.13" "auditwheel>=6"
	touch $@

wheel: $(JPEG_TOOLS) $(VENV)/.wheel-tools
	rm -f target/wheels/stoker-*.whl
	$(BUILD_ENV) $(VENV)/bin/maturin build --release --strip --quiet --zig --compatibility $(WHEEL_PLATFORM) \
	  -m crates/stoker-python/Cargo.toml $(NO_TURBO) $(if $(NO_TURBO),--features extension-module)
	$(VENV)/bin/auditwheel show target/wheels/stoker-*.whl

# The wheel installed into fresh venvs with no Rust toolchain on PATH, of this venv's Python and
# of CPython 3.9, the oldest it is for (Debian 11's, unpacked into target/python3.9 by
# tools/python39.sh): a pipeline of each kind and the `stoker` command (tools/wheel_check.py).
PY39_DIR := target/python3.9
wheel-test: wheel
	tools/python39.sh $(PY39_DIR) >/dev/null
	LD_LIBRARY_PATH=$(CURDIR)/$(PY39_DIR)/usr/lib/x86_64-linux-gnu $(VPY) tools/wheel_check.py \
	  --python $(CURDIR)/$(VPY) --python $(CURDIR)/$(PY39_DIR)/usr/bin/python3.9 target/wheels/stoker-*.whl

# Runs the main job (W1 chess-tfrecord and W4 mnist-small) on sample data it generates.
demo: develop
	$(VPY) -m stoker.demo

# The JPEG ops are also tested with the other decoder (zune-jpeg unless JPEG=zune).
rust-test: $(JPEG_TOOLS)
	$(BUILD_ENV) $(CARGO) test --workspace --exclude stoker-python $(NO_TURBO)
	$(BUILD_ENV) $(CARGO) test -p stoker-ops $(if $(NO_TURBO),,--no-default-features)

py-test: develop cli $(VENV)/.frameworks
	STOKER_BIN=$(CURDIR)/target/release/stoker $(VPY) -m pytest -q crates/stoker-python/tests

# Every test: Rust unit and integration tests, then the Python suite.
test: rust-test py-test

lint: $(JPEG_TOOLS)
	$(CARGO) fmt --all -- --check
	$(BUILD_ENV) $(CARGO) clippy --workspace --all-targets $(NO_TURBO) -- -D warnings
	$(BUILD_ENV) $(CARGO) clippy -p stoker-ops --all-targets $(if $(NO_TURBO),,--no-default-features) -- -D warnings
	$(VENV)/bin/ruff check crates/stoker-python/python crates/stoker-python/tests examples bench tests/golden tools
	$(VPY) tools/check_structure.py
	$(VENV)/bin/mypy crates/stoker-python/python/stoker --ignore-missing-imports

fmt:
	$(CARGO) fmt --all

# Fuzzing (crates/fuzz: cargo-fuzz and libFuzzer, on the nightly toolchain): each target for
# SECONDS seconds (make fuzz SECONDS=600) on the committed minimized corpus (crates/fuzz/min-corpus,
# read only) and a working corpus (crates/fuzz/corpus, not committed) seeded from the fixtures.
# A panic, an abort, more than 2 GiB of memory or one input taking over 10 s is a failure,
# and leaves the input under crates/fuzz/artifacts/.
# Long runs: FUZZ_BUILD="-s none -a" (no AddressSanitizer, which slows the harnesses most;
# debug assertions and overflow checks on) and FUZZ_STOP="-runs=10000000".
FUZZ_TARGETS ?= tfrecord example decode_image decode_crop trace_json xspace op_spec state decode_csv
SECONDS ?= 20
FUZZ_BUILD ?=
FUZZ_STOP ?= -max_total_time=$(SECONDS)
fuzz: $(JPEG_TOOLS)
	command -v cargo-fuzz >/dev/null || $(CARGO) install cargo-fuzz --locked
	$(PY) crates/fuzz/make_seeds.py
	for t in $(FUZZ_TARGETS); do \
	  mkdir -p crates/fuzz/min-corpus/$$t && \
	  $(BUILD_ENV) $(CARGO) +nightly fuzz run --fuzz-dir crates/fuzz $(FUZZ_BUILD) $(NO_TURBO) $$t crates/fuzz/corpus/$$t crates/fuzz/min-corpus/$$t -- \
	    $(FUZZ_STOP) -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 || exit 1; \
	done

# After long runs: the working and committed corpora merged and minimized (libFuzzer's -merge:
# the fewest inputs that keep all their coverage) into crates/fuzz/min-corpus, keeping inputs of
# at most 16 KiB (a small repository; the large shapes come back with the seeds made from the
# fixtures). It merges with one JPEG decoder's build: the committed JPEG corpora also hold what
# the zune-jpeg build's merge added on top (its libFuzzer binary run with -merge=1 into
# crates/fuzz/min-corpus/<target>, as RELIABILITY.md tells).
fuzz-cmin:
	for t in $(FUZZ_TARGETS); do \
	  out=crates/fuzz/corpus/$$t.min && rm -rf $$out && mkdir -p $$out crates/fuzz/min-corpus/$$t && \
	  $(BUILD_ENV) $(CARGO) +nightly fuzz run --fuzz-dir crates/fuzz $(FUZZ_BUILD) $(NO_TURBO) $$t $$out crates/fuzz/corpus/$$t crates/fuzz/min-corpus/$$t -- \
	    -merge=1 -rss_limit_mb=2048 -timeout=10 || exit 1; \
	  rm -rf crates/fuzz/min-corpus/$$t && mkdir crates/fuzz/min-corpus/$$t && \
	  find $$out -type f -size -17k -exec cp {} crates/fuzz/min-corpus/$$t/ \; && rm -rf $$out; \
	done

# Miri (nightly) on stoker-core's unit tests that run under it in minutes: batches written in
# place, buffers and pools, shuffles, caches, saved state, the stream copies; undefined
# behaviour in any of them fails. Left out: the stages with worker threads (parallel maps,
# prefetch, the shuffle's background read, an interleave's slots reading ahead as a knob moves,
# the thread pool), which Miri runs too slowly (RELIABILITY.md).
MIRI_SKIP := --skip exec::parallel_map --skip exec::prefetch --skip exec::shuffle::tests::a_ \
	--skip exec::interleave::tests::the_order --skip exec::threads
miri:
	rustup component add --toolchain nightly miri rust-src
	$(CARGO) +nightly miri test -p stoker-core --lib -- $(MIRI_SKIP)

# ThreadSanitizer (nightly, std rebuilt with it) on the executor's unit tests, the threaded
# stages included (parallel maps, prefetch, the shuffle's background read); a data race fails.
HOST_TRIPLE := $(shell rustc -vV 2>/dev/null | sed -n 's/^host: //p')
tsan:
	rustup component add --toolchain nightly rust-src
	RUSTFLAGS="-Zsanitizer=thread" $(CARGO) +nightly test -Zbuild-std --target $(HOST_TRIPLE) \
	  --target-dir target/tsan -p stoker-core --lib -- exec::

# Benchmarks need TensorFlow and PyTorch next to stoker: a separate, larger venv.
BENCH_VENV ?= .venv-bench
$(BENCH_VENV)/.ready:
	$(PY) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(BENCH_VENV)/bin/python -m pip install --quiet "maturin>=1.5,<2" numpy matplotlib tensorflow-cpu torch torchvision \
		opencv-python-headless nvidia-dali-cuda120 "ray>=2.9"
	touch $@

bench: $(BENCH_VENV)/.ready cli
	$(BUILD_ENV) VIRTUAL_ENV=$(abspath $(BENCH_VENV)) $(BENCH_VENV)/bin/maturin develop --release --quiet -m crates/stoker-python/Cargo.toml
	$(BENCH_VENV)/bin/python bench/run.py --workload all --out BENCHMARKS.md

clean:
	rm -rf $(VENV) target
