"""imapd_common.py -- what the mailvaultd test clients share (tests/imapd_client.py,
tests/imapd_crash.py, tests/imapd_concurrency.py): a thread-safe pass/fail tally that prints
"PASS ..." / "FAIL ..." and the summary line, and raw connections to the server's IMAP and
LMTP ports that read whole lines, IMAP literals, tagged responses and LMTP replies.

USAGE
  import imapd_common                      # the clients run as tests/NAME.py: tests/ is on sys.path
  results = imapd_common.Results()
  results.report("name", cond, "why")      # "PASS name" / "FAIL name: why"
  results.summary()                        # "# N passed, N failed", last
  c = imapd_common.Imap(port, timeout_s)   # reads the greeting
  untagged, tagged = c.command("LOGIN a b")
  l = imapd_common.Lmtp(port, timeout_s)   # reads the greeting
  code, line = l.cmd("LHLO x")
  n = imapd_common.metric(port, "name")    # a sample of the server's /metrics, or None

IMPLEMENTATION NOTES
  Every socket has the caller's timeout, so a server that stops answering raises (socket
  timeout, EOFError on a closed connection) instead of hanging the test.
"""
import re
import socket
import threading


class Results:
    """Counts checks; report and note may be called from any thread."""

    def __init__(self):
        self.passed = 0
        self.failed = 0
        self.lock = threading.Lock()

    def report(self, name, ok, why=""):
        with self.lock:
            if ok:
                self.passed += 1
                print("PASS %s" % name, flush=True)
            else:
                self.failed += 1
                print("FAIL %s%s" % (name, (": " + why) if why else ""), flush=True)

    def note(self, text):
        with self.lock:
            print("# %s" % text, flush=True)

    def summary(self):
        with self.lock:
            print("# %d passed, %d failed" % (self.passed, self.failed), flush=True)

    def run(self, main):
        """Runs main(), which ends with summary(); an exception (a dead server, a timeout)
        is a failed check and a summary, not a traceback."""
        try:
            main()
        except Exception as e:  # pylint: disable=broad-except
            self.report("the client ran to its end", False, repr(e))
            self.summary()


class LineConnection:
    """A socket with a read buffer: CRLF-terminated lines and counted bytes."""

    def __init__(self, port, timeout_s, host="127.0.0.1"):
        self.sock = socket.create_connection((host, port), timeout=timeout_s)
        self.buf = b""

    def fill(self):
        data = self.sock.recv(262144)
        if not data:
            raise EOFError("connection closed")
        self.buf += data

    def line(self):
        """The next line without its CRLF."""
        while True:
            i = self.buf.find(b"\r\n")
            if i >= 0:
                line, self.buf = self.buf[:i], self.buf[i + 2:]
                return line
            self.fill()

    def read_bytes(self, n):
        while len(self.buf) < n:
            self.fill()
        b, self.buf = self.buf[:n], self.buf[n:]
        return b

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


class Imap(LineConnection):
    """A raw IMAP connection with literals in both directions; tags are PREFIX1, PREFIX2..."""

    def __init__(self, port, timeout_s, tag_prefix=b"c"):
        super().__init__(port, timeout_s)
        self.n = 0
        self.tag_prefix = tag_prefix
        self.read_response()  # greeting

    def read_response(self):
        """One response: (text with each literal replaced by {}, [literals])."""
        text, lits = b"", []
        while True:
            line = self.line()
            m = re.search(rb"\{(\d+)\}$", line)
            if not m:
                return text + line, lits
            text += line[:m.start()] + b"{}"
            lits.append(self.read_bytes(int(m.group(1))))

    def tag(self):
        self.n += 1
        return self.tag_prefix + b"%d" % self.n

    def command(self, text, literal=None, plus=False):
        """Sends a command (with one literal appended if given: LITERAL+ if plus, else
        synchronising) and returns (untagged responses, tagged line)."""
        tag = self.tag()
        if isinstance(text, str):
            text = text.encode()
        if literal is None:
            self.sock.sendall(tag + b" " + text + b"\r\n")
        elif plus:
            self.sock.sendall(tag + b" " + text + b" {%d+}\r\n" % len(literal) + literal + b"\r\n")
        else:
            self.sock.sendall(tag + b" " + text + b" {%d}\r\n" % len(literal))
            untagged = []
            while True:
                r = self.read_response()
                if r[0].startswith(b"+"):
                    break
                if r[0].startswith(tag + b" "):
                    return untagged, r[0]
                untagged.append(r)
            self.sock.sendall(literal + b"\r\n")
            more, tagged = self.until(tag)
            return untagged + more, tagged
        return self.until(tag)

    def until(self, tag):
        """The responses up to and including the one tagged tag: (untagged, tagged line)."""
        untagged = []
        while True:
            r = self.read_response()
            if r[0].startswith(tag + b" "):
                return untagged, r[0]
            untagged.append(r)


def http(port, request, timeout_s=10):
    """Sends request bytes to 127.0.0.1:port and reads to the end: (status code, headers
    text, body), or None if the server closed without a byte."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
    try:
        s.sendall(request)
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    finally:
        s.close()
    if not data:
        return None
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ")[1])
    return status, head.decode("latin-1"), body


def metric(port, name, timeout_s=30):
    """The value of the sample name (with its labels, as /metrics writes them) in one
    GET /metrics on port, or None if there is no such sample."""
    got = http(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", timeout_s)
    body = got[2] if got is not None else b""
    m = re.search(rb"^" + re.escape(name.encode()) + rb" (\d+)$", body, re.M)
    return int(m.group(1)) if m else None


def imap_login(port, user, password, timeout_s=20):
    """A raw IMAP connection (Imap) logged in as user; RuntimeError if LOGIN is refused."""
    c = Imap(port, timeout_s)
    _, tagged = c.command('LOGIN "%s" "%s"' % (user, password))
    if b" OK" not in tagged:
        raise RuntimeError("login failed: %r" % tagged)
    return c


class Lmtp(LineConnection):
    """A raw LMTP connection; reads the greeting."""

    def __init__(self, port, timeout_s):
        super().__init__(port, timeout_s)
        self.reply()

    def reply(self):
        """One (possibly multi-line) reply: (code, last line)."""
        while True:
            line = self.line()
            if len(line) < 4 or line[3:4] != b"-":
                return int(line[:3]), line

    def cmd(self, text):
        self.sock.sendall(text.encode() + b"\r\n")
        return self.reply()
