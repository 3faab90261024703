/*
 * The old posting API (ops.post_send / ops.post_recv through the inline
 * ibv_post_send / ibv_post_recv) with linked lists of WRs where a middle one
 * is bad: the return value, *bad_wr, and that the WRs before it were posted
 * and the ones from it on were not.
 */
#include "common.h"

#define LEN 8192

static struct dev d;
static struct ibv_cq *scq, *rcq;
static struct ibv_qp *qa, *qb;
static uint8_t *abuf, *bbuf;
static struct ibv_mr *amr, *bmr;

/* Four WRs: SEND, RDMA WRITE, (the one to spoil), SEND. */
static void make_list(struct ibv_send_wr wr[4], struct ibv_sge sge[4][5], uint64_t base)
{
	int i, j;

	memset(wr, 0, 4 * sizeof(*wr));
	for (i = 0; i < 4; i++) {
		for (j = 0; j < 5; j++) {
			sge[i][j].addr = (uintptr_t)(abuf + 100 * i + 10 * j);
			sge[i][j].length = 10;
			sge[i][j].lkey = amr->lkey;
		}
		wr[i].wr_id = base + i;
		wr[i].next = i < 3 ? &wr[i + 1] : NULL;
		wr[i].sg_list = sge[i];
		wr[i].num_sge = 1;
		wr[i].opcode = IBV_WR_SEND;
		wr[i].send_flags = IBV_SEND_SIGNALED;
	}
	wr[1].opcode = IBV_WR_RDMA_WRITE;
	wr[1].wr.rdma.remote_addr = (uintptr_t)(bbuf + 4096);
	wr[1].wr.rdma.rkey = bmr->rkey;
}

/* Posts the list with wr[2] spoiled; checks the result. */
static void bad_middle(const char *name, uint64_t base, void (*spoil)(struct ibv_send_wr *))
{
	struct ibv_send_wr wr[4], *bad = NULL;
	struct ibv_sge sge[4][5];
	struct ibv_wc wc[4];
	uint64_t id = 0;
	int n, r;

	begin(name);
	fill(abuf, 1024, (unsigned)base);
	memset(bbuf, 0, LEN);
	post_recv1(qb, base + 50, bmr, bbuf, 256);
	post_recv1(qb, base + 51, bmr, bbuf + 256, 256);
	make_list(wr, sge, base);
	spoil(&wr[2]);
	r = ibv_post_send(qa, wr, &bad);
	EXPECT(r == EINVAL, "ibv_post_send returned %d, expected EINVAL (%d)", r, EINVAL);
	EXPECT(bad == &wr[2], "*bad_wr is WR %ld, expected WR 2", bad ? (long)(bad - wr) : -1L);
	n = poll_n(scq, 2, wc, 3000);
	EXPECT(n == 2, "%d send completions for the 2 WRs before the bad one", n);
	if (n == 2) {
		EXPECT_WC(wc[0], base, IBV_WC_SUCCESS, IBV_WC_SEND);
		EXPECT_WC(wc[1], base + 1, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
	}
	EXPECT(quiet_for(scq, 30, &id), "WR %" PRIu64 " after the bad one completed", id - base);
	n = poll_n(rcq, 1, wc, 3000);
	EXPECT(n == 1 && wc[0].wr_id == base + 50 && wc[0].byte_len == 10, "the first SEND was not received");
	EXPECT(quiet_for(rcq, 20, &id), "a SEND after the bad WR arrived");
	EXPECT(memcmp(bbuf, abuf, 10) == 0, "SEND bytes differ");
	EXPECT(memcmp(bbuf + 4096, abuf + 100, 10) == 0, "WRITE bytes differ");
	/* The second receive is still posted: consume it. */
	r = post_send1(qa, base + 9, amr, abuf, 1, 0);
	EXPECT(r == 0, "a SEND after the failed list: %d", r);
	n = poll_n(scq, 1, wc, 3000);
	EXPECT(n == 1 && wc[0].wr_id == base + 9 && wc[0].status == IBV_WC_SUCCESS, "the next SEND failed");
	n = poll_n(rcq, 1, wc, 3000);
	EXPECT(n == 1 && wc[0].wr_id == base + 51, "the second receive was not left posted");
	end();
}

static void spoil_opcode(struct ibv_send_wr *w)
{
	w->opcode = (enum ibv_wr_opcode)0x55;
}

static void spoil_sges(struct ibv_send_wr *w)
{
	w->num_sge = 5; /* max_send_sge is 4 */
}

static void spoil_negative_sges(struct ibv_send_wr *w)
{
	w->num_sge = -1;
}

static void check_bad_first(void)
{
	struct ibv_send_wr wr[4], *bad = NULL;
	struct ibv_sge sge[4][5];
	int r;

	begin("post_send_bad_first");
	make_list(wr, sge, 700);
	wr[0].opcode = (enum ibv_wr_opcode)0x55;
	r = ibv_post_send(qa, wr, &bad);
	EXPECT(r == EINVAL, "ibv_post_send returned %d", r);
	EXPECT(bad == &wr[0], "*bad_wr is not the first WR");
	EXPECT(quiet_for(scq, 30, NULL), "a WR of the refused list completed");
	end();
}

static void check_long_list(void)
{
	struct ibv_send_wr wr[40], *bad = NULL;
	struct ibv_sge sge = { 0, 8, 0 };
	struct ibv_wc wc[40];
	int i, n, r;

	begin("post_send_long_list_bad_late");
	/* Longer than any internal batch, bad WR near the end. */
	sge.addr = (uintptr_t)abuf;
	sge.lkey = amr->lkey;
	memset(wr, 0, sizeof(wr));
	for (i = 0; i < 40; i++) {
		wr[i].wr_id = 800 + i;
		wr[i].next = i < 39 ? &wr[i + 1] : NULL;
		wr[i].sg_list = &sge;
		wr[i].num_sge = 1;
		wr[i].opcode = IBV_WR_RDMA_WRITE;
		wr[i].send_flags = IBV_SEND_SIGNALED;
		wr[i].wr.rdma.remote_addr = (uintptr_t)(bbuf + 8 * i);
		wr[i].wr.rdma.rkey = bmr->rkey;
	}
	wr[37].num_sge = 9;
	r = ibv_post_send(qa, wr, &bad);
	EXPECT(r == EINVAL, "ibv_post_send returned %d", r);
	EXPECT(bad == &wr[37], "*bad_wr is WR %ld, expected 37", bad ? (long)(bad - wr) : -1L);
	n = poll_n(scq, 37, wc, 3000);
	EXPECT(n == 37, "%d completions, expected 37", n);
	for (i = 0; i < n; i++)
		EXPECT(wc[i].wr_id == (uint64_t)(800 + i) && wc[i].status == IBV_WC_SUCCESS,
		       "completion %d: wr_id %" PRIu64 " status %d", i, (uint64_t)wc[i].wr_id, wc[i].status);
	EXPECT(quiet_for(scq, 30, NULL), "a WR after the bad one completed");
	end();
}

static void check_recv_list(void)
{
	struct ibv_recv_wr wr[3], *bad = NULL;
	struct ibv_sge sge[3][6];
	struct ibv_wc wc;
	uint64_t id = 0;
	int i, j, n, r;

	begin("post_recv_bad_middle");
	memset(wr, 0, sizeof(wr));
	for (i = 0; i < 3; i++) {
		for (j = 0; j < 6; j++) {
			sge[i][j].addr = (uintptr_t)(bbuf + 1024 * i + 100 * j);
			sge[i][j].length = 100;
			sge[i][j].lkey = bmr->lkey;
		}
		wr[i].wr_id = 900 + i;
		wr[i].next = i < 2 ? &wr[i + 1] : NULL;
		wr[i].sg_list = sge[i];
		wr[i].num_sge = 1;
	}
	wr[1].num_sge = 6; /* max_recv_sge is 4 */
	r = ibv_post_recv(qb, wr, &bad);
	EXPECT(r == EINVAL, "ibv_post_recv returned %d", r);
	EXPECT(bad == &wr[1], "*bad_wr is WR %ld, expected 1", bad ? (long)(bad - wr) : -1L);
	/* Exactly one receive (the first) was posted. */
	r = post_send1(qa, 950, amr, abuf, 16, 0);
	EXPECT(r == 0, "ibv_post_send: %d", r);
	n = poll_n(rcq, 1, &wc, 3000);
	EXPECT(n == 1 && wc.wr_id == 900, "the first receive was not posted");
	n = poll_n(scq, 1, &wc, 3000);
	EXPECT(n == 1 && wc.wr_id == 950 && wc.status == IBV_WC_SUCCESS, "SEND into the first receive failed");
	EXPECT(quiet_for(rcq, 20, &id), "receive %" PRIu64 " completed", id);
	end();
}

/* Every RC opcode through the old API, with its union fields. */
static void check_opcodes(void)
{
	volatile uint64_t *target = (volatile uint64_t *)(bbuf + 6000);
	volatile uint64_t *result = (volatile uint64_t *)(abuf + 6000);
	struct ibv_sge sge[5];
	struct ibv_send_wr wr[5], *bad = NULL;
	struct ibv_wc wc[5];
	int i, n, r;

	begin("post_send_opcodes");
	fill(abuf, 4096, 42);
	fill(bbuf + 3000, 500, 43);
	memset(bbuf, 0, 2048);
	*target = 40;
	post_recv1(qb, 60, bmr, bbuf, 256);
	post_recv1(qb, 61, bmr, bbuf + 256, 16);
	memset(wr, 0, sizeof(wr));
	for (i = 0; i < 5; i++) {
		wr[i].wr_id = 1000 + i;
		wr[i].next = i < 4 ? &wr[i + 1] : NULL;
		wr[i].sg_list = &sge[i];
		wr[i].num_sge = 1;
		wr[i].send_flags = IBV_SEND_SIGNALED;
		sge[i].lkey = amr->lkey;
	}
	sge[0] = (struct ibv_sge){ (uintptr_t)abuf, 30, amr->lkey };
	wr[0].opcode = IBV_WR_SEND_WITH_IMM;
	wr[0].imm_data = htonl(0xfeed);
	sge[1] = (struct ibv_sge){ (uintptr_t)(abuf + 100), 200, amr->lkey };
	wr[1].opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
	wr[1].imm_data = htonl(0xbeef);
	wr[1].wr.rdma.remote_addr = (uintptr_t)(bbuf + 1024);
	wr[1].wr.rdma.rkey = bmr->rkey;
	sge[2] = (struct ibv_sge){ (uintptr_t)(abuf + 2048), 500, amr->lkey };
	wr[2].opcode = IBV_WR_RDMA_READ;
	wr[2].wr.rdma.remote_addr = (uintptr_t)(bbuf + 3000);
	wr[2].wr.rdma.rkey = bmr->rkey;
	sge[3] = (struct ibv_sge){ (uintptr_t)result, 8, amr->lkey };
	wr[3].opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
	wr[3].wr.atomic.remote_addr = (uintptr_t)target;
	wr[3].wr.atomic.compare_add = 2;
	wr[3].wr.atomic.rkey = bmr->rkey;
	sge[4] = (struct ibv_sge){ (uintptr_t)(result + 1), 8, amr->lkey };
	wr[4].opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
	wr[4].wr.atomic.remote_addr = (uintptr_t)target;
	wr[4].wr.atomic.compare_add = 42;
	wr[4].wr.atomic.swap = 7;
	wr[4].wr.atomic.rkey = bmr->rkey;
	r = ibv_post_send(qa, wr, &bad);
	EXPECT(r == 0, "ibv_post_send: %d", r);
	n = poll_n(scq, 5, wc, 3000);
	EXPECT(n == 5, "%d send completions", n);
	if (n == 5) {
		EXPECT_WC(wc[0], 1000, IBV_WC_SUCCESS, IBV_WC_SEND);
		EXPECT_WC(wc[1], 1001, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
		EXPECT_WC(wc[2], 1002, IBV_WC_SUCCESS, IBV_WC_RDMA_READ);
		EXPECT_WC(wc[3], 1003, IBV_WC_SUCCESS, IBV_WC_FETCH_ADD);
		EXPECT_WC(wc[4], 1004, IBV_WC_SUCCESS, IBV_WC_COMP_SWAP);
		EXPECT(wc[2].byte_len == 500, "READ byte_len %u", wc[2].byte_len);
	}
	n = poll_n(rcq, 2, wc, 3000);
	EXPECT(n == 2, "%d receive completions", n);
	if (n == 2) {
		EXPECT_WC(wc[0], 60, IBV_WC_SUCCESS, IBV_WC_RECV);
		EXPECT(wc[0].byte_len == 30 && (wc[0].wc_flags & IBV_WC_WITH_IMM) && wc[0].imm_data == htonl(0xfeed),
		       "SEND_WITH_IMM: byte_len %u flags %#x imm %#x", wc[0].byte_len, wc[0].wc_flags, wc[0].imm_data);
		EXPECT_WC(wc[1], 61, IBV_WC_SUCCESS, IBV_WC_RECV_RDMA_WITH_IMM);
		EXPECT(wc[1].byte_len == 200 && wc[1].imm_data == htonl(0xbeef), "WRITE_WITH_IMM: byte_len %u imm %#x",
		       wc[1].byte_len, wc[1].imm_data);
	}
	EXPECT(memcmp(bbuf, abuf, 30) == 0, "SEND bytes differ");
	EXPECT(memcmp(bbuf + 1024, abuf + 100, 200) == 0, "WRITE bytes differ");
	EXPECT(memcmp(abuf + 2048, bbuf + 3000, 500) == 0, "READ bytes differ");
	EXPECT(result[0] == 40 && result[1] == 42 && *target == 7, "atomics: fetched %" PRIu64 " and %" PRIu64
	       ", target %" PRIu64, (uint64_t)result[0], (uint64_t)result[1], (uint64_t)*target);
	end();
}

/* IBV_SEND_INLINE with the old API: the bytes are taken at post time. */
static void check_inline(void)
{
	uint8_t data[40], copy[40];
	struct ibv_sge sge = { 0, sizeof(data), 0 };
	struct ibv_send_wr wr, *bad = NULL;
	struct ibv_wc wc;
	int n, r;

	begin("post_send_inline");
	fill(data, sizeof(data), 44);
	memcpy(copy, data, sizeof(data));
	sge.addr = (uintptr_t)data; /* not registered: inline data needs no L_Key */
	post_recv1(qb, 70, bmr, bbuf, 256);
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 71;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_SEND;
	wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
	r = ibv_post_send(qa, &wr, &bad);
	EXPECT(r == 0, "ibv_post_send: %d", r);
	memset(data, 0, sizeof(data));
	n = poll_n(scq, 1, &wc, 3000);
	EXPECT(n == 1, "no send completion");
	if (n == 1)
		EXPECT_WC(wc, 71, IBV_WC_SUCCESS, IBV_WC_SEND);
	n = poll_n(rcq, 1, &wc, 3000);
	EXPECT(n == 1 && wc.wr_id == 70 && wc.byte_len == sizeof(copy), "receive: %d, byte_len %u", n,
	       wc.byte_len);
	EXPECT(memcmp(bbuf, copy, sizeof(copy)) == 0, "received bytes differ from those at post time");
	end();
}

/* UD with the old API: wr.ud.{ah,remote_qpn,remote_qkey}. */
static void check_ud(void)
{
	const uint32_t qkey = 0x22222222;
	struct ibv_ah_attr attr;
	struct ibv_ah *ah;
	struct ibv_qp *ua, *ub;
	struct ibv_sge sge = { 0, 100, 0 };
	struct ibv_send_wr wr, *bad = NULL;
	struct ibv_wc wc;
	int n, r;

	ua = make_qp(&d, IBV_QPT_UD, scq, rcq, NULL, 0);
	ub = make_qp(&d, IBV_QPT_UD, scq, rcq, NULL, 0);
	ready_ud(ua, qkey);
	ready_ud(ub, qkey);
	memset(&attr, 0, sizeof(attr));
	attr.is_global = 1;
	attr.grh.dgid = d.gid;
	attr.grh.sgid_index = (uint8_t)d.gid_index;
	attr.grh.hop_limit = 1;
	attr.port_num = 1;
	ah = ibv_create_ah(d.pd, &attr);
	REQUIRE(ah, "ibv_create_ah: errno %d", errno);

	begin("post_send_ud");
	fill(abuf, 100, 45);
	post_recv1(ub, 80, bmr, bbuf, 40 + 100);
	sge.addr = (uintptr_t)abuf;
	sge.lkey = amr->lkey;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 81;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_SEND_WITH_IMM;
	wr.imm_data = htonl(5);
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.wr.ud.ah = ah;
	wr.wr.ud.remote_qpn = ub->qp_num;
	wr.wr.ud.remote_qkey = qkey;
	r = ibv_post_send(ua, &wr, &bad);
	EXPECT(r == 0, "ibv_post_send: %d", r);
	n = poll_n(scq, 1, &wc, 3000);
	EXPECT(n == 1, "no send completion");
	if (n == 1)
		EXPECT_WC(wc, 81, IBV_WC_SUCCESS, IBV_WC_SEND);
	n = poll_n(rcq, 1, &wc, 3000);
	EXPECT(n == 1, "no receive completion");
	if (n == 1) {
		EXPECT_WC(wc, 80, IBV_WC_SUCCESS, IBV_WC_RECV);
		EXPECT(wc.byte_len == 140 && wc.src_qp == ua->qp_num && (wc.wc_flags & IBV_WC_GRH) &&
			       (wc.wc_flags & IBV_WC_WITH_IMM) && wc.imm_data == htonl(5),
		       "byte_len %u src_qp %u flags %#x imm %#x", wc.byte_len, wc.src_qp, wc.wc_flags, wc.imm_data);
	}
	EXPECT(memcmp(bbuf + 40, abuf, 100) == 0, "payload differs");
	/* A wrong Q_Key is dropped by the receiver. */
	post_recv1(ub, 82, bmr, bbuf, 40 + 100);
	wr.wr_id = 83;
	wr.wr.ud.remote_qkey = qkey + 1;
	r = ibv_post_send(ua, &wr, &bad);
	EXPECT(r == 0, "ibv_post_send: %d", r);
	n = poll_n(scq, 1, &wc, 3000);
	EXPECT(n == 1 && wc.wr_id == 83 && wc.status == IBV_WC_SUCCESS, "no send completion for the wrong Q_Key");
	EXPECT(quiet_for(rcq, 50, NULL), "a datagram with a wrong Q_Key was received");
	/* An RDMA WRITE on a UD QP is refused at post time. */
	wr.wr_id = 84;
	wr.opcode = IBV_WR_RDMA_WRITE;
	bad = NULL;
	r = ibv_post_send(ua, &wr, &bad);
	EXPECT(r == EINVAL && bad == &wr, "RDMA WRITE on UD: %d", r);
	end();

	REQUIRE(ibv_destroy_qp(ua) == 0 && ibv_destroy_qp(ub) == 0, "ibv_destroy_qp");
	REQUIRE(ibv_destroy_ah(ah) == 0, "ibv_destroy_ah");
}

int main(void)
{
	watchdog(30);
	open_dev(&d);
	scq = ibv_create_cq(d.ctx, 256, NULL, NULL, 0);
	rcq = ibv_create_cq(d.ctx, 256, NULL, NULL, 0);
	REQUIRE(scq && rcq, "ibv_create_cq: errno %d", errno);
	abuf = alloc_buf(LEN);
	bbuf = alloc_buf(LEN);
	amr = ibv_reg_mr(d.pd, abuf, LEN, ALL_ACCESS);
	bmr = ibv_reg_mr(d.pd, bbuf, LEN, ALL_ACCESS);
	REQUIRE(amr && bmr, "ibv_reg_mr: errno %d", errno);
	qa = make_qp(&d, IBV_QPT_RC, scq, rcq, NULL, 0);
	qb = make_qp(&d, IBV_QPT_RC, scq, rcq, NULL, 0);
	connect_pair(&d, qa, qb);

	bad_middle("post_send_bad_opcode", 100, spoil_opcode);
	bad_middle("post_send_too_many_sges", 200, spoil_sges);
	bad_middle("post_send_negative_sges", 300, spoil_negative_sges);
	check_bad_first();
	check_long_list();
	check_recv_list();
	check_opcodes();
	check_inline();
	check_ud();

	REQUIRE(ibv_destroy_qp(qa) == 0 && ibv_destroy_qp(qb) == 0, "ibv_destroy_qp");
	REQUIRE(ibv_dereg_mr(amr) == 0 && ibv_dereg_mr(bmr) == 0, "ibv_dereg_mr");
	REQUIRE(ibv_destroy_cq(scq) == 0 && ibv_destroy_cq(rcq) == 0, "ibv_destroy_cq");
	REQUIRE(ibv_dealloc_pd(d.pd) == 0, "ibv_dealloc_pd");
	REQUIRE(ibv_close_device(d.ctx) == 0, "ibv_close_device");
	return finish();
}
