#!/usr/bin/env python3
"""bigmail.py -- the big-mailbox benchmark's driver (issue 13): one IMAP client, mailvaultd
and Dovecot side by side on the same corpus, every operation alternating the two servers.

bench/bigmail_compare.sh sets everything up (corpus, stores, Dovecot's configuration) and
runs `bigmail.py run` once per mailbox size, then `bigmail.py report`. The driver owns the
server processes: it starts them, restarts them for the cold and the post-delivery logins,
and stops them at the end.

USAGE
  bigmail.py run --messages N --rounds R [--sample-rounds S] --user ADDR
                 --password-file FILE --meta CORPUS.json
                 --mailvaultd BIN --mv-root DIR --mv-imap-port P --mv-lmtp-port P
                 [--mv-log FILE] [--mv-arg ARG]...
                 [--dovecot-conf FILE --dc-mail DIR --dc-imap-port P --dc-lmtp-port P]
                 [--lmtp-messages 1200] [--lmtp-pairs 1] [--visible-wait idle|noop|alternate]
                 [--seed S] [--perf-op OP --perf-dir DIR] --json OUT
  bigmail.py report --json OUT --md OUT [--merge] RUN.json...

METHOD (docs/BENCHMARKS.md, "Big mailboxes (issue 13)")
  Every operation runs R times on each server (pairs), the order inside a pair alternating
  (mailvaultd first in even rounds, Dovecot first in odd ones). A time is from the first
  byte of the command sent to the last byte of its tagged response received, the whole
  response read (literals included) by a reader that does O(1) Python work per literal,
  not per line, so the client's own cost stays small next to the servers'. Per pair the
  ratio is Dovecot's time / mailvaultd's (above 1: mailvaultd faster); reported are the
  median of the pair ratios and each server's median time. The two operations that draw
  a new random sample of messages each pair (fetch_random50, fetch_random50_cold) get
  max(R, S) pairs (--sample-rounds, 9 by default): their pairs differ by what is drawn
  (0.6 to 4 MB of 50 messages), so three draws decide little. Read-only operations get one
  untimed warm-up run first (Dovecot builds its index and cache, both fill the page
  cache). Results are checked, not only timed: both servers must return the same number
  of SEARCH hits (and the corpus' known counts), the same bytes for the 50 random
  messages, and the expected EXISTS after EXPUNGE and after the LMTP deliveries; a
  mismatch or a NO/BAD answer is recorded as an error and makes the exit status 1.

  Operations, in order (the state they leave is the next one's start):
    fetch_flags, fetch_size_date, search_since, search_unseen, search_from, search_text,
    search_body, fetch_random50 (UID FETCH of 50 random messages' BODY.PEEK[] in one
    command; before it every server's files are read once, untimed, so both serve it from
    a page cache that held the pages seconds ago, and the share of each server's files in
    the page cache before each timed command is in the JSON's extra: see warm_all; where
    the files exceed the memory, each server's timed command comes right after the same
    command untimed instead),
    fetch_last200 (UID FETCH of the last 200: BODY.PEEK[HEADER.FIELDS (...)] and
    ENVELOPE), login_select_warm (a new connection: LOGIN + SELECT INBOX),
    login_select_cold (server stopped, the data files of both evicted from the page cache
    with posix_fadvise(DONTNEED) after sync, server started, then connect + LOGIN + SELECT;
    see below), fetch_random50_cold (fetch_random50's command with its own samples, each
    server's data files evicted before each command, the servers running: cold against
    cold), store_seen_add / store_seen_remove (STORE 1:* +FLAGS.SILENT / -FLAGS.SILENT
    (\\Seen), from all unseen: every pair changes every message), copy_1000 (UID COPY of
    1,000 consecutive messages from the middle to another mailbox, deleted untimed after
    each pair), store_deleted_10th (UID STORE of every 10th message +FLAGS.SILENT
    (\\Deleted), 5,000 UIDs per command -- Dovecot's 64 KiB line limit --, undone
    untimed), expunge_10pct (twice: every 10th flagged untimed, then EXPUNGE timed), then
    on the mailbox with ~19% UID gaps that leaves: gapped_store_seen (STORE 1:*
    +FLAGS.SILENT (\\Seen)) and gapped_uid_store (UID STORE 1:* -FLAGS.SILENT (\\Seen)) in
    turn, from all unseen, gapped_copy_half (COPY 1:<half> to another mailbox; once),
    and last lmtp_first_login: both servers restarted (mailvaultd then has no key: its
    LMTP seals every message into the user's queue), --lmtp-messages delivered over LMTP
    to each (untimed; 4 connections at once), then the first connect + LOGIN + SELECT
    timed (mailvaultd's includes opening the store with the default KDF and draining the
    queue, unless it moves the queue in after the login), and lmtp_all_visible: from the
    same start until the client has seen EXISTS with every delivery, waiting in IDLE as real
    clients do (--visible-wait idle, the default); --visible-wait noop records
    lmtp_all_visible_noop instead, a client that polls NOOP without pause (which takes CPU
    from the server while it moves the mail in: about half a core on 2 cores), and
    --visible-wait alternate waits in IDLE in even pairs and by NOOP in odd ones;
    --lmtp-pairs of them (default 1: each costs 2 x 1,200 fsync'd deliveries).

  "Cold" is what is possible without root-wide tricks that would slow the other users of a
  shared machine (no drop_caches): the server process is new (mailvaultd: no open store,
  no key, no page cache of its own; Dovecot: new master, auth, login and imap processes),
  and the file contents of both (mailvaultd's store and WAL; Dovecot's Maildir files and
  index files) are evicted from the kernel's page cache. Directory entries and inodes stay
  cached, which favours Dovecot (100,000 files) more than mailvaultd (one file).

  --perf-op OP[,OP...]: `perf record` (DWARF call graphs, 499 Hz) attached to mailvaultd during
  each of OP's timed runs on it (again after a restart inside OP), into
  DIR/perf-OP-N.data; the attach waits 1 s before the command, outside the timing, but
  the profiled times are slower (perf's cost) and say so only through this option.

  Peak memory: VmHWM of mailvaultd (the maximum over its lifetimes in the run) and of
  Dovecot's imap processes (sampled after every timed command; the largest).
"""
import argparse
import datetime
import hashlib
import json
import os
import platform
import random
import re
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time

MAIN_SESSION_BUFFER = 16 << 20  # bytes of receive buffer the timed session starts with
LITERAL_RE = re.compile(rb"\{(\d+)\+?\}$")


class ImapError(Exception):
    pass


class Imap:
    """One IMAP connection. command() returns (status, untagged bytes, seconds).

    Responses land in one receive buffer kept for the connection's life (rbuf; the bytes
    not yet consumed are rbuf[start:end]), grown when a response needs more room and never
    shrunk, which the socket fills in place (recv_into). The clock stops when the tagged
    line has arrived; the untagged bytes are copied out of the buffer after that. Before,
    each recv made a new 1 MiB object, appended it to a growing buffer and the response was
    copied twice more inside the timed span: at 1,000,000 messages FETCH 1:* (UID FLAGS)
    (42 MB) cost this client ~550 ms of CPU, most of it filling memory the process had just
    mapped, against the server's 70-120 ms, and the same copies were in both servers'
    times, pulling every large response's ratio towards 1."""

    RECV_ROOM = 1 << 20  # free bytes offered to each recv_into (the buffer grows for it)

    def __init__(self, port, timeout=3600):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.sock.settimeout(timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.rbuf = bytearray(self.RECV_ROOM)
        self.start = self.end = 0
        self.n = 0
        greeting = self._line()
        if not greeting.startswith(b"* OK"):
            raise ImapError(f"greeting: {greeting[:200]!r}")

    def reserve(self, size):
        """Grows the receive buffer to size bytes now, every page of it written (mapped), so
        that no timed command of this connection pays for memory a larger response needs
        first: a new page costs ~10 us in this VM, 16 MiB ~40 ms."""
        if len(self.rbuf) < size:
            self.rbuf.extend(bytes(size - len(self.rbuf)))

    def _compact(self):
        """Moves the unconsumed bytes to the buffer's start. Only between responses: a
        response being read holds positions in the buffer."""
        if self.start == self.end:
            self.start = self.end = 0
        elif self.start > 0:
            n = self.end - self.start
            self.rbuf[0:n] = self.rbuf[self.start:self.end]
            self.start, self.end = 0, n

    def _recv(self):
        """Appends what the socket has to rbuf[end:] (positions in the buffer stay valid:
        it only grows, in place)."""
        if len(self.rbuf) - self.end < self.RECV_ROOM:
            self.rbuf.extend(bytes(max(len(self.rbuf), self.RECV_ROOM)))
        with memoryview(self.rbuf) as view:
            got = self.sock.recv_into(view[self.end:])
        if not got:
            raise ImapError("connection closed by the server")
        self.end += got

    def _line(self):
        self._compact()
        while True:
            i = self.rbuf.find(b"\r\n", self.start, self.end)
            if i >= 0:
                line = bytes(self.rbuf[self.start:i])
                self.start = i + 2
                return line
            self._recv()

    def command(self, text):
        self.n += 1
        tag = b"B%05d" % self.n
        t0 = time.perf_counter()
        self.sock.sendall(tag + b" " + text.encode() + b"\r\n")
        status, a, b = self._response_span(tag)
        secs = time.perf_counter() - t0
        return status, self._take(a, b), secs

    def _take(self, a, b):
        """A copy of rbuf[a:b] (one copy, through a memoryview)."""
        with memoryview(self.rbuf) as view:
            return view[a:b].tobytes()

    def _response(self, tag):
        """Reads up to the tagged line: (status text after the tag, the untagged bytes)."""
        status, a, b = self._response_span(tag)
        return status, self._take(a, b)

    def _response_span(self, tag):
        """Reads up to the tagged line: (status text after the tag, a, b), the untagged
        bytes being rbuf[a:b] until the next read. Skips literals by their announced
        length; looks for the tagged line and literal markers with bytearray.find, so a
        100,000-line FETCH costs the client a few searches per received chunk, not a Python
        loop per line. The tagged line is looked for only up to the next literal: a search
        to the end of the buffer per literal cost the client time quadratic in the response
        when it arrived in one piece (200 headers: ~5-25 ms, charged to the server that
        answered fastest), linear when it trickled in."""
        self._compact()
        buf = self.rbuf  # grows in place: the name stays valid across _recv
        base = self.start
        marker = b"\r\n" + tag + b" "
        pos = floor = base  # floor: where the last skipped literal ended
        while True:
            if pos == base and buf.startswith(tag + b" ", base, self.end):
                end = buf.find(b"\r\n", base, self.end)
                while end < 0:
                    self._recv()
                    end = buf.find(b"\r\n", base, self.end)
                line = bytes(buf[base + len(tag) + 1:end])
                self.start = end + 2
                return line, base, base
            lit = buf.find(b"}\r\n", pos, self.end)
            # the marker holds no "}", so one that starts before lit also ends before it
            t = buf.find(marker, max(pos - 2, base), lit if lit >= 0 else self.end)
            if lit >= 0 and t < 0:
                start = buf.rfind(b"{", max(floor, lit - 24), lit)
                m = LITERAL_RE.search(bytes(buf[start:lit + 1])) if start >= 0 else None
                if m and m.start() == 0:
                    nxt = lit + 3 + int(m.group(1))
                    while self.end < nxt:
                        self._recv()
                    pos = floor = nxt
                else:
                    pos = lit + 1
                continue
            if t >= 0:
                end = buf.find(b"\r\n", t + 2, self.end)
                while end < 0:
                    self._recv()
                    end = buf.find(b"\r\n", t + 2, self.end)
                line = bytes(buf[t + 2 + len(tag) + 1:end])
                self.start = end + 2
                return line, base, t + 2
            pos = max(pos, self.end - len(marker) - 14)
            self._recv()

    def ok(self, text):
        status, data, secs = self.command(text)
        if not status.startswith(b"OK"):
            raise ImapError(f"{text[:80]}: {status[:300].decode(errors='replace')}")
        return data, secs

    def close(self):
        try:
            self.sock.sendall(b"Z LOGOUT\r\n")
            self.sock.settimeout(10)
            while self.sock.recv(65536):
                pass
        except OSError:
            pass
        self.sock.close()


def wait_exists_noop(c, seen, want, deadline):
    """NOOP without pause until EXISTS reaches want (or the deadline): a polling client,
    whose commands take CPU from the server while it moves the mail in."""
    while seen < want and time.monotonic() < deadline:
        data, _ = c.ok("NOOP")
        for m in re.finditer(rb"\* (\d+) EXISTS", data):
            seen = max(seen, int(m.group(1)))
    return seen


def wait_exists_idle(c, seen, want, deadline):
    """IDLE (RFC 2177) until an EXISTS reaches want (or the deadline), then DONE: what a
    real client does while it waits for new mail."""
    if seen >= want:
        return seen
    c.n += 1
    tag = b"B%05d" % c.n
    c.sock.sendall(tag + b" IDLE\r\n")
    line = c._line()
    while line.startswith(b"* "):  # the server may announce new mail before "+ idling"
        m = re.match(rb"\* (\d+) EXISTS", line)
        seen = max(seen, int(m.group(1))) if m else seen
        line = c._line()
    if not line.startswith(b"+"):
        raise ImapError(f"IDLE: {line[:200]!r}")
    old_timeout = c.sock.gettimeout()
    try:
        while seen < want:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            c.sock.settimeout(left)
            try:
                line = c._line()
            except socket.timeout:
                break
            m = re.match(rb"\* (\d+) EXISTS", line)
            if m:
                seen = max(seen, int(m.group(1)))
    finally:
        c.sock.settimeout(old_timeout)
    c.sock.sendall(b"DONE\r\n")
    status, data = c._response(tag)
    for m in re.finditer(rb"\* (\d+) EXISTS", data):
        seen = max(seen, int(m.group(1)))
    if not status.startswith(b"OK"):
        raise ImapError(f"IDLE: {status[:300]!r}")
    return seen


def lmtp_deliver(port, rcpt, messages):
    """Delivers each message in its own LMTP transaction; returns how many got 250."""
    s = socket.create_connection(("127.0.0.1", port), timeout=600)
    f = s.makefile("rb")

    def reply():
        lines = []
        while True:
            line = f.readline()
            if not line:
                raise ImapError("LMTP: connection closed")
            lines.append(line)
            if line[3:4] != b"-":
                return lines[-1]

    reply()
    s.sendall(b"LHLO bench.example\r\n")
    reply()
    ok = 0
    for msg in messages:
        s.sendall(b"MAIL FROM:<sender@bench.example>\r\nRCPT TO:<%s>\r\nDATA\r\n" % rcpt.encode())
        r1, r2, r3 = reply(), reply(), reply()
        if not (r1.startswith(b"250") and r2.startswith(b"250") and r3.startswith(b"354")):
            raise ImapError(f"LMTP refused: {r1!r} {r2!r} {r3!r}")
        s.sendall(msg + b".\r\n")
        if reply().startswith(b"250"):
            ok += 1
    s.sendall(b"QUIT\r\n")
    s.close()
    return ok


def lmtp_parallel(port, rcpt, messages, senders):
    """lmtp_deliver over `senders` connections at once (as MTAs deliver); the count of 250s.
    Each connection takes every senders-th message, so all arrive, in no fixed order."""
    counts = [0] * senders
    failures = []

    def one(i):
        try:
            counts[i] = lmtp_deliver(port, rcpt, messages[i::senders])
        except (ImapError, OSError) as exc:
            failures.append(str(exc))
    threads = [threading.Thread(target=one, args=(i,)) for i in range(senders)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:
        raise ImapError("LMTP: " + failures[0])
    return sum(counts)


def lmtp_messages(count, seed, start):
    rng = random.Random(seed)
    words = ["ledger", "invoice", "meeting", "report", "draft", "review", "budget", "plan",
             "status", "schedule", "summary", "update", "request", "follow", "agenda"]
    out = []
    for i in range(start, start + count):
        body = "\r\n".join(" ".join(rng.choice(words) for _ in range(12))
                           for _ in range(rng.randint(20, 120)))
        msg = (f"From: Queue Sender <queue@bench.example>\r\nTo: u1@bench.example\r\n"
               f"Subject: queued {i}\r\nMessage-ID: <lmtp.{i}.{seed}@bench.example>\r\n"
               f"Date: Thu, 1 Jan 2026 12:00:00 +0000\r\n\r\n{body}\r\n")
        out.append(msg.replace("\r\n.", "\r\n..").encode())
    return out


def body_digest(data):
    """SHA-256 (first 16 hex digits) of the BODY[] literals in data, line ends normalised to
    LF: Dovecot serves Maildir's LF files with CRLF, mailvaultd the bytes as imported, so
    the comparison is of the messages, not of their line ends (the byte counts, which do
    differ, are in the run's JSON as fetch_random50_bytes)."""
    h = hashlib.sha256()
    for m in re.finditer(rb"BODY\[\] \{(\d+)\}\r\n", data):
        h.update(data[m.end():m.end() + int(m.group(1))].replace(b"\r\n", b"\n"))
    return h.hexdigest()[:16]


def vm_hwm_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def each_file(paths, fn):
    """fn(fd, size) for every regular file under paths, opened read-only; the count done."""
    n = 0
    for top in paths:
        for d, _, files in os.walk(top):
            for name in files:
                try:
                    fd = os.open(os.path.join(d, name), os.O_RDONLY)
                except OSError:
                    continue
                try:
                    size = os.fstat(fd).st_size
                    fn(fd, size)
                    n += 1
                finally:
                    os.close(fd)
    return n


def evict(paths):
    """Drops the clean page-cache pages of every file under paths (after sync)."""
    os.sync()
    return each_file(paths, lambda fd, _size: os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED))


def warm(paths):
    """Reads every file under paths, so all its pages are in the page cache and recently
    used; the bytes read. fetch_random50 starts from this on both servers: see
    WARM_BYTES_MAX."""
    total = [0]

    def read_all(fd, _size):
        while True:
            got = os.read(fd, 1 << 20)
            if not got:
                return
            total[0] += len(got)
    each_file(paths, read_all)
    return total[0]


def files_bytes(paths):
    total = [0]
    each_file(paths, lambda _fd, size: total.__setitem__(0, total[0] + size))
    return total[0]


# fetch_random50 warms both servers' files only while they take at most this share of
# MemAvailable (10,000 and 100,000 messages here: 0.8 and 7.8 GB of 23 GB; 1,000,000 do not).
# BIGMAIL_WARM_SHARE_MAX sets it: the smoke test's 0 takes the path of files larger than memory.
WARM_SHARE_MAX = float(os.environ.get("BIGMAIL_WARM_SHARE_MAX", "0.5"))


def mem_available_bytes():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


_libc = None


def resident_percent(paths):
    """The share of the bytes of the files under paths that are in the kernel's page cache
    (mincore(2) over a read-only mapping, which reads no page), in percent; None where
    mincore is not available. Pages, so a small file's tail page counts whole."""
    global _libc
    import ctypes
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.mmap.restype = ctypes.c_void_p
        _libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                               ctypes.c_int, ctypes.c_long]
        _libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        _libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    page = os.sysconf("SC_PAGE_SIZE")
    counts = [0, 0]  # resident pages, pages
    failed = []

    def count(fd, size):
        if size == 0:
            return
        pages = (size + page - 1) // page
        addr = _libc.mmap(None, size, 1, 1, fd, 0)  # PROT_READ, MAP_SHARED
        if addr in (None, ctypes.c_void_p(-1).value):
            failed.append(fd)
            return
        vec = ctypes.create_string_buffer(pages)
        try:
            if _libc.mincore(addr, size, vec) != 0:
                failed.append(fd)
                return
            counts[0] += sum(b & 1 for b in vec.raw)
            counts[1] += pages
        finally:
            _libc.munmap(addr, size)
    each_file(paths, count)
    if failed or counts[1] == 0:
        return None
    return round(100.0 * counts[0] / counts[1], 1)


def wait_port(port, proc, seconds=30):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


class Server:
    def __init__(self, name, argv, imap_port, lmtp_port, evict_paths, log):
        self.name, self.argv, self.imap_port, self.lmtp_port = name, argv, imap_port, lmtp_port
        self.evict_paths, self.log = evict_paths, log
        self.proc = None
        self.peak_kib = 0
        self.session = None
        self.perf_dir = None  # --perf-op: record this server while perf_tag is set
        self.perf_tag = None
        self.perf_proc = None
        self.perf_n = 0

    def perf_attach(self):
        """perf record (DWARF call graphs, 499 Hz) attached to the running server."""
        if not (self.perf_dir and self.perf_tag and self.proc) or self.perf_proc:
            return
        self.perf_n += 1
        out = os.path.join(self.perf_dir, f"perf-{self.perf_tag}-{self.perf_n}.data")
        self.perf_proc = subprocess.Popen(
            ["perf", "record", "-q", "-F", "499", "--call-graph", "dwarf,16384", "-o", out,
             "-p", str(self.proc.pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0)  # perf needs a moment to attach; outside any timed command

    def perf_detach(self):
        if self.perf_proc:
            self.perf_proc.send_signal(signal.SIGINT)
            self.perf_proc.wait(120)
            self.perf_proc = None

    def start(self):
        logf = open(self.log, "ab")
        self.proc = subprocess.Popen(self.argv, stdout=logf, stderr=logf,
                                     stdin=subprocess.DEVNULL)
        logf.close()
        if not wait_port(self.imap_port, self.proc):
            raise ImapError(f"{self.name} did not start (log {self.log})")
        self.perf_attach()

    def sample(self):
        """VmHWM of the process that serves the mail: mailvaultd itself; for Dovecot, each
        imap process (children of the master)."""
        if not self.proc:
            return
        if self.name == "mailvaultd":
            self.peak_kib = max(self.peak_kib, vm_hwm_kib(self.proc.pid))
            return
        for p in os.listdir("/proc"):
            if not p.isdigit():
                continue
            try:
                with open(f"/proc/{p}/stat") as f:
                    st = f.read()
            except OSError:
                continue
            comm = st[st.index("(") + 1:st.rindex(")")]
            ppid = int(st[st.rindex(")") + 2:].split()[1])
            if comm == "imap" and ppid == self.proc.pid:
                self.peak_kib = max(self.peak_kib, vm_hwm_kib(int(p)))

    def stop(self):
        if self.session:
            self.sample()
            self.session.close()
            self.session = None
        self.perf_detach()
        if self.proc and self.proc.poll() is None:
            self.sample()
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


class Run:
    def __init__(self, a, servers):
        self.a, self.servers = a, servers
        self.user = a.user
        with open(a.password_file) as f:
            self.password = f.read().strip()
        self.ops = {}
        self.errors = []
        self.uids = {}
        self.extra = {}  # figures that are not timings (byte counts)
        self.checkpoint = lambda: None
        # --resume: an interrupted run's operations with times on both servers are kept and
        # not run again (at 1,000,000 messages one Dovecot SEARCH TEXT pass reads every file:
        # ~11 min here); --skip: operations not run at all (the report shows no row for them).
        self.kept = set()
        if a.resume:
            with open(a.resume) as f:
                old = json.load(f)
            for op, e in old.get("ops", {}).items():
                if all(e.get("times_s", {}).get(s.name) for s in servers):
                    self.ops[op] = {"times_s": e["times_s"], "results": e.get("results", {})}
                    self.kept.add(op)
            self.extra.update(old.get("extra", {}))
        self.skip = set(filter(None, (a.skip or "").split(",")))

    def login(self, srv, select=True):
        t0 = time.perf_counter()
        c = Imap(srv.imap_port)
        c.ok(f'LOGIN "{self.user}" "{self.password}"')
        exists = None
        if select:
            data, _ = c.ok("SELECT INBOX")
            m = re.search(rb"\* (\d+) EXISTS", data)
            exists = int(m.group(1)) if m else None
        return c, time.perf_counter() - t0, exists

    def main_session(self, srv):
        if srv.session is None:
            srv.session, _, _ = self.login(srv)
            # untimed: the 50 random whole messages (0.4-4 MB) and FETCH 1:* up to 100,000
            # messages fit without the buffer growing inside a timed command
            srv.session.reserve(MAIN_SESSION_BUFFER)
        return srv.session

    def refresh_uids(self, srv):
        data, _ = self.main_session(srv).ok("UID SEARCH ALL")
        uids = []
        for line in data.split(b"\r\n"):
            if line.startswith(b"* SEARCH"):
                uids.extend(int(x) for x in line.split()[2:])
        self.uids[srv.name] = uids
        return uids

    def warm_all(self, op):
        """Reads every server's files before op (untimed), so both serve it from pages in
        the page cache that were used seconds ago: the earlier operations leave Dovecot's
        files just read (SEARCH TEXT/BODY reads every message) and mailvaultd's message
        pages untouched since the store was copied, and a kernel may drop pages that are
        idle for a minute whatever memory is free (this VM's DAMON reclaim does). Skipped,
        and said so, when the files exceed WARM_SHARE_MAX of the memory the kernel calls
        available: reading them would evict the pages it means to warm."""
        paths = [p for srv in self.servers for p in srv.evict_paths]
        total = files_bytes(paths)
        avail = mem_available_bytes()
        entry = {"files_bytes": total, "mem_available_bytes": avail,
                 "resident_pct_before": {srv.name: resident_percent(srv.evict_paths)
                                         for srv in self.servers}}
        if avail is None or total > WARM_SHARE_MAX * avail:
            entry["skipped"] = f"the files exceed {WARM_SHARE_MAX:.0%} of MemAvailable"
        else:
            t0 = time.monotonic()
            entry["read_bytes"] = warm(paths)
            entry["seconds"] = round(time.monotonic() - t0, 1)
        print(f"   {op}: warm {entry}", flush=True)
        self.extra[f"{op}_warm"] = entry

    def record(self, op, srv, secs, result=None):
        e = self.ops.setdefault(op, {"times_s": {}, "results": {}})
        e["times_s"].setdefault(srv.name, []).append(round(secs, 6))
        if result is not None:
            e["results"].setdefault(srv.name, []).append(result)
        srv.sample()

    def error(self, op, srv, text):
        msg = f"{op} on {srv.name}: {text}"
        print("ERROR " + msg, file=sys.stderr, flush=True)
        self.errors.append(msg)
        e = self.ops.setdefault(op, {"times_s": {}, "results": {}})
        e.setdefault("errors", []).append(msg)

    def pairs(self, op, rounds, fn, warmup=False):
        """fn(srv, round) -> (seconds, result) or None (untimed); alternating order."""
        if op in self.kept or op in self.skip:
            print(f"== {op}: {'kept from --resume' if op in self.kept else 'skipped'}",
                  flush=True)
            return
        print(f"== {op}: {rounds} pair(s){' + warm-up' if warmup else ''}", flush=True)
        for r in range(-1 if warmup else 0, rounds):
            order = self.servers if r % 2 == 0 else self.servers[::-1]
            for srv in order:
                profile = (r >= 0 and op in (self.a.perf_op or "").split(",")
                           and srv.name == "mailvaultd")
                if profile:
                    srv.perf_tag = op
                    srv.perf_attach()
                try:
                    got = fn(srv, r)
                except (ImapError, OSError) as exc:
                    self.error(op, srv, str(exc))
                    if srv.session is not None:
                        try:
                            srv.session.sock.close()
                        except OSError:
                            pass
                        srv.session = None
                    continue
                finally:
                    if profile:
                        srv.perf_detach()
                        srv.perf_tag = None
                if r >= 0 and got is not None:
                    self.record(op, srv, *got)
        self.checkpoint()

    # ---- the operations -------------------------------------------------------------------
    def timed(self, text, count_re=None):
        def fn(srv, _r):
            data, secs = self.main_session(srv).ok(text)
            result = None
            if count_re == "search":
                result = sum(len(line.split()) - 2 for line in data.split(b"\r\n")
                             if line.startswith(b"* SEARCH"))
            elif count_re == "fetch":
                result = data.count(b" FETCH (")
            return secs, result
        return fn

    def run(self):
        a = self.a
        meta = json.load(open(a.meta))
        n = a.messages
        for srv in self.servers:
            srv.start()
            c = self.main_session(srv)
            for box in ("Copies", "Copies2"):
                c.command(f"CREATE {box}")
            uids = self.refresh_uids(srv)
            if len(uids) != n:
                self.error("populate", srv, f"INBOX holds {len(uids)} messages, not {n}")
        R = a.rounds
        s = meta["search"]
        read_ops = [
            ("fetch_flags", "FETCH 1:* (UID FLAGS)", "fetch", n),
            ("fetch_size_date", "FETCH 1:* (UID RFC822.SIZE INTERNALDATE FLAGS)", "fetch", n),
            ("search_since", f"UID SEARCH SINCE {s['since']}", "search",
             meta["expected"]["since"]),
            ("search_unseen", "UID SEARCH UNSEEN", "search", meta["expected"]["unseen"]),
            ("search_from", f'UID SEARCH FROM "{s["from"]}"', "search",
             meta["expected"]["sender"]),
            ("search_text", f'UID SEARCH TEXT "{s["text_word"]}"', "search",
             meta["expected"]["word"]),
            ("search_body", f'UID SEARCH BODY "{s["text_word"]}"', "search",
             meta["expected"]["word"]),
        ]
        for op, text, kind, expect in read_ops:
            self.pairs(op, R, self.timed(text, kind), warmup=True)
            self.check_results(op, expect)

        warmed = []

        def fetch50(srv, op, seed, r, record=True):
            """UID FETCH of 50 random whole messages (the sample from seed); the page-cache
            residency before it (timed rounds) and the bytes answered go to extra under op
            (record=False: neither; an untimed read of the draw, counted in op_preread)."""
            rng = random.Random(seed)
            uids = self.uids[srv.name]
            pick = sorted(rng.sample(range(len(uids)), min(50, len(uids))))
            command = "UID FETCH " + ",".join(str(uids[i]) for i in pick) + " (BODY.PEEK[])"
            if not record:
                self.main_session(srv).ok(command)
                done = self.extra.setdefault(op + "_preread", {})
                done[srv.name] = done.get(srv.name, 0) + 1
                return None
            if r >= 0:
                self.extra.setdefault(op + "_resident_pct", {}).setdefault(
                    srv.name, []).append(resident_percent(srv.evict_paths))
            data, secs = self.main_session(srv).ok(command)
            self.extra.setdefault(op + "_bytes", {}).setdefault(srv.name, []).append(
                sum(int(x) for x in re.findall(rb"BODY\[\] \{(\d+)\}", data)))
            return secs, body_digest(data)

        def random50(srv, r):
            if not warmed:
                self.warm_all("fetch_random50")
                warmed.append(True)
            seed = a.seed * 1000 + r
            # Files larger than memory (1,000,000 messages: 33 GB on 24 GiB) are not read
            # first, so the page cache held whatever the operations before left: in the
            # 2026-12-05 run 63-76% of Dovecot's Maildir and 3.5% of mailvaultd's store, a
            # cold store against a warm Maildir. Then each server reads the draw once,
            # untimed, just before its timed command: hot against hot, as at the sizes that
            # fit (fetch_random50_cold is the cold row).
            if self.extra["fetch_random50_warm"].get("skipped"):
                fetch50(srv, "fetch_random50", seed, r, record=False)
            return fetch50(srv, "fetch_random50", seed, r)
        # each pair draws its own sample (see METHOD): more pairs than the others
        RS = max(R, a.sample_rounds)
        self.pairs("fetch_random50", RS, random50, warmup=True)
        self.check_results("fetch_random50", None)

        def last200(srv, _r):
            uids = self.uids[srv.name]
            first = uids[max(0, len(uids) - 200)]
            data, secs = self.main_session(srv).ok(
                f"UID FETCH {first}:* (UID BODY.PEEK[HEADER.FIELDS (FROM TO CC SUBJECT DATE "
                f"MESSAGE-ID CONTENT-TYPE)] ENVELOPE)")
            return secs, data.count(b" FETCH (")
        self.pairs("fetch_last200", R, last200, warmup=True)
        self.check_results("fetch_last200", min(200, n))

        def warm_login(srv, _r):
            c, secs, exists = self.login(srv)
            srv.sample()
            c.close()
            return secs, exists
        self.pairs("login_select_warm", R, warm_login, warmup=True)

        def cold_login(srv, _r):
            srv.stop()
            evict(srv.evict_paths)
            srv.start()
            t0 = time.perf_counter()
            srv.session, _, exists = self.login(srv)
            return time.perf_counter() - t0, exists
        self.pairs("login_select_cold", R, cold_login)
        self.check_results("login_select_cold", n)

        # The same as fetch_random50 from files out of the page cache (both servers running,
        # their data files evicted before each command, as a mailbox read after its pages
        # were reclaimed): fetch_random50 is hot against hot, this cold against cold.
        def random50_cold(srv, r):
            evict(srv.evict_paths)
            return fetch50(srv, "fetch_random50_cold", a.seed * 1000 + 500 + r, r)
        self.pairs("fetch_random50_cold", RS, random50_cold)
        self.check_results("fetch_random50_cold", None)

        # Every \Seen change below changes every message: all unseen first (untimed).
        for srv in self.servers:
            self.main_session(srv).ok("STORE 1:* -FLAGS.SILENT (\\Seen)")
        self.pairs("store_seen_add", R, self.timed_pair_store("STORE 1:* +FLAGS.SILENT (\\Seen)",
                                                               "store_seen_remove",
                                                               "STORE 1:* -FLAGS.SILENT (\\Seen)"))

        mid = n // 2 - 500

        def copy1000(srv, _r):
            uids = self.uids[srv.name]
            lo, hi = uids[max(0, mid)], uids[min(len(uids) - 1, max(0, mid) + 999)]
            data, secs = self.main_session(srv).ok(f"UID COPY {lo}:{hi} Copies")
            c = self.main_session(srv)
            c.ok("DELETE Copies")
            c.ok("CREATE Copies")
            return secs, None
        self.pairs("copy_1000", R, copy1000)

        def every10th(srv):
            uids = self.refresh_uids(srv)
            return uids[9::10]

        def uid_store(srv, uids, what):
            total = 0.0
            for i in range(0, len(uids), 5000):
                _, secs = self.main_session(srv).ok(
                    "UID STORE " + ",".join(map(str, uids[i:i + 5000])) + " " + what)
                total += secs
            return total

        def store_deleted(srv, _r):
            uids = every10th(srv)
            secs = uid_store(srv, uids, "+FLAGS.SILENT (\\Deleted)")
            uid_store(srv, uids, "-FLAGS.SILENT (\\Deleted)")
            return secs, len(uids)
        self.pairs("store_deleted_10th", R, store_deleted)

        def expunge(srv, _r):
            before = len(self.uids[srv.name])
            uids = every10th(srv)
            uid_store(srv, uids, "+FLAGS.SILENT (\\Deleted)")
            data, secs = self.main_session(srv).ok("EXPUNGE")
            after = len(self.refresh_uids(srv))
            if after != before - len(uids):
                self.error("expunge_10pct", srv, f"{before} - {len(uids)} left {after}")
            return secs, after
        self.pairs("expunge_10pct", 2, expunge)
        self.check_results("expunge_10pct", None)

        for srv in self.servers:
            self.main_session(srv).ok("STORE 1:* -FLAGS.SILENT (\\Seen)")
        self.pairs("gapped_store_seen", R, self.timed_pair_store(
            "STORE 1:* +FLAGS.SILENT (\\Seen)", "gapped_uid_store",
            "UID STORE 1:* -FLAGS.SILENT (\\Seen)"))

        def copy_half(srv, _r):
            half = max(1, len(self.uids[srv.name]) // 2)
            _, secs = self.main_session(srv).ok(f"COPY 1:{half} Copies2")
            st, _, _ = self.main_session(srv).command("STATUS Copies2 (MESSAGES)")
            return secs, half
        self.pairs("gapped_copy_half", 1, copy_half)

        def after_lmtp(srv, r):
            before = len(self.uids[srv.name])
            srv.stop()
            srv.start()
            msgs = lmtp_messages(a.lmtp_messages, a.seed, r * a.lmtp_messages)
            delivered = lmtp_parallel(srv.lmtp_port, self.user, msgs, 4)
            if delivered != a.lmtp_messages:
                self.error("lmtp_first_login", srv, f"{delivered} of {a.lmtp_messages} accepted")
            t0 = time.perf_counter()
            srv.session, _, exists = self.login(srv)
            secs = time.perf_counter() - t0
            # A server may announce queued mail after the login (EXISTS as it is moved in,
            # RFC 3501 7.3.1): wait for all of it, within 600 s, as --visible-wait says.
            want = before + a.lmtp_messages
            noop = a.visible_wait == "noop" or (a.visible_wait == "alternate" and r % 2 == 1)
            wait = wait_exists_noop if noop else wait_exists_idle
            seen = wait(srv.session, exists or 0, want, time.monotonic() + 600)
            visible = time.perf_counter() - t0
            if seen != want:
                self.error("lmtp_first_login", srv,
                           f"EXISTS {seen} after {before} + {a.lmtp_messages} deliveries")
            self.record("lmtp_all_visible_noop" if noop else "lmtp_all_visible", srv, visible,
                        seen)
            self.refresh_uids(srv)
            return secs, seen
        self.pairs("lmtp_first_login", a.lmtp_pairs, after_lmtp)

        for srv in self.servers:
            srv.stop()

    def timed_pair_store(self, add, other_op, remove):
        def fn(srv, r):
            _, secs = self.main_session(srv).ok(add)
            _, secs2 = self.main_session(srv).ok(remove)
            if r >= 0:
                self.record(other_op, srv, secs2)
            return secs, None
        return fn

    def check_results(self, op, expect):
        """Both servers' results equal (and equal to expect, when known)."""
        e = self.ops.get(op)
        if not e:
            return
        res = e.get("results", {})
        vals = {name: set(v) for name, v in res.items()}
        if len(vals) == 2 and vals.get("mailvaultd") != vals.get("dovecot"):
            self.error(op, self.servers[0], f"results differ: {res}")
        for name, v in vals.items():
            if expect is not None and v != {expect}:
                self.error(op, next(s for s in self.servers if s.name == name),
                           f"result {sorted(v)}, expected {expect}")


def cmd_run(a):
    servers = []
    mv_argv = [a.mailvaultd, "--listen=127.0.0.1", f"--imap-port={a.mv_imap_port}",
               f"--lmtp-port={a.mv_lmtp_port}", f"--root={a.mv_root}",
               "--connections-per-address-max=1000"] + a.mv_arg
    servers.append(Server("mailvaultd", mv_argv, a.mv_imap_port, a.mv_lmtp_port,
                          [a.mv_root], a.mv_log))
    if a.perf_op:
        servers[0].perf_dir = a.perf_dir
    if a.dovecot_conf:
        servers.append(Server("dovecot", ["dovecot", "-F", "-c", a.dovecot_conf],
                              a.dc_imap_port, a.dc_lmtp_port, [a.dc_mail],
                              os.path.join(os.path.dirname(a.dovecot_conf), "stderr.log")))
    run = Run(a, servers)
    load0 = os.getloadavg()[0]
    t0 = time.monotonic()

    def write(complete):
        """The run's JSON; also after every operation (complete = false), so an interrupted
        run keeps what it measured."""
        ops = {}
        for op, e in run.ops.items():
            o = {"times_s": e["times_s"], "results": e.get("results", {}),
                 "errors": e.get("errors", [])}
            for name, ts in e["times_s"].items():
                o[f"{name}_median_s"] = statistics.median(ts)
            mv, dc = e["times_s"].get("mailvaultd", []), e["times_s"].get("dovecot", [])
            ratios = [d / m for m, d in zip(mv, dc) if m > 0]
            o["ratios"] = [round(x, 4) for x in ratios]
            o["ratio_median"] = statistics.median(ratios) if ratios else None
            ops[op] = o
        doc = {
            "schema": "mailvault-bench-bigmail-run/1",
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "complete": complete,
            "messages": a.messages, "rounds": a.rounds,
            "sample_rounds": max(a.rounds, a.sample_rounds), "lmtp_messages": a.lmtp_messages,
            "lmtp_pairs": a.lmtp_pairs,
            "corpus": json.load(open(a.meta)),
            "machine": {"cpus": os.cpu_count(), "system": platform.platform(),
                        "load_start": load0, "load_end": os.getloadavg()[0]},
            "seconds": round(time.monotonic() - t0, 1),
            "servers": [s.name for s in servers],
            "peak_rss_mib": {s.name: round(s.peak_kib / 1024, 1) for s in servers},
            "ops": ops,
            "extra": run.extra,
            "errors": run.errors,
        }
        with open(a.json + ".tmp", "w") as f:
            json.dump(doc, f, indent=2)
            f.write("\n")
        os.replace(a.json + ".tmp", a.json)
        return doc

    def on_term(_sig, _frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_term)
    run.checkpoint = lambda: write(False)
    try:
        run.run()
    except (ImapError, OSError) as exc:
        run.errors.append(f"aborted: {exc}")
        print(f"bigmail: aborted: {exc}", file=sys.stderr)
    except KeyboardInterrupt:
        run.errors.append("interrupted")
        print("bigmail: interrupted", file=sys.stderr)
    finally:
        for srv in servers:
            srv.stop()
    doc = write(not any(e.startswith(("aborted", "interrupted")) for e in run.errors))
    ops = doc["ops"]
    print(f"bigmail: {a.messages} messages, {len(ops)} operations, {len(run.errors)} errors, "
          f"{doc['seconds']} s -> {a.json}")
    return 1 if run.errors else 0


LABELS = [
    ("fetch_flags", "FETCH 1:* (UID FLAGS)"),
    ("fetch_size_date", "FETCH 1:* (UID RFC822.SIZE INTERNALDATE FLAGS)"),
    ("search_since", "UID SEARCH SINCE"),
    ("search_unseen", "UID SEARCH UNSEEN"),
    ("search_from", "UID SEARCH FROM"),
    ("search_text", "UID SEARCH TEXT"),
    ("search_body", "UID SEARCH BODY"),
    ("fetch_random50", "UID FETCH 50 random whole messages"),
    ("fetch_last200", "UID FETCH last 200: HEADER.FIELDS + ENVELOPE"),
    ("login_select_warm", "LOGIN + SELECT, warm"),
    ("login_select_cold", "LOGIN + SELECT, cold"),
    ("fetch_random50_cold", "UID FETCH 50 random whole messages, files evicted"),
    ("store_seen_add", "STORE 1:* +FLAGS.SILENT (\\Seen)"),
    ("store_seen_remove", "STORE 1:* -FLAGS.SILENT (\\Seen)"),
    ("copy_1000", "UID COPY of 1,000 messages"),
    ("store_deleted_10th", "UID STORE every 10th +FLAGS.SILENT (\\Deleted)"),
    ("expunge_10pct", "EXPUNGE of 10% (twice)"),
    ("gapped_store_seen", "after 2x EXPUNGE: STORE 1:* +FLAGS.SILENT (\\Seen)"),
    ("gapped_uid_store", "after 2x EXPUNGE: UID STORE 1:* -FLAGS.SILENT (\\Seen)"),
    ("gapped_copy_half", "after 2x EXPUNGE: COPY 1:<half>"),
    ("lmtp_first_login", "first LOGIN + SELECT after LMTP deliveries"),
    ("lmtp_all_visible", "... until EXISTS shows all of them (client in IDLE)"),
    ("lmtp_all_visible_noop", "... until EXISTS shows all of them (client polls NOOP)"),
]


def fmt_s(v):
    if v is None:
        return "--"
    return f"{v * 1000:.1f} ms" if v < 1 else f"{v:.2f} s"


def cmd_report(a):
    sizes = {}
    if a.merge and os.path.exists(a.json):
        try:
            old = json.load(open(a.json))
            sizes.update(old.get("sizes", {}))
        except (OSError, ValueError):
            pass
    for path in a.runs:
        doc = json.load(open(path))
        sizes[str(doc["messages"])] = doc
    keys = sorted(sizes, key=int)
    out = {"schema": "mailvault-bench-bigmail/1",
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "sizes": {k: sizes[k] for k in keys}}
    with open(a.json, "w") as f:
        json.dump(out, f, indent=2)
        f.write("\n")
    lines = ["## Big mailboxes (issue 13): mailvaultd vs Dovecot", ""]
    for k in keys:
        d = sizes[k]
        dc = "Dovecot" if "dovecot" in d["servers"] else "Dovecot (not run)"
        lines.append(
            f"- {int(k):,} messages ({d['corpus']['bytes'] / 2**30:.2f} GiB, seed "
            f"{d['corpus']['seed']}"
            + ("" if d["corpus"].get("attach_percent", 5.0) == 5.0 else
               f", attachments in {d['corpus']['attach_percent']:g}% of the messages, not 5%")
            + f"): {d['date']}, {d['rounds']} pairs ("
            + (f"random samples {d['sample_rounds']}, " if "sample_rounds" in d else "")
            + "expunge 2), "
            f"{d['lmtp_messages']} LMTP deliveries, {d['seconds']:.0f} s, load "
            f"{d['machine']['load_start']:.1f}-{d['machine']['load_end']:.1f}"
            f"{'' if d.get('complete', True) else ' (INCOMPLETE: interrupted)'}; peak RSS "
            f"mailvaultd {d['peak_rss_mib'].get('mailvaultd', 0):.0f} MiB, {dc} imap "
            f"{d['peak_rss_mib'].get('dovecot', 0):.0f} MiB; errors: {len(d['errors'])}"
            + ("" if not d["errors"] else " (" + "; ".join(d["errors"][:3]) + ")"))
        # how the size's rows came to be when not from one run (a resumed run, rows measured
        # again later): the column must say so, not only the JSON
        lines += [f"  - {note}" for note in d.get("notes", [])]
    lines += ["", "Ratio = Dovecot's time / mailvaultd's (above 1: mailvaultd faster), median "
              "of alternating pairs; times are medians.", ""]
    head = "| operation |" + "".join(f" {int(k):,}: ratio | mailvaultd | Dovecot |" for k in keys)
    lines += [head, "|---|" + "---:|---:|---:|" * len(keys)]
    for op, label in LABELS:
        row = f"| {label} |"
        for k in keys:
            o = sizes[k]["ops"].get(op)
            if not o:
                row += " -- | -- | -- |"
                continue
            r = o.get("ratio_median")
            bad = " (errors)" if o.get("errors") else ""
            row += (f" {'--' if r is None else f'{r:.2f}'}{bad} | "
                    f"{fmt_s(o.get('mailvaultd_median_s'))} | {fmt_s(o.get('dovecot_median_s'))} |")
        lines.append(row)
    lines.append("")
    text = "\n".join(lines)
    with open(a.md, "w") as f:
        f.write(text)
    print(text)
    return 0


def main():
    ap = argparse.ArgumentParser(description="the big-mailbox benchmark's driver")
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--messages", type=int, required=True)
    r.add_argument("--rounds", type=int, default=3)
    r.add_argument("--sample-rounds", type=int, default=9,
                   help="pairs of the operations with a random sample per pair (at least --rounds)")
    r.add_argument("--user", required=True)
    r.add_argument("--password-file", required=True)
    r.add_argument("--meta", required=True)
    r.add_argument("--seed", type=int, default=13)
    r.add_argument("--lmtp-messages", type=int, default=1200)
    r.add_argument("--lmtp-pairs", type=int, default=1)
    r.add_argument("--visible-wait", choices=["idle", "noop", "alternate"], default="idle",
                   help="how lmtp_all_visible waits for the EXISTS: IDLE (a real client), "
                   "NOOP without pause (lmtp_all_visible_noop), or IDLE and NOOP in turn by pair")
    r.add_argument("--mailvaultd", required=True)
    r.add_argument("--mv-root", required=True)
    r.add_argument("--mv-imap-port", type=int, required=True)
    r.add_argument("--mv-lmtp-port", type=int, required=True)
    r.add_argument("--mv-log", default="/dev/null")
    r.add_argument("--mv-arg", action="append", default=[])
    r.add_argument("--dovecot-conf")
    r.add_argument("--dc-mail")
    r.add_argument("--dc-imap-port", type=int)
    r.add_argument("--dc-lmtp-port", type=int)
    r.add_argument("--perf-op", help="perf record mailvaultd during these operations' pairs "
                   "(comma-separated)")
    r.add_argument("--perf-dir", default=".", help="where the perf-OP-N.data files go")
    r.add_argument("--json", required=True)
    r.add_argument("--resume", help="an interrupted run's JSON: its operations measured on "
                   "both servers are kept, not run again (the servers' state must be the one "
                   "that run left, e.g. its KEEP_TMP=1 directory)")
    r.add_argument("--skip", help="operations not run, comma-separated")
    p = sub.add_parser("report")
    p.add_argument("--json", required=True)
    p.add_argument("--md", required=True)
    p.add_argument("--merge", action="store_true")
    p.add_argument("runs", nargs="+")
    a = ap.parse_args()
    sys.exit(cmd_run(a) if a.cmd == "run" else cmd_report(a))


if __name__ == "__main__":
    main()
