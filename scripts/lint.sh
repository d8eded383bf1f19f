#!/usr/bin/env bash
# lint.sh -- the checks `make lint` runs; exits non-zero if any failing check finds something.
#
#   1. clang-format --dry-run --Werror on every .c/.h under include src cli bench imapd tests
#      fuzz (the rules are in .clang-format).                                     fails lint
#   2. cppcheck --enable=warning,portability on src cli imapd bench.               fails lint
#      (tests and fuzz are left out: they provoke on purpose what cppcheck warns about.)
#   3. Banned functions (STYLE.md) in src cli bench imapd: strcpy strcat sprintf vsprintf gets
#      atoi atol atoll rand srand.                                                fails lint
#      The same grep over tests fuzz is reported only.
#   4. clang-tidy with a small check set on the .c files under src cli bench imapd tests fuzz,
#      each compiled as the Makefile compiles it: -Iinclude only for cli/ and imapd/, the
#      include paths of GLib, GMime and the other dependencies from pkg-config (without
#      them clang-tidy cannot parse the files that use GMime and says nothing about them):
#      clang-diagnostic-error (a file clang-tidy cannot parse)                    fails lint
#      readability-braces-around-statements                                       fails lint
#      bugprone-* (minus the two noisy ones below)                          reported only
#   5. imapd/conn.c names no protocol (no imap_* / lmtp_* call, no PROTO_IMAP-like switch):
#      a protocol is its own file behind struct conn_proto_ops (docs/IMAPD.md).   fails lint
#
# Every tool must be installed: a check that cannot run fails lint rather than passing
# unseen (`make lint` runs scripts/install-deps.sh --dev first; .ci/run runs make lint).
# Files are checked in parallel, one job per CPU.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

jobs=$(nproc 2>/dev/null || echo 2)
failed=()
tmp=$(mktemp -d "${TMPDIR:-/tmp}/mvlint.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

have() {
    if command -v "$1" >/dev/null 2>&1; then
        return 0
    fi
    echo "   FAILED: $1 is not installed (scripts/install-deps.sh --dev installs it)"
    failed+=("$1-missing")
    return 1
}

# ---- 1. clang-format ------------------------------------------------------------------------
echo "== clang-format"
if have clang-format; then
    find include src cli bench imapd tests fuzz -name '*.[ch]' -print0 2>/dev/null | sort -z |
        xargs -0 -r -n 8 -P "$jobs" clang-format --dry-run --Werror >"$tmp/format" 2>&1
    if [ -s "$tmp/format" ]; then
        grep -E '^[^ ].*: error:' "$tmp/format" | cut -d: -f1 | sort | uniq -c |
            awk '{ printf "   %s: %d place(s) not formatted\n", $2, $1 }'
        echo "   (see them: clang-format --dry-run FILE; fix: clang-format -i FILE)"
        failed+=(clang-format)
    else
        echo "   ok"
    fi
fi

# ---- 2. cppcheck ----------------------------------------------------------------------------
echo "== cppcheck"
if have cppcheck; then
    if cppcheck --enable=warning,portability --error-exitcode=1 --inline-suppr -q \
        -j "$jobs" -D_GNU_SOURCE -Iinclude -Isrc src cli imapd bench >"$tmp/cppcheck" 2>&1; then
        echo "   ok"
    else
        sed 's/^/   /' "$tmp/cppcheck"
        failed+=(cppcheck)
    fi
fi

# ---- 3. banned functions --------------------------------------------------------------------
echo "== banned functions"
banned='\b(strcpy|strcat|sprintf|vsprintf|gets|atoi|atol|atoll|rand|srand)[[:space:]]*\('
# Drops string literals, /* ... */ comments within a line, // comments and the " * ..."
# continuation lines of block comments, so that mentions of a banned name in text are not
# reported. (A dereference at the start of a line, "*p = ...", has no space and is kept.)
strip_noise() {
    sed -E 's@"([^"\\]|\\.)*"@""@g; s@/\*([^*]|\*+[^*/])*\*+/@@g; s@//.*$@@
            s@^[[:space:]]*\*([[:space:]/].*)?$@@'
}
scan_banned() { # DIRS...: prints FILE:LINE: TEXT for each use
    local f
    while IFS= read -r -d '' f; do
        strip_noise <"$f" | grep -nE "$banned" | sed "s@^@$f:@"
    done < <(find "$@" -name '*.[ch]' -print0 2>/dev/null | sort -z)
}
scan_banned src cli bench imapd >"$tmp/banned"
scan_banned tests fuzz >"$tmp/banned_tests"
if [ -s "$tmp/banned" ]; then
    sed 's/^/   /' "$tmp/banned"
    failed+=(banned-functions)
else
    echo "   ok (src cli bench imapd)"
fi
if [ -s "$tmp/banned_tests" ]; then
    echo "   reported only (tests fuzz):"
    sed 's/^/     /' "$tmp/banned_tests"
fi

# ---- 4. clang-tidy --------------------------------------------------------------------------
echo "== clang-tidy"
if have clang-tidy; then
    checks='-*,readability-braces-around-statements,bugprone-*'
    checks+=',-bugprone-easily-swappable-parameters,-bugprone-reserved-identifier'
    # The dependencies' include paths as the Makefile gets them (as system headers).
    read -r -a pkgs < <(sed -n 's/^DEP_PKGS := //p' Makefile)
    MV_TIDY_DEPS=$(pkg-config --cflags "${pkgs[@]}" | sed 's/-I/-isystem /g')
    if [ ${#pkgs[@]} -eq 0 ] || [ -z "$MV_TIDY_DEPS" ]; then
        echo "   FAILED: no include paths for the dependencies (DEP_PKGS in the Makefile)"
        failed+=(clang-tidy-flags)
    fi
    export MV_TIDY_CHECKS="$checks" MV_TIDY_OUT="$tmp" MV_TIDY_DEPS
    find src cli bench imapd tests fuzz -name '*.c' -print0 2>/dev/null | sort -z |
        xargs -0 -r -n 1 -P "$jobs" bash -c 'extra=()
            # The loadable extension is only ever compiled as one (see the Makefile).
            [ "$1" = src/vfs/extension.c ] && extra=(-DMV_BUILD_EXTENSION)
            # The tool and the server see the public header only (the Makefile too).
            inc=(-Iinclude -Isrc)
            case "$1" in cli/* | imapd/*) inc=(-Iinclude) ;; esac
            # shellcheck disable=SC2086 # MV_TIDY_DEPS is a list of flags
            clang-tidy --quiet -checks="$MV_TIDY_CHECKS" "$1" -- -std=c17 -D_GNU_SOURCE \
                "${extra[@]}" "${inc[@]}" $MV_TIDY_DEPS >"$MV_TIDY_OUT/tidy.${1//\//_}" 2>&1' _
    cat "$tmp"/tidy.* 2>/dev/null | grep -E '^[^ ]+:[0-9]+:[0-9]+: (warning|error):' |
        sed "s@^$PWD/@@" | sort -u >"$tmp/tidy"
    # An error is a file clang-tidy could not parse: nothing in it was checked.
    parse_errors=$(grep -c ': error:' "$tmp/tidy" || true)
    if [ "$parse_errors" -gt 0 ]; then
        grep ': error:' "$tmp/tidy" | sed 's/^/   /'
        failed+=(clang-tidy-parse)
    fi
    braces=$(grep -c 'readability-braces-around-statements' "$tmp/tidy" || true)
    others=$(grep -v ': error:' "$tmp/tidy" | grep -vc 'readability-braces-around-statements' || true)
    if [ "$braces" -gt 0 ]; then
        grep 'readability-braces-around-statements' "$tmp/tidy" | sed 's/^/   /'
        failed+=(clang-tidy-braces)
    fi
    if [ "$others" -gt 0 ]; then
        echo "   reported only ($others):"
        grep -v ': error:' "$tmp/tidy" | grep -v 'readability-braces-around-statements' |
            sed 's/^/     /'
    fi
    if [ "$braces" -eq 0 ] && [ "$others" -eq 0 ] && [ "$parse_errors" -eq 0 ]; then
        echo "   ok"
    fi
fi

# ---- 5. conn.c names no protocol -------------------------------------------------------------
echo "== conn.c names no protocol"
if strip_noise <imapd/conn.c | grep -nEi '\b(imap|lmtp)_|PROTO_(IMAP|LMTP)' >"$tmp/conn_protocols"; then
    sed 's@^@   imapd/conn.c:@' "$tmp/conn_protocols"
    failed+=(conn-protocols)
else
    echo "   ok"
fi

echo
if [ ${#failed[@]} -gt 0 ]; then
    echo "lint: FAILED: ${failed[*]}"
    exit 1
fi
echo "lint: ok"
