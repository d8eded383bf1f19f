#!/usr/bin/env python3
"""imapd_move.py -- what a running mailvaultd answers for a user whose store was released
from its node (tests/cli_move.sh runs it): LMTP must answer 4xx (the MTA or Dovecot's proxy
retries, on the new node), never 250 or 5xx; IMAP LOGIN must answer NO [UNAVAILABLE]; a
user who was not released is served as before.

usage: imapd_move.py --imap PORT --lmtp PORT --released ADDR:PASSWORD --other ADDR:PASSWORD
"""
import argparse
import imaplib
import smtplib
import sys

from imapd_common import Results


def lmtp_code(port, rcpt):
    with smtplib.LMTP("127.0.0.1", port, timeout=30) as s:
        s.ehlo("test")
        msg = ("From: a@example.net\r\nTo: %s\r\nSubject: after release\r\n\r\nx\r\n" % rcpt)
        try:
            s.sendmail("a@example.net", [rcpt], msg)
            return 250
        except smtplib.SMTPRecipientsRefused as e:
            return e.recipients[rcpt][0]
        except smtplib.SMTPDataError as e:
            return e.smtp_code


def login_answer(port, user, password):
    m = imaplib.IMAP4("127.0.0.1", port, timeout=30)
    try:
        typ, data = m.login(user, password)
        m.logout()
        return typ, b" ".join(data)
    except imaplib.IMAP4.error as e:
        return "NO", str(e).encode()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--imap", type=int, required=True)
    ap.add_argument("--lmtp", type=int, required=True)
    ap.add_argument("--released", required=True)
    ap.add_argument("--other", required=True)
    ap.add_argument("--expect-other-only", action="store_true",
                    help="check only that --other is served (after adopt)")
    a = ap.parse_args()
    r = Results()
    rel_user, rel_pw = a.released.split(":", 1)
    other_user, other_pw = a.other.split(":", 1)

    if not a.expect_other_only:
        code = lmtp_code(a.lmtp, rel_user)
        r.report("lmtp_released_user_4xx", 400 <= code < 500, "got %d" % code)
        typ, text = login_answer(a.imap, rel_user, rel_pw)
        r.report("login_released_user_unavailable", typ == "NO" and b"[UNAVAILABLE]" in text,
                 "%s %r" % (typ, text))
    code = lmtp_code(a.lmtp, other_user)
    r.report("lmtp_other_user_250", code == 250, "got %d" % code)

    typ, text = login_answer(a.imap, other_user, other_pw)
    r.report("login_other_user_ok", typ == "OK", "%s %r" % (typ, text))
    return r.summary()


if __name__ == "__main__":
    sys.exit(main())
