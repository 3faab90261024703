/*
 * MPI one-sided communication, every value checked: a window from
 * MPI_Win_allocate, then
 *   - fence epochs: each rank MPI_Puts a block into its right neighbour's
 *     window and MPI_Gets one from its left neighbour's;
 *   - MPI_Accumulate (MPI_SUM) of every rank into rank 0, in a fence epoch;
 *   - passive target: MPI_Win_lock/MPI_Win_unlock (exclusive) of rank 0's
 *     window by every other rank in turn, each adding to a counter with
 *     MPI_Get + MPI_Put inside its lock (a lost lock shows as a wrong sum);
 *   - timed: rank 0 MPI_Puts and MPI_Gets BYTES to/from rank 1 ITERS times,
 *     each flushed, in one lock epoch (bandwidth).
 * Written for softroce's middleware tests (crates/softroce-cli/tests/
 * middleware.rs), which compile it with mpicc and run it over `osc ucx`.
 *
 * Usage: onesided [ITERS [BYTES]]   (defaults 20, 1048576)
 * Output (rank 0), `key=value` words:
 *   onesided put_mibs=F get_mibs=F bytes=N iters=N
 *   ok ranks=N fence=1 accumulate=1 lock=1
 * A rank that finds a wrong value prints `MISMATCH ...` on stderr; every
 * rank then exits non-zero.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BLOCK 4096

static int rank, size;

static uint32_t value(int from, int it, size_t i) {
    return (uint32_t)i * 2654435761u ^ (uint32_t)(from + 1) * 40503u ^ (uint32_t)it * 977u;
}

static long mismatches;

static void expect(const char *what, size_t i, uint64_t got, uint64_t want) {
    if (got != want) {
        if (mismatches == 0)
            fprintf(stderr, "MISMATCH %s rank=%d index=%zu got=%llu want=%llu\n", what, rank, i,
                    (unsigned long long)got, (unsigned long long)want);
        mismatches++;
    }
}

int main(int argc, char **argv) {
    int iters = argc > 1 ? atoi(argv[1]) : 20;
    size_t bytes = argc > 2 ? (size_t)atol(argv[2]) : 1048576;
    MPI_Win win;
    unsigned char *base;
    size_t win_bytes;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size < 2 || iters < 1 || bytes < BLOCK * sizeof(uint32_t)) {
        if (rank == 0)
            fprintf(stderr, "onesided: needs 2+ ranks, ITERS >= 1, BYTES >= %zu\n", BLOCK * sizeof(uint32_t));
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    /* [0, bytes): put target and timed area; then the accumulate area
     * (BLOCK uint64) and the lock counter (one uint64). */
    win_bytes = bytes + BLOCK * sizeof(uint64_t) + sizeof(uint64_t);
    MPI_Win_allocate((MPI_Aint)win_bytes, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
    memset(base, 0, win_bytes);
    uint32_t *area = (uint32_t *)base;
    uint64_t *acc = (uint64_t *)(base + bytes);
    uint64_t *counter = acc + BLOCK;
    uint32_t *mine = malloc(BLOCK * sizeof(uint32_t));
    uint32_t *got = malloc(BLOCK * sizeof(uint32_t));
    uint64_t *contrib = malloc(BLOCK * sizeof(uint64_t));
    unsigned char *big = malloc(bytes);
    if (!mine || !got || !contrib || !big)
        MPI_Abort(MPI_COMM_WORLD, 3);
    MPI_Barrier(MPI_COMM_WORLD);

    /* Fence: put to the right, get from the left (what the left put
     * into its own window: its values of epoch 0 at offset BLOCK). */
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    for (size_t i = 0; i < BLOCK; i++) {
        mine[i] = value(rank, 1, i);
        area[BLOCK + i] = value(rank, 2, i);
    }
    MPI_Win_fence(0, win);
    MPI_Put(mine, BLOCK, MPI_UINT32_T, right, 0, BLOCK, MPI_UINT32_T, win);
    MPI_Get(got, BLOCK, MPI_UINT32_T, left, BLOCK * sizeof(uint32_t), BLOCK, MPI_UINT32_T, win);
    MPI_Win_fence(0, win);
    for (size_t i = 0; i < BLOCK; i++) {
        expect("put", i, area[i], value(left, 1, i));
        expect("get", i, got[i], value(left, 2, i));
    }

    /* Accumulate: every rank adds (rank + 1) * (i + 1) to rank 0's element i. */
    for (size_t i = 0; i < BLOCK; i++)
        contrib[i] = (uint64_t)(rank + 1) * (i + 1);
    MPI_Win_fence(0, win);
    MPI_Accumulate(contrib, BLOCK, MPI_UINT64_T, 0, bytes, BLOCK, MPI_UINT64_T, MPI_SUM, win);
    MPI_Win_fence(0, win);
    if (rank == 0) {
        uint64_t ranks_sum = (uint64_t)size * (size + 1) / 2;
        for (size_t i = 0; i < BLOCK; i++)
            expect("accumulate", i, acc[i], ranks_sum * (i + 1));
    }

    /* Passive target: read-modify-write under an exclusive lock, ROUNDS
     * times per rank; with mutual exclusion the counter ends exact. */
    enum { ROUNDS = 10 };
    for (int r = 0; r < ROUNDS; r++) {
        if (rank == 0)
            break;
        uint64_t c;
        MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win);
        MPI_Get(&c, 1, MPI_UINT64_T, 0, bytes + BLOCK * sizeof(uint64_t), 1, MPI_UINT64_T, win);
        MPI_Win_flush(0, win);
        c += (uint64_t)rank;
        MPI_Put(&c, 1, MPI_UINT64_T, 0, bytes + BLOCK * sizeof(uint64_t), 1, MPI_UINT64_T, win);
        MPI_Win_unlock(0, win);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win);
        uint64_t c = *counter;
        MPI_Win_unlock(0, win);
        expect("lock", 0, c, (uint64_t)ROUNDS * size * (size - 1) / 2);
    }

    /* Timed: rank 0 puts `bytes` into rank 1 and gets them back, `iters` times each. */
    for (size_t i = 0; i < bytes; i++)
        big[i] = (unsigned char)(i * 131 + 7);
    double put_s = 0, get_s = 0;
    for (int phase = 0; phase < 2; phase++) {
        if (phase == 1 && rank == 0)
            memset(big, 0, bytes); /* what the gets bring back is checked */
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        if (rank == 0) {
            MPI_Win_lock(MPI_LOCK_SHARED, 1, 0, win);
            for (int it = 0; it < iters; it++) {
                if (phase == 0)
                    MPI_Put(big, (int)bytes, MPI_BYTE, 1, 0, (int)bytes, MPI_BYTE, win);
                else
                    MPI_Get(big, (int)bytes, MPI_BYTE, 1, 0, (int)bytes, MPI_BYTE, win);
                MPI_Win_flush(1, win);
            }
            MPI_Win_unlock(1, win);
        }
        double t = MPI_Wtime() - t0;
        if (phase == 0)
            put_s = t;
        else
            get_s = t;
        MPI_Barrier(MPI_COMM_WORLD);
        if (phase == 0 && rank == 1) {
            MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 1, 0, win);
            for (size_t i = 0; i < bytes; i++)
                expect("timed put", i, base[i], (unsigned char)(i * 131 + 7));
            MPI_Win_unlock(1, win);
        }
    }
    if (rank == 0)
        for (size_t i = 0; i < bytes; i++)
            expect("timed get", i, big[i], (unsigned char)(i * 131 + 7));

    long all = 0;
    MPI_Allreduce(&mismatches, &all, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0 && all == 0) {
        double mib = (double)bytes * iters / (1024.0 * 1024.0);
        printf("onesided put_mibs=%.1f get_mibs=%.1f bytes=%zu iters=%d\n", mib / put_s, mib / get_s, bytes, iters);
        printf("ok ranks=%d fence=1 accumulate=1 lock=1\n", size);
        fflush(stdout);
    }
    MPI_Win_free(&win);
    free(mine);
    free(got);
    free(contrib);
    free(big);
    MPI_Finalize();
    return all == 0 ? 0 : 1;
}
