/*
 * imap_mime.h -- ENVELOPE, BODYSTRUCTURE and body parts of a message for FETCH (GMime 3);
 * see imap_mime.c for the contract and its limits.
 */
#ifndef MV_IMAP_MIME_H
#define MV_IMAP_MIME_H

#include "imapd.h"

#include <stddef.h>
#include <stdint.h>

struct imap_mime;

/* Once, before any thread parses (main.c). */
void imap_mime_init(void);
/* Parses raw (copied; raw may go after the call). MV_OK or MV_ENOMEM. */
int imap_mime_open(const char *raw, size_t len, struct imap_mime **out);
void imap_mime_close(struct imap_mime **m);
/* "(date subject from sender reply-to to cc bcc in-reply-to message-id)" */
void imap_mime_envelope(const struct imap_mime *m, struct buf *out);
/* BODYSTRUCTURE (extensible 1) or BODY (0). */
void imap_mime_bodystructure(const struct imap_mime *m, struct buf *out, int extensible);
/* The content of part (part numbers as in BODY[1.2]), or its MIME header block if
 * mime_headers: appended to bytes. 0, or -1 if there is no such part or it is not a leaf. */
int imap_mime_section(const struct imap_mime *m,
                      const uint32_t *part,
                      size_t count,
                      int mime_headers,
                      struct buf *bytes);

#endif /* MV_IMAP_MIME_H */
