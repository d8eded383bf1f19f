/*
 * cli_control.c -- a running mailvaultd, through its control socket (docs/CONTROL.md):
 * `mailvault who`, `mailvault kick USER`, and the client side that `release` and `adopt`
 * (cli_move.c) use when a server runs.
 *
 * USAGE
 *   mailvault who [--json]
 *   mailvault kick alice@example.org [--wait-seconds N] [--json]
 *   (both: [--control-socket PATH] [--root DIR])
 *
 * FINDING THE SERVER
 *   --control-socket PATH, else $MAILVAULT_CONTROL_SOCKET, else ROOT/.mailvaultd.sock (the
 *   server's default for the same root). A socket that was named (option or environment)
 *   must answer: if nothing listens the command fails with EX_UNAVAILABLE (69), naming the
 *   path. The default path is used only if it exists: where it does not, or is a socket
 *   nothing listens on (a server that did not stop cleanly), there is no server, and
 *   release/adopt work on the files (who and kick fail with 69). Any other failure to
 *   connect (permissions) is an error: it may hide a running server.
 *
 * IMPLEMENTATION NOTES
 *   One request line, then "* " lines and a final "OK text" or "NO [CODE] text"; the
 *   codes map to exit codes (cli_control_code_exit). The reply is awaited with a receive
 *   timeout a little over the request's own wait, so a hung server does not hang the tool.
 */
#include "cli.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#define CLI_CONTROL_LINE_MAX  8192
#define CLI_CONTROL_MARGIN_S  30 /* over the request's own wait, for the reply */
#define CLI_KICK_WAIT_DEFAULT 10
#define CLI_KICK_WAIT_MAX     3600
#define CLI_WHO_TIMEOUT_S     30

void cli_control_close(struct cli_control *ctl)
{
    if (ctl->in != NULL) {
        fclose(ctl->in); /* closes fd too */
    } else if (ctl->fd >= 0) {
        close(ctl->fd);
    }
    ctl->in = NULL;
    ctl->fd = -1;
}

/* Connects to path; 0, or -1 with errno. */
static int cli_control_connect(struct cli_control *ctl, const char *path)
{
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    if (strlen(path) >= sizeof sa.sun_path) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(sa.sun_path, path, strlen(path) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        return -1;
    }
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    ctl->fd = fd;
    return 0;
}

/* Waits at most timeout_s for each read of the reply. */
static void cli_control_timeout(struct cli_control *ctl, int timeout_s)
{
    struct timeval tv = {.tv_sec = timeout_s, .tv_usec = 0};
    (void)setsockopt(ctl->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
}

/* One reply line without its CRLF into line; 0, or -1 (printed). */
static int cli_control_read_line(struct cli_control *ctl, char *line, size_t size)
{
    errno = 0;
    if (fgets(line, (int)size, ctl->in) == NULL) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            cli_error("%s: no answer from the server in time", ctl->path);
        } else {
            cli_error("%s: the server closed the connection%s%s", ctl->path, errno != 0 ? ": " : "",
                      errno != 0 ? strerror(errno) : "");
        }
        return -1;
    }
    size_t n = strcspn(line, "\r\n");
    if (line[n] == '\0' && n == size - 1) {
        cli_error("%s: a reply line longer than %zu bytes", ctl->path, size - 2);
        return -1;
    }
    line[n] = '\0';
    return 0;
}

int cli_control_open(const struct cli_args *args,
                     const char *root,
                     int required,
                     struct cli_control *ctl)
{
    memset(ctl, 0, sizeof *ctl);
    ctl->fd = -1;
    const char *named = args->value[CLI_OPT_CONTROL_SOCKET];
    const char *env = getenv("MAILVAULT_CONTROL_SOCKET");
    if (named != NULL && named[0] == '\0') {
        return cli_args_usage_error(args, "--control-socket: empty path");
    }
    if (named == NULL && env != NULL && env[0] != '\0') {
        named = env;
    }
    int n = named != NULL
                ? snprintf(ctl->path, sizeof ctl->path, "%s", named)
                : snprintf(ctl->path, sizeof ctl->path, "%s/%s", root, MV_CONTROL_SOCKET_NAME);
    if (n < 0 || (size_t)n >= sizeof ctl->path) {
        cli_error("control socket %s%s: longer than %zu bytes (a Unix socket's limit)",
                  named != NULL ? named : root, named != NULL ? "" : "/" MV_CONTROL_SOCKET_NAME,
                  sizeof ctl->path - 1);
        return named == args->value[CLI_OPT_CONTROL_SOCKET] && named != NULL ? CLI_EXIT_USAGE
               : named != NULL                                               ? CLI_EXIT_CONFIG
                                                                             : CLI_EXIT_UNAVAILABLE;
    }
    if (cli_control_connect(ctl, ctl->path) != 0) {
        int e = errno;
        int absent = e == ENOENT || e == ECONNREFUSED || e == ENOTDIR;
        if (named == NULL && absent && !required) {
            return CLI_CONTROL_LOCAL; /* no server for this root */
        }
        if (absent) {
            cli_error("no mailvaultd listens on %s (%s)%s", ctl->path, strerror(e),
                      named == NULL ? "; is the server running, and with this --root? "
                                      "(--control-socket PATH names another socket)"
                                    : "");
            return CLI_EXIT_UNAVAILABLE;
        }
        cli_error("cannot connect to the server's control socket %s: %s%s", ctl->path, strerror(e),
                  e == EACCES ? " (run this as the account the server runs as, or root)" : "");
        return cli_exit_errno(e, CLI_EXIT_UNAVAILABLE);
    }
    ctl->in = fdopen(ctl->fd, "r");
    if (ctl->in == NULL) {
        cli_error("out of memory");
        cli_control_close(ctl);
        return CLI_EXIT_OSERR;
    }
    cli_control_timeout(ctl, CLI_WHO_TIMEOUT_S);
    char line[256];
    if (cli_control_read_line(ctl, line, sizeof line) != 0) {
        cli_control_close(ctl);
        return CLI_EXIT_UNAVAILABLE;
    }
    if (strncmp(line, "OK ", 3) != 0) {
        cli_error("%s: not a mailvaultd control socket (it said \"%.80s\")", ctl->path, line);
        cli_control_close(ctl);
        return CLI_EXIT_UNAVAILABLE;
    }
    return CLI_EXIT_OK;
}

/* The exit code of a "NO [CODE] ..." reply. */
static int cli_control_code_exit(const char *text)
{
    static const struct {
        const char *code;
        int exit_code;
    } codes[] = {
        {"[TIMEOUT]", CLI_EXIT_TEMPFAIL}, {"[INUSE]", CLI_EXIT_TEMPFAIL},
        {"[NOUSER]", CLI_EXIT_NOUSER},    {"[BADREQUEST]", CLI_EXIT_USAGE},
        {"[ERROR]", CLI_EXIT_ERROR},
    };
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
        if (strncmp(text, codes[i].code, strlen(codes[i].code)) == 0) {
            return codes[i].exit_code;
        }
    }
    return CLI_EXIT_UNAVAILABLE; /* "server shutting down", "idle timeout" */
}

int cli_control_request(struct cli_control *ctl,
                        const char *request,
                        int timeout_s,
                        void (*on_line)(void *arg, char *line),
                        void *arg,
                        char *final,
                        size_t final_size)
{
    size_t len = strlen(request);
    if (strpbrk(request, "\r\n") != NULL || len + 1 >= 2048) {
        cli_error("the request is not one line of at most 2046 bytes");
        return CLI_EXIT_USAGE;
    }
    char *out = malloc(len + 2);
    if (out == NULL) {
        cli_error("out of memory");
        return CLI_EXIT_OSERR;
    }
    memcpy(out, request, len);
    memcpy(out + len, "\n", 2);
    ssize_t w = send(ctl->fd, out, len + 1, MSG_NOSIGNAL);
    free(out);
    if (w != (ssize_t)(len + 1)) {
        cli_error("%s: cannot send the request: %s", ctl->path, strerror(errno));
        return CLI_EXIT_UNAVAILABLE;
    }
    cli_control_timeout(ctl, timeout_s);
    char *line = malloc(CLI_CONTROL_LINE_MAX);
    if (line == NULL) {
        cli_error("out of memory");
        return CLI_EXIT_OSERR;
    }
    int rc = CLI_EXIT_UNAVAILABLE;
    while (cli_control_read_line(ctl, line, CLI_CONTROL_LINE_MAX) == 0) {
        if (strncmp(line, "* ", 2) == 0) {
            if (on_line != NULL) {
                on_line(arg, line + 2);
            }
            continue;
        }
        if (strncmp(line, "OK ", 3) == 0) {
            snprintf(final, final_size, "%s", line + 3);
            rc = CLI_EXIT_OK;
        } else if (strncmp(line, "NO ", 3) == 0) {
            const char *text = line + 3;
            rc = cli_control_code_exit(text);
            if (text[0] == '[' && strchr(text, ']') != NULL) {
                text = strchr(text, ']') + 1;
                text += *text == ' ';
            }
            cli_error("the server at %s: %s", ctl->path, text);
            snprintf(final, final_size, "%s", text);
        } else {
            cli_error("%s: an unexpected reply \"%.80s\"", ctl->path, line);
        }
        break;
    }
    free(line);
    return rc;
}

void cli_control_value_decode(char *value)
{
    if (strcmp(value, "-") == 0) {
        value[0] = '\0';
        return;
    }
    char *to = value;
    for (const char *p = value; *p != '\0'; p++) {
        unsigned hi, lo;
        if (p[0] == '%' && p[1] != '\0' && p[2] != '\0' && sscanf(p + 1, "%1x%1x", &hi, &lo) == 2) {
            *to++ = (char)(hi << 4 | lo);
            p += 2;
        } else {
            *to++ = *p;
        }
    }
    *to = '\0';
}

/* The next "key=value" word of a line being split by strtok_r at *save: the key, with *value
 * set to the decoded value (both inside the line); words without '=' are skipped; NULL at the
 * end of the line. */
static const char *cli_control_next_pair(char **save, char **value)
{
    for (char *kv; (kv = strtok_r(NULL, " ", save)) != NULL;) {
        char *eq = strchr(kv, '=');
        if (eq == NULL) {
            continue;
        }
        *eq = '\0';
        *value = eq + 1;
        cli_control_value_decode(*value);
        return kv;
    }
    return NULL;
}

/* ---- the figures of kick and release ---- */

/* "kick USER k=v ..." / "release USER k=v ...": the server's figures into the
 * cli_control_result at arg. Unknown keys are skipped (the server may add some). */
static void cli_control_figures_line(void *arg, char *line)
{
    struct cli_control_result *res = arg;
    char *save = NULL;
    const char *verb = strtok_r(line, " ", &save);
    const char *user = strtok_r(NULL, " ", &save);
    if (verb == NULL || user == NULL ||
        (strcmp(verb, "kick") != 0 && strcmp(verb, "release") != 0)) {
        return;
    }
    res->has_figures = 1;
    char *v = NULL;
    for (const char *kv; (kv = cli_control_next_pair(&save, &v)) != NULL;) {
        long long n = strtoll(v, NULL, 10);
        if (strcmp(kv, "already") == 0) {
            res->already = strcmp(v, "yes") == 0;
        } else if (strcmp(kv, "ms") == 0) {
            res->duration_ms = n;
        } else if (strcmp(kv, "sessions_ended") == 0) {
            res->sessions_ended = n;
        } else if (strcmp(kv, "sessions_left") == 0) {
            res->sessions_left = n;
        } else if (strcmp(kv, "stores_closed") == 0) {
            res->stores_closed = n;
        }
    }
}

void cli_control_json_figure(struct cli_json *j, const struct cli_control_result *res, long long n)
{
    if (res->has_figures) {
        cli_json_int(j, n);
    } else {
        cli_json_null(j); /* a server without the figures line: unknown */
    }
}

/* ---- who ---- */

struct cli_who_session {
    char protocol[8];
    char client[300];
    int64_t since;
    long long idle_s;
    char state[16];
    char mailbox[300];
};

struct cli_who_user {
    char user[MV_ADDRESS_MAX + 1];
    int has_store;
    int worker;
    int store_sessions;
    long long store_idle_s;
    struct cli_who_session *sessions;
    size_t session_count;
};

struct cli_who {
    struct cli_who_user *users;
    size_t count;
    int oom;
};

/* The entry of user, added if new; NULL when out of memory. */
static struct cli_who_user *cli_who_user(struct cli_who *who, const char *user)
{
    for (size_t i = 0; i < who->count; i++) {
        if (strcmp(who->users[i].user, user) == 0) {
            return &who->users[i];
        }
    }
    struct cli_who_user *more = realloc(who->users, (who->count + 1) * sizeof *more);
    if (more == NULL) {
        who->oom = 1;
        return NULL;
    }
    who->users = more;
    struct cli_who_user *u = &who->users[who->count++];
    memset(u, 0, sizeof *u);
    snprintf(u->user, sizeof u->user, "%s", user);
    return u;
}

/* "store USER k=v ..." or "session USER k=v ...". */
static void cli_who_line(void *arg, char *line)
{
    struct cli_who *who = arg;
    char *save = NULL;
    const char *kind = strtok_r(line, " ", &save);
    const char *user = strtok_r(NULL, " ", &save);
    if (kind == NULL || user == NULL) {
        return;
    }
    struct cli_who_user *u = cli_who_user(who, user);
    if (u == NULL) {
        return;
    }
    struct cli_who_session sess;
    memset(&sess, 0, sizeof sess);
    int is_store = strcmp(kind, "store") == 0;
    char *v = NULL;
    for (const char *kv; (kv = cli_control_next_pair(&save, &v)) != NULL;) {
        if (is_store) {
            if (strcmp(kv, "worker") == 0) {
                u->worker = (int)strtol(v, NULL, 10);
            } else if (strcmp(kv, "sessions") == 0) {
                u->store_sessions = (int)strtol(v, NULL, 10);
            } else if (strcmp(kv, "idle_s") == 0) {
                u->store_idle_s = strtoll(v, NULL, 10);
            }
        } else if (strcmp(kv, "proto") == 0) {
            snprintf(sess.protocol, sizeof sess.protocol, "%s", v);
        } else if (strcmp(kv, "client") == 0) {
            snprintf(sess.client, sizeof sess.client, "%s", v);
        } else if (strcmp(kv, "since") == 0) {
            sess.since = strtoll(v, NULL, 10);
        } else if (strcmp(kv, "idle_s") == 0) {
            sess.idle_s = strtoll(v, NULL, 10);
        } else if (strcmp(kv, "state") == 0) {
            snprintf(sess.state, sizeof sess.state, "%s", v);
        } else if (strcmp(kv, "mailbox") == 0) {
            snprintf(sess.mailbox, sizeof sess.mailbox, "%s", v);
        }
    }
    if (is_store) {
        u->has_store = 1;
        return;
    }
    struct cli_who_session *more = realloc(u->sessions, (u->session_count + 1) * sizeof *more);
    if (more == NULL) {
        who->oom = 1;
        return;
    }
    u->sessions = more;
    u->sessions[u->session_count++] = sess;
}

static int cli_who_compare(const void *a, const void *b)
{
    return strcmp(((const struct cli_who_user *)a)->user, ((const struct cli_who_user *)b)->user);
}

static void cli_who_json(const struct cli_who *who)
{
    struct cli_json j;
    cli_json_document_begin(&j, stdout);
    cli_json_key(&j, "users");
    cli_json_array_begin(&j);
    for (size_t i = 0; i < who->count; i++) {
        const struct cli_who_user *u = &who->users[i];
        cli_json_object_begin(&j);
        cli_json_key(&j, "user");
        cli_json_string(&j, u->user);
        cli_json_key(&j, "store");
        if (u->has_store) {
            cli_json_object_begin(&j);
            cli_json_key(&j, "worker");
            cli_json_int(&j, u->worker);
            cli_json_key(&j, "sessions");
            cli_json_int(&j, u->store_sessions);
            cli_json_key(&j, "idle_seconds");
            cli_json_int(&j, u->store_idle_s);
            cli_json_object_end(&j);
        } else {
            cli_json_null(&j);
        }
        cli_json_key(&j, "sessions");
        cli_json_array_begin(&j);
        for (size_t k = 0; k < u->session_count; k++) {
            const struct cli_who_session *s = &u->sessions[k];
            char since[32];
            cli_text_time_iso(s->since, since, sizeof since);
            cli_json_object_begin(&j);
            cli_json_key(&j, "protocol");
            cli_json_string(&j, s->protocol);
            cli_json_key(&j, "client");
            cli_json_string(&j, s->client);
            cli_json_key(&j, "since");
            cli_json_string(&j, since);
            cli_json_key(&j, "idle_seconds");
            cli_json_int(&j, s->idle_s);
            cli_json_key(&j, "state");
            cli_json_string(&j, s->state);
            cli_json_key(&j, "mailbox");
            cli_json_string(&j, s->mailbox[0] != '\0' ? s->mailbox : NULL);
            cli_json_object_end(&j);
        }
        cli_json_array_end(&j);
        cli_json_object_end(&j);
    }
    cli_json_array_end(&j);
    cli_json_object_end(&j);
    (void)cli_json_finish(&j);
}

static void cli_who_text(const struct cli_who *who)
{
    size_t sessions = 0;
    for (size_t i = 0; i < who->count; i++) {
        const struct cli_who_user *u = &who->users[i];
        sessions += u->session_count;
        cli_text_print(stdout, u->user, 0, 0);
        if (u->has_store) {
            printf(": store open on worker %d, ", u->worker);
            if (u->store_sessions > 0) {
                printf("in use by %d session%s\n", u->store_sessions,
                       u->store_sessions == 1 ? "" : "s");
            } else {
                printf("idle for %lld s\n", u->store_idle_s);
            }
        } else {
            printf(": store not open\n");
        }
        for (size_t k = 0; k < u->session_count; k++) {
            const struct cli_who_session *s = &u->sessions[k];
            char since[32];
            cli_text_time_iso(s->since, since, sizeof since);
            printf("  %-4s ", s->protocol);
            cli_text_print(stdout, s->client, 60, 0);
            printf("  since %s, idle %lld s, %s", since, s->idle_s, s->state);
            if (s->mailbox[0] != '\0') {
                fputs(", mailbox ", stdout);
                cli_text_print(stdout, s->mailbox, 60, 0);
            }
            fputc('\n', stdout);
        }
    }
    if (who->count == 0) {
        printf("no user has an open store or a session\n");
    } else {
        printf("%zu user%s, %zu session%s\n", who->count, who->count == 1 ? "" : "s", sessions,
               sessions == 1 ? "" : "s");
    }
}

static const struct cli_command_spec cli_who_spec = {
    "who", "who [--json] [--control-socket PATH] [--root DIR]",
    CLI_OPT(CLI_OPT_JSON) | CLI_OPT(CLI_OPT_CONTROL_SOCKET) | CLI_OPT(CLI_OPT_ROOT), 0, 0};
static const struct cli_command_spec cli_kick_spec = {
    "kick", "kick USER [--wait-seconds N] [--json] [--control-socket PATH] [--root DIR]",
    CLI_OPT(CLI_OPT_WAIT_SECONDS) | CLI_OPT(CLI_OPT_JSON) | CLI_OPT(CLI_OPT_CONTROL_SOCKET) |
        CLI_OPT(CLI_OPT_ROOT),
    1, 1};

int cli_who_main(int argc, char **argv)
{
    struct cli_args args;
    int rc = cli_args_parse(argc, argv, &cli_who_spec, &args);
    if (rc != CLI_EXIT_OK) {
        return cli_args_exit(rc);
    }
    char root[MV_PATH_MAX];
    rc = cli_store_root_dir(&args, root, sizeof root);
    if (rc != CLI_EXIT_OK) {
        return rc;
    }
    struct cli_control ctl;
    rc = cli_control_open(&args, root, 1, &ctl);
    if (rc != CLI_EXIT_OK) {
        return rc;
    }
    struct cli_who who = {0};
    char final[512] = "";
    rc = cli_control_request(&ctl, "who", CLI_WHO_TIMEOUT_S, cli_who_line, &who, final,
                             sizeof final);
    cli_control_close(&ctl);
    if (rc == CLI_EXIT_OK && who.oom) {
        cli_error("out of memory");
        rc = CLI_EXIT_OSERR;
    }
    if (rc == CLI_EXIT_OK) {
        if (who.count > 1) {
            qsort(who.users, who.count, sizeof *who.users, cli_who_compare);
        }
        if (cli_args_has(&args, CLI_OPT_JSON)) {
            cli_who_json(&who);
        } else {
            cli_who_text(&who);
        }
        rc = cli_store_flush_stdout();
    }
    for (size_t i = 0; i < who.count; i++) {
        free(who.users[i].sessions);
    }
    free(who.users);
    return rc;
}

int cli_kick_main(int argc, char **argv)
{
    struct cli_args args;
    struct cli_store_target t;
    int rc = cli_args_parse(argc, argv, &cli_kick_spec, &args);
    uint64_t wait_s = CLI_KICK_WAIT_DEFAULT;
    if (rc == CLI_EXIT_OK) {
        rc = cli_args_u64(&args, CLI_OPT_WAIT_SECONDS, 0, CLI_KICK_WAIT_MAX, &wait_s);
    }
    if (rc == CLI_EXIT_OK) {
        rc = cli_store_target(&args, &t);
    }
    if (rc != CLI_EXIT_OK) {
        return cli_args_exit(rc);
    }
    struct cli_control ctl;
    rc = cli_control_open(&args, t.root, 1, &ctl);
    if (rc != CLI_EXIT_OK) {
        return rc;
    }
    char request[MV_ADDRESS_MAX + 64];
    struct cli_control_result res;
    memset(&res, 0, sizeof res);
    snprintf(res.socket, sizeof res.socket, "%s", ctl.path);
    snprintf(request, sizeof request, "kick %s wait=%llu", t.address, (unsigned long long)wait_s);
    rc = cli_control_request(&ctl, request, (int)wait_s + CLI_CONTROL_MARGIN_S,
                             cli_control_figures_line, &res, res.text, sizeof res.text);
    cli_control_close(&ctl);
    if (rc != CLI_EXIT_OK) {
        return rc;
    }
    if (!cli_args_has(&args, CLI_OPT_JSON)) {
        printf("%s\n", res.text);
        return cli_store_flush_stdout();
    }
    struct cli_json j;
    cli_json_document_begin(&j, stdout);
    cli_json_key(&j, "user");
    cli_json_string(&j, t.address);
    cli_json_key(&j, "control_socket");
    cli_json_string(&j, res.socket);
    cli_json_key(&j, "sessions_ended");
    cli_control_json_figure(&j, &res, res.sessions_ended);
    cli_json_object_end(&j);
    if (cli_json_finish(&j) != 0) {
        cli_error("cannot write the JSON output");
        return CLI_EXIT_IOERR;
    }
    return cli_store_flush_stdout();
}

int cli_control_move(const struct cli_args *args,
                     const struct cli_store_target *t,
                     const char *verb,
                     uint32_t wait_ms,
                     struct cli_control_result *res,
                     int *handled)
{
    *handled = 0;
    memset(res, 0, sizeof *res);
    struct cli_control ctl;
    int rc = cli_control_open(args, t->root, 0, &ctl);
    if (rc == CLI_CONTROL_LOCAL) {
        return CLI_EXIT_OK; /* no server: the caller works on the files */
    }
    *handled = 1;
    if (rc != CLI_EXIT_OK) {
        return rc;
    }
    char request[2048];
    int n = snprintf(request, sizeof request, "%s %s", verb, t->address);
    if (strcmp(verb, "release") == 0) {
        n += snprintf(request + n, sizeof request - (size_t)n, " wait=%u", wait_ms / 1000);
        const char *note = args->value[CLI_OPT_NOTE];
        if (note != NULL && note[0] != '\0') {
            n += snprintf(request + n, sizeof request - (size_t)n, " note=");
            for (const char *p = note; *p != '\0' && (size_t)n + 1 < sizeof request &&
                                       (size_t)n < 200 + 64 + MV_ADDRESS_MAX;
                 p++) {
                request[n++] = (unsigned char)*p < 0x20 || *p == 0x7f ? ' ' : *p; /* one line */
            }
            request[n] = '\0';
        }
    }
    snprintf(res->socket, sizeof res->socket, "%s", ctl.path);
    rc = cli_control_request(&ctl, request, (int)(wait_ms / 1000) + CLI_CONTROL_MARGIN_S,
                             cli_control_figures_line, res, res->text, sizeof res->text);
    cli_control_close(&ctl);
    return rc;
}
