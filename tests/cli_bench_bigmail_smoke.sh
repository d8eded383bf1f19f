#!/usr/bin/env bash
# cli_bench_bigmail_smoke.sh -- smoke test of the big-mailbox benchmark (issue 13:
# bench/bigmail_compare.sh, bench/bigmail_corpus.py, bench/bigmail.py) against mailvaultd
# only (the Dovecot comparison never runs in CI): a corpus of 200 messages, one pair of
# every operation, 50 LMTP deliveries, the ASan server (build/asan/mailvaultd, else the
# release build) with MAILVAULT_KDF_ITER=2. Checks the JSON and the Markdown it writes --
# every operation timed with no errors, the SEARCH hits equal to the corpus' known counts,
# the messages left after each EXPUNGE, the LMTP deliveries all arrived, peak RSS measured
# -- that the corpus is deterministic (same seed, same bytes), that the server log
# holds no sanitizer report, and that the client's reader scans a response in linear time
# (bytes searched, counted). No timing assertions.
#
# USAGE
#   make build/asan/mailvaultd build/asan/mailvault && bash tests/cli_bench_bigmail_smoke.sh
#   (tests/run.sh runs it in `make test`; ~30 s)
#
# Each check prints "PASS name" or "FAIL name"; the last line is "# N passed, N failed".
set -u
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh # pass, fail, PY, finish, make_tmp

make_tmp cli_bench_bigmail
server_binaries # $server, $mv
mkdir -p "$tmp/out" "$tmp/logs" "$tmp/corpus"

if MAILVAULTD="$server" MAILVAULT="$mv" BIGMAIL_KDF_ITER=2 BIGMAIL_CORPUS="$tmp/corpus" \
    BIGMAIL_LOGS="$tmp/logs" TMPDIR="$tmp" timeout 600 bash bench/bigmail_compare.sh \
    --no-dovecot --messages 200 --rounds 1 --sample-rounds 2 --lmtp 50 --out "$tmp/out" \
    >"$out" 2>"$err"; then
    pass "bigmail_compare.sh runs (exit 0)"
else
    fail "bigmail_compare.sh runs (exit $?): $(tail -n 3 "$err" "$out")"
fi

json="$tmp/out/bigmail.json"
check_doc() { # check_doc NAME PYTHON-EXPRESSION over the document d and r = d["sizes"]["200"]
    if [ "$("$PY" -c 'import json,sys
d = json.load(open(sys.argv[1])); r = d["sizes"]["200"]; o = r["ops"]; e = r["corpus"]["expected"]
print(bool(eval(sys.argv[2])))' "$json" "$2" 2>"$tmp/py.err")" = True ]; then
        pass "$1"
    else
        fail "$1 ($2) $(tail -n 1 "$tmp/py.err")"
    fi
}
check_doc "the JSON parses, schema mailvault-bench-bigmail/1, mailvaultd only" \
    'd["schema"] == "mailvault-bench-bigmail/1" and r["servers"] == ["mailvaultd"]'
check_doc "no errors recorded" 'r["errors"] == [] and all(not v["errors"] for v in o.values())'
for op in fetch_flags fetch_size_date search_since search_unseen search_from search_text \
    search_body fetch_random50 fetch_last200 login_select_warm login_select_cold \
    fetch_random50_cold \
    store_seen_add store_seen_remove copy_1000 store_deleted_10th expunge_10pct \
    gapped_store_seen gapped_uid_store gapped_copy_half lmtp_first_login lmtp_all_visible; do
    check_doc "$op timed" "len(o['$op']['times_s']['mailvaultd']) >= 1 and o['$op']['mailvaultd_median_s'] > 0"
done
# a random sample per pair: those two operations take --sample-rounds pairs, the rest --rounds
check_doc "the random-sample operations take --sample-rounds pairs, the others --rounds" \
    'r["sample_rounds"] == 2 and all(len(o[k]["times_s"]["mailvaultd"]) == 2 for k in ("fetch_random50", "fetch_random50_cold")) and len(o["fetch_last200"]["times_s"]["mailvaultd"]) == 1'
check_doc "FETCH 1:* answers every message" \
    'o["fetch_flags"]["results"]["mailvaultd"] == [200] and o["fetch_size_date"]["results"]["mailvaultd"] == [200]'
check_doc "SEARCH hits equal the corpus' known counts" \
    'o["search_since"]["results"]["mailvaultd"] == [e["since"]] and o["search_unseen"]["results"]["mailvaultd"] == [e["unseen"]] and o["search_from"]["results"]["mailvaultd"] == [e["sender"]] and o["search_text"]["results"]["mailvaultd"] == [e["word"]] == o["search_body"]["results"]["mailvaultd"]'
check_doc "the corpus has search hits to find" 'e["word"] > 0 and e["sender"] > 0 and e["since"] > 0 and e["unseen"] > 0'
check_doc "the two EXPUNGEs of 10% leave 180 and 162" \
    'o["expunge_10pct"]["results"]["mailvaultd"] == [180, 162]'
check_doc "EXISTS after 50 LMTP deliveries reaches 162 + 50" \
    'o["lmtp_first_login"]["results"]["mailvaultd"] == [212] == o["lmtp_all_visible"]["results"]["mailvaultd"]'
check_doc "peak RSS of mailvaultd measured" 'r["peak_rss_mib"]["mailvaultd"] > 0'
# fetch_random50 starts from every server's files just read (the earlier operations leave
# Dovecot's read and mailvaultd's idle), and each timed command records how much of its
# server's files the page cache held.
check_doc "fetch_random50 warms the servers' files first" \
    '"skipped" not in r["extra"]["fetch_random50_warm"] and r["extra"]["fetch_random50_warm"]["read_bytes"] > 0 and list(r["extra"]["fetch_random50_warm"]["resident_pct_before"]) == ["mailvaultd"]'
check_doc "fetch_random50 records the page-cache residency before each timed command" \
    'len(r["extra"]["fetch_random50_resident_pct"]["mailvaultd"]) == len(o["fetch_random50"]["times_s"]["mailvaultd"]) and all(p is not None and 0 <= p <= 100 for p in r["extra"]["fetch_random50_resident_pct"]["mailvaultd"])'
# fetch_random50_cold: the same command from files out of the page cache (evicted before each).
check_doc "fetch_random50_cold starts each timed command from evicted files" \
    'len(r["extra"]["fetch_random50_cold_resident_pct"]["mailvaultd"]) == len(o["fetch_random50_cold"]["times_s"]["mailvaultd"]) and all(p is not None and p < 50 for p in r["extra"]["fetch_random50_cold_resident_pct"]["mailvaultd"])'
if grep -q '^| FETCH 1:\* (UID FLAGS) |' "$tmp/out/sections/bigmail.md" 2>/dev/null; then
    pass "the Markdown section holds the table"
else
    fail "the Markdown section holds the table"
fi
if [ -f "$tmp/logs/mailvaultd-200.log" ] &&
    ! grep -qE 'ERROR: (Address|Leak)Sanitizer|runtime error:' "$tmp/logs/mailvaultd-200.log"; then
    pass "no sanitizer report in the mailvaultd log"
else
    fail "no sanitizer report in the mailvaultd log: $(grep -m1 -E 'ERROR|runtime error' "$tmp/logs/mailvaultd-200.log" 2>&1)"
fi

# The client reads a response in time linear in its size however it arrives: 2,000 literals
# in one piece (a fast server's answer) must not cost a search to the end of the buffer per
# literal. Counts the bytes its searches may scan (no timing); it also parses the response
# exactly: literals that hold a "}" CRLF and the tagged line's own text are skipped.
if "$PY" - <<'PYEOF' 2>"$tmp/client.err"; then
import sys
sys.path.insert(0, "bench")
from bigmail import Imap

class Counting(bytearray):
    scanned = 0
    def find(self, sub, start=0, end=None):
        end = len(self) if end is None else min(end, len(self))
        at = bytearray.find(self, sub, start, end)  # a search stops at its first match
        Counting.scanned += max(0, (at + len(sub) if at >= 0 else end) - max(start, 0))
        return at

class OneChunk:
    def __init__(self, data):
        self.data = [data]
    def recv_into(self, view):
        chunk = self.data.pop(0) if self.data else b""
        view[:len(chunk)] = chunk
        return len(chunk)

def line(i, body):
    return b"* %d FETCH (UID %d BODY[HEADER] {%d}\r\n%s)\r\n" % (i, i, len(body), body)

lines = [line(i + 1, b"Subject: x}\r\n\r\n") for i in range(1999)]
lines.append(line(2000, b"Subject: y\r\nB00007 OK not the end\r\n\r\n"))
data = b"".join(lines) + b"B00007 OK FETCH {done}\r\n"
c = Imap.__new__(Imap)
c.rbuf, c.start, c.end, c.sock = Counting(Imap.RECV_ROOM), 0, 0, OneChunk(data)
status, untagged = c._response(b"B00007")
assert status == b"OK FETCH {done}", status
assert untagged == b"".join(lines), "untagged data differs"
assert Counting.scanned < 8 * len(data), f"scanned {Counting.scanned} bytes of {len(data)}"
PYEOF
    pass "the benchmark client's parse is linear in the response (one-piece 2,000 literals)"
else
    fail "the benchmark client's parse is linear in the response: $(tail -n 2 "$tmp/client.err")"
fi

# The client receives into one buffer kept across commands (recv_into, no new object per
# read), and two big responses in a row leave it the size the first one made it: memory the
# process has mapped already, which at 1,000,000 messages the old client refilled fresh for
# every 42 MB FETCH. Responses come in 64 KiB pieces, tags and literals cut anywhere.
if "$PY" - <<'PYEOF' 2>"$tmp/client2.err"; then
import sys
sys.path.insert(0, "bench")
from bigmail import Imap

class Pieces:
    """A socket with recv_into only, sending each response in 64 KiB pieces."""
    def __init__(self):
        self.queue = b""
    def sendall(self, data):
        tag = data.split(b" ", 1)[0]
        body = b"".join(b"* %d FETCH (UID %d BODY[] {%d}\r\n%s)\r\n" % (i, i, 3000, bytes([65 + i % 26]) * 3000)
                        for i in range(1, 1001))
        self.queue += b"* 1000 EXISTS\r\n" + body + tag + b" OK done\r\n"
    def recv_into(self, view):
        n = min(len(view), 65536, len(self.queue))
        view[:n] = self.queue[:n]
        self.queue = self.queue[n:]
        return n

c = Imap.__new__(Imap)
c.rbuf, c.start, c.end, c.n, c.sock = bytearray(Imap.RECV_ROOM), 0, 0, 0, Pieces()
first = c.command("UID FETCH 1:1000 (BODY.PEEK[])")
size_after_first = len(c.rbuf)
buffer_id = id(c.rbuf)
second = c.command("UID FETCH 1:1000 (BODY.PEEK[])")
assert first[0] == second[0] == b"OK done", (first[0], second[0])
assert first[1] == second[1] and first[1].count(b" FETCH (") == 1000, "untagged data differs"
assert first[1].startswith(b"* 1000 EXISTS\r\n") and first[1].endswith(b")\r\n")
assert id(c.rbuf) == buffer_id and len(c.rbuf) == size_after_first, (size_after_first, len(c.rbuf))
assert c.start == c.end, "bytes left unconsumed"
# reserve(): the buffer the timed session starts with, grown before any command
c = Imap.__new__(Imap)
c.rbuf, c.start, c.end, c.n, c.sock = bytearray(Imap.RECV_ROOM), 0, 0, 0, Pieces()
c.reserve(8 << 20)
assert len(c.rbuf) == 8 << 20, len(c.rbuf)
assert c.command("UID FETCH 1:1000 (BODY.PEEK[])")[1] == first[1]
assert len(c.rbuf) == 8 << 20, "grew inside a command although reserved"
PYEOF
    pass "the benchmark client reads into one buffer kept across commands (two 3 MB responses, no growth in the second; reserve() grows it first)"
else
    fail "the benchmark client reads into one buffer kept across commands: $(tail -n 2 "$tmp/client2.err")"
fi

# The residency the driver records: a file just read is all in the page cache; a file of
# no bytes (no page to count) gives None, not a share.
mkdir -p "$tmp/res/a" "$tmp/res/empty"
head -c 300000 /dev/zero >"$tmp/res/a/f"
: >"$tmp/res/empty/f"
if "$PY" -c 'import sys
sys.path.insert(0, "bench")
import bigmail
t = sys.argv[1]
assert bigmail.warm([t + "/a"]) == 300000
got = bigmail.resident_percent([t + "/a"])
assert got == 100.0, got
assert bigmail.resident_percent([t + "/empty"]) is None' "$tmp/res" 2>"$tmp/res.err"; then
    pass "residency: a file just read is 100% in the page cache"
else
    fail "residency: a file just read is 100% in the page cache: $(tail -n 2 "$tmp/res.err")"
fi

# An interrupted run resumes (BIGMAIL_RESUME): the operations it measured are taken over, the
# others run, BIGMAIL_SKIP's are left out. The first run's document less fetch_flags,
# fetch_random50 and search_body is the "interrupted" one. This run also takes
# fetch_random50's path for files larger than memory (BIGMAIL_WARM_SHARE_MAX=0): no warm
# step, each draw read untimed right before its timed command, the same messages returned.
"$PY" -c 'import json, sys
r = json.load(open(sys.argv[1]))["sizes"]["200"]
for op in ("fetch_flags", "fetch_random50", "search_body"):
    del r["ops"][op]
json.dump(r, open(sys.argv[2], "w"))' "$json" "$tmp/part.json"
mkdir -p "$tmp/out2"
if MAILVAULTD="$server" MAILVAULT="$mv" BIGMAIL_KDF_ITER=2 BIGMAIL_CORPUS="$tmp/corpus" \
    BIGMAIL_RESUME="$tmp/part.json" BIGMAIL_SKIP=search_body BIGMAIL_WARM_SHARE_MAX=0 \
    TMPDIR="$tmp" timeout 600 \
    bash bench/bigmail_compare.sh --no-dovecot --messages 200 --rounds 1 --sample-rounds 2 \
    --lmtp 50 --out "$tmp/out2" >"$out" 2>"$err" &&
    "$PY" -c 'import json, sys
a = json.load(open(sys.argv[1]))["sizes"]["200"]["ops"]
run2 = json.load(open(sys.argv[2]))["sizes"]["200"]
b = run2["ops"]
assert "search_body" not in b, "search_body ran"
assert b["fetch_flags"]["results"]["mailvaultd"] == [200], b["fetch_flags"]
# the same draws as the first run (seeded), each read once untimed first: the warm-up too
f50 = b["fetch_random50"]
assert "skipped" in run2["extra"]["fetch_random50_warm"], run2["extra"]["fetch_random50_warm"]
assert f50["results"] == a["fetch_random50"]["results"], "other messages"
assert run2["extra"]["fetch_random50_preread"] == {
    "mailvaultd": len(f50["times_s"]["mailvaultd"]) + 1}, run2["extra"]["fetch_random50_preread"]
for op in ("search_text", "expunge_10pct", "lmtp_all_visible", "gapped_copy_half"):
    assert b[op]["times_s"] == a[op]["times_s"], op + " not taken over"' "$json" "$tmp/out2/bigmail.json" \
    2>"$tmp/resume.err"; then
    pass "a resumed run takes over what was measured, runs the rest, skips what it is told; files larger than memory: each draw read first"
else
    fail "a resumed run takes over what was measured (files larger than memory: each draw read first): $(tail -n 3 "$tmp/resume.err" "$err")"
fi

# The corpus is deterministic: the same seed gives the same bytes.
if "$PY" bench/bigmail_corpus.py --messages 200 --out "$tmp/again" >/dev/null &&
    [ "$(cd "$tmp/corpus/200/Maildir/cur" && cat -- * | sha256sum)" = \
        "$(cd "$tmp/again/cur" && cat -- * | sha256sum)" ] &&
    [ "$(ls "$tmp/again/cur")" = "$(ls "$tmp/corpus/200/Maildir/cur")" ]; then
    pass "the corpus is deterministic (same names, same bytes)"
else
    fail "the corpus is deterministic (same names, same bytes)"
fi
finish
