/*
 * imap_kw.h -- a message's keyword list as the views of a selected mailbox hold it
 * (imap_kw.c): each name interned once in the process, a list being its names' numbers.
 *
 * A list is shared and reference-counted (atomic: views are freed on several threads); it is
 * never written once made. The one empty list is IMAP_KW_NONE (static, never counted). Every
 * function here is safe on any thread.
 */
#ifndef MV_IMAPD_IMAP_KW_H
#define MV_IMAPD_IMAP_KW_H

#include <stddef.h>
#include <stdint.h>

struct buf;
struct imap_kw;

/* The empty list. */
extern const struct imap_kw imap_kw_none;
#define IMAP_KW_NONE (&imap_kw_none)

/* The list of the space-separated keywords in text (empty names skipped; NULL or "" give
 * IMAP_KW_NONE), or like with one more reference when like holds the same names in the same
 * order (consecutive messages often do). NULL out of memory. The caller owns one reference. */
const struct imap_kw *imap_kw_new(const char *text, const struct imap_kw *like);
/* One more reference to kw (returned); imap_kw_unref drops one (NULL and IMAP_KW_NONE are
 * ignored by both). The last reference frees the list and each name no other list holds. */
const struct imap_kw *imap_kw_ref(const struct imap_kw *kw);
void imap_kw_unref(const struct imap_kw *kw);

/* The number of names in kw, and name i (0 <= i < count): NUL-terminated, its length in *len;
 * valid while kw is. */
size_t imap_kw_count(const struct imap_kw *kw);
const char *imap_kw_name(const struct imap_kw *kw, size_t i, size_t *len);
/* 1 if a and b hold the same names (same spelling) in the same order, else 0. */
int imap_kw_equal(const struct imap_kw *a, const struct imap_kw *b);
/* 1 if kw holds word (len bytes) in any ASCII case (RFC 3501 2.3.2), else 0. */
int imap_kw_has(const struct imap_kw *kw, const char *word, size_t len);
/* kw's names joined by single spaces: appended to out (imap_kw_out), or written at q (at most
 * imap_kw_text_len(kw) bytes, no NUL; returns the end). */
void imap_kw_out(struct buf *out, const struct imap_kw *kw);
size_t imap_kw_text_len(const struct imap_kw *kw);
char *imap_kw_text_put(const struct imap_kw *kw, char *q);
/* A hash of kw's names for a table of lists (not keyed: for spreading, not a defence). */
uint64_t imap_kw_hash(const struct imap_kw *kw);

/* libsodium's keyed SipHash of len bytes under a key drawn once per process (a table keyed by
 * what a client chooses: imap_kw.c's names, imap_keywords.c's announced set). */
uint64_t imap_kw_siphash(const void *bytes, size_t len);

/* The process's bytes in lists and names, and its distinct names (for tests: no metric yet). */
size_t imap_kw_bytes(void);
size_t imap_kw_names_held(void);

#endif
