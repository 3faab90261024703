/*
 * The extended CQ in every combination of the wc_flags rxe supports
 * (BYTE_LEN, IMM, QP_NUM, SRC_QP, SLID, SL, DLID_PATH_BITS: 128 sets): a
 * SEND_WITH_IMM on an RC pair and on a UD pair whose CQs were made with
 * that set, each requested field read back with the ibv_wc_read_*
 * readers and compared with what was sent (SLID with what ibv_poll_cq
 * reports for the same traffic on a plain CQ, and SL too: 2 for a UD
 * receive over IPv4). And what rxe refuses:
 * every other wc_flags bit (rxe's provider), comp_mask bits past
 * FLAGS | PD (rdma-core), the IGNORE_OVERRUN creation flag (rxe's kernel).
 */
#include "common.h"

#define LEN 8192
#define QKEY 0x11111111u
#define SUPPORTED                                                                                              \
	(IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM | IBV_WC_EX_WITH_SRC_QP |         \
	 IBV_WC_EX_WITH_SLID | IBV_WC_EX_WITH_SL | IBV_WC_EX_WITH_DLID_PATH_BITS)

static struct dev d;
static uint8_t *abuf, *bbuf;
static struct ibv_mr *amr, *bmr;
static struct ibv_ah *ah;

static struct ibv_cq_ex *cq_ex(uint64_t wc_flags, uint32_t comp_mask, uint32_t flags)
{
	struct ibv_cq_init_attr_ex a;

	memset(&a, 0, sizeof(a));
	a.cqe = 16;
	a.wc_flags = wc_flags;
	a.comp_mask = comp_mask;
	a.flags = flags;
	return ibv_create_cq_ex(d.ctx, &a);
}

/* Two QPs of `type` on scq/rcq, connected (RC) or ready (UD). */
static void pair(enum ibv_qp_type type, struct ibv_cq *scq, struct ibv_cq *rcq, struct ibv_qp **a, struct ibv_qp **b)
{
	*a = make_qp(&d, type, scq, rcq, NULL, 0);
	*b = make_qp(&d, type, scq, rcq, NULL, 0);
	if (type == IBV_QPT_RC) {
		connect_pair(&d, *a, *b);
	} else {
		ready_ud(*a, QKEY);
		ready_ud(*b, QKEY);
	}
}

/* A SEND_WITH_IMM of `len` bytes from a to b (b has a receive posted). */
static void send_imm(enum ibv_qp_type type, struct ibv_qp *a, struct ibv_qp *b, uint64_t wr_id, uint32_t len,
		     uint32_t imm)
{
	struct ibv_sge sge = { (uintptr_t)abuf, len, amr->lkey };
	struct ibv_send_wr wr, *bad = NULL;
	int r;

	post_recv1(b, wr_id + 1, bmr, bbuf, 40 + 256);
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = wr_id;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_SEND_WITH_IMM;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.imm_data = htonl(imm);
	if (type == IBV_QPT_UD) {
		wr.wr.ud.ah = ah;
		wr.wr.ud.remote_qpn = b->qp_num;
		wr.wr.ud.remote_qkey = QKEY;
	}
	r = ibv_post_send(a, &wr, &bad);
	REQUIRE(r == 0, "ibv_post_send: %d", r);
}

/* What ibv_poll_cq reports as slid and sl for a receive of `type`. */
struct ref {
	uint32_t slid;
	uint8_t sl;
};

static struct ref reference(enum ibv_qp_type type)
{
	struct ibv_cq *cq = ibv_create_cq(d.ctx, 16, NULL, NULL, 0);
	struct ibv_qp *a, *b;
	struct ibv_wc wc[2];
	struct ref ref = { 0, 0xff };
	int i;

	REQUIRE(cq != NULL, "ibv_create_cq");
	pair(type, cq, cq, &a, &b);
	send_imm(type, a, b, 1, 8, 1);
	REQUIRE(poll_n(cq, 2, wc, 3000) == 2, "reference traffic");
	for (i = 0; i < 2; i++)
		if (wc[i].opcode == IBV_WC_RECV)
			ref = (struct ref){ wc[i].slid, wc[i].sl };
	REQUIRE(ibv_destroy_qp(a) == 0 && ibv_destroy_qp(b) == 0 && ibv_destroy_cq(cq) == 0, "destroy");
	return ref;
}

/* One combination: returns the number of fields read back. */
static int combination(enum ibv_qp_type type, uint64_t f, unsigned k, struct ref ref)
{
	struct ibv_cq_ex *scq = cq_ex(f, 0, 0), *rcq = cq_ex(f, 0, 0);
	uint32_t len = 10 + k % 50, imm = 0x1000 + k, extra = type == IBV_QPT_UD ? 40 : 0;
	struct ibv_poll_cq_attr attr = { 0 };
	struct ibv_qp *a, *b;
	unsigned flags;
	int n = 0, r;

	REQUIRE(scq && rcq, "ibv_create_cq_ex(wc_flags %#" PRIx64 "): errno %d", f, errno);
	pair(type, ibv_cq_ex_to_cq(scq), ibv_cq_ex_to_cq(rcq), &a, &b);
	fill(abuf, len, k);
	send_imm(type, a, b, 2 * k, len, imm);
	r = start_poll_wait(rcq, 3000);
	EXPECT(r == 0, "type %d flags %#" PRIx64 ": no receive (%d)", type, f, r);
	if (r == 0) {
		EXPECT(rcq->status == IBV_WC_SUCCESS && rcq->wr_id == 2 * k + 1, "flags %#" PRIx64 ": status %d wr_id %" PRIu64,
		       f, rcq->status, (uint64_t)rcq->wr_id);
		EXPECT(ibv_wc_read_opcode(rcq) == IBV_WC_RECV, "opcode %d", ibv_wc_read_opcode(rcq));
		flags = ibv_wc_read_wc_flags(rcq);
		EXPECT(flags & IBV_WC_WITH_IMM, "flags %#" PRIx64 ": wc_flags %#x lack WITH_IMM", f, flags);
		EXPECT(!!(flags & IBV_WC_GRH) == (type == IBV_QPT_UD), "flags %#" PRIx64 ": wc_flags %#x", f, flags);
		if (f & IBV_WC_EX_WITH_BYTE_LEN) {
			EXPECT(ibv_wc_read_byte_len(rcq) == len + extra, "flags %#" PRIx64 ": byte_len %u, expected %u", f,
			       ibv_wc_read_byte_len(rcq), len + extra);
			n++;
		}
		if (f & IBV_WC_EX_WITH_IMM) {
			EXPECT(ibv_wc_read_imm_data(rcq) == htonl(imm), "flags %#" PRIx64 ": imm %#x", f,
			       ibv_wc_read_imm_data(rcq));
			n++;
		}
		if (f & IBV_WC_EX_WITH_QP_NUM) {
			EXPECT(ibv_wc_read_qp_num(rcq) == b->qp_num, "flags %#" PRIx64 ": qp_num %u, expected %u", f,
			       ibv_wc_read_qp_num(rcq), b->qp_num);
			n++;
		}
		if (f & IBV_WC_EX_WITH_SRC_QP) {
			EXPECT(ibv_wc_read_src_qp(rcq) == a->qp_num, "flags %#" PRIx64 ": src_qp %u, expected %u", f,
			       ibv_wc_read_src_qp(rcq), a->qp_num);
			n++;
		}
		if (f & IBV_WC_EX_WITH_SLID) {
			EXPECT(ibv_wc_read_slid(rcq) == ref.slid, "flags %#" PRIx64 ": slid %u, expected %u", f,
			       ibv_wc_read_slid(rcq), ref.slid);
			n++;
		}
		if (f & IBV_WC_EX_WITH_SL) {
			EXPECT(ibv_wc_read_sl(rcq) == ref.sl, "flags %#" PRIx64 ": sl %u, expected %u", f,
			       ibv_wc_read_sl(rcq), ref.sl);
			n++;
		}
		if (f & IBV_WC_EX_WITH_DLID_PATH_BITS) {
			EXPECT(ibv_wc_read_dlid_path_bits(rcq) == 0, "flags %#" PRIx64 ": dlid_path_bits %u", f,
			       ibv_wc_read_dlid_path_bits(rcq));
			n++;
		}
		EXPECT(ibv_next_poll(rcq) == ENOENT, "flags %#" PRIx64 ": a second receive completion", f);
		ibv_end_poll(rcq);
	}
	EXPECT(memcmp(bbuf + extra, abuf, len) == 0, "flags %#" PRIx64 ": payload differs", f);
	r = start_poll_wait(scq, 3000);
	EXPECT(r == 0, "flags %#" PRIx64 ": no send completion (%d)", f, r);
	if (r == 0) {
		EXPECT(scq->status == IBV_WC_SUCCESS && scq->wr_id == 2 * k, "send: status %d wr_id %" PRIu64,
		       scq->status, (uint64_t)scq->wr_id);
		EXPECT(ibv_wc_read_opcode(scq) == IBV_WC_SEND, "send opcode %d", ibv_wc_read_opcode(scq));
		if (f & IBV_WC_EX_WITH_QP_NUM)
			EXPECT(ibv_wc_read_qp_num(scq) == a->qp_num, "send qp_num %u", ibv_wc_read_qp_num(scq));
		ibv_end_poll(scq);
	}
	r = ibv_start_poll(scq, &attr);
	EXPECT(r == ENOENT, "flags %#" PRIx64 ": a second send completion", f);
	if (r == 0)
		ibv_end_poll(scq);
	REQUIRE(ibv_destroy_qp(a) == 0 && ibv_destroy_qp(b) == 0, "ibv_destroy_qp");
	REQUIRE(ibv_destroy_cq(ibv_cq_ex_to_cq(scq)) == 0 && ibv_destroy_cq(ibv_cq_ex_to_cq(rcq)) == 0,
		"ibv_destroy_cq");
	return n;
}

static void check_refusals(void)
{
	static const uint64_t unsupported[] = { IBV_WC_EX_WITH_COMPLETION_TIMESTAMP, IBV_WC_EX_WITH_CVLAN,
						IBV_WC_EX_WITH_FLOW_TAG, IBV_WC_EX_WITH_TM_INFO,
						IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK, 1ull << 12 };
	static const struct {
		uint32_t comp_mask, flags;
		int ok;
	} masks[] = {
		{ IBV_CQ_INIT_ATTR_MASK_FLAGS, IBV_CREATE_CQ_ATTR_SINGLE_THREADED, 1 },
		{ IBV_CQ_INIT_ATTR_MASK_FLAGS, 0, 1 },
		/* Flags count only with their mask bit (rdma-core). */
		{ 0, IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN, 1 },
		{ IBV_CQ_INIT_ATTR_MASK_FLAGS, IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN, 0 },
		{ IBV_CQ_INIT_ATTR_MASK_FLAGS, 1u << 2, 0 },
		{ IBV_CQ_INIT_ATTR_MASK_PD, 0, 0 },
		{ 1u << 2, 0, 0 },
	};
	struct ibv_cq_ex *cq;
	size_t i;

	begin("cq_ex_refusals");
	for (i = 0; i < sizeof(unsupported) / sizeof(unsupported[0]); i++) {
		errno = 0;
		cq = cq_ex(unsupported[i], 0, 0);
		EXPECT(cq == NULL && errno == EOPNOTSUPP, "wc_flags %#" PRIx64 ": %p errno %d", unsupported[i], (void *)cq,
		       errno);
		errno = 0;
		cq = cq_ex(unsupported[i] | SUPPORTED, 0, 0);
		EXPECT(cq == NULL && errno == EOPNOTSUPP, "wc_flags %#" PRIx64 ": %p errno %d", unsupported[i] | SUPPORTED,
		       (void *)cq, errno);
	}
	for (i = 0; i < sizeof(masks) / sizeof(masks[0]); i++) {
		errno = 0;
		cq = cq_ex(SUPPORTED, masks[i].comp_mask, masks[i].flags);
		if (masks[i].ok) {
			EXPECT(cq != NULL, "comp_mask %#x flags %#x refused: errno %d", masks[i].comp_mask, masks[i].flags,
			       errno);
			if (cq)
				EXPECT(ibv_destroy_cq(ibv_cq_ex_to_cq(cq)) == 0, "ibv_destroy_cq");
		} else {
			EXPECT(cq == NULL && errno == EOPNOTSUPP, "comp_mask %#x flags %#x: %p errno %d", masks[i].comp_mask,
			       masks[i].flags, (void *)cq, errno);
		}
	}
	end();
}

int main(void)
{
	struct ibv_ah_attr ah_attr;
	struct ref rc, ud;
	uint64_t f;
	int fields = 0;

	watchdog(60);
	open_dev(&d);
	abuf = alloc_buf(LEN);
	bbuf = alloc_buf(LEN);
	amr = ibv_reg_mr(d.pd, abuf, LEN, ALL_ACCESS);
	bmr = ibv_reg_mr(d.pd, bbuf, LEN, ALL_ACCESS);
	REQUIRE(amr && bmr, "ibv_reg_mr: errno %d", errno);
	ah = self_ah(&d);

	check_refusals();

	rc = reference(IBV_QPT_RC);
	ud = reference(IBV_QPT_UD);
	begin("cq_ex_every_wc_flags_rc");
	/* RoCE has no SL: a UD receive over IPv4 reports the network header
	 * type there (2, as mlx5; rxe reports 0), an RC receive 0. */
	EXPECT(rc.sl == 0 && ud.sl == 2, "reference sl: RC %u, UD %u", rc.sl, ud.sl);
	for (f = 0; f <= SUPPORTED; f++)
		fields += combination(IBV_QPT_RC, f, (unsigned)f, rc);
	/* 7 fields, each in 64 of the 128 sets. */
	EXPECT(fields == 7 * 64, "%d fields read back", fields);
	end();
	begin("cq_ex_every_wc_flags_ud");
	fields = 0;
	for (f = 0; f <= SUPPORTED; f++)
		fields += combination(IBV_QPT_UD, f, (unsigned)f + 200, ud);
	EXPECT(fields == 7 * 64, "%d fields read back", fields);
	end();

	REQUIRE(ibv_destroy_ah(ah) == 0, "ibv_destroy_ah");
	REQUIRE(ibv_dereg_mr(amr) == 0 && ibv_dereg_mr(bmr) == 0, "ibv_dereg_mr");
	REQUIRE(ibv_dealloc_pd(d.pd) == 0, "ibv_dealloc_pd");
	REQUIRE(ibv_close_device(d.ctx) == 0, "ibv_close_device");
	free(abuf);
	free(bbuf);
	return finish();
}
