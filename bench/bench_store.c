/*
 * bench_store.c -- the per-user mail store under a realistic workload: delivery, sealed
 * delivery and its drain, fetch, flag changes, search over a large mailbox, open time with
 * its key-derivation share, and the peak memory of importing a large mbox.
 *
 * USAGE
 *   build/rel/bench/bench_store [--quick] [--messages N] [--search-messages N]
 *                               [--import-mb N] [--rounds R] [--dir DIR] [--only PHASE]
 *                               [--json PATH]
 *     --quick              scaled-down counts (stated in the store.params line), about 13 s
 *                          instead of 7 min: 700 messages, 2000 for search, imports of 24
 *                          and 48 MB with an 8 MiB page cache, 3 rounds
 *     --messages N         the delivered corpus (default 10000)
 *     --search-messages N  the mailbox searched (default 100000)
 *     --import-mb N        the large mbox in MB (default 1024, quick 48); the small one is
 *                          a tenth of it but at least 100 MB (quick: half), so that both
 *                          stores outgrow the page cache and the comparison is fair (quick
 *                          imports open their stores with an 8 MiB page cache, which 24 MB
 *                          of input outgrows twice over; the default cache, 45-64 MiB, would
 *                          need 100 MB and more, which was most of the quick run's time)
 *     --rounds R           rounds of the repeated phases (default 5)
 *     --dir DIR            parent of the scratch directory (default $TMPDIR, else ./var/bench)
 *     --only PHASE         deliver, open, sealed, fetch, flags, expunge, search or import
 *                          (for profiling); open, sealed, fetch, flags and expunge first
 *                          build the delivered store (and print its figures)
 *     --json PATH          where the figures go (default build/bench-results/store.json)
 *
 * THE CORPUS (generated, fixed seed, one message at a time: nothing holds the corpus)
 *   Sizes: text messages log-normal around 9 KB (2 KB .. 256 KB); 10% carry a base64
 *   attachment (the message log-uniform 50 KB .. 2 MB, message 3 always the largest), and 30%
 *   of those forward an earlier attachment byte for byte, so deduplication has work. Bodies
 *   are multipart/alternative text + html of Zipf-distributed words from a 20000-word
 *   vocabulary; From/To/Cc with display names from 300 contacts (Zipf: some write often);
 *   Date spread over two years; Message-ID; 35% are replies with In-Reply-To and References
 *   forming threads ("Re: " subjects). The search corpus is the same without attachments,
 *   2 .. 16 KB; the import corpus is the full distribution, written as an mbox.
 *
 * PHASES AND OUTPUT (one "name value [(min a max b)] [(p50 x ms p99 y ms)] [note]" line each)
 *   deliver  mv_store_init (default KDF), mv_store_open (the library's profile), then every
 *            message through mv_message_append into INBOX. store.deliver.msgs_per_s and
 *            mb_per_s count time inside the call only; min/max are over ten slices of the
 *            corpus; p50/p99 per message. Also the stored/logical ratio (dedup + zstd).
 *   open     per round, in rotated order: mv_store_open of the delivered store; mv_db_open of
 *            a tiny chacha20 file with the default KDF and with kdf_iter 1; PBKDF2-HMAC-SHA256
 *            alone (64007 iterations, OpenSSL). 3 x R rounds. store.open.kdf_ms = default -
 *            kdf_iter 1; kdf_share pairs it with the open of the same round.
 *   sealed   mv_deliver_sealed of 10% of the corpus size (at most 1000, new messages), each
 *            fsync'd; then the drain: the next mv_store_open, less the median open time.
 *   fetch, flags   interleaved rounds: random UIDs through mv_message_fetch (the first
 *            fetches checked byte for byte); mv_flags_set on single UIDs (every call
 *            changes one message) and on 100-UID ranges.
 *   expunge  on the delivered store, after fetch and flags (it removes messages): single
 *            UIDs (+\Deleted on one UID, then mv_mailbox_expunge of it: an IMAP client
 *            deleting one message) and 100-UID ranges, each call timed as flag change +
 *            expunge; p50/p99 per call; the file size before and after.
 *   search   a store of --search-messages small messages, built through mv_import of an
 *            mbox (one transaction per batch: the quick way in), the oldest 70% marked
 *            \Seen; then rounds of four query types in rotated order, all scoped to INBOX:
 *            from (substring of a sender address), text (one word), text (two words), a
 *            30-day date range + UNSEEN. p50/p99 per type, results per query.
 *   import   mbox files of the small and the large size, written to the scratch
 *            directory (streamed; the small one is the large one's first part, with the
 *            same largest message), each imported by mv_import into a new store in a child
 *            (fork + exec of this program with --import-child, so its VmHWM starts from a
 *            fresh image, not from this process's heap) that sends its VmHWM back through
 *            a pipe. The first and last tenth's MB/s come from the progress callback. The
 *            stores of the other phases are removed first. The design bound is page cache +
 *            about 4 x the largest message; the check is that the large import's peak is
 *            within 16 MiB of the small one's. With less than 3 x the large size free on
 *            disk the large size is scaled down (said in a note).
 *
 * IMPLEMENTATION NOTES
 *   - Only the public API (mailvault.h), libc and OpenSSL (PBKDF2 alone).
 *   - rand() is banned: a xorshift64* generator per message, seeded from (corpus, index),
 *     so any message can be regenerated (fetch checks) without holding the corpus.
 *   - No libm in the link: exp/log are computed here (range reduction + series / Halley).
 *   - The import child never runs the parent's atexit cleanup (exec, then _exit()).
 *   - The load average is printed at the start and the end: the machine may be shared.
 *
 * LIMITATIONS
 *   Absolute figures depend on the disk (sealed delivery and the drain fsync per message)
 *   and on the machine. One run per import size: the memory figure is a peak, not a rate.
 */
#include "buf.h"
#include "mailvault.h"
#include "scratch.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#define BENCH_SEED              0x6d61696c7661756cu /* "mailvaul" */
#define BENCH_ROUNDS_MAX        99
#define BENCH_COUNT_MAX         10000000L
#define BENCH_IMPORT_MB_MAX     65536L
#define BENCH_PATH_BYTES_MAX    4096
#define BENCH_FIGURES_MAX       96
#define BENCH_SLICES            10 /* deliver: min/max over this many slices */
#define BENCH_VOCAB_WORDS       20000
#define BENCH_WORD_BYTES_MAX    16
#define BENCH_CONTACTS          300
#define BENCH_MESSAGE_BYTES_MAX (2u << 20)
#define BENCH_ATTACH_BYTES_MIN  (50u * 1024u)
#define BENCH_ATTACH_BYTES_MAX  (BENCH_MESSAGE_BYTES_MAX - 16u * 1024u) /* base64 text */
#define BENCH_LARGEST_INDEX     3u /* the message that always has the largest attachment */
#define BENCH_SPAN_S            (2L * 365 * 86400)
#define BENCH_DATE_LAST         1767139200L /* 2025-12-31 00:00:00 UTC */
#define BENCH_RANGE_UIDS        100
#define BENCH_CHECKED_FETCHES   20
#define BENCH_MEMORY_SLACK_MIB  16.0
#define BENCH_QUICK_CACHE_KIB   8192L /* --quick imports' page cache (see --import-mb) */
#define BENCH_MIB               1048576.0
#define BENCH_NONE              UINT32_MAX

int main(int argc, char **argv);

static const char bench_password[] = "bench password";
static const char bench_user[] = "bench@example.org";

enum bench_phase {
    PHASE_DELIVER,
    PHASE_OPEN,
    PHASE_SEALED,
    PHASE_FETCH,
    PHASE_FLAGS,
    PHASE_EXPUNGE,
    PHASE_SEARCH,
    PHASE_IMPORT,
    PHASE_COUNT
};
static const char *const bench_phase_names[PHASE_COUNT] = {
    "deliver", "open", "sealed", "fetch", "flags", "expunge", "search", "import"};

struct bench_opts {
    int quick;
    uint32_t messages;
    uint32_t search_messages;
    long import_mb;
    int rounds;
    const char *parent_dir;
    const char *json_path;
    int only; /* -1: every phase */
};

/* One printed figure, kept for the JSON file. */
struct bench_figure {
    char name[64];
    double value;
    const char *unit;
    int has_range, has_latency;
    double min, max, p50_ms, p99_ms;
    char note[BENCH_NOTE_BYTES];
};

static struct bench_figure bench_figures[BENCH_FIGURES_MAX];
static int bench_figure_count;
static char bench_dir[BENCH_PATH_BYTES_MAX];  /* scratch directory; "" until made */
static char bench_root[BENCH_PATH_BYTES_MAX]; /* store root inside it */
static struct bench_opts bench_opts;

/* ---- small utilities --------------------------------------------------------------------- */

static void bench_path(char *out, size_t size, const char *name)
{
    int len = snprintf(out, size, "%s/%s", bench_dir, name);
    if (len < 0 || (size_t)len >= size) {
        bench_die("scratch path too long");
    }
}

/* ---- random numbers and the two functions libm would give -------------------------------- */

/* The generator for item index of stream: the same numbers on every run. */
static struct bench_rng bench_rng_for(uint64_t stream, uint64_t index)
{
    return bench_rng_seeded(
        bench_rng_mix(BENCH_SEED ^ bench_rng_mix(stream) ^ (index * 0x2545f4914f6cdd1du)));
}

/* e^x for |x| < ~700: e^(x/1024) by its series, squared ten times (relative error ~1e-11). */
static double bench_exp(double x)
{
    double y = x / 1024.0;
    double r = 1.0 + y * (1.0 + y / 2.0 * (1.0 + y / 3.0 * (1.0 + y / 4.0 * (1.0 + y / 5.0))));
    for (int i = 0; i < 10; i++) {
        r *= r;
    }
    return r;
}

/* ln x for x > 0: halve into [1, 2), then Halley's iteration on e^y = x. */
static double bench_log(double x)
{
    double k = 0;
    while (x >= 2.0) {
        x /= 2.0;
        k += 1.0;
    }
    while (x < 1.0) {
        x *= 2.0;
        k -= 1.0;
    }
    double y = x - 1.0;
    for (int i = 0; i < 6; i++) {
        double e = bench_exp(y);
        y += 2.0 * (x - e) / (x + e);
    }
    return y + k * 0.69314718055994530942;
}

/* Standard normal, approximately (Irwin-Hall: twelve uniforms). */
static double bench_rng_normal(struct bench_rng *r)
{
    double sum = 0;
    for (int i = 0; i < 12; i++) {
        sum += bench_rng_unit(r);
    }
    return sum - 6.0;
}

/* Log-normal around median with spread sigma, clipped to [lo, hi]. */
static double
bench_rng_lognormal(struct bench_rng *r, double median, double sigma, double lo, double hi)
{
    double v = median * bench_exp(sigma * bench_rng_normal(r));
    return v < lo ? lo : v > hi ? hi : v;
}

/* Log-uniform in [lo, hi). */
static double bench_rng_loguniform(struct bench_rng *r, double lo, double hi)
{
    return lo * bench_exp(bench_rng_unit(r) * bench_log(hi / lo));
}

/* A Zipf-like rank in [0, n): P(rank) ~ 1/(rank + 1). */
static uint32_t bench_rng_zipf(struct bench_rng *r, uint32_t n)
{
    static uint32_t memo_n[4];
    static double memo_ln[4];
    uint32_t slot = n % 4;
    if (memo_n[slot] != n) { /* ln(n + 1) once per n: the generator's hottest path */
        memo_n[slot] = n;
        memo_ln[slot] = bench_log((double)n + 1.0);
    }
    double v = bench_exp(bench_rng_unit(r) * memo_ln[slot]) - 1.0;
    uint32_t rank = (uint32_t)v;
    return rank < n ? rank : n - 1;
}

/* ---- statistics ---------------------------------------------------------------------------- */

/* Latencies in seconds: p50 and p99 in milliseconds (sorts the array). */
struct bench_latency {
    double p50_ms, p99_ms;
};

static struct bench_latency bench_latency_of(double *seconds, size_t count)
{
    struct bench_latency l;
    l.p50_ms = bench_quantile(seconds, count, 0.50) * 1e3;
    l.p99_ms = bench_quantile(seconds, count, 0.99) * 1e3;
    return l;
}

static double *bench_alloc_doubles(size_t count)
{
    return bench_alloc(count * sizeof(double));
}

/* ---- reporting ----------------------------------------------------------------------------- */

static void bench_format(char *out, size_t size, double v)
{
    double a = v < 0 ? -v : v;
    int whole = a < 1e15 && v == (double)(long long)v;
    snprintf(out, size, whole || a >= 100 ? "%.0f" : a >= 10 ? "%.1f" : "%.2f", v);
}

/* Prints "name value (min a max b) (p50 x ms p99 y ms) note" and keeps it for the JSON. The
 * range and the latency are optional (NULL). */
static void bench_report(const char *name,
                         double value,
                         const char *unit,
                         const struct bench_stat *range,
                         const struct bench_latency *latency,
                         const char *note)
{
    if (bench_figure_count >= BENCH_FIGURES_MAX) {
        bench_die("too many figures (BENCH_FIGURES_MAX)");
    }
    struct bench_figure *f = &bench_figures[bench_figure_count++];
    snprintf(f->name, sizeof f->name, "%s", name);
    snprintf(f->note, sizeof f->note, "%s", note != NULL ? note : "");
    f->value = value;
    f->unit = unit;
    char v[32], a[32], b[32];
    bench_format(v, sizeof v, value);
    printf("%s %s", name, v);
    if (range != NULL) {
        f->has_range = 1;
        f->min = range->min;
        f->max = range->max;
        bench_format(a, sizeof a, range->min);
        bench_format(b, sizeof b, range->max);
        printf(" (min %s max %s)", a, b);
    }
    if (latency != NULL) {
        f->has_latency = 1;
        f->p50_ms = latency->p50_ms;
        f->p99_ms = latency->p99_ms;
        bench_format(a, sizeof a, latency->p50_ms);
        bench_format(b, sizeof b, latency->p99_ms);
        printf(" (p50 %s ms p99 %s ms)", a, b);
    }
    printf("%s%s\n", f->note[0] != '\0' ? " " : "", f->note);
    fflush(stdout);
}

static void bench_report_value(const char *name, double value, const char *unit)
{
    bench_report(name, value, unit, NULL, NULL, NULL);
}

/* ---- the corpus: words and people ---------------------------------------------------------- */

/* The most frequent ranks of the vocabulary, space-separated. */
static const char bench_english[] =
    "the and to of a in is for on that with this we you it be are as at have will not "
    "can our please meeting project update report team thanks next week today tomorrow "
    "review budget invoice contract schedule draft attached customer release deadline "
    "question answer proposal quarter sales server migration database backup deploy "
    "issue ticket support office travel holiday lunch agenda minutes feedback design "
    "testing results numbers forecast planning conference call notes summary approval "
    "payment order shipping delivery warehouse supplier contractor lawyer account "
    "password security audit policy training hiring candidate interview offer salary "
    "benefits insurance tax receipt expense reimbursement quarterly annual board "
    "strategy marketing campaign launch website newsletter analytics dashboard metrics "
    "kubernetes postgres latency outage incident postmortem";

static const char *const bench_syllables[] = {
    "ba", "be", "bi", "bo", "ca", "ce", "da", "de", "di", "do", "fa", "fe", "ga", "go", "ha", "ja",
    "ka", "ke", "ki", "ko", "la", "le", "li", "lo", "lu", "ma", "me", "mi", "mo", "na", "ne", "ni",
    "no", "pa", "pe", "po", "ra", "re", "ri", "ro", "ru", "sa", "se", "si", "so", "ta", "te", "ti",
    "to", "va", "ve", "vi", "za", "zo", "an", "en", "in", "on", "ar", "er", "or", "ul", "ex", "st"};
#define BENCH_SYLLABLE_COUNT (sizeof bench_syllables / sizeof bench_syllables[0])

static const char *const bench_first_names[] = {
    "Maria", "James", "Aiko",  "Olga",  "Pierre", "Fatima", "Chen",  "Lars",   "Priya", "Diego",
    "Emma",  "Noah",  "Sofia", "Ahmed", "Ingrid", "Kenji",  "Lucia", "Marco",  "Nadia", "Oscar",
    "Paula", "Ravi",  "Sara",  "Tomas", "Ursula", "Viktor", "Wei",   "Yasmin", "Zoe",   "Bruno"};
static const char *const bench_last_names[] = {
    "Garcia",  "Smith",   "Tanaka", "Ivanova", "Dubois", "Khan",   "Wang",   "Berg",
    "Patel",   "Lopez",   "Muller", "Rossi",   "Novak",  "Haddad", "Larsen", "Sato",
    "Silva",   "Bianchi", "Petrov", "Nilsson", "Moreau", "Sharma", "Cohen",  "Kowalski",
    "Schmidt", "Popov",   "Li",     "Mansour", "Jensen", "Costa"};
#define BENCH_NAME_COUNT 30
_Static_assert(sizeof bench_first_names / sizeof bench_first_names[0] == BENCH_NAME_COUNT &&
                   sizeof bench_last_names / sizeof bench_last_names[0] == BENCH_NAME_COUNT,
               "30 first names and 30 last names");
_Static_assert(BENCH_CONTACTS <= BENCH_NAME_COUNT * BENCH_NAME_COUNT, "contacts are unique");

static const char *const bench_domains[] = {
    "example.com",     "example.net",      "acme-corp.example",  "globex.example",
    "initech.test",    "umbrella.test",    "example.de",         "example.fr",
    "uni.example.edu", "city.example.gov", "startup.example.io", "isp.example.co.uk"};
#define BENCH_DOMAIN_COUNT (sizeof bench_domains / sizeof bench_domains[0])

static char bench_vocab[BENCH_VOCAB_WORDS][BENCH_WORD_BYTES_MAX];

/* The vocabulary: the English list first (the most frequent ranks), then pseudo-words of two
 * to four syllables, all fixed by the seed. */
static void bench_vocab_init(void)
{
    const char *english = bench_english;
    for (uint32_t k = 0; k < BENCH_VOCAB_WORDS; k++) {
        if (*english != '\0') {
            size_t len = strcspn(english, " ");
            snprintf(bench_vocab[k], BENCH_WORD_BYTES_MAX, "%.*s", (int)len, english);
            english += len + (english[len] == ' ');
            continue;
        }
        struct bench_rng r = bench_rng_for(0x766f636162, k);
        uint32_t syllables = 2 + bench_rng_below(&r, 3);
        size_t len = 0;
        for (uint32_t s = 0; s < syllables; s++) {
            const char *syl = bench_syllables[bench_rng_below(&r, BENCH_SYLLABLE_COUNT)];
            memcpy(bench_vocab[k] + len, syl, 2);
            len += 2;
        }
        bench_vocab[k][len] = '\0';
    }
}

static const char *bench_word(struct bench_rng *r)
{
    return bench_vocab[bench_rng_zipf(r, BENCH_VOCAB_WORDS)];
}

struct bench_contact {
    const char *first, *last, *domain;
};

static struct bench_contact bench_contact_of(uint32_t k)
{
    uint32_t a = k % BENCH_NAME_COUNT, m = k / BENCH_NAME_COUNT;
    struct bench_contact c = {bench_first_names[a],
                              bench_last_names[(m + 11u * a) % BENCH_NAME_COUNT],
                              bench_domains[((size_t)k * 5) % BENCH_DOMAIN_COUNT]};
    return c;
}

/* "maria.garcia@example.com" (lowercase) into out. */
static void bench_contact_address(uint32_t k, char *out, size_t size)
{
    struct bench_contact c = bench_contact_of(k);
    int len = snprintf(out, size, "%s.%s@%s", c.first, c.last, c.domain);
    for (int i = 0; i < len && (size_t)i < size; i++) {
        out[i] = (char)(out[i] >= 'A' && out[i] <= 'Z' ? out[i] - 'A' + 'a' : out[i]);
    }
}

static void bench_put_contact(struct bench_buf *b, uint32_t k)
{
    char address[128];
    struct bench_contact c = bench_contact_of(k);
    bench_contact_address(k, address, sizeof address);
    bench_buf_printf(b, "\"%s %s\" <%s>", c.first, c.last, address);
}

/* ---- the corpus: one message ----------------------------------------------------------------- */

struct bench_corpus {
    uint64_t stream;  /* seeds everything of this corpus */
    int small;        /* 1: search corpus (no attachments, 2 .. 16 KB) */
    double spacing_s; /* mean seconds between consecutive messages */
    int64_t date_first;
};

enum bench_attach_kind { ATTACH_NONE, ATTACH_ORIGINAL, ATTACH_FORWARD };

struct bench_plan {
    int64_t date;
    uint32_t sender;      /* contact index */
    uint32_t parent;      /* message index replied to; BENCH_NONE: none */
    uint32_t attach_id;   /* message index whose attachment this carries; BENCH_NONE: none */
    double text_bytes;    /* target size of the text/plain part */
    struct bench_rng rng; /* continues where the plan stopped drawing */
};

/* A corpus whose count messages spread over the two years before BENCH_DATE_LAST. */
static struct bench_corpus bench_corpus_make(uint64_t stream, int small, double count)
{
    struct bench_corpus c = {stream, small, (double)BENCH_SPAN_S / (count > 1 ? count : 1),
                             BENCH_DATE_LAST - BENCH_SPAN_S};
    return c;
}

/* Date, sender and parent: what thread walks need, from the first draws of the message. */
static void bench_plan_head(const struct bench_corpus *c, uint32_t i, struct bench_plan *p)
{
    p->rng = bench_rng_for(c->stream, i);
    double jitter = bench_rng_unit(&p->rng) * 0.9;
    p->date = c->date_first + (int64_t)(((double)i + jitter) * c->spacing_s);
    p->sender = bench_rng_zipf(&p->rng, BENCH_CONTACTS);
    p->parent = BENCH_NONE;
    if (bench_rng_unit(&p->rng) < 0.35 && i > 0) {
        p->parent = i - 1 - bench_rng_below(&p->rng, i < 40 ? i : 40);
    }
}

static enum bench_attach_kind bench_attach_kind_of(const struct bench_corpus *c, uint32_t i)
{
    if (c->small) {
        return ATTACH_NONE;
    }
    if (i == BENCH_LARGEST_INDEX) {
        return ATTACH_ORIGINAL;
    }
    struct bench_rng r = bench_rng_for(c->stream ^ 0x617474u, i);
    if (bench_rng_unit(&r) >= 0.10) {
        return ATTACH_NONE;
    }
    return bench_rng_unit(&r) < 0.30 ? ATTACH_FORWARD : ATTACH_ORIGINAL;
}

static void bench_plan_of(const struct bench_corpus *c, uint32_t i, struct bench_plan *p)
{
    bench_plan_head(c, i, p);
    enum bench_attach_kind kind = bench_attach_kind_of(c, i);
    p->attach_id = kind == ATTACH_NONE ? BENCH_NONE : i;
    /* A forward carries the attachment of the nearest earlier original (within 400). */
    for (uint32_t j = i; kind == ATTACH_FORWARD && j > 0 && i - j < 400; j--) {
        if (bench_attach_kind_of(c, j - 1) == ATTACH_ORIGINAL) {
            p->attach_id = j - 1;
            break;
        }
    }
    if (p->attach_id != BENCH_NONE) {
        p->text_bytes = bench_rng_lognormal(&p->rng, 1200, 0.5, 400, 4000);
        return;
    }
    double total = c->small ? bench_rng_lognormal(&p->rng, 4096, 0.4, 2048, 16384)
                            : bench_rng_lognormal(&p->rng, 9216, 0.75, 2048, 262144);
    p->text_bytes = (total - 1300) / 2.05;
    p->text_bytes = p->text_bytes < 300 ? 300 : p->text_bytes;
}

/* Base64 size (with 77-byte lines) of the attachment of message id. */
static size_t bench_attach_encoded_bytes(const struct bench_corpus *c, uint32_t id)
{
    if (id == BENCH_LARGEST_INDEX) {
        return BENCH_ATTACH_BYTES_MAX;
    }
    struct bench_rng r = bench_rng_for(c->stream ^ 0x73697a65u, id);
    return (size_t)bench_rng_loguniform(&r, BENCH_ATTACH_BYTES_MIN, BENCH_ATTACH_BYTES_MAX);
}

static void bench_put_message_id(struct bench_buf *b, const struct bench_corpus *c, uint32_t i)
{
    struct bench_plan p;
    bench_plan_head(c, i, &p);
    struct bench_contact who = bench_contact_of(p.sender);
    bench_buf_printf(b, "<%016llx.%u@mail.%s>", (unsigned long long)bench_rng_mix(c->stream ^ i), i,
                     who.domain);
}

#define BENCH_THREAD_DEPTH_MAX 64
#define BENCH_REFERENCES_MAX   10

/* Ancestors of message i, nearest first, into chain; returns how many (the last is the root
 * unless the thread is deeper than BENCH_THREAD_DEPTH_MAX). */
static uint32_t bench_ancestors(const struct bench_corpus *c, uint32_t i, uint32_t *chain)
{
    uint32_t count = 0;
    struct bench_plan p;
    bench_plan_head(c, i, &p);
    while (p.parent != BENCH_NONE && count < BENCH_THREAD_DEPTH_MAX) {
        chain[count++] = p.parent;
        bench_plan_head(c, p.parent, &p);
    }
    return count;
}

static void bench_put_subject(struct bench_buf *b, const struct bench_corpus *c, uint32_t root)
{
    struct bench_rng r = bench_rng_for(c->stream ^ 0x7375626au, root);
    uint32_t words = 3 + bench_rng_below(&r, 6);
    for (uint32_t w = 0; w < words; w++) {
        const char *word = bench_word(&r);
        if (w == 0) {
            char first = word[0];
            if (first >= 'a' && first <= 'z') {
                first = (char)(first - 'a' + 'A');
            }
            bench_buf_put(b, &first, 1);
            bench_buf_puts(b, word + 1);
        } else {
            bench_buf_printf(b, " %s", word);
        }
    }
}

/* The thread headers: Subject, Message-ID, In-Reply-To, References. */
static void
bench_put_thread_headers(struct bench_buf *b, const struct bench_corpus *c, uint32_t i, int fwd)
{
    uint32_t chain[BENCH_THREAD_DEPTH_MAX];
    uint32_t depth = bench_ancestors(c, i, chain);
    bench_buf_puts(b, depth > 0 ? "Subject: Re: " : fwd ? "Subject: Fwd: " : "Subject: ");
    bench_put_subject(b, c, depth > 0 ? chain[depth - 1] : i);
    bench_buf_puts(b, "\nMessage-ID: ");
    bench_put_message_id(b, c, i);
    if (depth > 0) {
        bench_buf_puts(b, "\nIn-Reply-To: ");
        bench_put_message_id(b, c, chain[0]);
        bench_buf_puts(b, "\nReferences:");
        uint32_t shown = depth < BENCH_REFERENCES_MAX ? depth : BENCH_REFERENCES_MAX;
        for (uint32_t k = shown; k > 0; k--) { /* oldest first, folded one per line */
            bench_buf_puts(b, k == shown ? " " : "\n ");
            bench_put_message_id(b, c, chain[k - 1]);
        }
    }
    bench_buf_puts(b, "\n");
}

static void bench_put_headers(struct bench_buf *b,
                              const struct bench_corpus *c,
                              uint32_t i,
                              struct bench_plan *p,
                              const char *boundary)
{
    char address[128];
    bench_contact_address(p->sender, address, sizeof address);
    struct bench_contact who = bench_contact_of(p->sender);
    bench_buf_printf(b,
                     "Return-Path: <%s>\nReceived: from mail.%s (mail.%s [192.0.2.%u])\n"
                     "\tby mx.example.org with ESMTPS id %08x\n\tfor <%s>; ",
                     address, who.domain, who.domain, 1 + p->sender % 250,
                     (unsigned)bench_rng_mix(c->stream + i), bench_user);
    bench_buf_put_date(b, p->date + 2);
    bench_buf_puts(b, "\nDate: ");
    bench_buf_put_date(b, p->date);
    bench_buf_puts(b, "\nFrom: ");
    bench_put_contact(b, p->sender);
    bench_buf_printf(b, "\nTo: \"Bench User\" <%s>\n", bench_user);
    uint32_t cc = bench_rng_unit(&p->rng) < 0.3 ? 1 + bench_rng_below(&p->rng, 3) : 0;
    for (uint32_t k = 0; k < cc; k++) {
        bench_buf_puts(b, k == 0 ? "Cc: " : ",\n ");
        bench_put_contact(b, bench_rng_zipf(&p->rng, BENCH_CONTACTS));
    }
    bench_buf_puts(b, cc > 0 ? "\n" : "");
    bench_put_thread_headers(b, c, i, p->attach_id != BENCH_NONE && p->attach_id != i);
    bench_buf_printf(b,
                     "MIME-Version: 1.0\nX-Mailer: BenchMail %u.%u\n"
                     "Content-Type: multipart/%s;\n boundary=\"%s\"\n\n"
                     "This is a multi-part message in MIME format.\n",
                     1 + p->sender % 7, p->sender % 10,
                     p->attach_id != BENCH_NONE ? "mixed" : "alternative", boundary);
}

#define BENCH_LINE_COLUMNS 72

/* Paragraphs of Zipf words wrapped at BENCH_LINE_COLUMNS, at least target bytes, appended. */
static void bench_put_text(struct bench_buf *b, struct bench_rng *r, double target)
{
    size_t start = b->len;
    while ((double)(b->len - start) < target) {
        uint32_t sentences = 2 + bench_rng_below(r, 5);
        size_t column = 0;
        for (uint32_t s = 0; s < sentences; s++) {
            uint32_t words = 6 + bench_rng_below(r, 13);
            for (uint32_t w = 0; w < words; w++) {
                char word[BENCH_WORD_BYTES_MAX + 2];
                size_t len = (size_t)snprintf(word, sizeof word, "%s%s", bench_word(r),
                                              w + 1 == words                ? "."
                                              : bench_rng_below(r, 12) == 0 ? ","
                                                                            : "");
                if (w == 0 && word[0] >= 'a' && word[0] <= 'z') {
                    word[0] = (char)(word[0] - 'a' + 'A');
                }
                if (column > 0 && column + 1 + len > BENCH_LINE_COLUMNS) {
                    bench_buf_put(b, "\n", 1);
                    column = 0;
                } else if (column > 0) {
                    bench_buf_put(b, " ", 1);
                    column++;
                }
                bench_buf_put(b, word, len);
                column += len;
            }
        }
        bench_buf_puts(b, "\n\n");
    }
}

/* The html alternative of text[0..len): each paragraph in <p>. */
static void bench_put_html(struct bench_buf *b, const char *text, size_t len)
{
    bench_buf_puts(b, "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"></head>\n"
                      "<body style=\"font-family: sans-serif\">\n");
    size_t at = 0;
    while (at < len) {
        const char *end = memmem(text + at, len - at, "\n\n", 2);
        size_t para = end != NULL ? (size_t)(end - (text + at)) : len - at;
        if (para > 0) {
            bench_buf_puts(b, "<p>");
            bench_buf_put(b, text + at, para);
            bench_buf_puts(b, "</p>\n");
        }
        at += para + 2;
    }
    bench_buf_puts(b, "</body></html>\n");
}

/* The attachment of message id: random bytes (fixed by id) in base64, 76 columns. */
static void bench_put_attachment(struct bench_buf *b, const struct bench_corpus *c, uint32_t id)
{
    static const char alphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    static const char *const kinds[][2] = {
        {"application/pdf", "pdf"}, {"application/zip", "zip"}, {"image/jpeg", "jpg"}};
    const char *const *kind = kinds[id % 3];
    bench_buf_printf(b,
                     "Content-Type: %s; name=\"document-%06u.%s\"\n"
                     "Content-Disposition: attachment; filename=\"document-%06u.%s\"\n"
                     "Content-Transfer-Encoding: base64\n\n",
                     kind[0], id, kind[1], id, kind[1]);
    size_t lines = bench_attach_encoded_bytes(c, id) / 77;
    struct bench_rng r = bench_rng_for(c->stream ^ 0x64617461u, id);
    bench_buf_reserve(b, lines * 77);
    for (size_t l = 0; l < lines; l++) {
        uint8_t raw[64];
        for (size_t k = 0; k < sizeof raw; k += 8) {
            uint64_t v = bench_rng_next(&r);
            memcpy(raw + k, &v, 8);
        }
        char *out = b->data + b->len;
        for (size_t k = 0; k < 57; k += 3) { /* 57 bytes: one 76-column line */
            uint32_t v = (uint32_t)raw[k] << 16 | (uint32_t)raw[k + 1] << 8 | raw[k + 2];
            *out++ = alphabet[v >> 18 & 63];
            *out++ = alphabet[v >> 12 & 63];
            *out++ = alphabet[v >> 6 & 63];
            *out++ = alphabet[v & 63];
        }
        *out = '\n';
        b->len += 77;
    }
}

/* Message i of corpus c into out (replacing its contents); *plan_out gets its plan. */
static void bench_message(const struct bench_corpus *c,
                          uint32_t i,
                          struct bench_buf *out,
                          struct bench_plan *plan_out)
{
    static struct bench_buf text;
    struct bench_plan p;
    char outer[48], inner[48];
    bench_plan_of(c, i, &p);
    uint64_t tag = bench_rng_mix(c->stream ^ ((uint64_t)i << 20));
    snprintf(outer, sizeof outer, "=_mixed_%016llx", (unsigned long long)tag);
    snprintf(inner, sizeof inner, "=_alt_%016llx", (unsigned long long)tag);
    int attach = p.attach_id != BENCH_NONE;
    out->len = 0;
    bench_put_headers(out, c, i, &p, attach ? outer : inner);
    if (attach) {
        bench_buf_printf(out, "\n--%s\nContent-Type: multipart/alternative;\n boundary=\"%s\"\n",
                         outer, inner);
    }
    text.len = 0;
    bench_put_text(&text, &p.rng, p.text_bytes);
    struct bench_contact who = bench_contact_of(p.sender);
    bench_buf_printf(&text, "-- \n%s %s\n", who.first, who.last);
    bench_buf_printf(out,
                     "\n--%s\nContent-Type: text/plain; charset=utf-8\n"
                     "Content-Transfer-Encoding: 8bit\n\n",
                     inner);
    bench_buf_put(out, text.data, text.len);
    bench_buf_printf(out,
                     "\n--%s\nContent-Type: text/html; charset=utf-8\n"
                     "Content-Transfer-Encoding: 8bit\n\n",
                     inner);
    bench_put_html(out, text.data, text.len);
    bench_buf_printf(out, "\n--%s--\n", inner);
    if (attach) {
        bench_buf_printf(out, "\n--%s\n", outer);
        bench_put_attachment(out, c, p.attach_id);
        bench_buf_printf(out, "\n--%s--\n", outer);
    }
    *plan_out = p;
}

/* ---- scratch directory and stores ------------------------------------------------------------ */

/* Makes the scratch directory under --dir, $TMPDIR or ./var/bench, and the store root. */
static void bench_make_dir(const char *parent_dir)
{
    if (bench_scratch_make(parent_dir, "mailvault-bench-store", bench_dir, sizeof bench_dir) != 0) {
        bench_die("cannot make a scratch directory");
    }
    bench_path(bench_root, sizeof bench_root, "mail");
}

static struct mv_store_options bench_store_options(void)
{
    struct mv_store_options o = MV_STORE_OPTIONS_INIT;
    o.root = bench_root;
    return o;
}

/* mv_store_init with the default KDF; returns its duration in ms. */
static double bench_store_init(const char *address)
{
    struct mv_store_options o = bench_store_options();
    char errmsg[512];
    double start = bench_now_s();
    int rc =
        mv_store_init(address, bench_password, strlen(bench_password), &o, errmsg, sizeof errmsg);
    double ms = (bench_now_s() - start) * 1e3;
    if (rc != MV_OK) {
        bench_die("mv_store_init(%s): %s: %s", address, mv_strerror(rc), errmsg);
    }
    return ms;
}

/* mv_store_open; *ms_out (if not NULL) gets its duration. */
static mv_store *bench_store_open(const char *address, double *ms_out)
{
    struct mv_store_options o = bench_store_options();
    char errmsg[512];
    mv_store *store = NULL;
    double start = bench_now_s();
    int rc = mv_store_open(address, bench_password, strlen(bench_password), &o, &store, errmsg,
                           sizeof errmsg);
    if (ms_out != NULL) {
        *ms_out = (bench_now_s() - start) * 1e3;
    }
    if (rc != MV_OK) {
        bench_die("mv_store_open(%s): %s: %s", address, mv_strerror(rc), errmsg);
    }
    return store;
}

/* ---- phase: deliver ------------------------------------------------------------------------ */

/* What the delivered corpus was: printed once, used by later phases. */
struct bench_delivered {
    uint32_t messages;
    double bytes;
    double largest_bytes;
};

static void
bench_report_corpus(const double *sizes, uint32_t n, uint32_t attachments, uint32_t forwards)
{
    double *sorted = bench_alloc_doubles(n);
    memcpy(sorted, sizes, n * sizeof sorted[0]);
    double total = 0;
    for (uint32_t i = 0; i < n; i++) {
        total += sizes[i];
    }
    bench_report_value("store.corpus.messages", n, "messages");
    bench_report_value("store.corpus.mb", total / 1e6, "MB");
    bench_report_value("store.corpus.size_p50_kb", bench_quantile(sorted, n, 0.5) / 1e3, "KB");
    bench_report_value("store.corpus.size_p90_kb", bench_quantile(sorted, n, 0.9) / 1e3, "KB");
    bench_report_value("store.corpus.size_max_kb", bench_quantile(sorted, n, 1.0) / 1e3, "KB");
    bench_report_value("store.corpus.with_attachment", attachments, "messages");
    bench_report_value("store.corpus.forwarded_attachment", forwards, "messages");
    free(sorted);
}

/* Rates of BENCH_SLICES consecutive slices (messages and MB per second of append time). */
static void bench_report_slices(const double *seconds, const double *sizes, uint32_t n)
{
    uint32_t slices = n < BENCH_SLICES ? n : BENCH_SLICES;
    if (slices == 0) {
        return; /* nothing to rate (and rates[slices - 1] below would be out of bounds) */
    }
    double rates[BENCH_SLICES], mbps[BENCH_SLICES], total_s = 0, total_bytes = 0;
    for (uint32_t s = 0; s < slices; s++) {
        double t = 0, bytes = 0;
        uint32_t first = (uint32_t)((uint64_t)n * s / slices);
        uint32_t last = (uint32_t)((uint64_t)n * (s + 1) / slices);
        for (uint32_t i = first; i < last; i++) {
            t += seconds[i];
            bytes += sizes[i];
        }
        rates[s] = (last - first) / t;
        mbps[s] = bytes / 1e6 / t;
        total_s += t;
        total_bytes += bytes;
    }
    double *lat = bench_alloc_doubles(n);
    memcpy(lat, seconds, n * sizeof lat[0]);
    struct bench_latency l = bench_latency_of(lat, n);
    struct bench_stat r = bench_stat_of(rates, (int)slices), m = bench_stat_of(mbps, (int)slices);
    char note[BENCH_NOTE_BYTES];
    snprintf(note, sizeof note, "first tenth %.0f/s, last tenth %.0f/s", rates[0],
             rates[slices - 1]);
    bench_report("store.deliver.msgs_per_s", n / total_s, "messages/s", &r, &l, note);
    bench_report("store.deliver.mb_per_s", total_bytes / 1e6 / total_s, "MB/s", &m, NULL, NULL);
    free(lat);
}

static void bench_report_store_stats(mv_store *store, const char *prefix)
{
    struct mv_store_stats st;
    bench_check(mv_store_stats(store, &st), "mv_store_stats", store);
    char name[64];
    snprintf(name, sizeof name, "%s.stored_vs_logical", prefix);
    bench_report_value(name, (double)st.stored_bytes / (double)st.logical_bytes, "ratio");
    snprintf(name, sizeof name, "%s.file_vs_logical", prefix);
    bench_report_value(name, (double)st.physical_bytes / (double)st.logical_bytes, "ratio");
    snprintf(name, sizeof name, "%s.attachments_distinct", prefix);
    bench_report_value(name, (double)st.attachments, "attachments");
}

static struct bench_delivered bench_phase_deliver(const struct bench_corpus *c, uint32_t n)
{
    struct bench_delivered d = {n, 0, 0};
    bench_report_value("store.init_ms", bench_store_init(bench_user), "ms");
    mv_store *store = bench_store_open(bench_user, NULL);
    double *seconds = bench_alloc_doubles(n), *sizes = bench_alloc_doubles(n);
    struct bench_buf msg = {0};
    uint32_t attachments = 0, forwards = 0;
    for (uint32_t i = 0; i < n; i++) {
        struct bench_plan p;
        bench_message(c, i, &msg, &p);
        uint32_t uid = 0;
        double start = bench_now_s();
        int rc = mv_message_append(store, "INBOX", msg.data, msg.len, 0, NULL, p.date, &uid);
        seconds[i] = bench_now_s() - start;
        bench_check(rc, "mv_message_append", store);
        if (uid != i + 1) {
            bench_die("message %u got UID %u", i, uid);
        }
        sizes[i] = (double)msg.len;
        d.bytes += sizes[i];
        d.largest_bytes = sizes[i] > d.largest_bytes ? sizes[i] : d.largest_bytes;
        attachments += p.attach_id != BENCH_NONE;
        forwards += p.attach_id != BENCH_NONE && p.attach_id != i;
    }
    bench_report_corpus(sizes, n, attachments, forwards);
    bench_report_slices(seconds, sizes, n);
    bench_report_store_stats(store, "store.deliver");
    mv_store_close(&store);
    bench_buf_free(&msg);
    free(seconds);
    free(sizes);
    return d;
}

/* ---- phase: open --------------------------------------------------------------------------- */

#define BENCH_PBKDF2_ITER 64007 /* chacha20's default (SQLite3 Multiple Ciphers) */

enum { OPEN_STORE, OPEN_DB_DEFAULT, OPEN_DB_ITER1, OPEN_PBKDF2, OPEN_ITEMS };

/* mv_db_open of the tiny chacha20 file name with kdf_iter (0: default); returns ms. A new
 * file gets one table. */
static double bench_tiny_db(const char *name, uint32_t kdf_iter, int create)
{
    char path[BENCH_PATH_BYTES_MAX];
    bench_path(path, sizeof path, name);
    struct mv_db_options o = MV_DB_OPTIONS_INIT;
    o.cipher = MV_CIPHER_CHACHA20;
    o.kdf_iter = kdf_iter;
    o.flags = create ? MV_DB_CREATE : 0;
    sqlite3 *db = NULL;
    char *err = NULL;
    double start = bench_now_s();
    int rc = mv_db_open(path, bench_password, strlen(bench_password), &o, &db, &err);
    double ms = (bench_now_s() - start) * 1e3;
    if (rc != MV_OK) {
        bench_die("mv_db_open(%s): %s: %s", name, mv_strerror(rc), err != NULL ? err : "");
    }
    if (create && sqlite3_exec(db, "CREATE TABLE t(x); INSERT INTO t VALUES (1)", NULL, NULL,
                               NULL) != SQLITE_OK) {
        bench_die("tiny file: %s", sqlite3_errmsg(db));
    }
    sqlite3_close(db);
    return ms;
}

/* PBKDF2-HMAC-SHA256 alone, chacha20's parameters (16-byte salt, 32-byte key); returns ms. */
static double bench_pbkdf2_ms(void)
{
    static const unsigned char salt[16] = {0x5a, 0x11};
    unsigned char key[32];
    double start = bench_now_s();
    if (PKCS5_PBKDF2_HMAC(bench_password, (int)strlen(bench_password), salt, (int)sizeof salt,
                          BENCH_PBKDF2_ITER, EVP_sha256(), (int)sizeof key, key) != 1) {
        bench_die("PKCS5_PBKDF2_HMAC");
    }
    return (bench_now_s() - start) * 1e3;
}

static double bench_open_item(int item)
{
    double ms = 0;
    switch (item) {
    case OPEN_STORE: {
        mv_store *store = bench_store_open(bench_user, &ms);
        mv_store_close(&store);
        break;
    }
    case OPEN_DB_DEFAULT:
        ms = bench_tiny_db("tiny-default.db", 0, 0);
        break;
    case OPEN_DB_ITER1:
        ms = bench_tiny_db("tiny-iter1.db", 1, 0);
        break;
    default:
        ms = bench_pbkdf2_ms();
        break;
    }
    return ms;
}

/* Rounds of the four timings in rotated order; returns the median mv_store_open in ms. */
static double bench_phase_open(int rounds, uint32_t messages)
{
    double ms[OPEN_ITEMS][BENCH_ROUNDS_MAX], kdf[BENCH_ROUNDS_MAX], share[BENCH_ROUNDS_MAX];
    (void)bench_tiny_db("tiny-default.db", 0, 1);
    (void)bench_tiny_db("tiny-iter1.db", 1, 1);
    for (int r = 0; r < rounds; r++) {
        for (int k = 0; k < OPEN_ITEMS; k++) {
            int item = (k + r) % OPEN_ITEMS;
            ms[item][r] = bench_open_item(item);
        }
        kdf[r] = ms[OPEN_DB_DEFAULT][r] - ms[OPEN_DB_ITER1][r];
        share[r] = kdf[r] / ms[OPEN_STORE][r]; /* paired: the same seconds of machine load */
    }
    struct bench_stat s[OPEN_ITEMS], k = bench_stat_of(kdf, rounds);
    for (int item = 0; item < OPEN_ITEMS; item++) {
        s[item] = bench_stat_of(ms[item], rounds);
    }
    char note[BENCH_NOTE_BYTES];
    snprintf(note, sizeof note, "mv_store_open of the delivered store (%u messages)", messages);
    bench_report("store.open.ms", s[OPEN_STORE].median, "ms", &s[OPEN_STORE], NULL, note);
    bench_report("store.open.db_open_default_kdf_ms", s[OPEN_DB_DEFAULT].median, "ms",
                 &s[OPEN_DB_DEFAULT], NULL, "mv_db_open, tiny chacha20 file");
    bench_report("store.open.db_open_kdf_iter1_ms", s[OPEN_DB_ITER1].median, "ms",
                 &s[OPEN_DB_ITER1], NULL, "the same file keyed with kdf_iter 1");
    bench_report("store.open.kdf_ms", k.median, "ms", &k, NULL, "default KDF - kdf_iter 1");
    bench_report("store.open.pbkdf2_ms", s[OPEN_PBKDF2].median, "ms", &s[OPEN_PBKDF2], NULL,
                 "PKCS5_PBKDF2_HMAC SHA-256, 64007 iterations, alone");
    struct bench_stat f = bench_stat_of(share, rounds);
    bench_report("store.open.kdf_share", f.median, "ratio", &f, NULL,
                 "kdf_ms / open ms of the same round, median over rounds");
    /* Under load the noise of two timings can exceed the non-KDF part: a share above 1 is
     * reported as such, but the open cannot be more than all KDF. */
    double part_ms = (f.median < 1 ? f.median : 1) * s[OPEN_STORE].median;
    bench_report("store.open.kdf_part_ms", part_ms, "ms", NULL, NULL,
                 "open ms x kdf_share (share capped at 1)");
    printf("store.open: open %.1f ms, of which KDF %.1f ms\n", s[OPEN_STORE].median, part_ms);
    return s[OPEN_STORE].median;
}

/* ---- phase: sealed delivery and the drain ---------------------------------------------------- */

static void
bench_phase_sealed(const struct bench_corpus *c, uint32_t first, uint32_t count, double open_ms)
{
    struct mv_store_options o = bench_store_options();
    double *seconds = bench_alloc_doubles(count), bytes = 0, total_s = 0;
    struct bench_buf msg = {0};
    char errmsg[512];
    for (uint32_t k = 0; k < count; k++) {
        struct bench_plan p;
        bench_message(c, first + k, &msg, &p);
        double start = bench_now_s();
        int rc = mv_deliver_sealed(bench_user, msg.data, msg.len, &o, errmsg, sizeof errmsg);
        seconds[k] = bench_now_s() - start;
        if (rc != MV_OK) {
            bench_die("mv_deliver_sealed: %s: %s", mv_strerror(rc), errmsg);
        }
        bytes += (double)msg.len;
        total_s += seconds[k];
    }
    uint32_t queued = 0;
    bench_check(mv_queue_count(bench_user, &o, &queued), "mv_queue_count", NULL);
    if (queued != count) {
        bench_die("%u deliveries queued, expected %u", queued, count);
    }
    struct bench_latency l = bench_latency_of(seconds, count);
    bench_report("store.sealed.msgs_per_s", count / total_s, "messages/s", NULL, &l, NULL);
    bench_report_value("store.sealed.mb_per_s", bytes / 1e6 / total_s, "MB/s");
    double drain_open_ms = 0;
    mv_store *store = bench_store_open(bench_user, &drain_open_ms);
    struct mv_mailbox_info info;
    bench_check(mv_mailbox_get(store, "INBOX", &info), "mv_mailbox_get", store);
    bench_check(mv_queue_count(bench_user, &o, &queued), "mv_queue_count", NULL);
    if (queued != 0 || info.messages != first + count) {
        bench_die("after the drain: %u queued, %u in INBOX (expected 0, %u)", queued, info.messages,
                  first + count);
    }
    mv_store_close(&store);
    char note[BENCH_NOTE_BYTES];
    double drain_s = (drain_open_ms - open_ms) / 1e3;
    snprintf(note, sizeof note, "%u queued: open took %.0f ms, less the median open %.1f ms", count,
             drain_open_ms, open_ms);
    bench_report("store.drain.msgs_per_s", count / drain_s, "messages/s", NULL, NULL, note);
    bench_report_value("store.drain.mb_per_s", bytes / 1e6 / drain_s, "MB/s");
    bench_buf_free(&msg);
    free(seconds);
}

/* ---- phases: fetch and flags (interleaved rounds) ------------------------------------------- */

enum { ACCESS_FETCH, ACCESS_SINGLE, ACCESS_RANGE, ACCESS_ITEMS };

struct bench_access {
    mv_store *store;
    const struct bench_corpus *corpus;
    uint32_t messages; /* UIDs 1..messages are corpus messages 0..messages-1 */
    uint32_t per_round[ACCESS_ITEMS];
    uint8_t *flagged; /* per UID: \Flagged set by us */
    double *latency[ACCESS_ITEMS];
    size_t done[ACCESS_ITEMS];
    double rate[ACCESS_ITEMS][BENCH_ROUNDS_MAX];
    double fetch_mbps[BENCH_ROUNDS_MAX];
    double range_changed[BENCH_ROUNDS_MAX]; /* messages changed per second */
    struct bench_buf expected;
};

/* The first BENCH_CHECKED_FETCHES fetches are compared with the regenerated message. */
static void bench_check_fetch(struct bench_access *a, uint32_t uid, const void *raw, size_t len)
{
    struct bench_plan p;
    bench_message(a->corpus, uid - 1, &a->expected, &p);
    if (len != a->expected.len || memcmp(raw, a->expected.data, len) != 0) {
        bench_die("UID %u: fetched bytes differ from the appended message", uid);
    }
}

static void bench_fetch_round(struct bench_access *a, int round, struct bench_rng *r)
{
    double total_s = 0, bytes = 0;
    for (uint32_t k = 0; k < a->per_round[ACCESS_FETCH]; k++) {
        uint32_t uid = 1 + bench_rng_below(r, a->messages);
        void *raw = NULL;
        size_t len = 0;
        double start = bench_now_s();
        int rc = mv_message_fetch(a->store, "INBOX", uid, &raw, &len);
        double s = bench_now_s() - start;
        bench_check(rc, "mv_message_fetch", a->store);
        if (a->done[ACCESS_FETCH] < BENCH_CHECKED_FETCHES) {
            bench_check_fetch(a, uid, raw, len);
        }
        mv_free(raw);
        a->latency[ACCESS_FETCH][a->done[ACCESS_FETCH]++] = s;
        total_s += s;
        bytes += (double)len;
    }
    a->rate[ACCESS_FETCH][round] = a->per_round[ACCESS_FETCH] / total_s;
    a->fetch_mbps[round] = bytes / 1e6 / total_s;
}

/* Single UIDs: \Flagged toggled, so every call changes exactly one message. */
static void bench_single_round(struct bench_access *a, int round, struct bench_rng *r)
{
    double total_s = 0;
    for (uint32_t k = 0; k < a->per_round[ACCESS_SINGLE]; k++) {
        uint32_t uid = 1 + bench_rng_below(r, a->messages), changed = 0;
        char set[16];
        snprintf(set, sizeof set, "%u", uid);
        int mode = a->flagged[uid - 1] ? MV_FLAGS_REMOVE : MV_FLAGS_ADD;
        double start = bench_now_s();
        int rc = mv_flags_set(a->store, "INBOX", set, mode, MV_FLAG_FLAGGED, NULL, &changed);
        double s = bench_now_s() - start;
        bench_check(rc, "mv_flags_set (single)", a->store);
        if (changed != 1) {
            bench_die("mv_flags_set %s changed %u messages, not 1", set, changed);
        }
        a->flagged[uid - 1] ^= 1;
        a->latency[ACCESS_SINGLE][a->done[ACCESS_SINGLE]++] = s;
        total_s += s;
    }
    a->rate[ACCESS_SINGLE][round] = a->per_round[ACCESS_SINGLE] / total_s;
}

/* Ranges of BENCH_RANGE_UIDS UIDs: \Seen added, then removed on the next, alternately. */
static void bench_range_round(struct bench_access *a, int round, struct bench_rng *r)
{
    uint32_t span = a->messages < BENCH_RANGE_UIDS ? a->messages : BENCH_RANGE_UIDS;
    double total_s = 0, changed_total = 0;
    for (uint32_t k = 0; k < a->per_round[ACCESS_RANGE]; k++) {
        uint32_t lo = 1 + bench_rng_below(r, a->messages - span + 1), changed = 0;
        char set[32];
        snprintf(set, sizeof set, "%u:%u", lo, lo + span - 1);
        int mode = k % 2 == 0 ? MV_FLAGS_ADD : MV_FLAGS_REMOVE;
        double start = bench_now_s();
        int rc = mv_flags_set(a->store, "INBOX", set, mode, MV_FLAG_SEEN, NULL, &changed);
        double s = bench_now_s() - start;
        bench_check(rc, "mv_flags_set (range)", a->store);
        a->latency[ACCESS_RANGE][a->done[ACCESS_RANGE]++] = s;
        total_s += s;
        changed_total += changed;
    }
    a->rate[ACCESS_RANGE][round] = a->per_round[ACCESS_RANGE] / total_s;
    a->range_changed[round] = changed_total / total_s;
}

static void bench_access_report(struct bench_access *a, int rounds, const int *enabled)
{
    static const char *const names[ACCESS_ITEMS] = {
        "store.fetch.msgs_per_s", "store.flags.single.ops_per_s", "store.flags.range.ops_per_s"};
    static const char *const units[ACCESS_ITEMS] = {"messages/s", "ops/s", "ops/s"};
    char note[BENCH_NOTE_BYTES];
    for (int item = 0; item < ACCESS_ITEMS; item++) {
        if (!enabled[item]) {
            continue;
        }
        struct bench_stat s = bench_stat_of(a->rate[item], rounds);
        struct bench_latency l = bench_latency_of(a->latency[item], a->done[item]);
        snprintf(note, sizeof note, "%zu calls over %d rounds%s", a->done[item], rounds,
                 item == ACCESS_RANGE ? ", 100 UIDs each" : "");
        bench_report(names[item], s.median, units[item], &s, &l, note);
        if (item == ACCESS_FETCH) {
            struct bench_stat m = bench_stat_of(a->fetch_mbps, rounds);
            bench_report("store.fetch.mb_per_s", m.median, "MB/s", &m, NULL, NULL);
        } else if (item == ACCESS_RANGE) {
            struct bench_stat m = bench_stat_of(a->range_changed, rounds);
            bench_report("store.flags.range.msgs_changed_per_s", m.median, "messages/s", &m, NULL,
                         NULL);
        }
    }
}

static void bench_phase_access(
    const struct bench_corpus *c, uint32_t messages, int rounds, int quick, const int *enabled)
{
    static struct bench_access a;
    a.store = bench_store_open(bench_user, NULL);
    a.corpus = c;
    a.messages = messages;
    a.per_round[ACCESS_FETCH] = quick ? 200 : 1000;
    a.per_round[ACCESS_SINGLE] = quick ? 100 : 500;
    a.per_round[ACCESS_RANGE] = quick ? 10 : 50;
    a.flagged = calloc(messages, 1);
    for (int item = 0; item < ACCESS_ITEMS; item++) {
        a.latency[item] = bench_alloc_doubles((size_t)a.per_round[item] * (size_t)rounds);
    }
    if (a.flagged == NULL) {
        bench_die("out of memory");
    }
    for (int r = 0; r < rounds; r++) {
        for (int k = 0; k < ACCESS_ITEMS; k++) {
            int item = (k + r) % ACCESS_ITEMS;
            struct bench_rng rng = bench_rng_for(0x61636365u + (uint64_t)item, (uint64_t)r);
            if (!enabled[item]) {
                continue;
            }
            if (item == ACCESS_FETCH) {
                bench_fetch_round(&a, r, &rng);
            } else if (item == ACCESS_SINGLE) {
                bench_single_round(&a, r, &rng);
            } else {
                bench_range_round(&a, r, &rng);
            }
        }
    }
    bench_access_report(&a, rounds, enabled);
    mv_store_close(&a.store);
    for (int item = 0; item < ACCESS_ITEMS; item++) {
        free(a.latency[item]);
    }
    free(a.flagged);
    bench_buf_free(&a.expected);
}

/* ---- phase: expunge ------------------------------------------------------------------------- */

/* count calls, each +\Deleted on a UID set then mv_mailbox_expunge of that set, timed
 * together; set k is lo(k)..lo(k)+span-1. Returns the total seconds; lat gets each call's. */
static double bench_expunge_calls(
    mv_store *store, uint32_t count, uint32_t span, uint32_t first, uint32_t step, double *lat)
{
    double total_s = 0;
    for (uint32_t k = 0; k < count; k++) {
        uint32_t lo = first + k * step, changed = 0, expunged = 0;
        char set[32];
        if (span == 1) {
            snprintf(set, sizeof set, "%u", lo);
        } else {
            snprintf(set, sizeof set, "%u:%u", lo, lo + span - 1);
        }
        double start = bench_now_s();
        int rc = mv_flags_set(store, "INBOX", set, MV_FLAGS_ADD, MV_FLAG_DELETED, NULL, &changed);
        bench_check(rc, "mv_flags_set (\\Deleted)", store);
        bench_check(mv_mailbox_expunge(store, "INBOX", set, &expunged), "mv_mailbox_expunge",
                    store);
        lat[k] = bench_now_s() - start;
        total_s += lat[k];
        if (changed != span || expunged != span) {
            bench_die("expunge %s: %u flagged, %u expunged, not %u", set, changed, expunged, span);
        }
    }
    return total_s;
}

/* Single UIDs spread over the lower part of the delivered UIDs, then 100-UID ranges from
 * the top part; the store's file size before and after. */
static void bench_phase_expunge(uint32_t messages, int quick)
{
    uint32_t singles = quick ? 50 : 200, batches = quick ? 3 : 10, span = BENCH_RANGE_UIDS;
    if (messages < 2 * singles + 2 * batches * span) {
        singles = messages / 4;
        batches = messages / 4 / span;
    }
    mv_store *store = bench_store_open(bench_user, NULL);
    struct mv_store_stats before, after;
    bench_check(mv_store_stats(store, &before), "mv_store_stats", store);
    double *lat = bench_alloc_doubles(singles + batches);
    uint32_t low = messages - batches * span; /* UIDs 1..low hold the singles */
    double single_s = bench_expunge_calls(store, singles, 1, 1, low / (singles + 1), lat);
    double batch_s = bench_expunge_calls(store, batches, span, low + 1, span, lat + singles);
    bench_check(mv_store_stats(store, &after), "mv_store_stats", store);
    mv_store_close(&store);
    char note[BENCH_NOTE_BYTES];
    struct bench_latency l = bench_latency_of(lat, singles);
    snprintf(note, sizeof note, "%u calls: +\\Deleted on one UID, then mv_mailbox_expunge of it",
             singles);
    bench_report("store.expunge.single.msgs_per_s", singles / single_s, "messages/s", NULL, &l,
                 note);
    if (batches > 0) {
        l = bench_latency_of(lat + singles, batches);
        snprintf(note, sizeof note, "%u calls of %u UIDs; p50/p99 per call", batches, span);
        bench_report("store.expunge.range.msgs_per_s", batches * span / batch_s, "messages/s", NULL,
                     &l, note);
    }
    snprintf(note, sizeof note, "database + WAL before %.1f MB, after %.1f MB; %llu messages left",
             (double)before.physical_bytes / 1e6, (double)after.physical_bytes / 1e6,
             (unsigned long long)after.messages);
    bench_report("store.expunge.logical_freed_mb",
                 (double)(before.logical_bytes - after.logical_bytes) / 1e6, "MB", NULL, NULL,
                 note);
    free(lat);
}

/* ---- import progress: how the rate moves as the store grows ---------------------------------- */

/* When an import passed each tenth of its input: (time, bytes) at the callback that crossed
 * it; mark 0 is the start. */
struct bench_progress {
    double mark_s[BENCH_SLICES + 1], mark_bytes[BENCH_SLICES + 1];
    int tenths; /* tenths passed */
    double last_s, last_bytes;
};

static void bench_progress_start(struct bench_progress *p)
{
    memset(p, 0, sizeof *p);
    p->mark_s[0] = p->last_s = bench_now_s();
}

static int bench_progress_cb(void *arg, const struct mv_import_stats *stats, uint64_t bytes_total)
{
    struct bench_progress *p = arg;
    p->last_s = bench_now_s();
    p->last_bytes = (double)stats->bytes;
    while (p->tenths < BENCH_SLICES && bytes_total > 0 &&
           stats->bytes * BENCH_SLICES >= bytes_total * (uint64_t)(p->tenths + 1)) {
        p->tenths++;
        p->mark_s[p->tenths] = p->last_s;
        p->mark_bytes[p->tenths] = p->last_bytes;
    }
    return 0;
}

/* MB/s over the first tenth of the input and over the last (from the last mark before the
 * end: a large message can cross two tenths in one step); 0 if unknown. */
static void
bench_progress_rates(const struct bench_progress *p, double *first_mbps, double *last_mbps)
{
    *first_mbps = *last_mbps = 0;
    if (p->tenths < 1) {
        return;
    }
    *first_mbps = p->mark_bytes[1] / 1e6 / (p->mark_s[1] - p->mark_s[0]);
    int k = p->tenths < BENCH_SLICES ? p->tenths : BENCH_SLICES - 1;
    while (k > 0 && p->mark_bytes[k] >= p->last_bytes) {
        k--;
    }
    *last_mbps = (p->last_bytes - p->mark_bytes[k]) / 1e6 / (p->last_s - p->mark_s[k]);
}

/* ---- mbox files ------------------------------------------------------------------------------ */

struct bench_mbox {
    uint32_t messages;
    double bytes;         /* of the file */
    double message_bytes; /* of the messages themselves */
    double largest_bytes;
};

/* Writes msg as one mbox entry: From line, mboxrd quoting (^>*From gets one more '>'), the
 * blank separator line. */
static void bench_mbox_put(FILE *f, const struct bench_buf *msg, uint32_t sender, int64_t date)
{
    char address[128], when[64];
    time_t t = (time_t)date;
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(when, sizeof when, "%a %b %e %H:%M:%S %Y", &tm);
    bench_contact_address(sender, address, sizeof address);
    fprintf(f, "From %s %s\n", address, when);
    size_t at = 0;
    while (at < msg->len) {
        const char *nl = memchr(msg->data + at, '\n', msg->len - at);
        size_t end = nl != NULL ? (size_t)(nl - msg->data) + 1 : msg->len;
        size_t q = at;
        while (q < end && msg->data[q] == '>') {
            q++;
        }
        if (end - q >= 5 && memcmp(msg->data + q, "From ", 5) == 0) {
            fputc('>', f);
        }
        fwrite(msg->data + at, 1, end - at, f);
        at = end;
    }
    fputc('\n', f);
}

/* Writes corpus messages 0, 1, ... to path until count_max messages or bytes_max bytes. */
static struct bench_mbox bench_mbox_write(const struct bench_corpus *c,
                                          const char *path,
                                          uint32_t count_max,
                                          double bytes_max)
{
    struct bench_mbox m = {0, 0, 0, 0};
    FILE *f = fopen(path, "wb");
    static char iobuf[1u << 20];
    if (f == NULL || setvbuf(f, iobuf, _IOFBF, sizeof iobuf) != 0) {
        bench_die("cannot write %s: %s", path, strerror(errno));
    }
    struct bench_buf msg = {0};
    while (m.messages < count_max && m.bytes < bytes_max) {
        struct bench_plan p;
        bench_message(c, m.messages, &msg, &p);
        bench_mbox_put(f, &msg, p.sender, p.date);
        m.messages++;
        m.message_bytes += (double)msg.len;
        m.largest_bytes = (double)msg.len > m.largest_bytes ? (double)msg.len : m.largest_bytes;
        m.bytes = (double)ftello(f);
    }
    if (fflush(f) != 0 || ferror(f) || fclose(f) != 0) {
        bench_die("writing %s failed: %s", path, strerror(errno));
    }
    bench_buf_free(&msg);
    return m;
}

/* ---- phase: search --------------------------------------------------------------------------- */

enum {
    QUERY_FROM,
    QUERY_TEXT1,
    QUERY_TEXT2,
    QUERY_DATE_UNSEEN,
    QUERY_BODY_SUBSTRING,
    QUERY_TEXT_SUBSTRING,
    QUERY_TYPES
};
static const char *const bench_query_names[QUERY_TYPES] = {
    "from", "text_one_word", "text_two_words", "date_unseen", "body_substring", "text_substring"};

struct bench_search {
    mv_store *store;
    const struct bench_corpus *corpus;
    uint32_t per_round;
    double *latency[QUERY_TYPES];
    size_t done[QUERY_TYPES];
    double results[QUERY_TYPES];
    double round_p50_ms[QUERY_TYPES][BENCH_ROUNDS_MAX];
};

/* Builds the search store: an mbox of count small messages through mv_import. */
static void bench_search_build(const struct bench_corpus *c, const char *address, uint32_t count)
{
    char mbox[BENCH_PATH_BYTES_MAX];
    bench_path(mbox, sizeof mbox, "search.mbox");
    double start = bench_now_s();
    struct bench_mbox m = bench_mbox_write(c, mbox, count, 1e300);
    double gen_s = bench_now_s() - start;
    (void)bench_store_init(address);
    mv_store *store = bench_store_open(address, NULL);
    struct mv_import_stats st;
    struct bench_progress progress;
    bench_progress_start(&progress);
    bench_check(mv_import(store, mbox, "INBOX", bench_progress_cb, &progress, &st),
                "mv_import (search)", store);
    double import_s = bench_now_s() - progress.mark_s[0], first = 0, last = 0;
    bench_progress_rates(&progress, &first, &last);
    (void)unlink(mbox);
    if (st.messages_imported != count) {
        bench_die("search store: %llu of %u messages imported",
                  (unsigned long long)st.messages_imported, count);
    }
    char note[BENCH_NOTE_BYTES], set[32];
    snprintf(note, sizeof note,
             "%u messages, %.0f MB via mv_import; first tenth %.1f MB/s, last tenth %.1f MB/s "
             "(mbox written in %.1f s)",
             count, m.message_bytes / 1e6, first, last, gen_s);
    bench_report("store.search.build.msgs_per_s", count / import_s, "messages/s", NULL, NULL, note);
    snprintf(set, sizeof set, "1:%u", (uint32_t)((uint64_t)count * 7 / 10));
    start = bench_now_s();
    bench_check(mv_flags_set(store, "INBOX", set, MV_FLAGS_ADD, MV_FLAG_SEEN, NULL, NULL),
                "mv_flags_set (mark seen)", store);
    snprintf(note, sizeof note, "mv_flags_set %s +\\Seen", set);
    bench_report("store.search.mark_seen_ms", (bench_now_s() - start) * 1e3, "ms", NULL, NULL,
                 note);
    /* The full-text index's share of the file (dbstat: every page of the fts* tables). */
    sqlite3_stmt *dbstat = NULL;
    double fts = -1, total = -1;
    if (sqlite3_prepare_v2(mv_store_db(store),
                           "SELECT sum(pgsize) FILTER (WHERE name LIKE 'fts%'), sum(pgsize) "
                           "FROM dbstat",
                           -1, &dbstat, NULL) == SQLITE_OK &&
        sqlite3_step(dbstat) == SQLITE_ROW) {
        fts = sqlite3_column_double(dbstat, 0);
        total = sqlite3_column_double(dbstat, 1);
    }
    sqlite3_finalize(dbstat);
    snprintf(note, sizeof note, "fts* tables of a %.1f MB store (%u messages, %.1f MB of mail)",
             total / 1e6, count, m.message_bytes / 1e6);
    bench_report("store.search.fts_mb", fts / 1e6, "MB", NULL, NULL, note);
    mv_store_close(&store);
}

/* Query q of type in round: its criteria (words and addresses point into static storage). */
static void bench_query_make(const struct bench_corpus *c,
                             int type,
                             int round,
                             uint32_t q,
                             struct mv_search_query *query,
                             char *text,
                             size_t text_size)
{
    struct bench_rng r = bench_rng_for(0x71756572u + (uint64_t)type, (uint64_t)round << 20 | q);
    memset(query, 0, sizeof *query);
    query->mailbox = "INBOX";
    if (type == QUERY_FROM) {
        bench_contact_address(bench_rng_zipf(&r, BENCH_CONTACTS), text, text_size);
        *strchr(text, '@') = '\0'; /* "maria.garcia" */
        query->from = text;
    } else if (type == QUERY_TEXT1) {
        snprintf(text, text_size, "%s", bench_vocab[(uint32_t)bench_rng_loguniform(&r, 100, 3000)]);
        query->text = text;
    } else if (type == QUERY_TEXT2) {
        uint32_t a = (uint32_t)bench_rng_loguniform(&r, 30, 1000);
        uint32_t b = (uint32_t)bench_rng_loguniform(&r, 30, 1000);
        b = b == a ? a + 1 : b;
        snprintf(text, text_size, "%s %s", bench_vocab[a], bench_vocab[b]);
        query->text = text;
    } else if (type == QUERY_BODY_SUBSTRING || type == QUERY_TEXT_SUBSTRING) {
        /* IMAP SEARCH BODY / TEXT: the middle of a word (rank 100..3000), at least 3 chars */
        const char *w = bench_vocab[(uint32_t)bench_rng_loguniform(&r, 100, 3000)];
        size_t n = strlen(w), from = n > 4 ? 1 : 0, len = n > 4 ? n - 2 : n;
        snprintf(text, text_size, "%.*s", (int)len, w + from);
        if (type == QUERY_BODY_SUBSTRING) {
            query->body_contains = text;
        } else {
            query->text_contains = text;
        }
    } else {
        int64_t window = 30L * 86400;
        query->since =
            c->date_first + (int64_t)(bench_rng_unit(&r) * (double)(BENCH_SPAN_S - window));
        query->before = query->since + window;
        query->flags_unset = MV_FLAG_SEEN;
    }
}

static void bench_query_round(struct bench_search *s, int type, int round)
{
    size_t first = s->done[type];
    for (uint32_t q = 0; q < s->per_round; q++) {
        struct mv_search_query query;
        char text[128];
        bench_query_make(s->corpus, type, round, q, &query, text, sizeof text);
        struct mv_message_info info;
        mv_search *it = NULL;
        uint32_t results = 0;
        double start = bench_now_s();
        bench_check(mv_search_begin(s->store, &query, &it), "mv_search_begin", s->store);
        int rc;
        while ((rc = mv_search_next(it, &info)) == 1) {
            results++;
        }
        mv_search_end(&it);
        double sec = bench_now_s() - start;
        if (rc != 0) {
            bench_check(rc, "mv_search_next", s->store);
        }
        s->latency[type][s->done[type]++] = sec;
        s->results[type] += results;
    }
    double *copy = bench_alloc_doubles(s->per_round);
    memcpy(copy, s->latency[type] + first, s->per_round * sizeof copy[0]);
    s->round_p50_ms[type][round] = bench_quantile(copy, s->per_round, 0.5) * 1e3;
    free(copy);
}

static void bench_phase_search(uint32_t count, int rounds, int quick)
{
    static const char address[] = "search@example.org";
    static struct bench_search s;
    struct bench_corpus c = bench_corpus_make(0x73656172u, 1, count);
    bench_search_build(&c, address, count);
    s.store = bench_store_open(address, NULL);
    s.corpus = &c;
    s.per_round = quick ? 10 : 20;
    for (int type = 0; type < QUERY_TYPES; type++) {
        s.latency[type] = bench_alloc_doubles((size_t)s.per_round * (size_t)rounds);
    }
    for (int r = 0; r < rounds; r++) {
        for (int k = 0; k < QUERY_TYPES; k++) {
            bench_query_round(&s, (k + r) % QUERY_TYPES, r);
        }
    }
    for (int type = 0; type < QUERY_TYPES; type++) {
        char name[64], note[BENCH_NOTE_BYTES];
        struct bench_stat st = bench_stat_of(s.round_p50_ms[type], rounds);
        struct bench_latency l = bench_latency_of(s.latency[type], s.done[type]);
        snprintf(name, sizeof name, "store.search.%s.p50_ms", bench_query_names[type]);
        snprintf(note, sizeof note, "%zu queries on %u messages, %.0f results on average",
                 s.done[type], count, s.results[type] / (double)s.done[type]);
        bench_report(name, l.p50_ms, "ms", &st, &l, note);
        free(s.latency[type]);
    }
    mv_store_close(&s.store);
}

/* ---- phase: import (peak memory, in a child) ------------------------------------------------- */

struct bench_import_result {
    int rc;
    uint64_t imported, failed;
    double bytes, seconds, first_tenth_mbps, last_tenth_mbps;
    long rss_start_kib, hwm_kib, cache_kib;
    char errmsg[200];
};

/* The child (bench_store --import-child ADDRESS MBOX ROOT FD CACHE_KIB): a new store under
 * ROOT opened with that page cache (0: the library's default), the import, VmHWM; the result
 * goes to fd. Never returns. */
static void bench_import_child(const char *address, const char *mbox, int fd, long cache_kib)
    __attribute__((noreturn));
static void bench_import_child(const char *address, const char *mbox, int fd, long cache_kib)
{
    struct bench_import_result res;
    memset(&res, 0, sizeof res);
    res.rss_start_kib = bench_status_kib("VmRSS");
    struct mv_store_options o = bench_store_options();
    o.cache_size_kib = cache_kib;
    mv_store *store = NULL;
    res.rc = mv_store_init(address, bench_password, strlen(bench_password), &o, res.errmsg,
                           sizeof res.errmsg);
    if (res.rc == MV_OK) {
        res.rc = mv_store_open(address, bench_password, strlen(bench_password), &o, &store,
                               res.errmsg, sizeof res.errmsg);
    }
    if (res.rc == MV_OK) {
        sqlite3_stmt *st = NULL;
        if (sqlite3_prepare_v2(mv_store_db(store), "PRAGMA cache_size", -1, &st, NULL) ==
                SQLITE_OK &&
            sqlite3_step(st) == SQLITE_ROW) {
            long v = (long)sqlite3_column_int64(st, 0);
            res.cache_kib = v < 0 ? -v : v * 4; /* pages of 4096 bytes */
        }
        sqlite3_finalize(st);
        struct mv_import_stats stats;
        struct bench_progress progress;
        bench_progress_start(&progress);
        res.rc = mv_import(store, mbox, "INBOX", bench_progress_cb, &progress, &stats);
        res.seconds = bench_now_s() - progress.mark_s[0];
        bench_progress_rates(&progress, &res.first_tenth_mbps, &res.last_tenth_mbps);
        snprintf(res.errmsg, sizeof res.errmsg, "%s", mv_store_errmsg(store));
        res.imported = stats.messages_imported;
        res.failed = stats.messages_failed;
        res.bytes = (double)stats.bytes;
        mv_store_close(&store);
    }
    res.hwm_kib = bench_status_kib("VmHWM");
    ssize_t n = write(fd, &res, sizeof res);
    _exit(n == (ssize_t)sizeof res ? 0 : 1);
}

static struct bench_import_result
bench_import_run(const char *address, const char *mbox, long cache_kib)
{
    char cache[24];
    snprintf(cache, sizeof cache, "%ld", cache_kib);
    char *args[] = {(char *)(uintptr_t) "bench_store",
                    (char *)(uintptr_t) "--import-child",
                    (char *)(uintptr_t)address,
                    (char *)(uintptr_t)mbox,
                    bench_root,
                    (char *)(uintptr_t) "FD", /* the pipe's number, filled in */
                    cache,
                    NULL};
    struct bench_import_result res;
    int status = 0;
    if (bench_child_run(args, 5, &res, sizeof res, &status) != 0) {
        bench_die("the import child failed (status 0x%x)", (unsigned)status);
    }
    if (res.rc != MV_OK) {
        bench_die("mv_import in the child: %s: %s", mv_strerror(res.rc), res.errmsg);
    }
    return res;
}

/* One import of an mbox of mb megabytes (10^6 bytes) into a store with a page cache of
 * cache_kib (0: the default); label is "small" or "large". */
static struct bench_import_result bench_import_one(const struct bench_corpus *c,
                                                   const char *label,
                                                   long mb,
                                                   long cache_kib,
                                                   struct bench_mbox *m_out)
{
    char mbox[BENCH_PATH_BYTES_MAX], address[64], name[64], note[BENCH_NOTE_BYTES];
    bench_path(mbox, sizeof mbox, "import.mbox");
    snprintf(address, sizeof address, "import-%s@example.org", label);
    double start = bench_now_s();
    struct bench_mbox m = bench_mbox_write(c, mbox, UINT32_MAX, (double)mb * 1e6);
    double gen_s = bench_now_s() - start;
    struct bench_import_result res = bench_import_run(address, mbox, cache_kib);
    (void)unlink(mbox);
    bench_scratch_remove_tree(bench_root);
    if (res.imported != m.messages || res.failed != 0) {
        bench_die("import %s: %llu imported, %llu failed, of %u", label,
                  (unsigned long long)res.imported, (unsigned long long)res.failed, m.messages);
    }
    snprintf(name, sizeof name, "store.import.%s.peak_rss_mib", label);
    snprintf(note, sizeof note,
             "VmHWM; input %.0f MB, %u messages, largest %.2f MiB; RSS at start %.1f MiB; "
             "page cache %.0f MiB; mbox written in %.1f s",
             m.bytes / 1e6, m.messages, m.largest_bytes / BENCH_MIB,
             (double)res.rss_start_kib / 1024.0, (double)res.cache_kib / 1024.0, gen_s);
    bench_report(name, (double)res.hwm_kib / 1024.0, "MiB", NULL, NULL, note);
    snprintf(name, sizeof name, "store.import.%s.mb_per_s", label);
    snprintf(note, sizeof note, "first tenth %.1f MB/s, last tenth %.1f MB/s", res.first_tenth_mbps,
             res.last_tenth_mbps);
    bench_report(name, res.bytes / 1e6 / res.seconds, "MB/s", NULL, NULL, note);
    snprintf(name, sizeof name, "store.import.%s.msgs_per_s", label);
    bench_report_value(name, (double)res.imported / res.seconds, "messages/s");
    *m_out = m;
    return res;
}

/* Free space under the scratch directory, in MB (10^6 bytes). */
static double bench_free_mb(void)
{
    struct statvfs v;
    if (statvfs(bench_dir, &v) != 0) {
        bench_die("statvfs(%s): %s", bench_dir, strerror(errno));
    }
    return (double)v.f_bavail * (double)v.f_frsize / 1e6;
}

static void bench_phase_import(long large_mb, int quick)
{
    bench_scratch_remove_tree(
        bench_root); /* the other stores are done: their disk space is needed */
    double free_mb = bench_free_mb();
    if (free_mb < 3.0 * (double)large_mb) {
        long scaled = (long)(free_mb / 3.0);
        bench_note("only %.0f MB free under %s: the large import is scaled down from %ld to %ld MB",
                   free_mb, bench_dir, large_mb, scaled);
        large_mb = scaled;
    }
    long small_mb = quick ? large_mb / 2 : large_mb / 10 > 100 ? large_mb / 10 : 100;
    small_mb = small_mb < large_mb ? small_mb : (large_mb + 1) / 2;
    if (large_mb < 1) {
        bench_note("not enough disk space for the import phase: skipped");
        return;
    }
    struct bench_corpus c = bench_corpus_make(0x696d706fu, 0, (double)large_mb * 1e6 / 65e3);
    struct bench_mbox ms, ml;
    long cache_kib = quick ? BENCH_QUICK_CACHE_KIB : 0;
    struct bench_import_result s = bench_import_one(&c, "small", small_mb, cache_kib, &ms);
    struct bench_import_result l = bench_import_one(&c, "large", large_mb, cache_kib, &ml);
    double growth = (double)(l.hwm_kib - s.hwm_kib) / 1024.0;
    double largest = ml.largest_bytes / BENCH_MIB;
    double bound = (double)l.cache_kib / 1024.0 + 4.0 * largest;
    char note[BENCH_NOTE_BYTES];
    snprintf(note, sizeof note, "large (%.0f MB) - small (%.0f MB) peak; bounded if <= %.0f MiB",
             ml.bytes / 1e6, ms.bytes / 1e6, BENCH_MEMORY_SLACK_MIB);
    bench_report("store.import.peak_growth_mib", growth, "MiB", NULL, NULL, note);
    bench_report_value("store.import.bounded", growth <= BENCH_MEMORY_SLACK_MIB ? 1 : 0, "bool");
    snprintf(note, sizeof note,
             "design bound: page cache %.0f MiB + 4 x largest message %.2f MiB, on top of the "
             "%.1f MiB the process had at start",
             (double)l.cache_kib / 1024.0, largest, (double)l.rss_start_kib / 1024.0);
    bench_report("store.import.design_bound_mib", bound, "MiB", NULL, NULL, note);
    double above = (double)(l.hwm_kib - l.rss_start_kib) / 1024.0;
    snprintf(note, sizeof note, "peak - RSS at start: %s the design bound",
             above <= bound ? "within" : "above");
    bench_report("store.import.large.peak_above_start_mib", above, "MiB", NULL, NULL, note);
}

/* ---- JSON ------------------------------------------------------------------------------------ */

static void bench_json_number(FILE *f, const char *key, double v)
{
    fprintf(f, ", \"%s\": ", key);
    if (bench_finite(v)) {
        fprintf(f, "%.6g", v);
    } else {
        fputs("null", f);
    }
}

static void bench_json_params(FILE *f, const struct bench_opts *o)
{
    char cpu[160];
    bench_cpu_name(cpu, sizeof cpu);
    fprintf(f,
            "  \"params\": {\"messages\": %u, \"sealed\": %u, \"search_messages\": %u, "
            "\"import_mb\": %ld, "
            "\"rounds\": %d, \"seed\": \"0x%016llx\", \"sqlite\": \"%s\", \"mailvault\": "
            "\"%s\"},\n",
            o->messages, o->messages / 10 < 1000 ? o->messages / 10 : 1000, o->search_messages,
            o->import_mb, o->rounds, (unsigned long long)BENCH_SEED, sqlite3_libversion(),
            mv_version());
    fprintf(f, "  \"machine\": {\"cpus\": %ld, \"cpu\": ", sysconf(_SC_NPROCESSORS_ONLN));
    bench_json_string(f, cpu);
    fputs("},\n", f);
}

static void bench_write_json(const char *path, const struct bench_opts *o)
{
    bench_make_parents(path);
    FILE *f = fopen(path, "w");
    if (f == NULL) {
        bench_die("cannot write %s: %s", path, strerror(errno));
    }
    char when[32];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    fprintf(f, "{\n  \"time_utc\": \"%s\",\n  \"quick\": %s,\n", when, o->quick ? "true" : "false");
    bench_json_params(f, o);
    fputs("  \"notes\": [", f);
    bench_json_notes(f);
    fputs("],\n  \"figures\": {", f);
    for (int i = 0; i < bench_figure_count; i++) {
        const struct bench_figure *g = &bench_figures[i];
        fprintf(f, "%s\n    ", i > 0 ? "," : "");
        bench_json_string(f, g->name);
        fprintf(f, ": {\"unit\": ");
        bench_json_string(f, g->unit);
        bench_json_number(f, "value", g->value);
        if (g->has_range) {
            bench_json_number(f, "min", g->min);
            bench_json_number(f, "max", g->max);
        }
        if (g->has_latency) {
            bench_json_number(f, "p50_ms", g->p50_ms);
            bench_json_number(f, "p99_ms", g->p99_ms);
        }
        if (g->note[0] != '\0') {
            fputs(", \"note\": ", f);
            bench_json_string(f, g->note);
        }
        fputc('}', f);
    }
    fputs("\n  }\n}\n", f);
    if (fclose(f) != 0) {
        bench_die("writing %s failed", path);
    }
}

/* ---- arguments and main ---------------------------------------------------------------------- */

static void bench_usage(void)
{
    fprintf(stderr,
            "usage: bench_store [--quick] [--messages N] [--search-messages N] "
            "[--import-mb N] [--rounds R (1..%d)] [--dir DIR]\n"
            "                   [--only deliver|open|sealed|fetch|flags|expunge|search|import] "
            "[--json PATH]\n",
            BENCH_ROUNDS_MAX);
    exit(2);
}

/* The value of a numeric option, or the usage message. */
static long bench_arg_long(int argc, char **argv, int *i, long min, long max)
{
    long v = 0;
    if (*i + 1 >= argc || bench_parse_long(argv[*i + 1], min, max, &v) != 0) {
        bench_usage();
    }
    (*i)++;
    return v;
}

static int bench_phase_from_name(const char *name)
{
    for (int p = 0; p < PHASE_COUNT; p++) {
        if (strcmp(name, bench_phase_names[p]) == 0) {
            return p;
        }
    }
    bench_usage();
    return -1;
}

static void bench_parse_args(int argc, char **argv, struct bench_opts *o)
{
    long messages = -1, search = -1, import_mb = -1, rounds = -1;
    memset(o, 0, sizeof *o);
    o->only = -1;
    o->json_path = "build/bench-results/store.json";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int has_value = i + 1 < argc;
        if (strcmp(a, "--quick") == 0) {
            o->quick = 1;
        } else if (strcmp(a, "--messages") == 0) {
            messages = bench_arg_long(argc, argv, &i, 100, BENCH_COUNT_MAX);
        } else if (strcmp(a, "--search-messages") == 0) {
            search = bench_arg_long(argc, argv, &i, 100, BENCH_COUNT_MAX);
        } else if (strcmp(a, "--import-mb") == 0) {
            import_mb = bench_arg_long(argc, argv, &i, 1, BENCH_IMPORT_MB_MAX);
        } else if (strcmp(a, "--rounds") == 0) {
            rounds = bench_arg_long(argc, argv, &i, 1, BENCH_ROUNDS_MAX);
        } else if (strcmp(a, "--dir") == 0 && has_value) {
            o->parent_dir = argv[++i];
        } else if (strcmp(a, "--json") == 0 && has_value) {
            o->json_path = argv[++i];
        } else if (strcmp(a, "--only") == 0 && has_value) {
            o->only = bench_phase_from_name(argv[++i]);
        } else {
            bench_usage();
        }
    }
    /* --quick: sizes that keep every figure a median of many calls in about 13 s (deliver: 70
     * messages a slice; search: 120 queries over 2000 messages; 700 messages are the fewest
     * that leave the quick expunge its 50 single calls and 3 range calls). */
    o->messages = (uint32_t)(messages > 0 ? messages : o->quick ? 700 : 10000);
    o->search_messages = (uint32_t)(search > 0 ? search : o->quick ? 2000 : 100000);
    o->import_mb = import_mb > 0 ? import_mb : o->quick ? 48 : 1024;
    o->rounds = (int)(rounds > 0 ? rounds : o->quick ? 3 : 5);
}

static int bench_wants(int phase)
{
    return bench_opts.only < 0 || bench_opts.only == phase;
}

int main(int argc, char **argv)
{
    struct bench_opts *o = &bench_opts;
    if (argc == 7 && strcmp(argv[1], "--import-child") == 0) { /* bench_import_run */
        snprintf(bench_root, sizeof bench_root, "%s", argv[4]);
        bench_import_child(argv[2], argv[3], (int)strtol(argv[5], NULL, 10),
                           strtol(argv[6], NULL, 10));
    }
    bench_parse_args(argc, argv, o);
    bench_vocab_init();
    bench_make_dir(o->parent_dir);
    uint32_t sealed = o->messages / 10 < 1000 ? o->messages / 10 : 1000;
    printf("store.params messages=%u sealed=%u search_messages=%u import_mb=%ld rounds=%d "
           "seed=0x%016llx dir=%s sqlite=%s%s\n",
           o->messages, sealed, o->search_messages, o->import_mb, o->rounds,
           (unsigned long long)BENCH_SEED, bench_dir, sqlite3_libversion(),
           o->quick ? " (quick)" : "");
    fflush(stdout);
    double start = bench_now_s(), load_start = bench_loadavg();
    struct bench_corpus c = bench_corpus_make(0x64656c69u, 0, o->messages + sealed);
    if (bench_wants(PHASE_DELIVER) || bench_wants(PHASE_OPEN) || bench_wants(PHASE_SEALED) ||
        bench_wants(PHASE_FETCH) || bench_wants(PHASE_FLAGS) || bench_wants(PHASE_EXPUNGE)) {
        (void)bench_phase_deliver(&c, o->messages);
    }
    double open_ms = 0;
    if (bench_wants(PHASE_OPEN) || bench_wants(PHASE_SEALED)) {
        int open_rounds = o->rounds * 3 < BENCH_ROUNDS_MAX ? o->rounds * 3 : BENCH_ROUNDS_MAX;
        open_ms = bench_phase_open(open_rounds, o->messages);
    }
    if (bench_wants(PHASE_SEALED)) {
        bench_phase_sealed(&c, o->messages, sealed, open_ms);
    }
    if (bench_wants(PHASE_FETCH) || bench_wants(PHASE_FLAGS)) {
        int enabled[ACCESS_ITEMS] = {bench_wants(PHASE_FETCH), bench_wants(PHASE_FLAGS),
                                     bench_wants(PHASE_FLAGS)};
        bench_phase_access(&c, o->messages, o->rounds, o->quick, enabled);
    }
    if (bench_wants(PHASE_EXPUNGE)) {
        bench_phase_expunge(o->messages, o->quick);
    }
    /* The peak so far: the delivered store's phases (the import's peaks are its children's). */
    bench_report("store.peak_rss_mib", (double)bench_status_kib("VmHWM") / 1024.0, "MiB", NULL,
                 NULL, "VmHWM of bench_store through deliver..expunge (generator included)");
    if (bench_wants(PHASE_SEARCH)) {
        bench_phase_search(o->search_messages, o->rounds, o->quick);
    }
    if (bench_wants(PHASE_IMPORT)) {
        bench_phase_import(o->import_mb, o->quick);
    }
    bench_report_value("store.total_s", bench_now_s() - start, "s");
    bench_report_value("store.loadavg_1min_start", load_start, "load");
    bench_report_value("store.loadavg_1min_end", bench_loadavg(), "load");
    bench_write_json(o->json_path, o);
    printf("results: %s\n", o->json_path);
    return 0;
}
