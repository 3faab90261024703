/*
 * Error paths return what rdma-core (over the kernel's uverbs) documents,
 * and memory windows: ibv_alloc_mw / ibv_dealloc_mw / ibv_bind_mw (inline,
 * through ops), a type 2 window bound with ibv_wr_bind_mw, written through
 * its R_Key, invalidated with ibv_wr_local_inv, and refused afterwards.
 */
#include "common.h"

#define LEN 8192

static struct dev d;

static void check_busy(void)
{
	struct ibv_pd *pd;
	struct ibv_mr *mr;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	uint8_t *buf = alloc_buf(4096);
	int r;

	begin("dealloc_pd_busy");
	pd = ibv_alloc_pd(d.ctx);
	REQUIRE(pd, "ibv_alloc_pd");
	mr = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
	REQUIRE(mr, "ibv_reg_mr: errno %d", errno);
	r = ibv_dealloc_pd(pd);
	EXPECT(r == EBUSY, "ibv_dealloc_pd with an MR: %d, expected EBUSY", r);
	EXPECT(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr");
	r = ibv_dealloc_pd(pd);
	EXPECT(r == 0, "ibv_dealloc_pd of an empty PD: %d", r);
	end();

	begin("destroy_cq_busy");
	cq = ibv_create_cq(d.ctx, 4, NULL, NULL, 0);
	REQUIRE(cq, "ibv_create_cq");
	qp = make_qp(&d, IBV_QPT_RC, cq, cq, NULL, 0);
	r = ibv_destroy_cq(cq);
	EXPECT(r == EBUSY, "ibv_destroy_cq with a QP on it: %d, expected EBUSY", r);
	r = ibv_dealloc_pd(d.pd);
	EXPECT(r == EBUSY, "ibv_dealloc_pd with a QP in it: %d, expected EBUSY", r);
	EXPECT(ibv_destroy_qp(qp) == 0, "ibv_destroy_qp");
	r = ibv_destroy_cq(cq);
	EXPECT(r == 0, "ibv_destroy_cq: %d", r);
	end();
	free(buf);
}

static void check_reg_mr(void)
{
	uint8_t *buf = alloc_buf(4096);
	volatile int access;
	struct ibv_mr *mr;

	begin("reg_mr_unknown_access");
	/* The kernel's ib_check_mr_access: unknown bits are EINVAL. Both the
	 * constant-flags path (ibv_reg_mr) and the variable one (iova2). */
	errno = 0;
	mr = ibv_reg_mr(d.pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE | (1 << 15));
	EXPECT(mr == NULL && errno == EINVAL, "ibv_reg_mr with access bit 15: %p, errno %d (expected EINVAL)",
	       (void *)mr, errno);
	access = IBV_ACCESS_LOCAL_WRITE | (1 << 15);
	errno = 0;
	mr = ibv_reg_mr(d.pd, buf, 4096, access);
	EXPECT(mr == NULL && errno == EINVAL, "ibv_reg_mr_iova2 with access bit 15: %p, errno %d (expected EINVAL)",
	       (void *)mr, errno);
	end();

	begin("reg_mr_remote_write_needs_local_write");
	errno = 0;
	mr = ibv_reg_mr(d.pd, buf, 4096, IBV_ACCESS_REMOTE_WRITE);
	EXPECT(mr == NULL && errno == EINVAL, "REMOTE_WRITE without LOCAL_WRITE: %p, errno %d", (void *)mr, errno);
	end();

	begin("reg_mr_optional_bits_ignored");
	/* Optional-range bits (relaxed ordering) are hints a device may ignore. */
	mr = ibv_reg_mr(d.pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_RELAXED_ORDERING);
	EXPECT(mr != NULL, "ibv_reg_mr with RELAXED_ORDERING: errno %d", errno);
	if (mr)
		EXPECT(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr");
	end();
	free(buf);
}

static void check_modify_qp(void)
{
	struct ibv_cq *cq = ibv_create_cq(d.ctx, 4, NULL, NULL, 0);
	struct ibv_qp_attr a;
	struct ibv_qp *qp;
	int r;

	REQUIRE(cq, "ibv_create_cq");
	qp = make_qp(&d, IBV_QPT_RC, cq, cq, NULL, 0);

	begin("modify_qp_illegal_transition");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	r = ibv_modify_qp(qp, &a, IBV_QP_STATE);
	EXPECT(r == EINVAL, "RESET -> RTS: %d, expected EINVAL", r);
	a.qp_state = IBV_QPS_RTR;
	r = ibv_modify_qp(qp, &a, IBV_QP_STATE);
	EXPECT(r == EINVAL, "RESET -> RTR: %d, expected EINVAL", r);
	EXPECT(qp->state == IBV_QPS_RESET, "qp->state %d after refused transitions", qp->state);
	end();

	begin("modify_qp_missing_attribute");
	/* RESET -> INIT of an RC QP needs PKEY_INDEX, PORT and ACCESS_FLAGS. */
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	r = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PORT);
	EXPECT(r == EINVAL, "INIT without PKEY_INDEX/ACCESS_FLAGS: %d, expected EINVAL", r);
	EXPECT(qp->state == IBV_QPS_RESET, "qp->state %d", qp->state);
	end();

	begin("modify_qp_bad_port");
	a.pkey_index = 0;
	a.qp_access_flags = 0;
	a.port_num = 2;
	r = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PORT | IBV_QP_PKEY_INDEX | IBV_QP_ACCESS_FLAGS);
	EXPECT(r == EINVAL, "INIT on port 2: %d, expected EINVAL", r);
	end();

	begin("modify_qp_to_err_and_reset");
	a.port_num = 1;
	r = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PORT | IBV_QP_PKEY_INDEX | IBV_QP_ACCESS_FLAGS);
	EXPECT(r == 0 && qp->state == IBV_QPS_INIT, "RESET -> INIT: %d, state %d", r, qp->state);
	a.qp_state = IBV_QPS_ERR;
	r = ibv_modify_qp(qp, &a, IBV_QP_STATE);
	EXPECT(r == 0 && qp->state == IBV_QPS_ERR, "INIT -> ERR: %d, state %d", r, qp->state);
	a.qp_state = IBV_QPS_RESET;
	r = ibv_modify_qp(qp, &a, IBV_QP_STATE);
	EXPECT(r == 0 && qp->state == IBV_QPS_RESET, "ERR -> RESET: %d, state %d", r, qp->state);
	end();

	begin("post_in_reset");
	{
		struct ibv_send_wr wr, *bad = NULL;
		struct ibv_recv_wr rwr, *rbad = NULL;

		memset(&wr, 0, sizeof(wr));
		wr.opcode = IBV_WR_SEND;
		r = ibv_post_send(qp, &wr, &bad);
		EXPECT(r != 0 && bad == &wr, "ibv_post_send in RESET: %d", r);
		memset(&rwr, 0, sizeof(rwr));
		r = ibv_post_recv(qp, &rwr, &rbad);
		EXPECT(r != 0 && rbad == &rwr, "ibv_post_recv in RESET: %d", r);
	}
	end();

	begin("create_qp_over_limits");
	{
		struct ibv_device_attr da;
		struct ibv_qp_init_attr ia;
		struct ibv_qp *big;

		REQUIRE(ibv_query_device(d.ctx, &da) == 0, "ibv_query_device");
		memset(&ia, 0, sizeof(ia));
		ia.send_cq = cq;
		ia.recv_cq = cq;
		ia.qp_type = IBV_QPT_RC;
		ia.cap.max_send_wr = (uint32_t)da.max_qp_wr + 1;
		ia.cap.max_recv_wr = 1;
		ia.cap.max_send_sge = 1;
		ia.cap.max_recv_sge = 1;
		errno = 0;
		big = ibv_create_qp(d.pd, &ia);
		EXPECT(big == NULL && errno == EINVAL, "max_send_wr over max_qp_wr: %p, errno %d", (void *)big, errno);
		ia.cap.max_send_wr = 1;
		ia.cap.max_send_sge = (uint32_t)da.max_sge + 1;
		errno = 0;
		big = ibv_create_qp(d.pd, &ia);
		EXPECT(big == NULL && errno == EINVAL, "max_send_sge over max_sge: %p, errno %d", (void *)big, errno);
	}
	end();

	EXPECT(ibv_destroy_qp(qp) == 0, "ibv_destroy_qp");
	EXPECT(ibv_destroy_cq(cq) == 0, "ibv_destroy_cq");
}

static void check_queries(void)
{
	struct ibv_port_attr pa;
	union ibv_gid gid;
	int r;

	begin("query_gid_past_table");
	r = ibv_query_gid(d.ctx, 1, d.port.gid_tbl_len, &gid);
	EXPECT(r == -1, "index gid_tbl_len (%d): %d, expected -1", d.port.gid_tbl_len, r);
	r = ibv_query_gid(d.ctx, 1, -1, &gid);
	EXPECT(r == -1, "index -1: %d, expected -1", r);
	r = ibv_query_gid(d.ctx, 2, 0, &gid);
	EXPECT(r == -1, "port 2: %d, expected -1", r);
	r = ibv_query_gid(d.ctx, 1, d.port.gid_tbl_len - 1, &gid);
	EXPECT(r == 0, "the last index (%d): %d", d.port.gid_tbl_len - 1, r);
	end();

	begin("query_port_bad_port");
	r = ibv_query_port(d.ctx, 2, &pa);
	EXPECT(r != 0, "ibv_query_port(port 2): %d", r);
	end();
}

/* An RC pair on one CQ for the window tests: A's buffer registered with
 * every access, B's with binding windows too; A's QP made for the
 * extended send ops `ops_a`, B's for `ops_b`, both connected. */
static void mw_pair(uint64_t ops_a, uint64_t ops_b, uint8_t *abuf, uint8_t *bbuf, struct ibv_cq **cq,
		    struct ibv_mr **amr, struct ibv_mr **bmr, struct ibv_qp **qa, struct ibv_qp **qb)
{
	*cq = ibv_create_cq(d.ctx, 64, NULL, NULL, 0);
	REQUIRE(*cq, "ibv_create_cq");
	*amr = ibv_reg_mr(d.pd, abuf, LEN, ALL_ACCESS);
	*bmr = ibv_reg_mr(d.pd, bbuf, LEN, ALL_ACCESS | IBV_ACCESS_MW_BIND);
	REQUIRE(*amr && *bmr, "ibv_reg_mr: errno %d", errno);
	*qa = make_qp(&d, IBV_QPT_RC, *cq, *cq, NULL, ops_a);
	*qb = make_qp(&d, IBV_QPT_RC, *cq, *cq, NULL, ops_b);
	connect_pair(&d, *qa, *qb);
}

/* Memory windows on an RC pair: A writes into B's memory. */
static void check_mw(void)
{
	const uint64_t ops = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_BIND_MW |
			     IBV_QP_EX_WITH_LOCAL_INV;
	struct ibv_mw_bind_info info;
	struct ibv_mw_bind bind;
	struct ibv_qp *qa, *qb;
	struct ibv_qp_ex *xa, *xb;
	struct ibv_mr *amr, *bmr;
	struct ibv_mw *mw1, *mw2;
	struct ibv_cq *cq;
	struct ibv_wc wc;
	uint8_t *abuf = alloc_buf(LEN), *bbuf = alloc_buf(LEN);
	uint32_t key2, key1;
	int n, r;

	mw_pair(ops, ops, abuf, bbuf, &cq, &amr, &bmr, &qa, &qb);
	xa = ibv_qp_to_qp_ex(qa);
	xb = ibv_qp_to_qp_ex(qb);
	REQUIRE(xa && xb, "ibv_qp_to_qp_ex");

	begin("alloc_mw_bad_type");
	errno = 0;
	mw1 = ibv_alloc_mw(d.pd, (enum ibv_mw_type)7);
	EXPECT(mw1 == NULL && errno != 0, "ibv_alloc_mw(type 7): %p, errno %d", (void *)mw1, errno);
	end();

	begin("mw_type1_bind");
	mw1 = ibv_alloc_mw(d.pd, IBV_MW_TYPE_1);
	REQUIRE(mw1, "ibv_alloc_mw(TYPE_1): errno %d", errno);
	EXPECT(mw1->type == IBV_MW_TYPE_1 && mw1->pd == d.pd && mw1->context == d.ctx, "ibv_mw fields");
	key1 = mw1->rkey;
	memset(&bind, 0, sizeof(bind));
	bind.wr_id = 11;
	bind.send_flags = IBV_SEND_SIGNALED;
	bind.bind_info.mr = bmr;
	bind.bind_info.addr = (uintptr_t)(bbuf + 512);
	bind.bind_info.length = 128;
	bind.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
	r = ibv_bind_mw(qb, mw1, &bind);
	EXPECT(r == 0, "ibv_bind_mw: %d", r);
	EXPECT(mw1->rkey != key1 && (mw1->rkey >> 8) == (key1 >> 8), "rkey %#x -> %#x", key1, mw1->rkey);
	n = poll_n(cq, 1, &wc, 3000);
	EXPECT(n == 1, "no bind completion");
	if (n == 1)
		EXPECT_WC(wc, 11, IBV_WC_SUCCESS, IBV_WC_BIND_MW);
	fill(abuf, 64, 1);
	ibv_wr_start(xa);
	xa->wr_id = 12;
	xa->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(xa, mw1->rkey, (uintptr_t)(bbuf + 520));
	ibv_wr_set_sge(xa, amr->lkey, (uintptr_t)abuf, 64);
	EXPECT(ibv_wr_complete(xa) == 0, "ibv_wr_complete");
	n = poll_n(cq, 1, &wc, 3000);
	EXPECT(n == 1, "no write completion");
	if (n == 1)
		EXPECT_WC(wc, 12, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
	EXPECT(memcmp(bbuf + 520, abuf, 64) == 0, "bytes written through the window differ");
	r = ibv_dealloc_mw(mw1);
	EXPECT(r == 0, "ibv_dealloc_mw: %d", r);
	end();

	begin("mw_type2_bind_write_invalidate");
	mw2 = ibv_alloc_mw(d.pd, IBV_MW_TYPE_2);
	REQUIRE(mw2, "ibv_alloc_mw(TYPE_2): errno %d", errno);
	EXPECT(mw2->type == IBV_MW_TYPE_2, "type %d", mw2->type);
	/* Bind on B's QP: remote access then arrives through B. */
	key2 = ibv_inc_rkey(mw2->rkey);
	memset(&info, 0, sizeof(info));
	info.mr = bmr;
	info.addr = (uintptr_t)(bbuf + 1024);
	info.length = 256;
	info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
	ibv_wr_start(xb);
	xb->wr_id = 21;
	xb->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_bind_mw(xb, mw2, key2, &info);
	r = ibv_wr_complete(xb);
	EXPECT(r == 0, "ibv_wr_complete(bind): %d", r);
	n = poll_n(cq, 1, &wc, 3000);
	EXPECT(n == 1, "no bind completion");
	if (n == 1)
		EXPECT_WC(wc, 21, IBV_WC_SUCCESS, IBV_WC_BIND_MW);
	/* A remote write through the window's new R_Key. */
	fill(abuf, 100, 2);
	ibv_wr_start(xa);
	xa->wr_id = 22;
	xa->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(xa, key2, (uintptr_t)(bbuf + 1024 + 16));
	ibv_wr_set_sge(xa, amr->lkey, (uintptr_t)abuf, 100);
	r = ibv_wr_complete(xa);
	EXPECT(r == 0, "ibv_wr_complete(write): %d", r);
	n = poll_n(cq, 1, &wc, 3000);
	EXPECT(n == 1, "no write completion");
	if (n == 1)
		EXPECT_WC(wc, 22, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
	EXPECT(memcmp(bbuf + 1040, abuf, 100) == 0, "bytes written through the window differ");
	/* Invalidate it locally on B. */
	ibv_wr_start(xb);
	xb->wr_id = 23;
	xb->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_local_inv(xb, key2);
	r = ibv_wr_complete(xb);
	EXPECT(r == 0, "ibv_wr_complete(local_inv): %d", r);
	n = poll_n(cq, 1, &wc, 3000);
	EXPECT(n == 1, "no local-invalidate completion");
	if (n == 1)
		EXPECT_WC(wc, 23, IBV_WC_SUCCESS, IBV_WC_LOCAL_INV);
	/* The stale key: the requester's WRITE fails with REM_ACCESS_ERR. */
	memset(bbuf + 1024, 0x5a, 256);
	ibv_wr_start(xa);
	xa->wr_id = 24;
	xa->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(xa, key2, (uintptr_t)(bbuf + 1024));
	ibv_wr_set_sge(xa, amr->lkey, (uintptr_t)abuf, 32);
	r = ibv_wr_complete(xa);
	EXPECT(r == 0, "ibv_wr_complete(stale write): %d", r);
	n = poll_n(cq, 1, &wc, 3000);
	EXPECT(n == 1, "no completion of the stale write");
	if (n == 1) {
		EXPECT(wc.wr_id == 24, "wr_id %" PRIu64, (uint64_t)wc.wr_id);
		EXPECT(wc.status == IBV_WC_REM_ACCESS_ERR, "status %s, expected REM_ACCESS_ERR",
		       ibv_wc_status_str(wc.status));
	}
	EXPECT(bbuf[1024] == 0x5a && bbuf[1024 + 31] == 0x5a, "the stale key wrote");
	end();

	begin("mw_dealloc_then_dereg_mr");
	r = ibv_dealloc_mw(mw2);
	EXPECT(r == 0, "ibv_dealloc_mw: %d", r);
	EXPECT(ibv_destroy_qp(qa) == 0 && ibv_destroy_qp(qb) == 0, "ibv_destroy_qp");
	while (poll_n(cq, 1, &wc, 20) == 1)
		;
	r = ibv_dereg_mr(bmr);
	EXPECT(r == 0, "ibv_dereg_mr after its windows went: %d", r);
	EXPECT(ibv_dereg_mr(amr) == 0, "ibv_dereg_mr");
	EXPECT(ibv_destroy_cq(cq) == 0, "ibv_destroy_cq");
	end();
	free(abuf);
	free(bbuf);
}

/* A bound type 2 window keeps its MR busy until the window goes, and a
 * rebind after invalidation works (the library tracks the window's key). */
static void check_mw_rebind(void)
{
	const uint64_t ops = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV;
	struct ibv_mw_bind_info info;
	struct ibv_qp *qa, *qb;
	struct ibv_qp_ex *xa, *xb;
	struct ibv_mr *amr, *bmr;
	struct ibv_mw *mw;
	struct ibv_cq *cq;
	struct ibv_wc wc;
	uint8_t *abuf = alloc_buf(LEN), *bbuf = alloc_buf(LEN);
	uint32_t key;
	int n, r, round;

	mw_pair(ops, ops, abuf, bbuf, &cq, &amr, &bmr, &qa, &qb);
	xa = ibv_qp_to_qp_ex(qa);
	xb = ibv_qp_to_qp_ex(qb);
	REQUIRE(xa && xb, "ibv_qp_to_qp_ex");
	mw = ibv_alloc_mw(d.pd, IBV_MW_TYPE_2);
	REQUIRE(mw, "ibv_alloc_mw");

	begin("mw_type2_rebind");
	key = mw->rkey;
	for (round = 0; round < 3; round++) {
		key = ibv_inc_rkey(key);
		memset(&info, 0, sizeof(info));
		info.mr = bmr;
		info.addr = (uintptr_t)(bbuf + 256 * round);
		info.length = 64;
		info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
		ibv_wr_start(xb);
		xb->wr_id = 30 + round;
		xb->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_bind_mw(xb, mw, key, &info);
		r = ibv_wr_complete(xb);
		EXPECT(r == 0, "round %d: ibv_wr_complete(bind): %d", round, r);
		n = poll_n(cq, 1, &wc, 3000);
		EXPECT(n == 1 && wc.status == IBV_WC_SUCCESS && wc.wr_id == (uint64_t)(30 + round),
		       "round %d: bind: %d completions, status %s", round, n,
		       n == 1 ? ibv_wc_status_str(wc.status) : "-");
		ibv_wr_start(xa);
		xa->wr_id = 40 + round;
		xa->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_rdma_write(xa, key, (uintptr_t)(bbuf + 256 * round));
		ibv_wr_set_sge(xa, amr->lkey, (uintptr_t)abuf, 8);
		r = ibv_wr_complete(xa);
		n = poll_n(cq, 1, &wc, 3000);
		EXPECT(r == 0 && n == 1 && wc.status == IBV_WC_SUCCESS, "round %d: write: %d completions, status %s",
		       round, n, n == 1 ? ibv_wc_status_str(wc.status) : "-");
		if (stage_failed)
			break;
		if (round < 2) {
			ibv_wr_start(xb);
			xb->wr_id = 50 + round;
			xb->wr_flags = IBV_SEND_SIGNALED;
			ibv_wr_local_inv(xb, key);
			r = ibv_wr_complete(xb);
			n = poll_n(cq, 1, &wc, 3000);
			EXPECT(r == 0 && n == 1 && wc.status == IBV_WC_SUCCESS, "round %d: invalidate: status %s",
			       round, n == 1 ? ibv_wc_status_str(wc.status) : "-");
		}
	}
	end();

	begin("mw_bound_keeps_mr_busy");
	/* Round 2 left the window bound: its MR cannot go. */
	r = ibv_dereg_mr(bmr);
	EXPECT(r == EBUSY, "ibv_dereg_mr with a window bound to it: %d, expected EBUSY", r);
	if (r == 0)
		bmr = NULL;
	r = ibv_dealloc_mw(mw);
	EXPECT(r == 0, "ibv_dealloc_mw: %d", r);
	if (bmr) {
		r = ibv_dereg_mr(bmr);
		EXPECT(r == 0, "ibv_dereg_mr after the window went: %d", r);
	}
	end();

	EXPECT(ibv_destroy_qp(qa) == 0 && ibv_destroy_qp(qb) == 0, "ibv_destroy_qp");
	EXPECT(ibv_dereg_mr(amr) == 0, "ibv_dereg_mr");
	EXPECT(ibv_destroy_cq(cq) == 0, "ibv_destroy_cq");
	free(abuf);
	free(bbuf);
}

/* A type 2 bind posted with the old API (IBV_WR_BIND_MW), invalidated by
 * the peer's SEND_WITH_INV (ibv_wr_send_inv). */
static void check_mw_send_inv(void)
{
	const uint64_t ops = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_SEND_WITH_INV;
	struct ibv_send_wr wr, *bad = NULL;
	struct ibv_qp *qa, *qb;
	struct ibv_qp_ex *xa;
	struct ibv_mr *amr, *bmr;
	struct ibv_mw *mw;
	struct ibv_cq *cq;
	struct ibv_wc wc;
	uint8_t *abuf = alloc_buf(LEN), *bbuf = alloc_buf(LEN);
	uint32_t key;
	int n, r;

	mw_pair(ops, 0, abuf, bbuf, &cq, &amr, &bmr, &qa, &qb);
	xa = ibv_qp_to_qp_ex(qa);
	REQUIRE(xa, "ibv_qp_to_qp_ex");
	mw = ibv_alloc_mw(d.pd, IBV_MW_TYPE_2);
	REQUIRE(mw, "ibv_alloc_mw");

	begin("mw_old_api_bind_send_inv");
	key = ibv_inc_rkey(mw->rkey);
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 60;
	wr.opcode = IBV_WR_BIND_MW;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.bind_mw.mw = mw;
	wr.bind_mw.rkey = key;
	wr.bind_mw.bind_info.mr = bmr;
	wr.bind_mw.bind_info.addr = (uintptr_t)bbuf;
	wr.bind_mw.bind_info.length = 512;
	wr.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
	r = ibv_post_send(qb, &wr, &bad);
	EXPECT(r == 0, "ibv_post_send(BIND_MW): %d", r);
	n = poll_n(cq, 1, &wc, 3000);
	EXPECT(n == 1, "no bind completion");
	if (n == 1)
		EXPECT_WC(wc, 60, IBV_WC_SUCCESS, IBV_WC_BIND_MW);
	/* The window works, */
	ibv_wr_start(xa);
	xa->wr_id = 61;
	xa->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(xa, key, (uintptr_t)(bbuf + 8));
	ibv_wr_set_sge(xa, amr->lkey, (uintptr_t)abuf, 8);
	r = ibv_wr_complete(xa);
	n = poll_n(cq, 1, &wc, 3000);
	EXPECT(r == 0 && n == 1 && wc.wr_id == 61 && wc.status == IBV_WC_SUCCESS, "write through the window failed");
	/* then A's SEND_WITH_INV invalidates it at B. */
	post_recv1(qb, 62, bmr, bbuf + 1024, 64);
	ibv_wr_start(xa);
	xa->wr_id = 63;
	xa->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send_inv(xa, key);
	ibv_wr_set_sge(xa, amr->lkey, (uintptr_t)abuf, 16);
	r = ibv_wr_complete(xa);
	EXPECT(r == 0, "ibv_wr_complete(send_inv): %d", r);
	{
		struct ibv_wc w2[2];
		int i;

		n = poll_n(cq, 2, w2, 3000);
		EXPECT(n == 2, "%d completions of the SEND_WITH_INV", n);
		for (i = 0; i < n; i++) {
			if (w2[i].wr_id == 63) {
				EXPECT_WC(w2[i], 63, IBV_WC_SUCCESS, IBV_WC_SEND);
			} else {
				EXPECT_WC(w2[i], 62, IBV_WC_SUCCESS, IBV_WC_RECV);
				EXPECT(w2[i].byte_len == 16, "byte_len %u", w2[i].byte_len);
				EXPECT(w2[i].wc_flags & IBV_WC_WITH_INV, "wc_flags %#x lack WITH_INV", w2[i].wc_flags);
				/* invalidated_rkey is in host order (unlike imm_data). */
				EXPECT(w2[i].invalidated_rkey == key, "invalidated_rkey %#x, expected %#x",
				       w2[i].invalidated_rkey, key);
			}
		}
	}
	/* Its key is stale now. */
	ibv_wr_start(xa);
	xa->wr_id = 64;
	xa->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(xa, key, (uintptr_t)(bbuf + 8));
	ibv_wr_set_sge(xa, amr->lkey, (uintptr_t)abuf, 8);
	r = ibv_wr_complete(xa);
	n = poll_n(cq, 1, &wc, 3000);
	EXPECT(r == 0 && n == 1 && wc.wr_id == 64 && wc.status == IBV_WC_REM_ACCESS_ERR,
	       "write with the invalidated key: %d completions, status %s", n,
	       n == 1 ? ibv_wc_status_str(wc.status) : "-");
	end();

	EXPECT(ibv_dealloc_mw(mw) == 0, "ibv_dealloc_mw");
	EXPECT(ibv_destroy_qp(qa) == 0 && ibv_destroy_qp(qb) == 0, "ibv_destroy_qp");
	while (poll_n(cq, 1, &wc, 20) == 1)
		;
	EXPECT(ibv_dereg_mr(amr) == 0 && ibv_dereg_mr(bmr) == 0, "ibv_dereg_mr");
	EXPECT(ibv_destroy_cq(cq) == 0, "ibv_destroy_cq");
	free(abuf);
	free(bbuf);
}

int main(void)
{
	watchdog(30);
	open_dev(&d);
	check_busy();
	check_reg_mr();
	check_modify_qp();
	check_queries();
	check_mw();
	check_mw_rebind();
	check_mw_send_inv();
	REQUIRE(ibv_dealloc_pd(d.pd) == 0, "ibv_dealloc_pd");
	REQUIRE(ibv_close_device(d.ctx) == 0, "ibv_close_device");
	return finish();
}
