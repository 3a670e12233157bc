# xent — one flat Makefile: make, make test, make test-gpu, make install PREFIX=...
PREFIX ?= /usr/local
CUDA ?= /usr/local/cuda
CC ?= gcc
BUILD := build
CFLAGS ?= -O2 -g
# CFLAGS reach the link lines too, and LDFLAGS every link, so that a sanitizer
# build is: make BUILD=build-asan CFLAGS='-O1 -g -fsanitize=address,undefined'
# LDFLAGS='-fsanitize=address,undefined'
LDFLAGS ?=
# Hidden by default: the shared library exports what include/xent.h marks XENT_API, nothing else.
XCFLAGS := -std=c11 -D_GNU_SOURCE -Wall -Wextra -fPIC -fvisibility=hidden -pthread -Iinclude -I. \
	-I$(CUDA)/include -DXENT_DATADIR='"$(PREFIX)/share/xent"'
# The driver (libcuda.so.1) is dlopen'ed at run time, never linked. NVRTC is
# found by the loader's own search (ld.so.conf, LD_LIBRARY_PATH), not a path
# fixed at build time; RPATH=$(CUDA)/lib64 records one where that search
# does not know CUDA's folder.
RPATH ?=
comma := ,
LIBS := -L$(CUDA)/lib64 $(if $(RPATH),-Wl$(comma)-rpath$(comma)$(RPATH)) -lnvrtc -lsqlite3 -ldl -lpthread -lm
# Check is linked statically so test binaries also run where Check is not installed.
CHECK_LIBS := -Wl,-Bstatic -lcheck -lsubunit -Wl,-Bdynamic -lrt

# The version and the SONAME come from the header's XENT_VERSION (major*10000 + minor*100 + patch).
VERSION_NUM := $(shell sed -n 's/^\#define XENT_VERSION \([0-9]*\).*/\1/p' include/xent.h)
VERSION := $(shell n=$(VERSION_NUM); echo $$((n / 10000)).$$((n / 100 % 100)).$$((n % 100)))
SONAME := libxent.so.$(firstword $(subst ., ,$(VERSION)))

# The launch library: generation, runtime and the tune-cache lookup. The
# search (tune/) is an object set of its own, linked only into xent-tune and
# the tests, so that programs using xent do not carry it.
LIB_SRC := $(wildcard common/*.c gen/*.c runtime/*.c tunecache/*.c)
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/%.o) $(BUILD)/templates.o
TUNE_OBJ := $(patsubst %.c,$(BUILD)/%.o,$(wildcard tune/*.c))
HEADERS := $(wildcard include/*.h common/*.h gen/*.h runtime/*.h tunecache/*.h tune/*.h tools/*.h)
CPU_TESTS := $(patsubst tests/%.c,$(BUILD)/tests/%,$(wildcard tests/check_*.c))
GPU_TESTS := $(patsubst tests/gpu/%.c,$(BUILD)/tests/gpu/%,$(wildcard tests/gpu/check_*.c))
TOOLS := $(BUILD)/xent-tune $(BUILD)/xent-example $(if $(wildcard $(CUDA)/include/nccl.h),$(BUILD)/xent-example-nccl)

.PHONY: all test test-slow test-gpu gpu-bins install clean format FORCE $(CPU_RUNS) $(SLOW_RUNS)
all: $(BUILD)/libxent.so $(BUILD)/$(SONAME) $(BUILD)/libxent.a $(BUILD)/xent.pc $(TOOLS) $(BUILD)/COMMIT

# A template is a file, or a folder of parts joined in name order (tools/embed.sh).
TEMPLATES := $(wildcard templates/*.cu) $(patsubst %/,%,$(filter-out templates/shared/,$(wildcard templates/*/)))
$(BUILD)/templates.c: $(wildcard templates/*.cu templates/*/*.cu templates/shared/*.cuh) tools/embed.sh
	@mkdir -p $(@D)
	sh tools/embed.sh $(TEMPLATES) > $@

$(BUILD)/%.o: %.c $(HEADERS) $(BUILD)/flags
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(XCFLAGS) -c $< -o $@

# The shipped caches' folder is compiled in: rebuild the one object that uses it when PREFIX changes.
$(BUILD)/prefix: FORCE
	@mkdir -p $(@D)
	@echo '$(PREFIX)' | cmp -s - $@ || echo '$(PREFIX)' > $@
$(BUILD)/runtime/lookup.o: $(BUILD)/prefix
# Objects are rebuilt when the compiler or its flags change (the data folder aside: see above).
$(BUILD)/flags: FORCE
	@mkdir -p $(@D)
	@echo '$(CC) $(CFLAGS) $(filter-out -DXENT_DATADIR=%,$(XCFLAGS))' | cmp -s - $@ || \
		echo '$(CC) $(CFLAGS) $(filter-out -DXENT_DATADIR=%,$(XCFLAGS))' > $@
# The commit a build came from, for logs made where the build is carried to.
$(BUILD)/COMMIT: FORCE
	@mkdir -p $(@D)
	@(git describe --always --dirty 2>/dev/null || echo unknown) | cmp -s - $@ || \
		(git describe --always --dirty 2>/dev/null || echo unknown) > $@
FORCE:

$(BUILD)/templates.o: $(BUILD)/templates.c $(BUILD)/flags
	$(CC) $(CFLAGS) $(XCFLAGS) -c $< -o $@

# In the build tree the file itself is libxent.so (what ctypes and setup.py
# load by path); the SONAME link beside it serves programs linked with -lxent.
$(BUILD)/libxent.so: $(LIB_OBJ)
	$(CC) $(CFLAGS) $(LDFLAGS) -shared -Wl,-soname,$(SONAME) -o $@ $^ $(LIBS)

$(BUILD)/$(SONAME): $(BUILD)/libxent.so
	ln -sf libxent.so $@

$(BUILD)/libxent.a: $(LIB_OBJ)
	ar rcs $@ $^

$(BUILD)/libxent-tune.a: $(TUNE_OBJ)
	ar rcs $@ $^

# pkg-config's description of an installed xent (PREFIX is compiled in, as for the data folder).
$(BUILD)/xent.pc: tools/xent.pc.in $(BUILD)/prefix include/xent.h
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(VERSION)|' -e 's|@CUDA_LIB@|$(CUDA)/lib64|' $< > $@

# xent-tune in four parts (tools/xent-tune-cli.h says which does what)
XENT_TUNE_OBJ := $(patsubst %.c,$(BUILD)/%.o,$(wildcard tools/xent-tune*.c))
$(BUILD)/xent-tune: $(XENT_TUNE_OBJ) $(BUILD)/tools/json.o $(BUILD)/libxent-tune.a $(BUILD)/libxent.a
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(LIBS)

# The example is the program a user copies: compiled with the public header
# alone on its include path, so that it cannot use the library's insides.
$(BUILD)/tools/example.o: tools/example.c include/xent.h $(BUILD)/flags
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -std=c11 -D_GNU_SOURCE -Wall -Wextra -Iinclude -I$(CUDA)/include -c $< -o $@

# The example uses the CUDA runtime like a training stack would; cudart_static
# loads the driver itself, so this binary also starts without a GPU.
$(BUILD)/xent-example: $(BUILD)/tools/example.o $(BUILD)/libxent.a
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $^ -L$(CUDA)/lib64 -lcudart_static -lrt $(LIBS)

# The NCCL example, where the toolkit ships nccl.h (it also needs libnccl.so.2 at run time).
$(BUILD)/tools/example_nccl.o: tools/example_nccl.c include/xent.h $(BUILD)/flags
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -std=c11 -D_GNU_SOURCE -Wall -Wextra -Iinclude -I$(CUDA)/include -c $< -o $@

$(BUILD)/xent-example-nccl: $(BUILD)/tools/example_nccl.o $(BUILD)/libxent.a
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $^ -L$(CUDA)/lib64 -lnccl -lcudart_static -lrt $(LIBS)

# Test binaries are never installed: they keep CUDA's folder as their RUNPATH.
$(BUILD)/tests/%: tests/%.c $(BUILD)/libxent-tune.a $(BUILD)/libxent.a $(HEADERS) $(wildcard tests/*.h tests/gpu/*.h)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(XCFLAGS) $(TEST_DEFS) $(LDFLAGS) -o $@ $< $(BUILD)/libxent-tune.a $(BUILD)/libxent.a $(CHECK_LIBS) \
		$(LIBS) -Wl,-rpath,$(CUDA)/lib64

# A stand-in libcuda.so.1 (host memory, launches counted, kernels not run):
# check_threads builds and launches plans from many threads against it, so
# the runtime's path past the driver runs, under TSan too, without a GPU.
STANDIN := $(BUILD)/standin/libcuda.so.1
$(STANDIN): tests/standin/libcuda.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(XCFLAGS) $(LDFLAGS) -shared -Wl,-soname,libcuda.so.1 -o $@ $<
$(BUILD)/tests/check_threads: $(STANDIN)
$(BUILD)/tests/check_threads: TEST_DEFS = -DXENT_STANDIN_DIR='"$(abspath $(BUILD))/standin"'

# CPU suites: no GPU needed. Each suite is a target of its own (make -j2 test
# runs two at once), compiling kernels into a throwaway cache of its own, its
# output kept in a log and printed whole so that parallel suites do not
# interleave. The slowest suites come first, so a parallel run ends sooner.
CPU_ORDER := check_compile check_cli check_threads check_space check_reference check_tunecache check_api
CPU_SUITES := $(notdir $(CPU_TESTS))
CPU_RUNS := $(addprefix test-,$(filter $(CPU_SUITES),$(CPU_ORDER)) $(filter-out $(CPU_ORDER),$(CPU_SUITES)))
# Test cases tagged "slow" (whole-space compile samples, --compile-only of
# every candidate: minutes on two cores) run in `make test-slow`; CI runs both.
SLOW_RUNS := $(addprefix test-slow-,check_compile check_cli)
test: $(CPU_RUNS)
test-slow: $(SLOW_RUNS)
$(CPU_RUNS): TIER = CK_EXCLUDE_TAGS=slow
$(SLOW_RUNS): TIER = CK_INCLUDE_TAGS=slow
$(CPU_RUNS): test-%: $(BUILD)/tests/% $(BUILD)/xent-tune $(BUILD)/libxent.so $(BUILD)/$(SONAME) $(BUILD)/xent.pc
	@$(RUN_SUITE)
$(SLOW_RUNS): test-slow-%: $(BUILD)/tests/% $(BUILD)/xent-tune $(BUILD)/libxent.so $(BUILD)/$(SONAME) $(BUILD)/xent.pc
	@$(RUN_SUITE)
RUN_SUITE = d=$$(mktemp -d); log=$(BUILD)/tests/$*$(if $(findstring INCLUDE,$(TIER)),-slow).log; t0=$$(date +%s); \
	$(TIER) XENT_KERNEL_CACHE=$$d XENT_TUNE_BIN=$(BUILD)/xent-tune XENT_BUILD=$(BUILD) XENT_RPATH=$(RPATH) \
	XENT_LINK_FLAGS='$(CFLAGS) $(LDFLAGS)' $< > $$log 2>&1; rc=$$?; \
	echo "== $< $(TIER) ($$(( $$(date +%s) - t0 )) s)"; cat $$log; rm -rf $$d; exit $$rc

# GPU suites: run on a machine with an NVIDIA GPU and its driver.
test-gpu: $(GPU_TESTS) $(TOOLS)
	@set -e; for t in $(GPU_TESTS); do echo "== $$t"; $$t; done

# What tools/gpu-session.sh runs, built here for a GPU machine that cannot build (no SQLite
# headers or Check): `make` alone leaves the GPU suites as they were, so a carried build/
# would run suites of an older library.
gpu-bins: all $(GPU_TESTS)

# Fuzzing (clang's libFuzzer with ASan and UBSan): each target in tests/fuzz
# runs FUZZ_SECONDS from its seed corpus (tests/fuzz/corpus/<target>, kept
# as it is); what it finds new goes to $(FUZZ_BUILD)/corpus/<target>, a
# crash to $(FUZZ_BUILD)/crash-* and fails the run. The library is built
# apart with coverage (BUILD=$(FUZZ_BUILD)), so it never mixes with build/.
FUZZ_CC ?= clang
FUZZ_SECONDS ?= 60
FUZZ_BUILD := build-fuzz
FUZZ_FLAGS := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all
FUZZ_TARGETS := $(patsubst tests/fuzz/%.c,%,$(wildcard tests/fuzz/fuzz_*.c))
# a shapes file and a config are short; an import of a few rows is some kilobytes
FUZZ_MAXLEN_fuzz_shape := 64
FUZZ_MAXLEN_fuzz_config := 256
FUZZ_MAXLEN_fuzz_shapes_file := 4096
FUZZ_MAXLEN_fuzz_import := 8192
.PHONY: fuzz fuzz-build $(addprefix fuzz-,$(FUZZ_TARGETS))
fuzz-build:
	$(MAKE) BUILD=$(FUZZ_BUILD) CC=$(FUZZ_CC) CFLAGS='$(FUZZ_FLAGS) -fsanitize=fuzzer-no-link' \
		LDFLAGS='-fsanitize=address,undefined' $(FUZZ_BUILD)/libxent.a $(FUZZ_BUILD)/libxent-tune.a
# the targets that include tools/xent-tune*.c link its JSON writer too
$(FUZZ_BUILD)/fuzz/%: tests/fuzz/%.c $(wildcard tests/fuzz/*.h) $(wildcard tools/xent-tune*.c) tools/json.c fuzz-build
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_FLAGS) -fsanitize=fuzzer $(XCFLAGS) -o $@ $< tools/json.c $(FUZZ_BUILD)/libxent-tune.a $(FUZZ_BUILD)/libxent.a \
		$(LIBS) -Wl,-rpath,$(CUDA)/lib64
fuzz: $(addprefix fuzz-,$(FUZZ_TARGETS))
$(addprefix fuzz-,$(FUZZ_TARGETS)): fuzz-%: $(FUZZ_BUILD)/fuzz/%
	@mkdir -p $(FUZZ_BUILD)/corpus/$* $(FUZZ_BUILD)/artifacts/$*
	@log=$(FUZZ_BUILD)/fuzz/$*.log; \
	$< -max_total_time=$(FUZZ_SECONDS) -max_len=$(FUZZ_MAXLEN_$*) -timeout=10 -rss_limit_mb=2048 \
		-print_final_stats=1 -artifact_prefix=$(FUZZ_BUILD)/artifacts/$*/ \
		$(FUZZ_BUILD)/corpus/$* tests/fuzz/corpus/$* > $$log 2>&1; rc=$$?; \
	echo "== $* ($(FUZZ_SECONDS) s): $$(grep -h 'stat::number_of_executed_units' $$log | tr -dc 0-9) runs," \
		"$$(grep -h 'stat::new_units_added' $$log | tr -dc 0-9) new inputs, exit $$rc"; \
	[ $$rc = 0 ] || tail -60 $$log; exit $$rc

# The torch operator of the eager fused loss (python/xent/csrc/xent_torch.cpp), compiled against
# the torch that PYTHON imports and loadable only into that torch; pip install ./python builds it
# where its interpreter has torch (python/setup.py), and the package works without it.
PYTHON ?= python3
TORCH_FLAGS = $(shell $(PYTHON) -c 'import torch, torch.utils.cpp_extension as e; \
	print(" ".join(["-I" + p for p in e.include_paths()] + ["-L" + p for p in e.library_paths()] + \
	["-D_GLIBCXX_USE_CXX11_ABI=%d" % int(torch._C._GLIBCXX_USE_CXX11_ABI)]))')
$(BUILD)/libxent_torch.so: python/xent/csrc/xent_torch.cpp include/xent.h $(BUILD)/libxent.so
	@flags='$(TORCH_FLAGS)'; [ -n "$$flags" ] || { echo "$(PYTHON) cannot import torch" >&2; exit 1; }; \
	echo "$(CXX) -O2 -std=c++20 -fPIC -shared ... $< -o $@"; \
	$(CXX) -O2 -std=c++20 -fPIC -shared -fvisibility=hidden -Iinclude $$flags $< -o $@ \
		-L$(BUILD) -l:libxent.so -ltorch -ltorch_cpu -lc10 -Wl,-rpath,'$$ORIGIN'

# Installed as a distribution lays a library out: the file named by its full
# version, the SONAME link the loader follows, the unversioned link -lxent finds.
install: all
	install -d $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/bin \
		$(DESTDIR)$(PREFIX)/share/xent
	install -m 644 include/xent.h $(DESTDIR)$(PREFIX)/include/
	install -m 755 $(BUILD)/libxent.so $(DESTDIR)$(PREFIX)/lib/libxent.so.$(VERSION)
	ln -sf libxent.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(PREFIX)/lib/libxent.so
	install -m 644 $(BUILD)/libxent.a $(DESTDIR)$(PREFIX)/lib/
	install -m 644 $(BUILD)/xent.pc $(DESTDIR)$(PREFIX)/lib/pkgconfig/
	install -m 755 $(BUILD)/xent-tune $(DESTDIR)$(PREFIX)/bin/
	install -m 644 tunecache/*.sql $(DESTDIR)$(PREFIX)/share/xent/

# The C sources in .clang-format's style (templates/ excepted: see .clang-format).
format:
	git ls-files '*.c' '*.h' | xargs clang-format -i

clean:
	rm -rf $(BUILD) $(FUZZ_BUILD)
