/*
 * Async events: context->async_fd is a pollable fd that becomes readable
 * when the engine raises an event; ibv_get_async_event returns it with the
 * right element; ibv_ack_async_event. Two events softroce's engine raises:
 * IBV_EVENT_QP_FATAL (a responder QP that NAKed a bad R_Key) and
 * IBV_EVENT_SRQ_LIMIT_REACHED (an armed SRQ limit). Each ibv_open_device
 * has its own async_fd, which carries its own objects' events.
 */
#include "common.h"

#include <fcntl.h>
#include <poll.h>

#define LEN 4096

static struct dev d;

static int async_readable(int ms)
{
	struct pollfd p = { d.ctx->async_fd, POLLIN, 0 };
	int r = poll(&p, 1, ms);

	REQUIRE(r >= 0, "poll: errno %d", errno);
	return r == 1 && (p.revents & POLLIN);
}

/* Takes every pending event (the fd is non-blocking); returns how many. */
static int drain_events(void)
{
	struct ibv_async_event e;
	int n = 0;

	while (ibv_get_async_event(d.ctx, &e) == 0) {
		ibv_ack_async_event(&e);
		n++;
	}
	return n;
}

int main(void)
{
	struct ibv_cq *cq;
	struct ibv_qp *qa, *qb, *qc, *qd;
	struct ibv_srq *srq;
	struct ibv_srq_init_attr sinit;
	struct ibv_srq_attr sattr;
	struct ibv_async_event e;
	struct ibv_mr *amr, *bmr;
	struct ibv_wc wc;
	uint8_t *abuf, *bbuf;
	int flags, i, n, r;

	watchdog(30);
	open_dev(&d);
	cq = ibv_create_cq(d.ctx, 64, NULL, NULL, 0);
	REQUIRE(cq, "ibv_create_cq: errno %d", errno);
	abuf = alloc_buf(LEN);
	bbuf = alloc_buf(LEN);
	amr = ibv_reg_mr(d.pd, abuf, LEN, ALL_ACCESS);
	bmr = ibv_reg_mr(d.pd, bbuf, LEN, ALL_ACCESS);
	REQUIRE(amr && bmr, "ibv_reg_mr: errno %d", errno);

	begin("async_fd_idle");
	EXPECT(d.ctx->async_fd >= 0, "async_fd %d", d.ctx->async_fd);
	EXPECT(!async_readable(0), "async_fd is readable with no event");
	flags = fcntl(d.ctx->async_fd, F_GETFL);
	EXPECT(flags >= 0, "fcntl(async_fd): errno %d", errno);
	end();

	begin("async_nonblocking_eagain");
	REQUIRE(fcntl(d.ctx->async_fd, F_SETFL, flags | O_NONBLOCK) == 0, "fcntl O_NONBLOCK");
	errno = 0;
	r = ibv_get_async_event(d.ctx, &e);
	EXPECT(r == -1 && errno == EAGAIN, "ibv_get_async_event with nothing pending: %d, errno %d", r, errno);
	REQUIRE(fcntl(d.ctx->async_fd, F_SETFL, flags) == 0, "fcntl");
	end();

	begin("async_qp_fatal");
	/* A WRITE with a bad R_Key: the requester completes with
	 * REM_ACCESS_ERR, the responder QP goes to ERR and raises QP_FATAL. */
	qa = make_qp(&d, IBV_QPT_RC, cq, cq, NULL, 0);
	qb = make_qp(&d, IBV_QPT_RC, cq, cq, NULL, 0);
	connect_pair(&d, qa, qb);
	r = post_write_bad_rkey(qa, 1, amr, abuf, bmr, bbuf);
	REQUIRE(r == 0, "ibv_post_send: %d", r);
	n = poll_n(cq, 1, &wc, 3000);
	EXPECT(n == 1 && wc.wr_id == 1 && wc.status == IBV_WC_REM_ACCESS_ERR, "requester: %d completions, status %s",
	       n, n == 1 ? ibv_wc_status_str(wc.status) : "-");
	EXPECT(async_readable(3000), "async_fd did not become readable");
	r = ibv_get_async_event(d.ctx, &e);
	EXPECT(r == 0, "ibv_get_async_event: %d (errno %d)", r, errno);
	if (r == 0) {
		EXPECT(e.event_type == IBV_EVENT_QP_FATAL, "event %s (%d), expected QP_FATAL",
		       ibv_event_type_str(e.event_type), e.event_type);
		EXPECT(e.element.qp == qb, "event names QP %p, expected the responder %p (requester %p)",
		       (void *)e.element.qp, (void *)qb, (void *)qa);
		ibv_ack_async_event(&e);
	}
	/* The responder really is in ERR. */
	{
		struct ibv_qp_attr attr;
		struct ibv_qp_init_attr init;

		r = ibv_query_qp(qb, &attr, IBV_QP_STATE, &init);
		EXPECT(r == 0 && attr.qp_state == IBV_QPS_ERR, "responder state %d", attr.qp_state);
	}
	REQUIRE(fcntl(d.ctx->async_fd, F_SETFL, flags | O_NONBLOCK) == 0, "fcntl O_NONBLOCK");
	n = drain_events();
	EXPECT(n == 0, "%d more events after QP_FATAL", n);
	EXPECT(!async_readable(0), "async_fd still readable after the event was taken");
	REQUIRE(fcntl(d.ctx->async_fd, F_SETFL, flags) == 0, "fcntl");
	end();
	while (poll_n(cq, 1, &wc, 20) == 1)
		;

	begin("async_srq_limit");
	memset(&sinit, 0, sizeof(sinit));
	sinit.attr.max_wr = 16;
	sinit.attr.max_sge = 1;
	srq = ibv_create_srq(d.pd, &sinit);
	REQUIRE(srq, "ibv_create_srq: errno %d", errno);
	qc = make_qp(&d, IBV_QPT_RC, cq, cq, NULL, 0);
	qd = make_qp(&d, IBV_QPT_RC, cq, cq, srq, 0);
	connect_pair(&d, qc, qd);
	for (i = 0; i < 4; i++) {
		struct ibv_sge sge = { (uintptr_t)(bbuf + 256 * i), 256, bmr->lkey };
		struct ibv_recv_wr wr, *bad;

		memset(&wr, 0, sizeof(wr));
		wr.wr_id = 50 + i;
		wr.sg_list = &sge;
		wr.num_sge = 1;
		r = ibv_post_srq_recv(srq, &wr, &bad);
		REQUIRE(r == 0, "ibv_post_srq_recv: %d", r);
	}
	memset(&sattr, 0, sizeof(sattr));
	sattr.srq_limit = 3;
	r = ibv_modify_srq(srq, &sattr, IBV_SRQ_LIMIT);
	EXPECT(r == 0, "ibv_modify_srq(IBV_SRQ_LIMIT): %d", r);
	/* 4 -> 3 WRs: not below the limit yet. */
	r = post_send1(qc, 60, amr, abuf, 8, 0);
	REQUIRE(r == 0, "ibv_post_send: %d", r);
	n = poll_n(cq, 2, &wc, 3000);
	EXPECT(n == 2, "%d completions of the first SEND", n);
	EXPECT(!async_readable(30), "the limit event fired at 3 WRs (limit 3)");
	/* 3 -> 2: below. */
	r = post_send1(qc, 61, amr, abuf, 8, 0);
	REQUIRE(r == 0, "ibv_post_send: %d", r);
	EXPECT(async_readable(3000), "async_fd did not become readable");
	r = ibv_get_async_event(d.ctx, &e);
	EXPECT(r == 0, "ibv_get_async_event: %d (errno %d)", r, errno);
	if (r == 0) {
		EXPECT(e.event_type == IBV_EVENT_SRQ_LIMIT_REACHED, "event %s (%d), expected SRQ_LIMIT_REACHED",
		       ibv_event_type_str(e.event_type), e.event_type);
		EXPECT(e.element.srq == srq, "event names SRQ %p, expected %p", (void *)e.element.srq, (void *)srq);
		ibv_ack_async_event(&e);
	}
	n = poll_n(cq, 2, &wc, 3000);
	EXPECT(n == 2, "%d completions of the second SEND", n);
	end();

	begin("srq_limit_disarmed_after_event");
	/* The event disarms the limit: ibv_query_srq reports 0 (as rxe and the
	 * IB spec: the limit must be armed again). */
	memset(&sattr, 0xff, sizeof(sattr));
	r = ibv_query_srq(srq, &sattr);
	EXPECT(r == 0, "ibv_query_srq: %d", r);
	EXPECT(sattr.srq_limit == 0, "srq_limit %u after the event, expected 0", sattr.srq_limit);
	EXPECT(sattr.max_wr >= 16, "max_wr %u", sattr.max_wr);
	/* And it does not fire again without re-arming. */
	r = post_send1(qc, 62, amr, abuf, 8, 0);
	REQUIRE(r == 0, "ibv_post_send: %d", r);
	n = poll_n(cq, 2, &wc, 3000);
	EXPECT(n == 2, "%d completions of the third SEND", n);
	EXPECT(!async_readable(30), "the limit event fired twice");
	end();

	begin("two_contexts_own_async_fds");
	/* A second ibv_open_device of the same device has an async_fd of its
	 * own, and an event reaches the context its QP was made on only (as
	 * with rdma-core: UCX registers one handler per context's fd). */
	{
		struct dev d2 = d;
		struct ibv_cq *cq2;
		struct ibv_qp *q2a, *q2b;
		struct ibv_mr *mr2;
		struct pollfd p[2];

		d2.ctx = ibv_open_device(d.ctx->device);
		REQUIRE(d2.ctx, "second ibv_open_device: errno %d", errno);
		d2.pd = ibv_alloc_pd(d2.ctx);
		REQUIRE(d2.pd, "ibv_alloc_pd: errno %d", errno);
		EXPECT(d2.ctx->async_fd >= 0 && d2.ctx->async_fd != d.ctx->async_fd, "async_fds %d and %d",
		       d.ctx->async_fd, d2.ctx->async_fd);
		cq2 = ibv_create_cq(d2.ctx, 16, NULL, NULL, 0);
		REQUIRE(cq2, "ibv_create_cq: errno %d", errno);
		mr2 = ibv_reg_mr(d2.pd, abuf, LEN, ALL_ACCESS);
		REQUIRE(mr2, "ibv_reg_mr: errno %d", errno);
		q2a = make_qp(&d2, IBV_QPT_RC, cq2, cq2, NULL, 0);
		q2b = make_qp(&d2, IBV_QPT_RC, cq2, cq2, NULL, 0);
		connect_pair(&d2, q2a, q2b);
		REQUIRE(post_write_bad_rkey(q2a, 2, mr2, abuf, mr2, abuf) == 0, "ibv_post_send");
		n = poll_n(cq2, 1, &wc, 3000);
		EXPECT(n == 1 && wc.status == IBV_WC_REM_ACCESS_ERR, "requester: %d completions", n);
		p[0] = (struct pollfd){ d2.ctx->async_fd, POLLIN, 0 };
		EXPECT(poll(p, 1, 3000) == 1, "the second context's async_fd did not become readable");
		p[1] = (struct pollfd){ d.ctx->async_fd, POLLIN, 0 };
		EXPECT(poll(&p[1], 1, 50) == 0, "the first context's async_fd is readable with the second's event");
		r = ibv_get_async_event(d2.ctx, &e);
		EXPECT(r == 0 && e.event_type == IBV_EVENT_QP_FATAL && e.element.qp == q2b,
		       "second context: %d, event %d, QP %p (expected %p)", r, r == 0 ? (int)e.event_type : -1,
		       r == 0 ? (void *)e.element.qp : NULL, (void *)q2b);
		if (r == 0)
			ibv_ack_async_event(&e);
		REQUIRE(ibv_destroy_qp(q2a) == 0 && ibv_destroy_qp(q2b) == 0, "ibv_destroy_qp");
		REQUIRE(ibv_destroy_cq(cq2) == 0 && ibv_dereg_mr(mr2) == 0, "destroy");
		REQUIRE(ibv_dealloc_pd(d2.pd) == 0, "ibv_dealloc_pd");
		REQUIRE(ibv_close_device(d2.ctx) == 0, "ibv_close_device");
	}
	end();

	REQUIRE(ibv_destroy_qp(qa) == 0 && ibv_destroy_qp(qb) == 0, "ibv_destroy_qp");
	REQUIRE(ibv_destroy_qp(qc) == 0 && ibv_destroy_qp(qd) == 0, "ibv_destroy_qp");
	REQUIRE(ibv_destroy_srq(srq) == 0, "ibv_destroy_srq");
	REQUIRE(ibv_destroy_cq(cq) == 0, "ibv_destroy_cq");
	REQUIRE(ibv_dereg_mr(amr) == 0 && ibv_dereg_mr(bmr) == 0, "ibv_dereg_mr");
	REQUIRE(ibv_dealloc_pd(d.pd) == 0, "ibv_dealloc_pd");
	REQUIRE(ibv_close_device(d.ctx) == 0, "ibv_close_device");
	return finish();
}
