# Allocates a 100,000-byte bytearray 100 times on one line (in `loop_line`), then 100 times
# on another line of another function (`other_line`) after a pause, then once more in `loop_line`: a loop
# that allocates on the same line again and again, as a training step does. Prints the
# total length.
import time


def loop_line():
    return bytearray(100_000)


def other_line():
    return bytearray(100_000 + 4096)


def main():
    total = 0
    for _ in range(100):
        total += len(loop_line())
    # A pause, so that the lookups above (charged to the thread's capture budget) leave
    # budget for the walk of `other_line`'s new call path even on a loaded machine.
    time.sleep(1.0)
    for _ in range(100):
        total += len(other_line())
    # A pause, so that the thread's capture budget (which the lookups above drew on) is
    # not empty for this new call path (a walk, under another memo key).
    time.sleep(1.0)
    total += len(loop_line())
    print(total)


main()
