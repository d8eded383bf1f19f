/*
 * ops_prometheus.c -- statistics in the Prometheus text exposition format (version 0.0.4),
 * for a node exporter's textfile collector.
 *
 * USAGE
 *   mv_prometheus *p; mv_prometheus_begin(flags, &p);
 *   mv_prometheus_add(p, &file, inspection_or_NULL);      once per store
 *   mv_prometheus_add_mailbox(p, address, &mailbox);      optional, labelled output only
 *   mv_prometheus_write(p, fd); mv_prometheus_end(&p);
 *
 * IMPLEMENTATION NOTES
 *   The format wants every sample of a family together under its HELP and TYPE lines, so
 *   stores are collected first (numbers only: a few hundred bytes each) and written family
 *   by family. Every family is a gauge; names carry their unit (_bytes, _seconds, _ratio).
 *   Without MV_PROMETHEUS_USER_LABELS each family has one unlabelled sample that sums the
 *   stores added (or takes the maximum or minimum where a sum means nothing: ratios,
 *   timestamps, versions), so a single store's file describes that store and a whole root's
 *   describes the root, and no address ever reaches the monitoring system. Keyed figures
 *   cover the stores that were opened (mailvault_stores_inspected counts them). With the
 *   flag, every store gets its own sample labelled user="local@domain", and mailboxes get
 *   theirs labelled user and mailbox. Label values are escaped as the format requires.
 */
#include "ops/ops_inspect.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum ops_prom_agg { OPS_AGG_SUM, OPS_AGG_MAX, OPS_AGG_MIN };

struct ops_prom_store {
    char *address;
    uint64_t file_bytes, wal_bytes, page_count;
    uint32_t page_size, pending;
    int header_problem, mode_problem;
    mv_cipher cipher;
    int inspected;
    struct mv_store_inspection in;
};

struct ops_prom_mailbox {
    char *address;
    char *name;
    uint64_t messages, unseen, size_bytes, stored_bytes;
};

struct mv_prometheus {
    unsigned flags;
    struct ops_prom_store *stores;
    size_t store_count, store_cap;
    struct ops_prom_mailbox *mailboxes;
    size_t mailbox_count, mailbox_cap;
};

/* A family: name, help, how stores combine without labels, and the value of one store (0 if
 * the store has none: not inspected, or a read-only checkpoint). */
struct ops_prom_family {
    const char *name;
    const char *help;
    enum ops_prom_agg agg;
    int keyed;
    int (*get)(const struct ops_prom_store *s, double *v);
};

#define OPS_GETTER(fn, expr)                                                                       \
    static int fn(const struct ops_prom_store *s, double *v)                                       \
    {                                                                                              \
        *v = (double)(expr);                                                                       \
        return 1;                                                                                  \
    }

OPS_GETTER(ops_get_file_bytes, s->file_bytes)
OPS_GETTER(ops_get_wal_bytes, s->wal_bytes)
OPS_GETTER(ops_get_pages, s->page_count)
OPS_GETTER(ops_get_page_size, s->page_size)
OPS_GETTER(ops_get_pending, s->pending)
OPS_GETTER(ops_get_header_problem, s->header_problem)
OPS_GETTER(ops_get_mode_problem, s->mode_problem)
OPS_GETTER(ops_get_page_count, s->in.page_count)
OPS_GETTER(ops_get_freelist, s->in.freelist_count)
OPS_GETTER(ops_get_fragmentation, s->in.fragmentation)
OPS_GETTER(ops_get_messages, s->in.stats.messages)
OPS_GETTER(ops_get_mailboxes, s->in.stats.mailboxes)
OPS_GETTER(ops_get_logical, s->in.stats.logical_bytes)
OPS_GETTER(ops_get_stored, s->in.stats.stored_bytes)
OPS_GETTER(ops_get_attachments, s->in.stats.attachments)
OPS_GETTER(ops_get_kdf, s->in.kdf_iter)
OPS_GETTER(ops_get_schema, s->in.stats.schema_version)

static int ops_get_ckpt_busy(const struct ops_prom_store *s, double *v)
{
    *v = (double)s->in.checkpoint_busy;
    return s->in.checkpoint_busy >= 0;
}

static int ops_get_ckpt_log(const struct ops_prom_store *s, double *v)
{
    *v = (double)s->in.checkpoint_log_frames;
    return s->in.checkpoint_log_frames >= 0;
}

static int ops_get_ckpt_done(const struct ops_prom_store *s, double *v)
{
    *v = (double)s->in.checkpoint_done_frames;
    return s->in.checkpoint_done_frames >= 0;
}

static int ops_get_maintained(const struct ops_prom_store *s, double *v)
{
    *v = (double)s->in.last_maintain_at;
    return s->in.last_maintain_at > 0;
}

static int ops_get_quick_check(const struct ops_prom_store *s, double *v)
{
    *v = (double)s->in.last_quick_check_at;
    return s->in.last_quick_check_at > 0;
}

static int ops_get_quick_check_ok(const struct ops_prom_store *s, double *v)
{
    *v = (double)s->in.last_quick_check_ok;
    return s->in.last_quick_check_ok >= 0;
}

static const struct ops_prom_family ops_prom_families[] = {
    {"mailvault_store_file_bytes", "Size of the database file in bytes.", OPS_AGG_SUM, 0,
     ops_get_file_bytes},
    {"mailvault_store_wal_bytes", "Size of the write-ahead log in bytes.", OPS_AGG_SUM, 0,
     ops_get_wal_bytes},
    {"mailvault_store_file_pages", "Pages in the database file (its size over the page size).",
     OPS_AGG_SUM, 0, ops_get_pages},
    {"mailvault_store_page_size_bytes", "Page size in bytes.", OPS_AGG_MAX, 0, ops_get_page_size},
    {"mailvault_store_pending_deliveries", "Sealed deliveries waiting for the user's next open.",
     OPS_AGG_SUM, 0, ops_get_pending},
    {"mailvault_store_header_problem", "1 if the file header is not a known encrypted one.",
     OPS_AGG_SUM, 0, ops_get_header_problem},
    {"mailvault_store_permissions_problem",
     "1 if a file or directory of the store is open to group or others.", OPS_AGG_SUM, 0,
     ops_get_mode_problem},
    {"mailvault_store_pages", "PRAGMA page_count (with pages still in the WAL).", OPS_AGG_SUM, 1,
     ops_get_page_count},
    {"mailvault_store_freelist_pages", "PRAGMA freelist_count.", OPS_AGG_SUM, 1, ops_get_freelist},
    {"mailvault_store_fragmentation_ratio", "Free pages over all pages (0..1).", OPS_AGG_MAX, 1,
     ops_get_fragmentation},
    {"mailvault_store_messages", "Messages in the store.", OPS_AGG_SUM, 1, ops_get_messages},
    {"mailvault_store_mailboxes", "Mailboxes in the store.", OPS_AGG_SUM, 1, ops_get_mailboxes},
    {"mailvault_store_logical_bytes", "Sum of the sizes of the messages in bytes.", OPS_AGG_SUM, 1,
     ops_get_logical},
    {"mailvault_store_stored_bytes", "Bytes of bodies and attachments as stored (deduplicated).",
     OPS_AGG_SUM, 1, ops_get_stored},
    {"mailvault_store_attachments", "Distinct attachments.", OPS_AGG_SUM, 1, ops_get_attachments},
    {"mailvault_store_kdf_iterations", "KDF iterations of the store's key (lowest).", OPS_AGG_MIN,
     1, ops_get_kdf},
    {"mailvault_store_schema_version", "Schema version (lowest).", OPS_AGG_MIN, 1, ops_get_schema},
    {"mailvault_store_checkpoint_busy",
     "1 if the last PASSIVE checkpoint was blocked by readers or a writer.", OPS_AGG_SUM, 1,
     ops_get_ckpt_busy},
    {"mailvault_store_checkpoint_log_frames", "Frames in the WAL at the last PASSIVE checkpoint.",
     OPS_AGG_SUM, 1, ops_get_ckpt_log},
    {"mailvault_store_checkpoint_checkpointed_frames",
     "Frames copied into the database by the last PASSIVE checkpoint.", OPS_AGG_SUM, 1,
     ops_get_ckpt_done},
    {"mailvault_store_last_maintain_timestamp_seconds",
     "Unix time of the last maintenance (oldest).", OPS_AGG_MIN, 1, ops_get_maintained},
    {"mailvault_store_last_quick_check_timestamp_seconds",
     "Unix time of the last quick_check (oldest).", OPS_AGG_MIN, 1, ops_get_quick_check},
    {"mailvault_store_last_quick_check_ok", "1 if the last quick_check passed (lowest).",
     OPS_AGG_MIN, 1, ops_get_quick_check_ok},
};

int mv_prometheus_begin(unsigned flags, mv_prometheus **p)
{
    if (p == NULL || (flags & ~MV_PROMETHEUS_USER_LABELS) != 0) {
        return MV_EINVAL;
    }
    *p = calloc(1, sizeof **p);
    if (*p == NULL) {
        return MV_ENOMEM;
    }
    (*p)->flags = flags;
    return MV_OK;
}

/* Makes room for one more element of size elem in *array. */
static int ops_prom_grow(void **array, size_t *cap, size_t count, size_t elem)
{
    if (count < *cap) {
        return MV_OK;
    }
    size_t next = *cap != 0 ? *cap * 2 : 16;
    void *grown = realloc(*array, next * elem);
    if (grown == NULL) {
        return MV_ENOMEM;
    }
    *array = grown;
    *cap = next;
    return MV_OK;
}

int mv_prometheus_add(mv_prometheus *p,
                      const struct mv_store_file *file,
                      const struct mv_store_inspection *inspection)
{
    if (p == NULL || file == NULL) {
        return MV_EINVAL;
    }
    if (ops_prom_grow((void **)&p->stores, &p->store_cap, p->store_count, sizeof *p->stores) !=
        MV_OK) {
        return MV_ENOMEM;
    }
    struct ops_prom_store *s = &p->stores[p->store_count];
    memset(s, 0, sizeof *s);
    s->address = strdup(file->address);
    if (s->address == NULL) {
        return MV_ENOMEM;
    }
    s->file_bytes = file->file_bytes;
    s->wal_bytes = file->wal_bytes;
    s->page_count = file->page_count;
    s->page_size = file->page_size;
    s->pending = file->pending;
    s->header_problem = !file->header_ok;
    s->mode_problem = !file->modes_ok;
    s->cipher = file->cipher;
    if (inspection != NULL) {
        s->inspected = 1;
        s->in = *inspection;
    }
    p->store_count++;
    return MV_OK;
}

int mv_prometheus_add_mailbox(mv_prometheus *p,
                              const char *address,
                              const struct mv_mailbox_info *m)
{
    if (p == NULL || address == NULL || m == NULL || m->name == NULL) {
        return MV_EINVAL;
    }
    if (ops_prom_grow((void **)&p->mailboxes, &p->mailbox_cap, p->mailbox_count,
                      sizeof *p->mailboxes) != MV_OK) {
        return MV_ENOMEM;
    }
    struct ops_prom_mailbox *b = &p->mailboxes[p->mailbox_count];
    b->address = strdup(address);
    b->name = strdup(m->name);
    if (b->address == NULL || b->name == NULL) {
        free(b->address);
        free(b->name);
        return MV_ENOMEM;
    }
    b->messages = m->messages;
    b->unseen = m->unseen;
    b->size_bytes = m->size_bytes;
    b->stored_bytes = m->stored_bytes;
    p->mailbox_count++;
    return MV_OK;
}

static void ops_prom_value(FILE *out, double v)
{
    if (v < 9007199254740992.0 && v > -9007199254740992.0 && v == (double)(int64_t)v) {
        fprintf(out, " %lld\n", (long long)v);
    } else {
        fprintf(out, " %.17g\n", v);
    }
}

/* A label value with \\, \" and \n escaped. */
static void ops_prom_label(FILE *out, const char *name, const char *value, int first)
{
    fprintf(out, "%s%s=\"", first ? "" : ",", name);
    for (const char *c = value; *c != '\0'; c++) {
        if (*c == '\\' || *c == '"') {
            fputc('\\', out);
            fputc(*c, out);
        } else if (*c == '\n') {
            fputs("\\n", out);
        } else {
            fputc(*c, out);
        }
    }
    fputc('"', out);
}

static void ops_prom_header(FILE *out, const char *name, const char *help)
{
    fprintf(out, "# HELP %s %s\n# TYPE %s gauge\n", name, help, name);
}

static void
ops_prom_family_write(FILE *out, const mv_prometheus *p, const struct ops_prom_family *f)
{
    int labelled = (p->flags & MV_PROMETHEUS_USER_LABELS) != 0;
    int have = 0;
    double acc = 0;
    for (size_t i = 0; i < p->store_count; i++) {
        const struct ops_prom_store *s = &p->stores[i];
        double v = 0;
        if ((f->keyed && !s->inspected) || !f->get(s, &v)) {
            continue;
        }
        if (!have) {
            ops_prom_header(out, f->name, f->help);
        }
        if (labelled) {
            fprintf(out, "%s{", f->name);
            ops_prom_label(out, "user", s->address, 1);
            fputc('}', out);
            ops_prom_value(out, v);
        } else if (!have || f->agg == OPS_AGG_SUM) {
            acc = have ? acc + v : v;
        } else if ((f->agg == OPS_AGG_MAX && v > acc) || (f->agg == OPS_AGG_MIN && v < acc)) {
            acc = v;
        }
        have = 1;
    }
    if (have && !labelled) {
        fputs(f->name, out);
        ops_prom_value(out, acc);
    }
}

/* mailvault_stores{cipher}, mailvault_stores_inspected, and the largest store. */
static void ops_prom_counts_write(FILE *out, const mv_prometheus *p)
{
    static const mv_cipher ciphers[] = {MV_CIPHER_CHACHA20, MV_CIPHER_AES256CBC,
                                        MV_CIPHER_SQLCIPHER, MV_CIPHER_NONE, MV_CIPHER_AUTO};
    ops_prom_header(out, "mailvault_stores", "Stores, by cipher read from the plain header.");
    uint64_t inspected = 0, largest = 0;
    for (size_t c = 0; c < sizeof ciphers / sizeof ciphers[0]; c++) {
        uint64_t n = 0;
        for (size_t i = 0; i < p->store_count; i++) {
            n += p->stores[i].cipher == ciphers[c];
        }
        fputs("mailvault_stores{", out);
        ops_prom_label(out, "cipher",
                       ciphers[c] == MV_CIPHER_AUTO ? "unknown" : mv_cipher_name(ciphers[c]), 1);
        fputc('}', out);
        ops_prom_value(out, (double)n);
    }
    for (size_t i = 0; i < p->store_count; i++) {
        inspected += (uint64_t)p->stores[i].inspected;
        uint64_t size = p->stores[i].file_bytes + p->stores[i].wal_bytes;
        largest = size > largest ? size : largest;
    }
    ops_prom_header(out, "mailvault_stores_inspected",
                    "Stores opened with their password for these figures.");
    fputs("mailvault_stores_inspected", out);
    ops_prom_value(out, (double)inspected);
    ops_prom_header(out, "mailvault_store_largest_bytes",
                    "Database file plus WAL of the largest store.");
    fputs("mailvault_store_largest_bytes", out);
    ops_prom_value(out, (double)largest);
}

static void ops_prom_mailboxes_write(FILE *out, const mv_prometheus *p)
{
    static const char *const names[] = {
        "mailvault_mailbox_messages", "mailvault_mailbox_unseen_messages",
        "mailvault_mailbox_size_bytes", "mailvault_mailbox_stored_bytes"};
    static const char *const helps[] = {
        "Messages in the mailbox.", "Messages without \\\\Seen in the mailbox.",
        "Sum of the sizes of the mailbox's messages in bytes.",
        "Bytes of the bodies and attachments its messages use, as stored."};
    if (!(p->flags & MV_PROMETHEUS_USER_LABELS) || p->mailbox_count == 0) {
        return;
    }
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        ops_prom_header(out, names[k], helps[k]);
        for (size_t i = 0; i < p->mailbox_count; i++) {
            const struct ops_prom_mailbox *b = &p->mailboxes[i];
            const uint64_t values[] = {b->messages, b->unseen, b->size_bytes, b->stored_bytes};
            fprintf(out, "%s{", names[k]);
            ops_prom_label(out, "user", b->address, 1);
            ops_prom_label(out, "mailbox", b->name, 0);
            fputc('}', out);
            ops_prom_value(out, (double)values[k]);
        }
    }
}

static int ops_prom_write_all(int fd, const char *text, size_t size)
{
    while (size > 0) {
        ssize_t n = write(fd, text, size);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            return MV_EIO;
        }
        text += n;
        size -= (size_t)n;
    }
    return MV_OK;
}

int mv_prometheus_write(mv_prometheus *p, int fd)
{
    if (p == NULL) {
        return MV_EINVAL;
    }
    char *text = NULL;
    size_t size = 0;
    FILE *out = open_memstream(&text, &size);
    if (out == NULL) {
        return MV_ENOMEM;
    }
    ops_prom_counts_write(out, p);
    for (size_t i = 0; i < sizeof ops_prom_families / sizeof ops_prom_families[0]; i++) {
        ops_prom_family_write(out, p, &ops_prom_families[i]);
    }
    ops_prom_mailboxes_write(out, p);
    int failed = ferror(out);
    if (fclose(out) != 0 || failed || text == NULL) {
        free(text);
        return MV_ENOMEM;
    }
    int rc = ops_prom_write_all(fd, text, size);
    free(text);
    return rc;
}

void mv_prometheus_end(mv_prometheus **p)
{
    if (p == NULL || *p == NULL) {
        return;
    }
    mv_prometheus *m = *p;
    for (size_t i = 0; i < m->store_count; i++) {
        free(m->stores[i].address);
    }
    for (size_t i = 0; i < m->mailbox_count; i++) {
        free(m->mailboxes[i].address);
        free(m->mailboxes[i].name);
    }
    free(m->stores);
    free(m->mailboxes);
    free(m);
    *p = NULL;
}
