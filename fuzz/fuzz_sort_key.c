/*
 * fuzz_sort_key.c -- feeds arbitrary bytes to SORT's key functions (imapd/imap_sort_key.c),
 * which read a Subject and address lists out of mail: the store keeps them as the mail had
 * them, decoded.
 *
 * CHECKS (abort() on failure)
 *   - the input's first byte picks the size of the output (1..64 bytes, or 1,025: the server's
 *     own), the rest up to its first NUL is the field; each function writes only inside the
 *     output (ASan: an exact-size block), NUL-terminates it and returns the length it wrote;
 *   - a key has no lower-case ASCII letter (i;ascii-casemap form);
 *   - the base subject is never longer than the subject.
 *
 * Corpus: fuzz/corpus/sort_key (subjects with leaders, blobs, trailers and wrappers;
 * address lists with names, quotes, groups and comments).
 */
#include "../imapd/imap_sort_key.h"

#include <gmime/gmime.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fuzz_sort_check(const char *out, size_t cap, size_t n)
{
    if (n >= cap || out[n] != '\0' || strlen(out) != n) {
        abort();
    }
    for (size_t i = 0; i < n; i++) {
        if (out[i] >= 'a' && out[i] <= 'z') {
            abort();
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int ready;
    if (!ready) {
        g_mime_init();
        ready = 1;
    }
    if (size == 0) {
        return 0;
    }
    size_t cap = data[0] == 0xff ? 1025 : (size_t)(data[0] % 64) + 1;
    char *field = malloc(size);
    char *out = malloc(cap);
    if (field == NULL || out == NULL) {
        abort();
    }
    memcpy(field, data + 1, size - 1);
    field[size - 1] = '\0';
    size_t n = imap_sort_subject(field, out, cap);
    fuzz_sort_check(out, cap, n);
    if (n > strlen(field)) {
        abort();
    }
    n = imap_sort_address(field, IMAP_SORT_MAILBOX, out, cap);
    fuzz_sort_check(out, cap, n);
    n = imap_sort_address(field, IMAP_SORT_DISPLAY, out, cap);
    fuzz_sort_check(out, cap, n);
    free(out);
    free(field);
    return 0;
}
