/*
 * imap_mime_stand_in.c -- the message a skeleton stands for (imap_mime.h): the skeleton's
 * pieces at the message's offsets, each part stored apart replaced by a filler, so that FETCH
 * can locate and answer body sections that lie outside those parts without reading them
 * (imap_fetch.c, imap_fetch_sparse_copy; issue 13).
 *
 * WHY THE FILLER STANDS IN
 *   imap_mime_section() finds a part by reading lines: boundary delimiters ("--" ...), header
 *   fields (a line that holds ':' and does not start with SP or HTAB), empty lines after a
 *   header. A cut part is a leaf's content; when it holds no line of the first two kinds
 *   (its marks, counted by the store: 0) and starts a line, every line of it is content to
 *   any such reading, and so is the filler: 'x' bytes, the last one LF, so that whatever
 *   follows the part still starts a line. Every boundary and header lies in the skeleton's
 *   bytes, which are where they were. A range found this way that does not meet a cut
 *   part's place is the message's own (fuzz/fuzz_imap_mime.c compares both readings); one
 *   that does must be read from the message.
 *
 * THE FILLER PASSED OVER
 *   A cut part is 128 KiB or more, so a stand-in is mostly filler. Scanning it (the count
 *   of structure lines, a part's end looked for past it) and wiping it with the skeleton's
 *   bytes were a tenth of a FETCH of 500 previews where 5% of the messages carry an
 *   attachment (issue 13). So the count comes from the skeleton (imap_mime_stand_in_flat), a
 *   section's walk is told where the fillers are (imap_mime_stand_in_gaps,
 *   imap_mime_section_flat) and steps over each as the one line it is, and only the
 *   skeleton's bytes are wiped when it goes (imap_mime_stand_in_free). The filler is still
 *   written: a mapping of zero pages, with only each filler's first and last byte written,
 *   cost more (26-44 us against 10-11 for 500 KB, the page faults and the unmapping's TLB
 *   shootdown on a second CPU) than writing it into memory the heap hands back.
 */
#include "imap_mime.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int imap_mime_stand_in(const char *skeleton,
                       size_t len,
                       const struct mv_message_cut *cuts,
                       size_t cut_count,
                       uint64_t size,
                       char **out)
{
    *out = NULL;
    uint64_t total = len, last = 0;
    for (size_t c = 0; c < cut_count; c++) {
        if (cuts[c].marks != 0 || cuts[c].size == 0 || cuts[c].position < last ||
            cuts[c].position > len ||
            (cuts[c].position > 0 && skeleton[cuts[c].position - 1] != '\n')) {
            return MV_EUNSUPPORTED;
        }
        last = cuts[c].position;
        total += cuts[c].size;
    }
    if (total != size || size > SIZE_MAX - 1) {
        return MV_EUNSUPPORTED;
    }
    char *whole = malloc(size > 0 ? (size_t)size : 1);
    if (whole == NULL) {
        return MV_ENOMEM;
    }
    size_t at = 0, from = 0;
    for (size_t c = 0; c <= cut_count; c++) {
        size_t upto = c < cut_count ? (size_t)cuts[c].position : len;
        memcpy(whole + at, skeleton + from, upto - from);
        at += upto - from;
        from = upto;
        if (c < cut_count) {
            memset(whole + at, 'x', (size_t)cuts[c].size - 1);
            whole[at + (size_t)cuts[c].size - 1] = '\n';
            at += (size_t)cuts[c].size;
        }
    }
    *out = whole;
    return MV_OK;
}

void imap_mime_stand_in_gaps(const struct mv_message_cut *cuts,
                             size_t cut_count,
                             struct imap_mime_gap *gap)
{
    uint64_t before = 0; /* the bytes of the parts before cut c */
    for (size_t c = 0; c < cut_count; c++) {
        gap[c].start = (size_t)(cuts[c].position + before);
        gap[c].end = (size_t)(gap[c].start + cuts[c].size);
        before += cuts[c].size;
    }
}

void imap_mime_stand_in_free(char *whole,
                             uint64_t size,
                             const struct mv_message_cut *cuts,
                             size_t cut_count)
{
    if (whole == NULL) {
        return;
    }
    uint64_t at = 0, before = 0; /* at: where the next skeleton piece starts in the message */
    int all = 0;                 /* not the cuts it was made with: wipe it all */
    for (size_t c = 0; c <= cut_count && !all; c++) {
        uint64_t upto = c < cut_count ? cuts[c].position + before : size;
        all = upto > size || upto < at;
        if (!all) {
            explicit_bzero(whole + at, (size_t)(upto - at)); /* memset's speed: mail, not a key */
        }
        if (c < cut_count) {
            before += cuts[c].size;
            at = upto + cuts[c].size;
        }
    }
    if (all) {
        explicit_bzero(whole, (size_t)size);
    }
    free(whole);
}

int imap_mime_stand_in_meets(const struct mv_message_cut *cuts,
                             size_t cut_count,
                             size_t from,
                             size_t to)
{
    uint64_t before = 0; /* the bytes of the parts before cut c */
    for (size_t c = 0; c < cut_count && from < to; c++) {
        uint64_t start = cuts[c].position + before, end = start + cuts[c].size;
        if (to > start && from < end) {
            return 1;
        }
        before += cuts[c].size;
    }
    return 0;
}
