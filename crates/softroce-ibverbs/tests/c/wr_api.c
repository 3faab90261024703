/*
 * The ibv_wr_* work-request API (perftest's default path): QPs made with
 * ibv_create_qp_ex + IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, ibv_qp_to_qp_ex, and
 * every builder and setter reached through the ibv_qp_ex pointers, on an
 * RC pair, a UD pair and a UC pair of one device; which send_ops_flags
 * each QP type takes.
 */
#include "common.h"

#define LEN 8192

static struct dev d;
static struct ibv_cq *scq, *rcq;
static struct ibv_qp *qa, *qb;
static struct ibv_qp_ex *xa;
static uint8_t *abuf, *bbuf;
static struct ibv_mr *amr, *bmr;

/* Posts a receive at B's buffer offset `off`. */
static void recv_b(uint64_t wr_id, size_t off, uint32_t len)
{
	post_recv1(qb, wr_id, bmr, bbuf + off, len);
}

/* Waits for one send completion of A. */
static int send_wc(struct ibv_wc *wc)
{
	int n = poll_n(scq, 1, wc, 3000);

	EXPECT(n == 1, "no send completion (poll gave %d)", n);
	return n == 1;
}

/* Waits for one receive completion of B. */
static int recv_wc(struct ibv_wc *wc)
{
	int n = poll_n(rcq, 1, wc, 3000);

	EXPECT(n == 1, "no receive completion (poll gave %d)", n);
	return n == 1;
}

static void check_qp_to_qp_ex(void)
{
	struct ibv_qp_init_attr plain;
	struct ibv_qp *qp;

	begin("qp_to_qp_ex");
	EXPECT(xa != NULL, "ibv_qp_to_qp_ex gave NULL for a QP with send_ops_flags");
	EXPECT(xa && &xa->qp_base == qa, "qp_ex does not start with the ibv_qp");
	memset(&plain, 0, sizeof(plain));
	plain.send_cq = scq;
	plain.recv_cq = rcq;
	plain.qp_type = IBV_QPT_RC;
	plain.cap.max_send_wr = 1;
	plain.cap.max_recv_wr = 1;
	plain.cap.max_send_sge = 1;
	plain.cap.max_recv_sge = 1;
	qp = ibv_create_qp(d.pd, &plain);
	REQUIRE(qp != NULL, "ibv_create_qp: errno %d", errno);
	EXPECT(ibv_qp_to_qp_ex(qp) == NULL, "ibv_qp_to_qp_ex of a plain QP is not NULL");
	EXPECT(ibv_destroy_qp(qp) == 0, "ibv_destroy_qp");
	end();
}

static void check_send(void)
{
	struct ibv_wc wc;
	int r;

	begin("wr_send");
	fill(abuf, 100, 1);
	memset(bbuf, 0xee, 256);
	recv_b(11, 0, 256);
	ibv_wr_start(xa);
	xa->wr_id = 101;
	xa->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(xa);
	ibv_wr_set_sge(xa, amr->lkey, (uintptr_t)abuf, 100);
	r = ibv_wr_complete(xa);
	EXPECT(r == 0, "ibv_wr_complete: %d", r);
	if (send_wc(&wc))
		EXPECT_WC(wc, 101, IBV_WC_SUCCESS, IBV_WC_SEND);
	if (recv_wc(&wc)) {
		EXPECT_WC(wc, 11, IBV_WC_SUCCESS, IBV_WC_RECV);
		EXPECT(wc.byte_len == 100, "byte_len %u", wc.byte_len);
		EXPECT(wc.qp_num == qb->qp_num, "qp_num %u, expected %u", wc.qp_num, qb->qp_num);
		EXPECT(wc.src_qp == qa->qp_num, "src_qp %u, expected %u", wc.src_qp, qa->qp_num);
		EXPECT((wc.wc_flags & (IBV_WC_WITH_IMM | IBV_WC_WITH_INV)) == 0, "wc_flags %#x", wc.wc_flags);
	}
	EXPECT(memcmp(abuf, bbuf, 100) == 0, "payload differs");
	EXPECT(bbuf[100] == 0xee && bbuf[255] == 0xee, "bytes past the message were written");
	end();
}

static void check_send_imm(void)
{
	struct ibv_wc wc;
	int r;

	begin("wr_send_imm");
	fill(abuf, 64, 2);
	recv_b(12, 0, 256);
	ibv_wr_start(xa);
	xa->wr_id = 102;
	xa->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send_imm(xa, htonl(0x12345678));
	ibv_wr_set_sge(xa, amr->lkey, (uintptr_t)abuf, 64);
	r = ibv_wr_complete(xa);
	EXPECT(r == 0, "ibv_wr_complete: %d", r);
	if (send_wc(&wc))
		EXPECT_WC(wc, 102, IBV_WC_SUCCESS, IBV_WC_SEND);
	if (recv_wc(&wc)) {
		EXPECT_WC(wc, 12, IBV_WC_SUCCESS, IBV_WC_RECV);
		EXPECT(wc.byte_len == 64, "byte_len %u", wc.byte_len);
		EXPECT(wc.wc_flags & IBV_WC_WITH_IMM, "wc_flags %#x lack WITH_IMM", wc.wc_flags);
		/* imm_data stays in network order (verbs.h: __be32). */
		EXPECT(wc.imm_data == htonl(0x12345678), "imm_data %#x, expected %#x", wc.imm_data, htonl(0x12345678));
	}
	EXPECT(memcmp(abuf, bbuf, 64) == 0, "payload differs");
	end();
}

static void check_write_sge_list(void)
{
	struct ibv_sge sges[2] = {
		{ (uintptr_t)abuf, 100, amr->lkey },
		{ (uintptr_t)(abuf + 500), 200, amr->lkey },
	};
	struct ibv_wc wc;
	int r;

	begin("wr_rdma_write_sge_list");
	fill(abuf, 1024, 3);
	memset(bbuf + 1024, 0, 512);
	ibv_wr_start(xa);
	xa->wr_id = 103;
	xa->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(xa, bmr->rkey, (uintptr_t)(bbuf + 1024));
	ibv_wr_set_sge_list(xa, 2, sges);
	r = ibv_wr_complete(xa);
	EXPECT(r == 0, "ibv_wr_complete: %d", r);
	if (send_wc(&wc))
		EXPECT_WC(wc, 103, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
	EXPECT(memcmp(bbuf + 1024, abuf, 100) == 0, "first SGE's bytes differ");
	EXPECT(memcmp(bbuf + 1124, abuf + 500, 200) == 0, "second SGE's bytes differ");
	EXPECT(bbuf[1324] == 0, "wrote past 300 bytes");
	EXPECT(quiet_for(rcq, 20, NULL), "an RDMA WRITE made a receive completion");
	end();
}

static void check_write_imm(void)
{
	struct ibv_wc wc;
	int r;

	begin("wr_rdma_write_imm");
	fill(abuf, 300, 4);
	recv_b(14, 0, 16);
	ibv_wr_start(xa);
	xa->wr_id = 104;
	xa->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write_imm(xa, bmr->rkey, (uintptr_t)(bbuf + 2048), htonl(0xcafe0001));
	ibv_wr_set_sge(xa, amr->lkey, (uintptr_t)abuf, 300);
	r = ibv_wr_complete(xa);
	EXPECT(r == 0, "ibv_wr_complete: %d", r);
	if (send_wc(&wc))
		EXPECT_WC(wc, 104, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
	if (recv_wc(&wc)) {
		EXPECT_WC(wc, 14, IBV_WC_SUCCESS, IBV_WC_RECV_RDMA_WITH_IMM);
		EXPECT(wc.byte_len == 300, "byte_len %u", wc.byte_len);
		EXPECT(wc.wc_flags & IBV_WC_WITH_IMM, "wc_flags %#x lack WITH_IMM", wc.wc_flags);
		EXPECT(wc.imm_data == htonl(0xcafe0001), "imm_data %#x", wc.imm_data);
	}
	EXPECT(memcmp(bbuf + 2048, abuf, 300) == 0, "written bytes differ");
	end();
}

static void check_read(void)
{
	struct ibv_wc wc;
	int r;

	begin("wr_rdma_read");
	fill(bbuf + 3000, 1500, 5);
	memset(abuf + 4096, 0, 2048);
	ibv_wr_start(xa);
	xa->wr_id = 105;
	xa->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_read(xa, bmr->rkey, (uintptr_t)(bbuf + 3000));
	ibv_wr_set_sge(xa, amr->lkey, (uintptr_t)(abuf + 4096), 1500);
	r = ibv_wr_complete(xa);
	EXPECT(r == 0, "ibv_wr_complete: %d", r);
	if (send_wc(&wc)) {
		EXPECT_WC(wc, 105, IBV_WC_SUCCESS, IBV_WC_RDMA_READ);
		EXPECT(wc.byte_len == 1500, "byte_len %u", wc.byte_len);
	}
	EXPECT(memcmp(abuf + 4096, bbuf + 3000, 1500) == 0, "read bytes differ");
	EXPECT(abuf[4096 + 1500] == 0, "read past 1500 bytes");
	end();
}

static void check_atomics(void)
{
	volatile uint64_t *target = (volatile uint64_t *)(bbuf + 4096);
	volatile uint64_t *result = (volatile uint64_t *)(abuf + 6144);
	struct ibv_wc wc;
	int r;

	begin("wr_atomic_fetch_add");
	*target = 100;
	*result = 0;
	ibv_wr_start(xa);
	xa->wr_id = 106;
	xa->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_atomic_fetch_add(xa, bmr->rkey, (uintptr_t)target, 23);
	ibv_wr_set_sge(xa, amr->lkey, (uintptr_t)result, 8);
	r = ibv_wr_complete(xa);
	EXPECT(r == 0, "ibv_wr_complete: %d", r);
	if (send_wc(&wc)) {
		EXPECT_WC(wc, 106, IBV_WC_SUCCESS, IBV_WC_FETCH_ADD);
		EXPECT(wc.byte_len == 8, "byte_len %u", wc.byte_len);
	}
	EXPECT(*result == 100, "fetched %" PRIu64 ", expected 100", (uint64_t)*result);
	EXPECT(*target == 123, "target %" PRIu64 ", expected 123", (uint64_t)*target);
	end();

	begin("wr_atomic_cmp_swp");
	*result = 0;
	ibv_wr_start(xa);
	xa->wr_id = 107;
	xa->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_atomic_cmp_swp(xa, bmr->rkey, (uintptr_t)target, 123, 999);
	ibv_wr_set_sge(xa, amr->lkey, (uintptr_t)result, 8);
	/* A second one whose compare fails, in the same batch. */
	xa->wr_id = 108;
	ibv_wr_atomic_cmp_swp(xa, bmr->rkey, (uintptr_t)target, 5, 7);
	ibv_wr_set_sge(xa, amr->lkey, (uintptr_t)(result + 1), 8);
	r = ibv_wr_complete(xa);
	EXPECT(r == 0, "ibv_wr_complete: %d", r);
	if (send_wc(&wc)) {
		EXPECT_WC(wc, 107, IBV_WC_SUCCESS, IBV_WC_COMP_SWAP);
		EXPECT(wc.byte_len == 8, "byte_len %u", wc.byte_len);
	}
	if (send_wc(&wc))
		EXPECT_WC(wc, 108, IBV_WC_SUCCESS, IBV_WC_COMP_SWAP);
	EXPECT(result[0] == 123, "first swap fetched %" PRIu64, (uint64_t)result[0]);
	EXPECT(result[1] == 999, "second swap fetched %" PRIu64, (uint64_t)result[1]);
	EXPECT(*target == 999, "target %" PRIu64 ", expected 999", (uint64_t)*target);
	end();
}

static void check_inline(void)
{
	uint8_t data[48], expect[64], p1[10], p2[25], p3[15];
	struct ibv_data_buf list[3] = { { p1, sizeof(p1) }, { p2, sizeof(p2) }, { p3, sizeof(p3) } };
	struct ibv_wc wc;
	int r;

	begin("wr_set_inline_data");
	fill(data, sizeof(data), 6);
	memcpy(expect, data, sizeof(data));
	recv_b(16, 0, 256);
	ibv_wr_start(xa);
	xa->wr_id = 109;
	xa->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
	ibv_wr_send(xa);
	ibv_wr_set_inline_data(xa, data, sizeof(data));
	/* The setter copied the bytes: the buffer is the caller's again. */
	memset(data, 0, sizeof(data));
	r = ibv_wr_complete(xa);
	EXPECT(r == 0, "ibv_wr_complete: %d", r);
	if (send_wc(&wc))
		EXPECT_WC(wc, 109, IBV_WC_SUCCESS, IBV_WC_SEND);
	if (recv_wc(&wc)) {
		EXPECT_WC(wc, 16, IBV_WC_SUCCESS, IBV_WC_RECV);
		EXPECT(wc.byte_len == sizeof(data), "byte_len %u", wc.byte_len);
	}
	EXPECT(memcmp(bbuf, expect, sizeof(data)) == 0, "payload differs");
	end();

	begin("wr_set_inline_data_list");
	fill(p1, sizeof(p1), 7);
	fill(p2, sizeof(p2), 8);
	fill(p3, sizeof(p3), 9);
	memcpy(expect, p1, 10);
	memcpy(expect + 10, p2, 25);
	memcpy(expect + 35, p3, 15);
	memset(bbuf + 5000, 0, 64);
	ibv_wr_start(xa);
	xa->wr_id = 110;
	xa->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
	ibv_wr_rdma_write(xa, bmr->rkey, (uintptr_t)(bbuf + 5000));
	ibv_wr_set_inline_data_list(xa, 3, list);
	/* Copied by the setter: the buffers are the caller's again. */
	memset(p2, 0, sizeof(p2));
	r = ibv_wr_complete(xa);
	EXPECT(r == 0, "ibv_wr_complete: %d", r);
	if (send_wc(&wc))
		EXPECT_WC(wc, 110, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
	EXPECT(memcmp(bbuf + 5000, expect, 50) == 0, "written bytes differ");
	EXPECT(bbuf[5050] == 0, "wrote past 50 bytes");
	end();

	begin("wr_inline_too_long");
	/* More than max_inline_data (64): ibv_wr_complete fails, nothing is posted. */
	recv_b(17, 0, 256);
	{
		uint8_t big[200];

		memset(big, 1, sizeof(big));
		ibv_wr_start(xa);
		xa->wr_id = 111;
		xa->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
		ibv_wr_send(xa);
		ibv_wr_set_inline_data(xa, big, sizeof(big));
		r = ibv_wr_complete(xa);
	}
	EXPECT(r != 0, "ibv_wr_complete accepted 200 inline bytes (max_inline_data 64)");
	EXPECT(quiet_for(scq, 50, NULL), "a refused batch completed");
	/* The receive stays posted for the next check. */
	end();
}

static void check_batch(void)
{
	struct ibv_wc wc[4];
	int n, r;

	begin("wr_batch");
	fill(abuf, 2048, 10);
	memset(bbuf, 0, 4096);
	/* wr_inline_too_long left receive 17 posted; add one more. */
	recv_b(18, 2048, 256);
	ibv_wr_start(xa);
	xa->wr_id = 201;
	xa->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(xa);
	ibv_wr_set_sge(xa, amr->lkey, (uintptr_t)abuf, 40);
	xa->wr_id = 202;
	xa->wr_flags = 0; /* unsignaled: no completion */
	ibv_wr_rdma_write(xa, bmr->rkey, (uintptr_t)(bbuf + 1024));
	ibv_wr_set_sge(xa, amr->lkey, (uintptr_t)(abuf + 100), 500);
	xa->wr_id = 203;
	xa->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send_imm(xa, htonl(77));
	ibv_wr_set_sge(xa, amr->lkey, (uintptr_t)(abuf + 1000), 70);
	r = ibv_wr_complete(xa);
	EXPECT(r == 0, "ibv_wr_complete: %d", r);
	n = poll_n(scq, 2, wc, 3000);
	EXPECT(n == 2, "%d send completions, expected 2", n);
	if (n == 2) {
		EXPECT_WC(wc[0], 201, IBV_WC_SUCCESS, IBV_WC_SEND);
		EXPECT_WC(wc[1], 203, IBV_WC_SUCCESS, IBV_WC_SEND);
	}
	EXPECT(quiet_for(scq, 30, NULL), "the unsignaled WRITE completed");
	n = poll_n(rcq, 2, wc, 3000);
	EXPECT(n == 2, "%d receive completions, expected 2", n);
	if (n == 2) {
		EXPECT_WC(wc[0], 17, IBV_WC_SUCCESS, IBV_WC_RECV);
		EXPECT(wc[0].byte_len == 40, "byte_len %u", wc[0].byte_len);
		EXPECT_WC(wc[1], 18, IBV_WC_SUCCESS, IBV_WC_RECV);
		EXPECT(wc[1].byte_len == 70 && (wc[1].wc_flags & IBV_WC_WITH_IMM) && wc[1].imm_data == htonl(77),
		       "second receive: byte_len %u flags %#x imm %#x", wc[1].byte_len, wc[1].wc_flags,
		       wc[1].imm_data);
	}
	EXPECT(memcmp(bbuf, abuf, 40) == 0, "first SEND's bytes differ");
	EXPECT(memcmp(bbuf + 1024, abuf + 100, 500) == 0, "WRITE's bytes differ");
	EXPECT(memcmp(bbuf + 2048, abuf + 1000, 70) == 0, "SEND_IMM's bytes differ");
	end();
}

static void check_long_batch(void)
{
	struct ibv_wc wc[64];
	int i, n, r;

	begin("wr_long_batch");
	/* 40 WRITEs in one batch (more than the library hands the engine at
	 * once): all posted, in order, each to its own place. */
	fill(abuf, 4096, 12);
	memset(bbuf + 6000, 0, 40 * 16);
	ibv_wr_start(xa);
	for (i = 0; i < 40; i++) {
		xa->wr_id = 700 + i;
		xa->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_rdma_write(xa, bmr->rkey, (uintptr_t)(bbuf + 6000 + 16 * i));
		ibv_wr_set_sge(xa, amr->lkey, (uintptr_t)(abuf + 100 * i), 16);
	}
	r = ibv_wr_complete(xa);
	EXPECT(r == 0, "ibv_wr_complete: %d", r);
	n = poll_n(scq, 40, wc, 3000);
	EXPECT(n == 40, "%d completions, expected 40", n);
	for (i = 0; i < n; i++)
		EXPECT_WC(wc[i], (uint64_t)(700 + i), IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
	for (i = 0; i < 40; i++)
		EXPECT(memcmp(bbuf + 6000 + 16 * i, abuf + 100 * i, 16) == 0, "WRITE %d's bytes differ", i);
	end();
}

static void check_abort(void)
{
	struct ibv_wc wc;
	uint64_t id = 0;
	int r;

	begin("wr_abort");
	fill(abuf, 200, 11);
	recv_b(19, 0, 256);
	ibv_wr_start(xa);
	xa->wr_id = 301;
	xa->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(xa);
	ibv_wr_set_sge(xa, amr->lkey, (uintptr_t)abuf, 10);
	ibv_wr_abort(xa);
	EXPECT(quiet_for(scq, 50, &id), "an aborted WR completed (wr_id %" PRIu64 ")", id);
	EXPECT(quiet_for(rcq, 10, &id), "an aborted WR was received (wr_id %" PRIu64 ")", id);
	ibv_wr_start(xa);
	xa->wr_id = 302;
	ibv_wr_send(xa);
	ibv_wr_set_sge(xa, amr->lkey, (uintptr_t)abuf, 20);
	r = ibv_wr_complete(xa);
	EXPECT(r == 0, "ibv_wr_complete after abort: %d", r);
	if (send_wc(&wc))
		EXPECT_WC(wc, 302, IBV_WC_SUCCESS, IBV_WC_SEND);
	if (recv_wc(&wc)) {
		EXPECT_WC(wc, 19, IBV_WC_SUCCESS, IBV_WC_RECV);
		EXPECT(wc.byte_len == 20, "byte_len %u: the aborted WR was sent", wc.byte_len);
	}
	end();
}

static void check_overflow(void)
{
	struct ibv_qp_attr attr;
	struct ibv_qp_init_attr init;
	uint64_t id = 0;
	uint32_t i, depth;
	int r;

	begin("wr_batch_overflow");
	/* A batch longer than the send queue: ibv_wr_complete fails and posts
	 * nothing (the whole batch is aborted, as the man page says). */
	REQUIRE(ibv_query_qp(qa, &attr, IBV_QP_CAP, &init) == 0, "ibv_query_qp");
	depth = init.cap.max_send_wr;
	REQUIRE(depth >= 64 && depth < 4096, "max_send_wr %u", depth);
	ibv_wr_start(xa);
	for (i = 0; i <= depth; i++) {
		xa->wr_id = 500 + i;
		xa->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_rdma_write(xa, bmr->rkey, (uintptr_t)(bbuf + 7000));
		ibv_wr_set_sge(xa, amr->lkey, (uintptr_t)abuf, 8);
	}
	r = ibv_wr_complete(xa);
	EXPECT(r != 0, "ibv_wr_complete accepted %u WRs on a send queue of %u", depth + 1, depth);
	EXPECT(quiet_for(scq, 50, &id), "part of the refused batch was posted (wr_id %" PRIu64 " completed)", id);
	/* Drain whatever was posted, so later checks start clean. */
	while (poll_n(scq, 1, &(struct ibv_wc){ 0 }, 20) == 1)
		;
	end();
}

/* The UD pair: SEND with ibv_wr_set_ud_addr, the GRH area, and a reply. */
static void check_ud(void)
{
	const uint32_t qkey = 0x11111111;
	struct ibv_cq *ucq;
	struct ibv_qp *ua, *ub;
	struct ibv_qp_ex *xua, *xub;
	struct ibv_ah_attr ah_attr;
	struct ibv_ah *ah, *reply;
	struct ibv_wc wc, ud_wc;
	uint8_t *grh;
	int r;

	ucq = ibv_create_cq(d.ctx, 16, NULL, NULL, 0);
	REQUIRE(ucq != NULL, "ibv_create_cq");
	ua = make_qp(&d, IBV_QPT_UD, scq, ucq, NULL, IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM);
	ub = make_qp(&d, IBV_QPT_UD, scq, ucq, NULL, IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM);
	xua = ibv_qp_to_qp_ex(ua);
	xub = ibv_qp_to_qp_ex(ub);
	REQUIRE(xua && xub, "ibv_qp_to_qp_ex of UD QPs");
	ready_ud(ua, qkey);
	ready_ud(ub, qkey);
	ah = self_ah(&d);

	begin("wr_ud_send");
	fill(abuf, 64, 12);
	memset(bbuf, 0xaa, 512);
	post_recv1(ub, 21, bmr, bbuf, 40 + 256);
	ibv_wr_start(xua);
	xua->wr_id = 401;
	xua->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(xua);
	ibv_wr_set_ud_addr(xua, ah, ub->qp_num, qkey);
	ibv_wr_set_sge(xua, amr->lkey, (uintptr_t)abuf, 64);
	r = ibv_wr_complete(xua);
	EXPECT(r == 0, "ibv_wr_complete: %d", r);
	if (send_wc(&wc))
		EXPECT_WC(wc, 401, IBV_WC_SUCCESS, IBV_WC_SEND);
	if (poll_n(ucq, 1, &wc, 3000) == 1) {
		EXPECT_WC(wc, 21, IBV_WC_SUCCESS, IBV_WC_RECV);
		EXPECT(wc.byte_len == 40 + 64, "byte_len %u, expected 104 (GRH + payload)", wc.byte_len);
		EXPECT(wc.wc_flags & IBV_WC_GRH, "wc_flags %#x lack GRH", wc.wc_flags);
		EXPECT(wc.src_qp == ua->qp_num, "src_qp %u, expected %u", wc.src_qp, ua->qp_num);
		EXPECT(wc.qp_num == ub->qp_num, "qp_num %u", wc.qp_num);
	} else {
		EXPECT(0, "no UD receive completion");
	}
	/* RoCEv2 over IPv4: the IPv4 header fills the GRH area's last 20 bytes. */
	grh = bbuf;
	EXPECT(grh[20] == 0x45, "GRH area byte 20 is %#x, not an IPv4 header", grh[20]);
	EXPECT(memcmp(grh + 32, d.gid.raw + 12, 4) == 0, "the IPv4 source is %u.%u.%u.%u, not the sender's", grh[32],
	       grh[33], grh[34], grh[35]);
	EXPECT(memcmp(grh + 36, d.gid.raw + 12, 4) == 0, "the IPv4 destination is not ours");
	EXPECT(memcmp(bbuf + 40, abuf, 64) == 0, "payload differs");
	EXPECT(bbuf[104] == 0xaa, "wrote past the payload");
	end();

	begin("wr_ud_send_imm_inline");
	{
		uint8_t a[5] = { 1, 2, 3, 4, 5 }, b[3] = { 6, 7, 8 };
		struct ibv_data_buf bufs[2] = { { a, 5 }, { b, 3 } };

		post_recv1(ub, 22, bmr, bbuf, 40 + 256);
		ibv_wr_start(xua);
		xua->wr_id = 402;
		xua->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
		ibv_wr_send_imm(xua, htonl(0xabcdef));
		ibv_wr_set_inline_data_list(xua, 2, bufs);
		ibv_wr_set_ud_addr(xua, ah, ub->qp_num, qkey);
		r = ibv_wr_complete(xua);
		EXPECT(r == 0, "ibv_wr_complete: %d", r);
		if (send_wc(&wc))
			EXPECT_WC(wc, 402, IBV_WC_SUCCESS, IBV_WC_SEND);
		memset(&ud_wc, 0, sizeof(ud_wc));
		if (poll_n(ucq, 1, &wc, 3000) == 1) {
			ud_wc = wc;
			EXPECT_WC(wc, 22, IBV_WC_SUCCESS, IBV_WC_RECV);
			EXPECT(wc.byte_len == 48, "byte_len %u", wc.byte_len);
			EXPECT((wc.wc_flags & (IBV_WC_GRH | IBV_WC_WITH_IMM)) == (IBV_WC_GRH | IBV_WC_WITH_IMM),
			       "wc_flags %#x", wc.wc_flags);
			EXPECT(wc.imm_data == htonl(0xabcdef), "imm_data %#x", wc.imm_data);
		} else {
			EXPECT(0, "no UD receive completion");
		}
		EXPECT(memcmp(bbuf + 40, a, 5) == 0 && memcmp(bbuf + 45, b, 3) == 0, "payload differs");
	}
	end();

	begin("wr_ud_missing_addr");
	/* A UD WR without ibv_wr_set_ud_addr: the batch fails, nothing is sent,
	 * not even the good WR before it. */
	post_recv1(ub, 24, bmr, bbuf, 40 + 256);
	ibv_wr_start(xua);
	xua->wr_id = 404;
	xua->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(xua);
	ibv_wr_set_ud_addr(xua, ah, ub->qp_num, qkey);
	ibv_wr_set_sge(xua, amr->lkey, (uintptr_t)abuf, 8);
	xua->wr_id = 405;
	ibv_wr_send(xua);
	ibv_wr_set_sge(xua, amr->lkey, (uintptr_t)abuf, 8);
	r = ibv_wr_complete(xua);
	EXPECT(r != 0, "ibv_wr_complete accepted a UD WR without an address");
	EXPECT(quiet_for(scq, 50, NULL), "part of the refused batch completed");
	EXPECT(quiet_for(ucq, 10, NULL), "part of the refused batch was received");
	/* The receive stays posted; use it. */
	ibv_wr_start(xua);
	xua->wr_id = 406;
	ibv_wr_send(xua);
	ibv_wr_set_ud_addr(xua, ah, ub->qp_num, qkey);
	ibv_wr_set_sge(xua, amr->lkey, (uintptr_t)abuf, 8);
	r = ibv_wr_complete(xua);
	EXPECT(r == 0, "ibv_wr_complete: %d", r);
	EXPECT(poll_n(scq, 1, &wc, 3000) == 1 && wc.wr_id == 406, "no completion of the good batch");
	EXPECT(poll_n(ucq, 1, &wc, 3000) == 1 && wc.wr_id == 24 && wc.byte_len == 48, "the good batch not received");
	end();

	begin("ud_ah_from_wc");
	/* B answers A through an AH made from the completion and GRH area of
	 * the last datagram (perftest's and ud_pingpong's way). */
	reply = ibv_create_ah_from_wc(d.pd, &ud_wc, (struct ibv_grh *)bbuf, 1);
	EXPECT(reply != NULL, "ibv_create_ah_from_wc: errno %d (%s)", errno, strerror(errno));
	if (reply) {
		post_recv1(ua, 23, amr, abuf + 4096, 40 + 64);
		ibv_wr_start(xub);
		xub->wr_id = 403;
		xub->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
		ibv_wr_send(xub);
		ibv_wr_set_ud_addr(xub, reply, ua->qp_num, qkey);
		ibv_wr_set_inline_data(xub, "pong", 4);
		r = ibv_wr_complete(xub);
		EXPECT(r == 0, "ibv_wr_complete: %d", r);
		if (send_wc(&wc))
			EXPECT_WC(wc, 403, IBV_WC_SUCCESS, IBV_WC_SEND);
		if (poll_n(ucq, 1, &wc, 3000) == 1) {
			EXPECT_WC(wc, 23, IBV_WC_SUCCESS, IBV_WC_RECV);
			EXPECT(wc.src_qp == ub->qp_num, "src_qp %u", wc.src_qp);
			EXPECT(memcmp(abuf + 4096 + 40, "pong", 4) == 0, "payload differs");
		} else {
			EXPECT(0, "the reply did not arrive");
		}
		EXPECT(ibv_destroy_ah(reply) == 0, "ibv_destroy_ah");
	}
	end();

	REQUIRE(ibv_destroy_ah(ah) == 0, "ibv_destroy_ah");
	REQUIRE(ibv_destroy_qp(ua) == 0 && ibv_destroy_qp(ub) == 0, "ibv_destroy_qp");
	REQUIRE(ibv_destroy_cq(ucq) == 0, "ibv_destroy_cq");
}

/* Each send_ops_flags bit alone on each QP type: what rxe's
 * check_qp_init_attr takes (rdma-core 44), EOPNOTSUPP otherwise. softroce
 * differs on UC: no SEND_WITH_INV (UC has no invalidating SEND opcode),
 * LOCAL_INV allowed (UC's ibv_post_send takes it). */
static void check_send_ops_by_type(void)
{
	static const struct {
		enum ibv_qp_type type;
		uint64_t allowed;
	} types[] = {
		{ IBV_QPT_RC, IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_SEND |
				      IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ |
				      IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD |
				      IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_SEND_WITH_INV |
				      IBV_QP_EX_WITH_ATOMIC_WRITE | (1ull << 13) /* FLUSH (rdma-core 45) */ },
		{ IBV_QPT_UC, IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_SEND |
				      IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV },
		{ IBV_QPT_UD, IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM },
		{ IBV_QPT_XRC_SEND, 0 },
		{ IBV_QPT_RAW_PACKET, 0 },
	};
	struct ibv_qp *qp;
	size_t t;
	int bit;

	begin("qp_ex_send_ops_by_type");
	for (t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
		for (bit = 0; bit < 16; bit++) {
			uint64_t f = 1ull << bit;
			int want = (types[t].allowed & f) != 0;

			qp = create_qp_ops(d.ctx, d.pd, types[t].type, scq, rcq, f);
			if (want) {
				EXPECT(qp != NULL, "type %d ops %#" PRIx64 " refused: errno %d", types[t].type, f, errno);
				EXPECT(!qp || ibv_qp_to_qp_ex(qp) != NULL, "type %d ops %#" PRIx64 ": no qp_ex",
				       types[t].type, f);
			} else {
				EXPECT(qp == NULL && errno == EOPNOTSUPP, "type %d ops %#" PRIx64 ": %p errno %d",
				       types[t].type, f, (void *)qp, errno);
			}
			if (qp)
				EXPECT(ibv_destroy_qp(qp) == 0, "ibv_destroy_qp");
		}
	}
	end();
}

/* RESET -> INIT -> RTR -> RTS for a UC QP towards `dest_qpn`. */
static void connect_uc(struct ibv_qp *qp, uint32_t dest_qpn)
{
	struct ibv_qp_attr a;
	int r;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
	r = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
	REQUIRE(r == 0, "UC modify to INIT: %d", r);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dest_qpn;
	a.rq_psn = dest_qpn & 0xffffff;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = d.gid;
	a.ah_attr.grh.sgid_index = (uint8_t)d.gid_index;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = 1;
	r = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN);
	REQUIRE(r == 0, "UC modify to RTR: %d", r);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = qp->qp_num & 0xffffff;
	r = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
	REQUIRE(r == 0, "UC modify to RTS: %d", r);
}

/* A UC pair made with UC's four data operations: each through the builder,
 * with its completions and bytes; an operation the QP was not made for
 * (READ, which UC has not at all, and LOCAL_INV, allowed but not asked
 * for) fails the batch with EOPNOTSUPP and posts nothing. */
static void check_uc(void)
{
	const uint64_t ops = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_WRITE |
			     IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM;
	struct ibv_cq *ucq;
	struct ibv_qp *ua, *ub;
	struct ibv_qp_ex *x;
	struct ibv_wc wc;
	uint64_t id;
	int r;

	ucq = ibv_create_cq(d.ctx, 16, NULL, NULL, 0);
	REQUIRE(ucq != NULL, "ibv_create_cq");
	ua = make_qp(&d, IBV_QPT_UC, scq, ucq, NULL, ops);
	ub = make_qp(&d, IBV_QPT_UC, scq, ucq, NULL, ops);
	x = ibv_qp_to_qp_ex(ua);
	REQUIRE(x != NULL && ibv_qp_to_qp_ex(ub) != NULL, "ibv_qp_to_qp_ex of UC QPs");
	connect_uc(ua, ub->qp_num);
	connect_uc(ub, ua->qp_num);

	begin("wr_uc_send");
	fill(abuf, 3000, 21);
	memset(bbuf, 0xee, 4096);
	post_recv1(ub, 31, bmr, bbuf, 4096);
	ibv_wr_start(x);
	x->wr_id = 601;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(x);
	ibv_wr_set_sge(x, amr->lkey, (uintptr_t)abuf, 3000);
	r = ibv_wr_complete(x);
	EXPECT(r == 0, "ibv_wr_complete: %d", r);
	if (send_wc(&wc))
		EXPECT_WC(wc, 601, IBV_WC_SUCCESS, IBV_WC_SEND);
	if (poll_n(ucq, 1, &wc, 3000) == 1) {
		EXPECT_WC(wc, 31, IBV_WC_SUCCESS, IBV_WC_RECV);
		EXPECT(wc.byte_len == 3000, "byte_len %u", wc.byte_len);
		EXPECT(wc.src_qp == ua->qp_num && wc.qp_num == ub->qp_num, "src_qp %u qp_num %u", wc.src_qp, wc.qp_num);
		EXPECT((wc.wc_flags & IBV_WC_WITH_IMM) == 0, "wc_flags %#x", wc.wc_flags);
	} else {
		EXPECT(0, "no UC receive completion");
	}
	EXPECT(memcmp(abuf, bbuf, 3000) == 0 && bbuf[3000] == 0xee, "payload differs");
	end();

	begin("wr_uc_send_imm");
	fill(abuf, 40, 22);
	post_recv1(ub, 32, bmr, bbuf, 4096);
	ibv_wr_start(x);
	x->wr_id = 602;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send_imm(x, htonl(0xc0ffee));
	ibv_wr_set_sge(x, amr->lkey, (uintptr_t)abuf, 40);
	r = ibv_wr_complete(x);
	EXPECT(r == 0, "ibv_wr_complete: %d", r);
	if (send_wc(&wc))
		EXPECT_WC(wc, 602, IBV_WC_SUCCESS, IBV_WC_SEND);
	if (poll_n(ucq, 1, &wc, 3000) == 1) {
		EXPECT_WC(wc, 32, IBV_WC_SUCCESS, IBV_WC_RECV);
		EXPECT(wc.byte_len == 40 && (wc.wc_flags & IBV_WC_WITH_IMM), "byte_len %u wc_flags %#x", wc.byte_len,
		       wc.wc_flags);
		EXPECT(wc.imm_data == htonl(0xc0ffee), "imm_data %#x", wc.imm_data);
	} else {
		EXPECT(0, "no UC receive completion");
	}
	EXPECT(memcmp(abuf, bbuf, 40) == 0, "payload differs");
	end();

	begin("wr_uc_rdma_write");
	fill(abuf, 2500, 23);
	memset(bbuf, 0, LEN);
	ibv_wr_start(x);
	x->wr_id = 603;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(x, bmr->rkey, (uintptr_t)(bbuf + 100));
	ibv_wr_set_sge(x, amr->lkey, (uintptr_t)abuf, 2500);
	r = ibv_wr_complete(x);
	EXPECT(r == 0, "ibv_wr_complete: %d", r);
	if (send_wc(&wc))
		EXPECT_WC(wc, 603, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
	/* UC has no ACK: the send completion says nothing about arrival. */
	for (id = 0; id < 300 && memcmp(abuf, bbuf + 100, 2500) != 0; id++)
		sleep_ms(10);
	EXPECT(memcmp(abuf, bbuf + 100, 2500) == 0, "the WRITE did not land");
	EXPECT(bbuf[99] == 0 && bbuf[2600] == 0, "bytes around the WRITE changed");
	EXPECT(quiet_for(ucq, 20, &id), "a WRITE made a receive completion (wr_id %" PRIu64 ")", id);
	end();

	begin("wr_uc_rdma_write_imm");
	fill(abuf, 64, 24);
	post_recv1(ub, 34, bmr, bbuf + 4096, 16);
	ibv_wr_start(x);
	x->wr_id = 604;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write_imm(x, bmr->rkey, (uintptr_t)bbuf, htonl(0x5eed));
	ibv_wr_set_sge(x, amr->lkey, (uintptr_t)abuf, 64);
	r = ibv_wr_complete(x);
	EXPECT(r == 0, "ibv_wr_complete: %d", r);
	if (send_wc(&wc))
		EXPECT_WC(wc, 604, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
	if (poll_n(ucq, 1, &wc, 3000) == 1) {
		EXPECT_WC(wc, 34, IBV_WC_SUCCESS, IBV_WC_RECV_RDMA_WITH_IMM);
		EXPECT(wc.byte_len == 64, "byte_len %u", wc.byte_len);
		EXPECT(wc.imm_data == htonl(0x5eed), "imm_data %#x", wc.imm_data);
	} else {
		EXPECT(0, "no receive completion for WRITE_WITH_IMM");
	}
	EXPECT(memcmp(abuf, bbuf, 64) == 0, "payload differs");
	end();

	begin("wr_uc_op_not_asked_for");
	post_recv1(ub, 35, bmr, bbuf, 4096);
	ibv_wr_start(x);
	x->wr_id = 605;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(x);
	ibv_wr_set_sge(x, amr->lkey, (uintptr_t)abuf, 8);
	x->wr_id = 606;
	ibv_wr_rdma_read(x, bmr->rkey, (uintptr_t)bbuf);
	ibv_wr_set_sge(x, amr->lkey, (uintptr_t)abuf, 8);
	r = ibv_wr_complete(x);
	EXPECT(r == EOPNOTSUPP, "a READ on UC: ibv_wr_complete %d", r);
	ibv_wr_start(x);
	x->wr_id = 607;
	ibv_wr_local_inv(x, bmr->rkey);
	r = ibv_wr_complete(x);
	EXPECT(r == EOPNOTSUPP, "LOCAL_INV not in send_ops_flags: ibv_wr_complete %d", r);
	EXPECT(quiet_for(scq, 50, &id), "part of a refused batch was posted (wr_id %" PRIu64 ")", id);
	EXPECT(quiet_for(ucq, 10, &id), "part of a refused batch was received (wr_id %" PRIu64 ")", id);
	end();

	REQUIRE(ibv_destroy_qp(ua) == 0 && ibv_destroy_qp(ub) == 0, "ibv_destroy_qp");
	REQUIRE(ibv_destroy_cq(ucq) == 0, "ibv_destroy_cq");
}

int main(void)
{
	const uint64_t ops = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_WRITE |
			     IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ |
			     IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;

	watchdog(40);
	open_dev(&d);
	scq = ibv_create_cq(d.ctx, 4096, NULL, NULL, 0);
	rcq = ibv_create_cq(d.ctx, 64, NULL, NULL, 0);
	REQUIRE(scq && rcq, "ibv_create_cq: errno %d", errno);
	abuf = alloc_buf(LEN);
	bbuf = alloc_buf(LEN);
	amr = ibv_reg_mr(d.pd, abuf, LEN, ALL_ACCESS);
	bmr = ibv_reg_mr(d.pd, bbuf, LEN, ALL_ACCESS);
	REQUIRE(amr && bmr, "ibv_reg_mr: errno %d", errno);
	qa = make_qp(&d, IBV_QPT_RC, scq, rcq, NULL, ops);
	qb = make_qp(&d, IBV_QPT_RC, scq, rcq, NULL, ops);
	xa = ibv_qp_to_qp_ex(qa);
	connect_pair(&d, qa, qb);

	check_qp_to_qp_ex();
	REQUIRE(xa != NULL, "no qp_ex");
	check_send();
	check_send_imm();
	check_write_sge_list();
	check_write_imm();
	check_read();
	check_atomics();
	check_inline();
	check_batch();
	check_long_batch();
	check_abort();
	check_overflow();
	check_ud();
	check_uc();
	check_send_ops_by_type();

	REQUIRE(ibv_destroy_qp(qa) == 0 && ibv_destroy_qp(qb) == 0, "ibv_destroy_qp");
	REQUIRE(ibv_dereg_mr(amr) == 0 && ibv_dereg_mr(bmr) == 0, "ibv_dereg_mr");
	REQUIRE(ibv_destroy_cq(scq) == 0 && ibv_destroy_cq(rcq) == 0, "ibv_destroy_cq");
	REQUIRE(ibv_dealloc_pd(d.pd) == 0, "ibv_dealloc_pd");
	REQUIRE(ibv_close_device(d.ctx) == 0, "ibv_close_device");
	free(abuf);
	free(bbuf);
	return finish();
}
