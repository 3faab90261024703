/*
 * Completion channels: ibv_req_notify_cq (inline, through ops) arms a CQ;
 * channel->fd becomes readable for poll() and epoll exactly when an armed
 * CQ fires; ibv_get_cq_event / ibv_ack_cq_events; O_NONBLOCK gives EAGAIN;
 * ibv_destroy_cq waits for the acknowledgement of every event it handed out.
 */
#include "common.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/epoll.h>

#define LEN 4096

static struct dev d;
static struct ibv_comp_channel *ch;
static struct ibv_cq *scq, *rcq;
static struct ibv_qp *qa, *qb;
static uint8_t *abuf, *bbuf;
static struct ibv_mr *amr, *bmr;
static int ep;
static int cq_tag;

/* Whether channel->fd is readable within `ms` (poll(2)). */
static int readable(int ms)
{
	struct pollfd p = { ch->fd, POLLIN, 0 };
	int r = poll(&p, 1, ms);

	REQUIRE(r >= 0, "poll: errno %d", errno);
	return r == 1 && (p.revents & POLLIN);
}

/* Whether epoll reports channel->fd readable within `ms`. */
static int epoll_ready(int ms)
{
	struct epoll_event ev;
	int r = epoll_wait(ep, &ev, 1, ms);

	REQUIRE(r >= 0, "epoll_wait: errno %d", errno);
	return r == 1 && (ev.events & EPOLLIN) && ev.data.u64 == 42;
}

/* A SEND from A to B (B's receive CQ is on the channel); waits for its
 * send completion and, if `consume`, for the receive completion too. */
static void send_one(uint64_t id, unsigned flags)
{
	struct ibv_wc wc;
	int r;

	post_recv1(qb, id, bmr, bbuf, 64);
	r = post_send1(qa, id, amr, abuf, 8, flags);
	REQUIRE(r == 0, "ibv_post_send: %d", r);
	REQUIRE(poll_n(scq, 1, &wc, 3000) == 1 && wc.status == IBV_WC_SUCCESS, "SEND %" PRIu64 " failed", id);
}

/* Takes the receive completion of `id` off B's CQ. */
static void take_recv(uint64_t id)
{
	struct ibv_wc wc;
	int n = poll_n(rcq, 1, &wc, 3000);

	EXPECT(n == 1 && wc.wr_id == id && wc.status == IBV_WC_SUCCESS, "receive %" PRIu64 " not found (%d)", id,
	       n);
}

struct destroyer {
	struct ibv_cq *cq;
	volatile int done;
	int ret;
};

static void *destroy_thread(void *arg)
{
	struct destroyer *t = arg;

	t->ret = ibv_destroy_cq(t->cq);
	t->done = 1;
	return NULL;
}

int main(void)
{
	struct epoll_event ev;
	struct ibv_cq *ev_cq;
	void *ev_ctx;
	int flags, r;

	watchdog(30);
	open_dev(&d);
	ch = ibv_create_comp_channel(d.ctx);
	REQUIRE(ch != NULL, "ibv_create_comp_channel: errno %d", errno);
	REQUIRE(ch->context == d.ctx && ch->fd >= 0, "channel fields");
	scq = ibv_create_cq(d.ctx, 16, NULL, NULL, 0);
	rcq = ibv_create_cq(d.ctx, 16, &cq_tag, ch, 0);
	REQUIRE(scq && rcq, "ibv_create_cq: errno %d", errno);
	REQUIRE(rcq->channel == ch && rcq->cq_context == &cq_tag, "cq fields");
	abuf = alloc_buf(LEN);
	bbuf = alloc_buf(LEN);
	amr = ibv_reg_mr(d.pd, abuf, LEN, ALL_ACCESS);
	bmr = ibv_reg_mr(d.pd, bbuf, LEN, ALL_ACCESS);
	REQUIRE(amr && bmr, "ibv_reg_mr: errno %d", errno);
	qa = make_qp(&d, IBV_QPT_RC, scq, scq, NULL, 0);
	qb = make_qp(&d, IBV_QPT_RC, scq, rcq, NULL, 0);
	connect_pair(&d, qa, qb);
	ep = epoll_create1(EPOLL_CLOEXEC);
	REQUIRE(ep >= 0, "epoll_create1");
	memset(&ev, 0, sizeof(ev));
	ev.events = EPOLLIN;
	ev.data.u64 = 42;
	REQUIRE(epoll_ctl(ep, EPOLL_CTL_ADD, ch->fd, &ev) == 0, "epoll_ctl: errno %d", errno);

	begin("channel_idle");
	EXPECT(!readable(0), "a fresh channel's fd is readable");
	EXPECT(!epoll_ready(0), "epoll reports a fresh channel readable");
	end();

	begin("channel_unarmed_no_event");
	send_one(1, 0);
	take_recv(1);
	EXPECT(!readable(50), "a completion on an unarmed CQ made the fd readable");
	EXPECT(!epoll_ready(0), "epoll: a completion on an unarmed CQ made the fd readable");
	end();

	begin("channel_armed_event");
	r = ibv_req_notify_cq(rcq, 0);
	EXPECT(r == 0, "ibv_req_notify_cq: %d", r);
	EXPECT(!readable(20), "arming alone made the fd readable");
	send_one(2, 0);
	EXPECT(readable(3000), "poll: the fd did not become readable");
	EXPECT(epoll_ready(3000), "epoll: the fd did not become readable");
	ev_cq = NULL;
	ev_ctx = NULL;
	r = ibv_get_cq_event(ch, &ev_cq, &ev_ctx);
	EXPECT(r == 0, "ibv_get_cq_event: %d (errno %d)", r, errno);
	EXPECT(ev_cq == rcq, "the event names CQ %p, expected %p", (void *)ev_cq, (void *)rcq);
	EXPECT(ev_ctx == &cq_tag, "the event's cq_context is %p, expected %p", ev_ctx, (void *)&cq_tag);
	EXPECT(!readable(0), "the fd stays readable after the event was taken");
	EXPECT(!epoll_ready(0), "epoll: the fd stays readable after the event was taken");
	ibv_ack_cq_events(rcq, 1);
	take_recv(2);
	end();

	begin("channel_fires_once_per_arm");
	send_one(3, 0);
	take_recv(3);
	EXPECT(!readable(50), "a second completion fired without re-arming");
	end();

	begin("channel_nonblocking_eagain");
	flags = fcntl(ch->fd, F_GETFL);
	REQUIRE(flags >= 0 && fcntl(ch->fd, F_SETFL, flags | O_NONBLOCK) == 0, "fcntl O_NONBLOCK");
	errno = 0;
	ev_cq = NULL;
	r = ibv_get_cq_event(ch, &ev_cq, &ev_ctx);
	EXPECT(r == -1 && errno == EAGAIN, "ibv_get_cq_event with nothing pending: %d, errno %d", r, errno);
	/* Non-blocking, with an event pending: it is returned. */
	r = ibv_req_notify_cq(rcq, 0);
	EXPECT(r == 0, "ibv_req_notify_cq: %d", r);
	send_one(4, 0);
	EXPECT(readable(3000), "the fd did not become readable");
	r = ibv_get_cq_event(ch, &ev_cq, &ev_ctx);
	EXPECT(r == 0 && ev_cq == rcq, "non-blocking ibv_get_cq_event with an event pending: %d, errno %d", r,
	       errno);
	if (r == 0)
		ibv_ack_cq_events(rcq, 1);
	take_recv(4);
	REQUIRE(fcntl(ch->fd, F_SETFL, flags) == 0, "fcntl");
	end();

	begin("channel_solicited_only");
	r = ibv_req_notify_cq(rcq, 1);
	EXPECT(r == 0, "ibv_req_notify_cq(solicited): %d", r);
	send_one(5, 0);
	take_recv(5);
	EXPECT(!readable(50), "an unsolicited completion fired a solicited-only arm");
	send_one(6, IBV_SEND_SOLICITED);
	EXPECT(readable(3000), "a solicited completion did not fire");
	r = ibv_get_cq_event(ch, &ev_cq, &ev_ctx);
	EXPECT(r == 0 && ev_cq == rcq, "ibv_get_cq_event: %d", r);
	if (r == 0)
		ibv_ack_cq_events(rcq, 1);
	take_recv(6);
	end();

	begin("channel_blocking_get_event");
	/* A blocking ibv_get_cq_event wakes up when the armed CQ fires. */
	{
		long long t0;

		r = ibv_req_notify_cq(rcq, 0);
		EXPECT(r == 0, "ibv_req_notify_cq: %d", r);
		send_one(7, 0);
		t0 = now_ms();
		r = ibv_get_cq_event(ch, &ev_cq, &ev_ctx);
		EXPECT(r == 0 && ev_cq == rcq, "ibv_get_cq_event: %d", r);
		EXPECT(now_ms() - t0 < 3000, "ibv_get_cq_event took %lld ms", now_ms() - t0);
		if (r == 0)
			ibv_ack_cq_events(rcq, 1);
		take_recv(7);
	}
	end();

	begin("destroy_cq_busy_with_qp");
	r = ibv_destroy_cq(rcq);
	EXPECT(r == EBUSY, "ibv_destroy_cq of a CQ a QP uses: %d, expected EBUSY", r);
	r = ibv_destroy_comp_channel(ch);
	EXPECT(r == EBUSY, "ibv_destroy_comp_channel with a CQ on it: %d, expected EBUSY", r);
	end();

	begin("destroy_cq_waits_for_ack");
	{
		struct destroyer t = { rcq, 0, -1 };
		pthread_t th;
		int unacked = 0;

		r = ibv_req_notify_cq(rcq, 0);
		EXPECT(r == 0, "ibv_req_notify_cq: %d", r);
		send_one(8, 0);
		r = ibv_get_cq_event(ch, &ev_cq, &ev_ctx);
		EXPECT(r == 0 && ev_cq == rcq, "ibv_get_cq_event: %d", r);
		unacked = r == 0;
		take_recv(8);
		REQUIRE(ibv_destroy_qp(qb) == 0, "ibv_destroy_qp");
		qb = NULL;
		REQUIRE(pthread_create(&th, NULL, destroy_thread, &t) == 0, "pthread_create");
		sleep_ms(200);
		EXPECT(!t.done || !unacked, "ibv_destroy_cq returned (%d) with an event not acknowledged", t.ret);
		ibv_ack_cq_events(rcq, (unsigned)unacked);
		pthread_join(th, NULL);
		EXPECT(t.done && t.ret == 0, "ibv_destroy_cq after the ack: %d", t.ret);
		rcq = NULL;
	}
	end();

	begin("destroy_comp_channel");
	r = ibv_destroy_comp_channel(ch);
	EXPECT(r == 0, "ibv_destroy_comp_channel after its CQ went: %d", r);
	end();

	close(ep);
	REQUIRE(ibv_destroy_qp(qa) == 0, "ibv_destroy_qp");
	REQUIRE(ibv_destroy_cq(scq) == 0, "ibv_destroy_cq");
	REQUIRE(ibv_dereg_mr(amr) == 0 && ibv_dereg_mr(bmr) == 0, "ibv_dereg_mr");
	REQUIRE(ibv_dealloc_pd(d.pd) == 0, "ibv_dealloc_pd");
	REQUIRE(ibv_close_device(d.ctx) == 0, "ibv_close_device");
	return finish();
}
