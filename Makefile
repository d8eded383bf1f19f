# mailvault -- one GNU Makefile.
#
#   make run     build everything, run the demonstration under ./var, then mailvaultd on
#                127.0.0.1 (IMAP 1143, IMAPS 1993, LMTP 2424) until Ctrl-C
#                (not on a terminal: a short scripted check, then it stops)
#   make test    the whole test suite, under AddressSanitizer + UndefinedBehaviorSanitizer
#   make bench   micro-benchmarks, then the reference suite (release build; QUICK=1: short)
#   make lint    clang-format --dry-run, cppcheck, banned functions
#
# Both `run` and `test` first install missing Debian packages (scripts/install-deps.sh).

CC      ?= cc
BUILD   := build
PKGS    := sqlite3 libcrypto

WARN    := -Wall -Wextra -Wpedantic -Werror -Wshadow -Wstrict-prototypes \
           -Wmissing-prototypes -Wformat=2 -Wvla -Wconversion
CSTD    := -std=c17 -D_GNU_SOURCE
# GLib/GMime headers are not -Wconversion/-Wpedantic clean: include them as system headers.
DEP_CFLAGS := $(shell pkg-config --cflags gmime-3.0 libsodium libzstd 2>/dev/null | sed 's/-I/-isystem /g')
INC     := -Iinclude -Isrc $(DEP_CFLAGS)
RELEASE := -O2 -g -D_FORTIFY_SOURCE=2 -fstack-protector-strong -fvisibility=hidden -fPIC
SANITIZE := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all
LIBS    := -lsqlite3 -lcrypto -lpthread $(shell pkg-config --libs gmime-3.0 libsodium libzstd 2>/dev/null)

LIB_SRC  := $(sort $(wildcard src/util/*.c src/crypto/*.c src/vfs/*.c src/store/*.c src/ops/*.c))
LIB_SRC  := $(filter-out src/vfs/extension.c,$(LIB_SRC))
EXT_SRC  := $(sort $(wildcard src/util/*.c src/crypto/*.c src/vfs/*.c))
CLI_SRC  := $(sort $(wildcard cli/*.c))
TEST_SRC := $(sort $(wildcard tests/test_*.c))
FUZZ_SRC := $(sort $(wildcard fuzz/fuzz_*.c))
BENCH_SRC := $(sort $(wildcard bench/bench_*.c))
IMAPD_SRC := $(sort $(wildcard imapd/*.c))

REL_OBJ  := $(LIB_SRC:%.c=$(BUILD)/rel/%.o)
ASAN_OBJ := $(LIB_SRC:%.c=$(BUILD)/asan/%.o)
EXT_OBJ  := $(EXT_SRC:%.c=$(BUILD)/ext/%.o)

TEST_BIN  := $(TEST_SRC:tests/%.c=$(BUILD)/asan/tests/%)
FUZZ_BIN  := $(FUZZ_SRC:fuzz/%.c=$(BUILD)/asan/fuzz/%)
BENCH_BIN := $(BENCH_SRC:bench/%.c=$(BUILD)/rel/bench/%)

.PHONY: all deps run test bench lint clean
all: $(BUILD)/mailvault $(BUILD)/libmailvault.a $(BUILD)/mailvault_ext.so $(BUILD)/mailvaultd

deps:
	@scripts/install-deps.sh

run: deps
	@$(MAKE) --no-print-directory all
	@scripts/demo.sh
	@scripts/run-server.sh

# The benchmarks' smoke tests (tests/cli_bench_smoke.sh, tests/cli_bench_scale_smoke.sh,
# tests/cli_bench_imap_smoke.sh) run the release bench_reference, bench_scale and bench_imap.
test: deps
	@$(MAKE) --no-print-directory all $(TEST_BIN) $(FUZZ_BIN) $(BUILD)/asan/mailvault \
		$(BUILD)/rel/bench/bench_reference $(BUILD)/rel/bench/bench_scale \
		$(BUILD)/rel/bench/bench_imap $(BUILD)/asan/mailvaultd
	@tests/run.sh

# make bench QUICK=1: both scripts get --quick (the reference suite then stays under 2 min).
bench: deps
	@$(MAKE) --no-print-directory all $(BENCH_BIN)
	@bench/run.sh $(if $(QUICK),--quick)
	@bench/suite/run.sh $(if $(QUICK),--quick)

lint:
	@scripts/lint.sh

clean:
	rm -rf $(BUILD)

# ---- release library, CLI, loadable extension ----
$(BUILD)/rel/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CSTD) $(WARN) $(RELEASE) $(INC) -MMD -MP -c $< -o $@

$(BUILD)/libmailvault.a: $(REL_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/mailvault: $(CLI_SRC:%.c=$(BUILD)/rel/%.o) $(BUILD)/libmailvault.a
	$(CC) $(RELEASE) -o $@ $^ $(LIBS)

# The server (imapd/, docs/IMAPD.md): the only program that links libssl.
$(BUILD)/mailvaultd: $(IMAPD_SRC:%.c=$(BUILD)/rel/%.o) $(BUILD)/libmailvault.a
	$(CC) $(RELEASE) -o $@ $^ -lssl $(LIBS)

# The extension reaches SQLite through the sqlite3_api table (sqlite3ext.h), so it works in
# any host that loads it, whichever libsqlite3 that host was linked with.
$(BUILD)/ext/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CSTD) $(WARN) $(RELEASE) -DMV_BUILD_EXTENSION $(INC) -MMD -MP -c $< -o $@

$(BUILD)/mailvault_ext.so: $(EXT_OBJ)
	$(CC) -shared -o $@ $^ -lcrypto -lpthread

# Every benchmark links the shared helpers: scratch directory, text buffer, util (bench/*.h).
$(BUILD)/rel/bench/%: bench/%.c $(addprefix $(BUILD)/rel/bench/,scratch.o buf.o util.o) \
		$(BUILD)/libmailvault.a
	@mkdir -p $(dir $@)
	$(CC) $(CSTD) $(WARN) $(RELEASE) $(INC) -o $@ $^ $(LIBS)

# ---- sanitizer build for tests and fuzz replay ----
$(BUILD)/asan/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CSTD) $(WARN) $(SANITIZE) $(INC) -MMD -MP -c $< -o $@

$(BUILD)/asan/libmailvault.a: $(ASAN_OBJ)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/asan/mailvault: $(CLI_SRC:%.c=$(BUILD)/asan/%.o) $(BUILD)/asan/libmailvault.a
	$(CC) $(SANITIZE) -o $@ $^ $(LIBS)

$(BUILD)/asan/mailvaultd: $(IMAPD_SRC:%.c=$(BUILD)/asan/%.o) $(BUILD)/asan/libmailvault.a
	$(CC) $(SANITIZE) -o $@ $^ -lssl $(LIBS)

# The server's unit tests and fuzz target link the server files they test.
$(BUILD)/asan/tests/test_imap_parse $(BUILD)/asan/fuzz/fuzz_imap_parse: $(BUILD)/asan/imapd/imap_parse.o
$(BUILD)/asan/tests/test_imap_utf7: $(BUILD)/asan/imapd/imap_utf7.o
$(BUILD)/asan/tests/test_imap_mime $(BUILD)/asan/fuzz/fuzz_imap_mime: $(BUILD)/asan/imapd/imap_mime.o $(BUILD)/asan/imapd/buf.o

$(BUILD)/asan/tests/%: $(BUILD)/asan/tests/%.o $(BUILD)/asan/tests/harness.o $(BUILD)/asan/tests/testutil.o $(BUILD)/asan/libmailvault.a
	$(CC) $(SANITIZE) -o $@ $^ $(LIBS)

$(BUILD)/asan/fuzz/%: $(BUILD)/asan/fuzz/%.o $(BUILD)/asan/fuzz/replay_main.o $(BUILD)/asan/libmailvault.a
	$(CC) $(SANITIZE) -o $@ $^ $(LIBS)

# libFuzzer builds (not part of `make test`): make fuzz-<target>
fuzz-%: fuzz/fuzz_%.c
	@mkdir -p $(BUILD)/fuzz
	clang $(CSTD) $(INC) -g -O1 -fsanitize=fuzzer,address,undefined -o $(BUILD)/fuzz/$* $< $(LIB_SRC) \
		$(if $(filter imap_parse,$*),imapd/imap_parse.c) \
		$(if $(filter imap_mime,$*),imapd/imap_mime.c imapd/buf.c) $(LIBS)

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
