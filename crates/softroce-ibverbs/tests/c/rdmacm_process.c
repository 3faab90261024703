/*
 * What a real program's process expects of a verbs library (issue 31):
 * threads calling verbs at once on one context; epoll on every fd handed
 * out (a completion channel, the async fd, an rdma_cm event channel); a
 * dup'd channel fd; ibv_close_device with objects still open; a child
 * that execs, uses the device and exits without cleaning up, while the
 * parent goes on. Each as with rdma-core on kernel rxe.
 *
 * Run as `rdmacm_process exec-child` it is that child.
 */
#include "common.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <sys/epoll.h>
#include <sys/wait.h>

#define THREADS 4
#define MSGS 300
#define LEN 64

static struct dev d;

/* One thread's RC pair on the shared context, and what it saw. */
struct worker {
	struct ibv_cq *cq;
	struct ibv_qp *a, *b;
	struct ibv_mr *mr;
	uint8_t *buf; /* [0, LEN): send; [LEN, LEN * (MSGS + 1)): receives */
	int seed;
	int received, sent, bad;
};

static void *run_worker(void *arg)
{
	struct worker *w = arg;
	struct ibv_wc wc[16];
	int i, n, posted;

	/* 32 receives ahead (the QPs hold 64), one more per message taken. */
	for (posted = 0; posted < 32; posted++)
		post_recv1(w->b, 1000 + posted, w->mr, w->buf + LEN * (posted + 1), LEN);
	for (i = 0; i < MSGS; i++) {
		fill(w->buf, LEN, w->seed * 1000 + i);
		if (post_send1(w->a, i, w->mr, w->buf, LEN, IBV_SEND_INLINE)) {
			w->bad++;
			break;
		}
		/* One in flight: the next message's bytes are filled after. */
		while (w->sent <= i) {
			n = ibv_poll_cq(w->cq, 16, wc);
			for (int k = 0; k < n; k++) {
				if (wc[k].status != IBV_WC_SUCCESS)
					w->bad++;
				else if (wc[k].opcode == IBV_WC_SEND)
					w->sent++;
				else if (wc[k].opcode == IBV_WC_RECV) {
					w->received++;
					if (posted < MSGS) {
						post_recv1(w->b, 1000 + posted, w->mr, w->buf + LEN * (posted + 1), LEN);
						posted++;
					}
				}
			}
			if (n < 0 || w->bad)
				return NULL;
		}
	}
	for (long long until = now_ms() + 5000; w->received < MSGS && now_ms() < until;) {
		n = ibv_poll_cq(w->cq, 16, wc);
		for (int k = 0; k < n; k++)
			w->received += wc[k].status == IBV_WC_SUCCESS && wc[k].opcode == IBV_WC_RECV;
	}
	return NULL;
}

/* rdma_destroy_id on another thread, and when it returned. */
struct destroyer {
	struct rdma_cm_id *id;
	long long returned_ms;
	int ret;
};

static void *run_destroy(void *arg)
{
	struct destroyer *x = arg;

	x->ret = rdma_destroy_id(x->id);
	x->returned_ms = now_ms();
	return NULL;
}

/* Threads blocked in the three waiting verbs, to be cancelled. */
static struct ibv_comp_channel *cancel_ch;
static struct rdma_event_channel *cancel_cm;
static int entered;

static void *block_in_cq_event(void *arg)
{
	struct ibv_cq *cq;
	void *ctx;

	(void)arg;
	__atomic_add_fetch(&entered, 1, __ATOMIC_SEQ_CST);
	ibv_get_cq_event(cancel_ch, &cq, &ctx);
	return (void *)1;
}

static void *block_in_cm_event(void *arg)
{
	struct rdma_cm_event *ev;

	(void)arg;
	__atomic_add_fetch(&entered, 1, __ATOMIC_SEQ_CST);
	rdma_get_cm_event(cancel_cm, &ev);
	return (void *)1;
}

static void *block_in_async_event(void *arg)
{
	struct ibv_async_event ae;

	(void)arg;
	__atomic_add_fetch(&entered, 1, __ATOMIC_SEQ_CST);
	ibv_get_async_event(d.ctx, &ae);
	return (void *)1;
}

/* The exec'd child: its own device use, left as it is at exit. */
static int exec_child(void)
{
	struct ibv_cq *cq;
	struct ibv_qp *a, *b;
	struct ibv_mr *mr;
	struct ibv_wc wc[2];
	uint8_t *buf = alloc_buf(2 * LEN);

	open_dev(&d);
	cq = ibv_create_cq(d.ctx, 16, NULL, NULL, 0);
	mr = cq ? ibv_reg_mr(d.pd, buf, 2 * LEN, ALL_ACCESS) : NULL;
	if (!mr)
		return 2;
	a = make_qp(&d, IBV_QPT_RC, cq, cq, NULL, 0);
	b = make_qp(&d, IBV_QPT_RC, cq, cq, NULL, 0);
	connect_pair(&d, a, b);
	post_recv1(b, 2, mr, buf + LEN, LEN);
	fill(buf, LEN, 77);
	if (post_send1(a, 1, mr, buf, LEN, 0) || poll_n(cq, 2, wc, 3000) != 2 || memcmp(buf, buf + LEN, LEN))
		return 3;
	/* No destroy, no close: exit() as many programs do. */
	return 0;
}

int main(int argc, char **argv)
{
	struct worker w[THREADS];
	pthread_t t[THREADS];
	struct ibv_comp_channel *ch;
	struct rdma_event_channel *cm;
	struct ibv_cq *cq;
	struct ibv_qp *qa, *qb;
	struct ibv_mr *mr;
	struct ibv_wc wc;
	struct ibv_cq *ev_cq;
	void *ev_ctx;
	uint8_t *buf;
	int i, ep, dupfd, n;

	if (argc > 1 && strcmp(argv[1], "exec-child") == 0)
		return exec_child();
	watchdog(60);
	open_dev(&d);

	begin("threads_share_one_context");
	for (i = 0; i < THREADS; i++) {
		memset(&w[i], 0, sizeof(w[i]));
		w[i].seed = i + 1;
		w[i].buf = alloc_buf(LEN * (MSGS + 1));
		w[i].cq = ibv_create_cq(d.ctx, 2 * MSGS + 8, NULL, NULL, 0);
		REQUIRE(w[i].cq, "ibv_create_cq: errno %d", errno);
		w[i].mr = ibv_reg_mr(d.pd, w[i].buf, LEN * (MSGS + 1), ALL_ACCESS);
		REQUIRE(w[i].mr, "ibv_reg_mr: errno %d", errno);
		w[i].a = make_qp(&d, IBV_QPT_RC, w[i].cq, w[i].cq, NULL, 0);
		w[i].b = make_qp(&d, IBV_QPT_RC, w[i].cq, w[i].cq, NULL, 0);
		connect_pair(&d, w[i].a, w[i].b);
	}
	for (i = 0; i < THREADS; i++)
		REQUIRE(pthread_create(&t[i], NULL, run_worker, &w[i]) == 0, "pthread_create");
	for (i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
	for (i = 0; i < THREADS; i++) {
		uint8_t want[LEN];
		int wrong = 0;

		EXPECT(w[i].bad == 0 && w[i].sent == MSGS && w[i].received == MSGS,
		       "thread %d: %d sent, %d received, %d failed", i, w[i].sent, w[i].received, w[i].bad);
		for (int m = 0; m < MSGS; m++) {
			fill(want, LEN, w[i].seed * 1000 + m);
			wrong += memcmp(want, w[i].buf + LEN * (m + 1), LEN) != 0;
		}
		EXPECT(wrong == 0, "thread %d: %d messages with wrong bytes", i, wrong);
		ibv_destroy_qp(w[i].a);
		ibv_destroy_qp(w[i].b);
		ibv_dereg_mr(w[i].mr);
		ibv_destroy_cq(w[i].cq);
	}
	end();

	begin("epoll_on_every_fd");
	ch = ibv_create_comp_channel(d.ctx);
	cm = rdma_create_event_channel();
	REQUIRE(ch && cm, "channels: errno %d", errno);
	cq = ibv_create_cq(d.ctx, 16, NULL, ch, 0);
	buf = alloc_buf(2 * LEN);
	mr = ibv_reg_mr(d.pd, buf, 2 * LEN, ALL_ACCESS);
	REQUIRE(cq && mr, "cq/mr: errno %d", errno);
	qa = make_qp(&d, IBV_QPT_RC, cq, cq, NULL, 0);
	qb = make_qp(&d, IBV_QPT_RC, cq, cq, NULL, 0);
	connect_pair(&d, qa, qb);
	ep = epoll_create1(EPOLL_CLOEXEC);
	{
		int fds[3] = { ch->fd, d.ctx->async_fd, cm->fd };
		struct epoll_event e;
		struct epoll_event got[4];

		for (i = 0; i < 3; i++) {
			e.events = EPOLLIN;
			e.data.u32 = i;
			EXPECT(epoll_ctl(ep, EPOLL_CTL_ADD, fds[i], &e) == 0, "epoll_ctl(fd %d): errno %d", fds[i], errno);
		}
		EXPECT(epoll_wait(ep, got, 4, 0) == 0, "an fd is ready with nothing pending");
		/* A completion event: the channel, only. */
		REQUIRE(ibv_req_notify_cq(cq, 0) == 0, "ibv_req_notify_cq");
		post_recv1(qb, 2, mr, buf + LEN, LEN);
		REQUIRE(post_send1(qa, 1, mr, buf, LEN, 0) == 0, "post_send");
		n = epoll_wait(ep, got, 4, 3000);
		EXPECT(n == 1 && got[0].data.u32 == 0, "%d ready (first %u), expected the channel", n,
		       n > 0 ? got[0].data.u32 : 99);
		REQUIRE(ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == 0 && ev_cq == cq, "ibv_get_cq_event");
		ibv_ack_cq_events(cq, 1);
		poll_n(cq, 2, &wc, 3000);
		/* An rdma_cm event: the cm channel. */
		{
			struct rdma_cm_id *id;
			struct sockaddr_in dst = { .sin_family = AF_INET };
			struct rdma_cm_event *ev;

			memcpy(&dst.sin_addr, &d.gid.raw[12], 4);
			REQUIRE(rdma_create_id(cm, &id, NULL, RDMA_PS_TCP) == 0, "rdma_create_id");
			REQUIRE(rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000) == 0, "rdma_resolve_addr");
			n = epoll_wait(ep, got, 4, 3000);
			EXPECT(n == 1 && got[0].data.u32 == 2, "%d ready (first %u), expected the cm channel", n,
			       n > 0 ? got[0].data.u32 : 99);
			if (rdma_get_cm_event(cm, &ev) == 0)
				rdma_ack_cm_event(ev);
			rdma_destroy_id(id);
		}
		/* An async event (a WRITE with a bad R_Key: the responder's QP_FATAL): the async fd. */
		{
			struct ibv_async_event ae;

			REQUIRE(post_write_bad_rkey(qa, 0, mr, buf, mr, buf) == 0, "ibv_post_send");
			n = epoll_wait(ep, got, 4, 3000);
			EXPECT(n >= 1 && got[0].data.u32 == 1, "%d ready (first %u), expected the async fd", n,
			       n > 0 ? got[0].data.u32 : 99);
			if (ibv_get_async_event(d.ctx, &ae) == 0)
				ibv_ack_async_event(&ae);
		}
	}
	close(ep);
	end();

	/*
	 * librdmacm's rdma_destroy_id waits until every event it handed out for
	 * the id is acked (a thread handling one reads event->id), and no event
	 * of an id destroyed is handed out after.
	 */
	begin("destroy_id_waits_for_the_ack_of_its_events");
	{
		struct sockaddr_in dst = { .sin_family = AF_INET };
		struct rdma_cm_event *ev = NULL;
		struct destroyer x = { 0 };
		pthread_t th;
		long long acked;

		memcpy(&dst.sin_addr, &d.gid.raw[12], 4);
		REQUIRE(rdma_create_id(cm, &x.id, &x, RDMA_PS_TCP) == 0, "rdma_create_id");
		REQUIRE(rdma_resolve_addr(x.id, NULL, (struct sockaddr *)&dst, 2000) == 0, "rdma_resolve_addr");
		REQUIRE(rdma_get_cm_event(cm, &ev) == 0, "rdma_get_cm_event: errno %d", errno);
		EXPECT(ev->id == x.id && ev->id->context == &x && ev->event == RDMA_CM_EVENT_ADDR_RESOLVED,
		       "event %d for id %p (want ADDR_RESOLVED for %p)", ev->event, (void *)ev->id, (void *)x.id);
		/* A second event queued for the id, never handed out. */
		REQUIRE(rdma_resolve_route(x.id, 2000) == 0, "rdma_resolve_route: errno %d", errno);
		REQUIRE(pthread_create(&th, NULL, run_destroy, &x) == 0, "pthread_create");
		usleep(300 * 1000);
		EXPECT(x.returned_ms == 0, "rdma_destroy_id returned with its event unacked");
		/* The id is still whole while the event is held. */
		EXPECT(ev->id->context == &x, "the id changed under its unacked event");
		acked = now_ms();
		rdma_ack_cm_event(ev);
		pthread_join(th, NULL);
		EXPECT(x.ret == 0 && x.returned_ms >= acked, "rdma_destroy_id: %d, returned %lld ms after the ack",
		       x.ret, x.returned_ms - acked);
		{
			int fl = fcntl(cm->fd, F_GETFL);

			fcntl(cm->fd, F_SETFL, fl | O_NONBLOCK);
			n = rdma_get_cm_event(cm, &ev);
			EXPECT(n == -1 && errno == EAGAIN, "an event of the destroyed id was handed out (%d, errno %d)", n,
			       errno);
			fcntl(cm->fd, F_SETFL, fl);
		}
	}
	end();

	/*
	 * pthread_cancel of a thread blocked in ibv_get_cq_event,
	 * rdma_get_cm_event or ibv_get_async_event ends it at once, as it ends
	 * rdma-core's read() there (rping cancels its CQ thread when an accept
	 * fails); the process goes on.
	 */
	begin("a_thread_waiting_in_a_verb_can_be_cancelled");
	{
		void *(*fns[3])(void *) = { block_in_cq_event, block_in_cm_event, block_in_async_event };
		pthread_t th[3];
		long long t0;

		cancel_ch = ibv_create_comp_channel(d.ctx);
		cancel_cm = rdma_create_event_channel();
		REQUIRE(cancel_ch && cancel_cm, "channels: errno %d", errno);
		for (i = 0; i < 3; i++)
			REQUIRE(pthread_create(&th[i], NULL, fns[i], NULL) == 0, "pthread_create");
		while (__atomic_load_n(&entered, __ATOMIC_SEQ_CST) < 3)
			usleep(1000);
		usleep(200 * 1000);
		t0 = now_ms();
		for (i = 0; i < 3; i++) {
			void *ret = NULL;

			EXPECT(pthread_cancel(th[i]) == 0, "pthread_cancel %d", i);
			EXPECT(pthread_join(th[i], &ret) == 0 && ret == PTHREAD_CANCELED,
			       "thread %d (%s) was not cancelled: it returned %p", i,
			       i == 0 ? "ibv_get_cq_event" : i == 1 ? "rdma_get_cm_event" : "ibv_get_async_event", ret);
		}
		EXPECT(now_ms() - t0 < 2000, "the cancellations took %lld ms", now_ms() - t0);
		/* The objects the threads waited on are whole. */
		EXPECT(ibv_destroy_comp_channel(cancel_ch) == 0, "ibv_destroy_comp_channel: errno %d", errno);
		rdma_destroy_event_channel(cancel_cm);
	}
	end();

	begin("dup_channel_fd");
	{
		struct ibv_qp *qc = make_qp(&d, IBV_QPT_RC, cq, cq, NULL, 0);
		struct ibv_qp *qd = make_qp(&d, IBV_QPT_RC, cq, cq, NULL, 0);
		struct pollfd p;

		while (poll_n(cq, 1, &wc, 50) == 1)
			;
		connect_pair(&d, qc, qd);
		dupfd = fcntl(ch->fd, F_DUPFD_CLOEXEC, 100);
		EXPECT(dupfd >= 100, "dup: errno %d", errno);
		REQUIRE(ibv_req_notify_cq(cq, 0) == 0, "ibv_req_notify_cq");
		post_recv1(qd, 4, mr, buf + LEN, LEN);
		REQUIRE(post_send1(qc, 3, mr, buf, LEN, 0) == 0, "post_send");
		p = (struct pollfd){ dupfd, POLLIN, 0 };
		EXPECT(poll(&p, 1, 3000) == 1, "the dup'd fd did not become readable");
		EXPECT(ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == 0 && ev_cq == cq, "ibv_get_cq_event");
		ibv_ack_cq_events(cq, 1);
		p = (struct pollfd){ dupfd, POLLIN, 0 };
		EXPECT(poll(&p, 1, 0) == 0, "the dup'd fd stays readable after the event was taken");
		close(dupfd);
		poll_n(cq, 2, &wc, 3000);
		ibv_destroy_qp(qc);
		ibv_destroy_qp(qd);
	}
	end();

	begin("exec_child_exits_without_cleanup");
	{
		pid_t pid = fork();
		int status = -1;

		REQUIRE(pid >= 0, "fork");
		if (pid == 0) {
			execl("/proc/self/exe", argv[0], "exec-child", (char *)NULL);
			_exit(127);
		}
		waitpid(pid, &status, 0);
		EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the exec'd child: status %#x", status);
		/* The parent's device goes on. */
		fill(buf, LEN, 5);
		/* qa went to ERR with the bad R_Key above: a fresh pair. */
		{
			struct ibv_qp *x = make_qp(&d, IBV_QPT_RC, cq, cq, NULL, 0);
			struct ibv_qp *y = make_qp(&d, IBV_QPT_RC, cq, cq, NULL, 0);

			while (poll_n(cq, 1, &wc, 50) == 1)
				;
			connect_pair(&d, x, y);
			post_recv1(y, 8, mr, buf + LEN, LEN);
			REQUIRE(post_send1(x, 7, mr, buf, LEN, 0) == 0, "post_send");
			n = 0;
			for (int k = 0; k < 2 && poll_n(cq, 1, &wc, 3000) == 1; k++)
				n += wc.status == IBV_WC_SUCCESS;
			EXPECT(n == 2, "%d of 2 completions after the child", n);
			EXPECT(memcmp(buf, buf + LEN, LEN) == 0, "wrong bytes after the child");
			ibv_destroy_qp(x);
			ibv_destroy_qp(y);
		}
	}
	end();

	begin("close_device_with_objects_open");
	{
		struct dev d2 = d;
		struct ibv_cq *c2;

		d2.ctx = ibv_open_device(d.ctx->device);
		REQUIRE(d2.ctx, "ibv_open_device: errno %d", errno);
		d2.pd = ibv_alloc_pd(d2.ctx);
		c2 = d2.pd ? ibv_create_cq(d2.ctx, 8, NULL, NULL, 0) : NULL;
		REQUIRE(c2 && make_qp(&d2, IBV_QPT_RC, c2, c2, NULL, 0), "objects: errno %d", errno);
		/* rdma-core closes the command fd and the kernel frees the rest. */
		EXPECT(ibv_close_device(d2.ctx) == 0, "ibv_close_device with a QP, CQ and PD open: errno %d", errno);
		d2.ctx = ibv_open_device(d.ctx->device);
		EXPECT(d2.ctx != NULL, "reopening: errno %d", errno);
		if (d2.ctx)
			EXPECT(ibv_close_device(d2.ctx) == 0, "ibv_close_device");
	}
	end();

	ibv_destroy_qp(qa);
	ibv_destroy_qp(qb);
	ibv_destroy_cq(cq);
	ibv_destroy_comp_channel(ch);
	rdma_destroy_event_channel(cm);
	ibv_dereg_mr(mr);
	return finish();
}
