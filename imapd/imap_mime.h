/*
 * imap_mime.h -- ENVELOPE, BODYSTRUCTURE and body parts of a message for FETCH (GMime 3);
 * see imap_mime.c for the contract and its limits.
 */
#ifndef MV_IMAP_MIME_H
#define MV_IMAP_MIME_H

#include "buf.h"
#include "mailvault.h" /* MV_OK, MV_ENOMEM */

#include <stddef.h>
#include <stdint.h>

struct imap_mime;

/* Where a stand-in's fillers lie (imap_mime_stand_in_gaps): [start, end) of raw, ascending. */
struct imap_mime_gap {
    size_t start;
    size_t end;
};
/* How imap_mime_section_flat() reads raw when it is not simply a message (NULL: it is):
 * - a stand-in (imap_mime_stand_in): its gaps, count of them, stepped over unread;
 * - a message's first prefix bytes only (imap_mime_reading_prefix): tail is where the last
 *   line that may go on past them starts, and uncertain is set when the walk needed a byte
 *   past them to be sure (A WALK OVER A PREFIX, below). */
struct imap_mime_reading {
    const struct imap_mime_gap *gap;
    size_t count;
    size_t prefix; /* 0: the whole message */
    size_t tail;
    int uncertain;
};

/* Lines that could open a MIME part or a header field ("--...", "name:") beyond which a
 * message is not handed to GMime (one text part in BODYSTRUCTURE; sections by the raw walk). */
#define IMAP_MIME_STRUCTURE_MAX 60000

/* Once, before any thread parses (main.c). */
void imap_mime_init(void);
/* Parses raw (copied; raw may go after the call). MV_OK or MV_ENOMEM. */
int imap_mime_open(const char *raw, size_t len, struct imap_mime **out);
/* For ENVELOPE only (imap_mime_envelope; not BODYSTRUCTURE, BODY): when the header is plain
 * its fields are read from raw itself, which must then stay until imap_mime_close();
 * otherwise as imap_mime_open(). MV_OK or MV_ENOMEM. */
int imap_mime_open_envelope(const char *raw, size_t len, struct imap_mime **out);
/* For BODYSTRUCTURE and BODY only (not ENVELOPE, which it leaves NIL): the message's top part
 * without GMime's message, so its address fields (a To: of 10,000 addresses took 17-28 ms a
 * BODYSTRUCTURE) are not parsed; the same answer as imap_mime_open() (tests/test_imap_mime.c
 * and the fuzz target compare both). MV_OK or MV_ENOMEM. */
int imap_mime_open_structure(const char *raw, size_t len, struct imap_mime **out);
/* For BODYSTRUCTURE and BODY from a message's skeleton (mv_message_skeleton_keyed: raw, len
 * bytes, without the cut_count large parts cuts name, size bytes with them), so that the
 * parts stored apart are neither read nor scanned: each leaf part whose content is empty
 * where a part was cut is described with that part's recorded size and lines, and a
 * message/rfc822 part's size and lines count the parts inside it. The same answer as
 * imap_mime_open_structure() of the whole message (tests/test_imap_mime_skeleton.c compares
 * them), or none: MV_EUNSUPPORTED when the skeleton cannot stand in for the message (a cut not
 * at a line break, with the parts the message over IMAP_MIME_STRUCTURE_MAX, a NUL byte: see
 * imap_mime.c), and imap_mime_bodystructure() gives -1 where GMime's parse of the skeleton did
 * not account for every cut; then read the message whole. MV_OK, MV_ENOMEM, MV_EUNSUPPORTED. */
int imap_mime_open_skeleton(const char *raw,
                            size_t len,
                            size_t size,
                            const struct mv_message_cut *cuts,
                            size_t cut_count,
                            struct imap_mime **out);
void imap_mime_close(struct imap_mime **m);
/* The message a skeleton (len bytes, without the cut_count parts cuts name; size bytes with
 * them) stands for, for FETCH body sections (imap_mime_stand_in.c): size bytes into *out
 * (free with imap_mime_stand_in_free), the skeleton's bytes at the message's offsets and each
 * cut part's place filled with bytes no MIME reading tells from a part's content.
 * imap_mime_section() finds in it what it finds in the message; a range that meets a cut part's
 * place (imap_mime_stand_in_meets) is filler there. MV_OK, MV_ENOMEM, MV_EUNSUPPORTED (a cut part
 * holds lines a MIME parser reads, marks > 0, or does not start a line, or the parts do not
 * add up to size: read the message whole). */
int imap_mime_stand_in(const char *skeleton,
                       size_t len,
                       const struct mv_message_cut *cuts,
                       size_t cut_count,
                       uint64_t size,
                       char **out);
/* imap_mime_flat() of the stand-in (size bytes) made of this skeleton (len bytes), from the
 * skeleton's bytes alone: the fillers hold no line it counts, and the skeleton's pieces start
 * and end lines as they do in the stand-in. Why: the stand-in of a message with a big
 * attachment is over the size where imap_mime_flat() scans, and the scan ran through every
 * filler (5% of a FETCH of 500 previews with 5% of the messages carrying attachments). */
int imap_mime_stand_in_flat(const char *skeleton, size_t len, uint64_t size);
/* The places of the fillers of the stand-in made with these cuts (the stand-in's offsets),
 * into gap[0..cut_count): what imap_mime_section_flat() steps over. */
void imap_mime_stand_in_gaps(const struct mv_message_cut *cuts,
                             size_t cut_count,
                             struct imap_mime_gap *gap);
/* Frees a stand-in (size bytes, made with these cuts) after wiping the skeleton's bytes in
 * it; the fillers hold nothing of the message and are not wiped (imap_mime_stand_in.c, THE
 * FILLER PASSED OVER). NULL: nothing. */
void imap_mime_stand_in_free(char *whole,
                             uint64_t size,
                             const struct mv_message_cut *cuts,
                             size_t cut_count);
/* 1 if bytes [from, to) of the message meet the place of one of the cut parts, else 0. */
int imap_mime_stand_in_meets(const struct mv_message_cut *cuts,
                             size_t cut_count,
                             size_t from,
                             size_t to);
/* For a session that enabled UTF8=ACCEPT (RFC 6855): ENVELOPE and BODYSTRUCTURE strings that
 * are valid UTF-8 are sent quoted and as they are; otherwise (the default) 8-bit strings are
 * literals and 8-bit display names RFC 2047 words. */
void imap_mime_set_utf8(struct imap_mime *m, int utf8);
/* Test hook: with on, ENVELOPE's address fields all go through GMime's address parser, not
 * the reader of common forms (imap_mime.c), so tests can compare the two. */
void imap_mime_set_gmime_addresses(struct imap_mime *m, int on);
/* "(date subject from sender reply-to to cc bcc in-reply-to message-id)" */
void imap_mime_envelope(const struct imap_mime *m, struct buf *out);
/* BODYSTRUCTURE (extensible 1) or BODY (0). 0; -1 (nothing written) only for a skeleton
 * (imap_mime_open_skeleton) whose parse did not account for every part cut from it. */
int imap_mime_bodystructure(const struct imap_mime *m, struct buf *out, int extensible);
/* What the answers of imap_mime_bodystructure() are kept under in the store (the memos,
 * imap_fetch.c): their format's version and the GMime version that parsed them, so that a
 * server whose answers would differ (a change here, or another GMime) makes them again
 * instead of sending what an older one wrote. Bump IMAP_MIME_STRUCTURE_FORMAT with any change
 * of what imap_mime_bodystructure() writes. */
#define IMAP_MIME_STRUCTURE_FORMAT 1
#define IMAP_MIME_TAG_LEN          4
void imap_mime_structure_tag(unsigned char tag[IMAP_MIME_TAG_LEN]);
/* 1 if the Content-Type value (unfolded, NUL-terminated) names a leaf part for certain
 * without GMime's parser: a plain media type other than multipart and message; 0: ask GMime.
 * The walk behind imap_mime_section() takes this shortcut; tests and the fuzz target check it
 * against GMime's parse. */
int imap_mime_plain_leaf(const char *value);
/* What imap_mime_section() locates in a part. */
enum imap_mime_what {
    IMAP_MIME_CONTENT = 0,    /* BODY[1.2]: the part's content, without its MIME header */
    IMAP_MIME_HEADER,         /* BODY[1.2.MIME]: the part's MIME header, with the empty line */
    IMAP_MIME_MESSAGE_HEADER, /* BODY[1.2.HEADER]: header of a message/rfc822 part's message */
    IMAP_MIME_MESSAGE_TEXT    /* BODY[1.2.TEXT]: body of a message/rfc822 part's message */
};

/* A byte range of the message: raw + offset, length bytes. */
struct imap_mime_span {
    size_t offset;
    size_t length;
};

/* Locates a section of the message raw (len bytes) for part numbers part[0..count) as in
 * BODY[1.2.3] (RFC 3501 6.4.5), straight from the raw bytes (no re-serialisation): *span is
 * a range of raw. Pure apart from GMime's Content-Type parser (imap_mime_init() first);
 * thread-safe. 0, or -1 if there is no such part (or HEADER / TEXT of a part that is not
 * message/rfc822, or count is 0 or above 32). */
int imap_mime_section(const char *raw,
                      size_t len,
                      const uint32_t *part,
                      size_t count,
                      enum imap_mime_what what,
                      struct imap_mime_span *span);
/* A WALK OVER A PREFIX. A preview of a multipart's part (BODY[1]<0.256>) needs the message's
 * first few KiB, where the part usually starts, but a walk over them alone must know what it
 * would have found in the message: imap_mime_section_flat() over n first bytes (len n, flat
 * 0: only a message of at most twice IMAP_MIME_STRUCTURE_MAX bytes is never flat) with a
 * reading set by imap_mime_reading_prefix() reads only lines that end before the last LF of
 * the prefix; a line at or past it may go on in the message. Looking for a part's start or a
 * header's end there, or running out of lines at the prefix's end, sets uncertain; looking
 * for a part's end there leaves the part open to the prefix's end. imap_mime_reading_holds()
 * then says whether the answer is the message's: a part not there, or a range that ended
 * before the prefix's end, when nothing was uncertain; an open one only for a partial that
 * ends before the line break in front of the first line that may go on (which could be a
 * delimiter's). Else read the message. tests/test_imap_mime.c and the fuzz target compare
 * every answer held with the message's, at every prefix length. */
/* Sets r for a walk over raw's first n bytes (a prefix of the message: n below its size). */
void imap_mime_reading_prefix(struct imap_mime_reading *r, const char *raw, size_t n);
/* 1 if the walk's answer (rc, span) in reading r is the message's, for a section asked for
 * with or without a partial <start.length> (A WALK OVER A PREFIX); always 1 for a reading of
 * the whole message (prefix 0). */
int imap_mime_reading_holds(const struct imap_mime_reading *r,
                            int rc,
                            const struct imap_mime_span *span,
                            int partial,
                            uint64_t start,
                            uint64_t length);
/* SECTIONS FROM THE HEADER. A message whose top Content-Type is neither a multipart nor a
 * message (or that has none) is one part to imap_mime_section(): every part number but 1
 * names nothing, part 1 (1.1, ...) is the message itself, its MIME header is the message's
 * header, and it has no HEADER or TEXT. So such a section is settled by the header alone
 * (imap_mime_header_settles), and imap_mime_section() of the header's bytes (exactly the
 * header, as the store keeps it: mv_message_fetch_header) gives the message's answer; only
 * part 1's content needs the body. FETCH reads the header instead of the message for them
 * (imap_fetch.c; a client's BODY[2.MIME] of 500 messages decompressed every body before);
 * tests/test_imap_mime.c and the fuzz target compare both answers. */
/* 1 if header (len bytes, exactly a message's header) makes the message one part. */
int imap_mime_single_part(const char *header, size_t len);
/* 1 if, for a message of one part, the section part[0..count) / what is settled by the header
 * (anything but the content of part 1, 1.1, ...). */
int imap_mime_header_settles(const uint32_t *part, size_t count, enum imap_mime_what what);
/* Whether imap_mime_section() takes raw for one text part (more than IMAP_MIME_STRUCTURE_MAX
 * lines that could open a part or a field): 1 or 0. Scans raw when len is above twice that. */
int imap_mime_flat(const char *raw, size_t len);
/* imap_mime_section() with flat given (imap_mime_flat() of raw, or imap_mime_stand_in_flat()
 * of the skeleton a stand-in is made of), so that a caller locating several sections, or one
 * in a stand-in, does not scan the message for it each time; r (NULL: raw is the message) a
 * stand-in's gaps, whose fillers the walk steps over unread as the lines they are, or a
 * prefix's reading (A WALK OVER A PREFIX), whose uncertain it may set. */
int imap_mime_section_flat(const char *raw,
                           size_t len,
                           int flat,
                           struct imap_mime_reading *r,
                           const uint32_t *part,
                           size_t count,
                           enum imap_mime_what what,
                           struct imap_mime_span *span);

#endif /* MV_IMAP_MIME_H */
