/*
 * cli_stats.c -- `mailvault stats USER|--all [--json|--prometheus [--with-user-labels]]`.
 *
 * USAGE
 *   mailvault stats alice@example.org --password-file pw    everything, with the password
 *   mailvault stats --all --prometheus > /var/lib/node_exporter/mailvault.prom.$$ && mv ...
 *
 * IMPLEMENTATION NOTES
 *   With USER the store is described keylessly first (its queue is counted before the open
 *   drains it), then opened with the password and inspected (mv_store_inspect: PRAGMA
 *   figures, sizes, cipher, KDF, a PASSIVE checkpoint, maintenance history) and its
 *   mailboxes listed. With --all no password exists (the service never stores one), so only
 *   what a store shows without its key is reported, for every store under the root
 *   (mv_root_scan_*): a few system calls per store, no SQLite, no KDF; the keyed fields are
 *   named as needing the password. Prometheus output carries no address unless
 *   --with-user-labels is given (docs/OPERATIONS.md, "Statistics and monitoring").
 *   This file also holds the helpers the other operations commands share (cli.h).
 */
#include "cli.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const struct cli_command_spec cli_stats_spec = {
    "stats", "stats USER|--all [--json|--prometheus [--with-user-labels]]",
    CLI_OPTS_STORE | CLI_OPT(CLI_OPT_ALL) | CLI_OPT(CLI_OPT_JSON) | CLI_OPT(CLI_OPT_PROMETHEUS) |
        CLI_OPT(CLI_OPT_WITH_USER_LABELS),
    0, 1};

/* The keyed figures --all cannot give, named in its output. */
static const char cli_stats_keyed[] =
    "messages, mailboxes, sizes inside the store, page_count and freelist_count with the WAL, "
    "KDF iterations, checkpoint result, maintenance history";

int cli_ops_root(const struct cli_args *args, char *root, struct mv_store_options *opts)
{
    static const struct mv_store_options defaults = MV_STORE_OPTIONS_INIT;
    const char *dir = args->value[CLI_OPT_ROOT];
    if (dir != NULL && dir[0] == '\0') {
        return cli_args_usage_error(args, "--root: empty directory name");
    }
    if (dir == NULL || dir[0] == '\0') {
        dir = getenv("MAILVAULT_ROOT");
    }
    if (dir == NULL || dir[0] == '\0') {
        dir = "./var/mail";
    }
    if (strlen(dir) >= MV_PATH_MAX) {
        cli_error("the root directory name is longer than %d bytes", MV_PATH_MAX - 1);
        return CLI_EXIT_DATA;
    }
    snprintf(root, MV_PATH_MAX, "%s", dir);
    *opts = defaults;
    opts->root = root;
    return CLI_EXIT_OK;
}

int cli_ops_user_or_all(const struct cli_args *args)
{
    int all = cli_args_has(args, CLI_OPT_ALL);
    if (all && args->positional_count > 0) {
        return cli_args_usage_error(args, "give USER or --all, not both");
    }
    if (!all && args->positional_count == 0) {
        return cli_args_usage_error(args, "missing USER (or --all)");
    }
    return CLI_EXIT_OK;
}

static const char *cli_stats_cipher(mv_cipher cipher)
{
    return cipher == MV_CIPHER_AUTO ? "unknown" : mv_cipher_name(cipher);
}

/* ---- --prometheus ---- */

static int cli_stats_prometheus_write(mv_prometheus *p)
{
    int rc = cli_store_flush_stdout();
    if (rc != CLI_EXIT_OK) {
        return rc;
    }
    rc = mv_prometheus_write(p, STDOUT_FILENO);
    if (rc != MV_OK) {
        cli_error("cannot write the metrics: %s", mv_strerror(rc));
        return cli_exit_code(rc);
    }
    return CLI_EXIT_OK;
}

static unsigned cli_stats_prometheus_flags(const struct cli_args *args)
{
    return cli_args_has(args, CLI_OPT_WITH_USER_LABELS) ? MV_PROMETHEUS_USER_LABELS : 0;
}

/* ---- --all ---- */

static void cli_stats_file_json(struct cli_json *json, const struct mv_store_file *f)
{
    cli_json_object_begin(json);
    cli_json_key(json, "address");
    cli_json_string(json, f->address);
    cli_json_key(json, "file");
    cli_json_string(json, f->db_path);
    static const char *const keys[] = {"file_bytes", "wal_bytes", "page_size_bytes", "page_count",
                                       "pending"};
    const uint64_t values[] = {f->file_bytes, f->wal_bytes, f->page_size, f->page_count,
                               f->pending};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        cli_json_key(json, keys[i]);
        cli_json_uint(json, values[i]);
    }
    cli_json_key(json, "reserve_bytes");
    cli_json_int(json, f->reserve_bytes);
    cli_json_key(json, "cipher");
    cli_json_string(json, cli_stats_cipher(f->cipher));
    cli_json_key(json, "header_ok");
    cli_json_bool(json, f->header_ok);
    cli_json_key(json, "permissions_ok");
    cli_json_bool(json, f->modes_ok);
    cli_json_key(json, "permissions_problem");
    cli_json_string(json, f->modes_ok ? NULL : f->mode_problem);
    cli_json_object_end(json);
}

static void cli_stats_file_line(const struct mv_store_file *f)
{
    char file[16], wal[16];
    cli_text_size(f->file_bytes, file, sizeof file);
    cli_text_size(f->wal_bytes, wal, sizeof wal);
    printf("%-40s %-9s %6u %9llu %10s %10s %7lu  %s\n", f->address, cli_stats_cipher(f->cipher),
           f->page_size, (unsigned long long)f->page_count, file, wal, (unsigned long)f->pending,
           !f->header_ok  ? "BAD HEADER"
           : !f->modes_ok ? f->mode_problem
                          : "ok");
}

enum cli_stats_mode { CLI_STATS_HUMAN, CLI_STATS_JSON, CLI_STATS_PROMETHEUS };

struct cli_stats_out {
    enum cli_stats_mode mode;
    struct cli_json json;
    mv_prometheus *prom;
    uint64_t count;
};

static int cli_stats_out_begin(struct cli_stats_out *out, const struct cli_args *args)
{
    memset(out, 0, sizeof *out);
    out->mode = cli_args_has(args, CLI_OPT_JSON)         ? CLI_STATS_JSON
                : cli_args_has(args, CLI_OPT_PROMETHEUS) ? CLI_STATS_PROMETHEUS
                                                         : CLI_STATS_HUMAN;
    if (out->mode == CLI_STATS_PROMETHEUS) {
        int rc = mv_prometheus_begin(cli_stats_prometheus_flags(args), &out->prom);
        return rc == MV_OK ? CLI_EXIT_OK : cli_store_fail_msg(NULL, rc);
    }
    cli_json_init(&out->json, stdout);
    return CLI_EXIT_OK;
}

static void cli_stats_all_begin(struct cli_stats_out *out, const char *root)
{
    if (out->mode == CLI_STATS_JSON) {
        cli_json_document_begin(&out->json, stdout);
        cli_json_key(&out->json, "root");
        cli_json_string(&out->json, root);
        cli_json_key(&out->json, "stores");
        cli_json_array_begin(&out->json);
    } else if (out->mode == CLI_STATS_HUMAN) {
        printf("%-40s %-9s %6s %9s %10s %10s %7s  %s\n", "STORE", "CIPHER", "PAGE", "PAGES", "FILE",
               "WAL", "PENDING", "HEADER/PERMISSIONS");
    }
}

static int cli_stats_all_add(struct cli_stats_out *out, const struct mv_store_file *f)
{
    out->count++;
    if (out->mode == CLI_STATS_JSON) {
        cli_stats_file_json(&out->json, f);
    } else if (out->mode == CLI_STATS_HUMAN) {
        cli_stats_file_line(f);
    } else {
        int rc = mv_prometheus_add(out->prom, f, NULL);
        if (rc != MV_OK) {
            return cli_store_fail_msg(NULL, rc);
        }
    }
    return CLI_EXIT_OK;
}

static int cli_stats_all_finish(struct cli_stats_out *out)
{
    if (out->mode == CLI_STATS_PROMETHEUS) {
        return cli_stats_prometheus_write(out->prom);
    }
    if (out->mode == CLI_STATS_HUMAN) {
        printf("%llu stores. Without the password only the file is readable: %s need each "
               "user's password (mailvault stats USER).\n",
               (unsigned long long)out->count, cli_stats_keyed);
        return cli_store_flush_stdout();
    }
    cli_json_array_end(&out->json);
    cli_json_key(&out->json, "count");
    cli_json_uint(&out->json, out->count);
    cli_json_key(&out->json, "needs_password");
    cli_json_string(&out->json, cli_stats_keyed);
    cli_json_object_end(&out->json);
    if (cli_json_finish(&out->json) != 0) {
        cli_error("cannot write the JSON output");
        return CLI_EXIT_IOERR;
    }
    return cli_store_flush_stdout();
}

/* Every store under the root, keyless. */
static int cli_stats_all(const struct cli_args *args)
{
    char root[MV_PATH_MAX];
    struct mv_store_options opts;
    struct cli_stats_out out;
    int rc = cli_ops_root(args, root, &opts);
    if (rc == CLI_EXIT_OK) {
        rc = cli_stats_out_begin(&out, args);
    }
    if (rc != CLI_EXIT_OK) {
        return rc;
    }
    mv_root_scan *scan = NULL;
    int mv_rc = mv_root_scan_begin(&opts, &scan);
    if (mv_rc != MV_OK) {
        mv_prometheus_end(&out.prom);
        cli_error("%s: %s", root, mv_strerror(mv_rc));
        return mv_rc == MV_ENOTFOUND ? CLI_EXIT_NOINPUT : cli_exit_code(mv_rc);
    }
    cli_stats_all_begin(&out, root);
    struct mv_store_file f;
    while (rc == CLI_EXIT_OK && (mv_rc = mv_root_scan_next(scan, &f)) == 1) {
        rc = cli_stats_all_add(&out, &f);
    }
    mv_root_scan_end(&scan);
    if (rc == CLI_EXIT_OK && mv_rc < 0) {
        cli_error("reading the stores under %s: %s", root, mv_strerror(mv_rc));
        rc = cli_exit_code(mv_rc);
    }
    if (rc == CLI_EXIT_OK) {
        rc = cli_stats_all_finish(&out);
    }
    mv_prometheus_end(&out.prom);
    return rc;
}

/* ---- USER ---- */

struct cli_stats_user {
    const struct cli_store_target *target;
    struct mv_store_file file;
    struct mv_store_inspection in;
};

static void cli_stats_time(const char *label, int64_t when, const char *suffix)
{
    char iso[32];
    if (when <= 0) {
        printf("%-24s never\n", label);
        return;
    }
    cli_text_time_iso(when, iso, sizeof iso);
    printf("%-24s %s%s\n", label, iso, suffix);
}

static void cli_stats_size(const char *label, uint64_t size_bytes)
{
    char human[32];
    cli_text_size(size_bytes, human, sizeof human);
    printf("%-24s %llu (%s)\n", label, (unsigned long long)size_bytes, human);
}

static int cli_stats_user_human(mv_store *store, const struct cli_stats_user *u)
{
    const struct mv_store_inspection *in = &u->in;
    printf("%-24s %s\n%-24s %s\n", "store", u->target->address, "file", u->target->db_path);
    printf("%-24s %s (KDF %lu iterations)\n", "cipher", cli_stats_cipher(in->cipher),
           (unsigned long)in->kdf_iter);
    printf("%-24s %d\n%-24s %lu\n", "schema version", in->stats.schema_version, "page size",
           (unsigned long)in->page_size);
    printf("%-24s %llu (freelist %llu, fragmentation %.1f%%)\n", "pages",
           (unsigned long long)in->page_count, (unsigned long long)in->freelist_count,
           in->fragmentation * 100.0);
    cli_stats_size("file size", in->file_bytes);
    cli_stats_size("WAL size", in->wal_bytes);
    cli_stats_size("logical size", in->stats.logical_bytes);
    cli_stats_size("stored size", in->stats.stored_bytes);
    printf("%-24s %llu in %lu mailboxes\n", "messages", (unsigned long long)in->stats.messages,
           (unsigned long)in->stats.mailboxes);
    printf("%-24s %lu (before this open)\n", "pending deliveries", (unsigned long)u->file.pending);
    printf("%-24s busy %d, log %lld frames, checkpointed %lld\n", "checkpoint (PASSIVE)",
           in->checkpoint_busy, (long long)in->checkpoint_log_frames,
           (long long)in->checkpoint_done_frames);
    cli_stats_time("last maintenance", in->last_maintain_at, "");
    cli_stats_time("last quick_check", in->last_quick_check_at,
                   in->last_quick_check_ok == 1 ? " ok" : " FOUND PROBLEMS");
    printf("%-24s %s\n", "permissions", u->file.modes_ok ? "ok" : u->file.mode_problem);
    mv_mailbox_iter *it = NULL;
    struct mv_mailbox_info m;
    int rc = mv_mailbox_list_begin(store, &it), more = 0;
    printf("%-24s %8s %8s %14s\n", "MAILBOX", "MESSAGES", "UNSEEN", "SIZE");
    while (rc == MV_OK && (more = mv_mailbox_list_next(it, &m)) == 1) {
        printf("  ");
        cli_text_print(stdout, m.name, 22, 22);
        printf(" %8lu %8lu %14llu\n", (unsigned long)m.messages, (unsigned long)m.unseen,
               (unsigned long long)m.size_bytes);
    }
    mv_mailbox_list_end(&it);
    rc = rc == MV_OK ? (more < 0 ? more : MV_OK) : rc;
    return rc == MV_OK ? cli_store_flush_stdout() : cli_store_fail(store, rc);
}

/* A time as an ISO 8601 UTC string, or null for 0 (never), as every --json date. */
static void cli_stats_json_time(struct cli_json *json, const char *key, int64_t unix_seconds)
{
    cli_json_key(json, key);
    if (unix_seconds <= 0) {
        cli_json_null(json);
        return;
    }
    char text[32];
    cli_text_time_iso(unix_seconds, text, sizeof text);
    cli_json_string(json, text);
}

static void cli_stats_user_json_fields(struct cli_json *json, const struct cli_stats_user *u)
{
    const struct mv_store_inspection *in = &u->in;
    static const char *const keys[] = {"page_size_bytes", "page_count",    "freelist_count",
                                       "file_bytes",      "wal_bytes",     "messages",
                                       "mailboxes",       "logical_bytes", "stored_bytes",
                                       "attachments",     "pending",       "kdf_iterations"};
    const uint64_t values[] = {
        in->page_size,          in->page_count,        in->freelist_count,  in->file_bytes,
        in->wal_bytes,          in->stats.messages,    in->stats.mailboxes, in->stats.logical_bytes,
        in->stats.stored_bytes, in->stats.attachments, u->file.pending,     in->kdf_iter};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        cli_json_key(json, keys[i]);
        cli_json_uint(json, values[i]);
    }
    static const char *const ikeys[] = {"schema_version", "checkpoint_log_frames",
                                        "checkpoint_checkpointed_frames"};
    const int64_t ivalues[] = {in->stats.schema_version, in->checkpoint_log_frames,
                               in->checkpoint_done_frames};
    for (size_t i = 0; i < sizeof ikeys / sizeof ikeys[0]; i++) {
        cli_json_key(json, ikeys[i]);
        cli_json_int(json, ivalues[i]);
    }
    cli_json_key(json, "checkpoint_busy");
    cli_json_bool(json, in->checkpoint_busy);
    cli_stats_json_time(json, "last_maintain_at", in->last_maintain_at);
    cli_stats_json_time(json, "last_quick_check_at", in->last_quick_check_at);
    cli_json_key(json, "last_quick_check_ok"); /* null: never ran */
    if (in->last_quick_check_ok < 0) {
        cli_json_null(json);
    } else {
        cli_json_bool(json, in->last_quick_check_ok);
    }
    /* freelist_count / page_count in millionths: the JSON writer prints integers only. */
    cli_json_key(json, "fragmentation_ppm");
    cli_json_uint(json, in->page_count > 0 ? in->freelist_count * 1000000u / in->page_count : 0);
}

static int cli_stats_user_json(mv_store *store, const struct cli_stats_user *u)
{
    struct cli_json json;
    cli_json_document_begin(&json, stdout);
    cli_json_key(&json, "address");
    cli_json_string(&json, u->target->address);
    cli_json_key(&json, "file");
    cli_json_string(&json, u->target->db_path);
    cli_json_key(&json, "cipher");
    cli_json_string(&json, cli_stats_cipher(u->in.cipher));
    cli_stats_user_json_fields(&json, u);
    cli_json_key(&json, "permissions_ok");
    cli_json_bool(&json, u->file.modes_ok);
    cli_json_key(&json, "mailboxes_detail");
    cli_json_array_begin(&json);
    mv_mailbox_iter *it = NULL;
    struct mv_mailbox_info m;
    int rc = mv_mailbox_list_begin(store, &it), more = 0;
    while (rc == MV_OK && (more = mv_mailbox_list_next(it, &m)) == 1) {
        cli_json_object_begin(&json);
        cli_json_key(&json, "name");
        cli_json_string(&json, m.name);
        static const char *const keys[] = {"messages", "unseen", "size_bytes", "stored_bytes"};
        const uint64_t values[] = {m.messages, m.unseen, m.size_bytes, m.stored_bytes};
        for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
            cli_json_key(&json, keys[i]);
            cli_json_uint(&json, values[i]);
        }
        cli_json_object_end(&json);
    }
    mv_mailbox_list_end(&it);
    cli_json_array_end(&json);
    cli_json_object_end(&json);
    rc = rc == MV_OK ? (more < 0 ? more : MV_OK) : rc;
    if (rc != MV_OK) {
        return cli_store_fail(store, rc);
    }
    if (cli_json_finish(&json) != 0) {
        cli_error("cannot write the JSON output");
        return CLI_EXIT_IOERR;
    }
    return cli_store_flush_stdout();
}

static int cli_stats_user_prometheus(mv_store *store,
                                     const struct cli_args *args,
                                     const struct cli_stats_user *u)
{
    mv_prometheus *p = NULL;
    mv_mailbox_iter *it = NULL;
    struct mv_mailbox_info m;
    int rc = mv_prometheus_begin(cli_stats_prometheus_flags(args), &p), more = 0;
    if (rc == MV_OK) {
        rc = mv_prometheus_add(p, &u->file, &u->in);
    }
    if (rc == MV_OK && cli_args_has(args, CLI_OPT_WITH_USER_LABELS)) {
        rc = mv_mailbox_list_begin(store, &it);
        while (rc == MV_OK && (more = mv_mailbox_list_next(it, &m)) == 1) {
            rc = mv_prometheus_add_mailbox(p, u->target->address, &m);
        }
        mv_mailbox_list_end(&it);
        rc = rc == MV_OK && more < 0 ? more : rc;
    }
    int exit_rc = rc == MV_OK ? cli_stats_prometheus_write(p) : cli_store_fail(store, rc);
    mv_prometheus_end(&p);
    return exit_rc;
}

static int cli_stats_user(const struct cli_args *args)
{
    struct cli_store_target target;
    struct cli_stats_user u;
    memset(&u, 0, sizeof u);
    u.target = &target;
    int rc = cli_store_target(args, &target);
    if (rc == CLI_EXIT_OK) {
        rc = cli_store_check(&target, 1);
    }
    int mv_rc =
        rc == CLI_EXIT_OK ? mv_store_file_inspect(target.address, &target.opts, &u.file) : MV_OK;
    if (rc == CLI_EXIT_OK && mv_rc != MV_OK) {
        rc = cli_store_fail_msg(NULL, mv_rc);
    }
    mv_store *store = NULL;
    if (rc == CLI_EXIT_OK) {
        rc = cli_store_open(args, &target, 0, &store);
    }
    if (rc != CLI_EXIT_OK) {
        return rc;
    }
    mv_rc = mv_store_inspect(store, &u.in);
    if (mv_rc != MV_OK) {
        rc = cli_store_fail(store, mv_rc);
    } else if (cli_args_has(args, CLI_OPT_JSON)) {
        rc = cli_stats_user_json(store, &u);
    } else if (cli_args_has(args, CLI_OPT_PROMETHEUS)) {
        rc = cli_stats_user_prometheus(store, args, &u);
    } else {
        rc = cli_stats_user_human(store, &u);
    }
    mv_store_close(&store);
    return rc;
}

int cli_stats_main(int argc, char **argv)
{
    struct cli_args args;
    int rc = cli_args_parse(argc, argv, &cli_stats_spec, &args);
    if (rc != CLI_EXIT_OK) {
        return cli_args_exit(rc);
    }
    if ((rc = cli_ops_user_or_all(&args)) != CLI_EXIT_OK) {
        return rc;
    }
    if (cli_args_has(&args, CLI_OPT_JSON) && cli_args_has(&args, CLI_OPT_PROMETHEUS)) {
        return cli_args_usage_error(&args, "--json and --prometheus exclude each other");
    }
    if (cli_args_has(&args, CLI_OPT_WITH_USER_LABELS) && !cli_args_has(&args, CLI_OPT_PROMETHEUS)) {
        return cli_args_usage_error(&args, "--with-user-labels goes with --prometheus");
    }
    return cli_args_has(&args, CLI_OPT_ALL) ? cli_stats_all(&args) : cli_stats_user(&args);
}
