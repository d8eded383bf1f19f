/*
 * cli_repair.c -- `mailvault repair USER`: rebuilds the store's derived data (full-text
 * index, mailbox counters, uidnext / highestmodseq, reference counts) with
 * mv_store_repair(), then checks the store again (mv_store_check) and says what is left.
 *
 * USAGE
 *   mailvault repair alice@example.org --password-file pw [--json]
 *
 * IMPLEMENTATION NOTES
 *   One line per kind of repair that changed something, the full-text rows rebuilt, then
 *   the check's problems ("WHAT: DETAIL") and its summary line, as `check` prints them. Exit
 *   0 when the check afterwards is clean, 1 when the repair failed or problems remain
 *   (damaged pages: restore a backup), 2 for a usage error.
 */
#include "cli.h"

static const struct cli_command_spec cli_repair_spec = {
    "repair", "repair USER [--json]", CLI_OPTS_STORE | CLI_OPT(CLI_OPT_JSON), 1, 1};

struct cli_repair_out {
    int json;
    struct cli_json writer;
};

static void cli_repair_problem(void *arg, const char *what, const char *detail)
{
    struct cli_repair_out *out = arg;
    if (!out->json) {
        printf("%s: %s\n", what, detail);
        return;
    }
    cli_json_object_begin(&out->writer);
    cli_json_key(&out->writer, "check");
    cli_json_string(&out->writer, what);
    cli_json_key(&out->writer, "problem");
    cli_json_string(&out->writer, detail);
    cli_json_object_end(&out->writer);
}

static void cli_repair_print(const struct mv_repair_report *r)
{
    const struct {
        const char *what;
        uint32_t count;
    } lines[] = {
        {"full-text rows of removed bodies deleted", r->fts_orphans_removed},
        {"mailbox counters corrected", r->counters_fixed},
        {"mailbox uidnext raised", r->uidnext_fixed},
        {"mailbox highestmodseq raised", r->modseq_fixed},
        {"reference counts corrected", r->refcounts_fixed},
        {"header fields rows made again from the message", r->headers_rebuilt},
        {"missing full-text rows made again from the message", r->fts_rows_added},
        {"header copies made again from the message", r->header_copies_rebuilt},
        {"keywords defined in the mailbox whose message carries them", r->keywords_defined},
        {"memos of removed bodies or mailboxes deleted", r->memos_removed},
        {"attachments' line counts counted again", r->part_counts_fixed},
    };
    if (r->bodies_unreadable > 0) { /* not repaired: the check names them */
        printf("not repaired: %u bodies whose bytes are damaged (mailvault check names them)\n",
               r->bodies_unreadable);
    }
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
        if (lines[i].count > 0) {
            printf("repaired: %u %s\n", lines[i].count, lines[i].what);
        }
    }
    printf("repaired: full-text index rebuilt (%llu rows)\n", (unsigned long long)r->fts_rows);
}

static void cli_repair_json_report(struct cli_json *w, const struct mv_repair_report *r)
{
    cli_json_key(w, "fts_rows");
    cli_json_uint(w, r->fts_rows);
    cli_json_key(w, "fts_orphans_removed");
    cli_json_uint(w, r->fts_orphans_removed);
    cli_json_key(w, "counters_fixed");
    cli_json_uint(w, r->counters_fixed);
    cli_json_key(w, "uidnext_fixed");
    cli_json_uint(w, r->uidnext_fixed);
    cli_json_key(w, "modseq_fixed");
    cli_json_uint(w, r->modseq_fixed);
    cli_json_key(w, "refcounts_fixed");
    cli_json_uint(w, r->refcounts_fixed);
    cli_json_key(w, "headers_rebuilt");
    cli_json_uint(w, r->headers_rebuilt);
    cli_json_key(w, "fts_rows_added");
    cli_json_uint(w, r->fts_rows_added);
    cli_json_key(w, "header_copies_rebuilt");
    cli_json_uint(w, r->header_copies_rebuilt);
    cli_json_key(w, "bodies_unreadable");
    cli_json_uint(w, r->bodies_unreadable);
    cli_json_key(w, "keywords_defined");
    cli_json_uint(w, r->keywords_defined);
    cli_json_key(w, "memos_removed");
    cli_json_uint(w, r->memos_removed);
    cli_json_key(w, "part_counts_fixed");
    cli_json_uint(w, r->part_counts_fixed);
}

int cli_repair_main(int argc, char **argv)
{
    struct cli_args args;
    int rc = cli_args_parse(argc, argv, &cli_repair_spec, &args);
    if (rc != CLI_EXIT_OK) {
        return cli_args_exit(rc);
    }
    mv_store *store = NULL;
    if ((rc = cli_store_open_user(&args, 0, &store)) != CLI_EXIT_OK) {
        return rc;
    }
    struct cli_repair_out out = {cli_args_has(&args, CLI_OPT_JSON), {0}};
    struct mv_repair_report r;
    int mv_rc = mv_store_repair(store, &r);
    if (mv_rc != MV_OK) {
        rc = cli_store_fail(store, mv_rc);
        mv_store_close(&store);
        return rc;
    }
    struct mv_check_report c;
    if (out.json) {
        cli_json_document_begin(&out.writer, stdout);
        cli_repair_json_report(&out.writer, &r);
        cli_json_key(&out.writer, "problems");
        cli_json_array_begin(&out.writer);
    } else {
        cli_repair_print(&r);
    }
    mv_rc = mv_store_check(store, cli_repair_problem, &out, &c);
    if (out.json) {
        cli_json_array_end(&out.writer);
        cli_json_key(&out.writer, "problem_count");
        cli_json_uint(&out.writer, c.problems);
        cli_json_object_end(&out.writer);
        if (cli_json_finish(&out.writer) != 0) {
            cli_error("cannot write the JSON output");
        }
    } else if (mv_rc == MV_OK || mv_rc == MV_ECORRUPT) {
        printf("check afterwards: %u problem%s%s\n", c.problems, c.problems == 1 ? "" : "s",
               c.problems > 0 ? " left (damaged pages: restore a backup)" : "");
    }
    rc = cli_store_flush_stdout();
    if (mv_rc != MV_OK) {
        rc = cli_store_fail(store, mv_rc);
    }
    mv_store_close(&store);
    return rc;
}
