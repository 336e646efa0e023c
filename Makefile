# iris: top-level build.  `make` builds build/iris and build/libiris.a;
# `make test` sets up, builds and runs every test (last line: "N passed, N failed, N skipped");
# `make probes` builds the CUDA probes (bench/*.cu, below);
# `make demo` sets up, builds and runs the main job.  CUDA sources are built when
# nvcc is found (CUDA=0 skips them); CUDA_ARCHS picks the architectures.

CC      ?= cc
NVCC    ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
BUILD   ?= build
PKGS    := jansson libpcre2-8 libutf8proc libjpeg spng libwebp libcurl libcrypto libmicrohttpd openblas
# Video decoding (src/formats/video_decode.c) with FFmpeg's libraries when pkg-config finds them;
# VIDEO=0 leaves them out (scripts/gpu-check's pack: the GPU machine has none), and then iris says
# "built without video support" for a video.  Objects are not rebuilt when VIDEO changes: use
# another BUILD directory.
VIDEO_PKGS := libavformat libavcodec libswscale libavutil
VIDEO   ?= $(shell pkg-config --exists $(VIDEO_PKGS) 2>/dev/null && echo 1 || echo 0)
ifeq ($(VIDEO),1)
PKGS    += $(VIDEO_PKGS)
VIDEO_DEF := -DIRIS_VIDEO=1
endif
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)

OPT     ?= -O2 -march=x86-64-v2
CFLAGS  += -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wno-unused-parameter -Wshadow -Wno-format-truncation -g $(OPT) \
           -Iinclude -Isrc -Isrc/base $(PKG_CFLAGS) $(VIDEO_DEF) -MMD -MP -pthread
LDLIBS  += $(PKG_LIBS) -lm -pthread

LIB_SRC := $(wildcard src/base/*.c src/formats/*.c src/hub/*.c src/model/*.c src/tools/*.c src/backend/*.c src/backend/cpu/*.c \
                      src/backend/cuda/*.c src/engine/*.c src/server/*.c)
CLI_SRC := $(wildcard src/cli/*.c)
TEST_SRC:= $(filter-out tests/test_ops%,$(wildcard tests/*.c))
GPU_TEST_OBJ := $(patsubst %.c,$(BUILD)/%.o,tests/test_main.c tests/tiny_fixture.c $(wildcard tests/test_ops*.c))
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/%.o)
CLI_OBJ := $(CLI_SRC:%.c=$(BUILD)/%.o)
TEST_OBJ:= $(TEST_SRC:%.c=$(BUILD)/%.o)
TEST_SO := $(patsubst tests/preload/%.c,$(BUILD)/tests/preload/%.so,$(wildcard tests/preload/*.c))

# CUDA: one .cu per op family, C headers in front.
CUDA_HOME   ?= $(patsubst %/bin/nvcc,%,$(NVCC))
# CUDA_ARCHS: by default the GPUs of this machine (scripts/cuda-archs: an RTX 5060 gives 120f, an
# H100 90a), else 90a (no GPU: CI).  90a / 120f: with their arch- and family-specific instructions
# (setmaxnreg in cuda_decode.cu).  A release build: "80 86 89 90a 120f".
# Machine code (sm_XX) for each, and PTX for the newest as a plain target (120f -> compute_120,
# 90a -> compute_90: what an arch-specific target adds is behind feature macros), so that a card
# newer than the list still runs: the driver compiles that PTX at its first start (cuda_info.cu
# says so in the log).  It costs a compile pass (cuda_decode.cu, CI's 90a: 6.8 -> 10.1 s);
# CUDA_PTX= (empty) leaves it out.
CU_SRC  := $(wildcard src/backend/cuda/*.cu)
comma   := ,
gencode  = $(foreach a,$(1),-gencode arch=compute_$(a),code=sm_$(a))
ptx_arch = $(shell printf '%s\n' $(1) | sed 's/[a-z]*$$//' | sort -n | tail -1)
CUDA    ?= $(if $(and $(NVCC),$(CU_SRC)),1,0)
ifeq ($(CUDA),1)
ifeq ($(origin CUDA_ARCHS),undefined)
CUDA_ARCHS := $(shell scripts/cuda-archs)
endif
export CUDA_ARCHS  # to the sub-makes of `make test` (asked once)
ifeq ($(origin CUDA_PTX),undefined)
CUDA_PTX := $(call ptx_arch,$(CUDA_ARCHS))
endif
CU_OBJ  := $(CU_SRC:%.cu=$(BUILD)/%.o)
# the CUDA objects are rebuilt when the targets change: a file that holds them (CUDA_ARCHS, then
# "ptx N"), rewritten only then
CU_STAMP := $(BUILD)/cuda_archs
CU_STAMP_TEXT := printf '%s\nptx %s\n' "$(CUDA_ARCHS)" "$(CUDA_PTX)"
$(shell mkdir -p $(BUILD) && { [ "$$(cat $(CU_STAMP) 2>/dev/null)" = "$$($(CU_STAMP_TEXT))" ] || $(CU_STAMP_TEXT) > $(CU_STAMP); })
CFLAGS  += -DIRIS_CUDA=1 -I$(CUDA_HOME)/include
# The CUDA backend (CU_OBJ) and the CUDA libraries are a shared object loaded when a GPU is used
# (src/backend/cuda/cuda_loader.c): iris --help, plan, inspect and CPU runs start without them.
# The executables that may load it export their symbols (the library takes iris's log and errors
# from them) and carry all of libiris.a; what calls the backend's test knobs (iris-test-gpu, the
# benchmarks) links CU_OBJ in directly instead.
CUDA_LIBS := -L$(CUDA_HOME)/lib64 -lcublasLt -lcublas -lcudart -lstdc++
CUDA_SO  := $(BUILD)/libiris-cuda.so
EXE_LINK := -rdynamic -Wl,--whole-archive $(BUILD)/libiris.a -Wl,--no-whole-archive
# the flags every CUDA compile takes (the probes' and scripts/spill-check's too)
NVBASE  := -O3 -std=c++17 -Iinclude -Isrc -Isrc/base
NVFLAGS ?= $(NVBASE) $(call gencode,$(CUDA_ARCHS)) $(if $(CUDA_PTX),-gencode arch=compute_$(CUDA_PTX)$(comma)code=compute_$(CUDA_PTX)) \
           -Xcompiler -fPIC -MMD -MP -DIRIS_CUDA_ARCHS='"$(CUDA_ARCHS)"' -DIRIS_CUDA_PTX='"$(CUDA_PTX)"'
endif

# Probes: bench/NAME.cu, stand-alone measurements of one mechanism on an H100 (sm_90 whatever
# CUDA_ARCHS says, beside its newer targets), built by `make probes` (and by `make test`, so that
# CI compiles them: ~12 s of one core for all six, against minutes for the library's CUDA objects);
# scripts/gpu-check builds and runs them.
PROBES := $(if $(filter 1,$(CUDA)),$(patsubst bench/%.cu,$(BUILD)/bench/%,$(wildcard bench/*.cu)))
# and for the newer GPUs CUDA_ARCHS names (an RTX 50 card: 120f), so that gpu-check runs them there too
PROBE_ARCHS := $(filter 100% 101% 103% 110% 120% 121%,$(CUDA_ARCHS))

EXE_LINK ?= $(BUILD)/libiris.a

.PHONY: all test demo setup clean fuzz-smoke bench-tok examples spill-check probes install
all: $(BUILD)/iris $(BUILD)/libiris.a $(CUDA_SO)
probes: $(PROBES)
	@$(if $(PROBES),,echo "probes: no CUDA in this build")

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/%.o: %.cu $(CU_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -c $< -o $@

# The page of `iris serve` (src/server/page/*): each file becomes a C array named after it
# (index.html -> index_html) in $(BUILD)/gen/page_assets.inc, which src/server/page.c includes;
# od and sed only (coreutils), so nothing beyond the compiler is needed.
PAGE_FILES := $(sort $(wildcard src/server/page/*))
PAGE_INC   := $(BUILD)/gen/page_assets.inc
$(PAGE_INC): $(PAGE_FILES)
	@mkdir -p $(dir $@)
	@{ for f in $(PAGE_FILES); do printf 'static const unsigned char %s[] = {\n' "$$(basename $$f | tr '.-' '__')"; \
	   od -An -v -tx1 $$f | sed 's/ \([0-9a-f][0-9a-f]\)/0x\1,/g'; printf '};\n'; done; } > $@.tmp && mv $@.tmp $@
$(BUILD)/src/server/page.o: $(PAGE_INC)
$(BUILD)/src/server/page.o: CFLAGS += -I$(BUILD)/gen
$(BUILD)/fuzz/src/server/page.o: $(PAGE_INC)
$(BUILD)/fuzz/src/server/page.o: FUZZ_FLAGS += -I$(BUILD)/gen

$(BUILD)/libiris.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

ifeq ($(CUDA),1)
# -Bsymbolic: the library's calls among its own functions stay inside it (the executables' weak
# stand-ins of the same names are for their callers only).
$(CUDA_SO): $(CU_OBJ)
	$(CC) -shared -Wl,-Bsymbolic -o $@ $(CU_OBJ) $(CUDA_LIBS)
endif

$(BUILD)/iris: $(CLI_OBJ) $(BUILD)/libiris.a
	$(CC) $(CFLAGS) -o $@ $(CLI_OBJ) $(EXE_LINK) $(LDLIBS)

$(BUILD)/iris-test: $(TEST_OBJ) $(BUILD)/libiris.a | $(TEST_SO) $(CUDA_SO)
	$(CC) $(CFLAGS) -o $@ $(TEST_OBJ) $(EXE_LINK) $(LDLIBS)

# Shared libraries the tests load into the iris binary with LD_PRELOAD (tests/preload/; see each file).
$(BUILD)/tests/preload/%.so: tests/preload/%.c $(CU_STAMP)
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -D_GNU_SOURCE -Wall -Wextra -O2 -shared -fPIC \
	    $(if $(filter 1,$(CUDA)),-DIRIS_CUDA=1 -I$(CUDA_HOME)/include) -o $@ $<

# GPU checks (every CUDA op against the CPU backend): run on a GPU machine by scripts/gpu-check, not by `make test`.
$(BUILD)/iris-test-gpu: $(GPU_TEST_OBJ) $(CU_OBJ) $(BUILD)/libiris.a
	$(CC) $(CFLAGS) -o $@ $(GPU_TEST_OBJ) $(CU_OBJ) $(BUILD)/libiris.a $(LDLIBS) $(CUDA_LIBS)

# Fuzz targets: the library rebuilt with clang's libFuzzer + ASan instrumentation.
FUZZ_CC    ?= clang
FUZZ_FLAGS := -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer-no-link,address,undefined \
              -Iinclude -Isrc -Isrc/base $(PKG_CFLAGS) $(VIDEO_DEF) -pthread
FUZZ_SRC   := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_BIN   := $(FUZZ_SRC:tests/fuzz/%.c=$(BUILD)/fuzz/%)
FUZZ_LIBOBJ:= $(LIB_SRC:%.c=$(BUILD)/fuzz/%.o)

$(BUILD)/fuzz/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_FLAGS) -c $< -o $@

$(BUILD)/fuzz/fuzz_%: tests/fuzz/fuzz_%.c $(FUZZ_LIBOBJ)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_FLAGS) -fsanitize=fuzzer $< $(FUZZ_LIBOBJ) -o $@ $(PKG_LIBS) -lm -pthread

# A short run of every fuzz target from its seed corpus (tests/fuzz/corpus/NAME); any UBSan
# report is fatal (halt_on_error), as ASan's are.
fuzz-smoke: $(FUZZ_BIN)
	@for f in $(FUZZ_BIN); do n=$$(basename $$f); mkdir -p $(BUILD)/fuzz/corpus-$$n; \
	  echo "fuzz $$n: 15 s"; \
	  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 $$f -max_total_time=15 -max_len=65536 -rss_limit_mb=2048 $(BUILD)/fuzz/corpus-$$n tests/fuzz/corpus/$$n \
	      > $(BUILD)/fuzz/$$n.log 2>&1 || { tail -40 $(BUILD)/fuzz/$$n.log; exit 1; }; done

# Benchmarks: bench/NAME.c -> $(BUILD)/bench/NAME, run by hand (figures are reported, never asserted).
$(BUILD)/bench/%: bench/%.c $(CU_OBJ) $(BUILD)/libiris.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(CU_OBJ) $(BUILD)/libiris.a $(LDLIBS) $(CUDA_LIBS)

# Probes (PROBES above): bench/NAME.cu -> $(BUILD)/bench/NAME.
PROBE_LIBS_gemm_probe := -lcublasLt
$(BUILD)/bench/%: bench/%.cu $(CU_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVBASE) $(call gencode,90 $(PROBE_ARCHS)) -o $@ $< $(PROBE_LIBS_$*)

# Examples: examples/NAME.c -> $(BUILD)/examples/NAME, clients of `iris serve` (libcurl + jansson).
EXAMPLES := $(patsubst examples/%.c,$(BUILD)/examples/%,$(wildcard examples/*.c))
examples: $(EXAMPLES)
$(BUILD)/examples/%: examples/%.c examples/iris_client.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(LDLIBS)

setup:
	@scripts/setup

# The persistent decode kernel spills no registers on sm_90a and sm_120f (compile only; again when
# its sources change).
spill-check: $(if $(filter 1,$(CUDA)),$(BUILD)/spill-check.ok)
	@$(if $(filter 1,$(CUDA)),,echo "spill-check: no CUDA in this build")
$(BUILD)/spill-check.ok: src/backend/cuda/cuda_decode.cu src/backend/cuda/cuda_decode.cuh src/backend/cuda/cuda_internal.cuh scripts/spill-check
	@mkdir -p $(dir $@)
	@NVCC=$(NVCC) NVBASE="$(NVBASE)" scripts/spill-check > $@.tmp; st=$$?; cat $@.tmp; [ $$st = 0 ] && mv $@.tmp $@

test: setup
	@$(MAKE) --no-print-directory -j$$(nproc) all $(BUILD)/iris-test probes
	@$(MAKE) --no-print-directory -j$$(nproc) fuzz-smoke
	@$(MAKE) --no-print-directory spill-check
	@IRIS_ROOT=$(CURDIR) IRIS_BIN=$${IRIS_BIN:-$(BUILD)/iris} $(BUILD)/iris-test

demo: setup
	@$(MAKE) --no-print-directory -j$$(nproc) all
	@scripts/demo

# make install PREFIX=DIR (default /usr/local; DESTDIR for packaging): DIR/bin/iris, the CUDA backend
# in DIR/lib/iris (where the binary looks: cuda_loader.c), the demo model in DIR/share/iris/models/demo
# (default_model.c), and the binary's own help: DIR/share/doc/iris/COMMAND.txt and man iris.
PREFIX ?= /usr/local
IDIR = $(DESTDIR)$(PREFIX)
IDOC = $(IDIR)/share/doc/iris
DEMO_FILES := $(wildcard models/demo/*.json models/demo/*.safetensors models/demo/README.md)
install: all
	install -d $(IDIR)/bin $(IDIR)/share/iris/models/demo $(IDIR)/share/man/man1 $(IDOC)
	install -m 755 $(BUILD)/iris $(IDIR)/bin/iris
	$(if $(CUDA_SO),install -d $(IDIR)/lib/iris && install -m 755 $(CUDA_SO) $(IDIR)/lib/iris/)
	install -m 644 $(DEMO_FILES) $(IDIR)/share/iris/models/demo/
	@cmds=$$($(BUILD)/iris --help | awk '/^commands:/{on=1;next} /^$$/{on=0} on{print $$1}'); \
	 $(BUILD)/iris --help > $(IDOC)/iris.txt && for c in $$cmds; do $(BUILD)/iris help $$c > $(IDOC)/$$c.txt || exit 1; done; \
	 { printf '.TH IRIS 1\n.SH NAME\niris \\- Qwen3-VL inference on the CPU or one GPU\n.SH DESCRIPTION\n.nf\n'; \
	   for f in iris $$cmds; do sed -e 's/\\/\\e/g' -e 's/^\./\\\&./' $(IDOC)/$$f.txt; echo; done; \
	   printf '.fi\n'; } > $(IDIR)/share/man/man1/iris.1
	@echo "installed $(IDIR)/bin/iris; the demo model in $(IDIR)/share/iris/models/demo; man iris"

clean:
	rm -rf $(BUILD)

-include $(LIB_OBJ:.o=.d) $(CLI_OBJ:.o=.d) $(TEST_OBJ:.o=.d) $(GPU_TEST_OBJ:.o=.d) $(CU_OBJ:.o=.d) $(FUZZ_LIBOBJ:.o=.d)
