#!/usr/bin/env python3
"""make_corpus.py -- writes the sample mail corpus of tests/corpus, deterministically.

USAGE
    python3 tests/corpus/make_corpus.py            # rewrites tests/corpus/*.eml, parts.tsv,
                                                   # intended.tsv and fuzz/corpus/ingest/*

Every message is synthetic (names and addresses under example.*). Attachments are pseudo-
random bytes from SHA-256 in counter mode, so a re-run gives the same bytes. Besides the
.eml files it writes:

    parts.tsv     for each leaf part whose encoded content is >= SPLIT_MIN bytes: the file,
                  the [start, end) byte range of that encoded content in the file (found
                  here, independently of the parser), its encoding and the SHA-256 of the
                  decoded bytes;
    intended.tsv  what each message was written to say (subject, from, message id,
                  in-reply-to, date, number of large parts), for checking expected.tsv by
                  hand: expected.tsv is what the parser produces, kept only where the two
                  agree or the difference is understood (see README.md).

Python 3 standard library only.
"""
import base64
import email.utils
import hashlib
import os
import quopri
import struct
import sys
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
FUZZ_SEEDS = os.path.join(HERE, "..", "..", "fuzz", "corpus", "ingest")
SPLIT_MIN = 8192  # TP_SPLIT_MIN in tests/test_parse.c (the store splits at 128 KiB: STORE_SPLIT_MIN)
CRLF = b"\r\n"
LF = b"\n"


# ---- deterministic data ------------------------------------------------------------------

def pseudo_random(seed, size):
    out = bytearray()
    counter = 0
    while len(out) < size:
        out += hashlib.sha256(("%s:%d" % (seed, counter)).encode()).digest()
        counter += 1
    return bytes(out[:size])


def png_like(seed, size):
    """A PNG signature, a real IHDR chunk, one IDAT chunk of random bytes, IEND."""
    def chunk(kind, data):
        return (struct.pack(">I", len(data)) + kind + data +
                struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))
    head = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 640, 480, 8, 2, 0, 0, 0))
    tail = chunk(b"IEND", b"")
    body = pseudo_random(seed, size - len(head) - len(tail) - 12)
    return head + chunk(b"IDAT", body) + tail


def pdf_like(seed, size):
    """A PDF header, two objects, a stream of random bytes, a trailer."""
    head = (b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n"
            b"1 0 obj\n<< /Type /Catalog /Pages 2 0 R >>\nendobj\n"
            b"2 0 obj\n<< /Type /Pages /Kids [] /Count 0 >>\nendobj\n"
            b"3 0 obj\n<< /Length LENGTH /Filter /FlateDecode >>\nstream\n")
    tail = (b"\nendstream\nendobj\n"
            b"trailer\n<< /Root 1 0 R /Size 4 >>\nstartxref\n0\n%%EOF\n")
    body_len = size - len(head) - len(tail)  # LENGTH and the number are both 6 digits or less
    head = head.replace(b"LENGTH", b"%06d" % body_len)
    body_len = size - len(head) - len(tail)
    return head + pseudo_random(seed, body_len) + tail


# ---- encodings -----------------------------------------------------------------------------

def b64_body(data, eol=CRLF):
    """base64 in 76-character lines joined by eol, without a final line break."""
    text = base64.b64encode(data)
    return eol.join(text[i:i + 76] for i in range(0, len(text), 76))


def qp_body(data, eol=CRLF):
    encoded = quopri.encodestring(data)
    lines = encoded.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return eol.join(lines)


def ew_b(text, charset, codec=None):
    """An RFC 2047 B encoded word."""
    raw = text.encode(codec or charset)
    return "=?%s?B?%s?=" % (charset, base64.b64encode(raw).decode())


def ew_q(text, charset, codec=None):
    """An RFC 2047 Q encoded word."""
    out = []
    for byte in text.encode(codec or charset):
        ch = chr(byte)
        if byte == 0x20:
            out.append("_")
        elif ch.isalnum() and byte < 0x80:
            out.append(ch)
        else:
            out.append("=%02X" % byte)
    return "=?%s?Q?%s?=" % (charset, "".join(out))


# ---- message building ----------------------------------------------------------------------

class Message:
    """Collects the large parts a message holds, to find their ranges once it is built."""

    def __init__(self, name, eol=CRLF):
        self.name = name
        self.eol = eol
        self.tracked = []  # (encoded bytes, decoded bytes, encoding)

    def header_block(self, headers):
        out = b""
        for name, value in headers:
            if isinstance(value, str):
                value = value.encode("utf-8")
            out += name.encode() + b": " + value + self.eol
        return out

    def part(self, headers, body):
        return self.header_block(headers) + self.eol + body

    def track(self, encoded, decoded, encoding):
        if len(encoded) >= SPLIT_MIN:
            self.tracked.append((encoded, decoded, encoding))
        return encoded

    def attachment(self, ctype, filename, data, disposition="attachment", extra=()):
        body = self.track(b64_body(data, self.eol), data, "base64")
        headers = [("Content-Type", '%s; name="%s"' % (ctype, filename)),
                   ("Content-Disposition", '%s; filename="%s"' % (disposition, filename)),
                   ("Content-Transfer-Encoding", "base64")] + list(extra)
        return self.part(headers, body)

    def text_part(self, text, ctype="text/plain", charset="utf-8", cte="7bit", codec=None):
        headers, body = self.text_single(text, ctype, charset, cte, codec)
        return self.part(headers, body)

    def text_single(self, text, ctype="text/plain", charset="utf-8", cte="7bit", codec=None):
        """The Content-* header fields and the body of a text part, to go in a part or to
        make a whole message's header block and body."""
        raw = text.encode(codec or charset)
        if cte == "quoted-printable":
            body = qp_body(raw, self.eol)
        elif cte == "base64":
            body = b64_body(raw, self.eol)
        else:
            body = raw.replace(b"\n", self.eol)
        headers = [("Content-Type", "%s; charset=%s" % (ctype, charset)),
                   ("Content-Transfer-Encoding", cte)]
        return headers, body

    def multipart(self, subtype, boundary, parts, close=True, preamble=None, extra=""):
        eol = self.eol
        out = b""
        if preamble is not None:
            out += preamble + eol
        for p in parts:
            out += b"--" + boundary.encode() + eol + p + eol
        if close:
            out += b"--" + boundary.encode() + b"--" + eol
        headers = [("Content-Type", 'multipart/%s; boundary="%s"%s' % (subtype, boundary, extra))]
        return headers, out


CORPUS = []  # (Message, bytes, intended dict)


def common(frm, to, subject, msgid, date, extra=()):
    headers = [("From", frm), ("To", to)]
    if subject is not None:
        headers.append(("Subject", subject))
    if date is not None:
        headers.append(("Date", date))
    if msgid is not None:
        headers.append(("Message-ID", msgid))
    headers.extend(extra)
    headers.append(("MIME-Version", "1.0"))
    return headers


def emit(msg, headers, body, intended):
    data = msg.header_block(headers) + msg.eol + body
    CORPUS.append((msg, data, intended))


def emit_single(msg, headers, single, intended):
    """A one-part message: the part's Content-* fields join the message's header block."""
    body = single[1] if single[1].endswith(msg.eol) else single[1] + msg.eol
    emit(msg, headers + single[0], body, intended)


def unix(date):
    return int(email.utils.parsedate_to_datetime(date).timestamp()) if date else 0


def intent(subject, frm, msgid, irt="", date=None, parts=0):
    return {"subject": subject, "from": frm, "message_id": msgid, "in_reply_to": irt,
            "sent_date": unix(date), "part_count": parts}


ALICE = "Alice Martin <alice@example.org>"
BOB = "Bob Keller <bob@example.com>"


# ---- the messages ----------------------------------------------------------------------------

def make_plain():
    m = Message("plain-ascii.eml")
    date = "Mon, 03 Mar 2025 08:30:00 +0000"
    headers = common(ALICE, BOB, "Quarterly numbers for the review", "<q1-review.1@example.org>",
                     date, [("Cc", 'carol@example.net, "Ng, Dave" <dave@example.net>')])
    headers += [("Content-Type", "text/plain; charset=us-ascii"),
                ("Content-Transfer-Encoding", "7bit")]
    body = ("Hi Bob,\n\nThe quarterly numbers are attached to the shared folder. Revenue is up\n"
            "four percent; costs are flat. Can we go through them on Thursday?\n\n"
            "Thanks,\nAlice\n").encode().replace(b"\n", CRLF)
    emit(m, headers, body, intent("Quarterly numbers for the review", ALICE,
                                  "q1-review.1@example.org", date=date))


def make_utf8():
    m = Message("utf8-8bit.eml")
    date = "Tue, 04 Mar 2025 09:15:00 +0100"
    subject = "Grüße aus München – Ελληνικά ✓"
    frm_name = "Jörg Müller"
    headers = common("%s <joerg@example.de>" % ew_q(frm_name, "UTF-8"), ALICE,
                     ew_b(subject, "UTF-8"), "<utf8.8bit@example.de>", date)
    headers += [("Content-Type", "text/plain; charset=UTF-8"),
                ("Content-Transfer-Encoding", "8bit")]
    body = ("Hallo Alice,\n\nschöne Grüße aus München! Καλημέρα από την Αθήνα.\n"
            "Preis: 42 € — Größe: XL ✓\n").encode().replace(b"\n", CRLF)
    emit(m, headers, body, intent(subject, "%s <joerg@example.de>" % frm_name,
                                  "utf8.8bit@example.de", date=date))


def make_qp():
    m = Message("quoted-printable.eml")
    date = "Wed, 05 Mar 2025 17:45:10 -0500"
    subject = "Café réservé pour vendredi"
    headers = common(BOB, ALICE, ew_q(subject, "UTF-8"), "<qp.1@example.com>", date)
    text = ("Bonjour Alice,\n\nJ'ai réservé une table au café près de la gare pour vendredi à "
            "19h30, c'est une très longue ligne qui doit être coupée par des sauts de ligne "
            "doux en quoted-printable.\nÉquation: a = b + c\n\nBob\n")
    emit_single(m, headers, m.text_single(text, cte="quoted-printable"),
                intent(subject, BOB, "qp.1@example.com", date=date))


def make_base64_text():
    m = Message("base64-text.eml")
    date = "Thu, 06 Mar 2025 11:00:00 +0000"
    headers = common(ALICE, BOB, "Minutes (base64 body)", "<b64text@example.org>", date)
    text = ("Minutes of the planning meeting\n\n1. Budget approved.\n2. Release moved to "
            "April.\n3. Next meeting: 20 March.\n\nÀ bientôt.\n")
    emit_single(m, headers, m.text_single(text, cte="base64"),
                intent("Minutes (base64 body)", ALICE, "b64text@example.org", date=date))


def make_latin1():
    m = Message("latin1.eml")
    date = "Fri, 07 Mar 2025 14:20:00 +0100"
    subject = "Réunion d'équipe à 15h"
    name = "Chloé Dubois"
    headers = common("%s <chloe@example.fr>" % ew_q(name, "ISO-8859-1", "latin-1"), BOB,
                     ew_q(subject, "ISO-8859-1", "latin-1"), "<latin1.reunion@example.fr>", date)
    text = "Bonjour à tous,\n\nÇa va? La réunion d'équipe est déplacée à 15h.\nChloé\n"
    emit_single(m, headers, m.text_single(text, charset="ISO-8859-1", cte="8bit", codec="latin-1"),
                intent(subject, "%s <chloe@example.fr>" % name, "latin1.reunion@example.fr",
                       date=date))


def make_cp1252():
    m = Message("windows-1252.eml")
    date = "Sat, 08 Mar 2025 10:05:00 +0000"
    subject = "“Special” offer – only €42"
    headers = common(BOB, ALICE, ew_q(subject, "windows-1252", "cp1252"),
                     "<cp1252.offer@example.com>", date)
    text = "Dear customer,\n\nOur “special” offer – only €42 … while stocks last.\n"
    emit_single(m, headers, m.text_single(text, charset="windows-1252", cte="quoted-printable",
                                          codec="cp1252"),
                intent(subject, BOB, "cp1252.offer@example.com", date=date))


def make_koi8r():
    m = Message("koi8-r.eml")
    date = "Sun, 09 Mar 2025 12:00:00 +0300"
    subject = "Отчёт за март"
    name = "Иван Петров"
    headers = common("%s <ivan@example.ru>" % ew_b(name, "KOI8-R", "koi8_r"), ALICE,
                     ew_b(subject, "KOI8-R", "koi8_r"), "<koi8.report@example.ru>", date)
    text = "Добрый день!\n\nОтчёт за март во вложении. Продажи выросли на пять процентов.\nИван\n"
    emit_single(m, headers, m.text_single(text, charset="KOI8-R", cte="8bit", codec="koi8_r"),
                intent(subject, "%s <ivan@example.ru>" % name, "koi8.report@example.ru", date=date))


def make_sjis():
    m = Message("shift-jis.eml")
    date = "Mon, 10 Mar 2025 18:30:00 +0900"
    subject = "会議の議事録"
    name = "田中太郎"
    headers = common("%s <tanaka@example.jp>" % ew_b(name, "Shift_JIS", "shift_jis"), ALICE,
                     ew_b(subject, "Shift_JIS", "shift_jis"), "<sjis.minutes@example.jp>", date)
    text = "アリスさん\n\n本日の会議の議事録を送ります。ご確認ください。\n田中\n"
    emit_single(m, headers, m.text_single(text, charset="Shift_JIS", cte="base64",
                                          codec="shift_jis"),
                intent(subject, "%s <tanaka@example.jp>" % name, "sjis.minutes@example.jp",
                       date=date))


def make_gb2312():
    m = Message("gb2312.eml")
    date = "Tue, 11 Mar 2025 09:45:00 +0800"
    subject = "项目进度报告"
    name = "王小明"
    headers = common("%s <wang@example.cn>" % ew_b(name, "GB2312", "gb2312"), ALICE,
                     ew_b(subject, "GB2312", "gb2312"), "<gb2312.progress@example.cn>", date)
    text = "爱丽丝，你好：\n\n项目进度报告如下：第一阶段已经完成。\n王小明\n"
    emit_single(m, headers, m.text_single(text, charset="GB2312", cte="8bit", codec="gb2312"),
                intent(subject, "%s <wang@example.cn>" % name, "gb2312.progress@example.cn",
                       date=date))


def make_alternative():
    m = Message("alternative.eml")
    date = "Wed, 12 Mar 2025 07:00:00 +0000"
    headers = common("Newsletter <news@example.net>", ALICE, "Spring newsletter",
                     "<alt.spring@example.net>", date)
    plain = m.text_part("Spring newsletter\n\nOur garden event is on 5 April.\n")
    html = m.text_part("<html><body><h1>Spring newsletter</h1><p>Our <b>garden</b> event is on "
                       "5&nbsp;April.</p></body></html>\n", ctype="text/html",
                       cte="quoted-printable")
    mp_headers, body = m.multipart("alternative", "alt-b0undary-1", [plain, html])
    emit(m, headers + mp_headers, body,
         intent("Spring newsletter", "Newsletter <news@example.net>", "alt.spring@example.net",
                date=date))


def make_html_only():
    m = Message("html-only.eml")
    date = "Wed, 12 Mar 2025 07:30:00 +0000"
    headers = common("Shop <shop@example.net>", ALICE, "Your order &amp; invoice",
                     "<html.order@example.net>", date)
    html = ("<!DOCTYPE html>\n<html><head><style>p { color: red; }</style>\n"
            "<script type=\"text/javascript\">var hidden = '<b>not text</b>';</script></head>\n"
            "<body><!-- tracking comment --><p>Order&nbsp;#1234 &amp; invoice &lt;PDF&gt;"
            "</p><p>Caf&#233; cr&#xE8;me &#x263A;</p><br>Total: 12&#8364;</body></html>\n")
    emit_single(m, headers, m.text_single(html, ctype="text/html", cte="8bit"),
                intent("Your order &amp; invoice", "Shop <shop@example.net>",
                       "html.order@example.net", date=date))


def make_small_attachment():
    m = Message("attachment-small.eml")
    date = "Thu, 13 Mar 2025 13:13:13 +0000"
    headers = common(ALICE, BOB, "Signed form", "<small.att@example.org>", date)
    text = m.text_part("Here is the signed form.\n")
    pdf = m.attachment("application/pdf", "form.pdf", pdf_like("small-form", 3000))
    mp_headers, body = m.multipart("mixed", "mixed-small-1", [text, pdf])
    emit(m, headers + mp_headers, body,
         intent("Signed form", ALICE, "small.att@example.org", date=date))


def make_large_attachment():
    m = Message("attachment-large.eml")
    date = "Thu, 13 Mar 2025 15:00:00 +0000"
    headers = common(BOB, ALICE, "Photos and the contract", "<large.att@example.com>", date)
    text = m.text_part("Two files: the site photo and the signed contract.\n")
    png = m.attachment("image/png", "site.png", png_like("large-png", 24 * 1024))
    pdf = m.attachment("application/pdf", "contract.pdf", pdf_like("large-pdf", 32 * 1024))
    mp_headers, body = m.multipart("mixed", "mixed-large-2", [text, png, pdf])
    emit(m, headers + mp_headers, body,
         intent("Photos and the contract", BOB, "large.att@example.com", date=date, parts=2))


DUP_PDF = pdf_like("dup-annual-report", 100 * 1024)  # base64 over STORE_SPLIT_MIN: stored once


def make_dup(letter, sender, subject, boundary, filename, date, text):
    m = Message("dup-attachment-%s.eml" % letter)
    msgid = "dup-%s.report@example.org" % letter
    headers = common(sender, "team@example.org", subject, "<%s>" % msgid, date)
    parts = [m.text_part(text), m.attachment("application/pdf", filename, DUP_PDF)]
    mp_headers, body = m.multipart("mixed", boundary, parts)
    emit(m, headers + mp_headers, body, intent(subject, sender, msgid, date=date, parts=1))


def make_forwarded():
    m = Message("forwarded-rfc822.eml")
    date = "Fri, 14 Mar 2025 10:00:00 +0000"
    inner_date = "Thu, 13 Mar 2025 22:10:00 +0000"
    inner_headers = common("Carol Lee <carol@example.net>", BOB, "Site plan",
                           "<inner.plan@example.net>", inner_date)
    inner_parts = [m.text_part("Bob, the site plan is attached.\n"),
                   m.attachment("image/png", "plan.png", png_like("forwarded-png", 12 * 1024))]
    inner_mp_headers, inner_body = m.multipart("mixed", "inner-mixed-3", inner_parts)
    inner = m.header_block(inner_headers + inner_mp_headers) + m.eol + inner_body
    outer_parts = [m.text_part("Alice, see Carol's message below.\n"),
                   m.part([("Content-Type", "message/rfc822"),
                           ("Content-Disposition", 'inline; filename="Site plan.eml"')], inner)]
    headers = common(BOB, ALICE, "Fwd: Site plan", "<fwd.plan@example.com>", date)
    mp_headers, body = m.multipart("mixed", "outer-mixed-3", outer_parts)
    emit(m, headers + mp_headers, body,
         intent("Fwd: Site plan", BOB, "fwd.plan@example.com", date=date, parts=1))


def make_related():
    m = Message("related-inline-image.eml")
    date = "Fri, 14 Mar 2025 16:20:00 +0000"
    plain = m.text_part("Our new logo is below.\n")
    html = m.text_part('<html><body><p>Our new logo:</p><img src="cid:logo.1@example.org">'
                       '</body></html>\n', ctype="text/html")
    alt_headers, alt_body = m.multipart("alternative", "rel-alt-4", [plain, html])
    alt = m.header_block(alt_headers) + m.eol + alt_body
    image = m.attachment("image/png", "logo.png", png_like("related-logo", 10 * 1024),
                         disposition="inline", extra=[("Content-ID", "<logo.1@example.org>")])
    mp_headers, body = m.multipart("related", "related-4", [alt, image],
                                   extra='; type="multipart/alternative"')
    headers = common(ALICE, BOB, "New logo", "<related.logo@example.org>", date)
    emit(m, headers + mp_headers, body,
         intent("New logo", ALICE, "related.logo@example.org", date=date, parts=1))


def make_calendar():
    m = Message("calendar.eml")
    date = "Sat, 15 Mar 2025 09:00:00 +0000"
    ics = ("BEGIN:VCALENDAR\nVERSION:2.0\nPRODID:-//Example//Calendar 1.0//EN\nMETHOD:REQUEST\n"
           "BEGIN:VEVENT\nUID:plan-review-2025@example.org\nDTSTAMP:20250315T090000Z\n"
           "DTSTART:20250320T140000Z\nDTEND:20250320T150000Z\nSUMMARY:Plan review\n"
           "ORGANIZER:mailto:alice@example.org\nATTENDEE:mailto:bob@example.com\n"
           "END:VEVENT\nEND:VCALENDAR\n")
    plain = m.text_part("You are invited: Plan review, 20 March 14:00 UTC.\n")
    cal = m.text_part(ics, ctype='text/calendar; method=REQUEST', cte="7bit")
    mp_headers, body = m.multipart("alternative", "cal-5", [plain, cal])
    headers = common(ALICE, BOB, "Invitation: Plan review", "<cal.review@example.org>", date)
    emit(m, headers + mp_headers, body,
         intent("Invitation: Plan review", ALICE, "cal.review@example.org", date=date))


def make_no_end_boundary():
    m = Message("malformed-no-end-boundary.eml")
    date = "Sun, 16 Mar 2025 10:00:00 +0000"
    data = pdf_like("no-end", 9 * 1024)
    text = m.text_part("The attachment was cut off in transit.\n")
    att = m.attachment("application/pdf", "cut.pdf", data)
    mp_headers, body = m.multipart("mixed", "never-closed-6", [text, att], close=False)
    # The last part runs to the end of the file: its content takes the final line break too.
    m.tracked[-1] = (m.tracked[-1][0] + m.eol, data, "base64")
    headers = common(BOB, ALICE, "Cut off", "<noend@example.com>", date)
    emit(m, headers + mp_headers, body, intent("Cut off", BOB, "noend@example.com", date=date,
                                               parts=1))


def make_bad_boundary():
    m = Message("malformed-bad-boundary.eml")
    date = "Sun, 16 Mar 2025 11:00:00 +0000"
    text = m.text_part("This part is behind a boundary nobody declared.\n")
    _, body = m.multipart("mixed", "actual-7", [text])
    headers = common(BOB, ALICE, "Wrong boundary", "<badboundary@example.com>", date,
                     [("Content-Type", 'multipart/mixed; boundary="declared-7"')])
    emit(m, headers, body, intent("Wrong boundary", BOB, "badboundary@example.com", date=date))


def make_header_no_colon():
    m = Message("malformed-header-no-colon.eml")
    date = "Sun, 16 Mar 2025 12:00:00 +0000"
    block = (b"From: " + ALICE.encode() + CRLF + b"This line has no colon at all" + CRLF +
             b"To: " + BOB.encode() + CRLF + b"Subject: Header without colon" + CRLF +
             b"Date: " + date.encode() + CRLF + b"Message-ID: <nocolon@example.org>" + CRLF)
    data = block + CRLF + b"The second header line has no colon." + CRLF
    CORPUS.append((m, data, intent("Header without colon", ALICE, "nocolon@example.org",
                                   date=date)))


def make_long_header():
    m = Message("long-header-line.eml")
    date = "Sun, 16 Mar 2025 13:00:00 +0000"
    trace = pseudo_random("long-header", 30000).hex()  # one 60000-byte line, under 64 KiB
    refs = " ".join("<ref.%d@example.org>" % i for i in range(60))
    headers = common(ALICE, BOB, "A very long header line", "<longheader@example.org>", date,
                     [("X-Trace", trace), ("References", refs.replace("> <", ">\r\n <"))])
    headers += [("Content-Type", "text/plain; charset=us-ascii")]
    emit(m, headers, b"See the X-Trace header." + CRLF,
         intent("A very long header line", ALICE, "longheader@example.org", date=date))


def make_missing_date():
    m = Message("missing-date.eml")
    headers = common(BOB, ALICE, "No date here", "<nodate@example.com>", None)
    emit(m, headers, b"This message has no Date header." + CRLF,
         intent("No date here", BOB, "nodate@example.com"))


def make_bad_date():
    m = Message("bad-date.eml")
    headers = common(BOB, ALICE, "Unparsable date", "<baddate@example.com>",
                     "sometime next week, probably")
    emit(m, headers, b"The Date header is not a date." + CRLF,
         intent("Unparsable date", BOB, "baddate@example.com"))


def make_duplicate_msgid():
    m = Message("duplicate-message-id.eml")
    date = "Mon, 17 Mar 2025 08:00:00 +0000"
    headers = common(ALICE, BOB, "Two Message-IDs", "<first-id@example.org>", date,
                     [("Message-ID", "<second-id@example.org>")])
    emit(m, headers, b"Which one wins?" + CRLF,
         intent("Two Message-IDs", ALICE, "first-id@example.org", date=date))


def make_no_headers():
    m = Message("no-headers.eml")
    data = CRLF + b"A body with an empty header block before it." + CRLF
    CORPUS.append((m, data, intent("", "", "")))
    m2 = Message("body-only.eml")
    data2 = b"Just some text, no header block and no empty line" + CRLF + b"at all." + CRLF
    CORPUS.append((m2, data2, intent("", "", "")))


def make_bare_lf():
    m = Message("bare-lf.eml", eol=LF)
    date = "Mon, 17 Mar 2025 09:00:00 +0000"
    text = m.text_part("Written on a system with bare LF line endings.\n")
    att = m.attachment("application/octet-stream", "data.bin", pseudo_random("bare-lf", 10 * 1024))
    mp_headers, body = m.multipart("mixed", "lf-8", [text, att])
    headers = common(ALICE, BOB, "Bare LF", "<barelf@example.org>", date)
    emit(m, headers + mp_headers, body, intent("Bare LF", ALICE, "barelf@example.org",
                                               date=date, parts=1))


def make_mixed_endings():
    m = Message("mixed-line-endings.eml")
    date = "Mon, 17 Mar 2025 09:30:00 +0000"
    headers = common(BOB, ALICE, "CRLF headers, LF body", "<mixedeol@example.com>", date)
    body = b"First line ends in LF.\nSecond in CRLF.\r\nThird in LF.\n"
    emit(m, headers, body, intent("CRLF headers, LF body", BOB, "mixedeol@example.com",
                                  date=date))


def make_nul_body():
    m = Message("nul-in-body.eml")
    date = "Mon, 17 Mar 2025 10:00:00 +0000"
    headers = common(ALICE, BOB, "NUL in body", "<nul@example.org>", date)
    headers += [("Content-Type", "text/plain; charset=utf-8"),
                ("Content-Transfer-Encoding", "8bit")]
    body = b"before\x00after the NUL byte" + CRLF + b"second\x00\x00line" + CRLF
    emit(m, headers, body, intent("NUL in body", ALICE, "nul@example.org", date=date))


def make_garbage_headers():
    m = Message("garbage-8bit-headers.eml")
    date = "Mon, 17 Mar 2025 11:00:00 +0000"
    headers = common(b"J\xf6rg \xff Gr\xfcn <jgruen@example.de>", BOB,
                     b"Caf\xe9 \xe0 la cr\xe8me \xff\xfe", "<garbage@example.de>", date)
    emit(m, headers, b"Headers carry raw 8-bit bytes, no charset." + CRLF,
         intent("Café à la crème ÿþ", "Jörg ÿ Grün <jgruen@example.de>", "garbage@example.de",
                date=date))


def make_broken_base64():
    m = Message("broken-base64.eml")
    date = "Mon, 17 Mar 2025 12:00:00 +0000"
    headers = common(BOB, ALICE, "Broken base64", "<brokenb64@example.com>", date)
    headers += [("Content-Type", "text/plain; charset=utf-8"),
                ("Content-Transfer-Encoding", "base64")]
    good = base64.b64encode(b"The start decodes fine. ")
    body = good + b"!!!" + CRLF + b"@@ not base64 @@" + CRLF + b"VGhlIGVuZCBpcyB0cnVuY2F0ZW" + CRLF
    emit(m, headers, body, intent("Broken base64", BOB, "brokenb64@example.com", date=date))


def make_thread():
    d1 = "Tue, 18 Mar 2025 09:00:00 +0000"
    d2 = "Tue, 18 Mar 2025 10:30:00 +0000"
    d3 = "Tue, 18 Mar 2025 11:45:00 +0000"
    id1, id2, id3 = "thread.1@example.org", "thread.2@example.com", "thread.3@example.org"
    m = Message("thread-1.eml")
    emit(m, common(ALICE, BOB, "Lunch on Friday?", "<%s>" % id1, d1),
         b"Shall we have lunch on Friday?" + CRLF,
         intent("Lunch on Friday?", ALICE, id1, date=d1))
    m = Message("thread-2.eml")
    emit(m, common(BOB, ALICE, "Re: Lunch on Friday?", "<%s>" % id2, d2,
                   [("In-Reply-To", "<%s>" % id1), ("References", "<%s>" % id1)]),
         b"Yes, 12:30 at the usual place." + CRLF,
         intent("Re: Lunch on Friday?", BOB, id2, irt=id1, date=d2))
    m = Message("thread-3.eml")
    emit(m, common(ALICE, BOB, "Re: Re: Lunch on Friday?", "<%s>" % id3, d3,
                   [("In-Reply-To", "<%s>" % id2), ("References", "<%s>\r\n <%s>" % (id1, id2))]),
         b"Great, see you there." + CRLF,
         intent("Re: Re: Lunch on Friday?", ALICE, id3, irt=id2, date=d3))


def make_digest():
    m = Message("digest.eml")
    date = "Wed, 19 Mar 2025 06:00:00 +0000"
    entries = []
    for i, subject in enumerate(["Meeting moved", "Parking closed"]):
        inner = m.header_block(common("list@example.net", "members@example.net", subject,
                                      "<digest.%d@example.net>" % i, date))
        entries.append(m.eol + inner + m.eol + ("Entry %d of the digest.\n" % i).encode()
                       .replace(b"\n", m.eol))
    mp_headers, body = m.multipart("digest", "digest-9", entries)
    headers = common("List <list@example.net>", ALICE, "Digest, Vol 1", "<digest@example.net>",
                     date)
    emit(m, headers + mp_headers, body,
         intent("Digest, Vol 1", "List <list@example.net>", "digest@example.net", date=date))


MAKERS = [make_plain, make_utf8, make_qp, make_base64_text, make_latin1, make_cp1252,
          make_koi8r, make_sjis, make_gb2312, make_alternative, make_html_only,
          make_small_attachment, make_large_attachment,
          lambda: make_dup("a", ALICE, "Annual report", "dup-a-boundary", "report.pdf",
                           "Thu, 20 Mar 2025 09:00:00 +0000", "The annual report, as promised.\n"),
          lambda: make_dup("b", BOB, "Fwd: Annual report", "=_dup_b_other_boundary",
                           "copy of report.pdf", "Thu, 20 Mar 2025 11:11:11 +0100",
                           "Forwarding the report again, with a different text.\n"),
          make_forwarded, make_related, make_calendar, make_no_end_boundary, make_bad_boundary,
          make_header_no_colon, make_long_header, make_missing_date, make_bad_date,
          make_duplicate_msgid, make_no_headers, make_bare_lf, make_mixed_endings, make_nul_body,
          make_garbage_headers, make_broken_base64, make_thread, make_digest]


# ---- output ------------------------------------------------------------------------------

def tsv_row(values):
    for v in values:
        assert "\t" not in str(v) and "\n" not in str(v), v
    return "\t".join(str(v) for v in values) + "\n"


FUZZ_SEED_FILES = ["plain-ascii.eml", "utf8-8bit.eml", "quoted-printable.eml", "latin1.eml",
                   "koi8-r.eml", "shift-jis.eml", "alternative.eml", "html-only.eml",
                   "attachment-small.eml", "calendar.eml", "malformed-bad-boundary.eml",
                   "malformed-header-no-colon.eml", "nul-in-body.eml", "garbage-8bit-headers.eml",
                   "broken-base64.eml", "thread-3.eml", "digest.eml", "no-headers.eml",
                   "bare-lf.eml"]


def fuzz_degenerate():
    """A few inputs no real mail would be, for the fuzz seed corpus."""
    seeds = {"empty": b"", "zeros": b"\x00" * 512, "random": pseudo_random("fuzz-random", 2048)}
    nested = b"Subject: nested" + CRLF
    for i in range(60):
        nested += b"Content-Type: multipart/mixed; boundary=n%d" % i + CRLF + CRLF
        nested += b"--n%d" % i + CRLF
    seeds["nested-multipart"] = nested + CRLF + b"leaf" + CRLF
    rfc822 = b"Subject: nested messages" + CRLF
    for i in range(40):
        rfc822 += b"Content-Type: message/rfc822" + CRLF + CRLF + b"Subject: level %d" % i + CRLF
    seeds["nested-rfc822"] = rfc822 + CRLF + b"leaf" + CRLF
    many = b"Content-Type: multipart/mixed; boundary=m" + CRLF + CRLF
    seeds["many-parts"] = many + (b"--m" + CRLF + CRLF + b"x" + CRLF) * 300 + b"--m--" + CRLF
    seeds["headers-only"] = b"Subject: only headers" + CRLF + b"From: a@example.org"
    return seeds


def main():
    for make in MAKERS:
        make()
    names = set()
    parts_rows = []
    intended_rows = []
    total = 0
    for msg, data, intended in CORPUS:
        assert msg.name not in names, msg.name
        names.add(msg.name)
        with open(os.path.join(HERE, msg.name), "wb") as f:
            f.write(data)
        total += len(data)
        for encoded, decoded, encoding in msg.tracked:
            assert data.count(encoded) == 1, msg.name
            start = data.find(encoded)
            parts_rows.append(tsv_row([msg.name, start, start + len(encoded), encoding,
                                       hashlib.sha256(decoded).hexdigest()]))
        assert len(msg.tracked) == intended["part_count"], msg.name
        intended_rows.append(tsv_row([msg.name] + [intended[k] for k in
                                                   ("subject", "from", "message_id", "in_reply_to",
                                                    "sent_date", "part_count")]))
    with open(os.path.join(HERE, "parts.tsv"), "w", encoding="utf-8") as f:
        f.write("# file\tstart\tend\tencoding\tsha256 of the decoded content\n")
        f.writelines(parts_rows)
    with open(os.path.join(HERE, "intended.tsv"), "w", encoding="utf-8") as f:
        f.write("# file\tsubject\tfrom\tmessage_id\tin_reply_to\tsent_date\tpart_count\n")
        f.writelines(intended_rows)
    assert total < 600 * 1024, total
    os.makedirs(FUZZ_SEEDS, exist_ok=True)
    for name in FUZZ_SEED_FILES:
        with open(os.path.join(HERE, name), "rb") as src, \
                open(os.path.join(FUZZ_SEEDS, name), "wb") as dst:
            dst.write(src.read())
    for name, data in fuzz_degenerate().items():
        with open(os.path.join(FUZZ_SEEDS, name), "wb") as f:
            f.write(data)
    print("%d messages, %d bytes; %d large parts" % (len(CORPUS), total, len(parts_rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
