/*
 * A 1 MiB ping-pong between ranks 0 and 1 and two MPI_Allreduce sums, every
 * byte and every element checked. Written for softroce's middleware tests
 * (crates/softroce-cli/tests/middleware.rs), which compile it with mpicc.
 *
 * Usage: pingpong_allreduce [PINGPONGS [ALLREDUCES [corrupt]]]
 *   PINGPONGS  timed ping-pong iterations (default 100)
 *   ALLREDUCES timed allreduces of each size (default 10)
 *   corrupt    rank 1 answers the first timed ping with one wrong byte (the
 *              checks must catch it: the program then fails)
 * Each part starts with one untimed, checked warm-up round.
 *
 * Output (rank 0), one result per line, `key=value` words:
 *   pingpong bytes=1048576 iters=N lat_us=F bw_mibs=F
 *   allreduce doubles=N iters=N avg_us=F
 *   ok ranks=N
 * A rank that finds a wrong byte or element prints `MISMATCH ...` on
 * stderr; every rank then exits non-zero.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PP_BYTES (1024 * 1024)
#define BIG_DOUBLES (1024 * 1024)
#define SMALL_DOUBLES 7

static int rank, size;

/* The byte at offset i of the message `from` sends in iteration `it`. */
static unsigned char pattern(int it, int from, size_t i) {
    uint32_t x = (uint32_t)i * 2654435761u ^ (uint32_t)it * 40503u ^ (uint32_t)(from + 1) * 977u;
    return (unsigned char)(x >> 13 ^ x);
}

static void fill(unsigned char *buf, int it, int from) {
    for (size_t i = 0; i < PP_BYTES; i++)
        buf[i] = pattern(it, from, i);
}

/* The number of bytes differing from the expected message (first one reported). */
static long check(const unsigned char *buf, int it, int from) {
    long bad = 0;
    for (size_t i = 0; i < PP_BYTES; i++) {
        unsigned char want = pattern(it, from, i);
        if (buf[i] != want) {
            if (bad == 0)
                fprintf(stderr, "MISMATCH pingpong rank=%d iter=%d from=%d offset=%zu got=%u want=%u\n", rank,
                        it, from, i, buf[i], want);
            bad++;
        }
    }
    return bad;
}

/* Rank r's contribution to element i: small integers, so every sum of them is exact. */
static double contribution(int r, size_t i, int it) {
    return (double)((r + 1) * 1000 + (long)(i % 997) + it);
}

static double expected_sum(size_t i, int it) {
    /* sum over r of (r+1)*1000 + i%997 + it */
    return 1000.0 * size * (size + 1) / 2 + (double)size * (double)((long)(i % 997) + it);
}

/* One checked allreduce of n elements; *spent gets the time of the call alone. */
static long allreduce_check(size_t n, int it, double *in, double *out, double *spent) {
    for (size_t i = 0; i < n; i++) {
        in[i] = contribution(rank, i, it);
        out[i] = -1.0;
    }
    MPI_Barrier(MPI_COMM_WORLD);
    double t = MPI_Wtime();
    MPI_Allreduce(in, out, (int)n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    *spent += MPI_Wtime() - t;
    long bad = 0;
    for (size_t i = 0; i < n; i++) {
        double want = expected_sum(i, it);
        if (out[i] != want) {
            if (bad == 0)
                fprintf(stderr, "MISMATCH allreduce rank=%d n=%zu iter=%d index=%zu got=%.17g want=%.17g\n", rank,
                        n, it, i, out[i], want);
            bad++;
        }
    }
    return bad;
}

int main(int argc, char **argv) {
    int iters = argc > 1 ? atoi(argv[1]) : 100;
    int ar_iters = argc > 2 ? atoi(argv[2]) : 10;
    int corrupt = argc > 3 && strcmp(argv[3], "corrupt") == 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size < 2 || iters < 1 || ar_iters < 1) {
        if (rank == 0)
            fprintf(stderr, "needs at least 2 ranks and 1 iteration of each part\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    long bad = 0;

    /* Ping-pong: rank 0 sends iteration it's pattern, rank 1 checks it and
     * answers with its own. Each side fills its next message before and
     * checks what it received after the timed exchange; one warm-up round
     * (iteration -1) is not timed. */
    unsigned char *out = malloc(PP_BYTES), *in = malloc(PP_BYTES);
    if (!out || !in)
        MPI_Abort(MPI_COMM_WORLD, 3);
    double pp = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    for (int it = -1; it < iters; it++) {
        int tag = it & 0x7fff;
        if (rank == 0) {
            fill(out, it, 0);
            memset(in, 0, PP_BYTES);
            double t = MPI_Wtime();
            MPI_Send(out, PP_BYTES, MPI_BYTE, 1, tag, MPI_COMM_WORLD);
            MPI_Recv(in, PP_BYTES, MPI_BYTE, 1, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            if (it >= 0)
                pp += MPI_Wtime() - t;
            bad += check(in, it, 1);
        } else if (rank == 1) {
            fill(out, it, 1);
            if (corrupt && it == 0)
                out[PP_BYTES / 3] ^= 0x20;
            memset(in, 0, PP_BYTES);
            MPI_Recv(in, PP_BYTES, MPI_BYTE, 0, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(out, PP_BYTES, MPI_BYTE, 0, tag, MPI_COMM_WORLD);
            bad += check(in, it, 0);
        }
    }
    free(out);
    free(in);
    if (rank == 0) {
        /* Each iteration moves the message there and back: lat is half a round trip. */
        double lat_us = pp / iters / 2 * 1e6;
        double bw = 2.0 * iters * PP_BYTES / pp / (1024.0 * 1024.0);
        printf("pingpong bytes=%d iters=%d lat_us=%.2f bw_mibs=%.2f\n", PP_BYTES, iters, lat_us, bw);
        fflush(stdout);
    }

    /* Allreduce: a small vector and 1 Mi doubles, ar_iters rounds each with
     * values depending on the round, every element checked on every rank. */
    double *src = malloc(BIG_DOUBLES * sizeof(double)), *sum = malloc(BIG_DOUBLES * sizeof(double));
    if (!src || !sum)
        MPI_Abort(MPI_COMM_WORLD, 3);
    size_t sizes[2] = {SMALL_DOUBLES, BIG_DOUBLES};
    for (int s = 0; s < 2; s++) {
        double spent = 0;
        bad += allreduce_check(sizes[s], -1, src, sum, &spent); /* warm-up */
        spent = 0;
        for (int it = 0; it < ar_iters; it++)
            bad += allreduce_check(sizes[s], it, src, sum, &spent);
        double slowest;
        MPI_Reduce(&spent, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        if (rank == 0) {
            printf("allreduce doubles=%zu iters=%d avg_us=%.2f\n", sizes[s], ar_iters, slowest / ar_iters * 1e6);
            fflush(stdout);
        }
    }
    free(src);
    free(sum);

    long total_bad = 0;
    MPI_Allreduce(&bad, &total_bad, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0 && total_bad == 0)
        printf("ok ranks=%d\n", size);
    if (total_bad != 0 && rank == 0)
        fprintf(stderr, "MISMATCH total=%ld\n", total_bad);
    MPI_Finalize();
    return total_bad == 0 ? 0 : 1;
}
