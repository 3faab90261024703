/*
 * rpma.c -- a librpma (1.2) client and server that check each other's data.
 *
 *   rpma server ADDR PORT
 *   rpma client ADDR PORT
 *
 * The server registers a 1 MiB region filled with its pattern, listens, and
 * hands its one client the region's descriptor as the connection's private
 * data. The client reads the whole region (the server's pattern), writes its
 * own pattern over the first 256 KiB and flushes it (visibility), writes an
 * 8-byte word at SHARED_WORD atomically, reads both back, then times 64 KiB
 * writes and reads and 8-byte reads, and disconnects. The server then checks
 * every byte of its region: the client's pattern where the client wrote, its
 * word, and its own pattern everywhere else.
 *
 * Each side prints one verification line and exits 0 only when every check
 * passed. A failing call is printed with its name and error; a client whose
 * connection is rejected or unreachable (the server not listening yet) says
 * so and exits 2, so that it can be started again.
 */
#include <errno.h>
#include <inttypes.h>
#include <librpma.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define KIB ((size_t)1024)
#define REGION (1024 * KIB)
/* written once by the client and flushed: [0, CHECKED_WRITE) */
#define CHECKED_WRITE (256 * KIB)
/* the write bandwidth loop's target: [CHECKED_WRITE, WRITE_LOOP_END) */
#define WRITE_LOOP_END (512 * KIB)
/* the atomically written word, right after the written bytes */
#define SHARED_WORD WRITE_LOOP_END
/* the read bandwidth loop's source: [READ_LOOP_START, REGION) */
#define READ_LOOP_START (768 * KIB)
#define BLOCK (64 * KIB)
#define BW_OPS 2048
#define BW_DEPTH 8
#define LAT_OPS 2000
#define WORD_VALUE UINT64_C(0x52504d4173726f63) /* "RPMAsroc" */
#define PRIV_MAGIC UINT32_C(0x72706d61)

/* What the server sends the client as the connection's private data. */
struct offer {
	uint32_t magic;
	uint32_t desc_size;
	unsigned char desc[64];
};

static const char *side = "rpma";

static void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "%s: ", side);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

/* A failed librpma call: its name and error. */
static void check(int ret, const char *call)
{
	if (ret)
		die("%s failed: %s (%d)", call, rpma_err_2str(ret), ret);
}

static unsigned char server_byte(size_t i)
{
	return (unsigned char)((i * 7 + 0x5a) ^ (i >> 9));
}

static unsigned char client_byte(size_t i)
{
	return (unsigned char)((i * 13 + 0xc3) ^ (i >> 11) ^ 0xa5);
}

static void *region(void)
{
	void *p = aligned_alloc(4096, REGION);
	if (!p)
		die("aligned_alloc(%zu) failed", REGION);
	return p;
}

/* The first byte in [from, to) of buf that differs from want(i), or to. */
static size_t first_wrong(const unsigned char *buf, size_t from, size_t to,
		unsigned char (*want)(size_t))
{
	for (size_t i = from; i < to; i++)
		if (buf[i] != want(i))
			return i;
	return to;
}

static void expect_pattern(const char *what, const unsigned char *buf, size_t from,
		size_t to, unsigned char (*want)(size_t))
{
	size_t bad = first_wrong(buf, from, to, want);
	if (bad != to)
		die("%s: byte %zu is 0x%02x, not 0x%02x", what, bad, buf[bad], want(bad));
}

/* The atomically written word at SHARED_WORD of buf must hold WORD_VALUE. */
static void expect_word(const char *what, const unsigned char *buf)
{
	uint64_t word;
	memcpy(&word, buf + SHARED_WORD, sizeof(word));
	if (word != WORD_VALUE)
		die("%s: the atomic word is 0x%016" PRIx64 ", not 0x%016" PRIx64, what, word,
				WORD_VALUE);
}

static double now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/*
 * Collects `count` successful completions from cq: polls for a while, then
 * sleeps on the completion channel. Returns the wr_id (op_context) of the
 * last one.
 */
static uintptr_t complete(struct rpma_cq *cq, int count, const char *what)
{
	uintptr_t last = 0;
	int idle = 0;
	while (count > 0) {
		struct ibv_wc wc[BW_DEPTH];
		int got = 0;
		int n = count < BW_DEPTH ? count : BW_DEPTH;
		int ret = rpma_cq_get_wc(cq, n, wc, &got);
		if (ret == RPMA_E_NO_COMPLETION) {
			if (++idle < 20000)
				continue;
			idle = 0;
			ret = rpma_cq_wait(cq);
			if (ret && ret != RPMA_E_NO_COMPLETION)
				check(ret, "rpma_cq_wait");
			continue;
		}
		check(ret, "rpma_cq_get_wc");
		idle = 0;
		for (int i = 0; i < got; i++) {
			if (wc[i].status != IBV_WC_SUCCESS)
				die("%s: completion %s (status %d, opcode %d, wr_id %" PRIu64 ")", what,
						ibv_wc_status_str(wc[i].status), wc[i].status,
						wc[i].opcode, (uint64_t)wc[i].wr_id);
			last = (uintptr_t)wc[i].wr_id;
		}
		count -= got;
	}
	return last;
}

static struct rpma_peer *open_peer(const char *addr, enum rpma_util_ibv_context_type type)
{
	struct ibv_context *ctx = NULL;
	struct rpma_peer *peer = NULL;
	check(rpma_utils_get_ibv_context(addr, type, &ctx), "rpma_utils_get_ibv_context");
	check(rpma_peer_new(ctx, &peer), "rpma_peer_new");
	return peer;
}

static int server(const char *addr, const char *port)
{
	struct rpma_peer *peer = open_peer(addr, RPMA_UTIL_IBV_CONTEXT_LOCAL);
	unsigned char *buf = region();
	for (size_t i = 0; i < REGION; i++)
		buf[i] = server_byte(i);
	struct rpma_mr_local *mr = NULL;
	check(rpma_mr_reg(peer, buf, REGION,
			RPMA_MR_USAGE_READ_SRC | RPMA_MR_USAGE_WRITE_DST |
			RPMA_MR_USAGE_FLUSH_TYPE_VISIBILITY, &mr), "rpma_mr_reg");

	struct offer offer = { .magic = PRIV_MAGIC };
	size_t desc_size = 0;
	check(rpma_mr_get_descriptor_size(mr, &desc_size), "rpma_mr_get_descriptor_size");
	if (desc_size > sizeof(offer.desc))
		die("the MR descriptor takes %zu bytes, more than %zu", desc_size,
				sizeof(offer.desc));
	offer.desc_size = (uint32_t)desc_size;
	check(rpma_mr_get_descriptor(mr, offer.desc), "rpma_mr_get_descriptor");

	struct rpma_ep *ep = NULL;
	check(rpma_ep_listen(peer, addr, port, &ep), "rpma_ep_listen");
	printf("server: listening on %s:%s\n", addr, port);
	fflush(stdout);

	struct rpma_conn_req *req = NULL;
	check(rpma_ep_next_conn_req(ep, NULL, &req), "rpma_ep_next_conn_req");
	struct rpma_conn_private_data pdata = {
		.ptr = &offer,
		.len = (uint8_t)(offsetof(struct offer, desc) + desc_size),
	};
	struct rpma_conn *conn = NULL;
	check(rpma_conn_req_connect(&req, &pdata, &conn), "rpma_conn_req_connect");
	enum rpma_conn_event ev = RPMA_CONN_UNDEFINED;
	check(rpma_conn_next_event(conn, &ev), "rpma_conn_next_event");
	if (ev != RPMA_CONN_ESTABLISHED)
		die("rpma_conn_next_event: %s, not established", rpma_utils_conn_event_2str(ev));

	/* All the client does is one-sided: its disconnect ends it. */
	check(rpma_conn_next_event(conn, &ev), "rpma_conn_next_event");
	if (ev != RPMA_CONN_CLOSED)
		die("rpma_conn_next_event: %s, not closed", rpma_utils_conn_event_2str(ev));
	check(rpma_conn_disconnect(conn), "rpma_conn_disconnect");
	check(rpma_conn_delete(&conn), "rpma_conn_delete");
	check(rpma_ep_shutdown(&ep), "rpma_ep_shutdown");

	expect_pattern("the client's write", buf, 0, WRITE_LOOP_END, client_byte);
	expect_word("the server's region", buf);
	expect_pattern("the bytes the client did not write", buf, SHARED_WORD + 8,
			REGION, server_byte);
	printf("server: verified %zu bytes written, atomic word 0x%016" PRIx64
			", %zu bytes untouched\n", WRITE_LOOP_END, WORD_VALUE, REGION - SHARED_WORD - 8);

	check(rpma_mr_dereg(&mr), "rpma_mr_dereg");
	check(rpma_peer_delete(&peer), "rpma_peer_delete");
	free(buf);
	return 0;
}

/*
 * `ops` 64 KiB reads (read = true) or writes of [from, to) of the remote
 * region, BW_DEPTH at a time, from or into the same offsets of the local
 * region. Returns MiB/s.
 */
static double stream(struct rpma_conn *conn, struct rpma_cq *cq, struct rpma_mr_remote *rmr,
		struct rpma_mr_local *mr, bool read, size_t from, size_t to)
{
	size_t slots = (to - from) / BLOCK;
	int posted = 0, done = 0, outstanding = 0;
	double t0 = now_us();
	while (done < BW_OPS) {
		while (posted < BW_OPS && outstanding < BW_DEPTH) {
			size_t off = from + (size_t)posted % slots * BLOCK;
			const void *ctx = (const void *)(uintptr_t)(posted + 1);
			if (read)
				check(rpma_read(conn, mr, off, rmr, off, BLOCK,
						RPMA_F_COMPLETION_ALWAYS, ctx), "rpma_read");
			else
				check(rpma_write(conn, rmr, off, mr, off, BLOCK,
						RPMA_F_COMPLETION_ALWAYS, ctx), "rpma_write");
			posted++;
			outstanding++;
		}
		complete(cq, 1, read ? "rpma_read (bandwidth)" : "rpma_write (bandwidth)");
		done++;
		outstanding--;
	}
	double us = now_us() - t0;
	return (double)BW_OPS * BLOCK / (1024.0 * 1024.0) / (us / 1e6);
}

static int compare_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static int client(const char *addr, const char *port)
{
	struct rpma_peer *peer = open_peer(addr, RPMA_UTIL_IBV_CONTEXT_REMOTE);
	unsigned char *src = region(), *dst = region();
	for (size_t i = 0; i < REGION; i++)
		src[i] = client_byte(i);
	memset(dst, 0, REGION);
	struct rpma_mr_local *src_mr = NULL, *dst_mr = NULL;
	check(rpma_mr_reg(peer, src, REGION, RPMA_MR_USAGE_WRITE_SRC, &src_mr), "rpma_mr_reg");
	check(rpma_mr_reg(peer, dst, REGION, RPMA_MR_USAGE_READ_DST, &dst_mr), "rpma_mr_reg");

	struct rpma_conn_cfg *cfg = NULL;
	check(rpma_conn_cfg_new(&cfg), "rpma_conn_cfg_new");
	check(rpma_conn_cfg_set_sq_size(cfg, 2 * BW_DEPTH), "rpma_conn_cfg_set_sq_size");
	check(rpma_conn_cfg_set_cq_size(cfg, 2 * BW_DEPTH), "rpma_conn_cfg_set_cq_size");
	struct rpma_conn_req *req = NULL;
	check(rpma_conn_req_new(peer, addr, port, cfg, &req), "rpma_conn_req_new");
	struct rpma_conn *conn = NULL;
	check(rpma_conn_req_connect(&req, NULL, &conn), "rpma_conn_req_connect");
	enum rpma_conn_event ev = RPMA_CONN_UNDEFINED;
	check(rpma_conn_next_event(conn, &ev), "rpma_conn_next_event");
	if (ev == RPMA_CONN_REJECTED || ev == RPMA_CONN_UNREACHABLE) {
		fprintf(stderr, "client: connection %s (is the server listening?)\n",
				rpma_utils_conn_event_2str(ev));
		return 2;
	}
	if (ev != RPMA_CONN_ESTABLISHED)
		die("rpma_conn_next_event: %s, not established", rpma_utils_conn_event_2str(ev));

	struct rpma_conn_private_data pdata = { 0 };
	check(rpma_conn_get_private_data(conn, &pdata), "rpma_conn_get_private_data");
	struct offer offer;
	if (!pdata.ptr || pdata.len < offsetof(struct offer, desc))
		die("the server's private data is %u bytes", (unsigned)pdata.len);
	memset(&offer, 0, sizeof(offer));
	memcpy(&offer, pdata.ptr, pdata.len < sizeof(offer) ? pdata.len : sizeof(offer));
	if (offer.magic != PRIV_MAGIC || offer.desc_size > sizeof(offer.desc) ||
			offsetof(struct offer, desc) + offer.desc_size > pdata.len)
		die("the server's private data (%u bytes) holds no MR descriptor",
				(unsigned)pdata.len);
	struct rpma_mr_remote *rmr = NULL;
	check(rpma_mr_remote_from_descriptor(offer.desc, offer.desc_size, &rmr),
			"rpma_mr_remote_from_descriptor");
	size_t remote_size = 0;
	check(rpma_mr_remote_get_size(rmr, &remote_size), "rpma_mr_remote_get_size");
	if (remote_size != REGION)
		die("the server's region is %zu bytes, not %zu", remote_size, REGION);
	int flush_type = 0;
	check(rpma_mr_remote_get_flush_type(rmr, &flush_type), "rpma_mr_remote_get_flush_type");
	if (!(flush_type & RPMA_MR_USAGE_FLUSH_TYPE_VISIBILITY))
		die("the server's region cannot be flushed to visibility (0x%x)", flush_type);
	struct rpma_cq *cq = NULL;
	check(rpma_conn_get_cq(conn, &cq), "rpma_conn_get_cq");

	/* 1. The server's pattern, all of it. */
	check(rpma_read(conn, dst_mr, 0, rmr, 0, REGION, RPMA_F_COMPLETION_ALWAYS, (void *)1),
			"rpma_read");
	complete(cq, 1, "rpma_read");
	expect_pattern("reading the server's region", dst, 0, REGION, server_byte);

	/* 2. Ours over its first 256 KiB, flushed: only the flush completes. */
	check(rpma_write(conn, rmr, 0, src_mr, 0, CHECKED_WRITE, RPMA_F_COMPLETION_ON_ERROR,
			(void *)2), "rpma_write");
	check(rpma_flush(conn, rmr, 0, CHECKED_WRITE, RPMA_FLUSH_TYPE_VISIBILITY,
			RPMA_F_COMPLETION_ALWAYS, (void *)3), "rpma_flush");
	if (complete(cq, 1, "rpma_write + rpma_flush") != 3)
		die("the flush's completion does not carry its op_context");

	/* 3. The word, atomically. */
	uint64_t value = WORD_VALUE;
	char word[8];
	memcpy(word, &value, sizeof(word));
	check(rpma_atomic_write(conn, rmr, SHARED_WORD, word, RPMA_F_COMPLETION_ALWAYS, (void *)4),
			"rpma_atomic_write");
	if (complete(cq, 1, "rpma_atomic_write") != 4)
		die("the atomic write's completion does not carry its op_context");

	/* 4. Both back, with the server's bytes around the word. */
	memset(dst, 0, REGION);
	check(rpma_read(conn, dst_mr, 0, rmr, 0, CHECKED_WRITE, RPMA_F_COMPLETION_ALWAYS,
			(void *)5), "rpma_read");
	check(rpma_read(conn, dst_mr, SHARED_WORD - 8, rmr, SHARED_WORD - 8, 24,
			RPMA_F_COMPLETION_ALWAYS, (void *)6), "rpma_read");
	complete(cq, 2, "rpma_read (back)");
	expect_pattern("reading its write back", dst, 0, CHECKED_WRITE, client_byte);
	expect_word("reading it back", dst);
	expect_pattern("the server's bytes before the word", dst, SHARED_WORD - 8,
			SHARED_WORD, server_byte);
	expect_pattern("the server's bytes after the word", dst, SHARED_WORD + 8,
			SHARED_WORD + 16, server_byte);
	printf("client: read verified (%zu bytes), write+flush verified (%zu bytes), "
			"atomic write verified (0x%016" PRIx64 " at %zu)\n",
			REGION, CHECKED_WRITE, WORD_VALUE, SHARED_WORD);
	fflush(stdout);

	/* 5. Timings: 64 KiB writes (then flushed) and reads, 8-byte reads. */
	double write_bw = stream(conn, cq, rmr, src_mr, false, CHECKED_WRITE, WRITE_LOOP_END);
	check(rpma_flush(conn, rmr, CHECKED_WRITE, WRITE_LOOP_END - CHECKED_WRITE,
			RPMA_FLUSH_TYPE_VISIBILITY, RPMA_F_COMPLETION_ALWAYS, (void *)7), "rpma_flush");
	complete(cq, 1, "rpma_flush");
	memset(dst, 0, REGION);
	double read_bw = stream(conn, cq, rmr, dst_mr, true, READ_LOOP_START, REGION);
	expect_pattern("the read loop's data", dst, READ_LOOP_START, REGION, server_byte);
	static double lat[LAT_OPS];
	for (int i = 0; i < LAT_OPS; i++) {
		size_t off = REGION - 8 * (size_t)(1 + i % 64);
		double t0 = now_us();
		check(rpma_read(conn, dst_mr, off, rmr, off, 8, RPMA_F_COMPLETION_ALWAYS, (void *)8),
				"rpma_read");
		complete(cq, 1, "rpma_read (latency)");
		lat[i] = now_us() - t0;
	}
	expect_pattern("the latency loop's data", dst, REGION - 8 * 64, REGION,
			server_byte);
	double sum = 0;
	for (int i = 0; i < LAT_OPS; i++)
		sum += lat[i];
	qsort(lat, LAT_OPS, sizeof(lat[0]), compare_double);
	printf("client: 64 KiB rpma_write x%d (depth %d) %.1f MiB/s, 64 KiB rpma_read x%d "
			"(depth %d) %.1f MiB/s, 8 B rpma_read latency x%d avg %.2f us median %.2f us\n",
			BW_OPS, BW_DEPTH, write_bw, BW_OPS, BW_DEPTH, read_bw, LAT_OPS, sum / LAT_OPS,
			lat[LAT_OPS / 2]);
	fflush(stdout);

	/* 6. A clean disconnect. */
	check(rpma_conn_disconnect(conn), "rpma_conn_disconnect");
	check(rpma_conn_next_event(conn, &ev), "rpma_conn_next_event");
	if (ev != RPMA_CONN_CLOSED)
		die("rpma_conn_next_event: %s, not closed", rpma_utils_conn_event_2str(ev));
	check(rpma_conn_delete(&conn), "rpma_conn_delete");
	check(rpma_mr_remote_delete(&rmr), "rpma_mr_remote_delete");
	check(rpma_conn_cfg_delete(&cfg), "rpma_conn_cfg_delete");
	check(rpma_mr_dereg(&dst_mr), "rpma_mr_dereg");
	check(rpma_mr_dereg(&src_mr), "rpma_mr_dereg");
	check(rpma_peer_delete(&peer), "rpma_peer_delete");
	free(src);
	free(dst);
	printf("client: disconnected\n");
	return 0;
}

int main(int argc, char *argv[])
{
	if (argc != 4 || (strcmp(argv[1], "server") && strcmp(argv[1], "client"))) {
		fprintf(stderr, "usage: %s server|client ADDR PORT\n", argv[0]);
		return 1;
	}
	side = argv[1];
	/* librpma's own messages (warnings and errors) to stderr too. */
	check(rpma_log_set_threshold(RPMA_LOG_THRESHOLD_AUX, RPMA_LOG_LEVEL_WARNING),
			"rpma_log_set_threshold");
	return side[0] == 's' ? server(argv[2], argv[3]) : client(argv[2], argv[3]);
}
