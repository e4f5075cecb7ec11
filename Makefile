# fmsim: the two set-up commands of the README.
#   make run    installs what is missing, builds, runs the main job
#   make test   installs what is missing, builds, runs every test
BUILD ?= build
FMSIM = $(BUILD)/app/fmsim
JOBS ?= $(shell nproc 2>/dev/null || echo 2)

.PHONY: all deps configure build run test clean

all: build

deps:
	@scripts/install-deps.sh

configure: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release

build: configure
	cmake --build $(BUILD) -j $(JOBS)

# The main job: scenarios/default.yaml (the paper's sparsity table, the gallery,
# the memory figure; the kernels too where there is a GPU) into out/report.md.
run: build
	$(FMSIM) run scenarios/default.yaml --out out

test: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

clean:
	rm -rf $(BUILD)
