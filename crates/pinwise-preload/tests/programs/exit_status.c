/* Exits with the status its argument says, or dies of SIGTERM ("term"). No CUDA. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    printf("running\n");
    fflush(stdout);
    if (argc > 1 && strcmp(argv[1], "term") == 0) raise(SIGTERM);
    return argc > 1 ? atoi(argv[1]) : 0;
}
