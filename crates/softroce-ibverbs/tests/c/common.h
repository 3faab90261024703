/*
 * Helpers shared by the C-level tests of softroce-ibverbs (driven by
 * tests/c_api.rs). Each program opens the one device SOFTROCE_DEVICES names,
 * runs both ends of its connections on it, and reports on stdout:
 *
 *   ok NAME            a check passed
 *   FAIL NAME: WHY     a check failed (the program goes on where it can)
 *
 * and exits 0 only if every check passed. A broken precondition (setup)
 * prints FAIL and exits at once.
 */
#ifndef SOFTROCE_C_API_COMMON_H
#define SOFTROCE_C_API_COMMON_H

#define _GNU_SOURCE
#include <infiniband/verbs.h>

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The check running (named in FAIL lines and in the watchdog's message). */
static const char *stage = "setup";
/* Whether the running check has failed an expectation. */
static int stage_failed;
/* Checks that failed. */
static int failures;

static inline void on_alarm(int sig)
{
	char msg[200];
	int n;

	(void)sig;
	n = snprintf(msg, sizeof(msg), "FAIL %s: timed out (watchdog)\n", stage);
	if (n > 0 && write(1, msg, (size_t)n) < 0)
		_exit(4);
	_exit(3);
}

/* Kills the program with a FAIL line if it runs longer than `secs`. */
static inline void watchdog(unsigned secs)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGALRM, on_alarm);
	alarm(secs);
}

/* Starts the check `name`. */
static inline void begin(const char *name)
{
	stage = name;
	stage_failed = 0;
}

/* Ends the running check: prints "ok NAME" unless it failed. */
static inline void end(void)
{
	if (!stage_failed)
		printf("ok %s\n", stage);
	stage = "between checks";
}

static void fail_line(const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static inline void fail_line(const char *file, int line, const char *fmt, ...)
{
	va_list ap;

	if (!stage_failed)
		failures++;
	stage_failed = 1;
	printf("FAIL %s: ", stage);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf(" (%s:%d)\n", file, line);
	fflush(stdout);
}

/* An expectation of the running check; on failure the check fails and the
 * program goes on. */
#define EXPECT(cond, ...)                                                      \
	do {                                                                   \
		if (!(cond))                                                   \
			fail_line(__FILE__, __LINE__, __VA_ARGS__);            \
	} while (0)

/* A precondition: on failure the program stops. */
#define REQUIRE(cond, ...)                                                     \
	do {                                                                   \
		if (!(cond)) {                                                 \
			fail_line(__FILE__, __LINE__, __VA_ARGS__);            \
			exit(1);                                               \
		}                                                              \
	} while (0)

/* Exit status: 0 only if every check passed. */
static inline int finish(void)
{
	fflush(stdout);
	return failures ? 1 : 0;
}

static inline long long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static inline void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* Waits until ibv_start_poll finds a completion on the extended CQ `cq` or
 * `ms` passed; returns its result (0: a completion, polling started). */
static inline int start_poll_wait(struct ibv_cq_ex *cq, int ms)
{
	struct ibv_poll_cq_attr attr = { 0 };
	long long deadline = now_ms() + ms;
	int r;

	while ((r = ibv_start_poll(cq, &attr)) == ENOENT && now_ms() < deadline)
		sleep_ms(1);
	return r;
}

/* Polls `cq` until `n` completions arrived or `ms` passed; returns how many
 * arrived (or a negative ibv_poll_cq result). */
static inline int poll_n(struct ibv_cq *cq, int n, struct ibv_wc *wc, int ms)
{
	long long deadline = now_ms() + ms;
	int got = 0;

	while (got < n) {
		int r = ibv_poll_cq(cq, n - got, wc + got);

		if (r < 0)
			return r;
		got += r;
		if (got < n) {
			if (now_ms() > deadline)
				break;
			if (r == 0)
				sleep_ms(1);
		}
	}
	return got;
}

/* Whether no completion arrives on `cq` within `ms` (one that does is
 * consumed and its wr_id stored in *wr_id). */
static inline int quiet_for(struct ibv_cq *cq, int ms, uint64_t *wr_id)
{
	struct ibv_wc wc;

	if (poll_n(cq, 1, &wc, ms) == 1) {
		if (wr_id)
			*wr_id = wc.wr_id;
		return 0;
	}
	return 1;
}

/* One open device with a PD, and its IPv4 GID. */
struct dev {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	union ibv_gid gid;
	int gid_index;
	struct ibv_port_attr port;
};

/* An AH to the device's own IPv4 GID (UD datagrams to this host). */
static inline struct ibv_ah *self_ah(const struct dev *d)
{
	struct ibv_ah_attr a;
	struct ibv_ah *ah;

	memset(&a, 0, sizeof(a));
	a.is_global = 1;
	a.grh.dgid = d->gid;
	a.grh.sgid_index = (uint8_t)d->gid_index;
	a.grh.hop_limit = 64;
	a.port_num = 1;
	ah = ibv_create_ah(d->pd, &a);
	REQUIRE(ah != NULL, "ibv_create_ah: errno %d", errno);
	return ah;
}

/* `ibv_create_qp_ex` of a `type` QP of depth 4 on `pd` asking for the
 * send operations `ops`; errno says why when it returns NULL. */
static inline struct ibv_qp *create_qp_ops(struct ibv_context *ctx, struct ibv_pd *pd, enum ibv_qp_type type,
					   struct ibv_cq *scq, struct ibv_cq *rcq, uint64_t ops)
{
	struct ibv_qp_init_attr_ex a;

	memset(&a, 0, sizeof(a));
	a.qp_type = type;
	a.send_cq = scq;
	a.recv_cq = rcq;
	a.cap.max_send_wr = 4;
	a.cap.max_recv_wr = 4;
	a.cap.max_send_sge = 1;
	a.cap.max_recv_sge = 1;
	a.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	a.pd = pd;
	a.send_ops_flags = ops;
	errno = 0;
	return ibv_create_qp_ex(ctx, &a);
}

/* The GID index of the device's IPv4 address (rxe's layout: index 1). */
#define IPV4_GID_INDEX 1

static inline void open_dev(struct dev *d)
{
	struct ibv_device **list;
	const char *name;
	int n = 0;
	int i;

	memset(d, 0, sizeof(*d));
	list = ibv_get_device_list(&n);
	REQUIRE(list != NULL && n == 1, "ibv_get_device_list: %p, %d devices (errno %d)", (void *)list, n, errno);
	name = ibv_get_device_name(list[0]);
	/* Proves the program runs over softroce, not another libibverbs. */
	REQUIRE(name && strcmp(name, "softroce_lo") == 0, "device name %s, expected softroce_lo", name ? name : "(null)");
	d->ctx = ibv_open_device(list[0]);
	ibv_free_device_list(list);
	REQUIRE(d->ctx != NULL, "ibv_open_device: errno %d", errno);
	REQUIRE(ibv_query_port(d->ctx, 1, &d->port) == 0, "ibv_query_port failed");
	REQUIRE(d->port.link_layer == IBV_LINK_LAYER_ETHERNET, "link layer %d", d->port.link_layer);
	d->gid_index = IPV4_GID_INDEX;
	REQUIRE(ibv_query_gid(d->ctx, 1, d->gid_index, &d->gid) == 0, "ibv_query_gid(1) failed");
	for (i = 0; i < 10; i++)
		REQUIRE(d->gid.raw[i] == 0, "GID 1 is not IPv4-mapped");
	REQUIRE(d->gid.raw[10] == 0xff && d->gid.raw[11] == 0xff, "GID 1 is not IPv4-mapped");
	d->pd = ibv_alloc_pd(d->ctx);
	REQUIRE(d->pd != NULL, "ibv_alloc_pd: errno %d", errno);
}

/* A page-aligned, zeroed buffer. */
static inline uint8_t *alloc_buf(size_t len)
{
	void *p = NULL;

	REQUIRE(posix_memalign(&p, 4096, len) == 0, "posix_memalign");
	memset(p, 0, len);
	return p;
}

#define ALL_ACCESS                                                             \
	(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)

/* A QP made with ibv_create_qp_ex; `send_ops` != 0 asks for the ibv_wr_* API. */
static inline struct ibv_qp *make_qp(struct dev *d, enum ibv_qp_type type, struct ibv_cq *scq, struct ibv_cq *rcq,
			      struct ibv_srq *srq, uint64_t send_ops)
{
	struct ibv_qp_init_attr_ex a;
	struct ibv_qp *qp;

	memset(&a, 0, sizeof(a));
	a.qp_type = type;
	a.send_cq = scq;
	a.recv_cq = rcq;
	a.srq = srq;
	a.cap.max_send_wr = 64;
	a.cap.max_recv_wr = srq ? 0 : 64;
	a.cap.max_send_sge = 4;
	a.cap.max_recv_sge = srq ? 0 : 4;
	a.cap.max_inline_data = 64;
	a.comp_mask = IBV_QP_INIT_ATTR_PD;
	a.pd = d->pd;
	if (send_ops) {
		a.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
		a.send_ops_flags = send_ops;
	}
	qp = ibv_create_qp_ex(d->ctx, &a);
	REQUIRE(qp != NULL, "ibv_create_qp_ex(type %d, ops %#" PRIx64 "): errno %d", type, send_ops, errno);
	return qp;
}

/* RESET -> INIT -> RTR -> RTS for an RC QP talking to `dest_qpn` on the
 * same device (GID index 1 at both ends), granting `access` remotely. */
static inline void connect_rc_access(struct dev *d, struct ibv_qp *qp, uint32_t dest_qpn, unsigned access)
{
	struct ibv_qp_attr a;
	int r;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.pkey_index = 0;
	a.port_num = 1;
	a.qp_access_flags = access;
	r = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
	REQUIRE(r == 0, "modify to INIT: %d", r);

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dest_qpn;
	a.rq_psn = dest_qpn & 0xffffff;
	a.max_dest_rd_atomic = 4;
	a.min_rnr_timer = 1;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = d->gid;
	a.ah_attr.grh.sgid_index = (uint8_t)d->gid_index;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = 1;
	r = ibv_modify_qp(qp, &a,
			  IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
	REQUIRE(r == 0, "modify to RTR: %d", r);

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = qp->qp_num & 0xffffff;
	a.max_rd_atomic = 4;
	r = ibv_modify_qp(qp, &a,
			  IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
				  IBV_QP_MAX_QP_RD_ATOMIC);
	REQUIRE(r == 0, "modify to RTS: %d", r);
	REQUIRE(qp->state == IBV_QPS_RTS, "qp->state %d after RTS", qp->state);
}

/* connect_rc_access with remote WRITE, READ and atomics. */
static inline void connect_rc(struct dev *d, struct ibv_qp *qp, uint32_t dest_qpn)
{
	connect_rc_access(d, qp, dest_qpn, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
}

/* Connects two RC QPs of the device to each other. */
static inline void connect_pair(struct dev *d, struct ibv_qp *a, struct ibv_qp *b)
{
	connect_rc(d, a, b->qp_num);
	connect_rc(d, b, a->qp_num);
}

/* RESET -> INIT -> RTR -> RTS for a UD QP with Q_Key `qkey`. */
static inline void ready_ud(struct ibv_qp *qp, uint32_t qkey)
{
	struct ibv_qp_attr a;
	int r;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qkey = qkey;
	r = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
	REQUIRE(r == 0, "UD modify to INIT: %d", r);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	r = ibv_modify_qp(qp, &a, IBV_QP_STATE);
	REQUIRE(r == 0, "UD modify to RTR: %d", r);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 1;
	r = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
	REQUIRE(r == 0, "UD modify to RTS: %d", r);
}

/* Posts one receive of `len` bytes at `addr`. */
static inline void post_recv1(struct ibv_qp *qp, uint64_t wr_id, struct ibv_mr *mr, void *addr, uint32_t len)
{
	struct ibv_sge sge = { (uintptr_t)addr, len, mr->lkey };
	struct ibv_recv_wr wr, *bad = NULL;
	int r;

	memset(&wr, 0, sizeof(wr));
	wr.wr_id = wr_id;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	r = ibv_post_recv(qp, &wr, &bad);
	REQUIRE(r == 0, "ibv_post_recv: %d", r);
}

/* Posts one signaled SEND of `len` bytes at `addr` with the old API. */
static inline int post_send1(struct ibv_qp *qp, uint64_t wr_id, struct ibv_mr *mr, void *addr, uint32_t len,
		      unsigned flags)
{
	struct ibv_sge sge = { (uintptr_t)addr, len, mr->lkey };
	struct ibv_send_wr wr, *bad = NULL;

	memset(&wr, 0, sizeof(wr));
	wr.wr_id = wr_id;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_SEND;
	wr.send_flags = IBV_SEND_SIGNALED | flags;
	return ibv_post_send(qp, &wr, &bad);
}

/* Posts a signaled 16-byte RDMA WRITE from `src` (in `mr`) to `dst` (in
 * `dst_mr`) under a wrong R_Key: the requester completes with
 * REM_ACCESS_ERR and the responder's QP goes to ERR with
 * IBV_EVENT_QP_FATAL. */
static inline int post_write_bad_rkey(struct ibv_qp *qp, uint64_t wr_id, struct ibv_mr *mr, void *src,
				      struct ibv_mr *dst_mr, void *dst)
{
	struct ibv_sge sge = { (uintptr_t)src, 16, mr->lkey };
	struct ibv_send_wr wr, *bad = NULL;

	memset(&wr, 0, sizeof(wr));
	wr.wr_id = wr_id;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_RDMA_WRITE;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.wr.rdma.remote_addr = (uintptr_t)dst;
	wr.wr.rdma.rkey = dst_mr->rkey ^ 0x300;
	return ibv_post_send(qp, &wr, &bad);
}

/* Fills `len` bytes with a pattern depending on `seed`. */
static inline void fill(uint8_t *p, size_t len, unsigned seed)
{
	size_t i;

	for (i = 0; i < len; i++)
		p[i] = (uint8_t)(seed * 31 + i * 7 + (i >> 8));
}

/* Expects a completion's fields. */
#define EXPECT_WC(wc, id, st, op)                                                                              \
	do {                                                                                                       \
		EXPECT((wc).wr_id == (uint64_t)(id), "wr_id %" PRIu64 ", expected %" PRIu64, (uint64_t)(wc).wr_id, \
		       (uint64_t)(id));                                                                            \
		EXPECT((wc).status == (st), "status %s (%d), expected %s", ibv_wc_status_str((wc).status),          \
		       (wc).status, ibv_wc_status_str(st));                                                        \
		if ((wc).status == IBV_WC_SUCCESS)                                                                 \
			EXPECT((wc).opcode == (op), "opcode %d, expected %d", (wc).opcode, (op));                   \
	} while (0)

#endif
