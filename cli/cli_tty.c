/*
 * cli_tty.c -- reading a password from the terminal with echo off.
 *
 * USAGE
 *   rc = cli_tty_read_password("Password: ", buf, sizeof buf, &length);
 *
 * IMPLEMENTATION NOTES
 *   The prompt goes to /dev/tty and the answer comes from it, so the password is never read
 *   from a pipe by mistake and the prompt never lands in captured output; without a
 *   controlling terminal it falls back to stdin and stderr. Echo is turned off with termios
 *   (ECHONL keeps the newline visible). While echo is off, SIGINT, SIGTERM, SIGHUP and
 *   SIGQUIT first restore the terminal and then take their default action, so Ctrl-C does
 *   not leave the shell without echo. The line is read with read(2), one byte at a time, so
 *   no stdio buffer holds a copy.
 *
 * LIMITATIONS
 *   No line editing beyond what the terminal's canonical mode gives (backspace works).
 */
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>

static const int cli_tty_signals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
#define CLI_TTY_SIGNAL_COUNT (sizeof cli_tty_signals / sizeof cli_tty_signals[0])

/* The state a signal handler needs to put the terminal back. */
static struct termios cli_tty_saved;
static volatile sig_atomic_t cli_tty_fd = -1;
static struct sigaction cli_tty_old_actions[CLI_TTY_SIGNAL_COUNT];

static void cli_tty_on_signal(int signo)
{
    if (cli_tty_fd >= 0) {
        (void)tcsetattr(cli_tty_fd, TCSAFLUSH, &cli_tty_saved);
    }
    signal(signo, SIG_DFL);
    raise(signo);
}

static void cli_tty_echo_restore(int fd)
{
    (void)tcsetattr(fd, TCSAFLUSH, &cli_tty_saved);
    cli_tty_fd = -1;
    for (size_t i = 0; i < CLI_TTY_SIGNAL_COUNT; i++) {
        (void)sigaction(cli_tty_signals[i], &cli_tty_old_actions[i], NULL);
    }
}

/* Turns echo off on fd and arms the signal handlers. Returns 0 or -1 (not a terminal). */
static int cli_tty_echo_off(int fd)
{
    if (tcgetattr(fd, &cli_tty_saved) != 0) {
        return -1;
    }
    struct termios quiet = cli_tty_saved;
    quiet.c_lflag &= ~(tcflag_t)ECHO;
    quiet.c_lflag |= (tcflag_t)(ECHONL | ICANON);
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = cli_tty_on_signal;
    sigemptyset(&action.sa_mask);
    cli_tty_fd = fd;
    for (size_t i = 0; i < CLI_TTY_SIGNAL_COUNT; i++) {
        (void)sigaction(cli_tty_signals[i], &action, &cli_tty_old_actions[i]);
        if (cli_tty_old_actions[i].sa_handler == SIG_IGN) {
            /* Ignored by whoever started us (nohup): keep it ignored. */
            (void)sigaction(cli_tty_signals[i], &cli_tty_old_actions[i], NULL);
        }
    }
    if (tcsetattr(fd, TCSAFLUSH, &quiet) != 0) {
        int saved_errno = errno;
        cli_tty_echo_restore(fd);
        errno = saved_errno;
        return -1;
    }
    return 0;
}

/* Reads up to the end of the line. Returns 0, 1 if the line did not fit, -1 on error. */
static int cli_tty_read_line(int fd, char *buf, size_t capacity_bytes, size_t *length_out)
{
    size_t length = 0;
    int overflow = 0;
    for (;;) {
        char c = 0;
        ssize_t n = read(fd, &c, 1);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            return -1;
        }
        if (n == 0 || c == '\n' || c == '\r') {
            break;
        }
        if (length < capacity_bytes) {
            buf[length++] = c;
        } else {
            overflow = 1; /* keep reading so the rest does not reach the shell */
        }
    }
    *length_out = length;
    return overflow;
}

int cli_tty_read_password(const char *prompt, char *buf, size_t capacity_bytes, size_t *length_out)
{
    int fd = open("/dev/tty", O_RDWR | O_CLOEXEC | O_NOCTTY);
    int out_fd = fd;
    if (fd < 0) {
        fd = STDIN_FILENO;
        out_fd = STDERR_FILENO;
    }
    int rc = CLI_EXIT_IOERR;
    if (write(out_fd, prompt, strlen(prompt)) < 0 || cli_tty_echo_off(fd) != 0) {
        cli_error("cannot prompt for the password on the terminal: %s", strerror(errno));
        goto done;
    }
    int read_rc = cli_tty_read_line(fd, buf, capacity_bytes, length_out);
    int saved_errno = errno;
    cli_tty_echo_restore(fd);
    if (read_rc < 0) {
        cli_error("cannot read the password: %s", strerror(saved_errno));
    } else if (read_rc > 0) {
        cli_error("password longer than %zu bytes refused", capacity_bytes);
        rc = CLI_EXIT_DATA;
    } else {
        rc = CLI_EXIT_OK;
    }
done:
    if (fd != STDIN_FILENO) {
        close(fd);
    }
    return rc;
}
