# shellcheck shell=bash disable=SC2034 # sourced: the callers read have_dovecot and the rest
# bench/dovecot_lib.sh -- the private Dovecot 2.3 instance the IMAP comparisons run against
# (bench/imap_compare.sh, bench/bigmail_compare.sh, bench/imap_old_new.sh), and the small
# process helpers they share (also with bench/drain_login.sh and bench/proxy_compare.sh).
#
# USAGE
#   . bench/dovecot_lib.sh
#   dovecot_install NAME        # NAME prefixes the messages ("imap_compare")
#   [ "$have_dovecot" -eq 1 ] && dovecot_config DIR IMAP_PORT LMTP_PORT PASSWORD_FILE USER...
#   dovecot -F -c DIR/dovecot.conf >DIR/stderr.log 2>&1 & dc_pid=$!
#   wait_port PORT PID || ...   # up to 10 s for 127.0.0.1:PORT to accept
#   stop_pid PID                # SIGTERM, up to 10 s, then SIGKILL
#
# WHAT IT OFFERS
#   dovecot_install NAME
#       If `dovecot` is not installed: apt-get installs dovecot-core, dovecot-imapd and
#       dovecot-lmtpd (as root; Debian's policy-rc.d, where present, keeps the system's
#       instance from starting). Sets have_dovecot (1 when `dovecot` and the user nobody
#       exist), dovecot_version ("2.3.19.1") and dovecot_note (why not, else empty).
#   dovecot_config DIR IMAP_PORT LMTP_PORT PASSWORD_FILE USER...
#       Writes DIR/dovecot.conf and DIR/passwd (every USER with the password in
#       PASSWORD_FILE) and makes DIR/run, DIR/state, DIR/mail. The instance never reads
#       /etc/dovecot: base_dir and state_dir in DIR, 127.0.0.1 only, IMAP on IMAP_PORT (imaps
#       off), LMTP on LMTP_PORT unless it is -1, Maildir in DIR/mail/USER, passdb
#       passwd-file, a static userdb, no SSL, plaintext auth allowed, no auth failure delay,
#       process and per-user connection limits 1000, imap-login in high-performance mode
#       (service_count = 0), mail_fsync at its default (optimized: new mail and the
#       indexes are fsync'd), no FTS plugin. Dovecot refuses to access mail as uid 0, so its
#       mail processes run as `nobody` (DIR/mail belongs to nobody); the master runs as the
#       current user. DIR's parents must be reachable by nobody (mode 755).
#   dovecot_maildir_copy SRC DEST
#       Gives Dovecot's mail user (nobody) the Maildir SRC as DEST, a copy that is all
#       nobody's, SRC untouched. Not hard links: with the kernel's protected_hardlinks (on
#       by default) nobody may not link() a file it does not own, so Dovecot's COPY, which
#       hard-links a message file into the target folder, fell back to copying its bytes
#       (UID COPY of 1,000 at 10k: 528 ms instead of ~30: an unfair comparison); and
#       `chown -R nobody` over links gave SRC's files to nobody (a link shares the inode).
#   free_port       a free TCP port on 127.0.0.1 (printed).
#   wait_port PORT PID
#       0 once 127.0.0.1:PORT accepts a connection (up to 10 s); 1 if PID died first or the
#       time ran out.
#   stop_pid PID    SIGTERM, up to 10 s for it to go, then SIGKILL; never fails.

dovecot_install() {
    local name=$1
    dovecot_note="" have_dovecot=0 dovecot_version=""
    if ! command -v dovecot >/dev/null 2>&1 ||
        { [ ! -x /usr/lib/dovecot/lmtp ] && [ -d /usr/lib/dovecot ]; }; then
        if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
            echo "$name: installing dovecot-core dovecot-imapd dovecot-lmtpd"
            local pkgs=(dovecot-core dovecot-imapd dovecot-lmtpd)
            if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
                "${pkgs[@]}" >/dev/null 2>&1; then
                DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null 2>&1 || true
                DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
                    "${pkgs[@]}" >/dev/null 2>&1 || true
            fi
        fi
    fi
    if command -v dovecot >/dev/null 2>&1 && id nobody >/dev/null 2>&1; then
        have_dovecot=1
        dovecot_version=$(dovecot --version 2>/dev/null | awk '{ print $1 }')
    else
        dovecot_note="Dovecot is not installed and apt-get could not install it"
        dovecot_note+=" (not root, no apt-get, or no network): mailvaultd measured alone"
        echo "$name: $dovecot_note" >&2
    fi
}

dovecot_maildir_copy() { dovecot_maildir_fill -a "$@"; }

# dovecot_maildir_link SRC DEST: Dovecot's Maildir as hard links to the corpus' files, for a
# corpus the disk cannot hold twice (1,000,000 messages: 11 GB beside a 21 GB store). The
# directories are Dovecot's own, so a flag change (rename), an expunge (unlink) or a
# delivery changes only them; but the files ARE the corpus': they become nobody's (which
# Dovecot's COPY needs to hard-link them under protected_hardlinks, else it copies bytes
# and is measured slower), and the corpus must be on the same file system. Dovecot never
# writes into a stored message, so their bytes stay the corpus'.
dovecot_maildir_link() { dovecot_maildir_fill -al "$@"; }

# dovecot_maildir_fill CP-OPTION SRC DEST: DEST made anew from SRC with cp CP-OPTION (-a a
# copy, -al hard links), then all of it given to Dovecot's mail user.
dovecot_maildir_fill() {
    local how=$1 src=$2 dest=$3
    rm -rf "$dest"
    mkdir -p "$dest"
    cp "$how" "$src/." "$dest/"
    chown -R nobody:nogroup "$dest" 2>/dev/null || chown -R nobody "$dest"
}

dovecot_config() {
    local dir=$1 imap_port=$2 lmtp_port=$3 password_file=$4
    shift 4
    mkdir -p "$dir/run" "$dir/state" "$dir/mail"
    chown nobody:nogroup "$dir/mail" 2>/dev/null || chown nobody "$dir/mail" 2>/dev/null || true
    local u
    for u in "$@"; do
        printf '%s:{PLAIN}%s\n' "$u" "$(cat "$password_file")"
    done >"$dir/passwd"
    chgrp dovecot "$dir/passwd" 2>/dev/null || true # the auth process runs as dovecot
    chmod 640 "$dir/passwd"
    local protocols="imap" lmtp_service=""
    if [ "$lmtp_port" != "-1" ]; then
        protocols="imap lmtp"
        lmtp_service="service lmtp {
  inet_listener lmtp {
    address = 127.0.0.1
    port = $lmtp_port
  }
  unix_listener lmtp {
    mode = 0600
  }
}
protocol lmtp {
  postmaster_address = postmaster@bench.example
}"
    fi
    cat >"$dir/dovecot.conf" <<EOF
# mailvault bench/dovecot_lib.sh: a private Dovecot instance; nothing outside $dir.
base_dir = $dir/run
state_dir = $dir/state
instance_name = mailvault-bench-$(basename "$dir")
protocols = $protocols
listen = 127.0.0.1
ssl = no
disable_plaintext_auth = no
auth_mechanisms = plain
auth_failure_delay = 0
log_path = $dir/dovecot.log
mail_location = maildir:$dir/mail/%u
first_valid_uid = 1
mail_uid = nobody
mail_gid = nogroup
default_login_user = dovenull
default_internal_user = dovecot
default_process_limit = 1000
default_client_limit = 4000
# Dovecot's default 256 MB address-space limit per process ends the imap process of a
# 1,000,000-message Maildir at its first SELECT ("Out of memory (service imap { vsz_limit=256
# MB }, you may need to increase it)", from the uidlist); a site with such mailboxes raises it.
default_vsz_limit = 4G
mail_max_userip_connections = 1000
passdb {
  driver = passwd-file
  args = scheme=PLAIN $dir/passwd
}
userdb {
  driver = static
  args = uid=nobody gid=nogroup home=$dir/mail/%u
}
service imap-login {
  inet_listener imap {
    address = 127.0.0.1
    port = $imap_port
  }
  inet_listener imaps {
    port = 0
  }
  service_count = 0
}
service imap {
  process_limit = 1000
}
protocol imap {
  mail_max_userip_connections = 1000
}
$lmtp_service
EOF
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

wait_port() {
    local port=$1 pid=$2
    for _ in $(seq 1 100); do
        python3 -c "import socket; socket.create_connection(('127.0.0.1', $port), 0.2)" \
            2>/dev/null && return 0
        kill -0 "$pid" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}

stop_pid() {
    local pid=$1
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 1 100); do
            kill -0 "$pid" 2>/dev/null || return 0
            sleep 0.1
        done
        kill -KILL "$pid" 2>/dev/null || true
    fi
}
