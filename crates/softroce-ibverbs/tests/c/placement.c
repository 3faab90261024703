/*
 * IBA 1.5 memory placement and on-demand paging through the drop-in
 * library, built against rdma-core 44's headers: ATOMIC WRITE
 * (ibv_wr_atomic_write), rdma-core 45's FLUSH (the wr_flush slot appended
 * to struct ibv_qp_ex), the IBV_ACCESS_FLUSH_* and ON_DEMAND access flags,
 * the device's placement and ODP capabilities, and ibv_advise_mr, between
 * RC QPs of one device.
 */
#include "common.h"

#include <stddef.h>

/* rdma-core 45 names the 44 headers lack (the same values as 45's). */
#ifndef IBV_QP_EX_WITH_FLUSH
#define IBV_QP_EX_WITH_FLUSH (1 << 13)
#endif
#ifndef IBV_WR_FLUSH
#define IBV_WR_FLUSH 14
#endif
#ifndef IBV_WC_FLUSH
#define IBV_WC_FLUSH 8
#endif
#ifndef IBV_ACCESS_FLUSH_GLOBAL
#define IBV_ACCESS_FLUSH_GLOBAL (1 << 8)
#endif
#ifndef IBV_ACCESS_FLUSH_PERSISTENT
#define IBV_ACCESS_FLUSH_PERSISTENT (1 << 9)
#endif
#ifndef IBV_FLUSH_GLOBAL
#define IBV_FLUSH_GLOBAL 1
#endif
#ifndef IBV_FLUSH_PERSISTENT
#define IBV_FLUSH_PERSISTENT 2
#endif
#ifndef IBV_FLUSH_RANGE
#define IBV_FLUSH_RANGE 0
#endif
#ifndef IBV_FLUSH_MR
#define IBV_FLUSH_MR 1
#endif
#ifndef IB_UVERBS_DEVICE_FLUSH_GLOBAL
#define IB_UVERBS_DEVICE_FLUSH_GLOBAL (1ULL << 38)
#endif
#ifndef IB_UVERBS_DEVICE_FLUSH_PERSISTENT
#define IB_UVERBS_DEVICE_FLUSH_PERSISTENT (1ULL << 39)
#endif
#ifndef IB_UVERBS_DEVICE_ATOMIC_WRITE
#define IB_UVERBS_DEVICE_ATOMIC_WRITE (1ULL << 40)
#endif

/* rdma-core 45's struct ibv_qp_ex: 44's with wr_flush appended. */
struct qp_ex_45 {
	struct ibv_qp_ex ex;
	void (*wr_flush)(struct ibv_qp_ex *qp, uint32_t rkey, uint64_t remote_addr, size_t len, uint8_t type,
			 uint8_t level);
};
_Static_assert(offsetof(struct qp_ex_45, wr_flush) == offsetof(struct ibv_qp_ex, wr_atomic_write) + sizeof(void *),
	       "wr_flush follows wr_atomic_write (build against rdma-core 44 headers)");

static inline void wr_flush(struct ibv_qp_ex *qp, uint32_t rkey, uint64_t remote_addr, size_t len, uint8_t type,
			    uint8_t level)
{
	((struct qp_ex_45 *)qp)->wr_flush(qp, rkey, remote_addr, len, type, level);
}

#define LEN 8192
#define QP_ACCESS (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_FLUSH_GLOBAL)
#define OPS                                                                                                   \
	(IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_WRITE | \
	 IBV_QP_EX_WITH_FLUSH)

static struct dev d;
static struct ibv_cq *scq, *rcq;
static uint8_t *abuf, *bbuf, *cbuf;
/* amr: A's local buffer; bmr: the target, FLUSH_GLOBAL; cmr: a target without it. */
static struct ibv_mr *amr, *bmr, *cmr;

/* A connected RC pair; `ops` are A's send_ops_flags. */
struct pair {
	struct ibv_qp *a, *b;
	struct ibv_qp_ex *x;
};

static void pair_up(struct pair *p, uint64_t ops)
{
	p->a = make_qp(&d, IBV_QPT_RC, scq, rcq, NULL, ops);
	p->b = make_qp(&d, IBV_QPT_RC, scq, rcq, NULL, OPS);
	p->x = ibv_qp_to_qp_ex(p->a);
	REQUIRE(p->x != NULL, "ibv_qp_to_qp_ex");
	connect_rc_access(&d, p->a, p->b->qp_num, QP_ACCESS);
	connect_rc_access(&d, p->b, p->a->qp_num, QP_ACCESS);
}

static void pair_down(struct pair *p)
{
	struct ibv_wc wc[16];

	/* Flushed completions of a failed pair go first. */
	while (ibv_poll_cq(scq, 16, wc) > 0)
		;
	REQUIRE(ibv_destroy_qp(p->a) == 0 && ibv_destroy_qp(p->b) == 0, "ibv_destroy_qp");
}

/* Waits for A's next send completion. */
static int send_wc(struct ibv_wc *wc)
{
	int n = poll_n(scq, 1, wc, 3000);

	EXPECT(n == 1, "no send completion (poll gave %d)", n);
	return n == 1;
}

/* Posts one builder WR, set up by the statements after `want`, and
 * expects ibv_wr_complete to give `want`. */
#define POST1(x, id, want, ...)                                                                            \
	do {                                                                                               \
		int r_;                                                                                    \
		ibv_wr_start(x);                                                                           \
		(x)->wr_id = (id);                                                                         \
		(x)->wr_flags = IBV_SEND_SIGNALED;                                                         \
		__VA_ARGS__;                                                                               \
		r_ = ibv_wr_complete(x);                                                                   \
		EXPECT(r_ == (want), "ibv_wr_complete: %d (%s), expected %d", r_, strerror(r_), (want)); \
	} while (0)

static void check_layout(struct pair *p)
{
	begin("wr_flush_slot");
	EXPECT(sizeof(struct qp_ex_45) == 360, "sizeof(struct qp_ex_45) %zu", sizeof(struct qp_ex_45));
	EXPECT(((struct qp_ex_45 *)p->x)->wr_flush != NULL, "wr_flush is NULL");
	EXPECT(p->x->wr_atomic_write != NULL, "wr_atomic_write is NULL");
	end();
}

static void check_device_caps(void)
{
	struct ibv_device_attr_ex a;
	uint32_t rc = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_READ |
		      IBV_ODP_SUPPORT_ATOMIC | IBV_ODP_SUPPORT_SRQ_RECV;
	uint32_t ud = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_SRQ_RECV;
	int r;

	begin("device_cap_flags_ex");
	memset(&a, 0xa5, sizeof(a));
	r = ibv_query_device_ex(d.ctx, NULL, &a);
	REQUIRE(r == 0, "ibv_query_device_ex: %d", r);
	EXPECT(a.device_cap_flags_ex & IB_UVERBS_DEVICE_FLUSH_GLOBAL, "FLUSH_GLOBAL (bit 38) clear: %#" PRIx64,
	       a.device_cap_flags_ex);
	EXPECT(a.device_cap_flags_ex & IB_UVERBS_DEVICE_ATOMIC_WRITE, "ATOMIC_WRITE (bit 40) clear: %#" PRIx64,
	       a.device_cap_flags_ex);
	EXPECT(!(a.device_cap_flags_ex & IB_UVERBS_DEVICE_FLUSH_PERSISTENT), "FLUSH_PERSISTENT (bit 39) set: %#" PRIx64,
	       a.device_cap_flags_ex);
	EXPECT((uint32_t)a.device_cap_flags_ex == a.orig_attr.device_cap_flags, "low 32 bits %#x, device_cap_flags %#x",
	       (uint32_t)a.device_cap_flags_ex, a.orig_attr.device_cap_flags);
	end();

	begin("odp_caps");
	EXPECT(a.odp_caps.general_caps == IBV_ODP_SUPPORT, "general_caps %#" PRIx64 ", expected SUPPORT without IMPLICIT",
	       a.odp_caps.general_caps);
	EXPECT(a.odp_caps.per_transport_caps.rc_odp_caps == rc, "rc_odp_caps %#x, expected %#x",
	       a.odp_caps.per_transport_caps.rc_odp_caps, rc);
	EXPECT(a.odp_caps.per_transport_caps.uc_odp_caps == 0, "uc_odp_caps %#x", a.odp_caps.per_transport_caps.uc_odp_caps);
	EXPECT(a.odp_caps.per_transport_caps.ud_odp_caps == ud, "ud_odp_caps %#x, expected %#x",
	       a.odp_caps.per_transport_caps.ud_odp_caps, ud);
	end();
}

static void check_reg_access(void)
{
	uint8_t *buf = alloc_buf(4096);
	struct ibv_mr *mr;
	int r;

	begin("reg_mr_flush_access");
	mr = ibv_reg_mr(d.pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_FLUSH_GLOBAL);
	EXPECT(mr != NULL, "FLUSH_GLOBAL: errno %d", errno);
	if (mr) {
		errno = 0;
		r = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
				 IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_FLUSH_PERSISTENT);
		EXPECT(r == IBV_REREG_MR_ERR_CMD && errno == EINVAL, "rereg to FLUSH_PERSISTENT: %d errno %d", r, errno);
		r = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
				 IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_FLUSH_GLOBAL | IBV_ACCESS_ON_DEMAND);
		EXPECT(r == 0, "rereg to FLUSH_GLOBAL | ON_DEMAND: %d errno %d", r, errno);
		EXPECT(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr");
	}
	errno = 0;
	mr = ibv_reg_mr(d.pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_FLUSH_PERSISTENT);
	EXPECT(mr == NULL && errno == EINVAL, "FLUSH_PERSISTENT: %p errno %d", (void *)mr, errno);
	errno = 0;
	mr = ibv_reg_mr_iova(d.pd, buf, 4096, (uintptr_t)buf, IBV_ACCESS_FLUSH_GLOBAL | IBV_ACCESS_FLUSH_PERSISTENT);
	EXPECT(mr == NULL && errno == EINVAL, "iova, both placement types: %p errno %d", (void *)mr, errno);
	mr = ibv_reg_mr_iova(d.pd, buf, 4096, (uintptr_t)buf, IBV_ACCESS_FLUSH_GLOBAL);
	EXPECT(mr != NULL, "iova, FLUSH_GLOBAL: errno %d", errno);
	if (mr)
		EXPECT(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr");
	errno = 0;
	mr = ibv_reg_mr(d.pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_HUGETLB);
	EXPECT(mr == NULL && errno == EOPNOTSUPP, "HUGETLB: %p errno %d", (void *)mr, errno);
	errno = 0;
	mr = ibv_reg_mr(d.pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE | (1 << 10));
	EXPECT(mr == NULL && errno == EINVAL, "unknown bit 10: %p errno %d", (void *)mr, errno);
	end();

	begin("reg_mr_on_demand");
	mr = ibv_reg_mr(d.pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND);
	EXPECT(mr != NULL, "ON_DEMAND: errno %d", errno);
	if (mr)
		EXPECT(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr");
	errno = 0;
	mr = ibv_reg_mr(d.pd, NULL, SIZE_MAX, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND);
	EXPECT(mr == NULL && errno == EINVAL, "implicit ODP: %p errno %d", (void *)mr, errno);
	end();
	free(buf);
}

static void check_create_ops(void)
{
	struct ibv_qp *qp;
	static const struct {
		enum ibv_qp_type type;
		uint64_t ops;
	} refused[] = {
		{ IBV_QPT_UC, IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_ATOMIC_WRITE },
		{ IBV_QPT_UC, IBV_QP_EX_WITH_FLUSH },
		{ IBV_QPT_UD, IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_ATOMIC_WRITE },
		{ IBV_QPT_UD, IBV_QP_EX_WITH_FLUSH },
	};
	size_t i;

	begin("create_qp_ex_placement_ops");
	for (i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		qp = create_qp_ops(d.ctx, d.pd, refused[i].type, scq, rcq, refused[i].ops);
		EXPECT(qp == NULL && errno == EOPNOTSUPP, "type %d ops %#" PRIx64 ": %p errno %d", refused[i].type,
		       refused[i].ops, (void *)qp, errno);
		if (qp)
			ibv_destroy_qp(qp);
	}
	qp = make_qp(&d, IBV_QPT_RC, scq, rcq, NULL, IBV_QP_EX_WITH_ATOMIC_WRITE | IBV_QP_EX_WITH_FLUSH);
	EXPECT(ibv_destroy_qp(qp) == 0, "ibv_destroy_qp");
	end();
}

static void check_modify_access(struct pair *p)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr init;
	int r;

	begin("modify_qp_flush_access");
	memset(&a, 0, sizeof(a));
	r = ibv_query_qp(p->b, &a, IBV_QP_ACCESS_FLAGS, &init);
	EXPECT(r == 0, "ibv_query_qp: %d", r);
	EXPECT(a.qp_access_flags == QP_ACCESS, "qp_access_flags %#x, expected %#x", a.qp_access_flags, QP_ACCESS);
	/* The QP may allow persistence (rxe's check_qp_attr_access); no region can. */
	memset(&a, 0, sizeof(a));
	a.qp_access_flags = QP_ACCESS | IBV_ACCESS_FLUSH_PERSISTENT;
	r = ibv_modify_qp(p->b, &a, IBV_QP_ACCESS_FLAGS);
	EXPECT(r == 0, "RTS -> RTS with FLUSH_PERSISTENT: %d", r);
	end();
}

static void check_atomic_write(struct pair *p)
{
	uint64_t v = 0x1122334455667788ULL, old = v;
	struct ibv_wc wc;

	begin("atomic_write");
	memset(bbuf, 0xee, 64);
	POST1(p->x, 201, 0, {
		ibv_wr_atomic_write(p->x, bmr->rkey, (uintptr_t)bbuf + 16, &v);
		/* Copied at call time: a later change does not travel. */
		v = 0;
	});
	if (send_wc(&wc)) {
		EXPECT_WC(wc, 201, IBV_WC_SUCCESS, IBV_WC_ATOMIC_WRITE);
		EXPECT(wc.byte_len == 8, "byte_len %u, expected 8", wc.byte_len);
	}
	EXPECT(memcmp(bbuf + 16, &old, 8) == 0, "target holds %#" PRIx64, *(uint64_t *)(bbuf + 16));
	EXPECT(bbuf[15] == 0xee && bbuf[24] == 0xee, "bytes beside the target were written");
	end();

	begin("atomic_write_null_value");
	POST1(p->x, 202, EINVAL, ibv_wr_atomic_write(p->x, bmr->rkey, (uintptr_t)bbuf, NULL));
	EXPECT(quiet_for(scq, 50, NULL), "a refused batch completed");
	end();
}

static void check_flush(struct pair *p)
{
	struct ibv_wc wc;

	begin("flush_range");
	fill(abuf, 512, 7);
	memset(bbuf + 1024, 0, 512);
	ibv_wr_start(p->x);
	p->x->wr_id = 301;
	p->x->wr_flags = 0;
	ibv_wr_rdma_write(p->x, bmr->rkey, (uintptr_t)bbuf + 1024);
	ibv_wr_set_sge(p->x, amr->lkey, (uintptr_t)abuf, 512);
	p->x->wr_id = 302;
	p->x->wr_flags = IBV_SEND_SIGNALED;
	wr_flush(p->x, bmr->rkey, (uintptr_t)bbuf + 1024, 512, IBV_FLUSH_GLOBAL, IBV_FLUSH_RANGE);
	EXPECT(ibv_wr_complete(p->x) == 0, "ibv_wr_complete");
	if (send_wc(&wc)) {
		EXPECT_WC(wc, 302, IBV_WC_SUCCESS, IBV_WC_FLUSH);
		EXPECT(wc.opcode == IBV_WC_FLUSH, "opcode %d, expected IBV_WC_FLUSH (8)", wc.opcode);
	}
	EXPECT(memcmp(abuf, bbuf + 1024, 512) == 0, "written data not visible after the FLUSH");
	end();

	begin("flush_mr");
	fill(abuf, 256, 8);
	ibv_wr_start(p->x);
	p->x->wr_id = 303;
	p->x->wr_flags = 0;
	ibv_wr_rdma_write(p->x, bmr->rkey, (uintptr_t)bbuf + 4096);
	ibv_wr_set_sge(p->x, amr->lkey, (uintptr_t)abuf, 256);
	p->x->wr_id = 304;
	p->x->wr_flags = IBV_SEND_SIGNALED;
	/* Address and length are not looked at for the whole region. */
	wr_flush(p->x, bmr->rkey, 0, 0, IBV_FLUSH_GLOBAL, IBV_FLUSH_MR);
	EXPECT(ibv_wr_complete(p->x) == 0, "ibv_wr_complete");
	if (send_wc(&wc))
		EXPECT_WC(wc, 304, IBV_WC_SUCCESS, IBV_WC_FLUSH);
	EXPECT(memcmp(abuf, bbuf + 4096, 256) == 0, "written data not visible after the FLUSH");
	end();

	begin("flush_len_too_long");
	POST1(p->x, 305, EINVAL,
	      wr_flush(p->x, bmr->rkey, (uintptr_t)bbuf, (size_t)UINT32_MAX + 1, IBV_FLUSH_GLOBAL, IBV_FLUSH_RANGE));
	POST1(p->x, 306, EINVAL,
	      wr_flush(p->x, bmr->rkey, (uintptr_t)bbuf, (size_t)UINT32_MAX + 1, IBV_FLUSH_GLOBAL, IBV_FLUSH_MR));
	EXPECT(quiet_for(scq, 50, NULL), "a refused batch completed");
	end();

	begin("flush_bad_operands");
	POST1(p->x, 307, EINVAL, wr_flush(p->x, bmr->rkey, (uintptr_t)bbuf, 64, 0, IBV_FLUSH_RANGE));
	POST1(p->x, 308, EINVAL, wr_flush(p->x, bmr->rkey, (uintptr_t)bbuf, 64, 4, IBV_FLUSH_RANGE));
	POST1(p->x, 309, EINVAL, wr_flush(p->x, bmr->rkey, (uintptr_t)bbuf, 64, IBV_FLUSH_GLOBAL, 2));
	POST1(p->x, 310, EINVAL, {
		wr_flush(p->x, bmr->rkey, (uintptr_t)bbuf, 64, IBV_FLUSH_GLOBAL, IBV_FLUSH_RANGE);
		ibv_wr_set_sge(p->x, amr->lkey, (uintptr_t)abuf, 8);
	});
	EXPECT(quiet_for(scq, 50, NULL), "a refused batch completed");
	end();
}

static void check_post_send_refused(struct pair *p)
{
	struct ibv_sge sge = { (uintptr_t)abuf, 8, amr->lkey };
	struct ibv_send_wr wr, *bad = NULL;
	int r;

	begin("post_send_placement_refused");
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 401;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.wr.rdma.remote_addr = (uintptr_t)bbuf;
	wr.wr.rdma.rkey = bmr->rkey;
	wr.opcode = IBV_WR_ATOMIC_WRITE;
	r = ibv_post_send(p->a, &wr, &bad);
	EXPECT(r == EINVAL && bad == &wr, "IBV_WR_ATOMIC_WRITE: %d", r);
	wr.opcode = (enum ibv_wr_opcode)IBV_WR_FLUSH;
	bad = NULL;
	r = ibv_post_send(p->a, &wr, &bad);
	EXPECT(r == EINVAL && bad == &wr, "IBV_WR_FLUSH: %d", r);
	EXPECT(quiet_for(scq, 50, NULL), "a refused WR completed");
	end();
}

static void check_without_send_op(void)
{
	struct pair p;
	uint64_t v = 5;

	begin("placement_without_send_ops_flag");
	pair_up(&p, IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_READ);
	POST1(p.x, 501, EOPNOTSUPP, ibv_wr_atomic_write(p.x, bmr->rkey, (uintptr_t)bbuf, &v));
	POST1(p.x, 502, EOPNOTSUPP, wr_flush(p.x, bmr->rkey, (uintptr_t)bbuf, 8, IBV_FLUSH_GLOBAL, IBV_FLUSH_RANGE));
	EXPECT(quiet_for(scq, 50, NULL), "a refused batch completed");
	pair_down(&p);
	end();
}

/* Each failure ends its pair (the QPs go to ERR): a fresh pair per check. */
static void check_remote_errors(void)
{
	struct ibv_qp_attr a;
	struct pair p;
	struct ibv_wc wc;
	uint64_t v = 9;

	begin("atomic_write_misaligned");
	pair_up(&p, OPS);
	memset(bbuf + 32, 0xee, 16);
	POST1(p.x, 601, 0, ibv_wr_atomic_write(p.x, bmr->rkey, (uintptr_t)bbuf + 36, &v));
	if (send_wc(&wc))
		EXPECT_WC(wc, 601, IBV_WC_REM_INV_REQ_ERR, IBV_WC_ATOMIC_WRITE);
	EXPECT(bbuf[36] == 0xee && bbuf[43] == 0xee, "a misaligned target was written");
	pair_down(&p);
	end();

	begin("flush_without_flush_access");
	pair_up(&p, OPS);
	POST1(p.x, 602, 0, wr_flush(p.x, cmr->rkey, (uintptr_t)cbuf, 64, IBV_FLUSH_GLOBAL, IBV_FLUSH_RANGE));
	if (send_wc(&wc))
		EXPECT_WC(wc, 602, IBV_WC_REM_ACCESS_ERR, IBV_WC_FLUSH);
	pair_down(&p);
	end();

	/* Persistence: a QP that does not allow it refuses the request
	 * (invalid request, as rxe's check_qp_attr_access); one that does
	 * finds no region allowing it (remote access error). */
	begin("flush_persistent_refused");
	pair_up(&p, OPS);
	POST1(p.x, 603, 0, wr_flush(p.x, bmr->rkey, (uintptr_t)bbuf, 64, IBV_FLUSH_PERSISTENT, IBV_FLUSH_RANGE));
	if (send_wc(&wc))
		EXPECT_WC(wc, 603, IBV_WC_REM_INV_REQ_ERR, IBV_WC_FLUSH);
	pair_down(&p);
	pair_up(&p, OPS);
	memset(&a, 0, sizeof(a));
	a.qp_access_flags = QP_ACCESS | IBV_ACCESS_FLUSH_PERSISTENT;
	REQUIRE(ibv_modify_qp(p.b, &a, IBV_QP_ACCESS_FLAGS) == 0, "RTS -> RTS with FLUSH_PERSISTENT");
	POST1(p.x, 604, 0, wr_flush(p.x, bmr->rkey, (uintptr_t)bbuf, 64, IBV_FLUSH_PERSISTENT, IBV_FLUSH_RANGE));
	if (send_wc(&wc))
		EXPECT_WC(wc, 604, IBV_WC_REM_ACCESS_ERR, IBV_WC_FLUSH);
	pair_down(&p);
	end();
}

static void check_advise(void)
{
	struct ibv_pd *pd2 = ibv_alloc_pd(d.ctx);
	uint8_t *buf = alloc_buf(8192);
	struct ibv_mr *odp, *ro, *pinned, *other;
	struct ibv_sge g[2];
	int advice, r;

	REQUIRE(pd2 != NULL, "ibv_alloc_pd");
	odp = ibv_reg_mr(d.pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND);
	ro = ibv_reg_mr(d.pd, buf + 4096, 4096, IBV_ACCESS_ON_DEMAND);
	pinned = ibv_reg_mr(d.pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
	other = ibv_reg_mr(pd2, buf, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND);
	REQUIRE(odp && ro && pinned && other, "ibv_reg_mr: errno %d", errno);

	begin("advise_mr");
	for (advice = IBV_ADVISE_MR_ADVICE_PREFETCH; advice <= IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT; advice++) {
		g[0] = (struct ibv_sge){ (uintptr_t)buf, 4096, odp->lkey };
		g[1] = (struct ibv_sge){ (uintptr_t)buf + 100, 28, odp->lkey };
		r = ibv_advise_mr(d.pd, advice, 0, g, 2);
		EXPECT(r == 0, "advice %d: %d", advice, r);
		r = ibv_advise_mr(d.pd, advice, IBV_ADVISE_MR_FLAG_FLUSH, g, 1);
		EXPECT(r == 0, "advice %d, FLAG_FLUSH: %d", advice, r);
	}
	g[0] = (struct ibv_sge){ (uintptr_t)buf + 4096, 64, ro->lkey };
	r = ibv_advise_mr(d.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, g, 1);
	EXPECT(r == 0, "PREFETCH of a read-only region: %d", r);
	end();

	begin("advise_mr_errors");
	g[0] = (struct ibv_sge){ (uintptr_t)buf, 64, odp->lkey };
	r = ibv_advise_mr(d.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, g, 0);
	EXPECT(r == EINVAL, "num_sge 0: %d", r);
	r = ibv_advise_mr(d.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, NULL, 1);
	EXPECT(r == EINVAL, "NULL list: %d", r);
	r = ibv_advise_mr(d.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 2, g, 1);
	EXPECT(r == EINVAL, "unknown flag: %d", r);
	r = ibv_advise_mr(d.pd, (enum ibv_advise_mr_advice)3, 0, g, 1);
	EXPECT(r == EOPNOTSUPP, "unknown advice: %d", r);
	g[0] = (struct ibv_sge){ (uintptr_t)buf, 64, odp->lkey ^ 0x80 };
	r = ibv_advise_mr(d.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, g, 1);
	EXPECT(r == EINVAL, "unknown lkey: %d", r);
	g[0] = (struct ibv_sge){ (uintptr_t)buf, 64, other->lkey };
	r = ibv_advise_mr(d.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, g, 1);
	EXPECT(r == EINVAL, "another PD's region: %d", r);
	g[0] = (struct ibv_sge){ (uintptr_t)buf, 64, pinned->lkey };
	r = ibv_advise_mr(d.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, IBV_ADVISE_MR_FLAG_FLUSH, g, 1);
	EXPECT(r == EINVAL, "a region without ON_DEMAND: %d", r);
	g[0] = (struct ibv_sge){ (uintptr_t)buf + 4000, 97, odp->lkey };
	r = ibv_advise_mr(d.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, g, 1);
	EXPECT(r == EINVAL, "past the region's end: %d", r);
	g[0] = (struct ibv_sge){ (uintptr_t)buf, 64, odp->lkey };
	g[1] = (struct ibv_sge){ (uintptr_t)buf - 1, 2, odp->lkey };
	r = ibv_advise_mr(d.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, g, 2);
	EXPECT(r == EINVAL, "second SGE before the region: %d", r);
	g[0] = (struct ibv_sge){ (uintptr_t)buf + 4096, 64, ro->lkey };
	r = ibv_advise_mr(d.pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, 0, g, 1);
	EXPECT(r == EPERM, "PREFETCH_WRITE of a read-only region: %d", r);
	end();

	REQUIRE(ibv_dereg_mr(odp) == 0 && ibv_dereg_mr(ro) == 0 && ibv_dereg_mr(pinned) == 0 &&
			ibv_dereg_mr(other) == 0,
		"ibv_dereg_mr");
	REQUIRE(ibv_dealloc_pd(pd2) == 0, "ibv_dealloc_pd");
	free(buf);
}

/* RDMA WRITE and READ between regions registered ON_DEMAND, with ibv_post_send. */
static void check_odp_traffic(struct pair *p)
{
	uint8_t *src = alloc_buf(LEN), *dst = alloc_buf(LEN);
	struct ibv_mr *smr, *dmr;
	struct ibv_sge sge;
	struct ibv_send_wr wr, *bad = NULL;
	struct ibv_wc wc;
	int r;

	smr = ibv_reg_mr(d.pd, src, LEN, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND);
	dmr = ibv_reg_mr(d.pd, dst, LEN, ALL_ACCESS | IBV_ACCESS_ON_DEMAND);
	REQUIRE(smr && dmr, "ibv_reg_mr ON_DEMAND: errno %d", errno);

	begin("on_demand_write_read");
	fill(src, LEN, 9);
	sge = (struct ibv_sge){ (uintptr_t)src, LEN, smr->lkey };
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 701;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_RDMA_WRITE;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.wr.rdma.remote_addr = (uintptr_t)dst;
	wr.wr.rdma.rkey = dmr->rkey;
	r = ibv_post_send(p->a, &wr, &bad);
	EXPECT(r == 0, "post WRITE: %d", r);
	if (send_wc(&wc))
		EXPECT_WC(wc, 701, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
	EXPECT(memcmp(src, dst, LEN) == 0, "WRITE into an ON_DEMAND region differs");
	memset(src, 0, LEN);
	wr.wr_id = 702;
	wr.opcode = IBV_WR_RDMA_READ;
	r = ibv_post_send(p->a, &wr, &bad);
	EXPECT(r == 0, "post READ: %d", r);
	if (send_wc(&wc)) {
		EXPECT_WC(wc, 702, IBV_WC_SUCCESS, IBV_WC_RDMA_READ);
		EXPECT(wc.byte_len == LEN, "byte_len %u", wc.byte_len);
	}
	EXPECT(memcmp(src, dst, LEN) == 0, "READ from an ON_DEMAND region differs");
	end();

	REQUIRE(ibv_dereg_mr(smr) == 0 && ibv_dereg_mr(dmr) == 0, "ibv_dereg_mr");
	free(src);
	free(dst);
}

int main(void)
{
	struct pair p;

	watchdog(40);
	open_dev(&d);
	scq = ibv_create_cq(d.ctx, 256, NULL, NULL, 0);
	rcq = ibv_create_cq(d.ctx, 64, NULL, NULL, 0);
	REQUIRE(scq && rcq, "ibv_create_cq: errno %d", errno);
	abuf = alloc_buf(LEN);
	bbuf = alloc_buf(LEN);
	cbuf = alloc_buf(LEN);
	amr = ibv_reg_mr(d.pd, abuf, LEN, ALL_ACCESS);
	bmr = ibv_reg_mr(d.pd, bbuf, LEN, ALL_ACCESS | IBV_ACCESS_FLUSH_GLOBAL);
	cmr = ibv_reg_mr(d.pd, cbuf, LEN, ALL_ACCESS);
	REQUIRE(amr && bmr && cmr, "ibv_reg_mr: errno %d", errno);

	check_device_caps();
	check_reg_access();
	check_create_ops();
	pair_up(&p, OPS);
	check_layout(&p);
	check_atomic_write(&p);
	check_flush(&p);
	check_post_send_refused(&p);
	check_odp_traffic(&p);
	check_modify_access(&p);
	pair_down(&p);
	check_without_send_op();
	check_remote_errors();
	check_advise();

	REQUIRE(ibv_dereg_mr(amr) == 0 && ibv_dereg_mr(bmr) == 0 && ibv_dereg_mr(cmr) == 0, "ibv_dereg_mr");
	REQUIRE(ibv_destroy_cq(scq) == 0 && ibv_destroy_cq(rcq) == 0, "ibv_destroy_cq");
	REQUIRE(ibv_dealloc_pd(d.pd) == 0, "ibv_dealloc_pd");
	REQUIRE(ibv_close_device(d.ctx) == 0, "ibv_close_device");
	free(abuf);
	free(bbuf);
	free(cbuf);
	return finish();
}
