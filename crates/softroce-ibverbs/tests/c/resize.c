/*
 * Verbs that change an object after it was made, and CQ creation bounds:
 * ibv_create_cq / ibv_create_cq_ex bounds (cqe, comp_vector), ibv_resize_cq
 * with completions inside, ibv_modify_cq moderation, ibv_modify_srq with
 * IBV_SRQ_MAX_WR, and ibv_rereg_mr with every IBV_REREG_MR_CHANGE_* flag
 * combination, with the return values and errno rdma-core documents.
 */
#include "common.h"

#include <fcntl.h>
#include <poll.h>

#define LEN 65536

static struct dev d;
static struct ibv_device_attr_ex dattr;

static void check_create_bounds(void)
{
	struct ibv_cq_init_attr_ex ax;
	struct ibv_cq_ex *cqx;
	struct ibv_cq *cq;
	int max = dattr.orig_attr.max_cqe;

	begin("create_cq_bounds");
	errno = 0;
	cq = ibv_create_cq(d.ctx, max + 1, NULL, NULL, 0);
	EXPECT(cq == NULL && errno == EINVAL, "cqe max_cqe+1: %p errno %d", (void *)cq, errno);
	errno = 0;
	cq = ibv_create_cq(d.ctx, 0, NULL, NULL, 0);
	EXPECT(cq == NULL && errno == EINVAL, "cqe 0: %p errno %d", (void *)cq, errno);
	errno = 0;
	cq = ibv_create_cq(d.ctx, 16, NULL, NULL, d.ctx->num_comp_vectors);
	EXPECT(cq == NULL && errno == EINVAL, "comp_vector num_comp_vectors: %p errno %d", (void *)cq, errno);
	errno = 0;
	cq = ibv_create_cq(d.ctx, 16, NULL, NULL, -1);
	EXPECT(cq == NULL && errno == EINVAL, "comp_vector -1: %p errno %d", (void *)cq, errno);
	cq = ibv_create_cq(d.ctx, max, NULL, NULL, d.ctx->num_comp_vectors - 1);
	EXPECT(cq && cq->cqe == max, "cqe max_cqe: %p cqe %d", (void *)cq, cq ? cq->cqe : -1);
	if (cq)
		ibv_destroy_cq(cq);
	/* rxe's sizes: 2^k - 1 at or above the size asked for. */
	cq = ibv_create_cq(d.ctx, 10, NULL, NULL, 0);
	EXPECT(cq && cq->cqe == 15, "cqe 10 -> %d, expected 15", cq ? cq->cqe : -1);
	if (cq)
		ibv_destroy_cq(cq);
	end();

	begin("create_cq_ex_bounds");
	memset(&ax, 0, sizeof(ax));
	ax.cqe = (uint32_t)max + 1;
	ax.wc_flags = IBV_WC_EX_WITH_BYTE_LEN;
	errno = 0;
	cqx = ibv_create_cq_ex(d.ctx, &ax);
	EXPECT(cqx == NULL && errno == EINVAL, "cqe max_cqe+1: %p errno %d", (void *)cqx, errno);
	ax.cqe = 16;
	ax.comp_vector = (uint32_t)d.ctx->num_comp_vectors;
	errno = 0;
	cqx = ibv_create_cq_ex(d.ctx, &ax);
	EXPECT(cqx == NULL && errno == EINVAL, "comp_vector num_comp_vectors: %p errno %d", (void *)cqx, errno);
	ax.comp_vector = 0;
	cqx = ibv_create_cq_ex(d.ctx, &ax);
	EXPECT(cqx && ibv_cq_ex_to_cq(cqx)->cqe == 31, "cqe 16 -> %d, expected 31",
	       cqx ? ibv_cq_ex_to_cq(cqx)->cqe : -1);
	if (cqx)
		ibv_destroy_cq(ibv_cq_ex_to_cq(cqx));
	end();
}

/* An RC pair A -> B whose receive completions land in `rcq`. */
struct pair {
	struct ibv_cq *scq;
	struct ibv_qp *a, *b;
	struct ibv_mr *amr, *bmr;
	uint8_t *abuf, *bbuf;
};

static void make_pair(struct pair *p, struct ibv_cq *rcq, struct ibv_srq *srq)
{
	p->scq = ibv_create_cq(d.ctx, 256, NULL, NULL, 0);
	REQUIRE(p->scq, "send CQ");
	p->abuf = alloc_buf(LEN);
	p->bbuf = alloc_buf(LEN);
	p->amr = ibv_reg_mr(d.pd, p->abuf, LEN, ALL_ACCESS);
	p->bmr = ibv_reg_mr(d.pd, p->bbuf, LEN, ALL_ACCESS);
	REQUIRE(p->amr && p->bmr, "ibv_reg_mr");
	p->a = make_qp(&d, IBV_QPT_RC, p->scq, p->scq, NULL, 0);
	p->b = make_qp(&d, IBV_QPT_RC, p->scq, rcq, srq, 0);
	connect_pair(&d, p->a, p->b);
}

static void free_pair(struct pair *p)
{
	ibv_destroy_qp(p->a);
	ibv_destroy_qp(p->b);
	ibv_dereg_mr(p->amr);
	ibv_dereg_mr(p->bmr);
	ibv_destroy_cq(p->scq);
	free(p->abuf);
	free(p->bbuf);
}

/* An unsignaled SEND A -> B, after posting a receive `id` on B (unless an
 * SRQ feeds B); waits until B's receive completion could be there. */
static void send_one(struct pair *p, uint64_t id, int post_recv)
{
	struct ibv_sge sge = { (uintptr_t)p->abuf, 8, p->amr->lkey };
	struct ibv_send_wr wr, *bad = NULL;
	int r;

	if (post_recv)
		post_recv1(p->b, id, p->bmr, p->bbuf + 64 * (id % 512), 64);
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = id;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_SEND;
	r = ibv_post_send(p->a, &wr, &bad);
	REQUIRE(r == 0, "ibv_post_send: %d", r);
}

static void check_resize_cq(void)
{
	struct ibv_cq *cq;
	struct ibv_wc wc[64];
	struct pair p;
	int r, n, i;

	begin("resize_cq_with_completions");
	cq = ibv_create_cq(d.ctx, 7, NULL, NULL, 0);
	REQUIRE(cq && cq->cqe == 7, "ibv_create_cq(7)");
	make_pair(&p, cq, NULL);
	for (i = 0; i < 5; i++)
		send_one(&p, 100 + i, 1);
	/* The five arrive meanwhile (the driver thread receives them). */
	sleep_ms(200);
	r = ibv_resize_cq(cq, 4);
	EXPECT(r == EINVAL, "shrink below the 5 held: %d, expected EINVAL", r);
	EXPECT(cq->cqe == 7, "cqe after a refused resize: %d", cq->cqe);
	r = ibv_resize_cq(cq, 0);
	EXPECT(r == EINVAL, "resize to 0: %d", r);
	r = ibv_resize_cq(cq, dattr.orig_attr.max_cqe + 1);
	EXPECT(r == EINVAL, "resize past max_cqe: %d", r);
	r = ibv_resize_cq(cq, 20);
	EXPECT(r == 0 && cq->cqe == 31, "grow to 20: %d, cqe %d (expected 0, 31)", r, cq->cqe);
	for (i = 5; i < 25; i++)
		send_one(&p, 100 + i, 1);
	n = poll_n(cq, 25, wc, 3000);
	EXPECT(n == 25, "%d completions after growing, expected 25", n);
	for (i = 0; i < n; i++)
		EXPECT_WC(wc[i], 100 + i, IBV_WC_SUCCESS, IBV_WC_RECV);
	r = ibv_resize_cq(cq, 2);
	EXPECT(r == 0 && cq->cqe == 3, "shrink an empty CQ to 2: %d, cqe %d (expected 0, 3)", r, cq->cqe);
	for (i = 0; i < 3; i++)
		send_one(&p, 200 + i, 1);
	n = poll_n(cq, 3, wc, 3000);
	EXPECT(n == 3, "%d completions in the shrunk CQ, expected 3", n);
	EXPECT(ibv_resize_cq(NULL, 8) == EINVAL, "NULL CQ");
	free_pair(&p);
	ibv_destroy_cq(cq);
	end();
}

/* Whether the channel's fd becomes readable within `ms`. */
static int readable(struct ibv_comp_channel *ch, int ms)
{
	struct pollfd pf = { ch->fd, POLLIN, 0 };

	return poll(&pf, 1, ms) == 1 && (pf.revents & POLLIN);
}

static void take_event(struct ibv_comp_channel *ch, struct ibv_cq *cq)
{
	struct ibv_cq *ev_cq = NULL;
	void *ev_ctx = NULL;

	REQUIRE(ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == 0 && ev_cq == cq, "ibv_get_cq_event");
	ibv_ack_cq_events(cq, 1);
}

static void check_modify_cq(void)
{
	struct ibv_modify_cq_attr m;
	struct ibv_comp_channel *ch;
	struct ibv_cq *cq;
	struct ibv_wc wc[8];
	struct pair p;
	long long t0, t;
	int r;

	begin("modify_cq_errors");
	ch = ibv_create_comp_channel(d.ctx);
	REQUIRE(ch, "channel");
	cq = ibv_create_cq(d.ctx, 64, NULL, ch, 0);
	REQUIRE(cq, "cq");
	memset(&m, 0, sizeof(m));
	r = ibv_modify_cq(cq, &m);
	EXPECT(r == EINVAL, "no attr_mask: %d, expected EINVAL", r);
	m.attr_mask = IBV_CQ_ATTR_RESERVED;
	r = ibv_modify_cq(cq, &m);
	EXPECT(r == EINVAL, "IBV_CQ_ATTR_RESERVED: %d, expected EINVAL", r);
	EXPECT(dattr.cq_mod_caps.max_cq_count == 0xffff && dattr.cq_mod_caps.max_cq_period == 0xffff,
	       "cq_mod_caps %u %u", dattr.cq_mod_caps.max_cq_count, dattr.cq_mod_caps.max_cq_period);
	end();

	make_pair(&p, cq, NULL);
	begin("modify_cq_count");
	m.attr_mask = IBV_CQ_ATTR_MODERATE;
	m.moderate.cq_count = 3;
	m.moderate.cq_period = 60000; /* 60 ms */
	r = ibv_modify_cq(cq, &m);
	EXPECT(r == 0, "ibv_modify_cq: %d", r);
	REQUIRE(ibv_req_notify_cq(cq, 0) == 0, "arm");
	send_one(&p, 1, 1);
	send_one(&p, 2, 1);
	EXPECT(!readable(ch, 20), "an event after 2 of 3 completions");
	send_one(&p, 3, 1);
	EXPECT(readable(ch, 40), "no event after the third completion");
	take_event(ch, cq);
	EXPECT(poll_n(cq, 3, wc, 1000) == 3, "three receives");
	end();

	begin("modify_cq_period");
	m.moderate.cq_count = 100;
	m.moderate.cq_period = 50000; /* 50 ms */
	EXPECT(ibv_modify_cq(cq, &m) == 0, "ibv_modify_cq");
	REQUIRE(ibv_req_notify_cq(cq, 0) == 0, "arm");
	t0 = now_ms();
	send_one(&p, 4, 1);
	EXPECT(poll_n(cq, 1, wc, 1000) == 1, "the receive");
	EXPECT(readable(ch, 2000), "no event within 2 s");
	t = now_ms() - t0;
	EXPECT(t >= 45, "the event came after %lld ms, before the 50 ms period", t);
	take_event(ch, cq);
	end();

	begin("modify_cq_off");
	m.moderate.cq_count = 0;
	m.moderate.cq_period = 0;
	EXPECT(ibv_modify_cq(cq, &m) == 0, "ibv_modify_cq");
	REQUIRE(ibv_req_notify_cq(cq, 0) == 0, "arm");
	send_one(&p, 5, 1);
	EXPECT(readable(ch, 1000), "no event without moderation");
	take_event(ch, cq);
	EXPECT(poll_n(cq, 1, wc, 1000) == 1, "the receive");
	end();
	free_pair(&p);
	ibv_destroy_cq(cq);
	ibv_destroy_comp_channel(ch);
}

static void srq_post(struct ibv_srq *srq, struct ibv_mr *mr, uint8_t *buf, uint64_t id, int *r)
{
	struct ibv_sge sge = { (uintptr_t)(buf + 64 * (id % 512)), 64, mr->lkey };
	struct ibv_recv_wr wr, *bad = NULL;

	memset(&wr, 0, sizeof(wr));
	wr.wr_id = id;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	*r = ibv_post_srq_recv(srq, &wr, &bad);
}

static void check_srq_resize(void)
{
	struct ibv_srq_init_attr ia;
	struct ibv_srq_attr a;
	struct ibv_srq *srq;
	struct ibv_cq *cq;
	struct ibv_wc wc[32];
	struct pair p;
	int r, i, n;

	begin("srq_resize");
	EXPECT(dattr.orig_attr.device_cap_flags & IBV_DEVICE_SRQ_RESIZE, "IBV_DEVICE_SRQ_RESIZE not advertised");
	memset(&ia, 0, sizeof(ia));
	ia.attr.max_wr = 4;
	ia.attr.max_sge = 1;
	srq = ibv_create_srq(d.pd, &ia);
	REQUIRE(srq, "ibv_create_srq");
	cq = ibv_create_cq(d.ctx, 64, NULL, NULL, 0);
	REQUIRE(cq, "cq");
	make_pair(&p, cq, srq);
	for (i = 0; i < 4; i++) {
		srq_post(srq, p.bmr, p.bbuf, i, &r);
		REQUIRE(r == 0, "post %d: %d", i, r);
	}
	memset(&a, 0, sizeof(a));
	a.max_wr = 3;
	r = ibv_modify_srq(srq, &a, IBV_SRQ_MAX_WR);
	EXPECT(r == EINVAL, "below the 4 WRs posted: %d, expected EINVAL", r);
	a.max_wr = 0;
	r = ibv_modify_srq(srq, &a, IBV_SRQ_MAX_WR);
	EXPECT(r == EINVAL, "max_wr 0: %d", r);
	a.max_wr = (uint32_t)dattr.orig_attr.max_srq_wr + 1;
	r = ibv_modify_srq(srq, &a, IBV_SRQ_MAX_WR);
	EXPECT(r == EINVAL, "past max_srq_wr: %d", r);
	a.max_wr = 16;
	a.srq_limit = 17;
	r = ibv_modify_srq(srq, &a, IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT);
	EXPECT(r == EINVAL, "limit past the new size: %d", r);
	r = ibv_modify_srq(srq, &a, 1 << 5);
	EXPECT(r == EINVAL, "unknown mask bit: %d", r);
	EXPECT(ibv_query_srq(srq, &a) == 0 && a.max_wr == 4 && a.srq_limit == 0, "unchanged after errors: %u %u",
	       a.max_wr, a.srq_limit);
	a.max_wr = 16;
	a.srq_limit = 2;
	r = ibv_modify_srq(srq, &a, IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT);
	EXPECT(r == 0, "grow to 16 with limit 2: %d", r);
	EXPECT(ibv_query_srq(srq, &a) == 0 && a.max_wr == 16 && a.srq_limit == 2, "query: %u %u", a.max_wr,
	       a.srq_limit);
	a.max_wr = 1;
	r = ibv_modify_srq(srq, &a, IBV_SRQ_MAX_WR);
	EXPECT(r == EINVAL, "below the armed limit: %d", r);
	for (i = 4; i < 16; i++) {
		srq_post(srq, p.bmr, p.bbuf, i, &r);
		EXPECT(r == 0, "post %d after growing: %d", i, r);
	}
	srq_post(srq, p.bmr, p.bbuf, 16, &r);
	EXPECT(r != 0, "a 17th WR fit");
	for (i = 0; i < 16; i++)
		send_one(&p, i, 0);
	n = poll_n(cq, 16, wc, 3000);
	EXPECT(n == 16, "%d receives, expected 16", n);
	for (i = 0; i < n; i++)
		EXPECT_WC(wc[i], i, IBV_WC_SUCCESS, IBV_WC_RECV);
	end();
	free_pair(&p);
	ibv_destroy_srq(srq);
	ibv_destroy_cq(cq);
}

/* READ `len` bytes of B's region `rkey` at `raddr` into A's buffer, on a
 * fresh pair; returns the status. */
static enum ibv_wc_status read_via(struct pair *p, uint64_t raddr, uint32_t rkey, uint32_t len)
{
	struct ibv_sge sge = { (uintptr_t)p->abuf, len, p->amr->lkey };
	struct ibv_send_wr wr, *bad = NULL;
	struct ibv_wc wc;

	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 77;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_RDMA_READ;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	REQUIRE(ibv_post_send(p->a, &wr, &bad) == 0, "post READ");
	REQUIRE(poll_n(p->scq, 1, &wc, 5000) == 1, "READ completion");
	return wc.status;
}

static void check_rereg(void)
{
	uint8_t *m1 = alloc_buf(4096), *m2 = alloc_buf(8192);
	struct ibv_pd *pd2;
	struct ibv_mr *mr;
	struct ibv_mw *mw;
	struct ibv_cq *cq;
	struct pair p;
	uint32_t lkey, rkey;
	int r, flags;

	begin("rereg_mr_input_errors");
	mr = ibv_reg_mr(d.pd, m1, 4096, IBV_ACCESS_LOCAL_WRITE);
	REQUIRE(mr, "ibv_reg_mr");
	lkey = mr->lkey;
	rkey = mr->rkey;
	errno = 0;
	r = ibv_rereg_mr(mr, 1 << 3, NULL, NULL, 0, 0);
	EXPECT(r == IBV_REREG_MR_ERR_INPUT && errno == EINVAL, "unknown flag: %d errno %d", r, errno);
	errno = 0;
	r = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, NULL, 4096, 0);
	EXPECT(r == IBV_REREG_MR_ERR_INPUT && errno == EINVAL, "translation without addr: %d errno %d", r, errno);
	errno = 0;
	r = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, m2, 0, 0);
	EXPECT(r == IBV_REREG_MR_ERR_INPUT && errno == EINVAL, "translation without length: %d errno %d", r, errno);
	errno = 0;
	r = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, d.pd, NULL, 0, IBV_ACCESS_LOCAL_WRITE);
	EXPECT(r == IBV_REREG_MR_ERR_INPUT && errno == EINVAL, "access without CHANGE_ACCESS: %d errno %d", r, errno);
	end();

	begin("rereg_mr_cmd_errors");
	errno = 0;
	r = ibv_rereg_mr(mr, 0, NULL, NULL, 0, 0);
	EXPECT(r == IBV_REREG_MR_ERR_CMD && errno == EINVAL, "no flag: %d errno %d", r, errno);
	errno = 0;
	r = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, NULL, NULL, 0, 0);
	EXPECT(r == IBV_REREG_MR_ERR_CMD && errno == EINVAL, "NULL PD: %d errno %d", r, errno);
	errno = 0;
	r = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, IBV_ACCESS_REMOTE_WRITE);
	EXPECT(r == IBV_REREG_MR_ERR_CMD && errno == EINVAL, "REMOTE_WRITE without LOCAL_WRITE: %d errno %d", r,
	       errno);
	errno = 0;
	r = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_HUGETLB);
	EXPECT(r == IBV_REREG_MR_ERR_CMD && errno == EOPNOTSUPP, "HUGETLB: %d errno %d", r, errno);
	EXPECT(mr->lkey == lkey && mr->rkey == rkey && mr->addr == m1 && mr->length == 4096 && mr->pd == d.pd,
	       "the region changed after errors");
	end();

	/* Every combination of the three flags: the keys stay, each change
	 * lands, and the region works (a READ through it) afterwards. */
	begin("rereg_mr_every_flag_combination");
	pd2 = ibv_alloc_pd(d.ctx);
	REQUIRE(pd2, "second PD");
	cq = ibv_create_cq(d.ctx, 64, NULL, NULL, 0);
	make_pair(&p, cq, NULL);
	for (flags = 1; flags <= 7; flags++) {
		int trans = flags & IBV_REREG_MR_CHANGE_TRANSLATION;
		struct ibv_pd *target = (flags & IBV_REREG_MR_CHANGE_PD) ? (mr->pd == d.pd ? pd2 : d.pd) : mr->pd;
		int access = (flags & IBV_REREG_MR_CHANGE_ACCESS) ? ALL_ACCESS : 0;
		uint8_t *mem = trans ? (mr->addr == m1 ? m2 : m1) : mr->addr;
		size_t len = trans ? (mem == m1 ? 4096 : 8192) : mr->length;

		r = ibv_rereg_mr(mr, flags, (flags & IBV_REREG_MR_CHANGE_PD) ? target : NULL, trans ? mem : NULL,
				 trans ? len : 0, access);
		EXPECT(r == 0, "flags %d: %d errno %d", flags, r, errno);
		EXPECT(mr->lkey == lkey && mr->rkey == rkey, "flags %d: keys %#x/%#x, were %#x/%#x", flags, mr->lkey,
		       mr->rkey, lkey, rkey);
		EXPECT(mr->pd == target && mr->addr == mem && mr->length == len, "flags %d: pd/addr/length", flags);
	}
	/* All three at once into the pair's PD, with remote read, and a READ
	 * through it sees the new memory. */
	r = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD | IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_ACCESS,
			 d.pd, m2, 8192, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
	EXPECT(r == 0, "to the pair's PD: %d", r);
	fill(m2, 8192, 5);
	EXPECT(read_via(&p, (uintptr_t)m2 + 4096, mr->rkey, 4096) == IBV_WC_SUCCESS, "READ through the moved region");
	EXPECT(memcmp(p.abuf, m2 + 4096, 4096) == 0, "the READ returned other bytes");
	/* Access without REMOTE_READ: the peer's READ is refused. */
	r = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, IBV_ACCESS_LOCAL_WRITE);
	EXPECT(r == 0, "drop remote read: %d", r);
	EXPECT(read_via(&p, (uintptr_t)m2, mr->rkey, 64) == IBV_WC_REM_ACCESS_ERR, "READ without REMOTE_READ");
	free_pair(&p);
	ibv_destroy_cq(cq);
	end();

	begin("rereg_mr_busy_with_windows");
	r = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
			 IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_MW_BIND);
	EXPECT(r == 0, "allow MW_BIND: %d", r);
	mw = ibv_alloc_mw(d.pd, IBV_MW_TYPE_1);
	REQUIRE(mw, "ibv_alloc_mw");
	{
		struct ibv_cq *bcq = ibv_create_cq(d.ctx, 16, NULL, NULL, 0);
		struct ibv_qp *qa = make_qp(&d, IBV_QPT_RC, bcq, bcq, NULL, 0);
		struct ibv_qp *qb = make_qp(&d, IBV_QPT_RC, bcq, bcq, NULL, 0);
		struct ibv_mw_bind bind;
		struct ibv_wc wc;

		connect_pair(&d, qa, qb);
		memset(&bind, 0, sizeof(bind));
		bind.wr_id = 9;
		bind.send_flags = IBV_SEND_SIGNALED;
		bind.bind_info.mr = mr;
		bind.bind_info.addr = (uintptr_t)m2;
		bind.bind_info.length = 64;
		bind.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_READ;
		REQUIRE(ibv_bind_mw(qa, mw, &bind) == 0, "ibv_bind_mw");
		REQUIRE(poll_n(bcq, 1, &wc, 3000) == 1 && wc.status == IBV_WC_SUCCESS, "bind completion");
		errno = 0;
		r = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, IBV_ACCESS_LOCAL_WRITE);
		EXPECT(r == IBV_REREG_MR_ERR_CMD && errno == EBUSY, "with a window bound: %d errno %d", r, errno);
		EXPECT(ibv_dealloc_mw(mw) == 0, "ibv_dealloc_mw");
		r = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, IBV_ACCESS_LOCAL_WRITE);
		EXPECT(r == 0, "after the window went: %d", r);
		ibv_destroy_qp(qa);
		ibv_destroy_qp(qb);
		ibv_destroy_cq(bcq);
	}
	EXPECT(ibv_dealloc_pd(pd2) == 0, "pd2 has nothing left");
	EXPECT(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr");
	end();
	free(m1);
	free(m2);
}

int main(void)
{
	watchdog(40);
	open_dev(&d);
	REQUIRE(ibv_query_device_ex(d.ctx, NULL, &dattr) == 0, "ibv_query_device_ex");
	check_create_bounds();
	check_resize_cq();
	check_modify_cq();
	check_srq_resize();
	check_rereg();
	return finish();
}
