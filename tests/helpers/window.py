"""The steady futex workload of tests/host/test_window.py and its log, also used by benchmarks/window.py."""
from __future__ import annotations

import struct
from pathlib import Path

STEADY_C = r"""
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/futex.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

/* steady LOG SECONDS PERIOD_US: one FUTEX_WAKE per period, each logged as
 * (before, after) with write(2) at once, so a kill loses no logged call. */
int main(int argc, char **argv) {
    int fd = open(argv[1], O_WRONLY | O_CREAT | O_TRUNC, 0644);
    uint64_t end = now_ns() + (uint64_t)(atof(argv[2]) * 1e9);
    long period = atol(argv[3]) * 1000;
    static int word;
    struct timespec next;
    clock_gettime(CLOCK_MONOTONIC, &next);
    while (now_ns() < end) {
        uint64_t rec[2];
        rec[0] = now_ns();
        syscall(SYS_futex, &word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
        rec[1] = now_ns();
        if (write(fd, rec, sizeof rec) != sizeof rec)
            return 1;
        next.tv_nsec += period;
        while (next.tv_nsec >= 1000000000) { next.tv_nsec -= 1000000000; next.tv_sec++; }
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL);
    }
    return 0;
}
"""


def calls(log: Path) -> list[tuple[int, int]]:
    data = log.read_bytes()
    return [struct.unpack_from("<QQ", data, i) for i in range(0, len(data) - len(data) % 16, 16)]
