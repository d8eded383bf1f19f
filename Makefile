# mailvault -- one GNU Makefile.
#
#   make run     build everything, run the demonstration under ./var, then mailvaultd on
#                127.0.0.1 (IMAP 1143, IMAPS 1993, LMTP 2424) until Ctrl-C
#                (not on a terminal: a short scripted check, then it stops)
#   make test    the whole test suite, under AddressSanitizer + UndefinedBehaviorSanitizer
#   make bench   micro-benchmarks, then the reference suite (release build; QUICK=1: short)
#   make lint    clang-format --dry-run, cppcheck, banned functions, clang-tidy
#   make install / make uninstall    PREFIX (default /usr/local) and DESTDIR, as usual:
#                the shared and static library, mailvault.h, mailvault.pc, the binaries,
#                the SQLite extension, man pages, bash completion, the systemd unit
#
# Both `run` and `test` first install missing Debian packages (scripts/install-deps.sh).

CC      ?= cc
BUILD   := build
PKGS    := sqlite3 libcrypto

WARN    := -Wall -Wextra -Wpedantic -Werror -Wshadow -Wstrict-prototypes \
           -Wmissing-prototypes -Wformat=2 -Wvla -Wconversion
CSTD    := -std=c17 -D_GNU_SOURCE
# GLib/GMime headers are not -Wconversion/-Wpedantic clean: include them as system headers.
# The libraries found through pkg-config: also mailvault.pc's Requires.private, and
# debian/control's Build-Depends and libmailvault-dev's Depends must name their -dev packages.
DEP_PKGS := gmime-3.0 libsodium libzstd libarchive
DEP_CFLAGS := $(shell pkg-config --cflags $(DEP_PKGS) 2>/dev/null | sed 's/-I/-isystem /g')
INC     := -Iinclude -Isrc $(DEP_CFLAGS)
# The tool and the server see the public header only: "public API only" is the compiler's
# to enforce, not a reviewer's.
PUBLIC_INC := -Iinclude $(DEP_CFLAGS)
RELEASE := -O2 -g -D_FORTIFY_SOURCE=2 -fstack-protector-strong -fvisibility=hidden -fPIC
# Full RELRO for what we install; $(LDFLAGS) lets a packager add theirs (dpkg-buildflags).
LINK_HARDEN := -Wl,-z,relro -Wl,-z,now $(LDFLAGS)
SANITIZE := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all
LIBS    := -lsqlite3 -lcrypto -lpthread $(shell pkg-config --libs $(DEP_PKGS) 2>/dev/null)

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

VERSION := $(shell sed -n 's/^\#define MV_VERSION_STRING "\(.*\)"/\1/p' include/mailvault.h)
# The soname carries MAJOR only (include/mailvault.h, VERSIONS AND ABI).
SONAME  := libmailvault.so.$(word 1,$(subst ., ,$(VERSION)))
SHLIB   := libmailvault.so.$(VERSION)
MAN_PAGES := $(BUILD)/man/mailvault.1 $(BUILD)/man/mailvaultd.8 $(BUILD)/man/mailvault.3

.PHONY: all deps run test bench lint clean install uninstall man
all: $(BUILD)/mailvault $(BUILD)/libmailvault.a $(BUILD)/$(SHLIB) $(BUILD)/mailvault_ext.so \
	$(BUILD)/mailvaultd $(MAN_PAGES)
man: $(MAN_PAGES)

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

# The linters come from install-deps.sh --dev; lint fails when one is missing.
lint:
	@scripts/install-deps.sh --dev
	@scripts/lint.sh

clean:
	rm -rf $(BUILD)

# ---- release library, CLI, loadable extension ----
$(BUILD)/rel/cli/%.o $(BUILD)/asan/cli/%.o $(BUILD)/rel/imapd/%.o $(BUILD)/asan/imapd/%.o: \
	INC := $(PUBLIC_INC)

$(BUILD)/rel/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CSTD) $(WARN) $(RELEASE) $(INC) -MMD -MP -c $< -o $@

# Every object is compiled with -fvisibility=hidden and MV_API marks the public functions.
# The shared library exports exactly those, versioned (libmailvault.map). The installed
# static archive is one relocatable object whose hidden (internal) symbols are made local,
# so a program that defines its own store_open or crypt_init links against it; the
# benchmarks, which measure internals, link the plain archive of the same objects.
$(BUILD)/rel/libmailvault_internal.a: $(REL_OBJ)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/libmailvault.a: $(REL_OBJ)
	@mkdir -p $(dir $@)
	$(LD) -r -o $(BUILD)/rel/libmailvault.o $^
	objcopy --localize-hidden $(BUILD)/rel/libmailvault.o
	rm -f $@ && ar rcs $@ $(BUILD)/rel/libmailvault.o

$(BUILD)/$(SHLIB): $(REL_OBJ) libmailvault.map
	$(CC) -shared -Wl,-soname,$(SONAME) -Wl,--version-script=libmailvault.map $(LINK_HARDEN) \
		-Wl,--no-undefined -o $@ $(REL_OBJ) $(LIBS)
	ln -sf $(SHLIB) $(BUILD)/$(SONAME)
	ln -sf $(SONAME) $(BUILD)/libmailvault.so

# Manual pages, generated from the option tables, the config table and the header.
$(BUILD)/man/mailvault.1: man/mailvault.1.in scripts/gen-man.py $(BUILD)/mailvault
	@mkdir -p $(dir $@)
	scripts/gen-man.py mailvault $(BUILD)/mailvault $< >$@.tmp && mv $@.tmp $@
$(BUILD)/man/mailvaultd.8: man/mailvaultd.8.in scripts/gen-man.py $(BUILD)/mailvaultd
	@mkdir -p $(dir $@)
	scripts/gen-man.py mailvaultd $(BUILD)/mailvaultd $< >$@.tmp && mv $@.tmp $@
$(BUILD)/man/mailvault.3: man/mailvault.3.in scripts/gen-man.py include/mailvault.h
	@mkdir -p $(dir $@)
	scripts/gen-man.py api include/mailvault.h $< >$@.tmp && mv $@.tmp $@

$(BUILD)/mailvault: $(CLI_SRC:%.c=$(BUILD)/rel/%.o) $(BUILD)/libmailvault.a
	$(CC) $(RELEASE) $(LINK_HARDEN) -o $@ $^ $(LIBS)

# The server (imapd/, docs/IMAPD.md): the only program that links libssl.
$(BUILD)/mailvaultd: $(IMAPD_SRC:%.c=$(BUILD)/rel/%.o) $(BUILD)/libmailvault.a
	$(CC) $(RELEASE) $(LINK_HARDEN) -o $@ $^ -lssl $(LIBS)

# The extension reaches SQLite through the sqlite3_api table (sqlite3ext.h), so it works in
# any host that loads it, whichever libsqlite3 that host was linked with.
$(BUILD)/ext/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CSTD) $(WARN) $(RELEASE) -DMV_BUILD_EXTENSION $(INC) -MMD -MP -c $< -o $@

$(BUILD)/mailvault_ext.so: $(EXT_OBJ)
	$(CC) -shared $(LINK_HARDEN) -o $@ $^ -lcrypto -lpthread \
		$(shell pkg-config --libs libsodium 2>/dev/null)

# Every benchmark links the shared helpers: scratch directory, text buffer, util (bench/*.h).
$(BUILD)/rel/bench/%: bench/%.c $(addprefix $(BUILD)/rel/bench/,scratch.o buf.o util.o) \
		$(BUILD)/rel/libmailvault_internal.a
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
$(BUILD)/asan/tests/test_imap_parse $(BUILD)/asan/fuzz/fuzz_imap_parse: $(BUILD)/asan/imapd/imap_parse.o \
	$(BUILD)/asan/imapd/imap_search_shape.o
# ... and the parser's test fails each allocation of FETCH's and LIST's readers in turn.
$(BUILD)/asan/tests/test_imap_parse: $(BUILD)/asan/tests/failalloc.o
$(BUILD)/asan/tests/test_imap_parse: LIBS += -Wl,--wrap=malloc -Wl,--wrap=calloc -Wl,--wrap=realloc \
	-Wl,--wrap=strdup -Wl,--wrap=strndup
$(BUILD)/asan/tests/test_imap_utf7: $(BUILD)/asan/imapd/imap_utf7.o
$(BUILD)/asan/tests/test_imap_search_fields: $(BUILD)/asan/imapd/imap_search_fields.o
$(BUILD)/asan/tests/test_imap_lane: $(BUILD)/asan/imapd/imap_lane.o $(BUILD)/asan/imapd/imap_parse.o \
	$(BUILD)/asan/imapd/imap_search_shape.o
$(BUILD)/asan/tests/test_imap_frame: $(BUILD)/asan/imapd/imap_frame.o $(BUILD)/asan/imapd/buf.o \
	$(BUILD)/asan/imapd/imap_parse.o $(BUILD)/asan/imapd/imap_search_shape.o
$(BUILD)/asan/tests/test_big_blocks $(BUILD)/asan/tests/test_buf: $(BUILD)/asan/imapd/buf.o
$(BUILD)/asan/tests/test_imap_keywords: $(BUILD)/asan/imapd/imap_keywords.o $(BUILD)/asan/imapd/imap_kw.o \
	$(BUILD)/asan/imapd/buf.o
$(BUILD)/asan/tests/test_imap_kw: $(BUILD)/asan/imapd/imap_kw.o $(BUILD)/asan/imapd/buf.o \
	$(BUILD)/asan/tests/failalloc.o
$(BUILD)/asan/tests/test_imap_kw: LIBS += -Wl,--wrap=malloc -Wl,--wrap=calloc -Wl,--wrap=realloc \
	-Wl,--wrap=strdup -Wl,--wrap=strndup
$(BUILD)/asan/tests/test_imap_structure_cache: $(BUILD)/asan/imapd/imap_structure_cache.o \
	$(BUILD)/asan/imapd/buf.o
# The worker lanes' test drives worker.c itself, the sealed quota test quota.c, the stream
# test conn.c, the view test the views (imap_msgs.c): every server
# object but main.o (each test defines g_config).
$(BUILD)/asan/tests/test_worker $(BUILD)/asan/tests/test_quota_sealed $(BUILD)/asan/tests/test_conn_stream $(BUILD)/asan/tests/test_imap_view: $(filter-out %/main.o,$(IMAPD_SRC:%.c=$(BUILD)/asan/%.o))
$(BUILD)/asan/tests/test_worker $(BUILD)/asan/tests/test_quota_sealed $(BUILD)/asan/tests/test_conn_stream $(BUILD)/asan/tests/test_imap_view: LIBS := -lssl $(LIBS)
# The fault-injecting VFS (tests/faultvfs.h) for the tests that run the store on a failing disk.
$(BUILD)/asan/tests/test_faults: $(BUILD)/asan/tests/faultvfs.o $(BUILD)/asan/tests/failalloc.o
$(BUILD)/asan/tests/test_wal_io: $(BUILD)/asan/tests/faultvfs.o
$(BUILD)/asan/tests/test_fetch_keyed: $(BUILD)/asan/tests/faultvfs.o
$(BUILD)/asan/tests/test_sync_later: $(BUILD)/asan/tests/faultvfs.o
# ... and fails the Nth allocation of the library's objects (tests/failalloc.h), as does the
# test of a lower VFS without shared memory (the open's exclusive-locking statement).
$(BUILD)/asan/tests/test_noshm: $(BUILD)/asan/tests/failalloc.o
$(BUILD)/asan/tests/test_faults $(BUILD)/asan/tests/test_noshm: LIBS += -Wl,--wrap=malloc -Wl,--wrap=calloc -Wl,--wrap=realloc \
	-Wl,--wrap=strdup -Wl,--wrap=strndup
# ... and looks for plaintext in every block the library frees or reallocates (test_wipe.c).
# It links every server object but main.o: its LMTP delivery runs through conn.c, lmtp.c and
# a worker.
$(BUILD)/asan/tests/test_wipe: LIBS := -lssl $(LIBS) -Wl,--wrap=free -Wl,--wrap=realloc
$(BUILD)/asan/tests/test_wipe: $(filter-out %/main.o,$(IMAPD_SRC:%.c=$(BUILD)/asan/%.o))
$(BUILD)/asan/tests/test_imap_mime $(BUILD)/asan/tests/test_imap_mime_skeleton $(BUILD)/asan/fuzz/fuzz_imap_mime: $(BUILD)/asan/imapd/imap_mime.o $(BUILD)/asan/imapd/buf.o \
	$(BUILD)/asan/imapd/imap_mime_stand_in.o
$(BUILD)/asan/tests/test_imap_sent_memo $(BUILD)/asan/fuzz/fuzz_sent_memo: $(BUILD)/asan/imapd/imap_sent_memo.o
$(BUILD)/asan/tests/test_imap_msgid_memo $(BUILD)/asan/fuzz/fuzz_msgid_memo: $(BUILD)/asan/imapd/imap_msgid_memo.o \
	$(BUILD)/asan/imapd/imap_zframe.o
$(BUILD)/asan/tests/test_imap_sort_key $(BUILD)/asan/fuzz/fuzz_sort_key: $(BUILD)/asan/imapd/imap_sort_key.o
$(BUILD)/asan/tests/test_imap_sort_memo $(BUILD)/asan/fuzz/fuzz_sort_memo: $(BUILD)/asan/imapd/imap_sort_memo.o \
	$(BUILD)/asan/imapd/imap_sort_rank.o $(BUILD)/asan/imapd/imap_zframe.o $(BUILD)/asan/imapd/imap_sort_key.o

# The archive goes last: server objects a test adds (above) call into the library too.
$(BUILD)/asan/tests/%: $(BUILD)/asan/tests/%.o $(BUILD)/asan/tests/harness.o $(BUILD)/asan/tests/testutil.o $(BUILD)/asan/libmailvault.a
	$(CC) $(SANITIZE) -o $@ $(filter-out %.a,$^) $(filter %.a,$^) $(LIBS)

$(BUILD)/asan/fuzz/%: $(BUILD)/asan/fuzz/%.o $(BUILD)/asan/fuzz/replay_main.o $(BUILD)/asan/libmailvault.a
	$(CC) $(SANITIZE) -o $@ $(filter-out %.a,$^) $(filter %.a,$^) $(LIBS)

# ---- install ----
PREFIX      ?= /usr/local
BINDIR      ?= $(PREFIX)/bin
SBINDIR     ?= $(PREFIX)/sbin
LIBDIR      ?= $(PREFIX)/lib
INCLUDEDIR  ?= $(PREFIX)/include
MANDIR      ?= $(PREFIX)/share/man
DOCDIR      ?= $(PREFIX)/share/doc/mailvault
BASHCOMPDIR ?= $(PREFIX)/share/bash-completion/completions
UNITDIR     ?= $(PREFIX)/lib/systemd/system
# The loadable extension is a plug-in, not a library to link: beside the library, in its
# own directory (sqlite> .load /usr/local/lib/mailvault/mailvault_ext).
EXTDIR      ?= $(LIBDIR)/mailvault
INSTALL     ?= install

install: all
	@# pkg-config: the header includes <sqlite3.h>, so sqlite3 is a public requirement;
	@# the rest only a static link needs.
	$(INSTALL) -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(SBINDIR) $(DESTDIR)$(LIBDIR)/pkgconfig \
		$(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(EXTDIR) $(DESTDIR)$(MANDIR)/man1 \
		$(DESTDIR)$(MANDIR)/man3 $(DESTDIR)$(MANDIR)/man8 $(DESTDIR)$(BASHCOMPDIR) \
		$(DESTDIR)$(UNITDIR) $(DESTDIR)$(DOCDIR)/examples
	$(INSTALL) -m 0755 $(BUILD)/mailvault $(DESTDIR)$(BINDIR)/mailvault
	$(INSTALL) -m 0755 $(BUILD)/mailvaultd $(DESTDIR)$(SBINDIR)/mailvaultd
	$(INSTALL) -m 0644 $(BUILD)/$(SHLIB) $(DESTDIR)$(LIBDIR)/$(SHLIB)
	ln -sf $(SHLIB) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(LIBDIR)/libmailvault.so
	$(INSTALL) -m 0644 $(BUILD)/libmailvault.a $(DESTDIR)$(LIBDIR)/libmailvault.a
	printf '%s\n' 'prefix=$(PREFIX)' 'libdir=$(LIBDIR)' 'includedir=$(INCLUDEDIR)' '' \
		'Name: mailvault' 'Description: encrypted per-user SQLite mail stores (libmailvault)' \
		'Version: $(VERSION)' 'Requires: sqlite3' \
		'Requires.private: libcrypto $(DEP_PKGS)' \
		'Libs: -L$${libdir} -lmailvault' 'Libs.private: -pthread' \
		'Cflags: -I$${includedir}' >$(DESTDIR)$(LIBDIR)/pkgconfig/mailvault.pc
	chmod 0644 $(DESTDIR)$(LIBDIR)/pkgconfig/mailvault.pc
	$(INSTALL) -m 0644 include/mailvault.h $(DESTDIR)$(INCLUDEDIR)/mailvault.h
	$(INSTALL) -m 0644 $(BUILD)/mailvault_ext.so $(DESTDIR)$(EXTDIR)/mailvault_ext.so
	$(INSTALL) -m 0644 $(BUILD)/man/mailvault.1 $(DESTDIR)$(MANDIR)/man1/mailvault.1
	$(INSTALL) -m 0644 $(BUILD)/man/mailvault.3 $(DESTDIR)$(MANDIR)/man3/mailvault.3
	$(INSTALL) -m 0644 $(BUILD)/man/mailvaultd.8 $(DESTDIR)$(MANDIR)/man8/mailvaultd.8
	$(INSTALL) -m 0644 contrib/mailvault.bash-completion $(DESTDIR)$(BASHCOMPDIR)/mailvault
	sed 's|/usr/local/sbin/mailvaultd|$(SBINDIR)/mailvaultd|' contrib/mailvaultd.service \
		>$(DESTDIR)$(UNITDIR)/mailvaultd.service
	chmod 0644 $(DESTDIR)$(UNITDIR)/mailvaultd.service
	$(INSTALL) -m 0644 contrib/mailvaultd.conf $(DESTDIR)$(DOCDIR)/examples/mailvaultd.conf
	$(INSTALL) -m 0644 docs/CLI.md docs/IMAPD.md docs/OPERATIONS.md $(DESTDIR)$(DOCDIR)/

uninstall:
	rm -f $(DESTDIR)$(BINDIR)/mailvault $(DESTDIR)$(SBINDIR)/mailvaultd \
		$(DESTDIR)$(LIBDIR)/$(SHLIB) $(DESTDIR)$(LIBDIR)/$(SONAME) \
		$(DESTDIR)$(LIBDIR)/libmailvault.so $(DESTDIR)$(LIBDIR)/libmailvault.a \
		$(DESTDIR)$(LIBDIR)/pkgconfig/mailvault.pc $(DESTDIR)$(INCLUDEDIR)/mailvault.h \
		$(DESTDIR)$(EXTDIR)/mailvault_ext.so $(DESTDIR)$(MANDIR)/man1/mailvault.1 \
		$(DESTDIR)$(MANDIR)/man3/mailvault.3 $(DESTDIR)$(MANDIR)/man8/mailvaultd.8 \
		$(DESTDIR)$(BASHCOMPDIR)/mailvault $(DESTDIR)$(UNITDIR)/mailvaultd.service \
		$(DESTDIR)$(DOCDIR)/examples/mailvaultd.conf $(DESTDIR)$(DOCDIR)/CLI.md \
		$(DESTDIR)$(DOCDIR)/IMAPD.md $(DESTDIR)$(DOCDIR)/OPERATIONS.md
	-rmdir $(DESTDIR)$(EXTDIR) $(DESTDIR)$(DOCDIR)/examples $(DESTDIR)$(DOCDIR) 2>/dev/null

# libFuzzer builds (not part of `make test`): make fuzz-<target>
fuzz-%: fuzz/fuzz_%.c
	@mkdir -p $(BUILD)/fuzz
	clang $(CSTD) $(INC) -g -O1 -fsanitize=fuzzer,address,undefined -o $(BUILD)/fuzz/$* $< $(LIB_SRC) \
		$(if $(filter imap_parse,$*),imapd/imap_parse.c imapd/imap_search_shape.c) \
		$(if $(filter imap_mime,$*),imapd/imap_mime.c imapd/imap_mime_stand_in.c imapd/buf.c) \
		$(if $(filter sent_memo,$*),imapd/imap_sent_memo.c) \
		$(if $(filter msgid_memo,$*),imapd/imap_msgid_memo.c imapd/imap_zframe.c) \
		$(if $(filter sort_memo,$*),imapd/imap_sort_memo.c imapd/imap_sort_rank.c imapd/imap_zframe.c \
			imapd/imap_sort_key.c) \
		$(if $(filter sort_key,$*),imapd/imap_sort_key.c) $(LIBS)

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
