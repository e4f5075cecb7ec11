# fmsim: the two set-up commands of the README.
#   make run    installs what is missing, builds, runs the main job
#   make test   installs what is missing, builds, runs every test
BUILD ?= build
FMSIM = $(BUILD)/app/fmsim
JOBS ?= $(shell nproc 2>/dev/null || echo 2)

.PHONY: all deps configure build run test test-asan fuzz clean

all: build

deps:
	@scripts/install-deps.sh

# `make test` (and CI, .ci/run) builds everything, the CUDA kernels included
# wherever nvcc is found (FM_CUDA=ON), so that no kernel can break unseen.
configure: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DFM_CUDA=ON

build: configure
	cmake --build $(BUILD) -j $(JOBS)

# The main job: scenarios/default.yaml (the paper's sparsity table, the gallery,
# the memory figure; the kernels too where there is a GPU) into out/report.md,
# then the paper table. It builds only the fmsim binary, quietly (the log is
# $(BUILD)/run-build.log), in the same folder as `make test`, and compiles the
# CUDA kernels only where a GPU is present (nvidia-smi lists one) or asked for
# (make run FM_CUDA=ON). A folder already configured keeps its choice (after
# `make test` the kernels are built already), unless FM_CUDA is given.
GPU_PRESENT := $(shell nvidia-smi -L 2>/dev/null | grep -q '^GPU ' && echo ON || echo OFF)
FM_CUDA ?= $(GPU_PRESENT)
RUN_CUDA = $(if $(filter command line environment,$(origin FM_CUDA))$(if $(wildcard $(BUILD)/CMakeCache.txt),,new),-DFM_CUDA=$(FM_CUDA))
RUN_LOG = $(BUILD)/run-build.log
run: deps
	@mkdir -p $(BUILD)
	@echo "make run: building $(FMSIM) (GPU present: $(GPU_PRESENT); log: $(RUN_LOG))"
	@{ cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(RUN_CUDA) && \
	   cmake --build $(BUILD) -j $(JOBS) --target fmsim; } > $(RUN_LOG) 2>&1 || \
	 { tail -n 20 $(RUN_LOG); echo "make run: the build failed; the whole log is $(RUN_LOG)" >&2; exit 1; }
	$(FMSIM) run scenarios/default.yaml --out out
	@echo; echo "Block sparsity by the min/max rule, fmsim beside the paper (out/tables/paper-table.txt):"; \
	  cat out/tables/paper-table.txt

test: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

# Sanitizers: core, app, tests and the fuzz corpora built with ASan + UBSan
# (with float-cast-overflow, which -fsanitize=undefined leaves out)
# into their own folder (no CUDA, no viewer window), every error fatal; leaks
# are errors except third-party ones listed in tests/lsan.supp. The Python
# package's tests (label python) run in `make test` only: an instrumented
# libfmsim.so cannot be loaded into an uninstrumented python3.
ASAN_BUILD ?= build-asan
SAN_ENV = ASAN_OPTIONS=halt_on_error=1:detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=0 \
	UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp:print_suppressions=0
test-asan: deps
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DFM_SANITIZE=address,undefined,float-cast-overflow \
	  -DFM_CUDA=OFF -DFM_WINDOW_TESTS=OFF
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	$(SAN_ENV) ctest --test-dir $(ASAN_BUILD) --output-on-failure -j $(JOBS) -LE 'notebooks|python'

# Fuzzing: libFuzzer harnesses (fuzz/) built with clang + ASan + UBSan, each
# run for FUZZ_SECONDS (default 60), one at a time on one core; table on stdout.
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 60
fuzz:
	@command -v clang >/dev/null 2>&1 && ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a \
	  >/dev/null 2>&1 || scripts/install-deps.sh fuzz
	CC=clang cmake -S . -B $(FUZZ_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFM_FUZZ=ON \
	  -DFM_SANITIZE=address,undefined,float-cast-overflow -DFM_CUDA=OFF -DBUILD_TESTING=OFF
	cmake --build $(FUZZ_BUILD) -j $(JOBS)
	FUZZ_SECONDS=$(FUZZ_SECONDS) fuzz/run.sh $(FUZZ_BUILD)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)
