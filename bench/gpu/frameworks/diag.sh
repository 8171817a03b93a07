#!/usr/bin/env bash
# Facts about the GPU machine that decide what a hook costs: the clock source and the cost
# of clock_gettime(CLOCK_MONOTONIC) (vDSO or system call), and whether gdb is there.
set -u
echo "clocksource: $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>&1)"
echo "available: $(cat /sys/devices/system/clocksource/clocksource0/available_clocksource 2>&1)"
command -v gdb >/dev/null && echo "gdb: yes" || echo "gdb: no"
t=$(mktemp -d)
cat > "$t/clk.c" <<'C'
#include <stdio.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e9 + t.tv_nsec; }
int main(void) {
    for (int r = 0; r < 5; r++) {
        struct timespec t; double a = now();
        for (int i = 0; i < 1000000; i++) clock_gettime(CLOCK_MONOTONIC, &t);
        printf("clock_gettime(CLOCK_MONOTONIC): %.1f ns per call\n", (now() - a) / 1e6);
    }
    return 0;
}
C
cc -O2 -o "$t/clk" "$t/clk.c" && "$t/clk"
rm -rf "$t"
