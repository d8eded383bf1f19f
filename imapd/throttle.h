/*
 * throttle.h -- failed logins per client address and per attempted user (throttle.c; loop
 * thread): growing delays, bounded.
 */
#ifndef MV_IMAPD_THROTTLE_H
#define MV_IMAPD_THROTTLE_H

#include <stdint.h>

struct throttle_counts {
    uint32_t address_failures; /* in the window, this one included */
    uint32_t user_failures;    /* 0: no user counted */
};
/* Records a failed login from addr for user (the normalised address tried, whether it
 * exists or not; NULL if the name is not an address); returns the delay (ms) before its
 * answer: base_delay_ms doubled for each earlier failure in the last 15 minutes from addr or
 * for user, whichever has more, at most 30 s. The counts go in counts (for the log). */
int throttle_failure(const char *addr,
                     const char *user,
                     int base_delay_ms,
                     struct throttle_counts *counts);

#endif /* MV_IMAPD_THROTTLE_H */
