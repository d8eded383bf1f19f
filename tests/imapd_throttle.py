#!/usr/bin/env python3
"""imapd_throttle.py -- mailvaultd's failed-login delays (imapd/throttle.c), counted per
client address and per attempted user: the answer to a failure waits the server's
--auth-fail-delay-ms doubled for each earlier failure from the address or for the user,
whichever has more. Run by tests/cli_imapd_throttle.sh, which makes the users and starts the
server (listening on 127.0.0.1 with a small base delay).

USAGE
  imapd_throttle.py --imap PORT --delay-ms N --user ADDR:PASSWORD --user2 ADDR:PASSWORD
  Connects from other loopback addresses (127.0.0.2 ... 127.0.0.13): Linux routes all of
  127/8 to lo, so binding the client socket to one is enough.

WHAT IT CHECKS
  - one user's failures from four addresses, one each (LOGIN, AUTHENTICATE PLAIN, the domain
    in upper case): the delays double across the addresses (D, 2D, 4D, 8D);
  - another existing user from a fresh address: the base delay, not the first user's;
  - a user with no store, from fresh addresses: delays D, 2D, 4D, like an existing user;
  - the right password after all that: answered at once (well under the user's delay), and
    the success resets nothing: the next failure for the user waits 16D;
  - the per-address count still stands: two fresh names from one address, D then 2D;
  - a name that is not an address: refused the same way, at least D.
  Delays are checked from below (90% of the expected value) and, where the point is that a
  delay is short, from above with a wide margin: the machine may be loaded.
  Prints "PASS ..." / "FAIL ..." and, last, "# N passed, N failed".
"""
import argparse
import base64
import socket
import sys
import time

import imapd_common

results = imapd_common.Results()
check = results.report


class SourcedImap(imapd_common.Imap):
    """imapd_common.Imap from a chosen local (loopback) address."""

    def __init__(self, port, timeout_s, source):  # pylint: disable=super-init-not-called
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout_s,
                                             source_address=(source, 0))
        self.buf = b""
        self.n = 0
        self.tag_prefix = b"t"
        self.read_response()  # greeting


def timed(port, source, command):
    """(tagged line, ms from sending command to its tagged answer) on a fresh connection."""
    c = SourcedImap(port, 60, source)
    try:
        start = time.monotonic()
        _, tagged = c.command(command)
        return tagged, (time.monotonic() - start) * 1000
    finally:
        c.close()


def login(user, password):
    return 'LOGIN "%s" "%s"' % (user, password)


def plain(user, password):
    return "AUTHENTICATE PLAIN " + base64.b64encode(
        ("\0%s\0%s" % (user, password)).encode()).decode()


def refused(tagged):
    return b"NO [AUTHENTICATIONFAILED]" in tagged


def expect_failure(port, d, source, command, times_d, name):
    """A refused login from source that waited at least times_d x d (minus 10%)."""
    tagged, ms = timed(port, source, command)
    check(name + ": refused", refused(tagged), repr(tagged))
    check("%s: waited >= %d ms" % (name, times_d * d), ms >= 0.9 * times_d * d, "%.0f ms" % ms)
    return ms


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--imap", type=int, required=True)
    p.add_argument("--delay-ms", type=int, required=True)
    p.add_argument("--user", required=True)
    p.add_argument("--user2", required=True)
    args = p.parse_args()
    port, d = args.imap, args.delay_ms
    user, password = args.user.split(":", 1)
    user2, password2 = args.user2.split(":", 1)
    local, domain = user.split("@")

    # One user, one failure from each of four addresses: an address-only count would give
    # each the base delay.
    expect_failure(port, d, "127.0.0.1", login(user, "wrong 1"), 1, "user 1st failure, 127.0.0.1")
    expect_failure(port, d, "127.0.0.2", plain(user, "wrong 2"), 2,
                   "user 2nd failure (AUTHENTICATE), 127.0.0.2")
    expect_failure(port, d, "127.0.0.3", login("%s@%s" % (local, domain.upper()), "wrong 3"), 4,
                   "user 3rd failure (domain in upper case), 127.0.0.3")
    expect_failure(port, d, "127.0.0.4", login(user, "wrong 4"), 8, "user 4th failure, 127.0.0.4")

    # Another existing user from a fresh address: its own count, so the base delay.
    ms = expect_failure(port, d, "127.0.0.5", login(user2, "wrong"), 1,
                        "another user from a fresh address")
    check("another user from a fresh address: not the first user's delay (< %d ms)" % (4 * d),
          ms < 4 * d, "%.0f ms" % ms)

    # A user with no store: the same doubling as an existing user (no existence leak).
    ghost = "nobody-%d@%s" % (int(time.time()), domain)
    first = expect_failure(port, d, "127.0.0.6", login(ghost, "x"), 1,
                           "nonexistent user 1st failure, 127.0.0.6")
    check("nonexistent user 1st failure: the base delay, like an existing user (< %d ms)" %
          (4 * d), first < 4 * d, "%.0f ms" % first)
    expect_failure(port, d, "127.0.0.7", plain(ghost, "x"), 2,
                   "nonexistent user 2nd failure, 127.0.0.7")
    expect_failure(port, d, "127.0.0.8", login(ghost, "x"), 4,
                   "nonexistent user 3rd failure, 127.0.0.8")

    # The right password is never held back, however many failures came before it.
    tagged, ms = timed(port, "127.0.0.1", login(user, password))
    check("right password after 4 failures: logged in", b" OK" in tagged, repr(tagged))
    check("right password after 4 failures: answered at once (< %d ms, the next failure "
          "would wait %d)" % (8 * d, 16 * d), ms < 8 * d, "%.0f ms" % ms)
    tagged, ms = timed(port, "127.0.0.9", plain(user, password))
    check("right password by AUTHENTICATE from a fresh address: logged in", b" OK" in tagged,
          repr(tagged))
    check("right password by AUTHENTICATE: answered at once (< %d ms)" % (8 * d), ms < 8 * d,
          "%.0f ms" % ms)
    tagged, ms = timed(port, "127.0.0.10", login(user2, password2))
    check("the second user logs in after its failure", b" OK" in tagged, repr(tagged))

    # A success resets neither count.
    expect_failure(port, d, "127.0.0.10", login(user, "wrong 5"), 16,
                   "user 5th failure, after successes, 127.0.0.10")

    # The per-address count stands on its own: fresh names, one address.
    expect_failure(port, d, "127.0.0.11", login("a-%s" % ghost, "x"), 1,
                   "fresh name from 127.0.0.11")
    expect_failure(port, d, "127.0.0.11", login("b-%s" % ghost, "x"), 2,
                   "another fresh name from 127.0.0.11")

    # A name that is no address counts for the address only, and is refused the same way.
    expect_failure(port, d, "127.0.0.12", login("not an address", "x"), 1,
                   "a name that is not an address")

    results.summary()
    return 0 if results.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
